"""The executor seam: where a superstep's ``Send`` instances run.

By default every task of a superstep runs on the caller's event loop (the engine's own fast
path; nothing in this module is imported for it). An :class:`Executor` given to
``compile(executor=...)`` or ``invoke(executor=...)`` — or named, ``executor="ray"``, through
the ``tensorsketch_executors`` hook — runs a superstep's ``Send`` instances somewhere else:
other threads, processes, machines. Plain nodes stay on the caller's loop, running
concurrently with the shipped instances.

What crosses the seam is plain data, so an executor can pickle it:

- **in**, once per superstep: a :class:`Superstep` — the superstep number, the state values
  the shipped nodes read (shared by every instance, so an executor sends them once), one
  :class:`SendCall` per instance (its plan index, node name, ``#k`` instance and ``Send``
  payload, plus the journaled results of its earlier attempts to replay), the invoke's
  ``resume=`` decisions, the run's identity, and whether the run is durable or streamed;
- **the graph**: the :class:`~tensorsketch.pregel.GraphSpec` of the compiled graph. Core
  hands the object itself; how it reaches a worker is the executor's decision (the Ray
  executor cloudpickles it once into the object store, so nodes, schemas and routing
  functions must pickle, and the modules that define them must import on the workers);
- **out**, as each batch finishes: one :class:`TaskOutcome` per instance — its writes, or the
  error it raised, or the interrupt it suspended on — with the effects it recorded
  (``ctx.step`` results, in call order) and the events it emitted.

On the workers, :func:`run_calls` runs a batch of calls with the engine's own task code
(input building, ``RetryPolicy`` and ``timeout=``, output checks, error notes), so a shipped
instance behaves like a local one. The caller's side (:func:`run_shipped`) journals each
returned effect before it counts the instance as finished, journals the finished instances'
writes (per-task commit: a failing sibling does not lose them), re-emits the events, and
hands the writes to the barrier, which folds them in plan order as always — the result is the
in-process run's, bit for bit.

Effects cross back with the outcome; the caller, which holds the thread's lease, is the only
writer of the journal. A resumed superstep ships each instance the results its earlier
attempts journaled (found through a per-instance manifest written beside the effects), so
they replay instead of running again. What a remote instance cannot do: run a durable nested
graph (``ctx.run_nested`` needs the store) — it raises :class:`ExecutorError`; spans of
shipped instances are not recorded; ``ctx.step(idempotency_key=...)`` dedupes across the
attempts of the same instance, not across instances; events arrive when the batch returns.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import pickle
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tensorsketch.effects import IDEMPOTENCY_PREFIX, EffectLog, decision_key
from tensorsketch.errors import ExecutorError
from tensorsketch.events import Event
from tensorsketch.interrupts import Interrupt, PendingInterrupt
from tensorsketch.pregel import Run, Task

if TYPE_CHECKING:
    from tensorsketch.pregel import GraphSpec, TaskDone

__all__ = [
    "Executor",
    "InProcessExecutor",
    "RemoteTaskError",
    "SendCall",
    "Superstep",
    "TaskOutcome",
    "manifest_key",
    "portable_error",
    "resolve_executor",
    "run_calls",
    "run_shipped",
]

Status = Literal["done", "failed", "suspended", "cancelled"]
#: ``(type, node, data, step, namespace)`` of an event a shipped instance emitted.
EventRecord = tuple[str, str | None, Any, int | None, tuple[str, ...]]
#: Called on the worker the moment an effect completes: ``(plan index, key, value)``.
OnEffect = Callable[[int, str, Any], Awaitable[None]]


@dataclass(slots=True)
class SendCall:
    """One ``Send`` instance, as shipped: enough to rebuild its task on a worker."""

    #: Position in the superstep's plan (the barrier folds by it).
    index: int
    node: str
    #: ``"#k"``: the k-th ``Send`` to ``node`` in this superstep (part of its effect keys).
    instance: str
    payload: dict[str, Any]
    #: Journaled results of this instance's earlier attempts (effects and the decisions it
    #: read), by key: replayed instead of run again.
    replay: dict[str, Any] = field(default_factory=dict)
    #: How many manifests earlier attempts wrote (this attempt writes the next one).
    generation: int = 0

    def __reduce__(self) -> tuple[Any, ...]:
        # A flat tuple: a superstep ships thousands, and the dataclass default goes through
        # a Python-level __getstate__ per instance (several times slower to pickle).
        fields = (self.index, self.node, self.instance, self.payload, self.replay)
        return (SendCall, (*fields, self.generation))


@dataclass(slots=True)
class Superstep:
    """A superstep's shipped work: sent once, shared by every batch of it."""

    graph: str
    step: int
    #: The state values the shipped nodes read (a ``Send`` payload overrides them).
    values: dict[str, Any]
    calls: list[SendCall]
    #: ``invoke(resume=...)``'s decisions, by interrupt id.
    resume: dict[str, Any]
    run_id: str
    thread_id: str | None
    namespace: tuple[str, ...]
    #: The run has a backend: effects are journaled (by the caller) and replay on resume.
    durable: bool
    #: Someone consumes the run's events: shipped instances collect theirs.
    streaming: bool
    #: ``max_concurrency`` of the run: the most instances in flight at once.
    max_concurrency: int | None


