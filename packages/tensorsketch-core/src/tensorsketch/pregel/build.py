"""The spec-building half of ``Graph.compile()``: check ports against the state, the wiring
(edges, routers, joins, the entry) and the breakpoints, then freeze it all into a
:class:`~tensorsketch.pregel.spec.GraphSpec`. Every problem is collected, so one compile
reports all.
"""

from __future__ import annotations

import copy
import difflib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tensorsketch._assignable import is_assignable, type_text
from tensorsketch.cache.policy import CachePolicy
from tensorsketch.cache.store import NodeCache
from tensorsketch.channels import Channel, channel_for
from tensorsketch.constants import END, START
from tensorsketch.errors import GraphValidationError
from tensorsketch.graph_structure import GraphStructure
from tensorsketch.joins import Join
from tensorsketch.node import Node
from tensorsketch.pregel.seam import Executor
from tensorsketch.pregel.spec import Branch, GraphSpec, NodeSpec
from tensorsketch.pregel.subgraph import SubgraphNode
from tensorsketch.retry import RetryPolicy
from tensorsketch.schema import Schema

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo


__all__ = [
    "Blueprint",
    "Wiring",
    "breakpoint_nodes",
    "build_spec",
    "field_hint",
    "join_wiring",
    "node_spec",
    "shown",
    "suggest",
    "wiring",
]


def suggest(name: str, known: Sequence[str]) -> str:
    """A did-you-mean for a misspelt node name: the same name in another case first (``"up"``
    for ``"Up"``, too short for difflib to call close), else the closest name, else the list."""
    folded = [k for k in known if k.casefold() == name.casefold()]
    close = folded or difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    if close:
        return f" — did you mean {close[0]!r}?"
    listed = ", ".join(repr(k) for k in known) or "none yet"
    return f" (known nodes: {listed})"


def shown(name: str) -> str:
    """A node name for a message: ``START`` / ``END`` as the user wrote them, not their
    values (``'__start__'``)."""
    if name == START:
        return "START"
    if name == END:
        return "END"
    return repr(name)


def breakpoint_nodes(
    option: str,
    names: object,
    nodes: Sequence[str],
    problems: list[str],
    children: Mapping[str, GraphSpec] | None = None,
) -> frozenset[str]:
    """The node names of an ``interrupt_before=`` / ``interrupt_after=`` option (``"*"``: all
    of them); a name that is not a node, or a value that is not names, becomes a problem.
    ``"Research.Search"`` names node ``Search`` inside subgraph node ``Research`` (any
    depth; ``children`` maps each subgraph node to its graph)."""
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, Sequence | set | frozenset):
        problems.append(
            f"{option}= takes a list of node names (or '*'), got {type(names).__name__}; "
            f"e.g. {option}=['review']."
        )
        return frozenset()
    picked: set[str] = set()
    for name in names:
        if name == "*":
            picked.update(nodes)
        elif isinstance(name, str) and name not in nodes and "." in name:
            if _nested_node(name, children or {}):
                picked.add(name)
            else:
                problems.append(
                    f"{option}= names {name!r}, which is not a node inside a subgraph node "
                    "(write 'Subgraph.Node', the subgraph node's name in this graph first)"
                )
        elif not isinstance(name, str) or name not in nodes:
            hint = suggest(name, nodes) if isinstance(name, str) else ""
            problems.append(f"{option}= names {name!r}, which is not a node{hint}")
        else:
            picked.add(name)
    return frozenset(picked)


def _nested_node(dotted: str, children: Mapping[str, GraphSpec]) -> bool:
    head, _, rest = dotted.partition(".")
    child = children.get(head)
    if child is None:
        return False
    if rest in child.nodes:
        return True
    return "." in rest and _nested_node(rest, subgraph_specs(child))


def subgraph_specs(spec: GraphSpec) -> dict[str, GraphSpec]:
    """The graph of each subgraph node of ``spec``, by node name."""
    return {
        name: node.node.graph.spec
        for name, node in spec.nodes.items()
        if isinstance(node.node, SubgraphNode)
    }


def field_hint(port: str, fields: Mapping[str, Any], annotation: Any = None) -> str:
    """A close field name, else the field to add (typed as the port is, when known)."""
    close = difflib.get_close_matches(port, list(fields), n=1, cutoff=0.6)
    if close:
        return f" — did you mean {close[0]!r}?"
    typed = "..." if annotation is None else type_text(annotation)
    return f"; add `{port}: {typed}` to the state schema or rename the port."


