"""The wiring walk: find each graph builder and read its wiring as an ordered list of items.

One walk serves both directions. ``extract`` folds the items into a GraphIR; ``reconstruct``
diffs them against the edited IR, keeps the untouched ones byte-for-byte and re-renders only
the rest. An *item* is the smallest piece of wiring the source wrote as one unit: one link of
a fluent chain (``.edge(START, "A")``), one statement (``g.edge("A", "B")``,
``START >> a >> b``, ``a, b = g.nodes(A, B)``), or one opaque custom element.

Everything is read syntactically. A piece of wiring the walk cannot model exactly becomes a
``custom`` item holding its source verbatim, so nothing is ever dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import libcst as cst

from tensorsketch.canvas._breakpoints import read_breakpoints
from tensorsketch.canvas._classes import string_value
from tensorsketch.canvas._source import Chain, Link, ParsedSource, deep_recursion
from tensorsketch.canvas._stmts import walk_statements
from tensorsketch.canvas.ir import END, LOOP_EXIT, LOOP_REPEAT, START, BranchKind, EdgeIR, Style

__all__ = ["Container", "GraphModel", "Item", "NodeDecl", "find_graphs", "join_edge"]

BUILDER_METHODS = frozenset(
    {"add", "edge", "entry", "conditional", "router", "loop", "nodes", "map", "parallel"}
)

ItemKind = Literal["add", "nodes", "handle", "edge", "custom"]


@dataclass
class NodeDecl:
    """A node the graph adds: its graph name and the class expression as written."""

    name: str
    cls: str
    class_key: str
    #: ``add(..., retry=..., timeout=...)`` as written (shown on the node, never edited).
    retry: str | None = None
    timeout: str | None = None
    #: Whether ``add(..., name=...)`` named the node (a subgraph's default is its graph's name).
    named: bool = False
    #: ``add(..., cache=...)`` as written (shown on the node, never edited).
    cache: str | None = None
    #: ``add(..., defer=True)``.
    defer: bool = False
    #: ``add(child, destinations=(...))`` as node names (``END`` as ``"__end__"``).
    destinations: list[str] | None = None
    #: The name a subgraph node without ``name=`` takes from its graph (set when the graph is
    #: read): a node of that name is written back without ``name=``, as it was.
    derived_name: str | None = None
    #: A subgraph's ``inputs=...`` / ``outputs=...`` arguments as written (kept on rewrite).
    mappings: tuple[str, ...] = ()


@dataclass
class Container:
    """A chain whose links are items: the builder chain, or a multi-link statement chain."""

    stmt_index: int
    chain: Chain
    expr: cst.BaseExpression
    compile_link: Link | None
    creation: bool


@dataclass
class Item:
    """One unit of wiring and what it contributes to the graph."""

    kind: ItemKind
    stmt_index: int
    nodes: list[NodeDecl] = field(default_factory=list)
    edges: list[EdgeIR] = field(default_factory=list)
    handles: dict[str, str] = field(default_factory=dict)
    container: Container | None = None
    link: Link | None = None

    @property
    def stream(self) -> Literal["nodes", "edges", "none"]:
        if self.kind in ("add", "nodes"):
            return "nodes"
        if self.kind in ("edge", "custom"):
            return "edges"
        return "none"


def edge_key(edge: EdgeIR) -> tuple[object, ...]:
    """Everything that makes an edge this edge (for matching old wiring against the IR)."""
    sources = None if edge.sources is None else tuple(edge.sources)
    return (
        edge.source,
        edge.target,
        edge.kind,
        edge.path,
        edge.label,
        edge.branch,
        edge.code,
        sources,
        edge.then,
    )


def join_edge(sources: Sequence[str], target: str) -> EdgeIR | None:
    """The IR of ``edge([...], target)`` / ``[...] >> target``: a join of two or more distinct
    nodes into a node (one source is a plain edge); ``None`` for what the engine refuses."""
    if (
        not sources
        or START in sources
        or END in sources
        or target in (START, END)
        or len(set(sources)) != len(sources)
    ):
        return None
    if len(sources) == 1:
        return EdgeIR(sources[0], target)
    return EdgeIR(None, target, "join", sources=list(sources))


@dataclass
class GraphModel:
    """A graph builder found in the source, with its wiring items in source order."""

    name: str
    names: list[str]
    var: str | None
    state: str | None
    #: ``Graph(State, name="...")`` (``None``: the default, ``"Graph[State]"``).
    graph_name: str | None
    suite: cst.Module | cst.IndentedBlock
    creation_index: int
    creation: Container
    containers: dict[int, Container]
    items: list[Item]
    handles: dict[str, str]
    style: Style
    quote: str
    module_level: bool
    path: tuple[cst.CSTNode, ...] = ()
    #: Statements after the builder that compile it (``app = g.compile(...)``), by index.
    compile_stmts: list[int] = field(default_factory=list)
    #: ``interrupt_before`` / ``interrupt_after`` of the first compile call (see
    #: ``_breakpoints.read_breakpoints``).
    breakpoints: dict[str, list[str] | None] = field(default_factory=dict)


# -- small readers ---------------------------------------------------------------------------


def _bind(
    call: cst.Call, positional: Sequence[str], keywords: Sequence[str]
) -> dict[str, cst.BaseExpression] | None:
    """Match a call's arguments to parameter names; ``None`` if it cannot be done statically."""
    bound: dict[str, cst.BaseExpression] = {}
    index = 0
    for arg in call.args:
        if arg.star:
            return None
        if arg.keyword is None:
            if index >= len(positional):
                return None
            bound[positional[index]] = arg.value
            index += 1
        else:
            name = arg.keyword.value
            if name not in keywords or name in bound:
                return None
            bound[name] = arg.value
    return bound


