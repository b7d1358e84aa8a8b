"""``GraphStructure``: the static shape of a graph, as plain data (for tools and the canvas)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["BranchInfo", "GraphStructure"]


@dataclass(frozen=True, slots=True)
class BranchInfo:
    """A conditional edge out of one node.

    ``mapping`` is ``None`` when the path function returns node names (or ``Send``s) directly,
    so its targets are only known at run time.
    """

    kind: Literal["conditional", "router", "loop", "map"]
    mapping: dict[str, str] | None
    path_name: str
    exit: str | None = None


@dataclass(frozen=True, slots=True)
class GraphStructure:
    """Nodes in the order they were added, static edges in declaration order, branches, and
    wait-for-all joins as ``(sources, target)`` in declaration order (``edge(["A", "B"], "C")``
    is ``(("A", "B"), "C")``; a join is not also listed in ``edges``).

    ``deferred`` and ``cached`` name the nodes added with ``defer=True`` and ``cache=...``
    (in ``nodes`` order); ``destinations`` maps each node whose class declares
    ``destinations`` to them, as the canvas draws its ``Command`` edges."""

    nodes: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]
    branches: dict[str, BranchInfo] = field(default_factory=dict)
    joins: tuple[tuple[tuple[str, ...], str], ...] = ()
    deferred: tuple[str, ...] = ()
    cached: tuple[str, ...] = ()
    destinations: dict[str, tuple[str, ...]] = field(default_factory=dict)
