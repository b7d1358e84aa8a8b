"""``Execution``: running one run record through the graph in this process.

A run executes as a task holding one of the runner's slots. Each *segment* moves the record
to ``running`` under this runner's owner id (compare-and-set), runs the graph on the run's
thread from wherever it stands — with the record's id as the engine run's id, its events
stored as a stream's are and handed, as they happen, to a check for stop requests — and stores
how it stopped: finished, failed, or suspended on what it waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Literal

from tensorsketch.assistant_config import CONFIG
from tensorsketch.durable.event_rows import stored_run_id
from tensorsketch.durable.modes import check_durability
from tensorsketch.errors import BackendUnavailableError, LeaseLostError, ThreadBusyError
from tensorsketch.events import Event
from tensorsketch.interrupts import run_info
from tensorsketch.runs.folding import Folding
from tensorsketch.runs.multitask import roll_back, stopped_error
from tensorsketch.runs.records import active_seconds, all_decided, due, now, plain, waiting_for
from tensorsketch.runs.riding import Change, RunRider
from tensorsketch.runs.signals import segment_input
from tensorsketch.runs.state import RunnerState, Settled
from tensorsketch.runs.steering import RecordInbox
from tensorsketch.runtime.backends.rides import RIDER
from tensorsketch.runtime.backends.runs import ACTIVE, RunRecord, RunStore, ThreadHead
from tensorsketch.steering import INBOX

__all__ = ["Execution"]

#: The context the runner's own bookkeeping callbacks run in (they read no variable of it).
_BARE = contextvars.Context()

log = logging.getLogger("tensorsketch.runs")


class _RunTimedOut(Exception):
    """The run used up ``run_timeout`` (told apart from a TimeoutError of the graph's)."""


class _Queued(Exception):
    """A folded submit's opening stored the run but could not take its thread's lease."""


class _Unstored(Exception):
    """A folded submit's opening failed before it answered (nothing known to be stored)."""


class _Stopped(Exception):
    """A later submit on the run's thread asked it to stop; it reached a superstep barrier."""


#: What a superseded run may be ended from: waiting, or resumed here (see ``superseded_by``).
_SUPERSEDABLE = ("suspended", "running")


class _Superseded(Exception):
    """A later run went on with the suspended run's thread (see ``superseded_by``)."""

    def __init__(self, by: str) -> None:
        super().__init__(by)
        self.by = by


class Execution:
    """Starts, runs and ends the tasks that execute runs here.

    :param read: reads a run's record the way ``AsyncRunner.get`` does (an expired approval
        is rejected as it is read), for a segment that does not start from a known record.
    """

    def __init__(self, state: RunnerState, read: Callable[[str], Awaitable[RunRecord]]) -> None:
        self.state = state
        self.read = read
        #: Outcomes that rode a segment's last commit, for :meth:`_outcome` to report.
        self._rode_to_end: dict[str, RunRecord] = {}
        #: The backend was seen carrying rides for the store (it keeps doing so: not asked
        #: again for every run).
        self._riding = False
        #: Submits fold here (once they do, for good: a run store stays in use).
        self._heads_wanted = False

    def _wants_heads(self) -> bool:
        """Whether submits fold here, so where a run leaves its thread is worth noting."""
        state = self.state
        self._heads_wanted = state.fold_submits and bool(
            getattr(state.backend, "folds_submits", False)
        )
        return self._heads_wanted

    # -- the task of a run ------------------------------------------------------------------

    def spawn(self, run_id: str, *, new: bool = False, takeover: bool = False) -> None:
        """Execute the run in a task of its own, unless one already does (or the runner is
        closed). ``new`` counts it against ``max_queued`` until it gets a slot."""
        state = self.state
        if state.closed or run_id in state.tasks:
            return
        if not state.started:  # its task would die at once and leave await_run waiting
            msg = (
                f"run {run_id!r} cannot execute on this AsyncRunner: it was never started. "
                "Call `await runner.start()` (or use `async with runner:`) first."
            )
            raise RuntimeError(msg)
        if new:
            state.waiting_new += 1
        task = asyncio.get_running_loop().create_task(
            self._execute(run_id, new=new, takeover=takeover), name=f"tensorsketch-run-{run_id}"
        )
        state.tasks[run_id] = task
        # The task forgets its run as it ends (see _execute); one cancelled before it ever
        # ran never enters _execute, and is forgotten by this callback, which the task
        # removes as it starts. Bookkeeping that reads no context variable: no copy of the
        # caller's context.
        task.add_done_callback(self._never_ran, context=_BARE)

    def _never_ran(self, task: asyncio.Task[None]) -> None:
        """A run's task was cancelled before it started: forget its run all the same."""
        for run_id, held in self.state.tasks.items():
            if held is task:
                self._forget(run_id)
                return

    def _forget(self, run_id: str) -> None:
        """The run's task is ending: drop what the runner held for it and wake who waits for
        it. Done by the task itself as it ends, not by a done callback: its waiters then
        wake a loop iteration sooner, and no callback of its own is scheduled per run."""
        state = self.state
        state.tasks.pop(run_id, None)
        # Its waiters wake once the task is gone (they run after its last step), so what
        # they do next (approve, signal) starts a new one; they get the record it stopped
        # with.
        final = state.final.get(run_id)
        self.wake_waiters(run_id)
        state.wake_followers(run_id, final)
        state.known.pop(run_id, None)
        state.latest.pop(run_id, None)
        state.turns.pop(run_id, None)
        state.heads.pop(run_id, None)
        state.stop_reasons.pop(run_id, None)
        state.riders.pop(run_id, None)
        self._rode_to_end.pop(run_id, None)
        if state.run_threads:
            state.untrack(run_id)
            folding = state.folds.pop(run_id, None)
            if folding is not None:  # it ended before its opening answered: submit reads
                folding.ended()

    async def _execute(self, run_id: str, *, new: bool, takeover: bool) -> None:
        """The run's task: wait for its turn and a slot, then run the graph from wherever
        the run stands until it finishes, fails or suspends — again at once when it
        suspended on what is decided already. The segments' loop is here rather than in a
        coroutine of its own: every frame between the task and the graph is resumed at
        each of the run's waits."""
        state = self.state
        assert state.slots is not None
        state.tasks[run_id].remove_done_callback(self._never_ran)  # it runs: see spawn
        counted = new
        try:
            queued = True
            while queued:  # again when a folded submit's opening left it queued
                queued = False
                await self._wait_turn(run_id)
                state.for_slot.add(run_id)
                async with state.slots:
                    state.for_slot.discard(run_id)
                    if counted:
                        state.waiting_new -= 1
                        counted = False
                    state.running += 1
                    try:
                        while True:
                            # From here each commit of its events wakes its followers:
                            # they go on waiting (nothing is written before its first one).
                            state.committing.add(run_id)
                            record = await self._begin(run_id, takeover=takeover)
                            if record is None:
                                return
                            state.known[run_id] = record
                            # A folded submit's first segment answers its submit too (its
                            # rider does, as the opening returns): checked here, not in a
                            # frame of its own resumed at each of the run's waits.
                            folding = state.folds.get(run_id)
                            try:
                                graph_state, used = await self._invoke(record, takeover=takeover)
                                self._answered(folding)
                            except Exception as exc:
                                failure = self._unfolded(folding, exc)
                                if isinstance(failure, LeaseLostError):
                                    raise  # (only ever exc itself)
                                then = await self._failed(run_id, record, failure)
                                if then == "again":
                                    takeover = True
                                    continue
                                queued = then == "queued"  # stored without the lease
                                break
                            outcome = await self._outcome(run_id, record, graph_state, used)
                            if outcome == "stop":
                                # Asked to stop during its last superstep: it is stopped
                                # all the same (a rollback still discards what it wrote),
                                # as the later input expects. The outcome's compare-and-set
                                # saw the request (it bumped the record's version, so the
                                # write read the record again): no read of its own.
                                await self._stopped(run_id, record)
                                return
                            if outcome != "again":  # "again": suspended on what is decided
                                return
                            state.wake_followers(run_id)  # the last commit's events
                    finally:
                        state.running -= 1
                        self._left_slot(run_id, queued=queued)
        except asyncio.CancelledError:
            if state.stop_reasons.get(run_id) == "shutdown":
                await self._hand_back(run_id)
            # cancel() already stored `cancelled`; a lost run is the new owner's.
        except LeaseLostError as exc:
            await self._lost(run_id, exc)
        except Exception:  # pragma: no cover - reported, never lost: the record says where it is
            log.exception("run %s: the runner could not store its outcome", run_id)
        finally:
            state.for_slot.discard(run_id)  # cancelled while it waited for one
            if counted:
                state.waiting_new -= 1
            self._forget(run_id)

    def _left_slot(self, run_id: str, *, queued: bool) -> None:
        """The run gave its slot back: its commits no longer wake its followers. Back in
        the queue (``queued``), they are woken to poll while it waits its turn; otherwise
        its task is ending, which wakes them."""
        state = self.state
        state.committing.discard(run_id)
        if queued:
            state.wake_followers(run_id)

    async def _lost(self, run_id: str, exc: LeaseLostError) -> None:
        """Say why this runner let a run go: a cancel (from any process, before the run
        started or while it ran) is a normal end; a takeover after a stall is not."""
        try:
            record = await self.state.store.get(run_id)
        except Exception:  # the store is away: say what the runner knows
            record = None
        if record is not None and record.status == "cancelled":
            log.info("run %s was cancelled; this runner stops it: %s", run_id, exc)
        else:
            log.warning("run %s: %s", run_id, exc)

    async def _wait_turn(self, run_id: str) -> None:
        """Hold a queued run, before it takes a slot, until every run submitted earlier on its
        thread has stopped (queued or running: ``enqueue`` keeps their order)."""
        state = self.state
        mine = state.known.get(run_id)  # a run this runner just created: no read
        if state.turns.pop(run_id, None) == run_id and mine is not None:
            return  # it headed its thread's queue as it was stored: nobody is ahead of it
        if mine is None or mine.status != "queued" or mine.owner != state.owner:
            mine = await state.store.get(run_id)
        while True:
            if mine is None or mine.status != "queued":
                return
            page = await state.store.list(
                status=tuple(sorted(ACTIVE)), thread_id=mine.thread_id, limit=1
            )
            head = page.records[0] if page.records else None
            if head is None or head.run_id == run_id:
                return
            event = state.settled_events.setdefault(head.run_id, Settled())
            # A head executing here sets the event as its task ends: no polling (thousands of
            # queued runs polling starved the store's connections). One elsewhere is polled.
            here = head.run_id in state.tasks
            try:
                with contextlib.suppress(TimeoutError):
                    # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel that
                    # lands as the event is set (the runner's close then hung 10 s)
                    async with asyncio.timeout(None if here else state.poll_interval):
                        await event.wait()
            finally:
                if head.run_id not in state.tasks:
                    state.settled_events.pop(head.run_id, None)
            mine = await state.store.get(run_id)

    def wake_waiters(self, run_id: str) -> None:
        """Wake the ``await_run`` callers of a run that stopped moving here, handing them the
        record it stopped with (so they need not read it back)."""
        final = self.state.final.pop(run_id, None)
        event = self.state.settled_events.pop(run_id, None)
        if event is not None:
            event.record = final
            event.set()

    # -- one segment --------------------------------------------------------------------------

    async def _begin(self, run_id: str, *, takeover: bool) -> RunRecord | None:
        """Move the run to ``running`` under this owner (from queued, or back from suspended),
        remembering where its thread stood the first time."""
        state = self.state
        # A run this runner just created or claimed starts from that record (a stale one only
        # loses the compare-and-set below and is read again); any other is read first.
        seen = state.known.pop(run_id, None)
        guess = state.heads.pop(run_id, None)
        if seen is None or seen.status != "queued" or seen.owner != state.owner:
            seen, guess = await self.read(run_id), None
        # Leaving the queue need not wait for the disk: the segment's first durable commit
        # (a journal write, a checkpoint) carries it there, as every database here writes
        # its log in order; a power cut before that leaves the run queued under an owner
        # that is gone, and it is taken over from the start. A suspended run's resume stays
        # durable (its loss would leave it suspended with nobody to resume it).
        durable = seen.status == "suspended"
        if seen.first_seq is None and guess is not None and (self._riding or self._rides()):
            # Its first segment on a backend that carries rides: `running` is written in
            # the unit that opens the thread (the rider corrects a wrong guess there).
            latest_id, first_seq = guess[0] or "", 0 if guess[1] is None else guess[1] + 1
            begin = self._beginning(latest_id, first_seq, takeover=takeover)
            planned = begin(seen)
            if planned is not None:
                state.riders[run_id] = RunRider(
                    state,
                    seen,
                    start=begin,
                    guess=guess,
                    started=planned,
                    folding=state.folds.get(run_id),
                )
                state.latest[run_id] = latest_id
                return planned
        if seen.first_seq is None and guess is not None and state.store.reads_thread_head:
            stored = await self._begin_at_guess(run_id, seen, guess, takeover=takeover)
            if stored is not None:
                return stored
            seen = await self.read(run_id)
            durable = seen.status == "suspended"
        if seen.first_seq is None:  # its first segment: one read for both
            head, last = await state.backend.thread_head(seen.thread_id)
            latest_id, first_seq = head or "", 0 if last is None else last + 1
        else:
            latest = await state.backend.latest_checkpoint(seen.thread_id)
            latest_id, first_seq = (latest.checkpoint_id if latest else ""), seen.first_seq
        begin = self._beginning(latest_id, first_seq, takeover=takeover)
        stored = await state.store.transition(run_id, begin, known=seen, durable=durable)
        return self._began(run_id, stored, latest_id)

    async def _begin_at_guess(
        self, run_id: str, seen: RunRecord, guess: ThreadHead, *, takeover: bool
    ) -> RunRecord | None:
        """A new run's first ``running`` write, assuming its thread still stands where it
        stood at submit; the write reads the thread's head in the same unit, and a guess
        that turns out wrong (the thread moved meanwhile) is corrected before anything runs.
        ``None``: the write did not happen (the caller starts over from a fresh read)."""
        state = self.state
        latest_id, first_seq = guess[0] or "", 0 if guess[1] is None else guess[1] + 1
        begin = self._beginning(latest_id, first_seq, takeover=takeover)
        rode = await state.store.transition_reading_head(run_id, begin, known=seen, durable=False)
        if rode is None:
            return None
        stored, (head, last) = rode
        actual_id, actual_seq = head or "", 0 if last is None else last + 1
        if stored is not None and (actual_id, actual_seq) != (latest_id, first_seq):

            def correct(current: RunRecord) -> RunRecord | None:
                if current.status != "running":
                    return None
                return current.replace(base_checkpoint=actual_id, first_seq=actual_seq)

            stored = await state.store.transition(
                run_id, correct, owner=state.owner, known=stored, durable=False
            )
        return self._began(run_id, stored, actual_id)

    async def _wrote_nothing(self, record: RunRecord) -> bool:
        """Whether nothing of ``record``'s run is on its thread: the thread's last event
        (every commit of a run carries its events) was written by another run, or there is
        none. Read on a takeover only, where the record's start may be a stale guess."""
        last = await self._last_writer(record.thread_id)
        return last is None or last != record.run_id

    async def _last_writer(self, thread_id: str) -> str | None:
        """The run whose commit holds the thread's last event (``None``: no event)."""
        backend = self.state.backend
        last = await backend.last_event_seq(thread_id)
        if last is None:
            return None
        tail = await backend.read_events(thread_id, last)
        if not tail:
            return None
        return stored_run_id(backend.serializer.loads(tail[-1].payload))

    async def superseded_by(self, record: RunRecord) -> str | None:
        """The later run that went on with a suspended run's thread, or ``None``. New input
        on a suspended thread resumes it (as ``invoke`` with input does): that run took over
        what this one waited on, and resuming this one would run the thread again under the
        wrong record. Read only where a suspended run is to go on (a decision, a timer)."""
        if not record.interrupts:
            return None
        writer = await self._last_writer(record.thread_id)
        return writer if writer is not None and writer != record.run_id else None

    async def end_superseded(
        self, record: RunRecord, by: str, *, owner: str | None = None
    ) -> RunRecord | None:
        """End a run another took over (see :meth:`superseded_by`): ``cancelled``, saying
        by which run; ``None`` if it moved on meanwhile (cancelled, or finished). ``owner``:
        the runner executing it (fenced as its outcome is)."""
        state = self.state
        at = now()
        error = {
            "type": "Superseded",
            "message": f"run {by!r} went on with thread {record.thread_id!r} with new input "
            "while this run waited; what it waited on is that run's now (decide it there)",
        }

        def end(current: RunRecord) -> RunRecord | None:
            return _ended(current, "cancelled", None, error, (), None, at, _SUPERSEDABLE)

        stored = await state.store.transition(record.run_id, end, owner=owner)
        if stored is not None:
            state.notify(stored)
            state.final[record.run_id] = stored
        return stored

    async def _rebase(self, record: RunRecord) -> RunRecord:
        """Store where the thread really stands as the run's start (what a rollback goes
        back to, where its events begin), before anything of the run is written."""
        state = self.state
        head, last = await state.backend.thread_head(record.thread_id)
        actual = (head or "", 0 if last is None else last + 1)
        if (record.base_checkpoint, record.first_seq) == actual:
            return record

        def correct(current: RunRecord) -> RunRecord | None:
            if current.status != "running" or current.owner != state.owner:
                return None
            return current.replace(base_checkpoint=actual[0], first_seq=actual[1])

        fixed = await state.store.transition(
            record.run_id, correct, owner=state.owner, known=record, durable=True
        )
        if fixed is None:
            msg = f"run {record.run_id!r} was stopped or taken over before it started."
            raise LeaseLostError(msg)
        rider = state.riders.get(record.run_id)
        if rider is not None:
            rider.known, rider.changed = fixed, False
        state.notify(fixed)
        return fixed

    def _beginning(self, latest_id: str, first_seq: int, *, takeover: bool) -> _Begin:
        """The change that moves a run to ``running`` here, with its thread standing at
        ``latest_id`` / ``first_seq`` if this is its first segment."""
        return _Begin(self.state, now(), latest_id, first_seq, takeover)

    def _began(self, run_id: str, stored: RunRecord | None, latest_id: str) -> RunRecord | None:
        state = self.state
        if stored is not None:
            state.notify(stored)
            state.latest[run_id] = latest_id
            if self._riding or self._rides():  # its outcome and stop checks ride its commits
                state.riders[run_id] = RunRider(state, stored)
        return stored

    def _rides(self) -> bool:
        """Whether the run's record writes ride its checkpoint commits here: the backend
        carries rides in units of the database the run store uses."""
        state = self.state
        self._riding = state.store is state.backend.run_store() and bool(
            getattr(state.backend, "carries_rides", False)
        )
        return self._riding

    async def _failed(
        self, run_id: str, record: RunRecord, exc: Exception
    ) -> Literal["again", "queued", "end"]:
        """Store how a segment that raised ``exc`` ended: ``again``, run it again (a
        takeover) once the wait for what held it is over; ``queued``, a folded submit's
        opening stored it without the thread's lease (it leaves its slot to wait its turn);
        ``end``, it is over here."""
        state = self.state
        if isinstance(exc, _Queued):
            return "queued"
        if isinstance(exc, _Unstored):  # its submit reads what is stored and goes on
            return "end"
        if isinstance(exc, ThreadBusyError | BackendUnavailableError):
            # While it waits to try again, events may reach its thread from elsewhere (a
            # stalled runner that still holds the lease): its followers poll meanwhile.
            state.committing.discard(run_id)
            state.wake_followers(run_id)
        if isinstance(exc, ThreadBusyError):
            # The thread's previous runner (dead or stalled) still holds its lease: wait
            # for it to lapse, keeping the run.
            await asyncio.sleep(min(state.lease_ttl / 3, 1.0))
            return "again"
        if isinstance(exc, BackendUnavailableError):
            log.warning("run %s: the store is unavailable (%s); retrying", run_id, exc)
            await asyncio.sleep(min(state.lease_ttl / 3, 2.0))
            return "again"
        if isinstance(exc, _Superseded):
            log.info("run %s was superseded by run %s on its thread", run_id, exc.by)
            await self.end_superseded(record, exc.by, owner=state.owner)
        elif isinstance(exc, _Stopped):
            await self._stopped(run_id, record)
        elif isinstance(exc, _RunTimedOut):
            message = f"the run took longer than run_timeout={state.run_timeout}s"
            await self._finish(
                run_id, status="failed", error={"type": "RunTimeout", "message": message}
            )
        else:
            error = {"type": type(exc).__name__, "message": str(exc)}
            await self._finish(run_id, status="failed", error=error)
        return "end"

    def _answered(self, folding: Folding | None) -> None:
        """A folded submit's first segment returned: its opening answered the submit."""
        if folding is not None and not folding.settle(self.state):  # pragma: no cover
            log.error("run %s ended without storing its record", folding.record.run_id)
            raise _Unstored  # (every run opens its thread)

    def _unfolded(self, folding: Folding | None, exc: Exception) -> Exception:
        """What a segment that raised ``exc`` failed with: ``exc`` itself, but for a folded
        submit's first segment (see :mod:`tensorsketch.runs.folding`) an opening that stored
        the run without the thread's lease is :class:`_Queued` and one that failed before
        answering is :class:`_Unstored` (the submit reads what is stored and takes it from
        there)."""
        if folding is None or isinstance(exc, _Unstored):
            return exc
        if not folding.settle(self.state):
            log.warning(
                "run %s: its opening failed before it answered (%s: %s); submit reads "
                "what is stored and stores the run the usual way if nothing is",
                folding.record.run_id,
                type(exc).__name__,
                exc,
            )
            return _Unstored()
        # Refused the lease (LeaseLostError, a ThreadBusyError too, is a later loss).
        if type(exc) is ThreadBusyError and not folding.opened:
            return _Queued()
        return exc

    async def _invoke(self, record: RunRecord, *, takeover: bool) -> tuple[Any, set[str]]:
        """Invoke the graph for the run's next segment; return the state and the decision
        ids it was resumed with."""
        state = self.state
        graph, backend = state.graph, state.backend
        resume: dict[str, Any] | None = None
        input: Any = None
        latest_id = state.latest.pop(record.run_id, None)  # read by _begin just before
        if latest_id is None:
            latest = await backend.latest_checkpoint(record.thread_id)
            latest_id = latest.checkpoint_id if latest is not None else ""
        if latest_id == record.base_checkpoint:
            input = record.input  # nothing of this run was written yet
        elif takeover and await self._wrote_nothing(record):
            # Its record says it started elsewhere, but the thread's last event is not this
            # run's: the guess of where the thread stood was never corrected (the write that
            # corrects it failed, or its process died between the two). Start from the top.
            input = record.input
            record = await self._rebase(record)
        else:
            later = await self.superseded_by(record)
            if later is not None:
                raise _Superseded(later)
            stored_state = await graph.aget_state(record.thread_id, backend)
            info = run_info(stored_state) if stored_state is not None else None
            if info is not None and info.suspended:
                awaited = set(info.awaiting)
                resume = {k: v for k, v in record.decisions.items() if k in awaited} or None
            if record.events:
                input = segment_input(graph, state.event_input, list(record.events))
        budget = None
        if state.run_timeout is not None:
            budget = state.run_timeout - record.active_seconds
            if budget <= 0:
                raise _RunTimedOut
        # The run's agent takes steering messages from its record (AsyncRunner.steer)
        # and applies the assistant version it was submitted with.
        pinned = record.assistant.get("config") if record.assistant else None
        rider = state.riders.get(record.run_id)
        used = set(resume or ())
        if rider is not None:
            rider.outcome = functools.partial(self._end_write, record, used)
        task = state.tasks[record.run_id]  # this very task (see spawn): no current_task()
        check = _StopCheck(task, record.run_id, state.store, rider)
        # Bound for the run (its engine's tasks copy them) and unbound as it returns: set
        # here, not with a context manager each (three of those per segment added up).
        inbox = INBOX.set(RecordInbox(state.store, record.run_id, rider))
        config = CONFIG.set(pinned)
        riding = RIDER.set(rider)
        run_id = record.run_id
        try:
            # Every event goes to the check as the run emits it (and to the thread's event
            # log, for live tails and replays, as a stream's would). The run's final state
            # (run info attached) comes from the run itself: no read of the thread back.
            # The run is driven from this very frame (no coroutine of ours in between: each
            # would be resumed at every wait of the run).
            run, driving = graph._start_sinking(
                input,
                check,
                thread_id=record.thread_id,
                backend=backend,
                max_steps=state.max_steps,
                tracer=state.tracer,
                resume=resume,
                run_id=record.run_id,  # one id: the record's, in events and ctx
                deps=state.deps,
                memory=state.memory,
                labels=record.labels,
                durability=check_durability(record.durability, "the run's durability"),
                sink_types=_StopCheck.TYPES,
                # Each commit of its events wakes its followers here (if it has any).
                on_events=functools.partial(state.events_committed, run_id),
            )
            try:
                if budget is None:  # no run_timeout: no timer to arm around the run
                    await driving
                else:
                    await _bounded(driving, budget)
            except asyncio.CancelledError:
                # The check's own cancel (and nobody else's): the run stopped where the
                # request found it.
                if check.stopped and task.uncancel() == 0:
                    raise _Stopped from None
                raise
            graph_state = run.result_state()
            if state.may_fold and (self._heads_wanted or self._wants_heads()):
                # Where the thread stands now: a later folded submit's guess.
                info = graph_state.__dict__.get("__tensorsketch_run__")
                last_seq = run.seq - 1 if run.seq else None
                state.remember_head(record.thread_id, (info and info.checkpoint_id, last_seq))
        finally:
            RIDER.reset(riding)
            CONFIG.reset(config)
            INBOX.reset(inbox)
            if rider is not None:
                self._unseat(rider)
        return graph_state, used

    def _unseat(self, rider: RunRider) -> None:
        """The segment's run ended: what the rider knows becomes the runner's (the
        outcome's compare-and-set base). A start that never rode (the thread was busy, or
        the run failed before opening it) is not written: the record stays queued under
        this runner, and the next attempt reads where the thread stands again."""
        state = self.state
        state.riders.pop(rider.run_id, None)
        state.known[rider.run_id] = rider.known
        if rider.ended is not None:
            state.final[rider.run_id] = rider.ended
            self._rode_to_end[rider.run_id] = rider.ended

    def _end_write(
        self, began: RunRecord, used: set[str], graph_state: Any, current: RunRecord
    ) -> RunRecord | None:
        """``current`` changed to store how the segment ended with ``graph_state`` (what
        rides the last commit; see :meth:`_outcome`, which writes the same when it did not
        ride). Made at once, with no change function in between: a run ends once, and its
        end mostly rides. A stop asked for meanwhile changed the record, so such a write
        never rides."""
        if run_info(graph_state).suspended:
            return self._suspension(began, graph_state, used, [])(current)
        output = plain(graph_state)
        return _ended(current, "succeeded", output, None, began.events, [], now())

    async def _stopped(self, run_id: str, began: RunRecord) -> None:
        """End a run a later submit stopped; ``rollback`` first discards its checkpoints."""
        state = self.state
        current = await state.store.get(run_id)
        strategy = (current.stop_requested if current is not None else None) or "interrupt"
        if strategy == "rollback":
            # Where the run really started is the stored record's: `began` may hold the
            # guess made at submit, which the rider corrected as the thread opened.
            base = began.base_checkpoint
            if current is not None and current.base_checkpoint is not None:
                base = current.base_checkpoint
            await roll_back(state.backend, began.thread_id, base)
        by = (current.stopped_by if current is not None else None) or "?"
        await self._finish(run_id, status="cancelled", error=stopped_error(strategy, by))

    # -- how a segment ends -------------------------------------------------------------------

    async def _outcome(
        self, run_id: str, began: RunRecord, graph_state: Any, used: set[str]
    ) -> str:
        """Store how the segment ended. Returns ``"again"`` when it should run again at once
        (it suspended on ids that already have decisions), ``"stop"`` when a stop was asked
        for meanwhile (nothing stored: the caller stops the run), else ``"done"``."""
        state = self.state
        info = run_info(graph_state)
        stop_asked: list[bool] = []
        rode = self._rode_to_end.pop(run_id, None)
        if info.suspended:
            if rode is not None:
                stored: RunRecord | None = rode
                state.known.pop(run_id, None)
            else:
                suspend = self._suspension(began, graph_state, used, stop_asked)
                stored = await state.store.transition(
                    run_id, suspend, owner=state.owner, known=state.known.pop(run_id, None)
                )
            if stored is None:
                return "stop" if stop_asked else "done"
            state.notify(stored)
            state.final[run_id] = stored
            if stored.waiting_for == "timer":
                state.note_wake(info.wake_at)
            return "again" if all_decided(stored) else "done"
        if rode is not None:
            state.known.pop(run_id, None)
            state.notify(rode)
            state.final[run_id] = rode
            return "done"
        stopped = await self._finish(
            run_id,
            status="succeeded",
            output=plain(graph_state),
            delivered=began.events,
            unless_stopped=True,
        )
        return "stop" if stopped else "done"

    @staticmethod
    def _suspension(
        began: RunRecord, graph_state: Any, used: set[str], stop_asked: list[bool]
    ) -> Change:
        """The change that suspends a running run on what ``graph_state`` waits for (none
        when a stop was asked for meanwhile: ``stop_asked`` then says so)."""
        info = run_info(graph_state)
        at = now()
        interrupts = tuple(p.to_dict() for p in info.interrupts)
        waiting = waiting_for(interrupts)

        def suspend(current: RunRecord) -> RunRecord | None:
            if current.status != "running":
                return None
            if current.stop_requested:
                stop_asked.append(True)
                return None
            remaining = (
                tuple(e for e in current.events if e not in began.events) if current.events else ()
            )
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
                suspended_at=at,
                updated_at=at,
                active_seconds=active_seconds(current, at),
                segment_started_at=None,
                output=plain(graph_state),
            )

        return suspend

    async def _finish(
        self,
        run_id: str,
        *,
        status: str,
        output: Any = None,
        error: dict[str, str] | None = None,
        delivered: tuple[dict[str, Any], ...] = (),
        unless_stopped: bool = False,
    ) -> bool:
        """Store the run's end; with ``unless_stopped``, store nothing when a stop was asked
        for and return ``True`` (the caller stops the run instead)."""
        state = self.state
        stop_asked: list[bool] = []
        end = self._ending(
            status=status,
            output=output,
            error=error,
            delivered=delivered,
            stop_asked=stop_asked if unless_stopped else None,
        )
        stored = await state.store.transition(
            run_id, end, owner=state.owner, known=state.known.pop(run_id, None)
        )
        if stored is not None:
            state.notify(stored)
            state.final[run_id] = stored
        return bool(stop_asked)

    @staticmethod
    def _ending(
        *,
        status: str,
        output: Any = None,
        error: dict[str, str] | None = None,
        delivered: tuple[dict[str, Any], ...] = (),
        stop_asked: list[bool] | None,
    ) -> Change:
        """The change that ends a running run with ``status``; with ``stop_asked``, none when
        a stop was asked for (noted there: the caller stops the run instead)."""
        at = now()

        def end(current: RunRecord) -> RunRecord | None:
            return _ended(current, status, output, error, delivered, stop_asked, at)

        return end

    async def _hand_back(self, run_id: str) -> None:
        """Shutting down mid-run: clear the owner so another runner resumes it at once."""

        def release(current: RunRecord) -> RunRecord | None:
            if current.status not in ACTIVE:
                return None
            return current.replace(owner=None, lease_expires_at=None)

        with contextlib.suppress(Exception):
            await asyncio.shield(
                self.state.store.transition(run_id, release, owner=self.state.owner)
            )