def node_spec(
    state_schema: type[Schema],
    name: str,
    node: Node,
    fields: dict[str, FieldInfo],
    channels: dict[str, Channel],
    problems: list[str],
) -> NodeSpec:
    """The engine's view of one node, appending to ``problems`` what does not fit the state."""
    cls_name = type(node).__name__
    in_schema, out_schema = node.In, node.Out
    for label, schema in (("In", in_schema), ("Out", out_schema)):
        if not (isinstance(schema, type) and issubclass(schema, Schema)):
            problems.append(
                f"node {name!r}: `{label}` must be a Schema subclass (`class {label}(Schema)`),"
                f" got {schema!r}."
            )
    if not inspect.iscoroutinefunction(node.run):
        problems.append(
            f"node {name!r}: `run` must be `async def run(self, ctx, inp)`; {cls_name}.run "
            "is a plain function."
        )
    state_name = state_schema.__name__
    reads: list[tuple[str, bool]] = []
    writes: list[str] = []
    if isinstance(in_schema, type) and issubclass(in_schema, Schema):
        for port, info in in_schema.model_fields.items():
            if port not in fields:
                hint = node.port_hint(port, fields) or field_hint(port, fields, info.annotation)
                problems.append(
                    f"node {name!r} reads `{port}`, but {state_name} has no field {port!r}{hint}"
                )
                continue
            state_type = fields[port].annotation
            if not is_assignable(state_type, info.annotation):
                problems.append(
                    f"node {name!r} reads `{port}: {type_text(info.annotation)}`, but "
                    f"{state_name}.{port} is `{type_text(state_type)}`; make the port type "
                    f"accept `{type_text(state_type)}`."
                )
            reads.append((port, info.is_required()))
    if isinstance(out_schema, type) and issubclass(out_schema, Schema):
        optional = node.optional_outputs()
        for port, info in out_schema.model_fields.items():
            if port not in fields:
                if port in optional:
                    continue  # written only where the state keeps it
                hint = node.port_hint(port, fields) or field_hint(port, fields, info.annotation)
                problems.append(
                    f"node {name!r} writes `{port}`, but {state_name} has no field {port!r}{hint}"
                )
                continue
            channel = channels[port]
            state_type = fields[port].annotation
            wanted = channel.write_type(state_type)
            if wanted is not None and not is_assignable(info.annotation, wanted):
                if channel.checks_write_type:
                    problems.append(
                        f"node {name!r} writes `{port}: {type_text(info.annotation)}`, but "
                        f"{state_name}.{port} is `{type_text(state_type)}`; change the Out port "
                        f"to `{port}: {type_text(state_type)}` (or widen the state field)."
                    )
                else:
                    problems.append(
                        f"node {name!r} writes `{port}: {type_text(info.annotation)}`, but "
                        f"{state_name}.{port} is a {channel.kind} ({channel!r}) whose update "
                        f"is `{type_text(wanted)}`; change the Out port to "
                        f"`{port}: {type_text(wanted)}` (a reducer folds each write into the "
                        "value, so a write is an update, not the whole field)."
                    )
            writes.append(port)
    return NodeSpec(
        name=name,
        node=node,
        run=node.run,
        in_schema=in_schema,
        out_schema=out_schema,
        reads=tuple(reads),
        writes=tuple(writes),
    )


#: What the wiring check found: the entry nodes and each node's static successors.
Wiring = tuple[list[str], dict[str, list[str]]]


