"""The graph IR: what the canvas draws and edits, as plain dataclasses.

``extract`` produces a :class:`GraphIR` from source, the canvas edits it, ``reconstruct`` writes
it back. Everything here is plain data with ``to_dict()`` / ``from_dict()`` for JSON, so the
Studio frontend (or any other tool) can work with it without Python.

Equality is by value and covers exactly what round-trips through code: node names, classes,
ports and holes, and every edge in order. Three fields are deliberately left out of ``==``:
``NodeIR.line`` (where the class sits moves whenever code above it changes), ``GraphIR.style``
(the same graph may be written in any style) and ``GraphIR.added`` (a one-shot instruction to
``reconstruct``, not part of the graph).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar, cast, get_args

from tensorsketch.canvas.exceptions import IRError

__all__ = [
    "END",
    "LOOP_EXIT",
    "LOOP_REPEAT",
    "START",
    "BranchKind",
    "EdgeIR",
    "EdgeKind",
    "GraphIR",
    "NodeIR",
    "Port",
    "Style",
]

#: The pseudo-node a run enters from. The same string as ``tensorsketch.START``; kept here so
#: the canvas never imports the runtime.
START: Final = "__start__"
#: The pseudo-node a branch of the run stops at (``tensorsketch.END``).
END: Final = "__end__"
#: The label of a loop's edge back to its own node.
LOOP_REPEAT: Final = "repeat"
#: The label of a loop's edge to where it continues once ``until`` holds.
LOOP_EXIT: Final = "exit"

EdgeKind = Literal[
    "sequential", "conditional", "dynamic", "join", "map", "parallel", "command", "custom"
]
"""``sequential``: ``edge(a, b)``. ``conditional``: one target of a routing function with a known
mapping (or of a loop). ``dynamic``: a routing function whose targets are only known at run time.
``join``: a wait-for-all edge, ``edge(["A", "B"], "C")`` or ``[a, b] >> c``.
``map``: ``map(src, node, over=..., item=..., then=...)``. ``parallel``: ``parallel(src, [...],
then=...)``. ``command``: a destination a node's class declares for ``Command(goto=...)`` (only
in ``GraphIR.commands``, never in the wiring). ``custom``: wiring the engine cannot model, kept
verbatim in ``code``."""

BranchKind = Literal["conditional", "router", "loop"]
"""Which builder method declared a conditional or dynamic edge."""

Style = Literal["fluent", "statement", "operator"]
"""How a file writes its wiring: a fluent chain, one call per statement, or ``>>``."""

_EDGE_KINDS: Final = frozenset(get_args(EdgeKind))
_BRANCH_KINDS: Final = frozenset(get_args(BranchKind))
_STYLES: Final = frozenset(get_args(Style))


@dataclass
class Port:
    """One typed port: a state field a node reads (``In``) or writes (``Out``).

    ``type`` is the annotation exactly as written in the source, e.g. ``"list[str]"``.
    """

    name: str
    type: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type}

    @classmethod
    def from_dict(cls, data: Any, where: str = "port") -> Port:
        obj = _object(data, where, required=("name", "type"), optional=())
        return cls(name=_str(obj, "name", where), type=_str(obj, "type", where))


@dataclass
class NodeIR:
    """A node of the graph: its name in the graph, its class and typed interface.

    ``cls`` is the node argument of ``add(...)`` as written (usually the class name); it
    defaults to ``name``. ``has_hole`` says the class's ``run`` body is still
    ``raise Hole(...)``, and ``hole`` is that Hole's description (``None`` for a bare
    ``raise Hole`` or ``raise Hole()``, so ``""`` stays distinct). ``line`` is the line of the
    ``class`` statement (``None`` when the class is not defined in the file) and does not take
    part in ``==``. ``retry`` and ``timeout`` are the ``add(..., retry=..., timeout=...)``
    arguments as written, shown on the node read-only (the canvas never edits them, so they
    do not take part in ``==`` either).
    """

    name: str
    cls: str = ""
    inputs: list[Port] = field(default_factory=list)
    outputs: list[Port] = field(default_factory=list)
    has_hole: bool = False
    hole: str | None = None
    line: int | None = field(default=None, compare=False)
    retry: str | None = field(default=None, compare=False)
    timeout: str | None = field(default=None, compare=False)
    #: For a subgraph node (``add(compiled_graph)``), the graph it runs, by the name
    #: ``extract(source, graph=...)`` reads it under; its ports are the fields it shares.
    subgraph: str | None = field(default=None, compare=False)
    cache: str | None = field(default=None, compare=False)
    defer: bool = False
    #: For a subgraph defined in another module, that module's file, relative to the
    #: project root (``myapp/research.py``): edits inside the subgraph are written there.
    subgraph_file: str | None = field(default=None, compare=False)
    #: Why the subgraph cannot be read (its module is missing, does not parse, or builds the
    #: graph in code): the node is an opaque subgraph box that says so.
    subgraph_error: str | None = field(default=None, compare=False)
    #: The subgraph's own graph, nested (``None`` for a plain node or an opaque box).
    child: GraphIR | None = field(default=None, compare=False, repr=False)
    #: ``add(child, destinations=(...))``: where a node inside the subgraph may send the run
    #: with ``Command(graph=Command.PARENT, goto=...)`` (``END`` as ``"__end__"``); ``None``
    #: when the call has no such argument. The canvas edits it (``edits.set_destinations``).
    destinations: list[str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            msg = f"NodeIR.name must be a non-empty string, got {self.name!r}."
            raise IRError(msg)
        if not self.cls:
            self.cls = self.name

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cls": self.cls,
            "inputs": [p.to_dict() for p in self.inputs],
            "outputs": [p.to_dict() for p in self.outputs],
            "has_hole": self.has_hole,
            "hole": self.hole,
            "line": self.line,
            "retry": self.retry,
            "timeout": self.timeout,
            "subgraph": self.subgraph,
            "cache": self.cache,
            "defer": self.defer,
            "subgraph_file": self.subgraph_file,
            "subgraph_error": self.subgraph_error,
            "child": self.child.to_dict() if self.child is not None else None,
            "destinations": None if self.destinations is None else list(self.destinations),
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "node") -> NodeIR:
        obj = _object(
            data,
            where,
            required=("name",),
            optional=(
                "cls",
                "inputs",
                "outputs",
                "has_hole",
                "hole",
                "line",
                "retry",
                "timeout",
                "subgraph",
                "cache",
                "defer",
                "subgraph_file",
                "subgraph_error",
                "child",
                "destinations",
            ),
        )
        child = obj.get("child")
        destinations = obj.get("destinations")
        if destinations is not None and (
            not isinstance(destinations, list)
            or not all(isinstance(d, str) and d for d in destinations)
        ):
            msg = (
                f"{where}.destinations must be null or a list of node names, got {destinations!r}."
            )
            raise IRError(msg)
        return cls(
            name=_str(obj, "name", where),
            cls=_opt_str(obj, "cls", where) or "",
            inputs=_ports(obj.get("inputs", []), f"{where}.inputs"),
            outputs=_ports(obj.get("outputs", []), f"{where}.outputs"),
            has_hole=_bool(obj, "has_hole", where),
            hole=_opt_str(obj, "hole", where),
            line=_opt_int(obj, "line", where),
            retry=_opt_str(obj, "retry", where),
            timeout=_opt_str(obj, "timeout", where),
            subgraph=_opt_str(obj, "subgraph", where),
            cache=_opt_str(obj, "cache", where),
            defer=_bool(obj, "defer", where),
            subgraph_file=_opt_str(obj, "subgraph_file", where),
            subgraph_error=_opt_str(obj, "subgraph_error", where),
            child=None if child is None else GraphIR.from_dict(child),
            destinations=None if destinations is None else list(destinations),
        )


@dataclass
class EdgeIR:
    """One edge, or one opaque wiring element.

    - ``sequential``: ``source`` → ``target``.
    - ``conditional``: one target of a routing function with a static mapping; ``path`` is
      the routing function as written (``"route"``, ``"lambda s: s.intent"``), ``label`` the
      mapping key, ``branch`` the builder method (``conditional``, ``router`` or ``loop``).
      A loop is two conditional edges: ``label="repeat"`` back to the node and
      ``label="exit"`` to where it continues; its ``path`` is the ``until`` predicate.
    - ``dynamic``: a routing function whose targets are decided at run time (no mapping, a
      ``Send`` fan-out); ``target`` is ``None`` — the engine never invents one. ``routes``
      lists the nodes (or ``END``) the function's own code says it can return, when every one
      of its ``return`` statements spells them out (``return "Tech"``, a literal dict's
      ``.get(key, "Fallback")``, ``Send("Worker", x)``, a ``Literal[...]`` return type), else
      ``None``. It is read from the code for the picture, and so that ``edits`` refuses to
      rename or remove a node the function returns by name; never written back, not part
      of ``==``.
    - ``join``: a wait-for-all join, ``edge(["A", "B"], "C")`` or ``[a, b] >> c``: ``target``
      runs once after every node in ``sources`` (two or more, in the order written) has run.
      ``source`` is ``None``: a join has no one source (it is one element of the wiring, drawn
      as an edge from each of its sources into the target).
    - ``map``: ``map(src, node, over="docs", item="doc", then="Digest")``: ``source`` is
      ``src``, ``target`` the node run once per element, ``path`` the list field (``over``),
      ``label`` the node's port each element goes to (``item``) and ``then`` where the run
      continues after every instance (``None``: not written, so ``END``).
    - ``parallel``: ``parallel(src, ["A", "B"], then="C")``: ``source`` is ``src``,
      ``sources`` the nodes run side by side (two or more), ``then`` the node they join into
      (``None``: not written); ``target`` is ``None``.
    - ``command``: ``source`` may return ``Command(goto=target)``; read from the class's
      ``destinations``, listed in ``GraphIR.commands`` (never among the wiring edges).
    - ``custom``: wiring the engine cannot model (``g.edge(*pairs)``, a loop building edges);
      ``code`` keeps its source verbatim and ``reconstruct`` writes it back untouched.

    ``START``/``END`` appear as ``"__start__"``/``"__end__"``. ``sources`` is ``None`` for
    every kind but ``join`` and ``parallel``; ``then`` for every kind but ``map`` and
    ``parallel``.
    """

    source: str | None
    target: str | None = None
    kind: EdgeKind = "sequential"
    path: str | None = None
    label: str | None = None
    branch: BranchKind | None = None
    code: str | None = None
    sources: list[str] | None = None
    routes: list[str] | None = field(default=None, compare=False)
    then: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in _EDGE_KINDS:
            msg = f"EdgeIR.kind must be one of {sorted(_EDGE_KINDS)}, got {self.kind!r}."
            raise IRError(msg)
        if self.branch is not None and self.branch not in _BRANCH_KINDS:
            allowed = sorted(_BRANCH_KINDS)
            msg = f"EdgeIR.branch must be one of {allowed} or None, got {self.branch!r}."
            raise IRError(msg)
        if self.kind in ("conditional", "dynamic") and self.branch is None:
            self.branch = "conditional"

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "kind": self.kind,
            "path": self.path,
            "label": self.label,
            "branch": self.branch,
            "code": self.code,
            "sources": None if self.sources is None else list(self.sources),
            "routes": None if self.routes is None else list(self.routes),
            "then": self.then,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "edge") -> EdgeIR:
        obj = _object(
            data,
            where,
            required=("source",),
            optional=(
                "target",
                "kind",
                "path",
                "label",
                "branch",
                "code",
                "sources",
                "routes",
                "then",
            ),
        )
        kind = obj.get("kind", "sequential")
        if kind not in _EDGE_KINDS:
            msg = f"{where}.kind must be one of {sorted(_EDGE_KINDS)}, got {kind!r}."
            raise IRError(msg)
        branch = obj.get("branch")
        if branch is not None and branch not in _BRANCH_KINDS:
            msg = f"{where}.branch must be one of {sorted(_BRANCH_KINDS)} or null, got {branch!r}."
            raise IRError(msg)
        return cls(
            source=_opt_str(obj, "source", where),
            target=_opt_str(obj, "target", where),
            kind=cast(EdgeKind, kind),
            path=_opt_str(obj, "path", where),
            label=_opt_str(obj, "label", where),
            branch=cast("BranchKind | None", branch),
            code=_opt_str(obj, "code", where),
            sources=_opt_names(obj, "sources", where),
            routes=_opt_names(obj, "routes", where),
            then=_opt_str(obj, "then", where),
        )


_C = TypeVar("_C")


def clone(obj: _C) -> _C:
    """A shallow copy of one of the IR's dataclasses, without ``__init__`` or its checks
    (``dataclasses.replace`` runs both, and the engine copies every port and edge)."""
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    return new


@dataclass
class GraphIR:
    """One graph of a source file: its nodes in ``add`` order and its edges in wiring order.

    ``name`` addresses the graph in its file: the variable holding the compiled graph
    (``app = g.compile()``), else the builder variable, else the function returning it.
    ``state`` is the state schema as written in ``Graph(...)``. ``added`` lists nodes the canvas
    created: ``reconstruct`` writes a typed stub class for each of them. ``style`` reports how the
    file writes its wiring; ``reconstruct`` always keeps the file's own style.

    ``interrupt_before`` / ``interrupt_after`` are the static breakpoints of the graph's
    (first) ``compile(...)`` call: the node names as written (``[]`` when the call has none),
    or ``None`` when they are not a literal list of strings, or are not known (an IR built
    without them). The canvas shows them read-only, so they do not take part in ``==``;
    renaming a node renames it there too and removing one takes it out, in every compile call
    of the graph.

    ``commands`` are the ``command`` edges: for each node whose class declares
    ``destinations = (...)`` as a literal tuple or list of names, one edge per destination,
    in the order declared. They are read from the class (never from the wiring, never
    guessed), are not written back, and do not take part in ``==``.
    """

    name: str
    state: str | None = None
    nodes: list[NodeIR] = field(default_factory=list)
    edges: list[EdgeIR] = field(default_factory=list)
    added: list[str] = field(default_factory=list, compare=False)
    style: Style = field(default="fluent", compare=False)
    interrupt_before: list[str] | None = field(default=None, compare=False)
    interrupt_after: list[str] | None = field(default=None, compare=False)
    commands: list[EdgeIR] = field(default_factory=list, compare=False)

    def node(self, name: str) -> NodeIR:
        """The node called ``name``; :class:`IRError` naming the known nodes otherwise."""
        for node in self.nodes:
            if node.name == name:
                return node
        known = ", ".join(repr(n.name) for n in self.nodes) or "none"
        msg = f"graph {self.name!r} has no node named {name!r} (nodes: {known})."
        raise IRError(msg)

    @property
    def holes(self) -> list[NodeIR]:
        """The nodes whose body is still ``raise Hole(...)``."""
        return [node for node in self.nodes if node.has_hole]

    def copy(self) -> GraphIR:
        """A deep copy, to edit without touching the original.

        Field by field (the IR holds strings, numbers and lists of its own dataclasses):
        ``copy.deepcopy`` took a tenth of every Studio edit on a 300-node graph.
        """
        new = clone(self)
        new.nodes = []
        for node in self.nodes:
            twin = clone(node)
            twin.inputs = [clone(port) for port in node.inputs]
            twin.outputs = [clone(port) for port in node.outputs]
            if node.destinations is not None:
                twin.destinations = list(node.destinations)
            new.nodes.append(twin)
        new.edges = []
        for edge in self.edges:
            copied = clone(edge)
            if edge.sources is not None:
                copied.sources = list(edge.sources)
            if edge.routes is not None:
                copied.routes = list(edge.routes)
            new.edges.append(copied)
        new.commands = [clone(edge) for edge in self.commands]
        new.added = list(self.added)
        if self.interrupt_before is not None:
            new.interrupt_before = list(self.interrupt_before)
        if self.interrupt_after is not None:
            new.interrupt_after = list(self.interrupt_after)
        return new

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data; see :meth:`json_schema` for its shape."""
        return {
            "name": self.name,
            "state": self.state,
            "style": self.style,
            "nodes": [n.to_dict() for n in self.nodes],
            "edges": [e.to_dict() for e in self.edges],
            "added": list(self.added),
            "interrupt_before": _names_or_none(self.interrupt_before),
            "interrupt_after": _names_or_none(self.interrupt_after),
            "commands": [e.to_dict() for e in self.commands],
        }

    @classmethod
    def from_dict(cls, data: Any) -> GraphIR:
        """Rebuild a GraphIR from :meth:`to_dict` output; :class:`IRError` says what is wrong."""
        where = "graph"
        obj = _object(
            data,
            where,
            required=("name",),
            optional=(
                "state",
                "style",
                "nodes",
                "edges",
                "added",
                "interrupt_before",
                "interrupt_after",
                "commands",
            ),
        )
        style = obj.get("style", "fluent")
        if style not in _STYLES:
            msg = f"graph.style must be one of {sorted(_STYLES)}, got {style!r}."
            raise IRError(msg)
        nodes = obj.get("nodes", [])
        edges = obj.get("edges", [])
        added = obj.get("added", [])
        commands = obj.get("commands", [])
        for key, value in (
            ("nodes", nodes),
            ("edges", edges),
            ("added", added),
            ("commands", commands),
        ):
            if not isinstance(value, list):
                msg = f"graph.{key} must be a list, got {type(value).__name__}."
                raise IRError(msg)
        if not all(isinstance(name, str) for name in added):
            msg = f"graph.added must list node names (strings), got {added!r}."
            raise IRError(msg)
        return cls(
            name=_str(obj, "name", where),
            state=_opt_str(obj, "state", where),
            nodes=[NodeIR.from_dict(n, f"graph.nodes[{i}]") for i, n in enumerate(nodes)],
            edges=[EdgeIR.from_dict(e, f"graph.edges[{i}]") for i, e in enumerate(edges)],
            added=list(added),
            style=cast(Style, style),
            interrupt_before=_opt_names(obj, "interrupt_before", where),
            interrupt_after=_opt_names(obj, "interrupt_after", where),
            commands=[EdgeIR.from_dict(e, f"graph.commands[{i}]") for i, e in enumerate(commands)],
        )

    @staticmethod
    def json_schema() -> dict[str, Any]:
        """The JSON Schema (draft 2020-12) of :meth:`to_dict` output."""
        nullable_str = {"type": ["string", "null"]}
        names = {"type": ["array", "null"], "items": {"type": "string"}}
        port = {
            "type": "object",
            "properties": {"name": {"type": "string"}, "type": {"type": "string"}},
            "required": ["name", "type"],
            "additionalProperties": False,
        }
        node = {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "cls": {"type": "string"},
                "inputs": {"type": "array", "items": {"$ref": "#/$defs/port"}},
                "outputs": {"type": "array", "items": {"$ref": "#/$defs/port"}},
                "has_hole": {"type": "boolean"},
                "hole": nullable_str,
                "line": {"type": ["integer", "null"], "minimum": 1},
                "retry": nullable_str,
                "timeout": nullable_str,
                "subgraph": nullable_str,
                "cache": nullable_str,
                "defer": {"type": "boolean"},
                "subgraph_file": nullable_str,
                "subgraph_error": nullable_str,
                "child": {"anyOf": [{"$ref": "#"}, {"type": "null"}]},
                "destinations": names,
            },
            "required": ["name"],
            "additionalProperties": False,
        }
        edge = {
            "type": "object",
            "properties": {
                "source": nullable_str,
                "target": nullable_str,
                "kind": {"enum": sorted(_EDGE_KINDS)},
                "path": nullable_str,
                "label": nullable_str,
                "branch": {"enum": [*sorted(_BRANCH_KINDS), None]},
                "code": nullable_str,
                "sources": {"type": ["array", "null"], "items": {"type": "string"}},
                "routes": {"type": ["array", "null"], "items": {"type": "string"}},
                "then": nullable_str,
            },
            "required": ["source"],
            "additionalProperties": False,
        }
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://tensorsketch.dev/schemas/canvas-graph-ir.json",
            "title": "TensorSketch canvas GraphIR",
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "state": nullable_str,
                "style": {"enum": sorted(_STYLES)},
                "nodes": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                "edges": {"type": "array", "items": {"$ref": "#/$defs/edge"}},
                "added": {"type": "array", "items": {"type": "string"}},
                "interrupt_before": names,
                "interrupt_after": names,
                "commands": {"type": "array", "items": {"$ref": "#/$defs/edge"}},
            },
            "required": ["name"],
            "additionalProperties": False,
            "$defs": {"port": port, "node": node, "edge": edge},
        }


