"""Exports of a graph for docs and reviews: Mermaid text and a plain layered SVG.

The page draws its own (hand-drawn) SVG/PNG; these are for the command line
(``--export mermaid|svg``) and ``GET /api/export``.
"""

from __future__ import annotations

from collections.abc import Iterator
from html import escape

from tensorsketch.canvas.ir import END, START, EdgeIR, GraphIR

__all__ = ["layers", "to_mermaid", "to_svg"]


def _ids(ir: GraphIR) -> dict[str, str]:
    ids = {START: "start", END: "stop"}
    for index, node in enumerate(ir.nodes):
        ids[node.name] = f"n{index}"
    return ids


def _pairs(edge: EdgeIR) -> Iterator[tuple[str | None, str | None]]:
    """The drawn lines of an edge: one, one from each source of a join, or one to each
    node a dynamic route's code can return."""
    if edge.kind == "join":
        for name in edge.sources or ():
            yield name, edge.target
    elif edge.kind == "dynamic" and edge.routes:
        for name in edge.routes:
            yield edge.source, name
    else:
        yield edge.source, edge.target


def _route_label(edge: EdgeIR) -> str:
    """A dynamic route's wires: the routing function's name (a lambda is just "lambda")."""
    path = edge.path or "route"
    return f"{path}?" if path.replace(".", "_").isidentifier() else "lambda?"


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;")


def to_mermaid(ir: GraphIR) -> str:
    """``flowchart TD``: nodes boxed (holes dashed), conditional edges dashed with labels."""
    ids = _ids(ir)
    lines = ["flowchart TD"]
    used = {name for edge in ir.edges for pair in _pairs(edge) for name in pair}
    if START in used:
        lines.append(f"    {ids[START]}((START))")
    for node in ir.nodes:
        lines.append(f'    {ids[node.name]}["{_mermaid_text(node.name)}"]')
    if END in used:
        lines.append(f"    {ids[END]}((END))")
    dynamic = 0
    for edge in ir.edges:
        if edge.kind == "join":
            froms = [ids[n] for n in edge.sources or () if n in ids]
            if froms and edge.target in ids:
                lines.append(f'    {" & ".join(froms)} ==>|"join"| {ids[edge.target]}')
            continue
        if edge.kind == "custom" or edge.source is None:
            continue
        src = ids.get(edge.source)
        if src is None:
            continue
        if edge.kind == "sequential" and edge.target is not None and edge.target in ids:
            lines.append(f"    {src} --> {ids[edge.target]}")
        elif edge.kind == "conditional" and edge.target is not None and edge.target in ids:
            label = edge.label if edge.label is not None else (edge.path or "")
            text = f'|"{_mermaid_text(label)}"|' if label else ""
            lines.append(f"    {src} -.->{text} {ids[edge.target]}")
        elif edge.kind == "dynamic" and edge.routes and all(n in ids for n in edge.routes):
            label = _mermaid_text(_route_label(edge))
            lines.extend(f'    {src} -.->|"{label}"| {ids[name]}' for name in edge.routes)
        elif edge.kind == "dynamic":
            dynamic += 1
            lines.append(f"    dyn{dynamic}{{{{?}}}}")
            label = _mermaid_text(edge.path or "dynamic")
            lines.append(f'    {src} -.->|"{label}"| dyn{dynamic}')
    holes = [ids[n.name] for n in ir.nodes if n.has_hole]
    if holes:
        lines.append("    classDef hole stroke-dasharray: 5 5")
        lines.append(f"    class {','.join(holes)} hole")
    return "\n".join(lines) + "\n"