def _last_name(expr: cst.BaseExpression) -> str | None:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    if isinstance(expr, cst.Call):
        return _last_name(expr.func)
    return None


def _is_graph_call(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Call) and (
        (isinstance(expr.func, cst.Name) and expr.func.value == "Graph")
        or (isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "Graph")
    )


def _decompose(expr: cst.BaseExpression) -> tuple[cst.BaseExpression, list[cst.Call]]:
    calls: list[cst.Call] = []
    current = expr
    while (
        isinstance(current, cst.Call)
        and isinstance(current.func, cst.Attribute)
        and not _is_graph_call(current)
    ):
        calls.append(current)
        current = current.func.value
    calls.reverse()
    return current, calls


def _link_body(src: ParsedSource, call: cst.Call) -> str:
    assert isinstance(call.func, cst.Attribute)
    stub = call.with_changes(func=call.func.with_changes(value=cst.Name("_")), lpar=(), rpar=())
    with deep_recursion():
        text = src.module.code_for_node(stub)
    return src.unmask(text)[1:]


# -- the walker ------------------------------------------------------------------------------


class _Walk:
    """Reads the wiring of one graph, statement by statement."""

    def __init__(self, src: ParsedSource, var: str | None) -> None:
        self.src = src
        self.var = var
        self.handles: dict[str, str] = {}
        self.quote: str | None = None

    # references --------------------------------------------------------------------------

    def ref(self, expr: cst.BaseExpression) -> str | None:
        """A node name from a reference: ``"A"``, ``START``/``END``, a handle, ``g["A"]``."""
        value = string_value(expr)
        if value is not None:
            if self.quote is None and isinstance(expr, cst.SimpleString):
                self.quote = expr.quote[-1]
            return value
        name = _last_name(expr) if isinstance(expr, cst.Name | cst.Attribute) else None
        if name == "START":
            return START
        if name == "END":
            return END
        if isinstance(expr, cst.Name) and expr.value in self.handles:
            return self.handles[expr.value]
        return self.subscript(expr)

    def subscript(self, expr: cst.BaseExpression) -> str | None:
        if (
            isinstance(expr, cst.Subscript)
            and isinstance(expr.value, cst.Name)
            and expr.value.value == self.var
            and len(expr.slice) == 1
            and isinstance(expr.slice[0].slice, cst.Index)
        ):
            return string_value(expr.slice[0].slice.value)
        return None

    def is_handle(self, expr: cst.BaseExpression) -> bool:
        if isinstance(expr, cst.Name) and expr.value in self.handles:
            return True
        if isinstance(expr, cst.List | cst.Tuple):
            return any(self.is_handle(el.value) for el in expr.elements)
        return self.subscript(expr) is not None

    # builder calls -----------------------------------------------------------------------

    def call(self, method: str, call: cst.Call, stmt_index: int) -> Item | None:
        """The item for one builder call, or ``None`` when it cannot be modelled."""
        if method == "add":
            return self._add(call, stmt_index)
        if method == "nodes":
            decls = self._classes(call)
            return None if decls is None else Item("nodes", stmt_index, nodes=decls)
        if method in ("edge", "entry"):
            if method == "edge":
                bound = _bind(call, ("src", "dst"), ("src", "dst"))
                if bound is None or len(bound) != 2:
                    return None
                if isinstance(bound["src"], cst.List | cst.Tuple):
                    names = self._group(bound["src"])
                    target = self.ref(bound["dst"])
                    join = None if names is None or target is None else join_edge(names, target)
                    return None if join is None else Item("edge", stmt_index, edges=[join])
                src, dst = self.ref(bound["src"]), self.ref(bound["dst"])
            else:
                bound = _bind(call, ("name",), ("name",))
                if bound is None or len(bound) != 1:
                    return None
                src, dst = START, self.ref(bound["name"])
            if src is None or dst is None or src == END or dst == START:
                return None
            return Item("edge", stmt_index, edges=[EdgeIR(src, dst)])
        if method in ("conditional", "router"):
            edges = self._branch(method, call)
            return None if edges is None else Item("edge", stmt_index, edges=edges)
        if method == "loop":
            edges = self._loop(call)
            return None if edges is None else Item("edge", stmt_index, edges=edges)
        if method == "map":
            edge = self._map(call)
            return None if edge is None else Item("edge", stmt_index, edges=[edge])
        if method == "parallel":
            edge = self._parallel(call)
            return None if edge is None else Item("edge", stmt_index, edges=[edge])
        return None

    def _then(self, bound: dict[str, cst.BaseExpression]) -> tuple[bool, str | None]:
        """``then=`` of a map or parallel: (readable, the node or ``None`` when not written)."""
        if "then" not in bound:
            return True, None
        then = self.ref(bound["then"])
        return then is not None and then != START, then

    def _map(self, call: cst.Call) -> EdgeIR | None:
        bound = _bind(call, ("src", "node"), ("src", "node", "over", "item", "then"))
        if bound is None or not {"src", "node", "over", "item"} <= bound.keys():
            return None
        src, node = self.ref(bound["src"]), self.ref(bound["node"])
        over, item = string_value(bound["over"]), string_value(bound["item"])
        readable, then = self._then(bound)
        if (
            src is None
            or node is None
            or src == END
            or node in (START, END)
            or not over
            or not item
            or not readable
        ):
            return None
        return EdgeIR(src, node, "map", path=over, label=item, then=then)

    def _parallel(self, call: cst.Call) -> EdgeIR | None:
        bound = _bind(call, ("src", "nodes"), ("src", "nodes", "then"))
        if bound is None or not {"src", "nodes"} <= bound.keys():
            return None
        src = self.ref(bound["src"])
        nodes_expr = bound["nodes"]
        names = self._group(nodes_expr) if isinstance(nodes_expr, cst.List | cst.Tuple) else None
        readable, then = self._then(bound)
        if (
            src is None
            or src == END
            or names is None
            or len(names) < 2
            or len(set(names)) != len(names)
            or START in names
            or END in names
            or not readable
        ):
            return None
        return EdgeIR(src, None, "parallel", sources=names, then=then)

    def _add(self, call: cst.Call, stmt_index: int) -> Item | None:
        bound = _bind(
            call,
            ("node",),
            (
                "node",
                "name",
                "retry",
                "timeout",
                "cache",
                "defer",
                "inputs",
                "outputs",
                "destinations",
            ),
        )
        if bound is None or "node" not in bound:
            return None
        destinations = None
        if "destinations" in bound:
            destinations = self._names(bound["destinations"])
            if destinations is None:
                return None  # computed destinations: kept as custom wiring, as written
        defer = False
        if "defer" in bound:
            flag = bound["defer"]
            if not (isinstance(flag, cst.Name) and flag.value in ("True", "False")):
                return None  # a computed flag: kept as custom wiring, as written
            defer = flag.value == "True"
        cls_expr = bound["node"]
        key = _last_name(cls_expr)
        if (
            isinstance(cls_expr, cst.Call)
            and not cls_expr.args
            and isinstance(cls_expr.func, cst.Attribute)
            and cls_expr.func.attr.value == "compile"
        ):
            key = _last_name(cls_expr.func.value)  # `add(team.compile())`: the graph `team`
        if key is None or (
            isinstance(cls_expr, cst.Call)
            and not isinstance(cls_expr.func, cst.Name | cst.Attribute)
        ):
            return None
        name = key
        if "name" in bound:
            alias = string_value(bound["name"])
            if alias is None:
                return None
            if self.quote is None and isinstance(bound["name"], cst.SimpleString):
                self.quote = bound["name"].quote[-1]
            name = alias
        decl = NodeDecl(
            name=name,
            cls=self.src.code(cls_expr),
            class_key=key,
            retry=self.src.code(bound["retry"]) if "retry" in bound else None,
            timeout=self.src.code(bound["timeout"]) if "timeout" in bound else None,
            named="name" in bound,
            cache=self.src.code(bound["cache"]) if "cache" in bound else None,
            defer=defer,
            destinations=destinations,
            mappings=tuple(
                f"{key}={self.src.code(bound[key])}"
                for key in ("inputs", "outputs")
                if key in bound
            ),
        )
        return Item("add", stmt_index, nodes=[decl])

    def _names(self, expr: cst.BaseExpression) -> list[str] | None:
        """A literal tuple or list of node names (strings, ``END``), or ``None``."""
        if not isinstance(expr, cst.Tuple | cst.List):
            return None
        names: list[str] = []
        for el in expr.elements:
            if isinstance(el, cst.StarredElement):
                return None
            name = self.ref(el.value)
            if name is None or name == START or self.is_handle(el.value):
                return None
            names.append(name)
        return names

    def _classes(self, call: cst.Call) -> list[NodeDecl] | None:
        """The entries of ``g.nodes(A, ("Name", B))``: a class, or a (name, class) pair."""
        decls: list[NodeDecl] = []
        for arg in call.args:
            if arg.star or arg.keyword is not None:
                return None
            value, name = arg.value, None
            if isinstance(value, cst.Tuple):
                elements = value.elements
                if len(elements) != 2 or any(isinstance(el, cst.StarredElement) for el in elements):
                    return None
                name = string_value(elements[0].value)
                if name is None:
                    return None
                value = elements[1].value
            key = _last_name(value)
            if key is None:
                return None
            decls.append(
                NodeDecl(
                    name=name or key,
                    cls=self.src.code(value),
                    class_key=key,
                    named=name is not None,
                )
            )
        return decls or None

    def _targets(self, expr: cst.BaseExpression) -> list[tuple[str, str]] | None:
        if isinstance(expr, cst.Dict):
            pairs: list[tuple[str, str]] = []
            for element in expr.elements:
                if not isinstance(element, cst.DictElement):
                    return None
                key = string_value(element.key)
                target = self.ref(element.value)
                if key is None or target is None or target == START:
                    return None
                pairs.append((key, target))
        elif isinstance(expr, cst.List | cst.Tuple):
            pairs = []
            for el in expr.elements:
                if isinstance(el, cst.StarredElement):
                    return None
                target = self.ref(el.value)
                if target is None or target == START:
                    return None
                pairs.append((target, target))
        else:
            return None
        labels = [label for label, _ in pairs]
        if not pairs or len(set(labels)) != len(labels):
            return None
        return pairs

    def _branch(self, method: str, call: cst.Call) -> list[EdgeIR] | None:
        bound = _bind(call, ("src", "path", "mapping"), ("src", "path", "mapping"))
        if bound is None or "src" not in bound or "path" not in bound:
            return None
        src = self.ref(bound["src"])
        if src is None or src == END:
            return None
        path = self.src.code(bound["path"])
        branch: BranchKind = "router" if method == "router" else "conditional"
        mapping = bound.get("mapping")
        if mapping is None or (isinstance(mapping, cst.Name) and mapping.value == "None"):
            return [EdgeIR(src, None, "dynamic", path=path, branch=branch)]
        pairs = self._targets(mapping)
        if pairs is None:
            return None
        return [
            EdgeIR(src, target, "conditional", path=path, label=label, branch=branch)
            for label, target in pairs
        ]

    def _loop(self, call: cst.Call) -> list[EdgeIR] | None:
        bound = _bind(call, ("node", "until"), ("node", "until", "exit"))
        if bound is None or "node" not in bound or "until" not in bound:
            return None
        node = self.ref(bound["node"])
        exit_to = self.ref(bound["exit"]) if "exit" in bound else END
        if node is None or exit_to is None or node in (START, END) or exit_to == START:
            return None
        path = self.src.code(bound["until"])
        return [
            EdgeIR(node, node, "conditional", path=path, label=LOOP_REPEAT, branch="loop"),
            EdgeIR(node, exit_to, "conditional", path=path, label=LOOP_EXIT, branch="loop"),
        ]

    # >> statements -----------------------------------------------------------------------

    def rshift(self, expr: cst.BaseExpression, stmt_index: int) -> Item | None:
        operands: list[cst.BaseExpression] = []
        current = expr
        while isinstance(current, cst.BinaryOperation) and isinstance(
            current.operator, cst.RightShift
        ):
            operands.append(current.right)
            current = current.left
        operands.append(current)
        operands.reverse()
        if len(operands) < 2 or not any(self.is_handle(op) for op in operands):
            return None
        edges: list[EdgeIR] = []
        for index in range(len(operands) - 1):
            left, right = operands[index], operands[index + 1]
            sources = self._group(left)
            if sources is None or END in sources:
                return None
            router = self._router(right)
            if router is not None:
                if index != len(operands) - 2 or len(sources) != 1:
                    return None
                path, pairs = router
                if pairs is None:
                    edges.append(EdgeIR(sources[0], None, "dynamic", path=path))
                else:
                    edges.extend(
                        EdgeIR(sources[0], target, "conditional", path=path, label=label)
                        for label, target in pairs
                    )
                continue
            targets = self._group(right)
            if targets is None or START in targets or (len(sources) > 1 and len(targets) > 1):
                return None
            if isinstance(left, cst.List | cst.Tuple) and not isinstance(
                right, cst.List | cst.Tuple
            ):
                # ``[a, b] >> c``: a wait-for-all join (one source: a plain edge)
                join = join_edge(sources, targets[0])
                if join is None:
                    return None
                edges.append(join)
                continue
            edges.extend(EdgeIR(s, t) for s in sources for t in targets)
        return Item("edge", stmt_index, edges=edges)

    def _group(self, expr: cst.BaseExpression) -> list[str] | None:
        if isinstance(expr, cst.List | cst.Tuple):
            names: list[str] = []
            for el in expr.elements:
                if isinstance(el, cst.StarredElement):
                    return None
                name = self.ref(el.value)
                if name is None:
                    return None
                names.append(name)
            return names or None
        name = self.ref(expr)
        return None if name is None else [name]

    def _router(self, expr: cst.BaseExpression) -> tuple[str, list[tuple[str, str]] | None] | None:
        if not isinstance(expr, cst.Call) or _last_name(expr.func) != "Router":
            return None
        if not expr.args or expr.args[0].keyword is not None or expr.args[0].star:
            return None
        path = self.src.code(expr.args[0].value)
        pairs: list[tuple[str, str]] = []
        for arg in expr.args[1:]:
            if arg.keyword is None or arg.star:
                return None
            target = self.ref(arg.value)
            if target is None or target == START:
                return None
            pairs.append((arg.keyword.value, target))
        return path, pairs or None

    # statements --------------------------------------------------------------------------

    def mentions(self, node: cst.CSTNode) -> bool:
        """Does a statement touch this graph's wiring (builder calls, handles in ``>>``)?"""
        finder = _Mentions(self)
        with deep_recursion():
            node.visit(finder)
        return finder.found


