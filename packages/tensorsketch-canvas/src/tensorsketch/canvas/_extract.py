"""Code → canvas: read a file's graph into a :class:`~tensorsketch.canvas.ir.GraphIR`.

Extraction is purely syntactic: the module is parsed, never imported or run. That is what
lets the canvas show a graph while it is still being written — undefined names, missing
imports and ``raise Hole(...)`` bodies are all fine.
"""

from __future__ import annotations

from tensorsketch.canvas._classes import NodeClass, find_node_classes
from tensorsketch.canvas._routes import module_functions, possible_routes
from tensorsketch.canvas._source import ParsedSource, parse_source
from tensorsketch.canvas._wiring import GraphModel, find_graphs
from tensorsketch.canvas.exceptions import GraphNotFoundError
from tensorsketch.canvas.ir import EdgeIR, GraphIR, NodeIR, clone

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
    return build_ir(src, model, find_node_classes(src))


def extract_all(source: str, *, filename: str = "<source>") -> list[GraphIR]:
    """Every graph of a source file, in the order their builders appear (``filename`` as in
    :func:`extract`)."""
    src = parse_source(source, filename=filename)
    classes = find_node_classes(src)
    return [build_ir(src, model, classes) for model in find_graphs(src)]


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


def build_ir(src: ParsedSource, model: GraphModel, classes: dict[str, NodeClass]) -> GraphIR:
    """Fold a graph's wiring items into its GraphIR (and read where its dynamic routes go)."""
    nodes: list[NodeIR] = []
    edges: list[EdgeIR] = []
    for item in model.items:
        for decl in item.nodes:
            cls = classes.get(decl.class_key)
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
    )


def _copy(names: list[str] | None) -> list[str] | None:
    return None if names is None else list(names)
