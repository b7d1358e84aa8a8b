"""``Submission``: storing new runs and reading them back — their records, a page of them,
the wait for one to stop moving, and its events.

Reading a run is also when an approval that waited past ``approval_timeout`` is rejected:
no timer runs for it, the next read does it (and resumes the run).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

from tensorsketch.durable.ids import random_hex
from tensorsketch.durable.modes import Durability, check_durability
from tensorsketch.errors import QueueFullError, RunConflictError, RunNotFoundError
from tensorsketch.events import Event
from tensorsketch.runs.assistants import Assistants
from tensorsketch.runs.execution import Execution
from tensorsketch.runs.folding import Folding
from tensorsketch.runs.following import Follower
from tensorsketch.runs.multitask import MultitaskStrategy, check_strategy, stopped_error
from tensorsketch.runs.records import now, plain
from tensorsketch.runs.state import RunnerState, Settled
from tensorsketch.runtime.backends.runs import ACTIVE, InTurn, RunPage, RunRecord, check_labels

__all__ = ["Submission"]


class Submission:
    """The runner's ``enqueue``, ``get``, ``list``, ``await_run`` and ``events``.

    :param start: starts the runner's background loops (``AsyncRunner.start``).
    """

    def __init__(
        self, state: RunnerState, execution: Execution, start: Callable[[], Awaitable[None]]
    ) -> None:
        self.state = state
        self.execution = execution
        self.start = start
        #: The backend said it folds submits (see :meth:`_asks_backend`).
        self._backend_folds = False

    async def enqueue(
        self,
        input: Any,
        *,
        thread_id: str | None,
        idempotency_key: str | None,
        labels: Mapping[str, str] | None,
        multitask_strategy: str | None = None,
        webhook: str | None = None,
        assistant: str | None = None,
        durability: str = "sync",
    ) -> tuple[RunRecord, bool]:
        state = self.state
        mode = check_durability(durability, "submit(durability=...)")
        pinned: dict[str, Any] | None = None
        if assistant is not None:
            chosen = await Assistants(state.store, state.graph).get(assistant)
            pinned = chosen.pin()
            if multitask_strategy is None:
                multitask_strategy = chosen.config.get("multitask_strategy")
        if webhook is not None and (
            not isinstance(webhook, str)
            or not webhook.startswith(("http://", "https://"))
            or len(webhook) > 2048
        ):
            msg = (
                f"`webhook` must be an http(s) URL of at most 2048 characters, got {webhook!r:.80}."
            )
            raise ValueError(msg)
        strategy = check_strategy(
            state.multitask_strategy if multitask_strategy is None else multitask_strategy
        )
        if state.draining:
            raise QueueFullError(
                "this runner is draining and takes no new runs; retry on another instance.",
                retry_after=5.0,
            )
        if state.max_queued and state.waiting_new >= state.max_queued:
            msg = (
                f"{state.waiting_new} runs already wait for a slot (max_queued="
                f"{state.max_queued}); retry later."
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
        # Refused now, not when it runs.
        state.graph.check_run_input(
            input, thread_id=thread_id, where="submit()", example="submit({'query': ...})"
        )
        await self.start()
        if thread_id is None:  # a new thread has nothing in flight
            return await self._create(
                input, None, idempotency_key, labels, strategy, webhook, pinned, mode
            )
        # One submit at a time per thread (see RunnerState.thread_gates). The entry goes as
        # its last submit leaves — not when it is merely free: a submit handed the turn
        # that has not woken yet still holds it, and one coming in then waits behind it.
        gates = state.thread_gates
        if thread_id in gates:
            await self._wait_gate(thread_id)
        else:
            gates[thread_id] = None  # taken, nobody waits: no lock, no wait
        try:
            return await self._double_text(
                input, thread_id, idempotency_key, labels, strategy, webhook, pinned, mode
            )
        finally:
            self._pass_gate(thread_id)

    async def _wait_gate(self, thread_id: str) -> None:
        """Wait for the submits ahead on ``thread_id`` (in arrival order) to leave."""
        gates = self.state.thread_gates
        waiters = gates[thread_id]
        if waiters is None:
            waiters = gates[thread_id] = deque()
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(gate)
        try:
            await gate
        except asyncio.CancelledError:
            if gate.cancelled():  # still waiting: just leave the line
                if gate in waiters:
                    waiters.remove(gate)
            else:  # handed the turn, then cancelled: hand it on
                self._pass_gate(thread_id)
            raise

    def _pass_gate(self, thread_id: str) -> None:
        """The submit holding ``thread_id``'s turn leaves: wake the next one still waiting,
        or drop the entry."""
        gates = self.state.thread_gates
        waiters = gates[thread_id]
        while waiters:
            gate = waiters.popleft()
            if not gate.done():
                gate.set_result(None)
                return
        del gates[thread_id]

    async def _double_text(
        self,
        input: Any,
        thread_id: str,
        idempotency_key: str | None,
        labels: Mapping[str, str] | None,
        strategy: MultitaskStrategy,
        webhook: str | None,
        pinned: dict[str, Any] | None,
        durability: Durability,
    ) -> tuple[RunRecord, bool]:
        """Submit on a thread that may have runs in flight, as ``strategy`` says."""
        state = self.state
        if strategy == "enqueue":
            # Nothing to decide from what is in flight: the run queues behind it, and the
            # store's idempotency key returns a run already submitted with the same key.
            return await self._create(
                input, thread_id, idempotency_key, labels, strategy, webhook, pinned, durability
            )
        page = await state.store.list(status=tuple(sorted(ACTIVE)), thread_id=thread_id, limit=100)
        in_flight = page.records
        for record in in_flight:
            if idempotency_key is not None and record.idempotency_key == idempotency_key:
                return record, False  # the same submit again: the run it started
        if in_flight and strategy == "reject":
            runs = ", ".join(r.run_id for r in in_flight[:3])
            msg = (
                f"thread {thread_id!r} already has a run in flight ({runs}); this submit's "
                "multitask_strategy is 'reject'. Wait for it (await_run), cancel it, or submit "
                "with multitask_strategy 'enqueue', 'interrupt' or 'rollback'."
            )
            raise RunConflictError(msg)
        stored, created = await self._create(
            input,
            thread_id,
            idempotency_key,
            labels,
            strategy,
            webhook,
            pinned,
            durability,
            fold=not in_flight,  # a run in flight would hold the new one back
        )
        if created and strategy in ("interrupt", "rollback"):
            for record in in_flight:
                await self._stop(record.run_id, strategy, by=stored.run_id)
        return stored, created

    async def _stop(self, run_id: str, strategy: str, *, by: str) -> None:
        """Ask a run in flight to stop for ``by``: a queued one is cancelled now; a running
        one is stopped by its runner at its next superstep barrier."""
        state = self.state
        at = now()

        def ask(current: RunRecord) -> RunRecord | None:
            if current.status == "queued":
                return current.replace(
                    status="cancelled",
                    finished_at=at,
                    owner=None,
                    lease_expires_at=None,
                    stop_requested=strategy,
                    stopped_by=by,
                    error=stopped_error(strategy, by),
                )
            if current.status != "running" or current.stop_requested:
                return None
            return current.replace(stop_requested=strategy, stopped_by=by)

        stored = await state.store.transition(run_id, ask)
        if stored is None:
            return
        state.notify(stored)
        if stored.status == "cancelled":
            task = state.tasks.get(run_id)
            if task is not None and not task.done():
                state.stop_reasons[run_id] = "cancelled"
                task.cancel()
            self.execution.wake_waiters(run_id)

    async def _create(
        self,
        input: Any,
        thread_id: str | None,
        idempotency_key: str | None,
        labels: Mapping[str, str] | None,
        strategy: MultitaskStrategy,
        webhook: str | None,
        pinned: dict[str, Any] | None = None,
        durability: Durability = "sync",
        *,
        fold: bool = True,
    ) -> tuple[RunRecord, bool]:
        state = self.state
        at = now()
        # Stamped as RunStore.create stamps a new record (which keeps its created_at): what
        # a folded submit inserts as it is.
        record = RunRecord.new(
            run_id=f"run_{random_hex()}",
            thread_id=thread_id or f"thread_{random_hex()}",
            graph=state.graph.name,
            input=plain(input),
            idempotency_key=idempotency_key,
            labels=check_labels(labels),
            owner=state.owner,
            lease_expires_at=at + state.lease_ttl,
            multitask_strategy=strategy,
            webhook=webhook,
            assistant=pinned,
            durability=durability,
            created_at=at,
            updated_at=at,
            version=1,
        )
        if fold and state.may_fold and self._folds(record, thread_id):
            return await self._fold(record, new_thread=thread_id is None)
        return await self._store(record, new_thread=thread_id is None)

    def _folds(self, record: RunRecord, thread_id: str | None) -> bool:
        """Whether ``record``'s insert may ride its run's opening (see
        :mod:`tensorsketch.runs.folding`): the backend can, the run can start at once (a
        free slot, its thread idle as far as this runner knows), and it has no idempotency
        key nor labels (those keep their own insert)."""
        state = self.state
        if not state.fold_submits or record.idempotency_key is not None or record.labels:
            return False
        if not (self._backend_folds or self._asks_backend()):
            return False
        if state.running + state.waiting_new >= state.concurrency:
            return False
        return thread_id is None or thread_id not in state.thread_runs

    def _asks_backend(self) -> bool:
        """Whether the backend folds submits into the run store this runner uses: asked
        until it does (it does once its run tables are known to exist), not per submit."""
        backend = self.state.backend
        self._backend_folds = bool(getattr(backend, "folds_submits", False)) and (
            self.state.store is backend.run_store()
        )
        return self._backend_folds

    async def _fold(self, record: RunRecord, *, new_thread: bool) -> tuple[RunRecord, bool]:
        """Start the run with its insert riding its opening; return once that committed."""
        state = self.state
        run_id = record.run_id
        folding = Folding(record)
        state.folds[run_id] = folding
        state.known[run_id] = record
        state.turns[run_id] = run_id  # it heads its queue if the opening takes the lease
        # Where the run begins, guessed: where its last run here left the thread, else a new
        # thread. The opening reads the truth; the rider corrects a wrong guess.
        head = None if new_thread else state.thread_heads.pop(record.thread_id, None)
        state.heads[run_id] = (None, None) if head is None else head
        self.execution.spawn(run_id, new=True)
        if run_id not in state.tasks:  # closed meanwhile: no task to fold into
            for held in (state.folds, state.known, state.turns, state.heads):
                held.pop(run_id, None)
            return await self._store(record, new_thread=new_thread)
        state.track(run_id, record.thread_id)
        stored = await folding.answered
        if stored is not None:
            return stored, True
        # The task ended before its opening answered: whatever it stored is there now (a
        # read goes after the opening's unit, never beside it).
        found = await state.store.get(run_id)
        if found is None:
            return await self._store(record, new_thread=new_thread)
        if found.status in ACTIVE and found.owner == state.owner:
            self.execution.spawn(run_id, takeover=True)  # it runs as stored
            if run_id in state.tasks:
                state.track(run_id, found.thread_id)
        return found, True

    async def _store(self, record: RunRecord, *, new_thread: bool) -> tuple[RunRecord, bool]:
        """Insert a new run's record (the usual way) and start its task."""
        state = self.state
        if new_thread:  # a new thread: the run heads its queue, on an empty thread
            stored, created = await state.store.create(record)
            turn = InTurn(stored, created, stored.run_id, (None, None))
        else:  # the insert also reads who heads the thread's queue (one round trip)
            turn = await state.store.create_in_turn(record)
            stored, created = turn.record, turn.created
        if created:
            state.notify(stored)
            state.known[stored.run_id] = stored  # the first segment starts from it: one read fewer
            state.turns[stored.run_id] = turn.queue_head
            if turn.thread_head is not None:
                state.heads[stored.run_id] = turn.thread_head
            self.execution.spawn(stored.run_id, new=True)
            if state.may_fold and stored.run_id in state.tasks:
                state.track(stored.run_id, stored.thread_id)
        return stored, created

    async def get(self, run_id: str) -> RunRecord:
        record = await self.state.store.get(run_id)
        if record is None:
            msg = f"no run {run_id!r} in this store; take ids from submit() or list()."
            raise RunNotFoundError(msg)
        return await self._expire_approval(record)

    async def list(
        self,
        *,
        status: str | Sequence[str] | None,
        thread_id: str | None,
        labels: Mapping[str, str] | None,
        limit: int,
        cursor: str | None,
    ) -> RunPage:
        return await self.state.store.list(
            status=status, thread_id=thread_id, labels=labels, limit=limit, cursor=cursor
        )

    async def await_run(self, run_id: str, timeout: float | None) -> RunRecord:
        if timeout is None:  # no timeout to arm (what most callers pass)
            return await self._settled(run_id)
        async with asyncio.timeout(timeout):
            return await self._settled(run_id)

    async def _settled(self, run_id: str) -> RunRecord:
        """The record once the run finishes or suspends (see ``AsyncRunner.await_run``)."""
        state = self.state
        while True:
            # A run executing here is not settled: wait for its task to say so (with
            # the record it stopped with), neither reading the record nor polling.
            here = run_id in state.tasks
            if not here:
                record = await self.get(run_id)
                if state.settled(record):
                    return record
            event = state.settled_events.setdefault(run_id, Settled())
            try:
                if here:
                    await event.wait()
                else:
                    with contextlib.suppress(TimeoutError):
                        # asyncio.timeout, not wait_for (see Loops._timers_forever)
                        async with asyncio.timeout(state.poll_interval):
                            await event.wait()
            finally:
                if run_id not in state.tasks:
                    state.settled_events.pop(run_id, None)
            final = event.record if event.is_set() else None
            if final is not None and state.settled_record(final):
                return await self._expire_approval(final)

    async def events(
        self, run_id: str, *, since: int | None, follow: bool, record: RunRecord | None = None
    ) -> AsyncIterator[Event]:
        state = self.state
        if record is None or record.run_id != run_id:
            record = await self.get(run_id)
        start = since if since is not None else (record.first_seq or 0)

        follower = Follower(state, run_id)
        if follow:
            follower.arm()
        async for event in state.graph.replay(
            record.thread_id,
            state.backend,
            since=start,
            follow=follow,
            until=follower.settled,
            wait=follower.wait,
            quiet=follower.quiet,
        ):
            yield event

    async def _expire_approval(self, record: RunRecord) -> RunRecord:
        state = self.state
        timeout = state.approval_timeout
        if (
            timeout is None
            or record.status != "suspended"
            or record.waiting_for != "approval"
            or (record.suspended_at or 0.0) + timeout > now()
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

        stored = await state.store.transition(record.run_id, expire)
        if stored is None:
            return record
        state.notify(stored)
        await self.start()
        self.execution.spawn(stored.run_id)
        return stored
