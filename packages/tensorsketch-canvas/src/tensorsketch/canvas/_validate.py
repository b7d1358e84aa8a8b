"""Write-back, before anything is planned: refuse an IR that no source file could say.

Node names must be unique and not reserved, ``added`` must name real nodes, and every edge must
be complete for its kind (a loop is a ``repeat`` edge directly followed by its ``exit`` edge).
Checking here means the planner and renderers can assume a well-formed IR.
"""

from __future__ import annotations

from tensorsketch.canvas.exceptions import IRError
from tensorsketch.canvas.ir import END, LOOP_EXIT, LOOP_REPEAT, START, EdgeIR, GraphIR

__all__ = ["validate"]


def validate(ir: GraphIR) -> None:
    """Raise :class:`IRError` naming the first inconsistency in ``ir``."""
    _check_names(ir)
    edges = ir.edges
    index = 0
    while index < len(edges):
        index += _check_edge(edges, index)


def _check_names(ir: GraphIR) -> None:
    names = [node.name for node in ir.nodes]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        msg = (
            f"graph {ir.name!r} has several nodes named {duplicates[0]!r}; node names must be "
            "unique — rename one of them."
        )
        raise IRError(msg)
    for name in names:
        if name in (START, END):
            msg = f"a node cannot be named {name!r}: that name is reserved for START/END."
            raise IRError(msg)
    for name in ir.added:
        if name not in names:
            msg = (
                f"graph.added lists {name!r}, but no node of that name is in graph.nodes; "
                "append the NodeIR as well as its name."
            )
            raise IRError(msg)


def _check_edge(edges: list[EdgeIR], index: int) -> int:
    """Check the element at ``index``; how many edges it spans (a loop is two)."""
    edge = edges[index]
    where = f"edges[{index}]"
    if edge.kind == "custom":
        if not edge.code:
            msg = f"{where} is a custom element without code; keep the `code` it was read with."
            raise IRError(msg)
    elif edge.kind == "join":
        _check_join(edge, where)
    elif edge.kind == "command":
        msg = (
            f"{where} is a command edge; those are read from the class's `destinations` and "
            "listed in graph.commands, not in the wiring — edit the class to change them."
        )
        raise IRError(msg)
    elif edge.kind in ("map", "parallel"):
        _check_fanout(edge, where)
    elif edge.source is None:
        msg = f"{where} ({edge.kind}) needs a source node."
        raise IRError(msg)
    elif edge.kind == "sequential":
        if edge.target is None:
            msg = f"{where}: a sequential edge from {edge.source!r} needs a target."
            raise IRError(msg)
    elif edge.kind == "dynamic":
        if not edge.path or edge.target is not None:
            msg = (
                f"{where}: a dynamic edge from {edge.source!r} needs the routing function in "
                "`path` and no target (its targets are decided at run time)."
            )
            raise IRError(msg)
    elif edge.branch == "loop":
        _check_loop(edges, index)
        return 2
    elif edge.target is None or edge.label is None or not edge.path:
        msg = (
            f"{where}: a conditional edge from {edge.source!r} needs a target, the mapping "
            "key in `label` and the routing function in `path`."
        )
        raise IRError(msg)
    return 1


def _check_join(edge: EdgeIR, where: str) -> None:
    sources = edge.sources or []
    if edge.source is not None:
        msg = f"{where}: a join has no single `source`; list its nodes in `sources` instead."
        raise IRError(msg)
    if len(sources) < 2:
        msg = (
            f"{where}: a join needs two or more nodes in `sources` (got {sources!r}); one "
            "source is a sequential edge."
        )
        raise IRError(msg)
    if START in sources or END in sources:
        msg = f"{where}: a join waits for nodes that run; START and END cannot be in `sources`."
        raise IRError(msg)
    if len(set(sources)) != len(sources):
        msg = f"{where}: a join lists each source once, got {sources!r}."
        raise IRError(msg)
    if edge.target is None or edge.target in (START, END):
        msg = f"{where}: a join from {sources!r} needs a node as its target (not START or END)."
        raise IRError(msg)


def _check_fanout(edge: EdgeIR, where: str) -> None:
    """A ``map`` or ``parallel``: a source, its nodes, and an optional node to continue to."""
    if edge.source is None or edge.source == END:
        msg = f"{where}: a {edge.kind} needs the node it starts after in `source` (or START)."
        raise IRError(msg)
    if edge.then == START:
        msg = f"{where}: a {edge.kind}'s `then` is a node or END, not START."
        raise IRError(msg)
    if edge.kind == "map":
        if edge.target is None or edge.target in (START, END) or not edge.path or not edge.label:
            msg = (
                f"{where}: a map from {edge.source!r} needs the node to run in `target`, the "
                "list field in `path` (over=) and the node's port in `label` (item=)."
            )
            raise IRError(msg)
        return
    sources = edge.sources or []
    if (
        edge.target is not None
        or len(sources) < 2
        or len(set(sources)) != len(sources)
        or START in sources
        or END in sources
    ):
        msg = (
            f"{where}: a parallel from {edge.source!r} lists two or more distinct nodes in "
            f"`sources` (got {sources!r}) and no `target` (where it continues is `then`)."
        )
        raise IRError(msg)


def _check_loop(edges: list[EdgeIR], index: int) -> None:
    edge = edges[index]
    where = f"edges[{index}]"
    nxt = edges[index + 1] if index + 1 < len(edges) else None
    if not (
        edge.label == LOOP_REPEAT
        and edge.target == edge.source
        and nxt is not None
        and nxt.branch == "loop"
        and nxt.label == LOOP_EXIT
        and nxt.source == edge.source
        and nxt.path == edge.path
        and nxt.target is not None
    ):
        msg = (
            f"{where}: the loop on {edge.source!r} needs its {LOOP_REPEAT!r} edge back to "
            f"the node followed directly by its {LOOP_EXIT!r} edge; add or remove both "
            "together."
        )
        raise IRError(msg)
    if not edge.path:
        msg = f"{where}: the loop on {edge.source!r} needs its `until` predicate in `path`."
        raise IRError(msg)