@dataclass(slots=True)
class TaskOutcome:
    """What one shipped instance came back with."""

    index: int
    status: Status = "cancelled"
    writes: dict[str, Any] | None = None
    #: The exception a failed instance raised (with the engine's note naming it).
    error: BaseException | None = None
    #: What a suspended instance waits on, and the writes it made anyway.
    interrupts: list[PendingInterrupt] = field(default_factory=list)
    interrupt_writes: dict[str, Any] = field(default_factory=dict)
    #: Effects recorded by this attempt, in call order: ``(key, value)``.
    effects: list[tuple[str, Any]] = field(default_factory=list)
    #: Journaled decisions this attempt read (their keys go into the manifest).
    decisions: list[str] = field(default_factory=list)
    events: list[EventRecord] = field(default_factory=list)

    def __reduce__(self) -> tuple[Any, ...]:
        # Flat, like SendCall's: outcomes come back by the thousand, most with writes only.
        rest = (self.interrupts, self.interrupt_writes, self.effects, self.decisions, self.events)
        if self.error is None and not any(rest):
            return (TaskOutcome, (self.index, self.status, self.writes))
        return (
            TaskOutcome,
            (
                self.index,
                self.status,
                self.writes,
                self.error,
                self.interrupts,
                self.interrupt_writes,
                self.effects,
                self.decisions,
                self.events,
            ),
        )


class Executor(ABC):
    """Runs a superstep's ``Send`` instances somewhere other than the caller's loop.

    Subclass it and implement :meth:`run`; register a factory under a name with the
    ``tensorsketch_executors`` hook (or :func:`tensorsketch.register_executor`) so that
    ``compile(executor="name")`` finds it. One executor may serve many runs at once.
    """

    #: Shown in errors and traces.
    name: str = "custom"

    @abstractmethod
    def run(self, graph: GraphSpec, work: Superstep) -> AsyncIterator[list[TaskOutcome]]:
        """Run every call of ``work`` and yield their outcomes as batches finish (any order,
        each outcome once). Closing the iterator early must stop the work still running.

        :param graph: the compiled graph's engine spec (ship it once, not per call).
        :param work: the superstep's calls and the state they read.
        """


class InProcessExecutor(Executor):
    """The default: every task on the caller's event loop, through the engine's fast path.

    Given to ``compile``/``invoke`` (or as ``"inprocess"``) it selects that path; its
    :meth:`run` runs the calls through :func:`run_calls` on the current loop, for composing
    executors.
    """

    name = "inprocess"

    async def run(self, graph: GraphSpec, work: Superstep) -> AsyncIterator[list[TaskOutcome]]:
        yield await run_calls(graph, work)


