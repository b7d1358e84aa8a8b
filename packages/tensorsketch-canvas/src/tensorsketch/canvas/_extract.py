"""Code → canvas: read a file's graph into a :class:`~tensorsketch.canvas.ir.GraphIR`.

Extraction is purely syntactic: the module is parsed, never imported or run. That is what
lets the canvas show a graph while it is still being written — undefined names, missing
imports and ``raise Hole(...)`` bodies are all fine.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from tensorsketch.canvas._class_edits import class_key
from tensorsketch.canvas._classes import NodeClass, find_node_classes, schema_fields
from tensorsketch.canvas._routes import module_functions, possible_routes
from tensorsketch.canvas._source import ParsedSource, parse_source
from tensorsketch.canvas._wiring import GraphModel, NodeDecl, find_graphs
from tensorsketch.canvas.exceptions import GraphNotFoundError
from tensorsketch.canvas.ir import EdgeIR, GraphIR, NodeIR, Port, clone

__all__ = ["extract", "extract_all", "graph_names"]


def extract(source: str, graph: str | None = None, *, filename: str = "<source>") -> GraphIR:
    """The graph a source file defines, as a GraphIR.

    :param source: the text of a Python module.
    :param graph: which graph, when the file has several — the name of the variable holding it
        (the compiled graph, ``app = g.compile()``, or the builder, ``g``) or of the function
        returning it. Without it, the first graph in the file is read.
    :param filename: what a parse error calls the file (its path, when there is one).
    :raises GraphNotFoundError: the file has no ``Graph(...)`` builder, or none by that name.
    :raises SourceParseError: the file is not valid Python.
    """
    src = parse_source(source, filename=filename)
    models = find_graphs(src)
    model = select(models, graph)
    return build_ir(src, model, find_node_classes(src), models)


def extract_all(source: str, *, filename: str = "<source>") -> list[GraphIR]:
    """Every graph of a source file, in the order their builders appear (``filename`` as in
    :func:`extract`)."""
    src = parse_source(source, filename=filename)
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
) -> GraphIR:
    """Fold a graph's wiring items into its GraphIR (and read where its dynamic routes go).
    ``models``: the file's graphs, for a node that is one of them (a subgraph)."""
    nodes: list[NodeIR] = []
    edges: list[EdgeIR] = []
    for item in model.items:
        for decl in item.nodes:
            cls = classes.get(decl.class_key)
            # Only `add(graph)` for now: a `g.nodes(graph)` handle is named after the
            # variable, which the >> writer relies on (the engine names it after the graph).
            child = (
                _subgraph(decl.class_key, model, models)
                if cls is None and item.kind == "add"
                else None
            )
            if child is not None:
                nodes.append(_subgraph_node(src, decl, model, child))
                continue
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
                )
            )
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


def commands(nodes: Sequence[NodeIR], classes: dict[str, NodeClass]) -> list[EdgeIR]:
    """The ``command`` edges: each node's declared ``destinations``, as its class says them
    (a subgraph node or a class defined elsewhere declares none that the file shows)."""
    found: list[EdgeIR] = []
    for node in nodes:
        cls = classes.get(class_key(node.cls)) if node.subgraph is None else None
        for target in (cls.destinations or []) if cls is not None else []:
            found.append(EdgeIR(node.name, target, "command"))
    return found


def _subgraph(key: str, parent: GraphModel, models: Sequence[GraphModel]) -> GraphModel | None:
    """The file's graph a node argument names (``add(research_app)``), if it is one."""
    for model in models:
        if model is not parent and key in model.names:
            return model
    return None


def _subgraph_node(
    src: ParsedSource, decl: NodeDecl, parent: GraphModel, child: GraphModel
) -> NodeIR:
    """A subgraph node: named after its graph unless ``add(..., name=...)`` says otherwise,
    its ports the fields its state shares with the parent's (as the engine reads them)."""
    name = decl.name
    if not decl.named:
        name = child.graph_name or f"Graph[{child.state}]"
    mine = _state_fields(src, parent.state)
    ports = [p for p in _state_fields(src, child.state) if p.name in {m.name for m in mine}]
    return NodeIR(
        name=name,
        cls=decl.cls,
        inputs=[clone(p) for p in ports],
        outputs=[clone(p) for p in ports],
        retry=decl.retry,
        timeout=decl.timeout,
        subgraph=child.name,
        cache=decl.cache,
        defer=decl.defer,
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
