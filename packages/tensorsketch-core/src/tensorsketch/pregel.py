"""The BSP engine: plan, execute in parallel on one snapshot, fold writes at a barrier.

A :class:`Run` is one invocation of a compiled graph. Each superstep:

1. **plan** — the active tasks are known (the entry, then whatever the previous barrier named);
2. **execute** — every task runs concurrently and reads the same state; writes are buffered;
3. **barrier** — writes are folded into channels in task order (never completion order), the
   successors are computed from the new state, and (for a durable run) a checkpoint is saved.

Nothing here knows about agents, providers or stores: the durable layer is reached through
:class:`tensorsketch.durable.RunJournal`, and observers through the event sink and the tracer.
"""

from __future__ import annotations

import asyncio
import difflib
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pydantic

from tensorsketch._fastmodel import fast_constructor
from tensorsketch._state_input import state_writes
from tensorsketch.channels import MISSING, Channel
from tensorsketch.constants import END
from tensorsketch.context import Context
from tensorsketch.durable import Position
from tensorsketch.effects import EffectLog
from tensorsketch.errors import (
    BackendUnavailableError,
    CheckpointDecodeError,
    EmptyChannelError,
    GraphRecursionError,
    NodeError,
    NodeTimeoutError,
    RoutingError,
    ThreadBusyError,
)
from tensorsketch.events import Event
from tensorsketch.graph_structure import GraphStructure
from tensorsketch.interrupts import Interrupt, PendingInterrupt
from tensorsketch.joins import Join, arrive, restore_arrivals, snapshot
from tensorsketch.node import Node
from tensorsketch.observability.tracing import NOOP_TRACER, Tracer
from tensorsketch.retry import RetryPolicy
from tensorsketch.schema import Schema
from tensorsketch.send import Send

if TYPE_CHECKING:
    from tensorsketch.durable import Restored, RunJournal
    from tensorsketch.executors import Executor

__all__ = ["Branch", "GraphSpec", "NodeSpec", "Run", "Task", "check_concurrency"]

EventSink = Callable[[Event], Awaitable[None]]
TaskDone = Callable[["Task", dict[str, Any]], Awaitable[None]]

#: Failures of the store itself: no failure checkpoint can be written for them.
_STORE_ERRORS = (BackendUnavailableError, CheckpointDecodeError, ThreadBusyError)

#: What path functions usually return: never awaitable, so the awaitable check can be skipped.
_PLAIN_ROUTES: frozenset[type] = frozenset({str, list, tuple, Send})


@dataclass(slots=True, eq=False)
class Branch:
    """A conditional edge: ``path(state)`` picks the successors of ``source``."""

    source: str
    path: Callable[[Any], Any]
    mapping: dict[str, str] | None
    kind: str
    exit: str | None
    path_name: str
    loop_node: str | None = None


@dataclass(slots=True, eq=False)
class NodeSpec:
    """A node as the engine sees it: what it reads, what it writes, where it goes next."""

    name: str
    node: Node
    run: Callable[[Context, Any], Awaitable[Any]]
    in_schema: type[Schema]
    out_schema: type[Schema]
    reads: tuple[tuple[str, bool], ...]
    writes: tuple[str, ...]
    successors: tuple[str, ...] = ()
    branch: Branch | None = None
    #: ``in_schema.model_construct`` for complete values, made fast on first use.
    make_input: Callable[[dict[str, Any]], Schema] | None = None
    #: ``add(retry=..., timeout=...)`` (or the graph's defaults): ``None`` is the fast path.
    retry: RetryPolicy | None = None
    timeout: float | None = None
    #: The wait-for-all joins this node is a source of (empty: the fast path).
    joins: tuple[Join, ...] = ()


@dataclass(slots=True, eq=False)
class GraphSpec:
    """Everything ``compile()`` decided, frozen for the engine."""

    name: str
    state_schema: type[Schema]
    channels: dict[str, Channel]
    defaults: dict[str, Callable[[], Any]]
    required: tuple[str, ...]
    nodes: dict[str, NodeSpec]
    entry: tuple[str, ...]
    entry_branch: Branch | None
    structure: GraphStructure
    adapters: dict[str, pydantic.TypeAdapter[Any]] = field(default_factory=dict)
    #: ``compile(migrate=...)``: stored values -> current fields, applied on every restore.
    migrate: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    #: ``compile(interrupt_before=..., interrupt_after=...)``: static breakpoints.
    interrupt_before: frozenset[str] = frozenset()
    interrupt_after: frozenset[str] = frozenset()
    #: ``compile(max_concurrency=...)``: the most tasks of a superstep running at once.
    max_concurrency: int | None = None
    #: ``compile(executor=...)``: where ``Send`` instances run (``None``: on this loop).
    executor: Executor | None = None
    #: ``edge([...], dst)``: the wait-for-all joins, in declaration order.
    joins: tuple[Join, ...] = ()
    #: Derived once, read on every superstep: the state's field names, in declaration order,
    #: the channels that forget their value at each barrier, and a fast state constructor.
    field_names: tuple[str, ...] = field(init=False, default=())
    field_set: frozenset[str] = field(init=False, default=frozenset())
    clearing: tuple[str, ...] = field(init=False, default=())
    make_state: Callable[[dict[str, Any]], Schema] = field(init=False)

    def __post_init__(self) -> None:
        self.field_names = tuple(self.state_schema.model_fields)
        self.field_set = frozenset(self.field_names)
        self.clearing = tuple(n for n, c in self.channels.items() if c.clears_each_step)
        self.make_state = fast_constructor(self.state_schema)

    def adapter(self, name: str) -> pydantic.TypeAdapter[Any]:
        """A validator for one state field (built on first use)."""
        found = self.adapters.get(name)
        if found is None:
            info = self.state_schema.model_fields[name]
            annotation: Any = info.annotation
            found = pydantic.TypeAdapter(annotation)
            self.adapters[name] = found
        return found