class _Mentions(cst.CSTVisitor):
    def __init__(self, walk: _Walk) -> None:
        self.walk = walk
        self.found = False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        if (
            isinstance(node.value, cst.Name)
            and node.value.value == self.walk.var
            and node.attr.value in BUILDER_METHODS
        ):
            self.found = True
        return not self.found

    def visit_Name(self, node: cst.Name) -> None:
        chain = self.walk.src.chains.get(node.value)
        if chain is not None and isinstance(chain.root, cst.Name):
            self.found = self.found or chain.root.value == self.walk.var

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> bool:
        if isinstance(node.operator, cst.RightShift) and (
            self.walk.is_handle(node.left) or self.walk.is_handle(node.right)
        ):
            self.found = True
        return not self.found


# -- finding graphs --------------------------------------------------------------------------


def _single(stmt: cst.BaseStatement) -> cst.BaseSmallStatement | None:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        return stmt.body[0]
    return None


def _assigned(small: cst.BaseSmallStatement) -> tuple[str | None, cst.BaseExpression] | None:
    """``(target, value)`` of ``x = value`` / ``x: T = value``; target ``None`` if not a name."""
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        target = small.targets[0].target
        return (target.value if isinstance(target, cst.Name) else None), small.value
    if isinstance(small, cst.AnnAssign) and small.value is not None:
        target = small.target
        return (target.value if isinstance(target, cst.Name) else None), small.value
    return None