def resolve_executor(value: object, where: str) -> Executor | None:
    """``executor=`` as the engine keeps it: ``None`` for the in-process path, a name built
    through the registry, or an :class:`Executor` as is."""
    if value is None or isinstance(value, InProcessExecutor):
        return None
    if isinstance(value, str):
        from tensorsketch.registry import create_executor

        return resolve_executor(create_executor(value), where)
    if isinstance(value, Executor):
        return value
    msg = (
        f"{where} takes an executor name (e.g. 'ray'), a tensorsketch.executors.Executor, or "
        f"None for in-process; got {type(value).__name__} {value!r:.80}."
    )
    raise TypeError(msg)


def manifest_key(step: int, node: str, instance: str, generation: int) -> str:
    """Where the caller lists the journal keys a shipped instance's attempt recorded."""
    return f"shipped:{step}:{node}{instance}:{generation}"


class RemoteTaskError(ExecutorError):
    """A shipped instance raised an exception that could not be sent back as itself (it does
    not pickle); its type, message and notes are kept."""

    def __init__(self, message: str, *, type_name: str = "") -> None:
        super().__init__(message)
        #: The original exception's ``module.QualName``.
        self.type_name = type_name


def portable_error(exc: BaseException) -> BaseException:
    """``exc`` if it survives a pickle round trip, else a :class:`RemoteTaskError` with its
    type, message and notes (for executors that send outcomes between processes)."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        kind = type(exc)
        name = f"{kind.__module__}.{kind.__qualname__}"
        error = RemoteTaskError(f"{name}: {exc}", type_name=name)
        for note in getattr(exc, "__notes__", ()):
            error.add_note(str(note))
        return error
    return exc


# -- the worker side ----------------------------------------------------------------------------

#: The outcome of the call the running code belongs to (set per call's asyncio task).
_CURRENT: contextvars.ContextVar[TaskOutcome] = contextvars.ContextVar("tensorsketch_call")


class _Recorder(EffectLog):
    """The effect log of shipped instances: replays what earlier attempts journaled, runs the
    rest, and keeps each instance's results for the caller to journal."""

    __slots__ = ("_durable", "_on_effect", "_replay")

    def __init__(self, work: Superstep, calls: Sequence[SendCall], on_effect: OnEffect | None):
        super().__init__(None, work.resume)
        self._durable = work.durable
        self._on_effect = on_effect
        self._replay: dict[str, Any] = {}
        for call in calls:
            self._replay.update(call.replay)

    @property
    def durable(self) -> bool:
        return self._durable

    async def once(self, key: str, fn: Callable[[], Any]) -> Any:
        found, value = await self.peek(key)
        if found:
            return value
        result = fn()
        if inspect.isawaitable(result):
            result = await result
        await self.record(key, result)
        return result

    async def peek(self, key: str) -> tuple[bool, Any]:
        if key in self._replay:
            return True, self._replay[key]
        return False, None

    async def record(self, key: str, value: Any) -> None:
        if key in self._replay:
            return  # the first write wins, as in the journal
        # Kept for the whole batch: a retried attempt of the node replays it (in memory, the
        # engine keeps results only while a retry can use them; the outcome is the same).
        self._replay[key] = value
        outcome = _CURRENT.get()
        outcome.effects.append((key, value))
        if self._on_effect is not None:
            await self._on_effect(outcome.index, key, value)

    async def decision(self, step: int, interrupt_id: str) -> tuple[bool, Any]:
        key = decision_key(step, interrupt_id)
        if key in self._replay:
            return True, self._replay[key]
        if interrupt_id in self.resume:
            _CURRENT.get().decisions.append(key)
            return True, self.resume[interrupt_id]
        return False, None


async def _collect(event: Event) -> None:
    _CURRENT.get().events.append(
        (event.type, event.node, event.data, event.step, tuple(event.namespace))
    )


