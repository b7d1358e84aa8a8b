"""Code → canvas: read a file's graph into a :class:`~tensorsketch.canvas.ir.GraphIR`.

Extraction is purely syntactic: the module is parsed, never imported or run. That is what
lets the canvas show a graph while it is still being written — undefined names, missing
imports and ``raise Hole(...)`` bodies are all fine.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import libcst as cst

from tensorsketch.canvas import _modules
from tensorsketch.canvas._agent_loop import AGENT_FIELDS, agent_loop, loop_graph
from tensorsketch.canvas._class_edits import class_key
from tensorsketch.canvas._classes import NodeClass, find_node_classes, schema_fields
from tensorsketch.canvas._routes import module_functions, possible_routes
from tensorsketch.canvas._source import ParsedSource, parse_source
from tensorsketch.canvas._wiring import GraphModel, NodeDecl, find_graphs
from tensorsketch.canvas.exceptions import GraphNotFoundError
from tensorsketch.canvas.ir import EdgeIR, GraphIR, NodeIR, Port, clone

__all__ = ["extract", "extract_all", "graph_names"]


def extract(
    source: str,
    graph: str | None = None,
    *,
    filename: str = "<source>",
    path: str | os.PathLike[str] | None = None,
    root: str | os.PathLike[str] | None = None,
) -> GraphIR:
    """The graph a source file defines, as a GraphIR.

    :param source: the text of a Python module.
    :param graph: which graph, when the file has several — the name of the variable holding it
        (the compiled graph, ``app = g.compile()``, or the builder, ``g``) or of the function
        returning it. Without it, the first graph in the file is read.
    :param filename: what a parse error calls the file (its path, when there is one).
    :param path: where the file lives. With it, a subgraph imported from another module of
        the project (``from myapp.research import research_app``, relative imports too) is
        read from that module's file — parsed, never imported — and nested in the node.
    :param root: the project root absolute imports resolve against (default: the file's
        folder); ``NodeIR.subgraph_file`` is relative to it.
    :raises GraphNotFoundError: the file has no ``Graph(...)`` builder, or none by that name.
    :raises SourceParseError: the file is not valid Python.
    """
    src = parse_source(source, filename=filename)
    src.origin = _modules.Origin.of(path, root) if path is not None else None
    models = find_graphs(src)
    model = select(models, graph)
    return build_ir(src, model, find_node_classes(src), models)


def extract_all(
    source: str,
    *,
    filename: str = "<source>",
    path: str | os.PathLike[str] | None = None,
    root: str | os.PathLike[str] | None = None,
) -> list[GraphIR]:
    """Every graph of a source file, in the order their builders appear (``filename``,
    ``path`` and ``root`` as in :func:`extract`)."""
    src = parse_source(source, filename=filename)
    src.origin = _modules.Origin.of(path, root) if path is not None else None
    classes = find_node_classes(src)
    models = find_graphs(src)
    return [build_ir(src, model, classes, models) for model in models]


def graph_names(source: str, *, filename: str = "<source>") -> list[str]:
    """The names of the graphs a file defines (each usable as ``extract(source, graph=...)``;
    ``filename`` as in :func:`extract`)."""
    return [model.name for model in find_graphs(parse_source(source, filename=filename))]


def select(models: list[GraphModel], graph: str | None) -> GraphModel:
    """Pick the model called ``graph`` (by any of its names), or the first one."""
    if not models:
        msg = (
            "no graph builder found: the file has no `Graph(State)` assigned to a name (or "
            "returned from a function); add one, e.g. `g = Graph(State)`, to wire nodes."
        )
        raise GraphNotFoundError(msg)
    if graph is None:
        return models[0]
    for model in models:
        if model.name == graph:
            return model
    for model in models:
        if graph in model.names:
            return model
    known = ", ".join(repr(m.name) for m in models)
    msg = f"no graph named {graph!r} in this file; its graphs are: {known}."
    raise GraphNotFoundError(msg)


def build_ir(
    src: ParsedSource,
    model: GraphModel,
    classes: dict[str, NodeClass],
    models: Sequence[GraphModel] = (),
    depth: int = 0,
) -> GraphIR:
    """Fold a graph's wiring items into its GraphIR (and read where its dynamic routes go).
    ``models``: the file's graphs, for a node that is one of them (a subgraph); ``depth``:
    how deep in subgraphs this graph is (nesting stops at :data:`MAX_DEPTH`)."""
    nodes: list[NodeIR] = []
    edges: list[EdgeIR] = []
    looked_up: dict[object, object] = {}  # imports followed, files found and read
    renamed: dict[str, str] = {}  # a bare `g.nodes(graph)` entry: its variable -> its name
    for item in model.items:
        for decl in item.nodes:
            cls = classes.get(decl.class_key)
            # `add(graph)`, `g.nodes(("Name", graph))` and a bare `g.nodes(graph)`, named
            # after the graph as the engine names it (its handle then stands for that name)
            if cls is None and item.kind in ("add", "nodes"):
                written = decl.name
                sub = _subgraph_of(src, decl, model, models, classes, depth, looked_up)
                bare = item.kind == "nodes" and not decl.named
                if sub is not None and not (bare and sub.subgraph_error is not None):
                    nodes.append(sub)
                    if bare and sub.name != written:
                        renamed[written] = sub.name
                    continue
                decl.name = written
            nodes.append(
                NodeIR(
                    name=decl.name,
                    cls=decl.cls,
                    inputs=[clone(p) for p in cls.inputs] if cls else [],
                    outputs=[clone(p) for p in cls.outputs] if cls else [],
                    has_hole=cls.has_hole if cls else False,
                    hole=cls.hole if cls else None,
                    line=cls.line if cls else None,
                    retry=decl.retry,
                    timeout=decl.timeout,
                    cache=decl.cache,
                    defer=decl.defer,
                    destinations=_copy(decl.destinations),
                )
            )
    if renamed:
        _follow_names(model, renamed)
    for item in model.items:
        edges.extend(item.edges)
    edges = [clone(e) for e in edges]
    dynamic = [edge for edge in edges if edge.kind == "dynamic"]
    if dynamic:
        functions = module_functions(src.module)
        names = {node.name for node in nodes}
        for edge in dynamic:
            edge.routes = possible_routes(functions, edge.path, names)
    return GraphIR(
        name=model.name,
        state=model.state,
        nodes=nodes,
        edges=edges,
        style=model.style,
        interrupt_before=_copy(model.breakpoints.get("interrupt_before", [])),
        interrupt_after=_copy(model.breakpoints.get("interrupt_after", [])),
        commands=commands(nodes, classes),
    )


def _follow_names(model: GraphModel, renamed: dict[str, str]) -> None:
    """A bare ``g.nodes(graph)`` handle stands for the graph's own name: the wiring read
    through it says that name (in the model, so the write-back reuses its items)."""
    for item in model.items:
        for var, name in item.handles.items():
            item.handles[var] = renamed.get(name, name)
        for edge in item.edges:
            if edge.kind == "custom":
                continue
            edge.source = renamed.get(edge.source or "", edge.source)
            edge.target = renamed.get(edge.target or "", edge.target)
            edge.then = renamed.get(edge.then or "", edge.then)
            if edge.sources is not None:
                edge.sources = [renamed.get(n, n) for n in edge.sources]
    for var, name in model.handles.items():
        model.handles[var] = renamed.get(name, name)


def commands(nodes: Sequence[NodeIR], classes: dict[str, NodeClass]) -> list[EdgeIR]:
    """The ``command`` edges: each node's declared ``destinations``, as its class says them,
    or as ``add(child, destinations=(...))`` says them for a subgraph node (a class defined
    elsewhere declares none that the file shows)."""
    found: list[EdgeIR] = []
    for node in nodes:
        if node.destinations is not None:
            found.extend(EdgeIR(node.name, target, "command") for target in node.destinations)
            continue
        cls = classes.get(class_key(node.cls)) if node.subgraph is None else None
        for target in (cls.destinations or []) if cls is not None else []:
            found.append(EdgeIR(node.name, target, "command"))
    return found


#: How deep nested subgraphs are read into ``NodeIR.child`` (a guard against a module
#: cycle, which Python itself would refuse at import time).
MAX_DEPTH = 8


def _subgraph_of(
    src: ParsedSource,
    decl: NodeDecl,
    parent: GraphModel,
    models: Sequence[GraphModel],
    classes: dict[str, NodeClass],
    depth: int,
    looked_up: dict[object, object],
) -> NodeIR | None:
    """The subgraph node ``add(decl)`` makes, or ``None`` for a plain node: a graph of this
    file, the decomposed agent loop, or a graph another module of the project defines
    (``looked_up`` keeps what each imported expression resolved to, for this graph)."""
    local = _subgraph(decl.class_key, parent, models)
    if local is not None:
        child = build_ir(src, local, classes, models, depth + 1) if depth < MAX_DEPTH else None
        return _subgraph_node(src, decl, parent, src, local, child)
    loop = _loop_call(src, decl.cls)
    if loop is not None:
        return _loop_node(src, decl, parent, agent_loop(src, loop) or "agent")
    if src.origin is None:
        return None
    key = ("expr", decl.cls)
    if key not in looked_up:
        looked_up[key] = _modules.resolve(src, src.origin, decl.cls, memo=looked_up)
    found = looked_up[key]
    if not isinstance(found, _modules.Resolved):
        return None
    if found.module is not None and found.model is not None:
        other = found.module
        child = (
            build_ir(other.src, found.model, other.classes, other.models, depth + 1)
            if depth < MAX_DEPTH
            else None
        )
        node = _subgraph_node(src, decl, parent, other.src, found.model, child)
        node.subgraph_file = src.origin.relative(other.origin.path)
        return node
    if found.module is not None and found.call is not None:
        name = agent_loop(found.module.src, found.call)
        if name is not None:
            return _loop_node(src, decl, parent, name)
        where = src.origin.relative(found.module.origin.path)
        reason = f"{where}: {decl.cls!r} is not a `Graph(...)` the canvas can read (built by code)"
        return _opaque(decl, reason)
    return _opaque(decl, found.reason or f"cannot read {decl.cls!r}")


def _subgraph(key: str, parent: GraphModel, models: Sequence[GraphModel]) -> GraphModel | None:
    """The file's graph a node argument names (``add(research_app)``), if it is one."""
    for model in models:
        if model is not parent and key in model.names:
            return model
    return None