def _ended(
    current: RunRecord,
    status: str,
    output: Any,
    error: dict[str, str] | None,
    delivered: tuple[dict[str, Any], ...],
    stop_asked: list[bool] | None,
    at: float,
    ends: tuple[str, ...] = ("running", "queued"),
) -> RunRecord | None:
    """``current`` ended with ``status`` at ``at`` (see :meth:`Execution._ending`), if it is
    in one of the statuses that ``ends`` (a run's end: running, or queued — one that failed
    before its ``running`` write rode its first unit)."""
    if current.status not in ends:
        return None  # cancelled meanwhile: that outcome stands
    if stop_asked is not None and current.stop_requested:
        stop_asked.append(True)
        return None
    stopped = status == "succeeded" and current.stop_requested and current.stopped_by
    return current.replace(
        status="cancelled" if stopped else status,
        output=output if output is not None else current.output,
        error=stopped_error(current.stop_requested or "", current.stopped_by or "")
        if stopped
        else error,
        finished_at=at,
        updated_at=at,
        active_seconds=active_seconds(current, at),
        segment_started_at=None,
        waiting_for=None,
        wake_at=None,
        interrupts=(),
        events=tuple(e for e in current.events if e not in delivered) if current.events else (),
        owner=None,
        lease_expires_at=None,
    )