async def run_calls(
    graph: GraphSpec,
    work: Superstep,
    calls: Sequence[SendCall] | None = None,
    *,
    on_effect: OnEffect | None = None,
) -> list[TaskOutcome]:
    """Run shipped calls on this event loop (a worker's) and return their outcomes.

    The batch behaves like a superstep of its own: at most ``work.max_concurrency`` calls at
    once, started in order, and the first failure cancels the calls still running (their
    recorded effects still come back). Nothing here touches a store.

    :param graph: the compiled graph's spec, as the executor shipped it.
    :param work: the superstep (its ``calls`` unless ``calls`` names a batch of them).
    :param on_effect: awaited the moment an effect completes (an executor that keeps a
        worker-side record, so a retried batch replays instead of repeating it).
    """
    return await _Batch(graph, work, list(work.calls if calls is None else calls), on_effect).run()


class _Batch:
    """One batch of shipped calls on a worker: a detached run with no store."""

    def __init__(
        self, graph: GraphSpec, work: Superstep, calls: list[SendCall], on_effect: OnEffect | None
    ) -> None:
        self.graph = graph
        self.work = work
        self.calls = calls
        run = self.run_ = Run(
            graph,
            thread_id=work.thread_id,
            sink=_collect if work.streaming else None,
            namespace=work.namespace,
            run_id=work.run_id,
        )
        run.values = work.values
        run.effects = _Recorder(work, calls, on_effect)
        run.resume = work.resume
        self.outcomes = [TaskOutcome(call.index) for call in calls]
        self.futures: list[asyncio.Task[None]] = []
        self.stopping = False

    async def run(self) -> list[TaskOutcome]:
        loop = asyncio.get_running_loop()
        count = len(self.calls)
        limit = self.work.max_concurrency
        if limit is not None and count > limit:
            order = iter(range(count))
            self.futures.extend(loop.create_task(self.worker(order)) for _ in range(limit))
        else:
            self.futures.extend(loop.create_task(self.one(i)) for i in range(count))
        if self.futures:
            try:
                await asyncio.wait(self.futures)
            except asyncio.CancelledError:
                for future in self.futures:
                    future.cancel()
                await asyncio.wait(self.futures)
                raise
        return self.outcomes

    async def worker(self, order: Iterator[int]) -> None:
        for position in order:
            if self.stopping:
                return
            await self.one(position)

    async def one(self, position: int) -> None:
        call, outcome = self.calls[position], self.outcomes[position]
        _CURRENT.set(outcome)
        spec = self.graph.nodes.get(call.node)
        try:
            if spec is None:
                msg = (
                    f"the worker's copy of graph {self.graph.name!r} has no node {call.node!r}; "
                    "run the same version of the graph on the workers as on the caller."
                )
                raise ExecutorError(msg)
            task = Task(spec, call.payload, call.instance)
            outcome.writes = await self.run_.run_task(task, self.work.step)
            outcome.status = "done"
        except Interrupt as exc:
            _suspended(outcome, exc)
        except asyncio.CancelledError:
            if not self.stopping:
                raise
            outcome.status = "cancelled"  # a sibling failed: like an in-process superstep
        except Exception as exc:
            outcome.status = "failed"
            outcome.error = exc
            self.stop()

    def stop(self) -> None:
        """The first failure cancels the batch's other calls."""
        if self.stopping:
            return
        self.stopping = True
        current = asyncio.current_task()
        for future in self.futures:
            if future is not current:
                future.cancel()


def _suspended(outcome: TaskOutcome, exc: Interrupt) -> None:
    outcome.status = "suspended"
    outcome.interrupts = list(exc.pending)
    outcome.interrupt_writes = dict(exc.writes)


# -- the caller side ----------------------------------------------------------------------------


async def run_shipped(
    run: Run,
    executor: Executor,
    tasks: list[Task],
    step: int,
    on_done: TaskDone | None = None,
    restored: bool = False,
) -> list[dict[str, Any]]:
    """Run a superstep with its ``Send`` instances on ``executor`` and its plain nodes here;
    return every task's writes in plan order (what :meth:`Run.run_parallel` returns).

    ``on_done(task, writes)`` is awaited for each task that finishes while others still run
    (the journaled superstep's per-task commit). A resumed superstep (``restored``) first
    reads back what earlier attempts of its instances journaled.
    """
    shipment = _Shipment(run, executor, tasks, step, on_done)
    if restored and run.journal is not None:
        await _load_replays(run, shipment.work.calls, step)
    return await shipment.run()