def _synth_chain(src: ParsedSource, expr: cst.BaseExpression) -> Chain:
    """A Chain for an expression libcst parsed whole (not masked)."""
    root, calls = _decompose(expr)
    links = []
    for call in calls:
        assert isinstance(call.func, cst.Attribute)
        links.append(
            Link(method=call.func.attr.value, body=_link_body(src, call), trivia="", call=call)
        )
    return Chain(
        key="",
        placeholder="",
        text="",  # only masked chains need their original text back
        prefix="",
        root=root,
        root_text=src.code(root),
        links=links,
        indent="",
        line=0,
    )


def _as_chain(
    src: ParsedSource, expr: cst.BaseExpression, root_var: str | None = None
) -> Chain | None:
    """The chain ``expr`` is, if it is a builder chain (rooted at ``Graph(...)`` or
    ``root_var``); text is only synthesized for chains that qualify."""
    masked = src.chain(expr)
    if masked is not None:
        return masked
    root, calls = _decompose(expr)
    if _is_graph_call(root):
        return _synth_chain(src, expr)
    if calls and isinstance(root, cst.Name) and root_var is not None and root.value == root_var:
        return _synth_chain(src, expr)
    return None


def _creation(
    src: ParsedSource, stmt: cst.BaseStatement, function: str | None
) -> tuple[str | None, Chain, cst.BaseExpression, bool] | None:
    small = _single(stmt)
    if small is None:
        return None
    target: str | None
    if isinstance(small, cst.Return) and small.value is not None and function is not None:
        target, value, returned = function, small.value, True
    else:
        assigned = _assigned(small)
        if assigned is None or assigned[0] is None:
            return None
        target, value = assigned
        returned = False
    chain = _as_chain(src, value)
    if chain is None or not _is_graph_call(chain.root):
        return None
    methods = [link.method for link in chain.links]
    if "compile" in methods[:-1]:
        return None
    return target, chain, value, returned