def _subgraph_node(
    src: ParsedSource,
    decl: NodeDecl,
    parent: GraphModel,
    child_src: ParsedSource,
    child: GraphModel,
    nested: GraphIR | None,
) -> NodeIR:
    """A subgraph node: named after its graph unless ``add(..., name=...)`` says otherwise,
    its ports the fields its state shares with the parent's (as the engine reads them).
    ``child_src`` is the file that defines the child graph (this one, or another module)."""
    name = decl.name
    if not decl.named:
        # the engine names it after its graph: so does the declaration, for the write-back
        name = decl.name = decl.derived_name = child.graph_name or f"Graph[{child.state}]"
    mine = {m.name for m in _state_fields(src, parent.state)}
    ports = [p for p in _state_fields(child_src, child.state) if p.name in mine]
    node = _node_of(decl, name, ports)
    node.subgraph = child.name
    node.child = nested
    return node


def _loop_call(src: ParsedSource, text: str) -> cst.Call | None:
    """The call ``add(...)``'s argument is, or the one a module-level name was assigned."""
    if "decompose" not in src.text:  # neither loop function is named: the common case
        return None
    try:
        expr = cst.parse_expression(text)
    except cst.ParserSyntaxError:
        return None
    if isinstance(expr, cst.Name):
        call = _modules.assigned_call(src.module, expr.value)
        return call if call is not None and agent_loop(src, call) is not None else None
    return expr if isinstance(expr, cst.Call) and agent_loop(src, expr) is not None else None


