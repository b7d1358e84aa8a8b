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
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from tensorsketch.errors import (
    BackendUnavailableError,
    LeaseLostError,
    QueueFullError,
    RunConflictError,
    RunNotFoundError,
    ThreadBusyError,
)
from tensorsketch.events import Event
from tensorsketch.interrupts import parse_approval, run_info
from tensorsketch.messages import user
from tensorsketch.observability import Tracer
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runs.scheduler import fire
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.runs import (
    ACTIVE,
    RunPage,
    RunRecord,
    RunStore,
    WaitingFor,
    check_labels,
    new_owner_id,
    run_store,
)

__all__ = ["AsyncRunner", "EventInput", "Listener"]

log = logging.getLogger("tensorsketch.runs")

#: Signals a suspended run buffers before refusing more (until it moves again).
MAX_PENDING_EVENTS = 64
#: Event ids remembered per run for deduplication (oldest forgotten first).
MAX_DELIVERED_IDS = 256
#: The allow-listed keys of a signal.
EVENT_KEYS = frozenset({"event_id", "type", "payload"})

#: Builds the input of a resumed segment from the signals it delivers.
EventInput = Callable[[list[dict[str, Any]]], Mapping[str, Any]]
#: Called with every record the runner stores (metrics, logs); must not block.
Listener = Callable[[RunRecord], None]


def _now() -> float:
    return time.time()


class _RunTimedOut(Exception):
    """The run used up ``run_timeout`` (told apart from a TimeoutError of the graph's)."""


def _active(current: RunRecord, now: float) -> float:
    """The run's executing time so far, counting its current segment up to ``now``."""
    started = current.segment_started_at
    return current.active_seconds + (max(0.0, now - started) if started is not None else 0.0)


