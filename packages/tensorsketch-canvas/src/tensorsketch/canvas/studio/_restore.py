"""Undo for deletions: put a removed node, or a removed route, back where it was.

Deleting a node takes its declaration and every edge touching it out of the graph (its class
stays in the code); deleting a conditional or dynamic route takes out one routing target, or
the whole routing call. No other gesture puts those back, so the inverse is its own op,
``restore``, whose arguments say what was removed and from where:

- ``node`` and ``index``: the removed node and its place among the graph's nodes;
- ``edges``: each removed edge with its index in the graph's edges before the deletion;
- ``text`` (added by the Studio after the write): the lines the deletion took out of the file,
  as hunks against the text it wrote, and that text's sha.

Applied, it inserts the node and edges into the *current* graph (so it also works after the
file changed around them) and the engine writes them back like any edit. When the file is
still exactly what the deletion wrote, the hunks give the file back its old text — comments
and layout of the removed lines included — provided that text re-reads as the same graph.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Mapping
from typing import Any

from tensorsketch.canvas.exceptions import IRError
from tensorsketch.canvas.ir import EdgeIR, GraphIR, NodeIR
from tensorsketch.canvas.studio._errors import BadEdit, EditRejected

__all__ = ["apply", "patched", "removal", "text_hunks"]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _removed(before: list[EdgeIR], after: list[EdgeIR]) -> list[int]:
    """Indices of ``before`` missing from ``after`` (a subsequence of it)."""
    gone: list[int] = []
    j = 0
    for i, edge in enumerate(before):
        if j < len(after) and after[j] == edge:
            j += 1
        else:
            gone.append(i)
    return gone


def removal(before: GraphIR, after: GraphIR, node_index: int | None = None) -> dict[str, Any]:
    """The ``restore`` op undoing ``before`` → ``after`` (a node or routes removed)."""
    node = before.nodes[node_index] if node_index is not None else None
    edges = [
        {"index": i, "edge": before.edges[i].to_dict()} for i in _removed(before.edges, after.edges)
    ]
    return {
        "op": "restore",
        "args": {
            "node": node.to_dict() if node is not None else None,
            "index": node_index,
            "edges": edges,
        },
    }


def text_hunks(after: str, before: str) -> dict[str, Any]:
    """``after`` → ``before`` as line hunks ``[start, end, lines]`` (replace ``after``'s lines
    ``start:end`` with ``lines``), keyed by ``after``'s sha."""
    old = after.splitlines(keepends=True)
    new = before.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    hunks = [
        [i1, i2, new[j1:j2]] for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"
    ]
    return {"after": _sha(after), "hunks": hunks}


def patched(source: str, text: Any) -> str | None:
    """``source`` with the hunks applied, when it is the text they were made against."""
    if not isinstance(text, Mapping) or text.get("after") != _sha(source):
        return None
    hunks = text.get("hunks")
    if not isinstance(hunks, list):
        return None
    lines = source.splitlines(keepends=True)
    for hunk in reversed(hunks):
        ok = (
            isinstance(hunk, list)
            and len(hunk) == 3
            and all(isinstance(v, int) and not isinstance(v, bool) for v in hunk[:2])
            and 0 <= hunk[0] <= hunk[1] <= len(lines)
            and isinstance(hunk[2], list)
            and all(isinstance(line, str) for line in hunk[2])
        )
        if not ok:
            return None
        lines[hunk[0] : hunk[1]] = hunk[2]
    return "".join(lines)


def _index(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        msg = f"restore: {what} must be a non-negative integer, got {value!r}."
        raise BadEdit(msg)
    return value


def apply(
    ir: GraphIR, args: Mapping[str, Any], source: str
) -> tuple[GraphIR, dict[str, Any], str | None]:
    """The graph with the removed parts back, the inverse (delete them again) and, when the
    file is still what the deletion wrote, its exact old text."""
    raw_edges = args.get("edges", [])
    if not isinstance(raw_edges, list):
        msg = "restore: args.edges must be a list of {index, edge}."
        raise BadEdit(msg)
    new = ir.copy()
    node: NodeIR | None = None
    try:
        if args.get("node") is not None:
            node = NodeIR.from_dict(args["node"], "restore: args.node")
            if any(n.name == node.name for n in ir.nodes):
                msg = f"node {node.name!r} is already in the graph; there is nothing to restore."
                raise EditRejected(msg)
            at = min(_index(args.get("index"), "args.index"), len(new.nodes))
            new.nodes.insert(at, node)
        edges: list[tuple[int, EdgeIR]] = []
        for entry in raw_edges:
            if not isinstance(entry, Mapping) or set(entry) != {"index", "edge"}:
                msg = f"restore: args.edges items must be {{index, edge}}, got {entry!r}."
                raise BadEdit(msg)
            edge = EdgeIR.from_dict(entry["edge"], "restore: edge")
            if edge.kind == "custom":
                msg = "restore: a custom wiring element cannot be restored (it is never removed)."
                raise BadEdit(msg)
            edges.append((_index(entry["index"], "edge index"), edge))
    except IRError as exc:
        raise BadEdit(str(exc)) from None
    if node is None and not edges:
        msg = "restore needs args.node or args.edges (what the deletion removed)."
        raise BadEdit(msg)
    for at, edge in sorted(edges, key=lambda pair: pair[0]):
        new.edges.insert(min(at, len(new.edges)), edge)
    if node is not None:
        inverse = {"op": "remove_node", "args": {"name": node.name}}
    else:
        first = edges[0][1]
        remove: dict[str, Any] = {"source": first.source, "target": first.target}
        if first.kind == "join" and first.sources:
            remove = {"source": first.sources[0], "target": first.target, "join": True}
        if first.label is not None:
            remove["label"] = first.label
        inverse = {"op": "remove_edge", "args": remove}
    return new, inverse, patched(source, args.get("text"))
