"""``Command``: a node's writes together with where the run goes next.

A node whose class declares ``destinations`` may return ``Command(goto=..., update=...)``
instead of its ``Out``: the update is written like an ``Out``, and the next superstep also
runs the ``goto`` targets (node names, ``END`` or ``Send``\\ s), each of which must be one of
the declared destinations — so ``compile()`` checks them and the canvas draws them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from tensorsketch.send import Send

__all__ = ["GOTO_KEY", "Command"]

#: The key a task's goto travels under among its writes (no state field can be named so),
#: so a journaled task's routing comes back with its writes after a crash.
GOTO_KEY: Final = "__goto__"


@dataclass(frozen=True, slots=True)
class Command:
    """Writes plus routing, returned by a node with ``destinations``.

    :param goto: a destination, ``Send(destination, payload)``, or a list of them; ``None``
        routes as the node's edges say.
    :param update: the writes: an instance of the node's ``Out``, or a dict of its fields.
    """

    goto: str | Send | Sequence[str | Send] | None = None
    update: Any = None

    def targets(self) -> list[str | Send]:
        """``goto`` as a list."""
        goto = self.goto
        if goto is None:
            return []
        if isinstance(goto, str | Send):
            return [goto]
        if isinstance(goto, Sequence):
            return list(goto)
        msg = f"Command(goto=...) takes a node name, a Send or a list of them, got {goto!r}."
        raise TypeError(msg)