def _loop_node(src: ParsedSource, decl: NodeDecl, parent: GraphModel, agent: str) -> NodeIR:
    """``add(decompose(agent))``: a subgraph node named after the agent, drawn as the
    loop's ``model`` and ``tools`` nodes (``_agent_loop``)."""
    fields = _state_fields(src, parent.state)
    if not fields and parent.state is not None and class_key(parent.state) == "AgentState":
        fields = list(AGENT_FIELDS)  # `Graph(AgentState)`: the library's own state
    mine = {m.name for m in fields}
    node = _node_of(
        decl, decl.name if decl.named else agent, [p for p in AGENT_FIELDS if p.name in mine]
    )
    node.subgraph = agent
    node.child = loop_graph(agent)
    return node


def _opaque(decl: NodeDecl, reason: str) -> NodeIR:
    """A subgraph the canvas cannot read: one box, named as written, that says why."""
    node = _node_of(decl, decl.name, [])
    node.subgraph = decl.cls
    node.subgraph_error = reason
    return node


def _node_of(decl: NodeDecl, name: str, ports: Sequence[Port]) -> NodeIR:
    return NodeIR(
        name=name,
        cls=decl.cls,
        inputs=[clone(p) for p in ports],
        outputs=[clone(p) for p in ports],
        retry=decl.retry,
        timeout=decl.timeout,
        cache=decl.cache,
        defer=decl.defer,
        destinations=_copy(decl.destinations),
    )


def _state_fields(src: ParsedSource, state: str | None) -> list[Port]:
    """The fields of the module-level ``Schema`` class named ``state`` (none if not found)."""
    if state is None:
        return []
    for stmt in src.module.body:
        if isinstance(stmt, cst.ClassDef) and stmt.name.value == state:
            return [_plain(src, port) for port, _ in schema_fields(src, stmt)]
    return []


def _plain(src: ParsedSource, port: Port) -> Port:
    """The port a state field makes: ``Annotated[T, Reducer(...)]`` is a ``T`` port, as the
    engine sees it (the channel marker belongs to the state, not to the port)."""
    try:
        expr = cst.parse_expression(port.type)
    except cst.ParserSyntaxError:
        return port
    if (
        isinstance(expr, cst.Subscript)
        and _name_of(expr.value) == "Annotated"
        and expr.slice
        and isinstance(expr.slice[0].slice, cst.Index)
    ):
        return Port(port.name, src.code(expr.slice[0].slice.value))
    return port


def _name_of(expr: cst.BaseExpression) -> str | None:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return None


def _copy(names: list[str] | None) -> list[str] | None:
    return None if names is None else list(names)