def wiring(
    nodes: Mapping[str, Node],
    edges: Sequence[tuple[str, str]],
    branches: Mapping[str, Branch],
    problems: list[str],
) -> Wiring:
    """Check every edge, router and the entry, appending to ``problems``."""
    known = list(nodes)

    def check_target(src: str, dst: str, how: str) -> None:
        if dst == END or dst in nodes:
            return
        if dst == START:
            problems.append(f"{how} from {shown(src)} points at START; START is only a source.")
        else:
            problems.append(
                f"{how} from {shown(src)} points at unknown node {dst!r}{suggest(dst, known)}"
            )

    entry: list[str] = []
    successors: dict[str, list[str]] = {name: [] for name in nodes}
    for src, dst in edges:
        if src == END:
            problems.append(f"edge from END to {dst!r}: END can only be a target.")
            continue
        if src != START and src not in nodes:
            problems.append(f"edge source {src!r} is not a node{suggest(src, known)}")
            continue
        check_target(src, dst, "edge")
        targets = entry if src == START else successors[src]
        if dst not in targets:
            targets.append(dst)

    for src, branch in branches.items():
        if src != START and src not in nodes:
            problems.append(f"{branch.kind} edge source {src!r} is not a node{suggest(src, known)}")
            continue
        if branch.mapping is not None:
            for key, dst in branch.mapping.items():
                check_target(src, dst, f"{branch.kind} key {key!r}")
        if branch.exit is not None:
            check_target(src, branch.exit, "loop exit")
        has_static = bool(entry) if src == START else bool(successors[src])
        if has_static:
            problems.append(
                f"{'START' if src == START else f'node {src!r}'} has both static edges and "
                f"a {branch.kind} edge; a node's "
                "successors must come from one place — route every target through the "
                "path function, or drop the conditional."
            )

    if not entry and START not in branches:
        first = known[0] if known else "FirstNode"
        problems.append(
            f"no entry node: add `.edge(START, {first!r})` (or `.entry({first!r})`, or "
            f"`START >> {first.lower()}`) to say where the run begins."
        )

    return entry, successors


def join_wiring(
    nodes: Mapping[str, Node],
    joins: Sequence[tuple[tuple[str, ...], str]],
    problems: list[str],
) -> tuple[Join, ...]:
    """Check every wait-for-all join (``edge([...], dst)``); the same join declared twice
    (in any source order) is one join."""
    known = list(nodes)
    found: list[Join] = []
    seen: set[tuple[frozenset[str], str]] = set()
    for sources, dst in joins:
        where = f"join edge({list(sources)!r}, {dst!r})"
        bad = len(problems)
        if not sources:
            problems.append(
                f"{where} has no sources; list the nodes to wait for, e.g. "
                f'`edge(["A", "B"], {dst!r})`.'
            )
        if START in sources:
            problems.append(
                f"{where} waits for START, which is not a node that runs: the run begins at "
                f"START, so it never arrives at a join. Start the branches with "
                f"`edge(START, ...)` and join their last nodes instead."
            )
        if END in sources:
            problems.append(f"{where} waits for END; END can only be a target.")
        for name in dict.fromkeys(sources):
            if name in (START, END):
                continue
            if name not in nodes:
                problems.append(f"{where}: source {name!r} is not a node{suggest(name, known)}")
            if sources.count(name) > 1:
                problems.append(
                    f"{where} lists {name!r} {sources.count(name)} times; a join waits for "
                    "each source once — list it once (or name the node you meant)."
                )
        if dst == END:
            problems.append(
                f"{where} joins into END, which does nothing: a run ends when no node is "
                "left to run. Give each source its own `edge(source, END)`, or join into a "
                "node."
            )
        elif dst == START:
            problems.append(f"{where} points at START; START is only a source.")
        elif dst not in nodes:
            problems.append(f"{where}: target {dst!r} is not a node{suggest(dst, known)}")
        key = (frozenset(sources), dst)
        if len(problems) > bad or key in seen:
            continue
        seen.add(key)
        found.append(Join(sources=sources, target=dst, index=len(found)))
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Blueprint:
    """What a :class:`~tensorsketch.graph.Graph` builder collected, handed to
    :func:`build_spec` to check and freeze."""

    name: str
    state: type[Schema]
    nodes: Mapping[str, Node]
    edges: Sequence[tuple[str, str]]
    joins: Sequence[tuple[tuple[str, ...], str]]
    branches: Mapping[str, Branch]
    guards: Mapping[str, tuple[RetryPolicy | None, float | None]]
    caches: Mapping[str, CachePolicy]
    deferred: frozenset[str]
    retry: RetryPolicy | None
    timeout: float | None
    #: Mistakes the builder already found (reported with the rest).
    problems: Sequence[str]
    structure: GraphStructure


