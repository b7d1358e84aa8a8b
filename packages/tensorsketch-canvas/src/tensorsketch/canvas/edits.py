"""Canvas gestures as pure GraphIR edits.

Each function returns a new GraphIR and leaves its argument alone, so a frontend (or a test)
can apply a gesture, hand the result to ``reconstruct`` and throw it away if the user undoes.
They encode the canvas's rules: deleting a node deletes its wiring, a loop's two edges go
together, a join is one edge (removing a node it waits for removes the whole join), a node is
created as a typed hole, ports change only on holes, and a node a routing function returns by
name (``EdgeIR.routes``) is neither renamed nor removed until that code changes.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable, Iterable

from tensorsketch.canvas.exceptions import IRError
from tensorsketch.canvas.ir import END, START, EdgeIR, GraphIR, NodeIR, Port

__all__ = [
    "add_edge",
    "add_join",
    "add_node",
    "remove_edge",
    "remove_node",
    "rename_node",
    "set_ports",
]


def _known(ir: GraphIR, name: str, *, pseudo: bool) -> None:
    if pseudo and name in (START, END):
        return
    ir.node(name)  # raises IRError naming the known nodes


#: How much of a routing function (a lambda, say) a refusal quotes.
_PATH_CHARS = 60


def _routed_by_name(ir: GraphIR, name: str, *, renaming: str | None) -> None:
    """Refuse to rename (``renaming`` is the new name) or remove a node that a mapping-less
    routing function returns by name (``EdgeIR.routes``, read from its code).

    The canvas never edits code, so the function would keep returning the old name: the run
    would fail with a ``RoutingError`` and the route would turn into a ``route → ?`` stub.
    A route leaving the removed node goes with it, so it does not count.
    """
    routing = [
        edge
        for edge in ir.edges
        if edge.routes is not None
        and name in edge.routes
        and (renaming is not None or edge.source != name)
    ]
    if not routing:
        return
    where = "; ".join(_routing_text(edge) for edge in routing)
    them = "it" if len(routing) == 1 else "them"
    if renaming is None:
        msg = (
            f"cannot remove {name!r}: {where} can return {name!r}, and the canvas does not edit "
            "code, so runs routed there would fail with a RoutingError. Change the routing "
            f"code first (in your editor: make {them} return another node or END), then remove "
            "the node."
        )
    else:
        msg = (
            f"cannot rename {name!r} to {renaming!r}: {where} returns {name!r} by name, and "
            "the canvas does not edit code, so runs routed there would fail with a "
            f"RoutingError. Change the routing code first (in your editor: make {them} return "
            f"{renaming!r}), then rename the node."
        )
    raise IRError(msg)


def _routing_text(edge: EdgeIR) -> str:
    path = edge.path or "?"
    if len(path) > _PATH_CHARS:
        path = path[: _PATH_CHARS - 1] + "…"
    source = {START: "START", END: "END"}.get(edge.source or "", edge.source)
    method = edge.branch or "conditional"
    return f"the routing function `{path}` of the {method} from {source!r}"


def add_edge(ir: GraphIR, source: str, target: str) -> GraphIR:
    """Add a sequential edge ``source`` → ``target`` (what dragging between two nodes does)."""
    _known(ir, source, pseudo=True)
    _known(ir, target, pseudo=True)
    if source == END or target == START:
        msg = f"an edge cannot leave END or enter START (got {source!r} → {target!r})."
        raise IRError(msg)
    new = ir.copy()
    new.edges.append(EdgeIR(source, target))
    return new


def add_join(ir: GraphIR, sources: Iterable[str], target: str) -> GraphIR:
    """Add a wait-for-all join: ``target`` runs once after every one of ``sources`` has run
    (``edge(["A", "B"], "C")``; two or more distinct nodes, never START or END)."""
    names = list(sources)
    for name in (*names, target):
        _known(ir, name, pseudo=False)
    if len(names) < 2 or len(set(names)) != len(names):
        msg = (
            f"a join waits for two or more different nodes, got {names!r}; for one source "
            "add a sequential edge instead."
        )
        raise IRError(msg)
    new = ir.copy()
    new.edges.append(EdgeIR(None, target, "join", sources=names))
    return new


def remove_edge(ir: GraphIR, index: int) -> GraphIR:
    """Remove ``ir.edges[index]``; removing either edge of a loop removes the whole loop."""
    if not 0 <= index < len(ir.edges):
        msg = f"graph {ir.name!r} has {len(ir.edges)} edges; there is no edge {index}."
        raise IRError(msg)
    new = ir.copy()
    edge = new.edges[index]
    drop = {index}
    if edge.branch == "loop":
        drop |= {
            i
            for i, other in enumerate(new.edges)
            if other.branch == "loop" and other.source == edge.source and other.path == edge.path
        }
    new.edges = [e for i, e in enumerate(new.edges) if i not in drop]
    return new


def remove_node(ir: GraphIR, name: str) -> GraphIR:
    """Remove a node and every edge touching it (its class stays in the code), and take it
    out of the graph's ``interrupt_before`` / ``interrupt_after`` lists.

    :raises IRError: no such node, or the routing function of a route that stays in the graph
        returns it by name (``EdgeIR.routes``): change that code first.
    """
    _known(ir, name, pseudo=False)
    _routed_by_name(ir, name, renaming=None)
    new = ir.copy()
    new.nodes = [n for n in new.nodes if n.name != name]
    _breakpoints(new, lambda n: None if n == name else n)
    loops = {
        (e.source, e.path) for e in new.edges if e.branch == "loop" and name in (e.source, e.target)
    }
    new.edges = [
        e
        for e in new.edges
        if e.kind == "custom"
        or (
            name not in (e.source, e.target)
            and name not in (e.sources or ())
            and not (e.branch == "loop" and (e.source, e.path) in loops)
        )
    ]
    new.added = [n for n in new.added if n != name]
    return new


def rename_node(ir: GraphIR, old: str, new_name: str) -> GraphIR:
    """Rename a node in the graph: its ``add(..., name=...)`` alias, every edge using it and
    its entries in ``compile(interrupt_before=..., interrupt_after=...)``.

    The class keeps its name (renaming code is an editor's job) — unless the node was just
    created on the canvas as a hole named after its class, which has no code yet: then the
    class to be written takes the new name. A node placed from an existing, implemented class
    is in ``added`` too, but its class exists, so it keeps it. (The Studio does the same for a
    stub it wrote earlier, once that stub is in the file: see
    :mod:`tensorsketch.canvas.studio._stub_rename`.)

    :raises IRError: no such node, a bad or taken new name, or a routing function returns
        ``old`` by name (``EdgeIR.routes``): change that code first.
    """
    _known(ir, old, pseudo=False)
    if not new_name or new_name in (START, END):
        msg = f"cannot rename {old!r} to {new_name!r}: pick a non-empty name other than START/END."
        raise IRError(msg)
    if any(n.name == new_name for n in ir.nodes):
        msg = f"cannot rename {old!r} to {new_name!r}: a node of that name already exists."
        raise IRError(msg)
    _routed_by_name(ir, old, renaming=new_name)
    new = ir.copy()
    node = new.node(old)
    node.name = new_name
    if old in new.added:
        new.added = [new_name if n == old else n for n in new.added]
        if node.cls == old and node.has_hole:
            node.cls = new_name
            if node.hole == f"{old} needs code":
                node.hole = f"{new_name} needs code"
    for edge in new.edges:
        if edge.source == old:
            edge.source = new_name
        if edge.target == old:
            edge.target = new_name
        if edge.sources is not None and old in edge.sources:
            edge.sources = [new_name if n == old else n for n in edge.sources]
    _breakpoints(new, lambda n: new_name if n == old else n)
    return new


def _breakpoints(ir: GraphIR, change: Callable[[str], str | None]) -> None:
    """Apply ``change`` (a new name, or ``None`` to drop it) to the breakpoint lists."""
    if ir.interrupt_before is not None:
        ir.interrupt_before = [m for n in ir.interrupt_before if (m := change(n)) is not None]
    if ir.interrupt_after is not None:
        ir.interrupt_after = [m for n in ir.interrupt_after if (m := change(n)) is not None]


def add_node(
    ir: GraphIR,
    name: str,
    inputs: Iterable[Port | tuple[str, str]] = (),
    outputs: Iterable[Port | tuple[str, str]] = (),
    hole: str | None = None,
) -> GraphIR:
    """Create a node from the palette: a typed hole, unwired, with a stub class to write."""
    if not name.isidentifier() or keyword.iskeyword(name):
        msg = (
            f"a new node's name becomes its class name, so it must be an identifier that is not "
            f"a keyword; got {name!r}."
        )
        raise IRError(msg)
    if any(n.name == name for n in ir.nodes):
        msg = f"graph {ir.name!r} already has a node named {name!r}."
        raise IRError(msg)
    new = ir.copy()
    new.nodes.append(
        NodeIR(
            name=name,
            inputs=[_port(p) for p in inputs],
            outputs=[_port(p) for p in outputs],
            has_hole=True,
            hole=hole if hole is not None else f"{name} needs code",
        )
    )
    new.added.append(name)
    return new


def set_ports(
    ir: GraphIR,
    name: str,
    inputs: Iterable[Port | tuple[str, str]] | None = None,
    outputs: Iterable[Port | tuple[str, str]] | None = None,
) -> GraphIR:
    """Change the ports of a node that is still a hole (``None`` leaves a side unchanged)."""
    node = ir.node(name)
    if not node.has_hole:
        msg = (
            f"node {name!r} already has a body, so the canvas cannot change its ports; edit its "
            "`In`/`Out` classes in code."
        )
        raise IRError(msg)
    new_inputs = None if inputs is None else [_port(p) for p in inputs]
    new_outputs = None if outputs is None else [_port(p) for p in outputs]
    new = ir.copy()
    cls = new.node(name).cls
    for other in new.nodes:  # nodes sharing a class share its ports
        if other.cls == cls:
            if new_inputs is not None:
                other.inputs = [Port(p.name, p.type) for p in new_inputs]
            if new_outputs is not None:
                other.outputs = [Port(p.name, p.type) for p in new_outputs]
    return new


def _port(value: Port | tuple[str, str]) -> Port:
    if isinstance(value, Port):
        return Port(value.name, value.type)
    name, type_text = value
    return Port(name, type_text)