def find_graphs(src: ParsedSource) -> list[GraphModel]:
    """Every graph builder of the file, in source order.

    Names are unique: a graph whose name an earlier graph already uses (``g`` built in two
    functions) is called ``function.g``, or ``g@line`` at module level.
    """
    graphs: list[GraphModel] = []
    seen: set[str] = set()
    for located in walk_statements(src.module):
        found = _creation(src, located.stmt, located.function)
        if found is not None:
            model = _read_graph(src, located.suite, located.index, found, located.function)
            model.path = located.path
            if model.name in seen:
                qualified = (
                    f"{located.function}.{model.name}"
                    if located.function and located.function != model.name
                    else f"{model.name}@{found[1].line}"
                )
                model.name = qualified
                model.names.append(qualified)
            seen.add(model.name)
            graphs.append(model)
    return graphs


def _read_graph(
    src: ParsedSource,
    suite: cst.Module | cst.IndentedBlock,
    index: int,
    found: tuple[str | None, Chain, cst.BaseExpression, bool],
    function: str | None,
) -> GraphModel:
    target, chain, expr, returned = found
    compiled = bool(chain.links) and chain.links[-1].method == "compile"
    var = None if (compiled or returned) else target
    walk = _Walk(src, var)
    creation = Container(
        stmt_index=index,
        chain=chain,
        expr=expr,
        compile_link=chain.links[-1] if compiled else None,
        creation=True,
    )
    items: list[Item] = []
    containers = {index: creation}
    _chain_items(walk, creation, items)

    state = None
    graph_name = None
    root = chain.root
    if isinstance(root, cst.Call):
        bound = _bind(root, ("state",), ("state", "name"))
        if bound is not None and "state" in bound:
            state = src.code(bound["state"])
        if bound is not None and "name" in bound:
            graph_name = string_value(bound["name"])

    names = [target] if target else [f"graph_{chain.line}"]
    compiles: list[tuple[int, cst.Call]] = []
    body = suite.body
    if var is not None:
        for i in range(index + 1, len(body)):
            stmt = body[i]
            small = _single(stmt)
            assigned = _assigned(small) if small is not None else None
            if assigned is not None and assigned[0] == var:
                vroot = _decompose(assigned[1])[0]
                if not (isinstance(vroot, cst.Name) and vroot.value == var):
                    break  # the variable now holds something else
                items.append(Item("custom", i, edges=[_custom(src.code(stmt))]))
                continue
            if assigned is not None and assigned[0] is not None:
                vroot, vcalls = _decompose(assigned[1])
                if (
                    isinstance(vroot, cst.Name)
                    and vroot.value == var
                    and len(vcalls) == 1
                    and isinstance(vcalls[0].func, cst.Attribute)
                    and vcalls[0].func.attr.value == "compile"
                ):
                    if assigned[0] not in names:
                        names.append(assigned[0])
                    compiles.append((i, vcalls[0]))
                    continue
            item_count = len(items)
            handled = _statement(walk, i, stmt, small, items, containers)
            if not handled and walk.mentions(stmt):
                del items[item_count:]
                containers.pop(i, None)
                items.append(Item("custom", i, edges=[_custom(src.code(stmt))]))

    # Prefer the compiled graph's name: it is what the module exports.
    name = names[1] if var is not None and len(names) > 1 else names[0]
    kinds = {item.kind for item in items}
    style: Style
    if (
        "nodes" in kinds
        or "handle" in kinds
        or any(_is_rshift_item(src, item, body) for item in items)
    ):
        style = "operator"
    elif var is None or any(item.container is creation for item in items):
        style = "fluent"
    else:
        style = "statement"
    return GraphModel(
        name=name,
        names=names,
        var=var,
        state=state,
        graph_name=graph_name,
        suite=suite,
        creation_index=index,
        creation=creation,
        containers=containers,
        items=items,
        handles=dict(walk.handles),
        style=style,
        quote=walk.quote or '"',
        module_level=isinstance(suite, cst.Module),
        compile_stmts=[i for i, _ in compiles],
        breakpoints=read_breakpoints(
            creation.compile_link.call
            if creation.compile_link is not None
            else (compiles[0][1] if compiles else None)
        ),
    )