def build_spec(
    bp: Blueprint,
    *,
    migrate: Callable[[dict[str, Any]], dict[str, Any]] | None,
    interrupt_before: Sequence[str] | str,
    interrupt_after: Sequence[str] | str,
    max_concurrency: int | None,
    executor: Executor | None,
    cache: NodeCache | None = None,
) -> GraphSpec:
    """Check a whole graph and freeze it for the engine: every mistake found is reported at
    once in one :class:`GraphValidationError`."""
    problems = list(bp.problems)
    state = bp.state
    fields: dict[str, FieldInfo] = dict(state.model_fields)
    channels: dict[str, Channel] = {}
    for field_name, info in fields.items():
        try:
            channels[field_name] = channel_for(field_name, info.metadata)
        except TypeError as exc:
            problems.append(str(exc))
            channels[field_name] = channel_for(field_name, ())

    specs: dict[str, NodeSpec] = {}
    for name, node in bp.nodes.items():
        bound = node.bind(state, name, problems)
        specs[name] = spec = node_spec(state, name, bound, fields, channels, problems)
        retry, timeout = bp.guards.get(name, (None, None))
        spec.retry = retry if retry is not None else bp.retry
        spec.timeout = timeout if timeout is not None else bp.timeout
        spec.cache = bp.caches.get(name)
        spec.defer = name in bp.deferred
        spec.drives_child = isinstance(bound, SubgraphNode)

    entry, successors = wiring(bp.nodes, bp.edges, bp.branches, problems)
    joins = join_wiring(bp.nodes, bp.joins, problems)
    children = {
        name: spec.node.graph.spec
        for name, spec in specs.items()
        if isinstance(spec.node, SubgraphNode)
    }
    before = breakpoint_nodes(
        "interrupt_before", interrupt_before, list(bp.nodes), problems, children
    )
    after = breakpoint_nodes("interrupt_after", interrupt_after, list(bp.nodes), problems, children)
    for name, spec in specs.items():
        spec.destinations = _destinations(name, spec.node, list(bp.nodes), problems)

    if problems:
        listing = "\n".join(f"  - {p}" for p in problems)
        noun = "problem" if len(problems) == 1 else "problems"
        msg = f"{bp.name} does not compile ({len(problems)} {noun}):\n{listing}"
        raise GraphValidationError(msg, problems)

    for name, spec in specs.items():
        spec.successors = tuple(successors[name])
        spec.branch = bp.branches.get(name)
        spec.joins = tuple(j for j in joins if name in j.sources)
    defaults: dict[str, Callable[[], Any]] = {}
    for field_name, info in fields.items():
        if info.default_factory is not None:
            defaults[field_name] = info.default_factory  # type: ignore[assignment]
        elif not info.is_required():
            value = info.default
            defaults[field_name] = _constant(value) if _immutable(value) else _copier(value)
    graph_spec = GraphSpec(
        name=bp.name,
        state_schema=state,
        channels=channels,
        defaults=defaults,
        required=tuple(f for f, info in fields.items() if info.is_required()),
        nodes=specs,
        entry=tuple(entry),
        entry_branch=bp.branches.get(START),
        structure=bp.structure,
        migrate=migrate,
        interrupt_before=before,
        interrupt_after=after,
        max_concurrency=max_concurrency,
        executor=executor,
        joins=joins,
        cache=cache,
    )
    graph_spec.must_input = must_input(graph_spec)
    graph_spec.deferred = frozenset(n for n in bp.deferred if n in specs)
    return graph_spec


