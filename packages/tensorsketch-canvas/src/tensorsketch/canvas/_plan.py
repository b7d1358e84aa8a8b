"""Write-back phase 1: plan the new wiring from the IR, reusing old items wherever possible.

An old item is reused when the IR still says exactly what it says, at that point in the
order; reused items keep their text byte-for-byte later. What is left is grouped into new
items the way the file's style would write them (one ``nodes(...)`` call for runs of
operator-style nodes, one ``conditional`` per routing map, one ``>>`` chain per path).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace

from tensorsketch.canvas._class_edits import class_key
from tensorsketch.canvas._render import Fresh, snake_name
from tensorsketch.canvas._wiring import GraphModel, Item, ItemKind, NodeDecl, edge_key
from tensorsketch.canvas.ir import END, START, EdgeIR, GraphIR, NodeIR, Style

__all__ = ["assign_handles", "plan_edges", "plan_nodes"]

_IDENT = re.compile(r"[A-Za-z_]\w*")


def plan_nodes(nodes: list[NodeIR], old: list[Item], style: Style) -> list[Fresh]:
    """The node declarations the file will hold, in the IR's order."""
    wanted = [_key(n) for n in nodes]
    by_name = {n.name: n for n in nodes}
    index: dict[_Key, list[Item]] = {}
    for item in old:
        index.setdefault(_key(item.nodes[0]), []).append(item)
    # the name each subgraph the file adds without `name=` takes from its graph
    derived = {d.cls: d.derived_name for item in old for d in item.nodes if d.derived_name}
    mappings = {d.cls: d.mappings for item in old for d in item.nodes if d.mappings}
    # a node the file adds with `add(...)` stays an `add(...)` when re-declared (in a >> file
    # its `h = g["Name"]` line stays right)
    added = {d.name for item in old if item.kind == "add" for d in item.nodes}
    used: set[int] = set()
    plan: list[Fresh] = []
    i = 0
    while i < len(wanted):
        match = None
        for item in index.get(wanted[i], []):
            size = len(item.nodes)
            if id(item) not in used and [_key(n) for n in item.nodes] == wanted[i : i + size]:
                match = item
                break
        if match is not None:
            used.add(id(match))
            plan.append(
                Fresh(match.kind, list(match.nodes), origin=match, handles=dict(match.handles))
            )
            i += len(match.nodes)
            continue
        name, cls, defer, destinations = wanted[i]
        node = by_name[name]
        # A re-declared node (a rename, a new defer) keeps its add(..., retry=..., timeout=...,
        # cache=...) as written.
        decl = NodeDecl(
            name=name,
            cls=cls,
            class_key=class_key(cls),
            retry=node.retry,
            timeout=node.timeout,
            cache=node.cache,
            defer=defer,
            destinations=None if destinations is None else list(destinations),
            derived_name=derived.get(cls),
            named=node.subgraph is not None,  # a graph's own name is not known here
            mappings=mappings.get(cls, ()),
        )
        _declare(plan, decl, style, keep_add=name in added)
        i += 1
    return plan


_Key = tuple[str, str, bool, tuple[str, ...] | None]


def _key(node: NodeIR | NodeDecl) -> _Key:
    """What a node declaration says that the canvas edits: an old item is reused only when
    the IR still says all of it (a new defer or destination re-declares the node)."""
    ends = None if node.destinations is None else tuple(node.destinations)
    return (node.name, node.cls, node.defer, ends)


def _declare(plan: list[Fresh], decl: NodeDecl, style: Style, *, keep_add: bool = False) -> None:
    """Append a new node: operator style joins it to a preceding new ``nodes(...)`` item (a
    node named otherwise than its class as a ``("Name", Class)`` entry)."""
    operator = style == "operator"
    previous = plan[-1] if plan else None
    plain = (
        not keep_add
        and ((decl.name == decl.class_key and not decl.named) or operator)
        and decl.retry is None
        and decl.timeout is None
        and decl.cache is None
        and not decl.defer
        and decl.destinations is None
        and not decl.mappings
    )
    if (
        operator
        and plain
        and previous is not None
        and previous.origin is None
        and previous.kind == "nodes"
    ):
        previous.nodes.append(decl)
    else:
        kind: ItemKind = "nodes" if operator and plain else "add"
        plan.append(Fresh(kind, [decl]))


