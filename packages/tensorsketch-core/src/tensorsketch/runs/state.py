"""``RunnerState``: what the parts of one ``AsyncRunner`` share — its settings, and what this
process is doing with its runs. The parts (submission, operator, execution, loops) hold the
same instance, so a setting changed on the runner (``runner.tracer = ...``) reaches them all.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tensorsketch.observability import Tracer
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runs.folding import Folding
from tensorsketch.runs.records import all_decided, due, now
from tensorsketch.runs.retention import Retention
from tensorsketch.runs.riding import RunRider
from tensorsketch.runs.signals import EventInput
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.runs import ACTIVE, RunRecord, RunStore, ThreadHead

__all__ = ["Listener", "RunnerState", "Settled"]

log = logging.getLogger("tensorsketch.runs")

#: Thread heads a runner remembers for folded submits (see RunnerState.thread_heads).
_HEADS_KEPT = 4096

#: Called with every record the runner stores (metrics, logs); must not block.
Listener = Callable[[RunRecord], None]


class Settled(asyncio.Event):
    """Set when a run executed here stops moving; ``record`` is the record it stopped with
    (``None`` when its last write was not this process's), so a waiter need not read it."""

    record: RunRecord | None = None


@dataclass(eq=False)
class RunnerState:
    """One runner's settings (see ``AsyncRunner``) and its in-process bookkeeping."""

    graph: CompiledGraph[Any]
    backend: Backend
    store: RunStore
    concurrency: int
    max_queued: int
    run_timeout: float | None
    approval_timeout: float | None
    lease_ttl: float
    max_steps: int
    tracer: Tracer | None
    event_input: EventInput | None
    listeners: list[Listener]
    timer_refresh: float
    poll_interval: float
    #: This process's owner id (``host:pid:random``).
    owner: str
    #: ``AsyncRunner(deps=...)``: what every run executed here reads as ``ctx.deps``.
    deps: Any = None
    #: ``AsyncRunner(memory=...)``: the store every run executed here reads as ``ctx.memory``.
    memory: Any = None
    #: ``AsyncRunner(multitask_strategy=...)``: the double-texting policy of a submit that
    #: names none (see :mod:`tensorsketch.runs.multitask`).
    multitask_strategy: str = "enqueue"
    #: ``AsyncRunner(retention=...)``: the threads this runner sweeps (``None``: none).
    retention: Retention | None = None
    #: Serializes this process's submits per thread, so its check of what is in flight on
    #: the thread and its new record are one step (other processes: see docs/runs.md): a
    #: thread here has a submit in that step, and the submits waiting for it, in order
    #: (``None``: none waits). An entry is dropped as its last submit leaves: a submit on a
    #: thread nobody else submits to takes no lock object and never waits.
    thread_gates: dict[str, deque[asyncio.Future[None]] | None] = field(default_factory=dict)

    #: Bounds the runs executing at once (made by ``start``, on the running loop).
    slots: asyncio.Semaphore | None = None
    #: The task executing each run this process works on (or holds for a slot).
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    #: Set when a run executed here stops moving, to wake its ``await_run`` callers.
    settled_events: dict[str, Settled] = field(default_factory=dict)
    #: Runs whose turn on their thread has come and that wait here for a slot: nothing of
    #: theirs is written until they take one, so their followers wait instead of polling.
    for_slot: set[str] = field(default_factory=set)
    #: Set (and dropped) when a run executing here commits events, goes back to wait its
    #: turn or its task ends, to wake its followers (``AsyncRunner.events``). Only a run
    #: somebody follows has one: waking the others is a dict lookup.
    moved: dict[str, Settled] = field(default_factory=dict)
    #: Runs whose graph runs here now: each commit of their events wakes their followers,
    #: who need not poll in between.
    committing: set[str] = field(default_factory=set)
    #: The last record this process stored for a run it executes (handed to its waiters).
    final: dict[str, RunRecord] = field(default_factory=dict)
    #: New runs waiting for a slot (what ``max_queued`` bounds), and runs executing.
    waiting_new: int = 0
    running: int = 0
    #: Why this process cancelled a run's task: ``shutdown``, ``lost`` or ``cancelled``.
    stop_reasons: dict[str, str] = field(default_factory=dict)
    #: Set to make the timer loop re-read the due index now.
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    #: The earliest timer the timer loop knows of.
    next_wake: float | None = None
    started: bool = False
    draining: bool = False
    closed: bool = False
    #: What this runner last read or wrote of a run it executes (saves store reads).
    known: dict[str, RunRecord] = field(default_factory=dict)
    #: The head of its thread's queue that a run created here saw as it was stored (read
    #: with the insert): a run that heads it need not read the queue again before it starts.
    turns: dict[str, str | None] = field(default_factory=dict)
    #: Where its thread stood as a run created here was stored: the guess its first segment
    #: starts from, checked by the read that shares the segment's first write.
    heads: dict[str, ThreadHead] = field(default_factory=dict)
    #: The thread's latest checkpoint id as a run's segment began (read once, used twice).
    latest: dict[str, str] = field(default_factory=dict)
    #: The rider of each run executing here whose record writes ride its commits.
    riders: dict[str, RunRider] = field(default_factory=dict)
    #: Whether a submit that can start at once has its insert ride the run's opening (on a
    #: backend that ``folds_submits``; see :mod:`tensorsketch.runs.folding`).
    fold_submits: bool = True
    #: The backend's class may fold submits (its ``folds_submits`` is not ``False``; the
    #: instance says when): what the runner tracks for folding is skipped otherwise.
    may_fold: bool = False
    #: Folded submits whose opening has not answered yet, by run id.
    folds: dict[str, Folding] = field(default_factory=dict)
    #: Runs submitted here that have a task, by thread (how many), and each one's thread:
    #: a submit folds only on a thread idle as far as this runner knows.
    thread_runs: dict[str, int] = field(default_factory=dict)
    run_threads: dict[str, str] = field(default_factory=dict)
    #: Where a thread stood as the last run this runner executed on it returned (its final
    #: checkpoint, its last event): a folded submit's guess of where its run begins (the
    #: opening reads the truth and a wrong guess is corrected). Bounded, oldest dropped.
    thread_heads: dict[str, ThreadHead] = field(default_factory=dict)

    def remember_head(self, thread_id: str, head: ThreadHead) -> None:
        """Note ``head`` as where ``thread_id`` stands (see :attr:`thread_heads`; the
        oldest noted goes first)."""
        heads = self.thread_heads
        heads[thread_id] = head
        if len(heads) > _HEADS_KEPT:
            del heads[next(iter(heads))]

    def track(self, run_id: str, thread_id: str) -> None:
        """A run submitted here got a task on ``thread_id``."""
        self.run_threads[run_id] = thread_id
        self.thread_runs[thread_id] = self.thread_runs.get(thread_id, 0) + 1

    def untrack(self, run_id: str) -> None:
        """The task of a run :meth:`track` counted ended."""
        thread_id = self.run_threads.pop(run_id, None)
        if thread_id is not None:
            left = self.thread_runs[thread_id] - 1
            if left:
                self.thread_runs[thread_id] = left
            else:
                del self.thread_runs[thread_id]

    def notify(self, record: RunRecord) -> None:
        """Tell every listener about a record the runner stored; a failing one is logged.
        The run's rider, if it executes here, learns its known record may be stale."""
        rider = self.riders.get(record.run_id)
        if rider is not None and rider.known is not record:  # not the rider's own write
            rider.noticed(record)
        for listener in self.listeners:
            try:
                listener(record)
            except Exception:  # a listener never breaks a run
                log.exception("a run listener failed")

    def wake_followers(self, run_id: str, record: RunRecord | None = None) -> None:
        """Wake the followers of ``run_id`` waiting for it to move (see :attr:`moved`);
        ``record``: the one it stopped with, as its task ends."""
        moved = self.moved.pop(run_id, None)
        if moved is not None:
            moved.record = record
            moved.set()

    def events_committed(self, run_id: str, last: bool) -> None:
        """A run executing here committed events (its journal's ``on_events``): wake its
        followers. Not for the segment's last commit: its end follows at once, and wakes
        them (the task's end, or the next segment's start); waking them twice in that short
        span cost more than it saved (``bench_tasks.py``)."""
        if not last:
            self.wake_followers(run_id)

    def note_wake(self, wake_at: float | None) -> None:
        """Wake the timer loop early when ``wake_at`` comes before the timer it sleeps to."""
        if wake_at is not None and (self.next_wake is None or wake_at < self.next_wake):
            self.next_wake = wake_at
            self.wake.set()

    def settled(self, record: RunRecord) -> bool:
        """Finished, or suspended with nothing yet to resume it (and not executing here)."""
        return record.run_id not in self.tasks and self.settled_record(record)

    def settled_record(self, record: RunRecord) -> bool:
        """What :meth:`settled` says of the record alone (its task may still be ending)."""
        if record.status in ACTIVE:
            return False
        if record.status == "suspended":
            return not (all_decided(record) or due(record, now()))
        return True