async def _bounded(driving: Awaitable[None], budget: float) -> None:
    """Drive a run within what is left of ``run_timeout``: its end comes out as
    :class:`_RunTimedOut` (a cancel that is not the timeout's passes through)."""
    try:
        async with asyncio.timeout(budget) as deadline:
            await driving
    except TimeoutError as exc:
        if deadline.expired():
            raise _RunTimedOut from exc
        raise


class _Begin:
    """A run's move to ``running`` here (see :meth:`Execution._beginning`): a change as an
    object of one allocation, where a closure over its five values made six (the function
    and its cells), each one more for the collector to count and walk."""

    __slots__ = ("at", "first_seq", "latest_id", "state", "takeover")

    def __init__(
        self, state: RunnerState, at: float, latest_id: str, first_seq: int, takeover: bool
    ) -> None:
        self.state = state
        self.at = at
        self.latest_id = latest_id
        self.first_seq = first_seq
        self.takeover = takeover

    def __call__(self, current: RunRecord) -> RunRecord | None:
        state, at = self.state, self.at
        if current.status == "queued" or (self.takeover and current.status == "running"):
            if current.owner != state.owner:
                return None
        elif current.status == "suspended":
            if not (all_decided(current) or due(current, at)):
                return None
        else:
            return None
        return current.replace(
            status="running",
            owner=state.owner,
            lease_expires_at=at + state.lease_ttl,
            started_at=current.started_at or at,
            # A takeover (or a retry here) counts the interrupted segment up to now.
            active_seconds=active_seconds(current, at)
            if current.status == "running"
            else (current.active_seconds),
            segment_started_at=at,
            updated_at=at,  # what a write that rides keeps (a store's write stamps its own)
            attempts=current.attempts + 1,
            base_checkpoint=(
                current.base_checkpoint if current.base_checkpoint is not None else self.latest_id
            ),
            first_seq=current.first_seq if current.first_seq is not None else self.first_seq,
        )


