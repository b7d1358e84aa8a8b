"""The edit operations of ``POST /api/edit``: argument checks, the canvas ``edits`` call,
the checks the engine would make at compile time, and the inverse edit for undo.

Everything here is pure: a :class:`GraphIR` and the file's text in, a new :class:`GraphIR`
(or an :class:`EditRejected` with the teaching message) out. Nothing is written.

Deleting a node or a route has no gesture that undoes it, so its inverse is ``restore``: the
removed node and edges with their places in the graph, and the text lines the deletion took
out of the file (see :mod:`tensorsketch.canvas.studio._restore`). The Studio signs the
arguments it issues; a ``restore`` it did not issue is refused, since it carries source text.
"""

from __future__ import annotations

import ast
import difflib
import keyword
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tensorsketch.canvas import edits
from tensorsketch.canvas._annotation import annotation_problem
from tensorsketch.canvas._classes import find_node_classes
from tensorsketch.canvas._pyparse import parse_python
from tensorsketch.canvas._source import parse_source
from tensorsketch.canvas.exceptions import CanvasError
from tensorsketch.canvas.ir import END, START, EdgeIR, GraphIR, NodeIR, Port
from tensorsketch.canvas.studio import _restore, _stub_rename
from tensorsketch.canvas.studio._errors import BadEdit, EditRejected

__all__ = [
    "OPS",
    "BadEdit",
    "EditRejected",
    "EditResult",
    "apply_op",
    "module_functions",
    "node_classes",
    "state_fields",
]


@dataclass
class EditResult:
    ir: GraphIR
    inverse: dict[str, Any] | None
    #: a node renamed ``(old, new)``: the sidecar entry moves with it
    renamed: tuple[str, str] | None = None
    #: a ``restore``'s exact text for the file, used when it re-reads as ``ir``
    text: str | None = None
    #: a renamed node's stub class ``(old, new)`` that follows the rename when the file
    #: allows it (see :mod:`tensorsketch.canvas.studio._stub_rename`)
    stub: tuple[str, str] | None = None


_SIMPLE_TYPES = frozenset({"str", "int", "float", "bool", "bytes", "None"})


# -- argument helpers --------------------------------------------------------------------------


def _str(args: Mapping[str, Any], key: str, op: str) -> str:
    if key not in args:
        msg = f"{op} needs args.{key} (a string)."
        raise BadEdit(msg)
    value = args[key]
    if not isinstance(value, str):
        msg = f"{op}: args.{key} must be a string, got {type(value).__name__}."
        raise BadEdit(msg)
    return value


def _side(args: Mapping[str, Any], op: str) -> str:
    side = _str(args, "side", op)
    if side not in ("in", "out"):
        msg = f"{op}: args.side must be 'in' or 'out', got {side!r}."
        raise BadEdit(msg)
    return side


def _ports(value: Any, op: str, key: str) -> list[Port]:
    """``{"port": "type"}`` or ``[{"name": ..., "type": ...}]`` (or ``[[name, type]]``)."""
    if value is None:
        return []
    pairs: list[tuple[Any, Any]]
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list):
        pairs = []
        for item in value:
            if isinstance(item, dict) and set(item) == {"name", "type"}:
                pairs.append((item["name"], item["type"]))
            elif isinstance(item, list) and len(item) == 2:
                pairs.append((item[0], item[1]))
            else:
                msg = f"{op}: args.{key} items must be {{'name': ..., 'type': ...}}, got {item!r}."
                raise BadEdit(msg)
    else:
        msg = f"{op}: args.{key} must be an object {{port: type}}, got {type(value).__name__}."
        raise BadEdit(msg)
    ports: list[Port] = []
    for name, type_text in pairs:
        if not isinstance(name, str) or not isinstance(type_text, str):
            msg = f"{op}: port names and types in args.{key} must be strings, got {name!r}."
            raise BadEdit(msg)
        ports.append(_checked_port(name, type_text))
    _no_duplicates(ports, f"args.{key}")
    return ports