def assign_handles(
    plan: list[Fresh],
    target: GraphIR,
    model: GraphModel,
    text: str,
    renames: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Operator style: the handle variable of every node (node name -> variable).

    Existing handles are kept; a new node reuses its old variable if that is free (a renamed
    node its old name's, so the ``>>`` lines that use it stay as written), or gets a fresh
    snake_case name that no identifier in ``text`` uses. New items record their handles.
    """
    if model.style != "operator":
        return {}
    names = {n.name for n in target.nodes}
    handles: dict[str, str] = {}
    taken: set[str] = set()
    for item in plan:
        if item.origin is not None:
            for var, name in item.handles.items():
                handles.setdefault(name, var)
                taken.add(var)
    for old in model.items:
        if old.kind == "handle":
            for var, name in old.handles.items():
                if name in names:
                    handles.setdefault(name, var)
                    taken.add(var)
    old_vars = {name: var for var, name in model.handles.items()}
    for was, now in (renames or {}).items():
        if was in old_vars and now not in old_vars:
            old_vars[now] = old_vars[was]
    identifiers = set(_IDENT.findall(text))
    for item in plan:
        if item.origin is None:
            _new_handles(item, handles, taken, old_vars, identifiers)
    return handles


def _new_handles(
    item: Fresh,
    handles: dict[str, str],
    taken: set[str],
    old_vars: Mapping[str, str],
    identifiers: set[str],
) -> None:
    """Handles for a new item's nodes: a node's old variable if free, else a fresh one."""
    for decl in item.nodes:
        if item.kind == "add" and decl.name in handles:
            continue  # a `h = g["Name"]` line the file keeps already names it
        known = old_vars.get(decl.name)
        if known is not None and known not in taken:
            var = known
        else:
            var = _fresh_var(snake_name(decl.name), known, taken, identifiers)
        handles[decl.name] = var
        taken.add(var)
        item.handles[var] = decl.name


def _fresh_var(base: str, known: str | None, taken: set[str], identifiers: set[str]) -> str:
    var, n = base, 1
    while var in taken or (var in identifiers and var != known):
        n += 1
        var = f"{base}_{n}" if n > 2 else f"{base}_node"
    return var


def plan_edges(
    edges: list[EdgeIR],
    old: list[Item],
    style: Style,
    survives: Callable[[Item], Mapping[str, str]] | None = None,
) -> list[Fresh]:
    """The edge items the file will hold, in the IR's order.

    ``survives(item)`` names the renames (old -> new) an old item's text stays right under
    (a ``>>`` line that names nodes only through handles): such an item is matched as if it
    were written with the new names, and kept.
    """
    keys = [edge_key(e) for e in edges]
    index: dict[tuple[object, ...], list[Item]] = {}
    said: dict[int, list[tuple[object, ...]]] = {}
    for item in old:
        renames = survives(item) if survives is not None else {}
        said[id(item)] = [edge_key(_renamed_edge(e, renames)) for e in item.edges]
        index.setdefault(said[id(item)][0], []).append(item)
    used: set[int] = set()

    def match_at(i: int) -> Item | None:
        for item in index.get(keys[i], []):
            size = len(item.edges)
            if id(item) not in used and said[id(item)] == keys[i : i + size]:
                return item
        return None

    plan: list[Fresh] = []
    i = 0
    while i < len(edges):
        match = match_at(i)
        if match is not None and not _grows(edges, i, len(match.edges)):
            used.add(id(match))
            kept = list(edges[i : i + len(match.edges)])
            plan.append(Fresh(match.kind, edges=kept, origin=match))
            i += len(match.edges)
            continue
        j = _group_end(edges, i, match_at, style)
        kind: ItemKind = "custom" if edges[i].kind == "custom" else "edge"
        plan.append(Fresh(kind, edges=list(edges[i:j])))
        i = j
    return plan


def _renamed_edge(edge: EdgeIR, renames: Mapping[str, str]) -> EdgeIR:
    if not renames:
        return edge

    def new(name: str | None) -> str | None:
        return None if name is None else renames.get(name, name)

    sources = None if edge.sources is None else [renames.get(s, s) for s in edge.sources]
    return replace(edge, source=new(edge.source), target=new(edge.target), sources=sources)


def _grows(edges: list[EdgeIR], i: int, size: int) -> bool:
    """Whether the routing call ``edges[i : i + size]`` gains a key right after it (a node
    routes through one path function: the keys must stay in one call, not become two)."""
    first = edges[i]
    if first.kind != "conditional" or first.branch == "loop" or i + size >= len(edges):
        return False
    after = edges[i + size]
    return (
        after.kind == "conditional"
        and (after.source, after.branch, after.path) == (first.source, first.branch, first.path)
        and after.label not in {e.label for e in edges[i : i + size]}
    )


def _group_end(
    edges: list[EdgeIR], i: int, match_at: Callable[[int], Item | None], style: Style
) -> int:
    """Where the new item starting at ``edges[i]`` ends (exclusive)."""
    first = edges[i]
    if first.kind in ("custom", "dynamic", "join", "map", "parallel"):
        return i + 1
    if first.branch == "loop":
        return i + 2
    j = i + 1
    if first.kind == "conditional":
        labels = {first.label}
        while (
            j < len(edges)
            and edges[j].kind == "conditional"
            and (edges[j].source, edges[j].branch, edges[j].path)
            == (first.source, first.branch, first.path)
            and edges[j].label not in labels
        ):
            labels.add(edges[j].label)
            j += 1
        return j
    if style != "operator":
        return j
    while (
        j < len(edges)
        and edges[j].kind == "sequential"
        and edges[j].source == edges[j - 1].target
        and edges[j].source not in (START, END)
        and match_at(j) is None
    ):
        j += 1
    return j