class _StopCheck:
    """The sink of a segment's events: looks for a stop request at every superstep barrier
    (``values``) and, asked, stops the run as the next superstep starts (its first
    ``node_start``) — after the barrier's checkpoint is stored, before anything of the next
    superstep is. It runs inside the run, so stopping is cancelling the segment's task right
    there (:meth:`Execution._invoke` turns that cancel into :class:`_Stopped`). With a rider,
    every commit of the run read the record's version: the record is read again only when
    somebody else wrote it (checked at the barrier and as the next superstep starts);
    without one it is read at every barrier."""

    __slots__ = ("barrier", "rider", "run_id", "stopped", "stopping", "store", "task")

    #: The events it acts on (the run hands it no other): barriers and superstep starts.
    TYPES: ClassVar[frozenset[str]] = frozenset({"values", "node_start"})

    def __init__(
        self, task: asyncio.Task[Any], run_id: str, store: RunStore, rider: RunRider | None
    ) -> None:
        self.task = task
        self.run_id = run_id
        self.store = store
        self.rider = rider
        #: Past the first barrier (nothing is checked before it).
        self.barrier = False
        #: A stop was asked for; it takes effect at the next ``node_start``.
        self.stopping = False
        #: The check cancelled the segment's task.
        self.stopped = False

    async def __call__(self, event: Event) -> None:
        if event.namespace:  # a subgraph's: its parent node's own events carry the check
            return
        kind = event.type
        if not self.barrier:
            if kind != "values":
                return
            self.barrier = True
        if not self.stopping:
            rider = self.rider
            if rider is not None:
                if kind == "values" or kind == "node_start":
                    # Nobody else wrote the record (most runs): what the rider knows, as is.
                    current = await rider.current() if rider.changed else rider.known
                    self.stopping = current is not None and current.stop_requested is not None
            elif kind == "values":
                current = await self.store.get(self.run_id)
                self.stopping = current is not None and current.stop_requested is not None
                return
        if self.stopping and kind == "node_start":
            if not self.stopped:
                self.stopped = True
                self.task.cancel()
            # Taken here, before the node runs: in the segment's task itself, or in a task of
            # a parallel superstep (each of them stops here), which the cancelled barrier
            # cancels in turn.
            await asyncio.sleep(0)