def _checked_port(name: str, type_text: str) -> Port:
    if not name.isidentifier() or keyword.iskeyword(name):
        msg = f"port name {name!r} must be a Python identifier (it is a state field)."
        raise EditRejected(msg)
    if not type_text.strip():
        msg = f"port {name!r} needs a type annotation, e.g. 'str'."
        raise EditRejected(msg)
    problem = annotation_problem(type_text)
    if problem is not None:
        msg = (
            f"port {name!r}: {type_text!r} is not a valid type annotation ({problem}); "
            "write a type as in code, e.g. 'str', 'list[str]', 'int | None' or "
            "\"Literal['a', 'b']\"."
        )
        raise EditRejected(msg)
    return Port(name, type_text.strip())


def _no_duplicates(ports: list[Port], where: str) -> None:
    seen: set[str] = set()
    for port in ports:
        if port.name in seen:
            msg = f"{where} names port {port.name!r} twice."
            raise EditRejected(msg)
        seen.add(port.name)


# -- what compile() would say ------------------------------------------------------------------


def state_fields(source: str, state: str | None) -> dict[str, str] | None:
    """The state schema's fields (name → annotation text) when the file defines the schema
    (following bases defined in the file); ``None`` when it cannot be known without running
    the code."""
    if not state or not state.isidentifier():
        return None
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):
        return None
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def fields_of(name: str, seen: frozenset[str]) -> dict[str, str] | None:
        cls = classes.get(name)
        if cls is None or name in seen:
            return None
        out: dict[str, str] = {}
        for base in cls.bases:
            base_name = base.id if isinstance(base, ast.Name) else None
            if base_name in ("Schema", "BaseModel"):
                continue
            if base_name is None:
                return None
            inherited = fields_of(base_name, seen | {name})
            if inherited is None:
                return None
            out.update(inherited)
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                out[stmt.target.id] = ast.unparse(stmt.annotation)
        return out

    return fields_of(state, frozenset())


def _field_hint(port: str, fields: Mapping[str, str]) -> str:
    close = difflib.get_close_matches(port, list(fields), n=1, cutoff=0.6)
    if close:
        return f" — did you mean {close[0]!r}?"
    return f"; add `{port}: ...` to the state schema or rename the port."


def _check_ports(
    node: str, inputs: list[Port], outputs: list[Port], state: str | None, source: str
) -> None:
    """The engine's port checks (``tensorsketch._validate.node_spec``), read from the source."""
    fields = state_fields(source, state)
    if fields is None:
        return
    for verb, ports in (("reads", inputs), ("writes", outputs)):
        for port in ports:
            if port.name not in fields:
                msg = (
                    f"node {node!r} {verb} `{port.name}`, but {state} has no field "
                    f"{port.name!r}{_field_hint(port.name, fields)}"
                )
                raise EditRejected(msg)
            want = fields[port.name]
            if want != port.type and {want, port.type} <= _SIMPLE_TYPES:
                fix = (
                    f"make the port type accept `{want}`."
                    if verb == "reads"
                    else f"change the Out port to `{port.name}: {want}` (or widen the state field)."
                )
                msg = (
                    f"node {node!r} {verb} `{port.name}: {port.type}`, but {state}.{port.name} "
                    f"is `{want}`; {fix}"
                )
                raise EditRejected(msg)


def _check_known(ir: GraphIR, name: str, what: str) -> None:
    known = [n.name for n in ir.nodes]
    if name not in (START, END) and name not in known:
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f" — did you mean {close[0]!r}?" if close else ""
        listed = ", ".join(repr(k) for k in known) or "none yet"
        msg = f"{what} {name!r} is not a node{hint} (known nodes: {listed})."
        raise EditRejected(msg)


