"""``Command``: a node's writes together with where the run goes next.

A node whose class declares ``destinations`` may return ``Command(goto=..., update=...)``
instead of its ``Out``: the update is written like an ``Out``, and the next superstep also
runs the ``goto`` targets (node names, ``END`` or ``Send``\\ s), each of which must be one of
the declared destinations — so ``compile()`` checks them and the canvas draws them.

A node inside a subgraph may hand the run back to the graph that runs it:
``Command(graph=Command.PARENT, goto=..., update=...)`` stops the child there, writes the
update through the *parent's* reducers (any parent field, not only the shared ones), and
routes the parent from the subgraph node, whose ``add(child, destinations=...)`` declares
where it may go. It travels up as :class:`ParentCommand`, which the node running the child
(a subgraph node, or a node calling ``run_subgraph``) turns into its own ``Command``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from tensorsketch.errors import NodeError
from tensorsketch.schema import Schema
from tensorsketch.send import Send, send_payload

__all__ = ["GOTO_KEY", "Command", "ParentCommand"]

#: The key a task's goto travels under among its writes (no state field can be named so),
#: so a journaled task's routing comes back with its writes after a crash.
GOTO_KEY: Final = "__goto__"


@dataclass(frozen=True, slots=True)
class Command:
    """Writes plus routing, returned by a node with ``destinations``.

    :param goto: a destination, ``Send(destination, payload)``, or a list of them; ``None``
        routes as the node's edges say.
    :param update: the writes: an instance of the node's ``Out``, or a dict of its fields
        (with ``graph=Command.PARENT``: a dict of the parent state's fields).
    :param graph: ``None`` (this graph) or ``Command.PARENT``: the graph running this one as
        a subgraph node, which the ``goto`` and ``update`` are then addressed to.
    """

    #: ``graph=Command.PARENT``: address the graph this one runs inside.
    PARENT: ClassVar[str] = "__parent__"

    goto: str | Send | Sequence[str | Send] | None = None
    update: Any = None
    graph: str | None = None

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


class ParentCommand(Exception):
    """A ``Command(graph=Command.PARENT)`` on its way up: it stops the child run it was
    returned in and becomes the ``Command`` of the parent's node that runs the child.

    Kept as plain data (how the parent's journal stores it, so a resumed parent does not
    enter the child again): ``node`` returned it, ``update`` is a dict of parent fields,
    ``goto`` a list of ``[destination, payload or None]``.
    """

    def __init__(self, node: str, update: dict[str, Any], goto: list[list[Any]]) -> None:
        super().__init__(node, update, goto)
        self.node = node
        self.update = update
        self.goto = goto

    @classmethod
    def of(cls, node: str, command: Command) -> ParentCommand:
        """The hand-back of ``command``, returned by ``node``."""
        update = command.update
        if update is None:
            fields: dict[str, Any] = {}
        elif isinstance(update, Schema):
            fields = {k: getattr(update, k) for k in update.model_fields_set}
        elif isinstance(update, Mapping):
            fields = dict(update)
        else:
            msg = (
                f"node {node!r} returned Command(graph=Command.PARENT, update={update!r:.80}); "
                "the update of a Command to the parent graph is a dict of the parent "
                "state's fields."
            )
            raise NodeError(msg)
        goto: list[list[Any]] = []
        for target in command.targets():
            if isinstance(target, Send):
                goto.append([target.node, send_payload(target)])
            elif isinstance(target, str):
                goto.append([target, None])
            else:
                msg = (
                    f"node {node!r} returned Command(graph=Command.PARENT, goto={target!r}); "
                    "goto takes node names of the parent graph, END or Send(...) objects."
                )
                raise NodeError(msg)
        return cls(node, fields, goto)

    def plain(self) -> dict[str, Any]:
        """As journaled values."""
        return {"node": self.node, "update": self.update, "goto": self.goto}

    @classmethod
    def from_plain(cls, data: Mapping[str, Any]) -> ParentCommand:
        return cls(str(data["node"]), dict(data["update"]), [list(t) for t in data["goto"]])

    def targets(self) -> list[str | Send]:
        """``goto`` as ``Command`` targets again."""
        return [name if payload is None else Send(name, payload) for name, payload in self.goto]