def _is_rshift_item(src: ParsedSource, item: Item, body: Sequence[cst.BaseStatement]) -> bool:
    if item.kind != "edge" or item.container is not None:
        return False
    small = _single(body[item.stmt_index])
    return isinstance(small, cst.Expr) and isinstance(small.value, cst.BinaryOperation)


def _custom(code: str) -> EdgeIR:
    return EdgeIR(None, None, "custom", code=code)


def _chain_items(walk: _Walk, container: Container, items: list[Item]) -> None:
    links = container.chain.links
    if container.compile_link is not None:
        links = links[:-1]
    for link in links:
        item = walk.call(link.method, link.call, container.stmt_index)
        if item is None or item.kind == "nodes":
            item = Item("custom", container.stmt_index, edges=[_custom(link.body.strip())])
        item.container = container
        item.link = link
        items.append(item)


def _statement(
    walk: _Walk,
    index: int,
    stmt: cst.BaseStatement,
    small: cst.BaseSmallStatement | None,
    items: list[Item],
    containers: dict[int, Container],
) -> bool:
    """Read one statement after the builder; ``False`` if it is not modelled wiring."""
    if small is None:
        return False
    if isinstance(small, cst.Expr):
        return _expression(walk, index, small.value, items, containers)
    return _assignment(walk, index, small, items)