def layers(ir: GraphIR) -> list[list[str]]:
    """Nodes by layer: longest path from START over forward edges (back edges ignored)."""
    names = [START, *(n.name for n in ir.nodes), END]
    succ: dict[str, list[str]] = {n: [] for n in names}
    for source, target in (pair for edge in ir.edges for pair in _pairs(edge)):
        if source in succ and target in succ and source != target:
            assert source is not None and target is not None
            succ[source].append(target)
    order: list[str] = []  # DFS post-order from START, then the unreachable rest
    state: dict[str, int] = {}
    back: set[tuple[str, str]] = set()

    def visit(root: str) -> None:
        stack: list[tuple[str, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            node, i = stack.pop()
            if i < len(succ[node]):
                stack.append((node, i + 1))
                nxt = succ[node][i]
                if state.get(nxt) == 1:
                    back.add((node, nxt))
                elif nxt not in state:
                    state[nxt] = 1
                    stack.append((nxt, 0))
            else:
                state[node] = 2
                order.append(node)

    for name in names:
        if name not in state and name != END:
            visit(name)
    if END not in state:
        order.insert(0, END)
    level: dict[str, int] = {}
    for node in reversed(order):
        level.setdefault(node, 0)
        for nxt in succ[node]:
            if (node, nxt) not in back:
                level[nxt] = max(level.get(nxt, 0), level[node] + 1)
    deepest = max(level.values(), default=0)
    level[END] = max(level.get(END, 0), deepest if any(succ[n] for n in succ) else 1)
    rows: list[list[str]] = [[] for _ in range(max(level.values()) + 1)]
    for name in names:
        rows[level[name]].append(name)
    return [row for row in rows if row]


_W, _H, _GX, _GY = 160, 44, 40, 70


def to_svg(ir: GraphIR) -> str:
    """A simple layered drawing: one row per layer, straight edges, conditional ones dashed."""
    rows = layers(ir)
    width = max(len(row) for row in rows) * (_W + _GX) + _GX
    height = len(rows) * (_H + _GY) + _GY
    centre: dict[str, tuple[float, float]] = {}
    for r, row in enumerate(rows):
        offset = (width - len(row) * (_W + _GX) + _GX) / 2
        for c, name in enumerate(row):
            centre[name] = (offset + c * (_W + _GX) + _W / 2, _GY + r * (_H + _GY) + _H / 2)
    holes = {n.name for n in ir.nodes if n.has_hole}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="13">',
        f"<title>{escape(ir.name)}</title>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" '
        'markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/>'
        "</marker></defs>",
    ]
    for edge in ir.edges:
        for source, target in _pairs(edge):
            if source not in centre or target not in centre:
                continue
            assert source is not None and target is not None
            (x1, y1), (x2, y2) = centre[source], centre[target]
            dash = ' stroke-dasharray="6 4"' if edge.kind not in ("sequential", "join") else ""
            thick = ' stroke-width="2.5"' if edge.kind == "join" else ""
            y1e, y2e = (y1 + _H / 2, y2 - _H / 2) if y2 > y1 else (y1 - _H / 2, y2 + _H / 2)
            if source == target:
                path = f"M{x1 + _W / 2},{y1} c40,-30 40,30 0,10"
            else:
                path = f"M{x1:.1f},{y1e:.1f} L{x2:.1f},{y2e:.1f}"
            parts.append(
                f'<path d="{path}" fill="none" stroke="#444"{dash}{thick} '
                'marker-end="url(#arrow)"/>'
            )
            label = "join" if edge.kind == "join" else edge.label
            if edge.kind in ("conditional", "join") and label:
                parts.append(
                    f'<text x="{(x1 + x2) / 2 + 4:.1f}" y="{(y1e + y2e) / 2:.1f}" fill="#666">'
                    f"{escape(label)}</text>"
                )
    for name, (x, y) in centre.items():
        label = {"__start__": "START", "__end__": "END"}.get(name, name)
        pseudo = name in (START, END)
        dash = ' stroke-dasharray="5 4"' if name in holes else ""
        rx = _H / 2 if pseudo else 6
        parts.append(
            f'<rect x="{x - _W / 2:.1f}" y="{y - _H / 2:.1f}" width="{_W}" height="{_H}" '
            f'rx="{rx:.0f}" fill="{"#eee" if pseudo else "#fff"}" stroke="#222"{dash}/>'
        )
        parts.append(
            f'<text x="{x:.1f}" y="{y + 4:.1f}" text-anchor="middle">{escape(label)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
