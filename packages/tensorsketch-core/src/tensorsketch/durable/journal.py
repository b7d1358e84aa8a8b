"""The durable side of one run: open the thread, checkpoint each barrier, journal effects.

The journal knows no graph: the engine hands it plain plans (``(node, payload)`` pairs), a
:class:`Position` per barrier and a :class:`StateCodec` that turns a checkpoint's stored
values back into state values; it hands back a :class:`Restored` to continue from.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Protocol

from tensorsketch.durable.blobs import hydrate
from tensorsketch.durable.checkpoint import Checkpoint
from tensorsketch.durable.event_rows import encode_events
from tensorsketch.durable.guard import _StoreGuard, store_guard
from tensorsketch.durable.ladder import LadderWriter, PlanEntry, Position, rebuild
from tensorsketch.durable.lease import Lease
from tensorsketch.durable.lineage import ForkResolver
from tensorsketch.durable.modes import Durability
from tensorsketch.effect_calls import input_digest
from tensorsketch.effect_keys import IDEMPOTENCY_PREFIX, intent_key, writes_key
from tensorsketch.errors import BackendUnavailableError, CheckpointDecodeError, LeaseLostError
from tensorsketch.events import Event
from tensorsketch.joins import JoinState
from tensorsketch.runtime.backends.base import (
    Backend,
    StoredCheckpoint,
    StoredEvent,
    ThreadOpening,
    lease_lost,
)
from tensorsketch.runtime.backends.rides import CommitRider, RecordRide, current_rider
from tensorsketch.serializers import UnstorableValueError, refused_field, shared_encoding
from tensorsketch.suspension import PendingInterrupt

__all__ = ["Opened", "Position", "Restored", "RunJournal", "StateCodec", "TaskWriteLog"]


class StateCodec(Protocol):
    """What the journal needs to know about the state it stores (the engine provides it)."""

    @property
    def schema_id(self) -> str | None:
        """The state schema's fingerprint (``None``: values are always validated on read)."""
        ...

    def values_of(self, checkpoint: Checkpoint) -> dict[str, Any]:
        """``checkpoint``'s stored values as the state's field values (validated, migrated)."""
        ...


@dataclass(slots=True)
class Restored:
    """What a run continuing from a checkpoint starts with (the engine applies it)."""

    values: dict[str, Any]
    step: int
    seq: int
    checkpoint_id: str
    #: The checkpoint whose planned superstep comes next (finished tasks are keyed by it).
    plan_id: str
    #: What a suspended checkpoint waits on.
    interrupts: list[PendingInterrupt]
    plan: list[tuple[str, dict[str, Any] | None]]
    #: The part-way joins (see :class:`tensorsketch.joins.JoinState`).
    joins: tuple[JoinState, ...] = ()
    #: A failed superstep's error (``record_failure``), when the checkpoint records one.
    error: dict[str, Any] | None = None


#: How far past the stored events a run resuming a thread left mid-run starts its seqs: more
#: than one superstep hands out before its commit (the stream's backpressure paces them).
LOST_EVENTS_GAP: Final = 1 << 20


def _next_seq(restored: Restored, last_stored: int | None) -> int:
    """The first seq of a run continuing from ``restored``: after the thread's stored events,
    and, for a thread left mid-run (a process that died, a run cancelled between barriers),
    past the gap. The events that run handed to live consumers after its last commit were
    never stored, so which seqs they took is unknown: starting past any it could have taken
    keeps seq increasing for whoever saw them (a gap, never a number used twice)."""
    seq = restored.seq if last_stored is None else max(restored.seq, last_stored + 1)
    if restored.plan and not restored.interrupts and restored.error is None:
        seq += LOST_EVENTS_GAP
    return seq


@dataclass(frozen=True, slots=True)
class Opened:
    """What opening a thread found: a checkpoint to continue from, the id of the input
    checkpoint just saved for a new thread, or neither (a new thread, input not saved)."""

    restored: Restored | None = None
    created: str | None = None