# -- from_dict helpers -----------------------------------------------------------------------


def _object(
    data: Any, where: str, *, required: tuple[str, ...], optional: tuple[str, ...]
) -> dict[str, Any]:
    if not isinstance(data, dict):
        msg = f"{where} must be a JSON object, got {type(data).__name__}."
        raise IRError(msg)
    missing = [key for key in required if key not in data]
    if missing:
        msg = f"{where} is missing {', '.join(repr(k) for k in missing)}."
        raise IRError(msg)
    unknown = sorted(set(data) - set(required) - set(optional))
    if unknown:
        allowed = ", ".join(repr(k) for k in (*required, *optional))
        msg = f"{where} has unknown keys {unknown!r}; allowed keys are {allowed}."
        raise IRError(msg)
    return data


def _names_or_none(names: list[str] | None) -> list[str] | None:
    return None if names is None else list(names)


def _str(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj[key]
    if not isinstance(value, str):
        msg = f"{where}.{key} must be a string, got {value!r}."
        raise IRError(msg)
    return value


def _opt_str(obj: dict[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        msg = f"{where}.{key} must be a string or null, got {value!r}."
        raise IRError(msg)
    return value


def _opt_int(obj: dict[str, Any], key: str, where: str) -> int | None:
    value = obj.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        msg = f"{where}.{key} must be an integer or null, got {value!r}."
        raise IRError(msg)
    return value


def _opt_names(obj: dict[str, Any], key: str, where: str) -> list[str] | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        msg = f"{where}.{key} must be a list of node names (strings) or null, got {value!r}."
        raise IRError(msg)
    return list(value)


def _bool(obj: dict[str, Any], key: str, where: str) -> bool:
    value = obj.get(key, False)
    if not isinstance(value, bool):
        msg = f"{where}.{key} must be true or false, got {value!r}."
        raise IRError(msg)
    return value


def _ports(data: Any, where: str) -> list[Port]:
    if not isinstance(data, list):
        msg = f"{where} must be a list of ports, got {type(data).__name__}."
        raise IRError(msg)
    return [Port.from_dict(p, f"{where}[{i}]") for i, p in enumerate(data)]
