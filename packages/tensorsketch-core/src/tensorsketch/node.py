"""``Node``: a typed interface (``In`` / ``Out`` schemas) around an opaque async body."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, ClassVar

from tensorsketch.context import Context
from tensorsketch.schema import Schema

__all__ = ["Node"]


class _NoInput(Schema):
    """The ``In`` of a node that reads nothing."""


class _NoOutput(Schema):
    """The ``Out`` of a node that writes nothing."""


class Node:
    """A unit of work in a graph.

    ``In`` names the state fields the node reads, ``Out`` the fields it writes; both are
    checked against the state at ``compile()``. ``run`` is opaque: TensorSketch never looks
    inside it, so it can call models, tools or anything else that is async.

    A node writes the ``Out`` fields that were set when it was built
    (``self.Out(answer=...)``); fields left at their default are not written. Returning
    ``None`` writes nothing; a plain ``dict`` is validated against ``Out`` first.
    """

    In: ClassVar[type[Schema]] = _NoInput
    Out: ClassVar[type[Schema]] = _NoOutput
    #: Where ``run`` may send the run by returning ``Command(goto=...)`` (node names or
    #: ``END``): checked at ``compile()``, drawn on the canvas, enforced at run time.
    destinations: ClassVar[tuple[str, ...]] = ()

    async def run(self, ctx: Context, inp: Any) -> Any:
        """The node body. Override it; read ``inp``, return ``self.Out(...)``."""
        msg = f"{type(self).__name__} must define `async def run(self, ctx, inp)`."
        raise NotImplementedError(msg)

    def default_name(self) -> str:
        """The name a graph gives this node when ``add`` is not told one."""
        return type(self).__name__

    def bind(self, state: type[Schema], name: str, problems: list[str]) -> Node:
        """The node ``compile()`` runs in a graph over ``state`` (this one, unless its ports
        depend on the state, like a subgraph's); mistakes go to ``problems``."""
        return self

    def optional_outputs(self) -> Collection[str]:
        """``Out`` fields written only when the state declares them; ``compile()`` requires
        every other ``Out`` field to be a state field. For a node whose outputs are extras a
        state may or may not keep (an agent's ``parsed``)."""
        return ()

    def port_hint(self, port: str, state_fields: Collection[str]) -> str | None:
        """How to fix a port the state has no field for, when the node's own options choose
        its ports (an agent's ``input_key=`` or ``report=``): ``compile()`` puts it in the
        error instead of suggesting to rename the port. ``None``: the usual advice."""
        return None
