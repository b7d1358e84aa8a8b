"""``AsyncRunner``: runs as durable records, executed in the background of one process.

``submit`` stores a ``queued`` record and returns it; a worker slot then runs the graph on the
run's thread. Every change of a run is a compare-and-set on its record, so several runner
processes can share one store: each owns the runs it works on and keeps their lease alive,
and a runner that dies leaves its runs to be claimed (``resume_pending``) and resumed from
their checkpoints — the effect journal makes the resumed work exactly-once.

Suspended runs have no owner. Whoever delivers what they wait for (``approve``, ``signal``,
their timer coming due) claims them back. Durable timers wake themselves: the runner sleeps
until the earliest ``wake_at`` of the store's due index (re-read every ``timer_refresh``
seconds, to see timers another process set), never by scanning every run.

The runner is the public face of parts that share one :class:`~.state.RunnerState`:
:mod:`.submission` (submitting and reading), :mod:`.operator` (approve, signal, resume,
cancel), :mod:`.execution` (running a record through the graph) and :mod:`.loops` (leases,
orphans, timers, schedules).
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Generic, TypeVar, cast, overload

from tensorsketch.durable.modes import Durability
from tensorsketch.events import Event
from tensorsketch.observability import Tracer
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runs.assistants import Assistants
from tensorsketch.runs.execution import Execution
from tensorsketch.runs.loops import Loops
from tensorsketch.runs.multitask import MultitaskStrategy, check_strategy
from tensorsketch.runs.operator import Operator
from tensorsketch.runs.retention import Retention
from tensorsketch.runs.signals import EventInput
from tensorsketch.runs.state import Listener, RunnerState
from tensorsketch.runs.submission import Submission
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.runs import RunPage, RunRecord, RunStore, new_owner_id, run_store

__all__ = ["AsyncRunner", "EventInput", "Listener"]

log = logging.getLogger("tensorsketch.runs")

T = TypeVar("T")


class _Shared(Generic[T]):
    """An ``AsyncRunner`` attribute kept in its :class:`RunnerState`, so that setting it on
    the runner (``runner.tracer = ...``) reaches every part."""

    name: str

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, runner: None, owner: type[Any]) -> _Shared[T]: ...

    @overload
    def __get__(self, runner: AsyncRunner, owner: type[Any]) -> T: ...

    def __get__(self, runner: AsyncRunner | None, owner: type[Any]) -> _Shared[T] | T:
        if runner is None:
            return self
        return cast("T", getattr(runner._state, self.name))

    def __set__(self, runner: AsyncRunner, value: T) -> None:
        setattr(runner._state, self.name, value)


class AsyncRunner:
    """Submit runs of ``graph`` and let this process execute them in the background.

    :param backend: a backend with a run store (every first-party one).
    :param concurrency: runs executing at once in this process.
    :param max_queued: new runs allowed to wait for a slot (0: unbounded); past it ``submit``
        raises :class:`QueueFullError`. Resuming suspended work is never refused by it.
    :param run_timeout: seconds a whole run may execute, summed over its segments and kept
        in its record across restarts and takeovers, before it is aborted and marked
        ``failed`` (``None``: no limit). Time suspended — waiting for an approval, a timer,
        an answer or an event — does not count.
    :param approval_timeout: seconds a run may wait for an approval; an older one is
        rejected ("approval timeout") and resumed the next time it is read — no timer runs.
    :param lease_ttl: seconds this runner's claim on its runs lasts without renewal (renewed
        every third of it); a crashed runner's runs are taken over once it lapses.
    :param event_input: how signals become the input of the segment they are delivered to;
        the default appends each as a user message when the state has ``messages``.
    :param listeners: called with every record the runner stores.
    :param multitask_strategy: what a submit does when its thread already has a run queued
        or running and the submit names no policy: ``enqueue`` (the default: it runs after
        them, in order), ``reject`` (:class:`RunConflictError`), ``interrupt`` (they stop at
        their next superstep barrier, keeping what they checkpointed, and the new run starts
        on top) or ``rollback`` (likewise, discarding their checkpoints).
    :param retention: a :class:`~tensorsketch.runs.retention.Retention` policy: this runner
        deletes threads idle past ``idle_days`` and prunes others to ``keep_checkpoints``,
        every ``sweep_every`` seconds, never touching a thread with a run in flight or
        suspended.
    :param deps: what every run this process executes reads as ``ctx.deps`` (a database pool,
        an HTTP client). They belong to the process, not the run: never stored, and a run
        taken over by another process gets that runner's ``deps``.
    :param memory: the long-term memory store every run this process executes reads as
        ``ctx.memory`` (a :class:`tensorsketch.memory.MemoryStore`; journaled, never stored).
    """

    graph = _Shared[CompiledGraph[Any]]()
    backend = _Shared[Backend]()
    store = _Shared[RunStore]()
    concurrency = _Shared[int]()
    max_queued = _Shared[int]()
    run_timeout = _Shared[float | None]()
    approval_timeout = _Shared[float | None]()
    lease_ttl = _Shared[float]()
    max_steps = _Shared[int]()
    tracer = _Shared[Tracer | None]()
    event_input = _Shared[EventInput | None]()
    listeners = _Shared[list[Listener]]()
    timer_refresh = _Shared[float]()
    poll_interval = _Shared[float]()
    #: This process's owner id (``host:pid:random``).
    owner = _Shared[str]()
    #: What every run executed here reads as ``ctx.deps`` (never stored).
    deps = _Shared[Any]()
    #: The store every run executed here reads as ``ctx.memory``.
    memory = _Shared[Any]()
    #: The double-texting policy of a submit that names none.
    multitask_strategy = _Shared[str]()
    #: Whether a submit whose run can start at once stores its record in the run's own
    #: opening (one unit of work fewer; on a backend whose ``folds_submits`` is true — see
    #: :mod:`tensorsketch.runs.folding`). ``True`` by default; a submit with an
    #: idempotency key or labels keeps its own insert either way.
    fold_submits = _Shared[bool]()

    def __init__(
        self,
        graph: CompiledGraph[Any],
        *,
        backend: Backend,
        concurrency: int = 8,
        max_queued: int = 0,
        run_timeout: float | None = None,
        approval_timeout: float | None = None,
        lease_ttl: float = 30.0,
        max_steps: int = 25,
        tracer: Tracer | None = None,
        event_input: EventInput | None = None,
        listeners: Sequence[Listener] = (),
        timer_refresh: float = 5.0,
        poll_interval: float = 0.25,
        deps: Any = None,
        memory: Any = None,
        multitask_strategy: MultitaskStrategy = "enqueue",
        retention: Retention | None = None,
    ) -> None:
        if not isinstance(graph, CompiledGraph):
            msg = (
                f"AsyncRunner needs a compiled graph (graph.compile()), got {type(graph).__name__}."
            )
            raise TypeError(msg)
        for label, value, low in (("concurrency", concurrency, 1), ("max_queued", max_queued, 0)):
            if type(value) is not int or value < low:
                msg = f"`{label}` must be an int >= {low}, got {value!r}."
                raise ValueError(msg)
        for label, seconds in (
            ("run_timeout", run_timeout),
            ("approval_timeout", approval_timeout),
        ):
            if seconds is not None and not seconds > 0:
                msg = f"`{label}` must be a positive number of seconds or None, got {seconds!r}."
                raise ValueError(msg)
        check_strategy(multitask_strategy)
        if retention is not None and not isinstance(retention, Retention):
            msg = f"`retention` must be a Retention(...), got {type(retention).__name__}."
            raise TypeError(msg)
        if not lease_ttl > 0 or not timer_refresh > 0 or not poll_interval > 0:
            msg = "`lease_ttl`, `timer_refresh` and `poll_interval` must be positive seconds."
            raise ValueError(msg)
        self._state = RunnerState(
            graph=graph,
            backend=backend,
            store=run_store(backend),
            concurrency=concurrency,
            max_queued=max_queued,
            run_timeout=run_timeout,
            approval_timeout=approval_timeout,
            lease_ttl=float(lease_ttl),
            max_steps=max_steps,
            tracer=tracer,
            event_input=event_input,
            listeners=list(listeners),
            timer_refresh=float(timer_refresh),
            poll_interval=float(poll_interval),
            owner=new_owner_id(),
            deps=deps,
            memory=memory,
            multitask_strategy=multitask_strategy,
            retention=retention,
            may_fold=getattr(type(backend), "folds_submits", False) is not False,
        )
        # The parts call back into the runner's public methods (``get``, ``start``,
        # ``resume_pending``), so a subclass overriding one is obeyed by all of them.
        self._execution = Execution(self._state, read=self.get)
        self._submission = Submission(self._state, self._execution, start=self.start)
        self._operator = Operator(self._state, self._execution, read=self.get, start=self.start)
        self._loops = Loops(self._state, self._execution, host=self, take_over=self.resume_pending)

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the background loops (lease renewal, timers); ``submit``, ``approve``,
        ``signal`` and ``resume`` call it. A runner closed before it started raises
        ``RuntimeError``."""
        state = self._state
        if state.started:
            return
        if state.closed:
            msg = "this AsyncRunner was closed; create a new one."
            raise RuntimeError(msg)
        state.started = True
        state.slots = asyncio.Semaphore(state.concurrency)
        state.wake = asyncio.Event()
        self._loops.start()

    async def __aenter__(self) -> AsyncRunner:
        await self.start()
        await self.resume_pending()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.drain()
        await self.aclose()

    @property
    def draining(self) -> bool:
        """Whether the runner refuses new work (``drain`` was called)."""
        return self._state.draining

    @property
    def in_flight(self) -> int:
        """Runs this process is executing or holding for a slot."""
        return len(self._state.tasks)

    async def drain(self, timeout: float | None = None) -> bool:
        """Refuse new work and wait for this process's runs to finish or suspend.

        Returns ``False`` if some were still going at ``timeout``; they stay in the store
        (their records say where they are) for a restart or another runner to resume.
        """
        self._state.draining = True
        pending = [t for t in self._state.tasks.values() if not t.done()]
        if not pending:
            return True
        _, still = await asyncio.wait(pending, timeout=timeout)
        return not still

    async def aclose(self, timeout: float = 10.0) -> None:
        """Stop the loops and hand this process's unfinished runs back to the store (owner
        cleared, so another runner takes them at once).

        Waits up to ``timeout`` seconds for the cancelled runs to stop. One that does not (a
        node that catches ``CancelledError``) is logged and left running: shutting down never
        hangs on user code, and the run's lease lapses for another runner to resume it.
        """
        if not timeout > 0:
            msg = f"`timeout` must be a positive number of seconds, got {timeout!r}."
            raise ValueError(msg)
        state = self._state
        if state.closed:
            return
        state.closed = True
        state.draining = True
        for task in self._loops.tasks:
            task.cancel()
        for run_id, task in list(state.tasks.items()):
            if not task.done():
                state.stop_reasons[run_id] = "shutdown"
                task.cancel()
        tasks = [*self._loops.tasks, *state.tasks.values()]
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=timeout)
            for task in stuck:
                log.warning(
                    "%s did not stop within %.3g s of being cancelled (does a node catch "
                    "CancelledError?); left running, its lease lapses for another runner",
                    task.get_name(),
                    timeout,
                )
        self._loops.tasks = []

    # -- submitting and reading -------------------------------------------------------------

    async def submit(
        self,
        input: Any = None,
        *,
        thread_id: str | None = None,
        idempotency_key: str | None = None,
        labels: Mapping[str, str] | None = None,
        multitask_strategy: MultitaskStrategy | None = None,
        webhook: str | None = None,
        assistant: str | None = None,
        durability: Durability = "sync",
    ) -> RunRecord:
        """Store a new run and execute it in the background; return its record.

        With ``idempotency_key``, submitting again returns the existing run (not a second
        one) unless that run failed. ``thread_id`` defaults to a new thread per run.
        ``multitask_strategy`` says what happens when the thread already has a run queued or
        running (default: the runner's; see :class:`AsyncRunner`). ``webhook`` is a URL the
        run's terminal record is POSTed to, signed, by a task API serving this runner
        (``task_app(webhooks=RunWebhooks(...))``). ``assistant`` (an id or a name; see
        :attr:`assistants`) runs the graph with that assistant's current version, recorded in
        the run's ``assistant`` field; its ``multitask_strategy`` applies when the submit
        names none. ``durability`` is when the run's checkpoints commit (``"sync"``,
        ``"async"`` or ``"exit"``, as for ``invoke``; see :mod:`tensorsketch.durable.modes`):
        kept in the record, so every segment of the run uses it — a resume, and a takeover
        by another runner after a crash.
        """
        record, _ = await self.enqueue(
            input,
            thread_id=thread_id,
            idempotency_key=idempotency_key,
            labels=labels,
            multitask_strategy=multitask_strategy,
            webhook=webhook,
            assistant=assistant,
            durability=durability,
        )
        return record

    async def enqueue(
        self,
        input: Any = None,
        *,
        thread_id: str | None = None,
        idempotency_key: str | None = None,
        labels: Mapping[str, str] | None = None,
        multitask_strategy: MultitaskStrategy | None = None,
        webhook: str | None = None,
        assistant: str | None = None,
        durability: Durability = "sync",
    ) -> tuple[RunRecord, bool]:
        """:meth:`submit`, also saying whether the run is new (``False``: the idempotency
        key named an existing run, which is returned)."""
        return await self._submission.enqueue(
            input,
            thread_id=thread_id,
            idempotency_key=idempotency_key,
            labels=labels,
            multitask_strategy=multitask_strategy,
            webhook=webhook,
            assistant=assistant,
            durability=durability,
        )

    @property
    def assistants(self) -> Assistants:
        """This graph's assistants in this runner's store: create, list, update (a new
        version), rollback (see :mod:`tensorsketch.runs.assistants`)."""
        return Assistants(self._state.store, self._state.graph)

    async def get(self, run_id: str) -> RunRecord:
        """The run's record (an expired approval is rejected and resumed as it is read)."""
        return await self._submission.get(run_id)

    async def list(
        self,
        *,
        status: str | Sequence[str] | None = None,
        thread_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> RunPage:
        """Runs matching the filters, oldest first, a page at a time."""
        return await self._submission.list(
            status=status, thread_id=thread_id, labels=labels, limit=limit, cursor=cursor
        )

    async def await_run(self, run_id: str, timeout: float | None = None) -> RunRecord:
        """Wait until the run finishes or suspends; return its record.

        A run this process executes wakes the waiter directly; one executed elsewhere is
        polled every ``poll_interval`` seconds. Raises ``TimeoutError`` at ``timeout``.
        """
        return await self._submission.await_run(run_id, timeout)

    async def events(
        self,
        run_id: str,
        *,
        since: int | None = None,
        follow: bool = True,
        record: RunRecord | None = None,
    ) -> AsyncIterator[Event]:
        """The run's events from ``since`` (default: its first), then — with ``follow`` —
        live until it stops moving (finished or suspended), from whichever process runs it.

        :param record: the run's record when the caller has just read it (a server's 404
            check): the events start from it instead of a second read of the store.
        """
        async for event in self._submission.events(
            run_id, since=since, follow=follow, record=record
        ):
            yield event

    async def health(self) -> dict[str, Any]:
        """What an operator checks: in flight here, queued, suspended by reason, the next
        timer, whether draining."""
        state = self._state
        counts = await state.store.counts()
        return {
            "in_flight": len(state.tasks),
            "running_here": state.running,
            "waiting_for_slot": state.waiting_new,
            "draining": state.draining,
            "runs": {k: v for k, v in counts.items() if ":" not in k},
            "suspended": {
                k.partition(":")[2]: v for k, v in counts.items() if k.startswith("suspended:")
            },
            "next_wake_at": await state.store.next_wake(),
            "owner": state.owner,
        }

    # -- decisions and signals --------------------------------------------------------------

    async def approve(self, run_id: str, decisions: Mapping[str, Any]) -> RunRecord:
        """Record approval decisions (by tool-call / interrupt id) for a suspended run; once
        every approval it waits on is decided, it resumes.

        Only ids the run waits on are accepted: one unknown id or malformed decision rejects
        the whole batch (``ValueError``) and leaves the record untouched. The first decision
        for an id wins. Decisions are stored before the run continues.
        """
        return await self._operator.approve(run_id, decisions)

    async def signal(self, run_id: str, event: Mapping[str, Any]) -> RunRecord:
        """Deliver an event ``{event_id?, type, payload}`` to a suspended run.

        A run waiting for an event or an answer (``interrupt()``) gets it as the answer and
        resumes now; one waiting for a timer or an approval receives it as input when it
        next resumes. A repeated ``event_id``, a full buffer (64) or a run that is not
        suspended is a :class:`RunConflictError`, and the event is not accepted.
        """
        return await self._operator.signal(run_id, event)

    async def steer(self, run_id: str, message: str | Mapping[str, Any]) -> RunRecord:
        """Send a message into a run that is executing (or queued): its agent reads it as a
        user message at its next model call, and it stays in the thread's messages.

        ``message`` is the text, or ``{"content": text}``. What the agent took is journaled
        with that model call, so a run resumed after a crash sees each message once, at the
        same call. A suspended or finished run, or 64 messages not taken yet, is a
        :class:`RunConflictError` (a suspended run takes :meth:`signal` instead); the
        message is not accepted. Cancelling stays :meth:`cancel`.
        """
        return await self._operator.steer(run_id, message)

    async def resume(self, run_id: str) -> RunRecord:
        """Continue a run suspended at a static breakpoint (``waiting_for="breakpoint"``:
        ``compile(interrupt_before=[...])`` or ``interrupt_after``); it runs on from there.

        A breakpoint needs no decision, so this records that it was passed and starts the
        next segment. A run waiting for anything else is a :class:`RunConflictError` naming
        the call that resumes it.
        """
        return await self._operator.resume(run_id)

    async def cancel(self, run_id: str) -> RunRecord:
        """Cancel a queued, running or suspended run (``cancelled``, not ``failed``).

        A run executing here has its model and tool calls cancelled at once; one executing in
        another process stops there when that runner next renews its lease. The thread keeps
        its checkpoints, so it can be continued later.
        """
        return await self._operator.cancel(run_id)

    # -- taking work over -------------------------------------------------------------------

    async def resume_pending(self) -> builtins.list[str]:
        """Take over the store's orphaned runs and resume them; fire due timers.

        An orphan is a queued or running run whose owner's lease expired, or whose owner is a
        dead process on this host; a live owner's runs are never taken, and suspended runs
        are not orphans (their decisions, signals or timers resume them). Returns the ids
        this runner took.
        """
        await self.start()
        return await self._loops.resume_pending()

    # -- what subclasses and schedules build on ---------------------------------------------
    # tensorsketch-ray's FleetRunner claims runs itself and executes them through these;
    # Scheduler wakes the timer loop for a new schedule.

    @property
    def _tasks(self) -> dict[str, asyncio.Task[None]]:
        return self._state.tasks

    @property
    def _known(self) -> dict[str, RunRecord]:
        return self._state.known

    @property
    def _wake(self) -> asyncio.Event:
        return self._state.wake

    def _notify(self, record: RunRecord) -> None:
        self._state.notify(record)

    def _spawn(self, run_id: str, *, new: bool = False, takeover: bool = False) -> None:
        self._execution.spawn(run_id, new=new, takeover=takeover)

    def _note_wake(self, wake_at: float | None) -> None:
        self._state.note_wake(wake_at)
