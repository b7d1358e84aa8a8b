"""``Graph``: the builder that wires typed nodes over a typed state, and ``compile()``."""

from __future__ import annotations

from collections import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Generic, Self, TypeVar, get_args, get_origin

from tensorsketch._assignable import is_assignable, type_text
from tensorsketch.cache.policy import CachePolicy
from tensorsketch.cache.store import NodeCache
from tensorsketch.constants import END, START
from tensorsketch.graph_structure import BranchInfo, GraphStructure
from tensorsketch.handles import NodeHandle
from tensorsketch.node import Node
from tensorsketch.pregel.build import Blueprint, build_spec, shown, suggest
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.pregel.seam import Executor
from tensorsketch.pregel.spec import Branch, check_concurrency
from tensorsketch.pregel.subgraph import SubgraphNode
from tensorsketch.pregel.worker import resolve_executor
from tensorsketch.retry import RetryPolicy
from tensorsketch.schema import Schema
from tensorsketch.send import Send

__all__ = ["Graph"]

S = TypeVar("S", bound=Schema)


def _element_type(annotation: Any) -> Any:
    """The element type of a ``list[X]`` / ``Sequence[X]`` annotation (``Any`` when bare),
    ``None`` for anything that is not a list."""
    origin = get_origin(annotation)
    if annotation in (list, tuple) or origin in (list, tuple, Sequence, abc.Sequence):
        args = get_args(annotation)
        return args[0] if args else Any
    if origin is Annotated:
        return _element_type(get_args(annotation)[0])
    return None


def _path_name(path: Callable[..., Any]) -> str:
    return getattr(path, "__name__", type(path).__name__)