@dataclass(slots=True, eq=False)
class Task:
    """One unit of a superstep: a node, plus a ``Send`` payload for fan-out instances."""

    spec: NodeSpec
    payload: dict[str, Any] | None = None
    instance: str = ""


class Run:
    """One execution of a compiled graph (an ``invoke`` or ``stream`` call)."""

    def __init__(
        self,
        spec: GraphSpec,
        *,
        thread_id: str | None = None,
        journal: RunJournal | None = None,
        tracer: Tracer | None = None,
        sink: EventSink | None = None,
        namespace: tuple[str, ...] = (),
        run_id: str | None = None,
    ) -> None:
        self.spec = spec
        self.thread_id = thread_id
        self.journal = journal
        self.tracer: Tracer = tracer if tracer is not None else NOOP_TRACER
        self.sink = sink
        self.namespace = namespace
        self.run_id = run_id or uuid.uuid4().hex
        self.values: dict[str, Any] = {}
        self.step = 0
        self.seq = 0
        self.checkpoint_id: str | None = None
        #: The checkpoint that planned the current superstep (its finished tasks' writes are
        #: journaled under it), and whether the run was restored from a checkpoint.
        self.plan_id: str | None = None
        self.restored = False
        #: Decisions passed with ``invoke(resume=...)``, keyed by interrupt id.
        self.resume: dict[str, Any] = {}
        #: Every side effect of the run goes through here (exactly once, journaled if durable).
        self.effects = EffectLog(journal, self.resume)
        #: What the restored checkpoint was waiting on, and what this run stopped on.
        self.restored_interrupts: list[PendingInterrupt] = []
        self.interrupts: list[PendingInterrupt] = []
        #: ``run_end`` was emitted (at the last barrier, before the final checkpoint).
        self.ended = False
        #: The task whose error ended the last superstep, if one did.
        self.failed_task: Task | None = None
        #: Static breakpoints for this run (the compiled ones unless ``invoke`` overrides).
        self.interrupt_before = spec.interrupt_before
        self.interrupt_after = spec.interrupt_after
        #: How many tasks of a superstep may run at once (``None``: all of them).
        self.max_concurrency = spec.max_concurrency
        #: Where this run's ``Send`` instances run (``None``: here, the fast path).
        self.executor = spec.executor
        #: Which sources of each part-way join have run since it last fired (by join index).
        self.arrived: dict[int, set[str]] = {}

    def choose_executor(self, executor: object) -> None:
        """Apply ``invoke(executor=...)`` over the compiled choice (``"inprocess"``: here)."""
        from tensorsketch.executors import resolve_executor

        self.executor = resolve_executor(executor, "executor=")

    # -- durable bookkeeping ----------------------------------------------------------------

    def position(self) -> Position:
        """Where this run stands, for the journal to checkpoint."""
        joins = snapshot(self.spec.joins, self.arrived) if self.arrived else ()
        return Position(values=self.values, step=self.step, seq=self.seq, joins=joins)

    def restore(self, restored: Restored) -> None:
        """Continue from a checkpoint the journal read back."""
        self.values = restored.values
        self.step = restored.step
        self.seq = max(self.seq, restored.seq)
        self.checkpoint_id = restored.checkpoint_id
        self.plan_id = restored.plan_id
        self.restored = True
        self.restored_interrupts = list(restored.interrupts)
        self.arrived = restore_arrivals(self.spec.joins, restored.joins)

    async def save_checkpoint(
        self,
        changed: dict[str, list[Any] | None] | None,
        tasks: list[Task],
        **options: Any,
    ) -> str:
        """Checkpoint this run through its journal and move its cursor to the new id (a
        failed superstep's checkpoint keeps the superstep's planning id)."""
        journal = self.journal
        assert journal is not None
        options.setdefault("parent_id", self.checkpoint_id)
        checkpoint_id = await journal.checkpoint(self.position(), changed, tasks, **options)
        meta = options.get("meta") or {}
        self.checkpoint_id = checkpoint_id
        self.plan_id = str(meta.get("retry_of") or checkpoint_id)
        return checkpoint_id

    # -- state ------------------------------------------------------------------------------

    def seed(self) -> None:
        """Start from the state's defaults (before the input is applied)."""
        values = self.values
        for name, channel in self.spec.channels.items():
            make = self.spec.defaults.get(name)
            value = channel.initial(make() if make is not None else MISSING)
            if value is not MISSING:
                values[name] = value

    def fresh_tasks(self, data: Any) -> list[Task]:
        """Start over from the state's defaults, fold ``data`` in, and plan the first
        superstep (a run with nothing to resume)."""
        self.values = {}
        self.arrived = {}
        self.seed()
        self.apply_input(data)
        return self.entry_tasks()

    def apply_input(self, data: Any) -> dict[str, list[Any] | None]:
        """Validate the caller's input and fold it into the channels like a node's writes."""
        if data is None:
            return {}
        writes = state_writes(self.spec, data, "invoke()", "invoke({'query': ...})")
        return self._fold({k: [v] for k, v in writes.items()}, {k: ["input"] for k in writes})

    def _fold(
        self, pending: dict[str, list[Any]], writers: dict[str, list[str]]
    ) -> dict[str, list[Any] | None]:
        """Apply grouped writes through the channels; return what changed (with appends)."""
        values = self.values
        channels = self.spec.channels
        changed: dict[str, list[Any] | None] = {}
        for name, writes in pending.items():
            channel = channels[name]
            new, appended = channel.apply(values.get(name, MISSING), writes, writers[name])
            if new is not MISSING:
                values[name] = new
            changed[name] = appended
        return changed

    def state_view(self) -> Schema:
        """The current values as a state instance (unvalidated; for routing functions)."""
        values = self.values
        spec = self.spec
        if len(values) == len(spec.field_names):
            # A copy in declaration order, so the view never aliases the live channels.
            return spec.make_state({name: values[name] for name in spec.field_names})
        return spec.state_schema.model_construct(**values)

    def final_state(self) -> Schema:
        """The validated state returned by ``invoke``."""
        schema = self.spec.state_schema
        missing = [name for name in self.spec.required if name not in self.values]
        if missing:
            names = ", ".join(repr(m) for m in missing)
            msg = (
                f"the run finished but required state field(s) {names} of {schema.__name__} "
                "were never set; pass them in the input, give them defaults, or make sure a "
                "node writes them."
            )
            raise EmptyChannelError(msg)
        try:
            return schema.model_validate(self.values)
        except pydantic.ValidationError as exc:
            msg = f"the final state does not validate as {schema.__name__}: {exc}"
            raise NodeError(msg) from exc

    # -- planning ---------------------------------------------------------------------------

    def entry_tasks(self) -> list[Task]:
        """The first superstep's tasks."""
        spec = self.spec
        if spec.entry_branch is not None:
            return self._route(spec.entry_branch, self.state_view(), {})
        return [Task(spec.nodes[name]) for name in spec.entry if name != END]

    def tasks_from_plan(self, plan: list[tuple[str, dict[str, Any] | None]]) -> list[Task]:
        """Rebuild tasks saved in a checkpoint (node names and pending Send payloads)."""
        tasks: list[Task] = []
        counts: dict[str, int] = {}
        for name, payload in plan:
            node = self.spec.nodes.get(name)
            if node is None:
                msg = (
                    f"the checkpoint plans node {name!r}, which this graph no longer has; "
                    "resume with the graph version that wrote it, or fork from an earlier "
                    "checkpoint."
                )
                raise RoutingError(msg)
            if payload is None:
                tasks.append(Task(node))
            else:
                k = counts.get(name, 0)
                counts[name] = k + 1
                tasks.append(Task(node, payload, f"#{k}"))
        return tasks

    def next_tasks(self, tasks: list[Task]) -> list[Task]:
        """Successors of this superstep's tasks, in task order; plain nodes are deduped.

        Each task that is a join source also arrives at its joins; a join whose sources have
        all arrived plans its target here (where its last-arriving source is in task order).
        """
        nodes = self.spec.nodes
        result: list[Task] = []
        seen_nodes: set[str] = set()
        handled: set[str] = set()
        view: Schema | None = None
        counts: dict[str, int] = {}
        for task in tasks:
            spec = task.spec
            if spec.name in handled:
                continue
            handled.add(spec.name)
            if spec.branch is None:
                for target in spec.successors:
                    if target != END and target not in seen_nodes:
                        seen_nodes.add(target)
                        result.append(Task(nodes[target]))
            else:
                if view is None:
                    view = self.state_view()
                for routed in self._route(spec.branch, view, counts):
                    if routed.payload is None:
                        if routed.spec.name in seen_nodes:
                            continue
                        seen_nodes.add(routed.spec.name)
                    result.append(routed)
            if spec.joins:
                for target in arrive(self.arrived, spec.joins, spec.name):
                    if target not in seen_nodes:
                        seen_nodes.add(target)
                        result.append(Task(nodes[target]))
        return result

    def _route(self, branch: Branch, view: Schema, counts: dict[str, int]) -> list[Task]:
        try:
            decided = branch.path(view)
        except Exception as exc:
            exc.add_note(f"while routing out of {branch.source!r} with {branch.path_name}()")
            raise
        if type(decided) not in _PLAIN_ROUTES and inspect.isawaitable(decided):
            msg = (
                f"path function {branch.path_name}() of {branch.source!r} returned an awaitable; "
                "routing functions must be plain (sync) functions of the state."
            )
            raise RoutingError(msg)
        items = decided if isinstance(decided, list | tuple) else [decided]
        tasks: list[Task] = []
        for item in items:
            if isinstance(item, Send):
                tasks.append(self._send_task(branch, item, counts))
                continue
            target = self._resolve(branch, item)
            if target != END:
                tasks.append(Task(self.spec.nodes[target]))
        return tasks

    def _resolve(self, branch: Branch, item: Any) -> str:
        nodes = self.spec.nodes
        mapping = branch.mapping
        if mapping is not None:
            if isinstance(item, str) and item in mapping:
                return mapping[item]
            if isinstance(item, str) and (item in mapping.values()):
                return item
            keys = ", ".join(repr(k) for k in mapping)
            msg = (
                f"{branch.path_name}() routing out of {branch.source!r} returned {item!r}, which "
                f"is not one of its keys ({keys}); return one of those keys or END."
            )
            raise RoutingError(msg)
        if isinstance(item, str) and (item == END or item in nodes):
            return item
        if item is None:
            msg = (
                f"{branch.path_name}() routing out of {branch.source!r} returned None; return a "
                "node name, a list of names, Send(...) objects, or END to stop."
            )
            raise RoutingError(msg)
        close = difflib.get_close_matches(str(item), list(nodes), n=1)
        hint = f" — did you mean {close[0]!r}?" if close else f" (nodes: {', '.join(nodes)})"
        msg = (
            f"{branch.path_name}() routing out of {branch.source!r} returned {item!r}, which is "
            f"not a node of this graph{hint}"
        )
        raise RoutingError(msg)

    def _send_task(self, branch: Branch, send: Send, counts: dict[str, int]) -> Task:
        spec = self.spec.nodes.get(send.node)
        if spec is None:
            msg = (
                f"{branch.path_name}() routing out of {branch.source!r} sent to unknown node "
                f"{send.node!r} (nodes: {', '.join(self.spec.nodes)})."
            )
            raise RoutingError(msg)
        payload = send.payload
        if type(payload) is dict:
            data: dict[str, Any] = payload.copy()
        elif payload is None:
            data = {}
        elif isinstance(payload, Schema):
            data = {k: getattr(payload, k) for k in payload.model_fields_set}
        elif isinstance(payload, Mapping):
            data = dict(payload)
        else:
            msg = (
                f"Send({send.node!r}, payload) needs a dict of state fields or a Schema "
                f"instance, got {type(payload).__name__}."
            )
            raise RoutingError(msg)
        fields = self.spec.field_set
        unknown = [] if fields.issuperset(data) else [k for k in data if k not in fields]
        if unknown:
            msg = (
                f"Send({send.node!r}, ...) payload has {unknown!r}, which are not fields of "
                f"{self.spec.state_schema.__name__}; a payload overrides state fields."
            )
            raise RoutingError(msg)
        k = counts.get(send.node, 0)
        counts[send.node] = k + 1
        return Task(spec, data, f"#{k}")

    # -- executing --------------------------------------------------------------------------

    def build_input(self, task: Task) -> Any:
        spec = task.spec
        values = self.values
        payload = task.payload
        kwargs: dict[str, Any] = {}
        for name, required in spec.reads:
            if payload is not None and name in payload:
                kwargs[name] = payload[name]
                continue
            value = values.get(name, MISSING)
            if value is MISSING:
                if required:
                    msg = (
                        f"node {spec.name!r} reads state field {name!r}, which has no value yet; "
                        f"give {self.spec.state_schema.__name__}.{name} a default, pass it in "
                        "the input, or make sure a node writes it before this one runs."
                    )
                    raise EmptyChannelError(msg)
                continue
            kwargs[name] = value
        if payload is None:
            make = spec.make_input
            if make is None:
                make = spec.make_input = fast_constructor(spec.in_schema)
            return make(kwargs)
        try:
            return spec.in_schema.model_validate(kwargs)
        except pydantic.ValidationError as exc:
            msg = f"Send payload for {spec.name!r}{task.instance} does not fit its In: {exc}"
            raise RoutingError(msg) from exc

    def writes_of(self, spec: NodeSpec, out: Any) -> dict[str, Any]:
        """The state writes a node's return value stands for."""
        if out is None:
            return {}
        out_schema = spec.out_schema
        if not isinstance(out, out_schema):
            if isinstance(out, Mapping):
                try:
                    out = out_schema.model_validate(out)
                except pydantic.ValidationError as exc:
                    msg = f"node {spec.name!r} returned a dict that does not fit its Out: {exc}"
                    raise NodeError(msg) from exc
            else:
                msg = (
                    f"node {spec.name!r} returned {type(out).__name__} ({out!r:.80}); return "
                    f"`self.Out(...)` ({out_schema.__qualname__}), a dict of its fields, or None."
                )
                raise NodeError(msg)
        fields_set = out.__pydantic_fields_set__
        data = out.__dict__
        return {name: data[name] for name in spec.writes if name in fields_set}

    async def run_task(self, task: Task, step: int, *, guarded: bool = True) -> dict[str, Any]:
        """Run one task and return its writes; ``guarded=False`` skips its retry policy and
        timeout (``_run_guarded`` applies them around this)."""
        spec = task.spec
        if guarded and (spec.retry is not None or spec.timeout is not None):
            return await self._run_guarded(task, step)
        ctx = Context(self, spec.name, step, task.instance)
        inp = self.build_input(task)
        if self.sink is not None:
            await self.emit(
                "node_start", node=spec.name, data={"instance": task.instance}, step=step
            )
        try:
            if self.tracer.enabled:
                with self.tracer.span(
                    spec.name,
                    kind="node",
                    **{"tensorsketch.node": spec.name, "tensorsketch.step": step},
                ):
                    out = await spec.run(ctx, inp)
            else:
                out = await spec.run(ctx, inp)
        except Interrupt as exc:
            exc.parts = [(task, exc.writes)]
            raise
        except Exception as exc:
            where = f"node {spec.name!r}{task.instance} in superstep {step}"
            exc.add_note(f"raised by {where} of {self.spec.name}")
            raise
        writes = self.writes_of(spec, out)
        if self.sink is not None:
            await self.emit(
                "node_end",
                node=spec.name,
                data={"instance": task.instance, "writes": writes},
                step=step,
            )
        return writes

    async def _run_guarded(self, task: Task, step: int) -> dict[str, Any]:
        """``run_task`` for a node with a retry policy or a timeout.

        Every attempt gets a fresh context, so its effect keys are the failed attempt's: the
        ``ctx.step`` calls that attempt finished replay their results (the effect log keeps
        them for the superstep even in memory) instead of running again.
        """
        spec = task.spec
        policy = spec.retry
        attempts = policy.max_attempts if policy is not None else 1
        self.effects.remember_attempts()
        attempt = 1
        while True:
            try:
                return await self._attempt(task, step)
            except Interrupt:
                raise
            except Exception as exc:
                if attempt >= attempts or policy is None or not policy.retries(exc):
                    if attempt > 1:
                        exc.add_note(f"gave up after {attempt} attempts")
                    raise
                wait = policy.delay(attempt)
                if self.sink is not None:
                    await self.emit(
                        "node_retry",
                        node=spec.name,
                        data={
                            "instance": task.instance,
                            "attempt": attempt,
                            "error": f"{type(exc).__name__}: {exc}"[:500],
                            "delay": wait,
                        },
                        step=step,
                    )
                await asyncio.sleep(wait)
                attempt += 1

    async def _attempt(self, task: Task, step: int) -> dict[str, Any]:
        """One attempt of a guarded node: ``run_task``'s body under the node's timeout."""
        spec = task.spec
        limit = spec.timeout
        if limit is None:
            return await self.run_task(task, step, guarded=False)
        try:
            async with asyncio.timeout(limit) as scope:
                return await self.run_task(task, step, guarded=False)
        except TimeoutError as exc:
            if not scope.expired():
                raise  # the node's own TimeoutError, not ours
            msg = (
                f"node {spec.name!r}{task.instance} did not finish within its timeout of "
                f"{limit:g}s in superstep {step}; raise `timeout=` on `add(...)`, or give it "
                "a RetryPolicy to try again."
            )
            raise NodeTimeoutError(msg, node=spec.name, timeout=limit) from exc

    async def run_parallel(
        self, tasks: list[Task], step: int, on_done: TaskDone | None = None
    ) -> list[dict[str, Any]]:
        """Run tasks concurrently; the first failure cancels the rest and propagates as is.

        One shared countdown wakes the barrier instead of ``asyncio.wait``'s callback on every
        task: a 10,000-way fan-out costs one wake-up, not 10,000 callback registrations.
        ``on_done(task, writes)`` is awaited for each task that finishes while others still
        run, before it counts as done.
        """
        if not tasks:
            return []
        loop = asyncio.get_running_loop()
        gather = _Gather(len(tasks), loop.create_future(), on_done)
        run_into = self._run_into
        limit = self.max_concurrency
        if limit is not None and len(tasks) > limit:
            # ``limit`` workers take the tasks in order: never more than that in flight, and
            # results still land by task index, so the fold order is unchanged.
            order = iter(enumerate(tasks))
            futures = [loop.create_task(self._work(gather, order, step)) for _ in range(limit)]
        else:
            futures = [
                loop.create_task(run_into(gather, index, task, step))
                for index, task in enumerate(tasks)
            ]
        try:
            await gather.waiter
        except BaseException:
            await _cancel_all(futures)
            raise
        if gather.failures:
            # The first failure in task order among those seen when the barrier woke.
            index, first = min(gather.failures, key=lambda pair: pair[0])
            await _cancel_all(futures)
            self.failed_task = tasks[index]
            raise first
        if gather.suspended:
            # Every other task finished (their effects are journaled); suspend them all.
            raise Interrupt.merge([exc for _, exc in sorted(gather.suspended, key=_first)])
        return gather.results  # type: ignore[return-value]

    async def _work(self, gather: _Gather, order: Iterator[tuple[int, Task]], step: int) -> None:
        """One worker of a bounded superstep: run the next task until none is left."""
        for index, task in order:
            if gather.failures:
                return  # the superstep failed: start nothing new
            await self._run_into(gather, index, task, step)

    async def _run_into(self, gather: _Gather, index: int, task: Task, step: int) -> None:
        try:
            writes = gather.results[index] = await self.run_task(task, step)
            if gather.on_done is not None and gather.remaining > 1:
                await gather.on_done(task, writes)
        except Interrupt as exc:
            gather.suspended.append((index, exc))
        except Exception as exc:
            gather.fail(index, exc)
            return
        except BaseException as exc:  # cancelled from outside: the barrier must still wake
            gather.fail(index, exc)
            raise
        gather.remaining -= 1
        if not gather.remaining:
            waiter = gather.waiter
            if not waiter.done():
                waiter.set_result(None)

    async def emit(
        self,
        type: str,
        *,
        node: str | None = None,
        data: Any = None,
        step: int | None = None,
        namespace: tuple[str, ...] | None = None,
    ) -> None:
        """Send one event to the consumer (and the durable event log).

        ``namespace`` overrides the run's own, to forward a nested run's events.
        """
        sink = self.sink
        if sink is not None:
            await sink(self._event(type, node=node, data=data, step=step, namespace=namespace))

    def _event(
        self,
        type: str,
        *,
        node: str | None = None,
        data: Any = None,
        step: int | None = None,
        namespace: tuple[str, ...] | None = None,
    ) -> Event:
        """Number an event and add it to the durable log's buffer (the caller delivers it)."""
        event = Event(
            seq=self.seq,
            type=type,
            node=node,
            run_id=self.run_id,
            thread_id=self.thread_id,
            data=data,
            namespace=self.namespace if namespace is None else namespace,
            step=step,
            ts=time.time(),
        )
        self.seq += 1
        if self.journal is not None:
            self.journal.buffer_event(event)
        return event

    async def execute(self, tasks: list[Task], max_steps: int) -> None:
        """Run supersteps until no task is left, checkpointing at every barrier."""
        journal = self.journal
        steps_run = 0
        # A run resumed from an interrupt_before stop goes past it (once).
        passed = any(
            p.kind == "breakpoint" and isinstance(p.value, dict) and p.value.get("when") == "before"
            for p in self.restored_interrupts
        )
        if not tasks and _stopped_after(self.restored_interrupts):
            await self._end_after_breakpoint()
            return
        while tasks:
            if steps_run >= max_steps:
                active = sorted({t.spec.name for t in tasks})
                msg = (
                    f"exceeded {max_steps} supersteps without halting (still active: {active}); "
                    "check the loop's exit condition, or raise `max_steps=` if the run really "
                    "needs more steps."
                )
                raise GraphRecursionError(msg)
            step = self.step
            if self.interrupt_before and not passed:
                stop = self.breakpoint("before", tasks)
                if stop is not None:
                    await self.suspend(tasks, Interrupt(pending=[stop]))
                    return
            passed = False
            restored, self.restored = self.restored, False
            self.failed_task = None
            try:
                if self.executor is not None and _ships(tasks):
                    results = await self._run_shipped(tasks, step, restored)
                elif len(tasks) == 1:
                    results = [await self.run_task(tasks[0], step)]
                elif journal is None:
                    results = await self.run_parallel(tasks, step)
                else:
                    results = await self._run_journaled(tasks, step, restored)
            except Interrupt as exc:
                await self.suspend(tasks, exc)
                return
            except Exception as exc:
                if journal is not None:
                    await self.record_failure(tasks, exc)
                raise
            changed = self.barrier(tasks, results)
            self.effects.forget_attempts()
            ran, tasks = tasks, self.next_tasks(tasks)
            self.step = step + 1
            steps_run += 1
            if await self._close_superstep(changed, ran, tasks, step):
                return

    async def _close_superstep(
        self,
        changed: dict[str, list[Any] | None],
        ran: list[Task],
        tasks: list[Task],
        step: int,
    ) -> bool:
        """Report and checkpoint a finished barrier that planned ``tasks``; ``True`` when an
        ``interrupt_after`` breakpoint stops the run here — after its last superstep too
        (nothing planned: resuming then just ends it, see :meth:`_end_after_breakpoint`)."""
        journal = self.journal
        stop = self.breakpoint("after", ran) if self.interrupt_after else None
        sink = self.sink
        ended = None
        if sink is not None:
            await self.emit("values", data=dict(self.values), step=step)
            if not tasks and stop is None:  # logged with the final checkpoint, sent once stored
                self.ended = True
                ended = self._event("run_end", data=dict(self.values), step=self.step)
        if stop is not None:
            self.interrupts = [stop]
            if sink is not None:
                await self.emit("interrupt", data={"interrupts": [stop.to_dict()]}, step=step)
        if journal is not None:
            meta = {"interrupts": [stop.to_dict()]} if stop is not None else None
            await self.save_checkpoint(
                changed, tasks, final=not tasks or stop is not None, meta=meta
            )
        if sink is not None and ended is not None:
            await sink(ended)
        return stop is not None

    async def _end_after_breakpoint(self) -> None:
        """End a run resumed from an ``interrupt_after`` stop that planned nothing: no node
        runs; a checkpoint without the interrupt records that the thread completed, and
        ``run_end`` is logged with it (the stop itself emitted none)."""
        sink = self.sink
        ended = None
        if sink is not None:
            self.ended = True
            ended = self._event("run_end", data=dict(self.values), step=self.step)
        if self.journal is not None:
            await self.save_checkpoint({}, [], final=True)
        if sink is not None and ended is not None:
            await sink(ended)

    def breakpoint(self, when: str, tasks: list[Task]) -> PendingInterrupt | None:
        """The static breakpoint ``tasks`` hit (``when``: ``"before"`` they run or
        ``"after"`` their barrier), or ``None``; its id is unique to the superstep."""
        names = self.interrupt_before if when == "before" else self.interrupt_after
        hit = list(dict.fromkeys(t.spec.name for t in tasks if t.spec.name in names))
        if not hit:
            return None
        step = self.step if when == "before" else self.step - 1
        return PendingInterrupt(
            id=f"breakpoint:{when}:{step}",
            kind="breakpoint",
            value={"when": when, "nodes": hit},
            node=hit[0],
        )

    async def _run_shipped(
        self, tasks: list[Task], step: int, restored: bool
    ) -> list[dict[str, Any]]:
        """A superstep whose ``Send`` instances run on the run's executor (see
        :mod:`tensorsketch.executors`); a durable one keeps per-branch commit."""
        from tensorsketch.executors import run_shipped

        executor = self.executor
        assert executor is not None
        if self.journal is not None:
            return await self._run_journaled(tasks, step, restored, executor)
        return await run_shipped(self, executor, tasks, step)

    async def _run_journaled(
        self, tasks: list[Task], step: int, restored: bool, executor: Executor | None = None
    ) -> list[dict[str, Any]]:
        """Run a durable superstep with per-branch commit: each task's writes are journaled
        as it finishes, and a resumed superstep runs only the tasks that had not."""
        journal = self.journal
        assert journal is not None
        done = await journal.finished_writes(self.plan_id, tasks) if restored else {}
        todo = [task for index, task in enumerate(tasks) if index not in done] if done else tasks
        log = journal.write_log(self.plan_id)
        try:
            if executor is None:
                fresh = await self.run_parallel(todo, step, log.add)
            else:
                from tensorsketch.executors import run_shipped

                fresh = await run_shipped(self, executor, todo, step, log.add, restored)
        except BaseException as exc:
            # A failing task keeps its finished siblings; a suspension re-plans the superstep
            # under a new checkpoint, and a cancelled run stops where it is.
            keep = isinstance(exc, Exception) and not isinstance(exc, Interrupt)
            try:
                await log.close(keep=keep)
            except Exception as store_exc:
                exc.add_note(f"finished tasks could not be journaled: {store_exc}")
            raise
        await log.close(keep=False)
        if not done:
            return fresh
        ran = iter(fresh)
        return [done[i] if i in done else next(ran) for i in range(len(tasks))]

    async def record_failure(self, tasks: list[Task], exc: Exception) -> None:
        """Save a checkpoint that says which task failed and why (``get_state`` shows it); it
        plans the same superstep, so invoking the thread again retries just that."""
        journal = self.journal
        if journal is None or isinstance(exc, _STORE_ERRORS):
            return  # the store itself failed: there is nothing to write to
        task = self.failed_task or tasks[0]
        error = {
            "node": task.spec.name,
            "instance": task.instance,
            "step": self.step,
            "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "message": str(exc)[:2000],
        }
        try:
            await self.save_checkpoint(
                {},
                tasks,
                source="error",
                meta={"error": error, "retry_of": self.plan_id},
                final=True,
            )
        except Exception as store_exc:
            exc.add_note(f"the failure could not be recorded in a checkpoint: {store_exc}")

    async def suspend(self, tasks: list[Task], exc: Interrupt) -> None:
        """Stop at this superstep to wait on ``exc.pending``; resuming runs it again.

        Only the writes the interrupting nodes asked for (``Interrupt(writes=...)``) are
        folded; the checkpoint plans the same tasks at the same step, so on resume every
        journaled effect of the superstep replays under the same key.
        """
        pending: dict[str, list[Any]] = {}
        writers: dict[str, list[str]] = {}
        nodes: dict[str, str] = {}
        for task, writes in exc.parts:
            for p in exc.pending:
                nodes.setdefault(p.id, task.spec.name)
            for name, value in writes.items():
                if name not in task.spec.writes:
                    msg = (
                        f"node {task.spec.name!r} suspended with a write to {name!r}, which is "
                        "not one of its Out fields; write only Out fields on suspension."
                    )
                    raise NodeError(msg)
                value = self.spec.adapter(name).validate_python(value)
                pending.setdefault(name, []).append(value)
                writers.setdefault(name, []).append(task.spec.name)
        changed = self._fold(pending, writers) if pending else {}
        self.interrupts = [
            p if p.node is not None else p.model_copy(update={"node": nodes.get(p.id)})
            for p in exc.pending
        ]
        if self.sink is not None:
            await self.emit(
                "interrupt",
                data={"interrupts": [p.to_dict() for p in self.interrupts]},
                step=self.step,
            )
        if self.journal is not None:
            await self.save_checkpoint(
                changed,
                tasks,
                source="interrupt",
                meta={"interrupts": [p.to_dict() for p in self.interrupts]},
                final=True,
            )

    def result_state(self) -> Schema:
        """What ``invoke`` returns: the validated final state, or — for a suspended run,
        whose required fields may not be set yet — the current values; with run info."""
        from tensorsketch.interrupts import attach_run_info

        if self.interrupts:
            try:
                state = self.final_state()
            except (EmptyChannelError, NodeError):
                state = self.state_view()
        else:
            state = self.final_state()
        attach_run_info(state, self)
        return state

    def barrier(
        self, tasks: list[Task], results: list[dict[str, Any]]
    ) -> dict[str, list[Any] | None]:
        """Fold all writes of a superstep into the channels, in task order."""
        pending: dict[str, list[Any]] = {}
        writers: dict[str, list[str]] = {}
        for task, writes in zip(tasks, results):
            for name, value in writes.items():
                bucket = pending.get(name)
                if bucket is None:
                    pending[name] = [value]
                    writers[name] = [task.spec.name]
                else:
                    bucket.append(value)
                    writers[name].append(task.spec.name)
        for name in self.spec.clearing:
            if name not in pending:
                pending[name] = []
                writers[name] = []
        return self._fold(pending, writers)


