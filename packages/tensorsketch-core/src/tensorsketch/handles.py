"""The ``>>`` wiring surface: node handles and ``Router``; sugar over the ``Graph`` builder."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, overload

from tensorsketch.constants import END, START

if TYPE_CHECKING:
    from tensorsketch.graph import Graph

__all__ = ["NodeHandle", "Router"]


class Router:
    """``a >> Router(path, billing=billing, tech=tech)``: a conditional edge out of ``a``.

    ``path(state)`` returns one of the keyword keys (or a list of them, or ``END``); each key
    maps to a node handle, a node name, or ``END``.
    """

    __slots__ = ("mapping", "path")

    def __init__(self, path: Callable[[Any], Any], /, **targets: NodeHandle | str) -> None:
        if not callable(path):
            msg = f"Router(path, ...) needs a callable path function first, got {path!r}."
            raise TypeError(msg)
        self.path = path
        self.mapping: dict[str, str] | None = (
            {key: _target_name(value) for key, value in targets.items()} if targets else None
        )

    def __repr__(self) -> str:
        name = getattr(self.path, "__name__", "path")
        return f"Router({name}, mapping={self.mapping!r})"


def _target_name(value: NodeHandle | str) -> str:
    if isinstance(value, NodeHandle):
        return value.name
    if isinstance(value, str):
        return value
    msg = f"a Router target must be a node handle, a node name or END, got {value!r}."
    raise TypeError(msg)


class NodeHandle:
    """A reference to a node of one graph; ``>>`` between handles adds edges.

    ``a >> [b, c]`` fans out (two edges); ``[b, c] >> d`` is a wait-for-all join: ``d`` runs
    once after both ``b`` and ``c`` have run (``edge(["B", "C"], "D")``).
    """

    __slots__ = ("graph", "name")

    def __init__(self, graph: Graph[Any], name: str) -> None:
        self.graph = graph
        self.name = name

    @overload
    def __rshift__(self, other: NodeHandle) -> NodeHandle: ...
    @overload
    def __rshift__(self, other: Sequence[NodeHandle]) -> list[NodeHandle]: ...
    @overload
    def __rshift__(self, other: Router) -> Router: ...
    @overload
    def __rshift__(self, other: str) -> str: ...

    def __rshift__(self, other: Any) -> Any:
        if isinstance(other, NodeHandle):
            self._same_graph(other)
            self.graph.edge(self.name, other.name)
            return other
        if isinstance(other, Router):
            self.graph.conditional(self.name, other.path, other.mapping)
            return other
        if isinstance(other, str):
            if other == START:
                msg = f"`{self.name} >> START` is not allowed: START can only be a source."
                raise TypeError(msg)
            self.graph.edge(self.name, other)
            return other
        if isinstance(other, list | tuple):
            handles = [self._coerce(item) for item in other]
            for handle in handles:
                self.graph.edge(self.name, handle.name)
            return handles
        return NotImplemented

    def __rrshift__(self, other: Any) -> NodeHandle:
        if isinstance(other, str):
            if other == END:
                msg = f"`END >> {self.name}` is not allowed: END can only be a target."
                raise TypeError(msg)
            self.graph.edge(other, self.name)
            return self
        if isinstance(other, list | tuple):
            # ``[a, b] >> c``: a wait-for-all join, the same as ``edge(["A", "B"], "C")``.
            self.graph.edge([self._coerce(item).name for item in other], self.name)
            return self
        return NotImplemented

    def _coerce(self, item: Any) -> NodeHandle:
        if isinstance(item, NodeHandle):
            self._same_graph(item)
            return item
        msg = f"`>>` with a list needs node handles (from `g.nodes(...)`), got {item!r}."
        raise TypeError(msg)

    def _same_graph(self, other: NodeHandle) -> None:
        if other.graph is not self.graph:
            msg = (
                f"cannot wire {self.name!r} to {other.name!r}: the handles come from two "
                "different Graph builders."
            )
            raise ValueError(msg)

    def __repr__(self) -> str:
        return f"NodeHandle({self.name!r})"