def check_event(event: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a signal: ``{event_id?, type, payload}`` and nothing else."""
    if not isinstance(event, Mapping):
        msg = (
            f"an event must be an object {{event_id?, type, payload}}, got {type(event).__name__}."
        )
        raise ValueError(msg)
    extra = sorted(set(event) - EVENT_KEYS)
    if extra:
        msg = f"an event takes only event_id, type and payload; remove {extra}."
        raise ValueError(msg)
    kind = event.get("type")
    if not isinstance(kind, str) or not kind or len(kind) > 128:
        msg = (
            "an event needs a `type`: a non-empty string of at most 128 characters, got "
            f"{kind!r:.60}."
        )
        raise ValueError(msg)
    event_id = event.get("event_id")
    if event_id is not None and (
        not isinstance(event_id, str) or not event_id or len(event_id) > 256
    ):
        msg = (
            "`event_id` must be a non-empty string of at most 256 characters, got "
            f"{event_id!r:.60}."
        )
        raise ValueError(msg)
    payload = event.get("payload", "")
    if not isinstance(payload, str):
        msg = (
            f"an event's `payload` must be a string (it enters the run as text), got "
            f"{type(payload).__name__}; serialize structured data yourself, e.g. json.dumps."
        )
        raise ValueError(msg)
    if len(payload) > 65536:
        msg = f"an event's `payload` is at most 65536 characters, got {len(payload)}."
        raise ValueError(msg)
    checked: dict[str, Any] = {"type": kind, "payload": payload}
    if event_id is not None:
        checked["event_id"] = event_id
    return checked


#: Waiting reasons a call resumes (approve, signal, resume), as opposed to a timer.
_DECIDED_BY_CALLS = frozenset({"approval", "input", "event", "breakpoint"})


def _waiting_for(interrupts: Sequence[Mapping[str, Any]]) -> WaitingFor | None:
    kinds = {i.get("kind") for i in interrupts}
    if "approval" in kinds:
        return "approval"
    if "interrupt" in kinds:
        waits_event = any(
            isinstance(i.get("value"), Mapping) and i["value"].get("wait_for") == "event"
            for i in interrupts
            if i.get("kind") == "interrupt"
        )
        return "event" if waits_event else "input"
    if "breakpoint" in kinds:
        return "breakpoint"
    if "timer" in kinds:
        return "timer"
    return None


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value


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
    """

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
        if not lease_ttl > 0 or not timer_refresh > 0 or not poll_interval > 0:
            msg = "`lease_ttl`, `timer_refresh` and `poll_interval` must be positive seconds."
            raise ValueError(msg)
        self.graph = graph
        self.backend = backend
        self.store: RunStore = run_store(backend)
        self.concurrency = concurrency
        self.max_queued = max_queued
        self.run_timeout = run_timeout
        self.approval_timeout = approval_timeout
        self.lease_ttl = float(lease_ttl)
        self.max_steps = max_steps
        self.tracer = tracer
        self.event_input = event_input
        self.listeners: list[Listener] = list(listeners)
        self.timer_refresh = float(timer_refresh)
        self.poll_interval = float(poll_interval)
        #: This process's owner id (``host:pid:random``).
        self.owner = new_owner_id()
        self._slots: asyncio.Semaphore | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._finished: dict[str, asyncio.Event] = {}
        self._waiting_new = 0
        self._running = 0
        self._stop_reason: dict[str, str] = {}
        self._loops: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self._draining = False
        self._closed = False
        self._started = False
        self._next_wake: float | None = None
        #: What this runner last read or wrote of a run it executes (saves store reads).
        self._known: dict[str, RunRecord] = {}
        self._latest: dict[str, str] = {}

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the background loops (lease renewal, timers); ``submit`` calls it."""
        if self._started:
            return
        if self._closed:
            msg = "this AsyncRunner was closed; create a new one."
            raise RuntimeError(msg)
        self._started = True
        self._slots = asyncio.Semaphore(self.concurrency)
        self._wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._loops = [
            loop.create_task(self._renew_loop(), name="tensorsketch-runs-renew"),
            loop.create_task(self._timer_loop(), name="tensorsketch-runs-timers"),
        ]

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
        return self._draining

    @property
    def in_flight(self) -> int:
        """Runs this process is executing or holding for a slot."""
        return len(self._tasks)

    async def drain(self, timeout: float | None = None) -> bool:
        """Refuse new work and wait for this process's runs to finish or suspend.

        Returns ``False`` if some were still going at ``timeout``; they stay in the store
        (their records say where they are) for a restart or another runner to resume.
        """
        self._draining = True
        pending = [t for t in self._tasks.values() if not t.done()]
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
        if self._closed:
            return
        self._closed = True
        self._draining = True
        for task in self._loops:
            task.cancel()
        for run_id, task in list(self._tasks.items()):
            if not task.done():
                self._stop_reason[run_id] = "shutdown"
                task.cancel()
        tasks = [*self._loops, *self._tasks.values()]
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=timeout)
            for task in stuck:
                log.warning(
                    "%s did not stop within %.3g s of being cancelled (does a node catch "
                    "CancelledError?); left running, its lease lapses for another runner",
                    task.get_name(),
                    timeout,
                )
        self._loops = []

    # -- submitting and reading -------------------------------------------------------------

    async def submit(
        self,
        input: Any = None,
        *,
        thread_id: str | None = None,
        idempotency_key: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> RunRecord:
        """Store a new run and execute it in the background; return its record.

        With ``idempotency_key``, submitting again returns the existing run (not a second
        one) unless that run failed. ``thread_id`` defaults to a new thread per run.
        """
        record, _ = await self.enqueue(
            input, thread_id=thread_id, idempotency_key=idempotency_key, labels=labels
        )
        return record

    async def enqueue(
        self,
        input: Any = None,
        *,
        thread_id: str | None = None,
        idempotency_key: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> tuple[RunRecord, bool]:
        """:meth:`submit`, also saying whether the run is new (``False``: the idempotency
        key named an existing run, which is returned)."""
        if self._draining:
            raise QueueFullError(
                "this runner is draining and takes no new runs; retry on another instance.",
                retry_after=5.0,
            )
        if self.max_queued and self._waiting_new >= self.max_queued:
            msg = (
                f"{self._waiting_new} runs already wait for a slot (max_queued="
                f"{self.max_queued}); retry later."
            )
            raise QueueFullError(msg, retry_after=1.0)
        if idempotency_key is not None and (
            not isinstance(idempotency_key, str) or not 0 < len(idempotency_key) <= 256
        ):
            msg = (
                "`idempotency_key` must be a string of 1 to 256 characters, got "
                f"{idempotency_key!r:.60}."
            )
            raise ValueError(msg)
        self.graph.check_run_input(input, thread_id=thread_id)  # refused now, not when it runs
        await self.start()
        run_id = f"run_{uuid.uuid4().hex}"
        record = RunRecord(
            run_id=run_id,
            thread_id=thread_id or f"thread_{uuid.uuid4().hex}",
            graph=self.graph.name,
            input=_plain(input),
            idempotency_key=idempotency_key,
            labels=check_labels(labels),
            owner=self.owner,
            lease_expires_at=_now() + self.lease_ttl,
        )
        stored, created = await self.store.create(record)
        if created:
            self._notify(stored)
            self._known[stored.run_id] = stored  # _begin starts from it: one read fewer
            self._spawn(stored.run_id, new=True)
        return stored, created

    async def get(self, run_id: str) -> RunRecord:
        """The run's record (an expired approval is rejected and resumed as it is read)."""
        record = await self.store.get(run_id)
        if record is None:
            msg = f"no run {run_id!r} in this store; take ids from submit() or list()."
            raise RunNotFoundError(msg)
        return await self._expire_approval(record)

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
        return await self.store.list(
            status=status, thread_id=thread_id, labels=labels, limit=limit, cursor=cursor
        )

    async def await_run(self, run_id: str, timeout: float | None = None) -> RunRecord:
        """Wait until the run finishes or suspends; return its record.

        A run this process executes wakes the waiter directly; one executed elsewhere is
        polled every ``poll_interval`` seconds. Raises ``TimeoutError`` at ``timeout``.
        """
        async with asyncio.timeout(timeout):
            while True:
                record = await self.get(run_id)
                if self._settled(record):
                    return record
                event = self._finished.setdefault(run_id, asyncio.Event())
                try:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(event.wait(), self.poll_interval)
                finally:
                    if run_id not in self._tasks:
                        self._finished.pop(run_id, None)

    async def events(
        self, run_id: str, *, since: int | None = None, follow: bool = True
    ) -> AsyncIterator[Event]:
        """The run's events from ``since`` (default: its first), then — with ``follow`` —
        live until it stops moving (finished or suspended), from whichever process runs it."""
        record = await self.get(run_id)
        start = since if since is not None else (record.first_seq or 0)

        async def settled() -> bool:
            current = await self.store.get(run_id)
            return current is None or self._settled(current)

        async for event in self.graph.replay(
            record.thread_id,
            self.backend,
            since=start,
            follow=follow,
            until=settled,
        ):
            yield event

    async def health(self) -> dict[str, Any]:
        """What an operator checks: in flight here, queued, suspended by reason, the next
        timer, whether draining."""
        counts = await self.store.counts()
        return {
            "in_flight": len(self._tasks),
            "running_here": self._running,
            "waiting_for_slot": self._waiting_new,
            "draining": self._draining,
            "runs": {k: v for k, v in counts.items() if ":" not in k},
            "suspended": {
                k.partition(":")[2]: v for k, v in counts.items() if k.startswith("suspended:")
            },
            "next_wake_at": await self.store.next_wake(),
            "owner": self.owner,
        }

    # -- decisions and signals --------------------------------------------------------------

    async def approve(self, run_id: str, decisions: Mapping[str, Any]) -> RunRecord:
        """Record approval decisions (by tool-call / interrupt id) for a suspended run; once
        every approval it waits on is decided, it resumes.

        Only ids the run waits on are accepted: one unknown id or malformed decision rejects
        the whole batch (``ValueError``) and leaves the record untouched. The first decision
        for an id wins. Decisions are stored before the run continues.
        """
        if not isinstance(decisions, Mapping) or not decisions:
            msg = "approve() needs a non-empty dict of decisions keyed by the ids the run awaits."
            raise ValueError(msg)
        for key, decision in decisions.items():
            if not isinstance(key, str):
                msg = f"decision ids are strings, got {key!r}."
                raise ValueError(msg)
            parse_approval(decision)
        record = await self.get(run_id)

        def decide(current: RunRecord) -> RunRecord:
            if current.status != "suspended" or current.waiting_for != "approval":
                msg = (
                    f"run {run_id!r} is {current.status}"
                    + (f", waiting for {current.waiting_for}" if current.waiting_for else "")
                    + "; only a run waiting for approval takes decisions."
                )
                raise RunConflictError(msg)
            awaited = {i["id"] for i in current.interrupts if i.get("kind") == "approval"}
            unknown = sorted(set(decisions) - awaited)
            if unknown:
                msg = (
                    f"run {run_id!r} does not wait on {unknown}; it waits on "
                    f"{sorted(awaited)}. Nothing was recorded."
                )
                raise ValueError(msg)
            merged = dict(current.decisions)
            for key, decision in decisions.items():
                merged.setdefault(key, decision)  # the first decision wins
            return current.replace(decisions=merged)

        stored = await self.store.transition(record.run_id, decide)
        assert stored is not None
        self._notify(stored)
        if self._all_decided(stored):
            self._spawn(stored.run_id)
        return stored

    async def signal(self, run_id: str, event: Mapping[str, Any]) -> RunRecord:
        """Deliver an event ``{event_id?, type, payload}`` to a suspended run.

        A run waiting for an event or an answer (``interrupt()``) gets it as the answer and
        resumes now; one waiting for a timer or an approval receives it as input when it
        next resumes. A repeated ``event_id``, a full buffer (64) or a run that is not
        suspended is a :class:`RunConflictError`, and the event is not accepted.
        """
        checked = check_event(event)
        record = await self.get(run_id)
        if self.event_input is None and record.waiting_for in ("timer", "approval", "breakpoint"):
            self._default_event_input([checked])  # fail now if the graph cannot take events

        def accept(current: RunRecord) -> RunRecord:
            if current.status != "suspended":
                msg = f"run {run_id!r} is {current.status}; only a suspended run takes events."
                raise RunConflictError(msg)
            event_id = checked.get("event_id")
            if event_id is not None and (
                event_id in current.delivered_event_ids
                or any(e.get("event_id") == event_id for e in current.events)
            ):
                msg = f"event {event_id!r} was already delivered to run {run_id!r}."
                raise RunConflictError(msg)
            delivered = current.delivered_event_ids
            if event_id is not None:
                delivered = (*delivered, event_id)[-MAX_DELIVERED_IDS:]
            if current.waiting_for in ("event", "input"):
                answers = {
                    i["id"]: dict(checked)
                    for i in current.interrupts
                    if i.get("kind") == "interrupt"
                }
                return current.replace(
                    decisions={**answers, **current.decisions}, delivered_event_ids=delivered
                )
            if len(current.events) >= MAX_PENDING_EVENTS:
                msg = (
                    f"run {run_id!r} already holds {MAX_PENDING_EVENTS} undelivered events; "
                    "this one was not accepted. Get the run moving (approve it, or let its "
                    "timer fire) first."
                )
                raise RunConflictError(msg)
            return current.replace(events=(*current.events, checked), delivered_event_ids=delivered)

        stored = await self.store.transition(record.run_id, accept)
        assert stored is not None
        self._notify(stored)
        if stored.waiting_for in ("event", "input"):
            self._spawn(stored.run_id)
        return stored

    async def resume(self, run_id: str) -> RunRecord:
        """Continue a run suspended at a static breakpoint (``waiting_for="breakpoint"``:
        ``compile(interrupt_before=[...])`` or ``interrupt_after``); it runs on from there.

        A breakpoint needs no decision, so this records that it was passed and starts the
        next segment. A run waiting for anything else is a :class:`RunConflictError` naming
        the call that resumes it.
        """
        record = await self.get(run_id)

        def go_on(current: RunRecord) -> RunRecord:
            if current.status != "suspended" or current.waiting_for != "breakpoint":
                how = {
                    "approval": "approve() it",
                    "input": "signal() it with the answer",
                    "event": "signal() it",
                    "timer": "wait for its timer",
                }.get(current.waiting_for or "", "")
                msg = (
                    f"run {run_id!r} is {current.status}"
                    + (f", waiting for {current.waiting_for}" if current.waiting_for else "")
                    + "; resume() continues only a run stopped at a breakpoint"
                    + (f" ({how} instead)." if how else ".")
                )
                raise RunConflictError(msg)
            passed = {i["id"]: True for i in current.interrupts if i.get("kind") == "breakpoint"}
            return current.replace(decisions={**current.decisions, **passed})

        stored = await self.store.transition(record.run_id, go_on)
        assert stored is not None
        self._notify(stored)
        await self.start()
        if self._all_decided(stored):
            self._spawn(stored.run_id)
        return stored

    async def cancel(self, run_id: str) -> RunRecord:
        """Cancel a queued, running or suspended run (``cancelled``, not ``failed``).

        A run executing here has its model and tool calls cancelled at once; one executing in
        another process stops there when that runner next renews its lease. The thread keeps
        its checkpoints, so it can be continued later.
        """
        await self.get(run_id)

        def stop(current: RunRecord) -> RunRecord:
            if current.terminal:
                msg = f"run {run_id!r} already {current.status}; there is nothing to cancel."
                raise RunConflictError(msg)
            return current.replace(
                status="cancelled",
                finished_at=_now(),
                waiting_for=None,
                wake_at=None,
                owner=None,
                lease_expires_at=None,
            )

        stored = await self.store.transition(run_id, stop)
        assert stored is not None
        task = self._tasks.get(run_id)
        if task is not None and not task.done():
            self._stop_reason[run_id] = "cancelled"
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([task])
        self._notify(stored)
        self._settle(run_id)
        return stored

    # -- taking work over -------------------------------------------------------------------

    async def resume_pending(self) -> builtins.list[str]:
        """Take over the store's orphaned runs and resume them; fire due timers.

        An orphan is a queued or running run whose owner's lease expired, or whose owner is a
        dead process on this host; a live owner's runs are never taken, and suspended runs
        are not orphans (their decisions, signals or timers resume them). Returns the ids
        this runner took.
        """
        await self.start()
        taken: builtins.list[str] = []
        now = _now()
        for record in await self.store.orphans(now, limit=10_000):
            if record.run_id in self._tasks:
                continue  # being worked on here
            claimed = await self.store.claim(record.run_id, self.owner, now + self.lease_ttl)
            if claimed is not None:
                log.info("took over run %s (was %s)", claimed.run_id, record.owner)
                self._notify(claimed)
                self._spawn(claimed.run_id, takeover=True)
                taken.append(claimed.run_id)
        self._wake.set()
        return taken

    # -- executing ----------------------------------------------------------------------------

    def _spawn(self, run_id: str, *, new: bool = False, takeover: bool = False) -> None:
        if self._closed or run_id in self._tasks:
            return
        if new:
            self._waiting_new += 1
        task = asyncio.get_running_loop().create_task(
            self._execute(run_id, new=new, takeover=takeover), name=f"tensorsketch-run-{run_id}"
        )
        self._tasks[run_id] = task
        task.add_done_callback(functools.partial(self._forget, run_id))

    def _forget(self, run_id: str, _task: object = None) -> None:
        self._tasks.pop(run_id, None)
        self._known.pop(run_id, None)
        self._latest.pop(run_id, None)
        self._stop_reason.pop(run_id, None)

    async def _execute(self, run_id: str, *, new: bool, takeover: bool) -> None:
        assert self._slots is not None
        counted = new
        try:
            async with self._slots:
                if counted:
                    self._waiting_new -= 1
                    counted = False
                self._running += 1
                try:
                    await self._segment(run_id, takeover=takeover)
                finally:
                    self._running -= 1
        except asyncio.CancelledError:
            if self._stop_reason.get(run_id) == "shutdown":
                await self._hand_back(run_id)
            # cancel() already stored `cancelled`; a lost run is the new owner's.
        except LeaseLostError as exc:
            log.warning("run %s: %s", run_id, exc)
        except Exception:  # pragma: no cover - reported, never lost: the record says where it is
            log.exception("run %s: the runner could not store its outcome", run_id)
        finally:
            if counted:
                self._waiting_new -= 1
            self._settle(run_id)

    def _settle(self, run_id: str) -> None:
        event = self._finished.pop(run_id, None)
        if event is not None:
            event.set()

    async def _begin(self, run_id: str, *, takeover: bool) -> RunRecord | None:
        """Move the run to ``running`` under this owner (from queued, or back from suspended),
        remembering where its thread stood the first time."""
        # A run this runner just created or claimed starts from that record (a stale one only
        # loses the compare-and-set below and is read again); any other is read first.
        seen = self._known.pop(run_id, None)
        if seen is None or seen.status != "queued" or seen.owner != self.owner:
            seen = await self.get(run_id)
        latest = await self.backend.latest_checkpoint(seen.thread_id)
        latest_id = latest.checkpoint_id if latest is not None else ""
        first_seq = seen.first_seq
        if first_seq is None:
            last = await self.backend.last_event_seq(seen.thread_id)
            first_seq = 0 if last is None else last + 1
        now = _now()

        def begin(current: RunRecord) -> RunRecord | None:
            if current.status == "queued" or (takeover and current.status == "running"):
                if current.owner != self.owner:
                    return None
            elif current.status == "suspended":
                if not (self._all_decided(current) or self._due(current, now)):
                    return None
            else:
                return None
            return current.replace(
                status="running",
                owner=self.owner,
                lease_expires_at=now + self.lease_ttl,
                started_at=current.started_at or now,
                # A takeover (or a retry here) counts the interrupted segment up to now.
                active_seconds=_active(current, now)
                if current.status == "running"
                else (current.active_seconds),
                segment_started_at=now,
                attempts=current.attempts + 1,
                base_checkpoint=(
                    current.base_checkpoint if current.base_checkpoint is not None else latest_id
                ),
                first_seq=current.first_seq if current.first_seq is not None else first_seq,
            )

        stored = await self.store.transition(run_id, begin, known=seen)
        if stored is not None:
            self._notify(stored)
            self._latest[run_id] = latest_id
        return stored

    def _settled(self, record: RunRecord) -> bool:
        """Finished, or suspended with nothing yet to resume it (and not executing here)."""
        if record.status in ACTIVE or record.run_id in self._tasks:
            return False
        if record.status == "suspended":
            return not (self._all_decided(record) or self._due(record, _now()))
        return True

    def _due(self, record: RunRecord, now: float) -> bool:
        return record.waiting_for == "timer" and (record.wake_at or 0.0) <= now

    def _all_decided(self, record: RunRecord) -> bool:
        if record.status != "suspended" or record.waiting_for not in _DECIDED_BY_CALLS:
            return False
        awaited = [i["id"] for i in record.interrupts if i.get("kind") != "timer"]
        return bool(awaited) and all(a in record.decisions for a in awaited)

    async def _segment(self, run_id: str, *, takeover: bool) -> None:
        """Run the graph from wherever the run stands until it finishes, fails or suspends."""
        while True:
            record = await self._begin(run_id, takeover=takeover)
            if record is None:
                return
            self._known[run_id] = record
            try:
                state, used = await self._invoke(record)
            except LeaseLostError:
                raise
            except ThreadBusyError:
                # The thread's previous runner (dead or stalled) still holds its lease: wait
                # for it to lapse, keeping the run.
                await asyncio.sleep(min(self.lease_ttl / 3, 1.0))
                takeover = True
                continue
            except BackendUnavailableError as exc:
                log.warning("run %s: the store is unavailable (%s); retrying", run_id, exc)
                await asyncio.sleep(min(self.lease_ttl / 3, 2.0))
                takeover = True
                continue
            except _RunTimedOut:
                message = f"the run took longer than run_timeout={self.run_timeout}s"
                await self._finish(
                    run_id, status="failed", error={"type": "RunTimeout", "message": message}
                )
                return
            except Exception as exc:
                error = {"type": type(exc).__name__, "message": str(exc)}
                await self._finish(run_id, status="failed", error=error)
                return
            if await self._outcome(run_id, record, state, used):
                continue  # suspended again on something already decided
            return

    async def _invoke(self, record: RunRecord) -> tuple[Any, set[str]]:
        """Invoke the graph for the run's next segment; return the state and the decision
        ids it was resumed with."""
        resume: dict[str, Any] | None = None
        input: Any = None
        latest_id = self._latest.pop(record.run_id, None)  # read by _begin just before
        if latest_id is None:
            latest = await self.backend.latest_checkpoint(record.thread_id)
            latest_id = latest.checkpoint_id if latest is not None else ""
        if latest_id == record.base_checkpoint:
            input = record.input  # nothing of this run was written yet
        else:
            state = await self.graph.aget_state(record.thread_id, self.backend)
            info = run_info(state) if state is not None else None
            if info is not None and info.suspended:
                awaited = set(info.awaiting)
                resume = {k: v for k, v in record.decisions.items() if k in awaited} or None
            if record.events:
                input = self._event_input(list(record.events))
        budget = None
        if self.run_timeout is not None:
            budget = self.run_timeout - record.active_seconds
            if budget <= 0:
                raise _RunTimedOut
        try:
            async with asyncio.timeout(budget) as deadline:
                # Streamed, so the thread's event log is written for live tails and replays.
                async for _event in self.graph.stream(
                    input,
                    thread_id=record.thread_id,
                    backend=self.backend,
                    max_steps=self.max_steps,
                    tracer=self.tracer,
                    resume=resume,
                    run_id=record.run_id,  # one id: the record's, in events and ctx.run_id
                ):
                    pass
            state = await self.graph.aget_state(record.thread_id, self.backend)
        except TimeoutError as exc:
            if deadline.expired():
                raise _RunTimedOut from exc
            raise
        return state, set(resume or ())

    def _event_input(self, events: builtins.list[dict[str, Any]]) -> Mapping[str, Any]:
        if self.event_input is not None:
            return self.event_input(events)
        return self._default_event_input(events)

    def _default_event_input(self, events: builtins.list[dict[str, Any]]) -> Mapping[str, Any]:
        fields = self.graph.state_schema.model_fields
        if "messages" not in fields:
            msg = (
                f"graph {self.graph.name!r} has no `messages` field to deliver events into; "
                "pass AsyncRunner(event_input=lambda events: {...}) to say what they become."
            )
            raise RunConflictError(msg)
        return {"messages": [user(f"[event {e['type']}] {e.get('payload', '')}") for e in events]}

    async def _outcome(self, run_id: str, began: RunRecord, state: Any, used: set[str]) -> bool:
        """Store how the segment ended. Returns ``True`` when it should run again at once
        (it suspended on ids that already have decisions)."""
        info = run_info(state)
        now = _now()
        if info.suspended:
            interrupts = tuple(p.to_dict() for p in info.interrupts)
            waiting = _waiting_for(interrupts)

            def suspend(current: RunRecord) -> RunRecord | None:
                if current.status != "running":
                    return None
                remaining = tuple(e for e in current.events if e not in began.events)
                awaited = {i["id"] for i in interrupts}
                return current.replace(
                    status="suspended",
                    waiting_for=waiting,
                    wake_at=info.wake_at,
                    interrupts=interrupts,
                    # Decisions this segment consumed are spent (a later turn may reuse an id).
                    decisions={
                        k: v for k, v in current.decisions.items() if k in awaited and k not in used
                    },
                    events=remaining,
                    owner=None,
                    lease_expires_at=None,
                    suspended_at=now,
                    active_seconds=_active(current, now),
                    segment_started_at=None,
                    output=_plain(state),
                )

            stored = await self.store.transition(
                run_id, suspend, owner=self.owner, known=self._known.pop(run_id, None)
            )
            if stored is None:
                return False
            self._notify(stored)
            if waiting == "timer":
                self._note_wake(info.wake_at)
            return self._all_decided(stored)
        await self._finish(run_id, status="succeeded", output=_plain(state), delivered=began.events)
        return False

    async def _finish(
        self,
        run_id: str,
        *,
        status: str,
        output: Any = None,
        error: dict[str, str] | None = None,
        delivered: tuple[dict[str, Any], ...] = (),
    ) -> None:
        now = _now()

        def end(current: RunRecord) -> RunRecord | None:
            if current.status != "running":
                return None  # cancelled meanwhile: that outcome stands
            return current.replace(
                status=status,
                output=output if output is not None else current.output,
                error=error,
                finished_at=now,
                active_seconds=_active(current, now),
                segment_started_at=None,
                waiting_for=None,
                wake_at=None,
                interrupts=(),
                decisions={},
                events=tuple(e for e in current.events if e not in delivered),
                owner=None,
                lease_expires_at=None,
            )

        stored = await self.store.transition(
            run_id, end, owner=self.owner, known=self._known.pop(run_id, None)
        )
        if stored is not None:
            self._notify(stored)

    async def _hand_back(self, run_id: str) -> None:
        """Shutting down mid-run: clear the owner so another runner resumes it at once."""

        def release(current: RunRecord) -> RunRecord | None:
            if current.status not in ACTIVE:
                return None
            return current.replace(owner=None, lease_expires_at=None)

        with contextlib.suppress(Exception):
            await asyncio.shield(self.store.transition(run_id, release, owner=self.owner))

    async def _expire_approval(self, record: RunRecord) -> RunRecord:
        timeout = self.approval_timeout
        if (
            timeout is None
            or record.status != "suspended"
            or record.waiting_for != "approval"
            or (record.suspended_at or 0.0) + timeout > _now()
        ):
            return record
        reject = {"approved": False, "reason": "approval timeout"}

        def expire(current: RunRecord) -> RunRecord | None:
            if current.status != "suspended" or current.waiting_for != "approval":
                return None
            decisions = dict(current.decisions)
            for i in current.interrupts:
                if i.get("kind") == "approval":
                    decisions.setdefault(i["id"], reject)
            return current.replace(decisions=decisions)

        stored = await self.store.transition(record.run_id, expire)
        if stored is None:
            return record
        self._notify(stored)
        await self.start()
        self._spawn(stored.run_id)
        return stored

    # -- background loops ---------------------------------------------------------------------

    async def _renew_loop(self) -> None:
        ticks = 0
        while True:
            await asyncio.sleep(self.lease_ttl / 3)
            ticks += 1
            if ticks % 3 == 0 and not self._draining:
                # Once a lease: take over what a crashed runner sharing the store left (read
                # from the status index of queued/running runs, not a scan of every run).
                try:
                    await self.resume_pending()
                except Exception as exc:
                    log.warning("looking for orphaned runs failed: %s", exc)
            mine = list(self._tasks)
            if not mine:
                continue
            try:
                kept = await self.store.renew(self.owner, mine, _now() + self.lease_ttl)
            except Exception as exc:
                log.warning("renewing run leases failed: %s", exc)
                continue
            for run_id in mine:
                task = self._tasks.get(run_id)
                if run_id in kept or task is None or task.done():
                    continue
                current = await self.store.get(run_id)
                if current is not None and current.owner == self.owner and current.status in ACTIVE:
                    continue  # written by us in between: the next renewal covers it
                if current is not None and current.status == "suspended":
                    continue  # it just suspended; the task is finishing
                self._stop_reason[run_id] = "lost"
                task.cancel()

    def _note_wake(self, wake_at: float | None) -> None:
        if wake_at is not None and (self._next_wake is None or wake_at < self._next_wake):
            self._next_wake = wake_at
            self._wake.set()

    async def _timer_loop(self) -> None:
        while True:
            try:
                soonest = await self.store.next_wake()
            except Exception as exc:
                log.warning("reading the due-timer index failed: %s", exc)
                soonest = None
            self._next_wake = soonest
            delay = self.timer_refresh if soonest is None else soonest - _now()
            delay = max(0.0, min(delay, self.timer_refresh))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            try:
                due = await self.store.due(_now(), limit=500)
            except Exception as exc:
                log.warning("reading due timers failed: %s", exc)
                continue
            for record in due:
                if record.kind == "schedule":
                    await self._fire_schedule(record)
                elif record.run_id not in self._tasks and not self._closed:
                    self._spawn(record.run_id)
            if due and all(r.run_id in self._tasks or r.kind == "schedule" for r in due):
                # Claimed (or being claimed) here: let them leave the index before re-reading.
                await asyncio.sleep(min(0.05, self.timer_refresh))

    async def _fire_schedule(self, record: RunRecord) -> None:
        try:
            await fire(self, record)
        except Exception as exc:
            log.warning("schedule %s did not fire: %s", record.run_id, exc)

    def _notify(self, record: RunRecord) -> None:
        for listener in self.listeners:
            try:
                listener(record)
            except Exception:  # a listener never breaks a run
                log.exception("a run listener failed")