class _Shipment:
    """The caller's side of one shipped superstep: outcomes in, writes out in plan order."""

    def __init__(
        self,
        run: Run,
        executor: Executor,
        tasks: list[Task],
        step: int,
        on_done: TaskDone | None,
    ) -> None:
        self.run_ = run
        self.executor = executor
        self.tasks = tasks
        self.step = step
        self.on_done = on_done
        calls: list[SendCall] = []
        self.local: set[int] = set()
        reads: dict[str, None] = {}
        for index, task in enumerate(tasks):
            if task.payload is None:
                self.local.add(index)
                continue
            calls.append(SendCall(index, task.spec.name, task.instance, task.payload))
            reads.update((name, None) for name, _ in task.spec.reads)
        values = run.values
        self.work = Superstep(
            graph=run.spec.name,
            step=step,
            values={name: values[name] for name in reads if name in values},
            calls=calls,
            resume=dict(run.resume),
            run_id=run.run_id,
            thread_id=run.thread_id,
            namespace=run.namespace,
            durable=run.journal is not None,
            streaming=run.sink is not None,
            max_concurrency=run.max_concurrency,
        )
        self.calls = {call.index: call for call in calls}
        self.results: list[dict[str, Any] | None] = [None] * len(tasks)
        self.reported = [False] * len(tasks)
        self.remaining = len(tasks)
        self.failures: list[tuple[int, BaseException]] = []
        self.suspended: list[tuple[int, Interrupt]] = []
        #: A batch from the executor, a plain node's outcome, the executor's error, or its end.
        self.queue: asyncio.Queue[list[TaskOutcome] | TaskOutcome | BaseException | None] = (
            asyncio.Queue()
        )

    async def run(self) -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        workers = [loop.create_task(self.pump())] if self.calls else []
        workers.extend(loop.create_task(self.here(index)) for index in sorted(self.local))
        open_ends = len(workers)
        try:
            while open_ends and not self.failures:
                item = await self.queue.get()
                if item is None:
                    open_ends -= 1
                elif isinstance(item, BaseException):
                    item.add_note(
                        f"while executor {self.executor.name!r} ran superstep {self.step}"
                    )
                    raise item
                elif isinstance(item, TaskOutcome):
                    open_ends -= 1  # a plain node here (its effects are journaled already)
                    await self.take([item], shipped=False)
                else:
                    await _journal_effects(self.run_, self.calls, item, self.step)
                    await self.take(item, shipped=True)
        finally:
            for worker in workers:
                worker.cancel()
            if workers:
                await asyncio.wait(workers)
        return self.finish()

    async def pump(self) -> None:
        tracer = self.run_.tracer
        if not tracer.enabled:
            await self.drain()
            return
        # One span for the shipped part of the superstep, under the run's (the instances'
        # own spans stay on the workers).
        attributes = {
            "tensorsketch.step": self.step,
            "tensorsketch.executor": self.executor.name,
            "tensorsketch.instances": len(self.calls),
        }
        with tracer.span(f"{self.executor.name} executor", kind="executor", **attributes):
            await self.drain()

    async def drain(self) -> None:
        try:
            async for group in self.executor.run(self.run_.spec, self.work):
                await self.queue.put(group)
        except Exception as exc:
            await self.queue.put(exc)
        else:
            await self.queue.put(None)

    async def here(self, index: int) -> None:
        outcome = TaskOutcome(index)
        try:
            outcome.writes = await self.run_.run_task(self.tasks[index], self.step)
            outcome.status = "done"
        except Interrupt as exc:
            _suspended(outcome, exc)
        except Exception as exc:
            outcome.status = "failed"
            outcome.error = exc
        await self.queue.put(outcome)

    async def take(self, group: list[TaskOutcome], *, shipped: bool) -> None:
        """Count outcomes in, in plan order: events, per-task commit, failures."""
        run = self.run_
        for outcome in sorted(group, key=_index):
            index = outcome.index
            if self.reported[index] if index in self.calls else shipped:
                msg = (
                    f"executor {self.executor.name!r} reported task index {index} of superstep "
                    f"{self.step} twice, or it is not one of the calls it was given."
                )
                raise ExecutorError(msg)
            self.reported[index] = True
            task = self.tasks[index]
            for type_, node, data, at, namespace in outcome.events:
                await run.emit(type_, node=node, data=data, step=at, namespace=namespace)
            if outcome.status == "done":
                writes = outcome.writes or {}
                self.results[index] = writes
                if self.on_done is not None and self.remaining > 1:
                    await self.on_done(task, writes)
                self.remaining -= 1
            elif outcome.status == "suspended":
                pause = Interrupt(pending=outcome.interrupts, writes=outcome.interrupt_writes)
                pause.parts = [(task, pause.writes)]
                self.suspended.append((index, pause))
                self.remaining -= 1
            elif outcome.status == "failed":
                error = outcome.error or ExecutorError(f"task {index} failed without an error")
                self.failures.append((index, error))

    def finish(self) -> list[dict[str, Any]]:
        if self.failures:
            index, first = min(self.failures, key=_first)
            self.run_.failed_task = self.tasks[index]
            raise first
        if self.suspended:
            raise Interrupt.merge([exc for _, exc in sorted(self.suspended, key=_first)])
        if self.remaining:
            missing = [i for i, seen in enumerate(self.reported) if not seen][:10]
            msg = (
                f"executor {self.executor.name!r} finished superstep {self.step} without "
                f"reporting {self.remaining} of its tasks (indexes {missing}); an executor "
                "must yield one outcome per call."
            )
            raise ExecutorError(msg)
        return self.results  # type: ignore[return-value]