class _Fenced(_StoreGuard):
    """:meth:`RunJournal._fenced`: :func:`store_guard`, and a refused fence marks the lease
    lost (a plain class: no async generator per write)."""

    __slots__ = ("lease",)

    def __init__(self, lease: Lease, backend: Backend, what: str) -> None:
        super().__init__(backend, what)
        self.lease = lease

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, LeaseLostError):
            self.lease.mark_lost()
            return
        await super().__aexit__(exc_type, exc, tb)


class RunJournal:
    """The durable side of one run: lease, restore, checkpoints, effects and events.

    A run reaches its store once to open the thread (:meth:`open`: lease, the reads a
    resume needs and, for a new thread, the input checkpoint) and once per barrier
    (:meth:`checkpoint`: the superstep's events and checkpoint in one unit; the last one also
    gives the lease back).

    Effects: an effect that calls out writes its intent first and its result after; one
    with no outside effect (a model call) writes only its result, with the run's next
    write. On a thread this run created, the journal holds only what the run wrote itself,
    so lookups are answered from memory: the intent's write is the effect's one round trip
    before it starts, and it proves the store is there.
    """

    def __init__(self, backend: Backend, thread_id: str, codec: StateCodec) -> None:
        self.backend = backend
        self.thread_id = thread_id
        self.codec = codec
        self.lease = Lease(backend, thread_id)
        #: The run's events not stored yet: the engine appends each as it emits it (no call
        #: of ours per event); the next commit stores them.
        self.events: list[Event] = []
        self._fences = bool(getattr(backend, "fences_writes", False))
        self.writer = LadderWriter(
            thread_id,
            backend.serializer,
            codec.schema_id,
            backend.blob_threshold if getattr(backend, "stores_blobs", False) else None,
        )
        #: A fork's answer for a side effect its own journal lacks (durable.lineage).
        self.forks = ForkResolver(self)
        #: The run created the thread: nobody else has written to its journal.
        self.fresh = False
        #: Entries this run wrote (or will write with its next write), decoded.
        self._known: dict[str, Any] = {}
        #: Encoded results waiting for the run's next write (``record_later``).
        self._later: list[tuple[str, bytes]] = []
        #: When checkpoints commit (:mod:`tensorsketch.durable.modes`); the engine sets it.
        self.durability: Durability = "sync"
        #: ``"async"``: the last barrier's checkpoint, committing while the run goes on.
        self._behind: asyncio.Future[None] | None = None
        #: The checkpoint this run must find at the thread's head when it takes the lease
        #: (``None``: any). A fork's first run names the fork point it wrote: if another
        #: runner moved the fork on while this one stalled in between, it must not run again.
        self.expect_head: str | None = None
        #: Every key this run wrote or found in the journal, and whether it resumed a
        #: superstep past tasks that had finished (whose keys it never sees): on a store
        #: that cannot list its journal, what a suspended checkpoint lists (lineage).
        self.seen: set[str] = set()
        self.skipped_finished = False
        #: The run record's rider (a runner's run, on its own thread, on a backend that
        #: carries rides): record writes travel in this journal's units.
        rider = current_rider()
        carries = rider is not None and rider.thread_id == thread_id
        self.rider: CommitRider | None = (
            rider if carries and bool(getattr(backend, "carries_rides", False)) else None
        )
        #: Called after each unit that stored events of this run, with whether it was the
        #: run's last (the one that gives the lease back). A runner sets it: the run's
        #: followers in its process read right after the commit instead of polling.
        self.on_events: Callable[[bool], None] | None = None

    @property
    def owner(self) -> str:
        """This run's lease owner id."""
        return self.lease.owner

    @property
    def ttl(self) -> float:
        """Lease length in seconds: the backend's ``lease_ttl`` (tests shorten it)."""
        return self.lease.ttl

    # -- lease ------------------------------------------------------------------------------

    async def _commit(
        self,
        checkpoint: StoredCheckpoint | None,
        events: list[StoredEvent],
        *,
        durable: bool = True,
        release_owner: str | None = None,
        ending: Callable[[], Any] | None = None,
        riding: bool = True,
    ) -> None:
        """``commit_step``, fenced by this run's lease where the backend can fence; the
        rider's ride travels in it (``ending``: the last commit's, see :meth:`checkpoint`)."""
        rider = self.rider if riding else None
        ride = None
        if rider is not None:
            ride = rider.ride("final" if release_owner is not None else "commit", ending)
        if ride is not None:
            await self.backend.commit_step(
                self.thread_id,
                checkpoint,
                events,
                durable=durable,
                release_owner=release_owner,
                fence=self.owner if self._fences else None,
                ride=ride,  # type: ignore[call-arg]
            )
            if events and self.on_events is not None:
                self.on_events(release_owner is not None)
            if rider is not None and ride.result is not None:
                await rider.rode(ride, ride.result)
            return
        if self._fences:
            await self.backend.commit_step(
                self.thread_id,
                checkpoint,
                events,
                durable=durable,
                release_owner=release_owner,
                fence=self.owner,
            )
        else:  # a backend written before fencing: its commit_step takes no `fence`
            await self.backend.commit_step(
                self.thread_id, checkpoint, events, durable=durable, release_owner=release_owner
            )
        if events and self.on_events is not None:
            self.on_events(release_owner is not None)

    def ensure_lease(self) -> None:
        """Raise :class:`LeaseLostError` before an effect starts if the lease is gone."""
        self.lease.ensure()

    async def acquire(self) -> None:
        """Take the thread's lease (or raise :class:`ThreadBusyError`) and keep it renewed."""
        await self.lease.acquire()

    async def release(self) -> None:
        """Stop renewing the lease and give it back (if the last checkpoint did not)."""
        await self.lease.release()

    async def finish(self, *, store_down: bool = False) -> None:
        """End of a run, however it ended: store the events left, then release.

        ``store_down`` (the run failed with ``BackendUnavailableError``) skips both: each
        would wait out the store's timeout again before the caller hears of the outage, and
        the resume re-runs the failed superstep anyway (the lease runs out by itself).
        """
        if store_down:
            if self._behind is not None:  # it waits on the same dead store: stop it
                self._behind.cancel()
                self._behind = None
            await self.lease.stop_heartbeat()
            self.lease.held = False
            return
        try:
            # A run that failed between barriers: what committed behind it still lands (its
            # own failure, if any, is not the one the caller is hearing about).
            with contextlib.suppress(Exception):
                await self.settle()
            if self._later and not self.lease.lost:
                await self._write([], "recording effects")
            await self.flush_events()
        finally:
            await self.release()

    # -- restore ----------------------------------------------------------------------------

    async def open(self, fresh: tuple[Position, list[PlanEntry]] | None = None) -> Opened:
        """Take the lease and read what the thread's latest checkpoint restores.

        ``fresh`` is the run's input position (defaults and input applied) and the first
        superstep's plan: if the thread turns out to be new, they are saved as its input
        checkpoint in the same round trip (:attr:`Opened.created`). The engine applies what
        comes back.
        """
        initial, ladder = None, None
        if fresh is not None:
            at, plan = fresh
            try:
                initial, ladder = self.writer.encode(at, None, plan, source="input", parent_id=None)
            except TypeError as exc:  # a value the serializer refuses: say which field
                found = refused_field(self.backend.serializer, at.values)
                if found is None:
                    raise
                msg = (
                    f"state field {found[0]!r} (from the run's input) cannot be "
                    f"checkpointed: {found[1]}"
                )
                raise UnstorableValueError(msg) from exc
        # An input holding a file stored by reference is saved only once the thread is known
        # to be new: handed to the open, its data would go to the store on every resume too.
        deferred = initial if initial is not None and initial.blobs else None
        ride = None if self.rider is None else self.rider.ride("open")
        try:
            async with store_guard(self.backend, "opening the thread"):
                opening = await self._open_thread(None if deferred else initial, ride)
        except BackendUnavailableError:
            raise  # the store is gone: giving the lease back would only wait on it
        except asyncio.CancelledError:
            # Cancelled mid-open (a sibling task failed): a store whose call runs on a thread
            # (SQLite) may still have granted the lease. Give it back, shielded from a second
            # cancellation, or the resume would see ThreadBusyError for a whole TTL.
            with contextlib.suppress(Exception):
                await asyncio.shield(self.backend.release_lease(self.thread_id, self.owner))
            raise
        except Exception:
            # The store may have taken the lease before the failure (a row it could not
            # convert): give it back, or every retry would see ThreadBusyError for a whole TTL.
            with contextlib.suppress(Exception):
                await self.backend.release_lease(self.thread_id, self.owner)
            raise
        if ride is not None and opening.acquired:  # refused: nothing of the ride was written
            await self._rode_open(ride, opening)
        if not opening.acquired:
            raise self.lease.busy_error()
        self.lease.hold()
        if deferred is not None and not opening.checkpoints:
            async with self._fenced("saving the input checkpoint"):
                await self._commit(deferred, [], durable=False, riding=False)
            opening = ThreadOpening(True, [], opening.last_event_seq, created=True)
        if opening.created:
            assert initial is not None
            self.fresh = True
            assert ladder is not None
            self.writer.adopt(ladder, initial)
            return Opened(created=initial.checkpoint_id)
        rows = opening.checkpoints
        rebuilt = rebuild(self.backend, rows, None, ladder=True)
        if rebuilt.incomplete:  # a store that lost a base hint: read the whole thread
            async with store_guard(self.backend, "opening the thread"):
                rows = await self.backend.list_checkpoints(self.thread_id)
            rebuilt = rebuild(self.backend, rows, None, ladder=True).complete()
        latest = rebuilt.checkpoint
        if self.expect_head is not None and (latest is None or latest.id != self.expect_head):
            await self._moved_on(latest.id if latest is not None else None)
        if latest is None:
            return Opened()
        async with store_guard(self.backend, "opening the thread"):
            read = await hydrate(self.backend, latest, rows)
        restored = self.restore(latest)
        self.writer.ladder = rebuilt.ladder
        self.writer.known_blobs.update(read)
        restored.seq = _next_seq(restored, opening.last_event_seq)
        return Opened(restored=restored)

    async def _moved_on(self, head: str | None) -> None:
        """Give the lease back and refuse: the thread's head is not :attr:`expect_head`."""
        await self.release()
        msg = (
            f"thread {self.thread_id!r} was moved on by another runner (its head is "
            f"{head!r}, not {self.expect_head!r}, the checkpoint this run was to start from): "
            "this runner stalled past its lease and the thread was taken over, so it runs "
            "nothing. Read the thread's state, or invoke it again to continue from its head."
        )
        raise LeaseLostError(msg)

    async def _open_thread(
        self, initial: StoredCheckpoint | None, ride: RecordRide | None
    ) -> ThreadOpening:
        if ride is None:
            return await self.backend.open_thread(self.thread_id, self.owner, self.ttl, initial)
        return await self.backend.open_thread(
            self.thread_id,
            self.owner,
            self.ttl,
            initial,
            ride=ride,  # type: ignore[call-arg]
        )

    async def _rode_open(self, ride: RecordRide, opening: ThreadOpening) -> None:
        """Hand the opening's ride to the rider, with where the thread stood before; a
        rider that refuses to go on gets the lease given back first."""
        before = opening.checkpoints[-1].checkpoint_id if opening.checkpoints else None
        try:
            if self.rider is not None and ride.result is not None:
                await self.rider.rode(ride, ride.result, (before, opening.last_event_seq))
        except BaseException:
            if opening.acquired:
                with contextlib.suppress(Exception):
                    await asyncio.shield(self.backend.release_lease(self.thread_id, self.owner))
            raise

    def restore(self, checkpoint: Checkpoint) -> Restored:
        """What a run continuing from ``checkpoint`` starts with (its next checkpoint is a
        full snapshot unless :meth:`open` found the ladder to continue)."""
        self.writer.ladder = None
        suspended = checkpoint.metadata.get("interrupts") or ()
        error = checkpoint.metadata.get("error")
        return Restored(
            values=self.codec.values_of(checkpoint),
            step=checkpoint.step,
            seq=int(checkpoint.metadata.get("seq", 0)),
            checkpoint_id=checkpoint.id,
            # A failed superstep's checkpoint plans the same tasks as the one that planned
            # it: its finished tasks' writes are journaled under that one's id.
            plan_id=str(checkpoint.metadata.get("retry_of") or checkpoint.id),
            interrupts=[PendingInterrupt.from_dict(p) for p in suspended],
            plan=checkpoint.plan,
            joins=checkpoint.joins,
            error=dict(error) if isinstance(error, dict) else None,
        )

    # -- checkpoints ------------------------------------------------------------------------

    async def checkpoint(
        self,
        at: Position,
        changed: dict[str, list[Any] | None] | None,
        plan: list[PlanEntry],
        *,
        parent_id: str | None,
        source: str = "loop",
        meta: dict[str, Any] | None = None,
        final: bool = False,
        ending: Callable[[], Any] | None = None,
    ) -> str:
        """Save a checkpoint of ``at`` after a barrier (``changed=None`` writes a full
        snapshot), with the events buffered since the last one, as a child of ``parent_id``.

        ``meta`` is stored with it and read back as ``Checkpoint.metadata`` (a suspended
        run records what it waits for there). ``final`` marks the run's last write: the lease
        is given back in the same unit of work; ``ending`` builds the state the run ends
        with, for a record outcome that rides the unit (a clean end or a suspension only).
        """
        if self.lease.lost:
            raise lease_lost(self.thread_id)
        await self.settle()  # "async": never more than one checkpoint behind
        behind = self.durability == "async" and not final and source != "input"
        if self._later and not behind:  # results that ride the run's next write: this is it
            await self._write([], "recording effects")
        self._forget_superstep()
        # The events carry the same values: encode each once.
        with shared_encoding(self.backend.serializer) if self.events else _NO_SHARING:
            stored, ladder = self.writer.encode(
                at, changed, plan, source=source, parent_id=parent_id, meta=meta
            )
            events = self._encoded_events(shared=True)
        if behind:
            self.writer.adopt(ladder, stored)  # the next barrier's delta builds on this one
            task = asyncio.ensure_future(self._commit_behind(stored, events))
            task.add_done_callback(_retrieved)
            self._behind = task
            return stored.checkpoint_id
        release = None
        if final and self.lease.held:
            await self.lease.stop_heartbeat()
            release = self.owner
        async with self._fenced("saving a checkpoint"):
            await self._commit(
                stored,
                events,
                # The input is made durable by the next durable write (see open_thread).
                durable=source != "input",
                release_owner=release,
                ending=ending,
            )
        if release is not None:
            self.lease.held = False
        self.writer.adopt(ladder, stored)
        return stored.checkpoint_id

    async def _commit_behind(self, stored: StoredCheckpoint, events: list[StoredEvent]) -> None:
        """An ``"async"`` barrier's commit, run while the next superstep does: the results
        waiting for the run's next write first (as :meth:`checkpoint` does), then the unit."""
        if self._later:
            await self._write([], "recording effects")
        async with self._fenced("saving a checkpoint"):
            await self._commit(stored, events)

    async def settle(self) -> None:
        """Wait for the checkpoint committing behind the run (``durability="async"``) and
        raise its failure; a no-op in the other modes. A cancelled wait leaves the commit
        running (a half-written unit helps nobody): the next call waits for it again."""
        behind = self._behind
        if behind is None:
            return
        try:
            await asyncio.shield(behind)
        except BaseException:
            if behind.done():
                self._behind = None
                if behind.cancelled() or behind.exception() is not None:
                    self.writer.forget()  # not stored: the next checkpoint is a snapshot
            raise
        self._behind = None

    # -- effects ----------------------------------------------------------------------------

    async def lookup(self, key: str) -> tuple[bool, Any]:
        if key in self._known:
            return True, self._known[key]
        if self.fresh:
            return await self._fresh_miss(key)
        async with store_guard(self.backend, "reading the effect journal"):
            raw = await self.backend.lookup_effect(self.thread_id, key)
        if raw is None:
            return await self.forks.lookup(key)
        self.seen.add(key)
        return True, self._entry(key, raw)

    async def _fresh_miss(self, key: str) -> tuple[bool, Any]:
        """A lookup on a thread this run created: its own journal is empty, but a durable
        subgraph's thread (``<parent>/<key>``) of a fork follows the fork's choice for what
        the origin's subgraph ran (one lineage read per run, only on such threads)."""
        if "/" not in self.thread_id:
            return False, None
        return await self.forks.lookup(key)

    def decode(self, key: str, raw: bytes) -> Any:
        """One journal entry's value, as :meth:`lookup` reads it (``key`` names it in errors)."""
        return self._entry(key, raw)

    def _entry(self, key: str, raw: bytes) -> Any:
        """Decode one journal entry: ``record`` stores ``[value]``, so anything else (a
        string would replay its first character, ``{}`` would crash) is refused by name."""
        try:
            decoded = self.backend.serializer.loads(raw)
        except CheckpointDecodeError as exc:
            msg = f"journal entry {key!r} of thread {self.thread_id!r} cannot be decoded: {exc}"
            raise CheckpointDecodeError(msg) from exc
        if type(decoded) is not list or len(decoded) != 1:
            shape = type(decoded).__name__
            if isinstance(decoded, list):
                shape = f"a list of {len(decoded)} items"
            msg = (
                f"journal entry {key!r} of thread {self.thread_id!r} is malformed (a "
                f"one-item list was expected, found {shape}): it was not written by this "
                "runtime. Fork the thread from a checkpoint before the entry was written, or "
                "start a new thread."
            )
            raise CheckpointDecodeError(msg)
        return decoded[0]

    async def find(self, key: str) -> tuple[bool, Any, dict[str, Any] | None]:
        """``key``'s recorded value, if any, and otherwise the intent a previous attempt
        wrote before calling out (one round trip for both; none on a thread this run
        created). An intent this run wrote itself is not in doubt: the run saw the call
        fail and is trying it again."""
        if key in self._known:
            return True, self._known[key], None
        if self.fresh:
            hit, value = await self._fresh_miss(key)
            return hit, value, None
        intent = intent_key(key)
        found = await self.lookup_many([key, intent])
        if key in found:
            return True, found[key], None
        doubt = found.get(intent)
        if intent in self._known or not isinstance(doubt, dict):
            doubt = None
        if doubt is None:  # never started here: a fork may answer it from its origin
            hit, value = await self.forks.lookup(key)
            if hit:
                return True, value, None
        return False, None, doubt

    def digest(self, value: Any) -> str | None:
        """A digest of ``value`` as this thread's store encodes it (see ``input_digest``)."""
        return input_digest(self.backend.serializer.dumps, value)

    async def intend(self, key: str, intent: dict[str, Any]) -> None:
        """Write the intent of the effect about to call out under ``key`` (with any results
        waiting for the run's next write)."""
        entry = intent_key(key)
        await self._write([(entry, intent)], "recording an effect's intent")

    async def record(self, key: str, value: Any) -> None:
        await self._write([(key, value)], "recording an effect")

    async def transact(self, key: str, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(connection)`` in a transaction of the store's own database, its result
        journaled under ``key`` in the same commit: done once, or not at all."""
        dumps = self.backend.serializer.dumps

        def encode(value: Any) -> bytes:
            return dumps([value])

        fence = self.owner if self._fences else None
        async with self._fenced("committing a database step"):
            if self._later:  # a crash must not keep this step and lose what came before
                await self._write([], "recording effects")
            recorded, result = await self.backend.transact_effect(
                self.thread_id, key, fn, encode, fence=fence
            )
        self.seen.add(key)
        if recorded is not None:
            return self._entry(key, recorded)
        self._known.setdefault(key, result)
        return result

    def record_later(self, key: str, value: Any) -> None:
        """Journal ``value`` under ``key`` with the run's next write (the next intent, a
        finished task's writes, the next checkpoint): for a call with no outside effect,
        which a crash before that write only makes run again. Encoded now, so a value the
        serializer refuses fails here, under its own name."""
        self.seen.add(key)
        self._later.append((key, self.backend.serializer.dumps([value])))
        self._known.setdefault(key, value)

    def _forget_superstep(self) -> None:
        """A barrier: the superstep's keys are never looked up again by this run, except
        the thread-wide idempotency keys (kept, so a fresh thread still answers them)."""
        self.skipped_finished = False
        self.seen.clear()
        if self._known:
            kept = (IDEMPOTENCY_PREFIX, intent_key(IDEMPOTENCY_PREFIX))
            self._known = {k: v for k, v in self._known.items() if k.startswith(kept)}

    async def _write(self, items: list[tuple[str, Any]], what: str) -> None:
        """Journal entries as one unit, fenced by this run's lease where the backend can
        fence (a backend's default ``record_effects`` writes them one by one), together
        with the results waiting for the run's next write."""
        dumps = self.backend.serializer.dumps
        encoded = [(key, dumps([value])) for key, value in items]
        if self._later:
            encoded = [*self._later, *encoded]
            self._later = []
        if not encoded:
            return
        rider = self.rider
        ride = None if rider is None else rider.ride("effects")
        async with self._fenced(what):
            if ride is not None:
                fence = self.owner if self._fences else None
                await self.backend.record_effects(
                    self.thread_id,
                    encoded,
                    fence=fence,
                    ride=ride,  # type: ignore[call-arg]
                )
            elif self._fences:
                await self.backend.record_effects(self.thread_id, encoded, fence=self.owner)
            else:
                await self.backend.record_effects(self.thread_id, encoded)
        self.seen.update(key for key, _ in encoded)
        if rider is not None and ride is not None and ride.result is not None:
            await rider.rode(ride, ride.result)
        for key, value in items:
            self._known.setdefault(key, value)

    async def record_encoded(self, items: list[tuple[str, bytes]], what: str) -> None:
        """Journal already-encoded entries as one unit (a fork's inherited journal)."""
        async with self._fenced(what):
            if self._fences:
                await self.backend.record_effects(self.thread_id, items, fence=self.owner)
            else:
                await self.backend.record_effects(self.thread_id, items)
        self.seen.update(key for key, _ in items)

    def _fenced(self, what: str) -> _Fenced:
        """A write of this run: a lost connection is ``BackendUnavailableError``; a refused
        fence marks the lease lost, so nothing else of this run is written."""
        return _Fenced(self.lease, self.backend, what)

    async def lookup_many(self, keys: list[str]) -> dict[str, Any]:
        """The recorded values among ``keys``, in one store round trip (none when this run
        wrote them all, or created the thread)."""
        known = {key: self._known[key] for key in keys if key in self._known}
        rest = [key for key in keys if key not in known]
        if not rest or self.fresh:
            return known
        async with store_guard(self.backend, "reading the effect journal"):
            raw = await self.backend.lookup_effects(self.thread_id, rest)
        known.update({key: self._entry(key, data) for key, data in raw.items()})
        self.seen.update(raw)
        return known

    async def record_many(self, items: list[tuple[str, Any]]) -> None:
        await self._write(items, "recording finished tasks")

    # -- per-branch commit ------------------------------------------------------------------

    @staticmethod
    def task_key(plan_id: str | None, task: str) -> str:
        """Where a finished task's writes are journaled: per planning checkpoint, so writes
        computed from one state are never replayed onto another (new input re-plans).
        ``task`` is the node's name followed by its ``Send`` instance (``"Pay#2"``)."""
        return writes_key(plan_id, task, "")  # the instance is already part of `task`

    async def finished_writes(self, plan_id: str | None, tasks: list[str]) -> dict[int, Any]:
        """Writes of the tasks (named as in :meth:`task_key`) that finished before the run
        stopped, by task index."""
        keys = [self.task_key(plan_id, task) for task in tasks]
        found = await self.lookup_many(keys)
        done = {i: found[key] for i, key in enumerate(keys) if key in found}
        self.skipped_finished = self.skipped_finished or bool(done)
        return done

    def write_log(self, plan_id: str | None) -> TaskWriteLog:
        return TaskWriteLog(self, plan_id)

    # -- events -----------------------------------------------------------------------------

    def _encoded_events(self, *, shared: bool = False) -> list[StoredEvent]:
        """The buffered events' rows; ``shared``: called inside a block of
        :func:`shared_encoding` already (a checkpoint's), which they share."""
        if not self.events:
            return []
        events, self.events = self.events, []
        return encode_events(self.backend.serializer, self.thread_id, events, shared=shared)

    async def flush_events(self) -> None:
        stored = self._encoded_events()
        if not stored:
            return
        if self.lease.lost:
            return  # the thread is someone else's now: its log is theirs to write
        async with self._fenced("appending stream events"):
            await self._commit(None, stored, riding=False)


#: Where a block has nothing to share.
_NO_SHARING = contextlib.nullcontext()


def _retrieved(task: asyncio.Future[None]) -> None:
    """Mark a commit's failure as seen: :meth:`RunJournal.settle` re-raises it, and a run
    that ends without settling (the store is down) has reported its own error."""
    if not task.cancelled():
        task.exception()


class TaskWriteLog:
    """A superstep's finished tasks, journaled while their siblings still run, so a crash or
    a failing sibling costs only the unfinished tasks on resume.

    A finishing task writes its own entry before it counts as done, together with any that
    finished meanwhile (one batch while a write is in flight). The superstep's last task
    writes nothing: the barrier's checkpoint covers it a moment later.
    """

    __slots__ = ("_buffer", "_idle", "_journal", "_plan_id")

    def __init__(self, journal: RunJournal, plan_id: str | None) -> None:
        self._journal = journal
        self._plan_id = plan_id
        self._buffer: list[tuple[str, Any]] = []
        self._idle: asyncio.Event | None = None  # set while no batch is being written

    async def add(self, task: str, writes: dict[str, Any]) -> None:
        self._buffer.append((RunJournal.task_key(self._plan_id, task), writes))
        if self._idle is not None and not self._idle.is_set():
            return  # the batch in flight is followed by one that includes this entry
        await self._drain()

    async def _drain(self) -> None:
        idle = self._idle = asyncio.Event()
        try:
            while self._buffer:
                batch, self._buffer = self._buffer, []
                # Shielded like an effect record: a cancelled task (its sibling failed)
                # still lets the write in flight finish instead of cutting it off.
                writing = asyncio.ensure_future(self._journal.record_many(batch))
                try:
                    await asyncio.shield(writing)
                except asyncio.CancelledError:
                    await asyncio.wait([writing])
                    raise
        finally:
            idle.set()

    async def close(self, *, keep: bool) -> None:
        """End of the superstep: ``keep`` stores every finished task (a sibling failed);
        otherwise what is not written yet is dropped. No batch is in flight on return (the
        run may be about to give its lease back)."""
        if not keep:
            self._buffer = []
        if self._idle is not None:
            await self._idle.wait()
        if keep and self._buffer:
            await self._drain()