def _expression(
    walk: _Walk,
    index: int,
    value: cst.BaseExpression,
    items: list[Item],
    containers: dict[int, Container],
) -> bool:
    """``g.edge(...)``, ``g.add(...).edge(...)`` or ``START >> a >> b`` as a statement."""
    src = walk.src
    var = walk.var
    root, calls = _decompose(value)
    if (
        src.chain(value) is None
        and len(calls) == 1
        and isinstance(root, cst.Name)
        and root.value == var
    ):
        func = calls[0].func
        assert isinstance(func, cst.Attribute)  # guaranteed by _decompose
        if func.attr.value not in BUILDER_METHODS:
            return False
        return _append(items, walk.call(func.attr.value, calls[0], index))
    chain = _as_chain(src, value, var)
    if chain is not None and isinstance(chain.root, cst.Name) and chain.root.value == var:
        return _statement_chain(walk, index, chain, value, items, containers)
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.RightShift):
        return _append(items, walk.rshift(value, index))
    return False


def _statement_chain(
    walk: _Walk,
    index: int,
    chain: Chain,
    value: cst.BaseExpression,
    items: list[Item],
    containers: dict[int, Container],
) -> bool:
    """A chain of builder calls on the graph variable: one item, or a container of links."""
    if not chain.links or any(link.method not in BUILDER_METHODS for link in chain.links):
        return False
    if len(chain.links) == 1:
        link = chain.links[0]
        return _append(items, walk.call(link.method, link.call, index))
    container = Container(
        stmt_index=index, chain=chain, expr=value, compile_link=None, creation=False
    )
    before = len(items)
    _chain_items(walk, container, items)
    if any(item.kind == "custom" for item in items[before:]):
        del items[before:]
        return False
    containers[index] = container
    return True