async def _load_replays(run: Run, calls: list[SendCall], step: int) -> None:
    """Give each call the journal entries its earlier attempts recorded: follow its manifests
    (one round trip per generation, all calls at once), then read the entries."""
    journal = run.journal
    assert journal is not None
    listed: dict[int, list[str]] = {}
    pending = calls
    while pending:
        keys = [manifest_key(step, c.node, c.instance, c.generation) for c in pending]
        found = await journal.lookup_many(keys)
        more: list[SendCall] = []
        for call, key in zip(pending, keys):
            if key in found:
                listed.setdefault(call.index, []).extend(found[key])
                call.generation += 1
                more.append(call)
        pending = more
    if not listed:
        return
    wanted = sorted({key for keys in listed.values() for key in keys})
    entries = await journal.lookup_many(wanted)
    for call in calls:
        for key in listed.get(call.index, ()):
            if key in entries:
                call.replay[key] = entries[key]


async def _journal_effects(
    run: Run, calls: dict[int, SendCall], outcomes: list[TaskOutcome], step: int
) -> None:
    """Record a returned batch's effects before any of its instances counts as finished: in
    the journal (with each attempt's manifest) for a durable run, and the idempotency keys in
    the run's memory otherwise."""
    journal = run.journal
    if journal is None:
        for outcome in outcomes:
            for key, value in outcome.effects:
                if key.startswith(IDEMPOTENCY_PREFIX):
                    await run.effects.record(key, value)
        return
    items: list[tuple[str, Any]] = []
    for outcome in outcomes:
        call = calls.get(outcome.index)
        if call is None or not (outcome.effects or outcome.decisions):
            continue
        items.extend(outcome.effects)
        keys = [key for key, _ in outcome.effects] + outcome.decisions
        items.append((manifest_key(step, call.node, call.instance, call.generation), keys))
    if not items:
        return
    # Shielded like an effect record: the effects happened, so they are written even if the
    # run is cancelled meanwhile.
    writing = asyncio.ensure_future(journal.record_many(items))
    try:
        await asyncio.shield(writing)
    except asyncio.CancelledError:
        await asyncio.wait([writing])
        raise


def _index(outcome: TaskOutcome) -> int:
    return outcome.index


def _first(pair: tuple[int, Any]) -> int:
    return pair[0]
