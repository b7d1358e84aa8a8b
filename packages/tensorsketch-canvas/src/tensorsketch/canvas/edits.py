"""Canvas gestures as pure GraphIR edits.

Each function returns a new GraphIR and leaves its argument alone, so a frontend (or a test)
can apply a gesture, hand the result to ``reconstruct`` and throw it away if the user undoes.
They encode the canvas's rules: deleting a node deletes its wiring, a loop's two edges go
together, a join is one edge (removing a node it waits for removes the whole join), a node is
created as a typed hole, ports change only on holes, and a node a routing function returns by
name (``EdgeIR.routes``) or a node class declares as a ``Command`` destination
(``GraphIR.commands``) is neither renamed nor removed until that code changes. A ``map`` or
``parallel`` is one element: removing any node it names removes it whole.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable, Iterable, Sequence

from tensorsketch.canvas.exceptions import IRError
from tensorsketch.canvas.ir import END, LOOP_EXIT, LOOP_REPEAT, START, EdgeIR, GraphIR, NodeIR, Port

__all__ = [
    "add_edge",
    "add_fanout",
    "add_join",
    "add_loop",
    "add_node",
    "add_route",
    "relabel_route",
    "remove_edge",
    "remove_node",
    "rename_node",
    "set_defer",
    "set_destinations",
    "set_ports",
    "splice_node",
    "unsplice_node",
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


def _declared_destination(ir: GraphIR, name: str, *, renaming: str | None) -> None:
    """Refuse to rename or remove a node that another node's class declares in its
    ``destinations`` (a ``command`` edge): the class would still name it, and compile fails."""
    written = {n.name for n in ir.nodes if n.destinations is not None}  # the canvas edits those
    declaring = sorted({e.source or "" for e in ir.commands if e.target == name} - {name} - written)
    if not declaring:
        return
    who = ", ".join(repr(n) for n in declaring)
    what = f"remove {name!r}:" if renaming is None else f"rename {name!r} to {renaming!r}:"
    msg = (
        f"cannot {what} the class of {who} declares {name!r} in its `destinations` (where "
        "its `Command(goto=...)` may send the run), and the canvas does not edit code. Change "
        "`destinations` in that class first (in your editor), then "
        f"{'remove' if renaming is None else 'rename'} the node."
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


def _mapped_routes(ir: GraphIR, source: str) -> list[int]:
    """The indexes of ``source``'s routing call with a mapping (``conditional`` or
    ``router``; not a loop), in order."""
    return [
        i
        for i, e in enumerate(ir.edges)
        if e.source == source and e.kind == "conditional" and e.branch != "loop"
    ]


def _no_other_successors(ir: GraphIR, source: str, what: str) -> None:
    """A node's successors come from one place: refuse ``what`` from a node that already has
    plain edges, a routing call or a loop."""
    for edge in ir.edges:
        if edge.source != source or edge.kind in ("custom", "join"):
            continue
        if edge.kind == "sequential":
            have = f"a plain edge {source!r} → {edge.target!r}"
        elif edge.branch == "loop":
            have = f"a loop (until `{edge.path}`)"
        elif edge.kind == "dynamic":
            have = f"a routing function `{edge.path}` that decides its targets at run time"
        else:
            have = f"routes through `{edge.path}`"
        msg = (
            f"cannot add {what} from {source!r}: it already has {have}, and a node's "
            "successors come from one place. Delete that wiring first, or add a route to the "
            "routing call it has."
        )
        raise IRError(msg)


def add_route(
    ir: GraphIR, source: str, target: str, label: str, path: str | None = None
) -> GraphIR:
    """Add a route: ``source`` goes on to ``target`` when its routing function returns
    ``label``.

    A node that already routes through a mapping (``conditional(src, fn, {...})``,
    ``router``, a ``>>`` ``Router``) gains the key ``label`` in that mapping, kept in the
    same call; ``path`` must then be ``None`` or that call's function. Otherwise ``path``
    names the routing function and a new routing call with the one key is written. The
    function is code: the canvas names it, never writes it.
    """
    _known(ir, source, pseudo=True)
    _known(ir, target, pseudo=True)
    if source == END or target == START:
        msg = f"a route cannot leave END or enter START (got {source!r} → {target!r})."
        raise IRError(msg)
    if not label:
        msg = "a route needs a label: the value its routing function returns to take it."
        raise IRError(msg)
    group = _mapped_routes(ir, source)
    new = ir.copy()
    if group:
        first = ir.edges[group[0]]
        if path is not None and path != first.path:
            msg = (
                f"{source!r} already routes through `{first.path}`; a new route from it is a new "
                f"key of that mapping, not a second routing function `{path}`."
            )
            raise IRError(msg)
        labels = [ir.edges[i].label for i in group]
        if label in labels:
            taken = ir.edges[group[labels.index(label)]].target
            msg = (
                f"the routing call of {source!r} already maps {label!r} (to {taken!r}); pick "
                "another label, or rename that one."
            )
            raise IRError(msg)
        edge = EdgeIR(
            source, target, "conditional", path=first.path, label=label, branch=first.branch
        )
        new.edges.insert(group[-1] + 1, edge)
        return new
    if not path:
        msg = (
            f"{source!r} has no routing call yet: name the routing function (a function in "
            "the file that returns the label) for the first route."
        )
        raise IRError(msg)
    _no_other_successors(ir, source, "a route")
    new.edges.append(
        EdgeIR(source, target, "conditional", path=path, label=label, branch="conditional")
    )
    return new


def relabel_route(ir: GraphIR, source: str, label: str, new_label: str) -> GraphIR:
    """Change the mapping key ``label`` of ``source``'s routing call to ``new_label`` (the
    value its routing function returns for that route); the target stays."""
    group = _mapped_routes(ir, source)
    labels = [ir.edges[i].label for i in group]
    if label not in labels:
        have = ", ".join(repr(x) for x in labels) or "none"
        msg = f"{source!r} has no route labelled {label!r} (its labels: {have})."
        raise IRError(msg)
    if not new_label:
        msg = "a route's label cannot be empty: it is the value its routing function returns."
        raise IRError(msg)
    if new_label != label and new_label in labels:
        msg = f"the routing call of {source!r} already has a route labelled {new_label!r}."
        raise IRError(msg)
    new = ir.copy()
    new.edges[group[labels.index(label)]].label = new_label
    return new


def add_loop(ir: GraphIR, node: str, until: str, exit: str = END) -> GraphIR:
    """Loop ``node``: it runs again until ``until(state)`` is true, then goes on to ``exit``
    (``g.loop(node, until=..., exit=...)``)."""
    _known(ir, node, pseudo=False)
    _known(ir, exit, pseudo=True)
    if exit in (START, node):
        msg = f"a loop of {node!r} exits to a node after it (or END), not to {exit!r}."
        raise IRError(msg)
    if not until:
        msg = f"a loop of {node!r} needs `until`: a function of the state that says when to stop."
        raise IRError(msg)
    _no_other_successors(ir, node, "a loop")
    new = ir.copy()
    new.edges.append(
        EdgeIR(node, node, "conditional", path=until, label=LOOP_REPEAT, branch="loop")
    )
    new.edges.append(EdgeIR(node, exit, "conditional", path=until, label=LOOP_EXIT, branch="loop"))
    return new


def add_fanout(ir: GraphIR, source: str, path: str) -> GraphIR:
    """Route ``source`` through ``path``, a function whose return decides the targets at run
    time: node names, or ``Send(node, payload)`` for each item of a fan-out (a map step). The
    canvas draws the targets its code spells out (``EdgeIR.routes``)."""
    _known(ir, source, pseudo=True)
    if source == END:
        msg = "END has no outputs: a fan-out starts from a node (or START)."
        raise IRError(msg)
    if not path:
        msg = f"a fan-out from {source!r} needs its routing function."
        raise IRError(msg)
    _no_other_successors(ir, source, "a fan-out")
    new = ir.copy()
    new.edges.append(EdgeIR(source, None, "dynamic", path=path, branch="conditional"))
    return new


def _plain_edge(ir: GraphIR, source: str, target: str) -> int:
    for i, edge in enumerate(ir.edges):
        if edge.kind == "sequential" and (edge.source, edge.target) == (source, target):
            return i
    msg = f"graph {ir.name!r} has no plain edge {source!r} → {target!r}."
    raise IRError(msg)


def splice_node(ir: GraphIR, node: str, source: str, target: str) -> GraphIR:
    """Put ``node`` on the plain edge ``source`` → ``target`` (a node dropped on a wire): the
    edge becomes ``source`` → ``node`` → ``target``, written where the edge was."""
    _known(ir, node, pseudo=False)
    if node in (source, target):
        msg = f"{node!r} is an end of the edge {source!r} → {target!r}; drop it on another wire."
        raise IRError(msg)
    index = _plain_edge(ir, source, target)
    new = ir.copy()
    new.edges[index : index + 1] = [EdgeIR(source, node), EdgeIR(node, target)]
    return new


def unsplice_node(ir: GraphIR, node: str, source: str, target: str) -> GraphIR:
    """Take ``node`` back off the path ``source`` → ``node`` → ``target``: the two edges
    become ``source`` → ``target`` again (the inverse of :func:`splice_node`)."""
    first = _plain_edge(ir, source, node)
    second = _plain_edge(ir, node, target)
    new = ir.copy()
    at = min(first, second)
    new.edges = [e for i, e in enumerate(new.edges) if i not in (first, second)]
    new.edges.insert(at, EdgeIR(source, target))
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
    _declared_destination(ir, name, renaming=None)
    new = ir.copy()
    new.nodes = [n for n in new.nodes if n.name != name]
    new.commands = [e for e in new.commands if name not in (e.source, e.target)]
    for node in new.nodes:
        if node.destinations is not None and name in node.destinations:
            node.destinations = [d for d in node.destinations if d != name]
    _breakpoints(new, lambda n: None if n == name else n)
    loops = {
        (e.source, e.path) for e in new.edges if e.branch == "loop" and name in (e.source, e.target)
    }
    new.edges = [
        e
        for e in new.edges
        if e.kind == "custom"
        or (
            name not in (e.source, e.target, e.then)
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
    _declared_destination(ir, old, renaming=new_name)
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
        if edge.then == old:
            edge.then = new_name
    _rename_destinations(new, old, new_name)
    _breakpoints(new, lambda n: new_name if n == old else n)
    return new


def _rename_destinations(ir: GraphIR, old: str, new_name: str) -> None:
    """Follow a rename in the ``command`` edges and the ``add(..., destinations=...)`` tuples
    (a class's own ``destinations`` name no other node ``old``: that rename was refused)."""
    written = {n.name for n in ir.nodes if n.destinations is not None}
    for edge in ir.commands:
        if edge.source == old:
            edge.source = new_name
        if edge.target == old and edge.source in written:
            edge.target = new_name  # a class naming itself keeps the old name (read as such)
    for other in ir.nodes:
        if other.destinations is not None and old in other.destinations:
            other.destinations = [new_name if d == old else d for d in other.destinations]


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


def set_defer(ir: GraphIR, name: str, defer: bool) -> GraphIR:
    """Mark a node ``add(..., defer=True)`` (or take it off): it then runs only once nothing
    else is left to run, after every branch that could still reach it."""
    if not isinstance(defer, bool):
        msg = f"set_defer({name!r}, ...) takes true or false, got {defer!r}."
        raise IRError(msg)
    ir.node(name)
    new = ir.copy()
    new.node(name).defer = defer
    return new


def set_destinations(ir: GraphIR, name: str, destinations: Sequence[str] | None) -> GraphIR:
    """Set where a subgraph node's children may send the run with
    ``Command(graph=Command.PARENT, goto=...)``: the ``add(child, destinations=(...))`` tuple
    (``None`` drops the argument). Its ``command`` edges follow.

    :raises IRError: not a subgraph node (a node class declares its own ``destinations``), or
        a destination that is not a node of this graph or ``END``, or named twice.
    """
    node = ir.node(name)
    if node.subgraph is None:
        msg = (
            f"{name!r} is not a subgraph node: `add(..., destinations=...)` is for a graph "
            "added as a node; a node class declares `destinations = (...)` itself (edit the "
            "class in your editor)."
        )
        raise IRError(msg)
    wanted = None if destinations is None else list(destinations)
    names = {n.name for n in ir.nodes}
    for target in wanted or []:
        if not isinstance(target, str) or (target not in names and target != END):
            msg = (
                f"{target!r} cannot be a destination of {name!r}: name a node of this graph "
                f"or END ({sorted(names)})."
            )
            raise IRError(msg)
    if wanted is not None and len(set(wanted)) != len(wanted):
        msg = f"the destinations of {name!r} name a node twice: {wanted!r}."
        raise IRError(msg)
    new = ir.copy()
    new.node(name).destinations = wanted
    _recommand(new, name)
    return new


def _recommand(ir: GraphIR, name: str) -> None:
    """Rebuild the ``command`` edges of ``name`` from its ``destinations``, in place, in node
    order (as extraction lists them)."""
    by_source: dict[str, list[EdgeIR]] = {}
    for edge in ir.commands:
        by_source.setdefault(edge.source or "", []).append(edge)
    by_source[name] = [EdgeIR(name, t, "command") for t in ir.node(name).destinations or []]
    ir.commands = [edge for node in ir.nodes for edge in by_source.get(node.name, [])]


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