class Graph(Generic[S]):
    """A builder for a graph over the state schema ``S``; every method returns the graph.

    Three authoring styles build the same graph: the fluent chain
    (``Graph(S).add(A).edge(START, "A")``), one call per statement, and the ``>>`` surface
    with handles from :meth:`nodes`. ``compile()`` validates everything and returns a
    runnable :class:`~tensorsketch.compiled.CompiledGraph`.
    """

    def __init__(
        self,
        state: type[S],
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        node_timeout: float | None = None,
    ) -> None:
        if not (isinstance(state, type) and issubclass(state, Schema)):
            msg = (
                f"Graph(state) needs a Schema subclass describing the state, got {state!r}; "
                "declare `class State(Schema): ...` and pass `Graph(State)`."
            )
            raise TypeError(msg)
        self.state_schema: type[S] = state
        self.name = name or f"Graph[{state.__name__}]"
        self._nodes: dict[str, Node] = {}
        self._edges: list[tuple[str, str]] = []
        #: ``edge([...], dst)``: wait-for-all joins, as declared (checked by ``compile``).
        self._joins: list[tuple[tuple[str, ...], str]] = []
        self._branches: dict[str, Branch] = {}
        #: ``map`` routes by source: (node, list field, item port), checked at compile.
        self._maps: dict[str, tuple[str, str, str]] = {}
        self._problems: list[str] = []
        #: ``add(retry=, timeout=)`` per node name, over the graph's defaults.
        self._retry = _check_retry(retry, "Graph(retry=...)")
        self._timeout = _check_timeout(node_timeout, "Graph(node_timeout=...)")
        self._guards: dict[str, tuple[RetryPolicy | None, float | None]] = {}
        #: ``add(cache=...)`` per node name.
        self._caches: dict[str, CachePolicy] = {}
        #: ``add(defer=True)``: nodes that wait until nothing else is left to run.
        self._deferred: set[str] = set()

    # -- building ---------------------------------------------------------------------------

    def add(
        self,
        node: type[Node] | Node | CompiledGraph[Any] | Graph[Any],
        *,
        name: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        inputs: Mapping[str, str] | None = None,
        outputs: Mapping[str, str] | None = None,
        cache: CachePolicy | None = None,
        defer: bool = False,
        destinations: Sequence[str] | None = None,
    ) -> Self:
        """Add a node (a ``Node`` subclass or instance); its name defaults to the class name.

        A compiled graph (or a ``Graph`` builder, compiled here) becomes a subgraph node
        named after the graph: the fields its state shares with this one are read in and
        written back, the rest stay inside it, and it checkpoints on a child thread of this
        run's (see :class:`~tensorsketch.pregel.subgraph.SubgraphNode`). ``inputs`` /
        ``outputs`` map ``{child_field: parent_field}`` where the names differ.

        ``retry`` runs the node again when it fails (see :class:`~tensorsketch.RetryPolicy`);
        ``timeout`` cancels an attempt after that many seconds with ``NodeTimeoutError``.
        Both default to the graph's ``Graph(retry=..., node_timeout=...)``. ``cache`` reuses
        the node's writes for an input seen within its TTL, from the store given as
        ``compile(cache=...)`` (see :mod:`tensorsketch.cache`). ``defer=True`` holds the node
        back, once planned, until nothing else is left to run: it runs once, after every
        branch that could still reach it (a reduce over branches of uneven length).
        ``destinations`` (a subgraph node only; a node class declares its own) lists the
        nodes of this graph, or ``END``, a node inside the child may send the run to with
        ``Command(graph=Command.PARENT, goto=...)``.
        """
        if cache is not None and not isinstance(cache, CachePolicy):
            msg = f"add(cache=...) takes a CachePolicy(key=..., ttl=...), got {cache!r}."
            raise TypeError(msg)
        retry = _check_retry(retry, "add(retry=...)")
        timeout = _check_timeout(timeout, "add(timeout=...)")
        if isinstance(node, Graph):
            node = node.compile()
        if isinstance(node, CompiledGraph):
            node = SubgraphNode(
                node,
                inputs=inputs,
                outputs=outputs,
                destinations=_subgraph_destinations(destinations),
            )
        elif destinations is not None:
            msg = (
                "add(destinations=...) declares where a subgraph's Command(graph=Command.PARENT)"
                f" may go; {node!r} is not a graph, so declare `destinations = (...)` on its "
                "class."
            )
            raise TypeError(msg)
        elif inputs is not None or outputs is not None:
            msg = (
                "add(inputs=..., outputs=...) maps the fields of a subgraph; "
                f"{node!r} is not a graph, so its ports are its In and Out schemas."
            )
            raise TypeError(msg)
        if isinstance(node, type) and issubclass(node, Node):
            try:
                instance = node()
            except TypeError as exc:
                msg = (
                    f"cannot create {node.__name__}() with no arguments ({exc}); pass an "
                    f"instance instead: `.add({node.__name__}(...))`."
                )
                raise TypeError(msg) from None
        elif isinstance(node, Node):
            instance = node
        else:
            msg = (
                f"`add()` takes a Node subclass or instance, got {node!r}; define "
                "`class MyNode(Node)` with `In`/`Out` schemas and `async def run(self, ctx, inp)`."
            )
            raise TypeError(msg)
        node_name = name if name is not None else instance.default_name()
        if node_name in (START, END):
            self._problems.append(f"a node cannot be named {node_name!r}: that name is reserved.")
        elif node_name in self._nodes:
            self._problems.append(
                f"duplicate node name {node_name!r}: two nodes were added under it; give the "
                f'second one its own name with `.add({type(instance).__name__}, name="...")`.'
            )
        else:
            self._nodes[node_name] = instance
            if retry is not None or timeout is not None:
                self._guards[node_name] = (retry, timeout)
            if cache is not None:
                self._caches[node_name] = cache
            if defer:
                self._deferred.add(node_name)
        return self

    def edge(self, src: str | Sequence[str], dst: str) -> Self:
        """A sequential edge: after ``src`` runs, ``dst`` runs in the next superstep.

        With a list of sources, ``edge(["A", "B"], "C")`` is a wait-for-all join: ``C`` runs
        once after every one of them has run (since ``C`` last ran through this join), even
        when they finish in different supersteps. A one-name list is a plain edge.

        :param src: a node name or ``START``; or a list of node names to wait for.
        :param dst: the node to run next, or ``END``.
        """
        if not isinstance(dst, str):
            msg = f"edge() target must be a node name (str) or END, got {dst!r}."
            raise TypeError(msg)
        if isinstance(src, str):
            self._edges.append((src, dst))
            return self
        if not isinstance(src, list | tuple) or not all(isinstance(s, str) for s in src):
            msg = (
                f"edge() source must be a node name (str), START, or a list of node names "
                f"to wait for (a join), got {src!r}."
            )
            raise TypeError(msg)
        if len(src) == 1:
            self._edges.append((src[0], dst))
        else:
            self._joins.append((tuple(src), dst))
        return self

    def entry(self, name: str) -> Self:
        """Set the entry node; the same as ``edge(START, name)``."""
        return self.edge(START, name)

    def conditional(
        self,
        src: str,
        path: Callable[[S], Any],
        mapping: Mapping[str, str] | Sequence[str] | None = None,
    ) -> Self:
        """Route dynamically after ``src``: ``path(state)`` names the next node(s).

        ``path`` returns a node name, a list of names (fan-out), ``END``, or ``Send`` objects.
        With ``mapping``, it returns keys that are looked up in the mapping instead.
        """
        return self._branch(src, path, mapping, kind="conditional")

    def router(
        self,
        src: str,
        path: Callable[[S], Any],
        mapping: Mapping[str, str] | Sequence[str] | None = None,
    ) -> Self:
        """The same as :meth:`conditional`, named for intent (and for ``Send`` fan-out)."""
        return self._branch(src, path, mapping, kind="router")

    def loop(self, node: str, until: Callable[[S], bool], *, exit: str = END) -> Self:
        """Repeat ``node`` until ``until(state)`` holds, then continue to ``exit``."""
        if not callable(until):
            msg = f"loop({node!r}, until=...) needs a predicate taking the state, got {until!r}."
            raise TypeError(msg)

        def repeat(state: Any) -> str:
            return exit if until(state) else node

        repeat.__name__ = _path_name(until)
        return self._branch(node, repeat, None, kind="loop", exit=exit, loop_node=node)

    def map(self, src: str, node: str, *, over: str, item: str, then: str | None = None) -> Self:
        """After ``src``, run ``node`` once per element of the list field ``over`` — each
        instance its own task in one superstep, reading its element as the port ``item`` —
        then ``then`` once, after all of them (an empty list goes straight to ``then``).

        The graph-level map: what ``gather_map`` does inside a node body, with every instance
        visible, traced and journaled on its own. Collect the results through a reducer field
        that ``node`` writes. It is a route out of ``src`` (``Send`` per element) and an edge
        ``node`` → ``then``; compile checks that ``over`` is a list field of the state and
        that its elements fit ``node``'s ``item`` port.

        :param then: where to go after the map (default: ``END``).
        """
        for label, value in (("src", src), ("node", node), ("over", over), ("item", item)):
            if not isinstance(value, str) or not value:
                msg = f"map(...) needs `{label}` as a non-empty name, got {value!r}."
                raise TypeError(msg)
        if then is not None and not isinstance(then, str):
            msg = f"map(then=...) must be a node name or END, got {then!r}."
            raise TypeError(msg)
        exit_to = then if then is not None else END

        def spread(state: Any) -> Any:
            values = getattr(state, over)
            if not values:
                return exit_to
            return [Send(node, {item: value}) for value in values]

        spread.__name__ = f"map_over_{over}"
        self._maps[src] = (node, over, item)
        self._branch(src, spread, {node: node, exit_to: exit_to}, kind="map", exit=exit_to)
        if then is not None:
            self.edge(node, then)
        return self

    def parallel(self, src: str, nodes: Sequence[str], *, then: str | None = None) -> Self:
        """After ``src``, run ``nodes`` side by side in one superstep, then ``then`` once,
        after every one of them: edges ``src`` → each node and a join ``nodes`` → ``then``.

        The graph-level counterpart of ``parallel(...)`` inside a node body.
        """
        if isinstance(nodes, str) or not isinstance(nodes, Sequence) or len(nodes) < 2:
            msg = (
                f"parallel({src!r}, nodes) needs a list of at least two node names, got {nodes!r}."
            )
            raise TypeError(msg)
        for name in nodes:
            self.edge(src, name)
        if then is not None:
            self.edge(list(nodes), then)
        return self

    def _check_maps(self) -> None:
        """Every ``map``'s list field and item port, typed like any port (at compile)."""
        fields = self.state_schema.model_fields
        state = self.state_schema.__name__
        for src, (node, over, item) in self._maps.items():
            if over not in fields:
                self._problems.append(
                    f"map({src!r}, {node!r}, over={over!r}): {state} has no field {over!r}; "
                    "name the list field whose elements the map runs over."
                )
                continue
            annotation = fields[over].annotation
            element = _element_type(annotation)
            if element is None:
                self._problems.append(
                    f"map({src!r}, {node!r}, over={over!r}): {state}.{over} is "
                    f"`{type_text(annotation)}`, not a list; a map runs over a list field."
                )
                continue
            target = self._nodes.get(node)
            if target is None:
                continue  # the unknown node is reported with the other wiring problems
            ports = type(target).In.model_fields
            if item not in ports:
                self._problems.append(
                    f"map({src!r}, {node!r}, item={item!r}): {node}.In has no port {item!r}; "
                    f"name the port each element goes to (ports: {', '.join(ports) or 'none'})."
                )
                continue
            wanted = ports[item].annotation
            if element is not Any and not is_assignable(element, wanted):
                self._problems.append(
                    f"map({src!r}, {node!r}, over={over!r}, item={item!r}): the elements of "
                    f"{state}.{over} are `{type_text(element)}`, but {node}.{item} is "
                    f"`{type_text(wanted)}`; make the port accept `{type_text(element)}`."
                )

    def _branch(
        self,
        src: str,
        path: Callable[[Any], Any],
        mapping: Mapping[str, str] | Sequence[str] | None,
        *,
        kind: str,
        exit: str | None = None,
        loop_node: str | None = None,
    ) -> Self:
        if not callable(path):
            msg = f"{kind}({shown(src)}, path) needs a callable path function, got {path!r}."
            raise TypeError(msg)
        if isinstance(mapping, Mapping):
            resolved: dict[str, str] | None = {str(k): v for k, v in mapping.items()}
        elif mapping is not None:
            resolved = {name: name for name in mapping}
        else:
            resolved = None
        if src in self._branches:
            self._problems.append(
                f"{'START' if src == START else f'node {src!r}'} has two conditional edges; "
                "a node routes through at most one "
                "path function — merge them into one."
            )
            return self
        self._branches[src] = Branch(
            source=src,
            path=path,
            mapping=resolved,
            kind=kind,
            exit=exit,
            path_name=_path_name(path),
            loop_node=loop_node,
        )
        return self

    # -- the >> surface ---------------------------------------------------------------------

    def nodes(
        self, *nodes: type[Node] | Node | tuple[str, type[Node] | Node]
    ) -> tuple[NodeHandle, ...]:
        """Add several nodes and return a handle for each, for ``>>`` wiring. An entry
        ``("Payments", Billing)`` names its node (as ``add(Billing, name="Payments")``)."""
        handles = []
        for entry in nodes:
            name: str | None = None
            node: Any = entry
            if isinstance(entry, tuple):
                if len(entry) != 2 or not isinstance(entry[0], str):
                    msg = (
                        f"nodes() takes node classes, node instances or (name, node) pairs, "
                        f"got {entry!r}: write a named entry as ('Payments', Billing)."
                    )
                    raise TypeError(msg)
                name, node = entry
            before = set(self._nodes)
            self.add(node, name=name)
            added = [n for n in self._nodes if n not in before]
            handles.append(
                NodeHandle(self, added[0] if added else name or self._default_name(node))
            )
        return tuple(handles)

    def __getitem__(self, name: str) -> NodeHandle:
        """A handle for a node already added, to mix ``>>`` with the other styles."""
        if name not in self._nodes:
            msg = f"no node named {name!r} in this graph{suggest(name, list(self._nodes))}"
            raise KeyError(msg)
        return NodeHandle(self, name)

    @staticmethod
    def _default_name(node: type[Node] | Node) -> str:
        return node.__name__ if isinstance(node, type) else node.default_name()

    # -- introspection ----------------------------------------------------------------------

    @property
    def structure(self) -> GraphStructure:
        """The wiring as plain data: nodes, static edges and conditional branches."""
        branches = {
            src: BranchInfo(
                kind=b.kind,  # type: ignore[arg-type]
                mapping=dict(b.mapping) if b.mapping is not None else None,
                path_name=b.path_name,
                exit=b.exit,
            )
            for src, b in self._branches.items()
        }
        return GraphStructure(
            nodes=tuple(self._nodes),
            edges=tuple(self._edges),
            branches=branches,
            joins=tuple(self._joins),
            deferred=tuple(name for name in self._nodes if name in self._deferred),
            cached=tuple(name for name in self._nodes if name in self._caches),
            destinations={
                name: tuple(node.destinations)
                for name, node in self._nodes.items()
                if node.destinations
            },
        )

    # -- compile ----------------------------------------------------------------------------

    def compile(
        self,
        *,
        migrate: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        interrupt_before: Sequence[str] | str = (),
        interrupt_after: Sequence[str] | str = (),
        max_concurrency: int | None = None,
        executor: str | Executor | None = None,
        cache: NodeCache | None = None,
    ) -> CompiledGraph[S]:
        """Validate the whole graph and return a runnable, immutable compiled graph.

        Every mistake found is reported at once in one :class:`GraphValidationError`.

        :param migrate: maps a checkpoint's stored values (a dict of field name to value) onto
            the current state's fields, for threads written before the state changed (a
            field renamed, removed or retyped). Without it such a resume fails with an error
            naming the fields, rather than dropping their values silently.
        :param interrupt_before: node names (or ``"*"``) to stop a run at before they run;
            invoking the thread again continues past the stop.
        :param interrupt_after: node names (or ``"*"``) to stop a run at after their
            superstep's barrier.
        :param max_concurrency: the most tasks of one superstep that run at once (a large
            ``Send`` fan-out against a rate-limited API); ``invoke(max_concurrency=...)``
            overrides it per call. The fold order is task order either way.
        :param executor: where a superstep's ``Send`` instances run: ``None`` (the default)
            on the caller's event loop, an executor name registered through the
            ``tensorsketch_executors`` hook (``"ray"`` with ``tensorsketch-ray``), or a
            :class:`tensorsketch.executors.Executor`; ``invoke(executor=...)`` overrides it.
            The result is the same either way (see ``docs/execution-model.md``).
        :param cache: where nodes added with ``cache=CachePolicy(...)`` keep their results
            (:class:`~tensorsketch.cache.InMemoryCache`, ``SqliteCache``, ``PostgresCache``,
            ``RedisCache``); without it such nodes always run.
        """
        check_concurrency(max_concurrency, "compile(max_concurrency=...)")
        self._check_maps()
        if cache is not None and not isinstance(cache, NodeCache):
            msg = (
                f"compile(cache=...) takes a NodeCache (InMemoryCache(), SqliteCache(path), "
                f"...), got {cache!r}."
            )
            raise TypeError(msg)
        chosen: Executor | None = None
        if executor is not None:
            chosen = resolve_executor(executor, "compile(executor=...)")
        if migrate is not None and not callable(migrate):
            msg = f"compile(migrate=...) must be a function values -> values, got {migrate!r}."
            raise TypeError(msg)
        blueprint = Blueprint(
            name=self.name,
            state=self.state_schema,
            nodes=self._nodes,
            edges=self._edges,
            joins=self._joins,
            branches=self._branches,
            guards=self._guards,
            caches=self._caches,
            deferred=frozenset(self._deferred),
            retry=self._retry,
            timeout=self._timeout,
            problems=self._problems,
            structure=self.structure,
        )
        spec = build_spec(
            blueprint,
            migrate=migrate,
            interrupt_before=interrupt_before,
            interrupt_after=interrupt_after,
            max_concurrency=max_concurrency,
            executor=chosen,
            cache=cache,
        )
        return CompiledGraph(spec)


def _check_retry(retry: Any, where: str) -> RetryPolicy | None:
    if retry is not None and not isinstance(retry, RetryPolicy):
        msg = (
            f"{where} takes a RetryPolicy, got {retry!r}; "
            "e.g. `retry=RetryPolicy(max_attempts=3)` (from tensorsketch import RetryPolicy)."
        )
        raise TypeError(msg)
    return retry


def _check_timeout(timeout: Any, where: str) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        msg = f"{where} takes a number of seconds > 0 (or None for no limit), got {timeout!r}."
        raise ValueError(msg)
    return float(timeout)


def _subgraph_destinations(destinations: Sequence[str] | None) -> tuple[str, ...]:
    """``add(child, destinations=...)`` as a tuple of names (compile checks each)."""
    if destinations is None:
        return ()
    if isinstance(destinations, str) or not isinstance(destinations, Sequence):
        msg = (
            f"add(destinations=...) takes a tuple of node names, got {destinations!r}; "
            'e.g. `destinations=("Billing", END)`.'
        )
        raise TypeError(msg)
    return tuple(destinations)