def must_input(spec: GraphSpec) -> dict[str, str]:
    """The required fields a new thread's input must hold, each with the reason: no default
    covers it and either no node writes it (the run is certain to fail, at the latest when it
    finishes) or a node reads it that no writer of it can run before. Refusing these up front
    keeps the nodes ahead of the failure from running their side effects first.

    The second case needs to know what runs before what. Static edges, joins, loops and routes
    with a declared mapping say so; a route without a mapping may go anywhere and may ``Send``
    a payload that supplies the field itself, so with one in the graph only the first case is
    checked (it is never a false refusal: a payload does not set the shared state).
    """
    writers: dict[str, list[str]] = {}
    for node in spec.nodes.values():
        for name in node.writes:
            writers.setdefault(name, []).append(node.name)
    readers: dict[str, list[str]] = {}
    for node in spec.nodes.values():
        for name, required in node.reads:
            if required:
                readers.setdefault(name, []).append(node.name)
    # A ``map`` route names its targets but its ``Send``s carry each element in a payload.
    open_routes = any(
        (b.mapping is None and b.kind != "loop") or b.kind == "map" for b in _branches(spec)
    )
    after = {} if open_routes else _runs_after(spec)
    reasons: dict[str, str] = {}
    for name in spec.required:
        written_by = writers.get(name)
        read_by = readers.get(name, [])
        if not written_by:
            reasons[name] = (
                f"no node writes it and {_names(read_by, 'reads', 'read')} it"
                if read_by
                else "no node writes it, and the run cannot finish without it"
            )
            continue
        if open_routes:
            continue
        for reader in read_by:
            if reader in after[START] and not any(reader in after[w] for w in written_by):
                reasons[name] = (
                    f"{reader!r} reads it, and only {_names(written_by, 'writes', 'write')} it, "
                    f"which cannot run before {reader!r}"
                )
                break
    return reasons


def _destinations(name: str, node: Node, known: list[str], problems: list[str]) -> frozenset[str]:
    """A node's declared ``destinations``, each a node of the graph or ``END``."""
    declared = node.destinations
    if isinstance(declared, str) or not isinstance(declared, tuple | list | frozenset | set):
        problems.append(
            f"node {name!r}: `destinations` must be a tuple of node names, got {declared!r}; "
            f'e.g. `destinations = ("Billing", END)`.'
        )
        return frozenset()
    found: set[str] = set()
    for target in declared:
        if target == END or target in known:
            found.add(target)
        elif target == START:
            problems.append(f"node {name!r}: `destinations` names START, which is only a source.")
        else:
            problems.append(
                f"node {name!r}: `destinations` names {target!r}, which is not a node of this "
                f"graph{suggest(str(target), known)}"
            )
    return frozenset(found)


def _names(nodes: list[str], one: str, many: str) -> str:
    return f"{' and '.join(map(repr, nodes))} {one if len(nodes) == 1 else many}"


def _branches(spec: GraphSpec) -> list[Branch]:
    found = [n.branch for n in spec.nodes.values() if n.branch is not None]
    return [*found, spec.entry_branch] if spec.entry_branch is not None else found


def _runs_after(spec: GraphSpec) -> dict[str, set[str]]:
    """For START and every node, the nodes that can run in a later superstep of the same run
    (reachable through one or more edges, routes, loops or joins)."""
    step: dict[str, set[str]] = {
        name: set(n.successors) | n.destinations for name, n in spec.nodes.items()
    }
    step[START] = set(spec.entry)
    for join in spec.joins:
        for source in join.sources:
            step[source].add(join.target)
    for branch in _branches(spec):
        targets = step[branch.source]
        if branch.mapping is not None:
            targets.update(branch.mapping.values())
        if branch.loop_node is not None:
            targets.add(branch.loop_node)
        if branch.exit is not None:
            targets.add(branch.exit)
    after: dict[str, set[str]] = {}
    for origin in step:
        seen: set[str] = set()
        frontier = [t for t in step[origin] if t in step]
        while frontier:
            node = frontier.pop()
            if node not in seen:
                seen.add(node)
                frontier.extend(t for t in step[node] if t in step and t not in seen)
        after[origin] = seen
    return after


_SCALARS = (str, int, float, bool, bytes, type(None))


def _immutable(value: Any) -> bool:
    """Nothing reachable from ``value`` can be changed in place (safe to share across runs)."""
    if isinstance(value, _SCALARS):
        return True
    if isinstance(value, tuple | frozenset):
        return all(_immutable(v) for v in value)
    return False


def _constant(value: Any) -> Callable[[], Any]:
    def make() -> Any:
        return value

    return make


def _copier(value: Any) -> Callable[[], Any]:
    """A fresh copy per run: a node that mutates a nested default must not change it for the
    next run. A flat container of immutable items is copied shallowly (the common case, and
    ~20x cheaper than ``deepcopy``)."""
    flat = isinstance(value, list | set | dict) and all(
        _immutable(v) for v in (value.values() if isinstance(value, dict) else value)
    )
    if flat:
        shallow = copy.copy

        def make() -> Any:
            return shallow(value)

    else:
        deep = copy.deepcopy

        def make() -> Any:
            return deep(value)

    return make