def _assignment(walk: _Walk, index: int, small: cst.BaseSmallStatement, items: list[Item]) -> bool:
    """``a, b = g.nodes(A, B)`` or ``a = g["A"]``: items that bind handles."""
    var = walk.var
    assigned = _assigned(small)
    if assigned is None:
        return False
    if isinstance(small, cst.Assign):
        target_expr: cst.BaseAssignTargetExpression = small.targets[0].target
    elif isinstance(small, cst.AnnAssign):
        target_expr = small.target
    else:  # pragma: no cover - _assigned only accepts these two
        return False
    value = assigned[1]
    root, calls = _decompose(value)
    if (
        isinstance(root, cst.Name)
        and root.value == var
        and len(calls) == 1
        and isinstance(calls[0].func, cst.Attribute)
        and calls[0].func.attr.value == "nodes"
    ):
        targets = _target_names(target_expr)
        decls = walk._classes(calls[0])
        if targets is None or decls is None or len(targets) != len(decls):
            return False
        handles = {t: d.name for t, d in zip(targets, decls, strict=True)}
        walk.handles.update(handles)
        items.append(Item("nodes", index, nodes=decls, handles=handles))
        return True
    if isinstance(target_expr, cst.Name):
        node = walk.subscript(value)
        if node is not None:
            walk.handles[target_expr.value] = node
            items.append(Item("handle", index, handles={target_expr.value: node}))
            return True
    return False


def _append(items: list[Item], item: Item | None) -> bool:
    """Add ``item`` if the walk could read it; whether it could."""
    if item is None:
        return False
    items.append(item)
    return True


def _target_names(expr: cst.BaseAssignTargetExpression) -> list[str] | None:
    if isinstance(expr, cst.Tuple | cst.List):
        names = []
        for el in expr.elements:
            if not isinstance(el.value, cst.Name) or isinstance(el, cst.StarredElement):
                return None
            names.append(el.value.value)
        return names
    return None