def _check_edge(ir: GraphIR, source: str, target: str) -> None:
    for name, role in ((source, "source"), (target, "target")):
        _check_known(ir, name, f"edge {role}")
    if target == START:
        msg = f"edge from {source!r} points at START; START is only a source."
        raise EditRejected(msg)
    if source == END:
        msg = f"edge from END to {target!r}: END can only be a target."
        raise EditRejected(msg)
    for edge in ir.edges:
        if edge.source != source:
            continue
        if edge.kind in ("conditional", "dynamic"):
            msg = (
                f"node {source!r} has both static edges and a {edge.branch or 'conditional'} "
                "edge; a node's successors must come from one place — route every target "
                "through the path function, or drop the conditional."
            )
            raise EditRejected(msg)
        if edge.kind == "sequential" and edge.target == target:
            msg = f"the graph already has the edge {source!r} → {target!r}."
            raise EditRejected(msg)


# -- the operations ----------------------------------------------------------------------------


def _add_node(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    name = _str(args, "name", "add_node")
    inputs = _ports(args.get("inputs"), "add_node", "inputs")
    outputs = _ports(args.get("outputs"), "add_node", "outputs")
    hole = args.get("hole")
    if hole is not None and not isinstance(hole, str):
        msg = "add_node: args.hole must be a string."
        raise BadEdit(msg)
    _check_ports(name, inputs, outputs, ir.state, source)
    new = edits.add_node(ir, name, inputs, outputs, hole=hole)
    return EditResult(new, {"op": "remove_node", "args": {"name": name}})


def _remove_node(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    del source
    name = _str(args, "name", "remove_node")
    new = edits.remove_node(ir, name)
    index = next(i for i, n in enumerate(ir.nodes) if n.name == name)
    inverse = _restore.removal(ir, new, node_index=index)
    return EditResult(new, inverse)


def _restore_op(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    new, inverse, text = _restore.apply(ir, args, source)
    return EditResult(new, inverse, text=text)


def _add_edge(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    del source
    src = _str(args, "source", "add_edge")
    dst = _str(args, "target", "add_edge")
    _check_edge(ir, src, dst)
    new = edits.add_edge(ir, src, dst)
    return EditResult(new, {"op": "remove_edge", "args": {"source": src, "target": dst}})


def _add_join(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    del source
    sources = args.get("sources")
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        msg = "add_join needs args.sources (a list of node names to wait for)."
        raise BadEdit(msg)
    dst = _str(args, "target", "add_join")
    for name, what in [*((s, "join source") for s in sources), (dst, "join target")]:
        if name in (START, END):
            msg = (
                f"a join waits for nodes and runs a node; {name!r} cannot be part of one "
                "(START and END are not nodes that run)."
            )
            raise EditRejected(msg)
        _check_known(ir, name, what)
    for edge in ir.edges:
        if edge.kind == "join" and edge.target == dst and set(edge.sources or ()) == set(sources):
            msg = f"the graph already has the join {edge.sources!r} → {dst!r}."
            raise EditRejected(msg)
    new = edits.add_join(ir, sources, dst)
    inverse = {"op": "remove_edge", "args": {"source": sources[0], "target": dst, "join": True}}
    return EditResult(new, inverse)


def _remove_edge(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    del source
    src = _str(args, "source", "remove_edge")
    dst = args.get("target")
    if dst is not None and not isinstance(dst, str):
        msg = "remove_edge: args.target must be a string (or null for a dynamic edge)."
        raise BadEdit(msg)
    label = args.get("label")
    join = args.get("join", False)
    if not isinstance(join, bool):
        msg = "remove_edge: args.join must be true or false."
        raise BadEdit(msg)
    for index, edge in enumerate(ir.edges):
        if join:  # any of a join's wires removes the whole join
            if edge.kind == "join" and src in (edge.sources or ()) and edge.target == dst:
                new = edits.remove_edge(ir, index)
                return EditResult(new, _restore.removal(ir, new))
            continue
        if edge.kind == "custom" or edge.source != src or edge.target != dst:
            continue
        if label is not None and edge.label != label:
            continue
        new = edits.remove_edge(ir, index)
        inverse = (
            {"op": "add_edge", "args": {"source": src, "target": dst}}
            if edge.kind == "sequential" and dst is not None
            else _restore.removal(ir, new)
        )
        return EditResult(new, inverse)
    listed = ", ".join(_edge_text(e) for e in ir.edges if e.kind != "custom") or "none"
    what = "join" if join else "edge"
    msg = f"graph {ir.name!r} has no {what} {src!r} → {dst!r} (edges: {listed})."
    raise EditRejected(msg)


def module_functions(source: str) -> list[str]:
    """The functions defined at the top level of ``source`` (``def``/``async def``): what a
    route, a loop or a fan-out drawn on the canvas may name as its function. Read, never run."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):
        return []
    return [
        stmt.name for stmt in tree.body if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def _function(args: Mapping[str, Any], key: str, op: str, source: str) -> str:
    """``args[key]``: the name of a function the file defines at the top level. Anything
    else (a lambda, an expression, an unknown name) is refused: the page names code, it
    never sends any."""
    if args.get(key) is None:
        msg = (
            f"{op}: name the routing function in args.{key} (a function in the file that "
            "returns the label); the canvas never writes one."
        )
        raise EditRejected(msg)
    name = _str(args, key, op)
    known = module_functions(source)
    if name in known:
        return name
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f" — did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(known) or "none yet"
    msg = (
        f"{op}: {name!r} is not a function defined at the top level of this file{hint} "
        f"(its functions: {listed}). Write the function in your editor (it takes the state "
        "and returns the label), then pick it here."
    )
    raise EditRejected(msg)


def _add_route(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    src = _str(args, "source", "add_route")
    dst = _str(args, "target", "add_route")
    label = _str(args, "label", "add_route").strip()
    for name, role in ((src, "route source"), (dst, "route target")):
        _check_known(ir, name, role)
    routed = any(
        e.source == src and e.kind == "conditional" and e.branch != "loop" for e in ir.edges
    )
    # a node that routes already gains a key (no function to name); the first route names one
    sent = args.get("path") is not None
    path = _function(args, "path", "add_route", source) if sent or not routed else None
    new = edits.add_route(ir, src, dst, label, path)
    inverse = {"op": "remove_edge", "args": {"source": src, "target": dst, "label": label}}
    return EditResult(new, inverse)


def _relabel_route(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    del source
    src = _str(args, "source", "relabel_route")
    label = _str(args, "label", "relabel_route")
    new_label = _str(args, "new", "relabel_route").strip()
    new = edits.relabel_route(ir, src, label, new_label)
    inverse = {"op": "relabel_route", "args": {"source": src, "label": new_label, "new": label}}
    return EditResult(new, inverse)


def _add_loop(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    node = _str(args, "node", "add_loop")
    exit_to = args.get("exit", END)
    if not isinstance(exit_to, str):
        msg = "add_loop: args.exit must be a node name (or omitted: END)."
        raise BadEdit(msg)
    _check_known(ir, node, "loop node")
    _check_known(ir, exit_to, "loop exit")
    until = _function(args, "until", "add_loop", source)
    new = edits.add_loop(ir, node, until, exit_to)
    inverse = {"op": "remove_edge", "args": {"source": node, "target": node, "label": "repeat"}}
    return EditResult(new, inverse)


def _add_fanout(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    src = _str(args, "source", "add_fanout")
    _check_known(ir, src, "fan-out source")
    path = _function(args, "path", "add_fanout", source)
    new = edits.add_fanout(ir, src, path)
    return EditResult(new, {"op": "remove_edge", "args": {"source": src, "target": None}})


def node_classes(source: str) -> list[dict[str, Any]]:
    """The ``Node`` classes ``source`` defines (read, never run), for the palette: each one's
    name, line, ports and whether it still needs code."""
    try:
        classes = find_node_classes(parse_source(source))
    except CanvasError:
        return []
    return [
        {
            "name": c.name,
            "line": c.line,
            "has_hole": c.has_hole,
            "inputs": [p.to_dict() for p in c.inputs],
            "outputs": [p.to_dict() for p in c.outputs],
        }
        for c in classes.values()
    ]


def _place_node(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    cls = _str(args, "cls", "place_node")
    name = args.get("name", cls)
    if not isinstance(name, str) or not name.strip():
        msg = "place_node: args.name must be a non-empty string (or left out: the class name)."
        raise BadEdit(msg)
    name = name.strip()
    classes = find_node_classes(parse_source(source))
    found = classes.get(cls)
    if found is None:
        close = difflib.get_close_matches(cls, list(classes), n=1, cutoff=0.6)
        hint = f" — did you mean {close[0]!r}?" if close else ""
        listed = ", ".join(classes) or "none"
        msg = f"place_node: this file defines no Node class {cls!r}{hint} (its classes: {listed})."
        raise EditRejected(msg)
    if name in (START, END) or any(n.name == name for n in ir.nodes):
        msg = f"graph {ir.name!r} already has a node named {name!r}; give the new one a name."
        raise EditRejected(msg)
    new = ir.copy()
    new.nodes.append(
        NodeIR(
            name=name,
            cls=cls,
            inputs=[Port(p.name, p.type) for p in found.inputs],
            outputs=[Port(p.name, p.type) for p in found.outputs],
            has_hole=found.has_hole,
            hole=found.hole,
            line=found.line,
        )
    )
    new.added.append(name)
    return EditResult(new, {"op": "remove_node", "args": {"name": name}})


def _splice_args(args: Mapping[str, Any], op: str, ir: GraphIR) -> tuple[str, str, str]:
    node = _str(args, "node", op)
    src = _str(args, "source", op)
    dst = _str(args, "target", op)
    _check_known(ir, node, f"{op} node")
    for name, role in ((src, "edge source"), (dst, "edge target")):
        _check_known(ir, name, role)
    return node, src, dst


def _splice_node(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    del source
    node, src, dst = _splice_args(args, "splice_node", ir)
    for edge in ir.edges:
        if edge.source == node and edge.kind in ("conditional", "dynamic"):
            msg = (
                f"{node!r} routes through `{edge.path}`, so it cannot also go on to {dst!r} by "
                "a plain edge; drop a node without routes on the wire."
            )
            raise EditRejected(msg)
        if edge.kind == "sequential" and (edge.source, edge.target) in ((src, node), (node, dst)):
            msg = f"{edge.source!r} → {edge.target!r} is wired already; nothing to splice."
            raise EditRejected(msg)
    new = edits.splice_node(ir, node, src, dst)
    inverse = {"op": "unsplice_node", "args": {"node": node, "source": src, "target": dst}}
    return EditResult(new, inverse)


def _unsplice_node(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    del source
    node, src, dst = _splice_args(args, "unsplice_node", ir)
    if any(e.kind == "sequential" and (e.source, e.target) == (src, dst) for e in ir.edges):
        msg = f"the graph already has the edge {src!r} → {dst!r}."
        raise EditRejected(msg)
    new = edits.unsplice_node(ir, node, src, dst)
    inverse = {"op": "splice_node", "args": {"node": node, "source": src, "target": dst}}
    return EditResult(new, inverse)


def _edge_text(edge: EdgeIR) -> str:
    if edge.kind == "join":
        return f"{edge.sources!r} → {edge.target} (a join: pass join: true)"
    return f"{edge.source} → {edge.target}"


def _rename_node(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    del source
    old = _str(args, "old", "rename_node")
    new_name = _str(args, "new", "rename_node")
    new = edits.rename_node(ir, old, new_name)
    stub = (old, new_name) if _stub_rename.follows(ir, old, new_name) else None
    inverse = {"op": "rename_node", "args": {"old": new_name, "new": old}}
    return EditResult(new, inverse, (old, new_name), stub=stub)


def _set_defer(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    del source
    node_name = _str(args, "node", "set_defer")
    defer = args.get("defer")
    if not isinstance(defer, bool):
        msg = f"set_defer needs args.defer as true or false, got {defer!r}."
        raise BadEdit(msg)
    was = ir.node(node_name).defer
    new = edits.set_defer(ir, node_name, defer)
    return EditResult(new, {"op": "set_defer", "args": {"node": node_name, "defer": was}})


def _set_destinations(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    """``add(child, destinations=(...))`` of a subgraph node: ``args.destinations`` is a
    list of node names (``"__end__"`` for END), or null to drop the argument."""
    del source
    node_name = _str(args, "node", "set_destinations")
    wanted = args.get("destinations")
    if wanted is not None and (
        not isinstance(wanted, list) or not all(isinstance(d, str) for d in wanted)
    ):
        msg = (
            "set_destinations needs args.destinations as a list of node names (or null), "
            f"got {wanted!r}."
        )
        raise BadEdit(msg)
    was = ir.node(node_name).destinations
    new = edits.set_destinations(ir, node_name, wanted)
    inverse = {"op": "set_destinations", "args": {"node": node_name, "destinations": was}}
    return EditResult(new, inverse)


def _add_port(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    node_name = _str(args, "node", "add_port")
    side = _side(args, "add_port")
    port = _checked_port(_str(args, "name", "add_port"), _str(args, "type", "add_port"))
    node = ir.node(node_name)
    current = node.inputs if side == "in" else node.outputs
    if any(p.name == port.name for p in current):
        msg = f"node {node_name!r} already has an {side!r} port named {port.name!r}."
        raise EditRejected(msg)
    ports = [*current, port]
    if side == "in":
        _check_ports(node_name, [port], [], ir.state, source)
        new = edits.set_ports(ir, node_name, inputs=ports)
    else:
        _check_ports(node_name, [], [port], ir.state, source)
        new = edits.set_ports(ir, node_name, outputs=ports)
    inverse = {"op": "remove_port", "args": {"node": node_name, "side": side, "name": port.name}}
    return EditResult(new, inverse)


def _remove_port(ir: GraphIR, args: Mapping[str, Any], source: str) -> EditResult:
    del source
    node_name = _str(args, "node", "remove_port")
    side = _side(args, "remove_port")
    name = _str(args, "name", "remove_port")
    node = ir.node(node_name)
    current = node.inputs if side == "in" else node.outputs
    removed = next((p for p in current if p.name == name), None)
    if removed is None:
        names = ", ".join(repr(p.name) for p in current) or "none"
        msg = f"node {node_name!r} has no {side!r} port named {name!r} (its ports: {names})."
        raise EditRejected(msg)
    ports = [p for p in current if p.name != name]
    if side == "in":
        new = edits.set_ports(ir, node_name, inputs=ports)
    else:
        new = edits.set_ports(ir, node_name, outputs=ports)
    inverse = {
        "op": "add_port",
        "args": {"node": node_name, "side": side, "name": name, "type": removed.type},
    }
    return EditResult(new, inverse)


OPS: dict[str, Callable[[GraphIR, Mapping[str, Any], str], EditResult]] = {
    "add_node": _add_node,
    "add_edge": _add_edge,
    "add_join": _add_join,
    "add_route": _add_route,
    "relabel_route": _relabel_route,
    "add_loop": _add_loop,
    "add_fanout": _add_fanout,
    "place_node": _place_node,
    "splice_node": _splice_node,
    "unsplice_node": _unsplice_node,
    "remove_edge": _remove_edge,
    "rename_node": _rename_node,
    "set_defer": _set_defer,
    "set_destinations": _set_destinations,
    "add_port": _add_port,
    "remove_port": _remove_port,
    "remove_node": _remove_node,
    "restore": _restore_op,
}


def apply_op(ir: GraphIR, op: str, args: Mapping[str, Any], source: str) -> EditResult:
    """Apply one edit; :class:`BadEdit` (400), :class:`EditRejected` or the canvas's
    ``IRError`` (422) when it cannot be made."""
    handler = OPS.get(op)
    if handler is None:
        msg = f"unknown op {op!r}; the ops are: {', '.join(OPS)}."
        raise BadEdit(msg)
    return handler(ir, args, source)