def check_concurrency(limit: Any, where: str) -> None:
    """``max_concurrency`` is ``None`` (no limit) or a positive int."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        msg = f"{where} takes an int >= 1 (or None for no limit), got {limit!r}."
        raise ValueError(msg)


class _Gather:
    """The shared state of one parallel superstep: results by task index, and a countdown."""

    __slots__ = ("failures", "on_done", "remaining", "results", "suspended", "waiter")

    def __init__(
        self, count: int, waiter: asyncio.Future[None], on_done: TaskDone | None = None
    ) -> None:
        self.on_done = on_done
        self.results: list[dict[str, Any] | None] = [None] * count
        self.remaining = count
        self.waiter = waiter
        self.failures: list[tuple[int, BaseException]] = []
        self.suspended: list[tuple[int, Interrupt]] = []

    def fail(self, index: int, exc: BaseException) -> None:
        self.failures.append((index, exc))
        if not self.waiter.done():
            self.waiter.set_result(None)


async def _cancel_all(futures: list[asyncio.Task[None]]) -> None:
    """Cancel the tasks still running and wait until they have all finished."""
    pending = [f for f in futures if not f.done()]
    for f in pending:
        f.cancel()
    if pending:
        await asyncio.wait(pending)


def _first(pair: tuple[int, Any]) -> int:
    return pair[0]


def _stopped_after(interrupts: list[PendingInterrupt]) -> bool:
    """Whether a restored run had stopped at an ``interrupt_after`` breakpoint."""
    return any(
        p.kind == "breakpoint" and isinstance(p.value, dict) and p.value.get("when") == "after"
        for p in interrupts
    )


def _ships(tasks: list[Task]) -> bool:
    """Whether a superstep has ``Send`` instances for an executor to run elsewhere."""
    return any(task.payload is not None for task in tasks)
