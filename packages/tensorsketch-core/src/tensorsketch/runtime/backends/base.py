"""The ``Backend`` ABC: the eight operations a durable store implements.

The lease (one writer per thread) has a working default kept in this backend object's memory,
so a backend written from the eight documented operations runs as is; a store shared by
several processes overrides :meth:`Backend.acquire_lease` / :meth:`Backend.release_lease`
to keep the lease in the store itself.

A backend stores opaque bytes; the runtime decides what they mean. Everything is async and
must never block the event loop (wrap blocking drivers with ``asyncio.to_thread``). Backends
must also be usable from a different event loop than the one they were created in (the sync
``get_state`` helper runs reads on a private loop), so bind connections per loop or per call.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

from tensorsketch.errors import (
    BackendUnsupportedError,
    LeaseLostError,
    TransactionUnsupportedError,
)
from tensorsketch.name_registry import Registry
from tensorsketch.runtime.allocator import settle_for_large_rows
from tensorsketch.serializers import Serializer, resolve_serializer

if TYPE_CHECKING:
    from tensorsketch.runtime.backends.runs import RunStore

__all__ = [
    "Backend",
    "ForkLink",
    "StoredCheckpoint",
    "StoredEvent",
    "ThreadOpening",
    "ThreadSummary",
]

_LAZY_INIT = threading.Lock()


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    """One checkpoint as a store keeps it. ``payload`` is produced by the runtime.

    ``base_id`` is the checkpoint whose state ``payload``'s changes apply to (``None`` for a
    full snapshot, or when unknown). The payload says the same; a store keeps it beside the
    payload only to answer :meth:`Backend.read_chain` with one indexed query.

    ``blobs`` are large file payloads the checkpoint refers to by hash and that the store does
    not hold yet, as ``(sha256 hex, bytes)``: a store that sets :attr:`Backend.stores_blobs`
    keeps them under the thread in the same unit as the row (first write wins per hash) and
    returns rows without them; the runtime hands them only to such a store.
    """

    thread_id: str
    checkpoint_id: str
    parent_id: str | None
    step: int
    created_at: float
    payload: bytes
    base_id: str | None = None
    blobs: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One row of a thread's event log: its per-thread sequence number and encoded body (the
    runtime stores a commit's events as one row, under its last event's seq: see
    :mod:`tensorsketch.durable.event_rows`)."""

    seq: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class ThreadOpening:
    """What a runner learns when it starts on a thread (:meth:`Backend.open_thread`).

    :param acquired: the lease was taken; when ``False`` nothing else was read or written.
    :param checkpoints: checkpoints of the thread as they were *before* this call, oldest
        first, ending with the latest: at least what :meth:`Backend.read_chain` returns for
        it (every checkpoint of the thread also does; empty for a new thread).
    :param last_event_seq: the highest stored event ``seq`` of the thread, if any.
    :param created: the ``initial`` checkpoint was saved as the thread's first.
    """

    acquired: bool
    checkpoints: list[StoredCheckpoint]
    last_event_seq: int | None
    created: bool = False


@dataclass(frozen=True, slots=True)
class ThreadSummary:
    """One thread as a listing shows it (:meth:`Backend.summarize_threads`).

    :param checkpoints: how many checkpoints the thread has.
    :param updated_at: ``created_at`` of its newest checkpoint (Unix time).
    """

    thread_id: str
    checkpoints: int
    updated_at: float


@dataclass(frozen=True, slots=True)
class ForkLink:
    """A thread forked from another thread's checkpoint (:meth:`Backend.list_forks`).

    :param thread_id: the fork, a thread whose first checkpoint's parent is ``origin_id``.
    :param checkpoint_id: that first checkpoint (the fork point's copy in the new thread).
    :param origin_id: the checkpoint of the origin thread it was forked from.
    """

    thread_id: str
    checkpoint_id: str
    origin_id: str


class _DefaultSerializer:
    """``Backend.serializer`` of a backend whose ``__init__`` did not call
    ``super().__init__()``: the default serializer, made on first use and kept on the
    instance (each backend gets its own, since a serializer holds registered types)."""

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> _DefaultSerializer: ...
    @overload
    def __get__(self, obj: Backend, owner: type[Any]) -> Serializer: ...
    def __get__(self, obj: Backend | None, owner: type[Any]) -> _DefaultSerializer | Serializer:
        if obj is None:
            return self
        # A non-data descriptor: once the instance holds one, this is never called again.
        settle_for_large_rows()
        found: Serializer = vars(obj).setdefault("serializer", resolve_serializer(None))
        return found


class Backend(ABC):
    """Where checkpoints, the effect journal and the event log of each thread live."""

    #: Registry name, set by subclasses ("memory", "sqlite", "postgres", ...).
    name: str = "backend"
    #: Seconds a runner's lease on a thread lasts unless renewed (every third of it while the
    #: run is alive); a crashed runner's thread can be taken over once it lapses.
    lease_ttl: float = 30.0
    #: ``commit_step`` and ``record_effects`` accept ``fence=owner`` and store nothing (raising
    #: :class:`LeaseLostError`) unless ``owner`` still holds the lease, checked in the same
    #: unit of work. The runtime passes the fence only to backends that set this.
    fences_writes: bool = False
    #: ``open_thread``, ``record_effects`` and ``commit_step`` accept ``ride=`` (a
    #: :class:`~tensorsketch.runtime.backends.rides.RecordRide`): a run record's write and
    #: version read carried in the same unit, its outcome set on ``ride.result``. The runtime
    #: passes rides only to backends that set this (their run store shares the unit).
    carries_rides: bool = False
    #: ``open_thread``'s ride may carry a new run's record to insert
    #: (:attr:`~tensorsketch.runtime.backends.rides.RecordRide.insert`): the submit's insert
    #: folded into the run's opening, one unit of work instead of two. ``AsyncRunner`` folds
    #: a submit only on a backend that says so (and only while its run store is in use).
    folds_submits: bool = False
    #: The store keeps large file payloads as content-addressed blobs, once per thread: it
    #: writes a checkpoint's :attr:`StoredCheckpoint.blobs` with the row (``save_checkpoint``,
    #: ``open_thread``'s ``initial``, ``commit_step``), answers :meth:`get_blobs`, removes a
    #: thread's blobs with it (``delete_thread``) and keeps only the hashes
    #: ``replace_checkpoints(..., blobs=)`` names. A store without it keeps files inline in
    #: every checkpoint that holds them, as before.
    stores_blobs: bool = False
    #: Inline file data (a ``FileBlock`` or ``ImageBlock``'s base64 ``data``) of this many
    #: bytes or more is stored by reference on a store that :attr:`stores_blobs`; ``None``
    #: keeps every file inline. Set it on the backend object to change it.
    blob_threshold: int | None = 64 * 1024
    #: How checkpoints and journal entries become bytes (``serializer=`` of ``__init__``;
    #: the default msgpack one when a subclass's ``__init__`` skips ``super().__init__()``).
    serializer = _DefaultSerializer()

    def __init__(self, *, serializer: Serializer | str | None = None) -> None:
        self.serializer = resolve_serializer(serializer)
        settle_for_large_rows()  # reads of large rows reuse memory (tensorsketch.runtime.allocator)
        self._lease_lock = threading.Lock()  # a threading lock: callers may be on any loop
        self._leases: dict[str, tuple[str, float]] = {}

    # -- checkpoints ------------------------------------------------------------------------

    @abstractmethod
    async def save_checkpoint(self, checkpoint: StoredCheckpoint) -> None:
        """Store a checkpoint; it becomes the thread's latest."""

    @abstractmethod
    async def latest_checkpoint(self, thread_id: str) -> StoredCheckpoint | None:
        """The most recently saved checkpoint of the thread, or ``None``."""

    @abstractmethod
    async def get_checkpoint(self, thread_id: str, checkpoint_id: str) -> StoredCheckpoint | None:
        """One checkpoint by id, or ``None``."""

    @abstractmethod
    async def list_checkpoints(self, thread_id: str) -> list[StoredCheckpoint]:
        """Every checkpoint of the thread, oldest first."""

    async def page_checkpoints(
        self, thread_id: str, *, before: str | None = None, limit: int
    ) -> list[StoredCheckpoint]:
        """Up to ``limit`` checkpoints of the thread saved just before ``before`` (a checkpoint
        id; ``None``: the newest), newest first; empty when ``before`` is not in the thread.

        The history iterator reads a thread this way, a page per round trip, so a long thread
        is never held whole. This default slices :meth:`list_checkpoints` (right, but it reads
        everything each time); the built-in stores answer with one keyed range read.
        """
        rows = await self.list_checkpoints(thread_id)
        end = len(rows)
        if before is not None:
            ids = [row.checkpoint_id for row in rows]
            if before not in ids:
                return []
            end = ids.index(before)
        return rows[max(0, end - limit) : end][::-1]

    async def read_chain(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> list[StoredCheckpoint]:
        """The checkpoints needed to rebuild one (the latest by default), oldest first: it,
        then each ``base_id`` in turn within the thread, down to a snapshot.

        Rebuilding the latest state (``get_state``, a resume) reads only these, so it costs
        about the state's size rather than the thread's length. Returning more rows is
        allowed (this default returns them all); a store that indexes ``base_id`` answers
        with one query.
        """
        rows = await self.list_checkpoints(thread_id)
        if checkpoint_id is None:
            return rows
        for index, row in enumerate(rows):
            if row.checkpoint_id == checkpoint_id:
                return rows[: index + 1]  # the chain ends at the checkpoint asked for
        return []

    def read_chain_blocking(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> list[StoredCheckpoint] | None:
        """:meth:`read_chain` answered on the calling thread without an event loop, or
        ``None`` when this backend cannot (the default; the caller then awaits
        :meth:`read_chain`).

        Optional. The sync ``get_state`` uses it so a read from plain code (a script, a
        notebook cell inside a running loop) costs the query and the fold, not a loop's
        setup and teardown; a backend whose driver blocks anyway (SQLite) offers it.
        """
        return None

    async def get_blobs(self, thread_id: str, hashes: Collection[str]) -> dict[str, bytes]:
        """The thread's stored blobs among ``hashes`` (sha256 hex), by hash; missing ones are
        left out. Only a store that sets :attr:`stores_blobs` implements it."""
        raise _unsupported(self, "blobs (large files stored by reference)", "get_blobs")

    # -- the effect journal -----------------------------------------------------------------

    @abstractmethod
    async def record_effect(self, thread_id: str, key: str, value: bytes) -> None:
        """Remember a completed effect's encoded result under ``key`` (first write wins)."""

    @abstractmethod
    async def lookup_effect(self, thread_id: str, key: str) -> bytes | None:
        """The recorded result for ``key``, or ``None`` if the effect never completed."""

    # -- the event log ----------------------------------------------------------------------

    @abstractmethod
    async def append_events(self, thread_id: str, events: list[StoredEvent]) -> None:
        """Append encoded events (their ``seq`` strictly increases per thread)."""

    @abstractmethod
    async def read_events(self, thread_id: str, since: int = 0) -> list[StoredEvent]:
        """Events with ``seq >= since``, in order."""

    # -- one writer per thread --------------------------------------------------------------

    async def acquire_lease(self, thread_id: str, owner: str, ttl: float) -> bool:
        """Take (or renew) the thread's lease for ``ttl`` seconds.

        Returns ``False`` while another owner holds an unexpired lease; an expired lease (its
        owner crashed) may be taken over.

        The default keeps leases in this backend object's memory: it gives one writer per
        thread among the runs that share this object in one process, and nothing more. A
        store that several processes (or several backend objects) write to must override
        this pair to keep the lease in the store, compared against the store's own clock
        (a row with an expiry in SQL, a key with a TTL in Redis).
        """
        now = time.monotonic()
        with self._lease_guard():
            held = self._leases.get(thread_id)
            if held is not None and held[0] != owner and held[1] > now:
                return False
            self._leases[thread_id] = (owner, now + ttl)
            return True

    async def release_lease(self, thread_id: str, owner: str) -> None:
        """Give the lease back if ``owner`` still holds it (see :meth:`acquire_lease`)."""
        with self._lease_guard():
            held = self._leases.get(thread_id)
            if held is not None and held[0] == owner:
                del self._leases[thread_id]

    async def renew_lease(self, thread_id: str, owner: str, ttl: float) -> bool:
        """Extend ``owner``'s lease by ``ttl`` seconds if ``owner`` still holds it, unexpired.

        Unlike :meth:`acquire_lease` this never takes a lease that lapsed or that another owner
        took in between: a runner that stalled past its lease must stop, not win the thread
        back from whoever resumed it. The default does so for the in-process lease table; a
        store that overrides ``acquire_lease`` should override this too (without it, renewal
        falls back to ``acquire_lease``).
        """
        if type(self).acquire_lease is not Backend.acquire_lease:
            return await self.acquire_lease(thread_id, owner, ttl)
        now = time.monotonic()
        with self._lease_guard():
            held = self._leases.get(thread_id)
            if held is None or held[0] != owner or held[1] <= now:
                return False
            self._leases[thread_id] = (owner, now + ttl)
            return True

    def check_fence(self, thread_id: str, owner: str) -> None:
        """Raise :class:`LeaseLostError` unless ``owner`` holds the thread's unexpired lease
        in the in-process table (the fencing of the default lease; a store with leases of its
        own checks inside the write itself and sets :attr:`fences_writes`)."""
        if type(self).acquire_lease is not Backend.acquire_lease:
            return
        now = time.monotonic()
        with self._lease_guard():
            held = self._leases.get(thread_id)
            if held is None or held[0] != owner or held[1] <= now:
                raise lease_lost(thread_id)

    def _lease_guard(self) -> threading.Lock:
        # A subclass that forgot ``super().__init__()`` still gets a working lease table.
        lock: threading.Lock | None = getattr(self, "_lease_lock", None)
        if lock is None:
            with _LAZY_INIT:
                lock = getattr(self, "_lease_lock", None)
                if lock is None:
                    self._leases = {}
                    lock = self._lease_lock = threading.Lock()
        return lock

    # -- optional: batched units of work ----------------------------------------------------
    #
    # A run reaches its store twice per superstep at most: once to open the thread and once
    # per barrier. The defaults below compose the eight operations; a store that can do each
    # as one round trip / one transaction overrides them (every first-party backend does), so
    # a superstep costs one commit instead of several.

    async def open_thread(
        self,
        thread_id: str,
        owner: str,
        ttl: float,
        initial: StoredCheckpoint | None = None,
    ) -> ThreadOpening:
        """Take the lease, read what a resume needs, and — on a thread that has no checkpoint
        yet — save ``initial`` as its first.

        Nothing is read or written when the lease is held by another owner. ``initial`` need
        not reach the disk before this returns (it is the run's input, made durable by the
        run's next durable write); it must be visible to other connections.
        """
        if not await self.acquire_lease(thread_id, owner, ttl):
            return ThreadOpening(acquired=False, checkpoints=[], last_event_seq=None)
        checkpoints = await self.read_chain(thread_id)
        last_seq = await self.last_event_seq(thread_id)
        created = False
        if not checkpoints and initial is not None:
            await self.save_checkpoint(initial)
            created = True
        return ThreadOpening(
            acquired=True, checkpoints=checkpoints, last_event_seq=last_seq, created=created
        )

    async def commit_step(
        self,
        thread_id: str,
        checkpoint: StoredCheckpoint | None,
        events: list[StoredEvent],
        *,
        durable: bool = True,
        release_owner: str | None = None,
        fence: str | None = None,
    ) -> None:
        """Store a superstep's events and its checkpoint as one unit, and — for the run's
        last write — give the lease of ``release_owner`` back in the same unit.

        ``durable=False`` allows the commit to skip waiting for the disk (it must still be
        visible to other connections and survive this process dying). ``fence``: see
        :attr:`fences_writes`.
        """
        if fence is not None:
            self.check_fence(thread_id, fence)
        if events:
            await self.append_events(thread_id, events)
        if checkpoint is not None:
            await self.save_checkpoint(checkpoint)
        if release_owner is not None:
            await self.release_lease(thread_id, release_owner)

    async def record_effects(
        self, thread_id: str, effects: list[tuple[str, bytes]], *, fence: str | None = None
    ) -> None:
        """Record several journal entries as one unit (first write wins for each key).

        The runtime stores effects and the writes of a superstep's finished tasks this way;
        override it with one round trip. ``fence``: see :attr:`fences_writes`.
        """
        if fence is not None:
            self.check_fence(thread_id, fence)
        for key, value in effects:
            await self.record_effect(thread_id, key, value)

    async def lookup_effects(self, thread_id: str, keys: list[str]) -> dict[str, bytes]:
        """The recorded entries among ``keys`` (missing keys are left out); one round trip
        when overridden. A resumed superstep asks this once for all of its tasks."""
        found: dict[str, bytes] = {}
        for key in keys:
            value = await self.lookup_effect(thread_id, key)
            if value is not None:
                found[key] = value
        return found

    # -- optional ---------------------------------------------------------------------------

    async def last_event_seq(self, thread_id: str) -> int | None:
        """The highest stored event seq of the thread (override for a cheaper query)."""
        events = await self.read_events(thread_id, 0)
        return events[-1].seq if events else None

    async def thread_head(self, thread_id: str) -> tuple[str | None, int | None]:
        """Where a run starting on the thread now begins: its latest checkpoint's id and its
        highest event seq (``None`` for none). What a run record remembers as it first
        starts; override to read both in one round trip."""
        latest = await self.latest_checkpoint(thread_id)
        return (latest.checkpoint_id if latest else None), await self.last_event_seq(thread_id)

    # -- optional: thread administration ---------------------------------------------------
    #
    # The eight operations cannot enumerate or remove threads, so these have no composed
    # default: a store that supports them overrides them (every first-party backend does).

    async def list_threads(self, prefix: str = "", limit: int | None = None) -> list[str]:
        """Ids of the threads that have a checkpoint and start with ``prefix``, sorted, at
        most ``limit`` of them."""
        raise _unsupported(self, "listing threads", "list_threads")

    async def delete_thread(self, thread_id: str) -> None:
        """Remove the thread's checkpoints, effect journal, events and lease in one unit."""
        raise _unsupported(self, "deleting threads", "delete_thread")

    async def replace_checkpoints(
        self,
        thread_id: str,
        checkpoints: list[StoredCheckpoint],
        *,
        blobs: Collection[str] | None = None,
    ) -> None:
        """Make ``checkpoints`` (oldest first) the thread's whole checkpoint list, in one unit
        (what pruning writes: the kept rows, some rewritten as snapshots). ``blobs`` (passed
        only to a store that :attr:`stores_blobs`): the hashes the kept rows refer to; the
        thread's other blobs are removed in the same unit."""
        raise _unsupported(self, "pruning checkpoints", "replace_checkpoints")

    async def summarize_threads(self, prefix: str = "") -> list[ThreadSummary]:
        """Every thread starting with ``prefix`` that has a checkpoint, with its checkpoint
        count and the time of its newest one, sorted by id (what a threads panel lists).

        This default reads every thread's checkpoints; a store that can count and take the
        newest time in one query overrides it (the SQL backends and the in-memory one do).
        """
        found: list[ThreadSummary] = []
        for thread_id in await self.list_threads(prefix):
            rows = await self.list_checkpoints(thread_id)
            if rows:
                found.append(ThreadSummary(thread_id, len(rows), rows[-1].created_at))
        return found

    async def list_forks(self, thread_id: str) -> list[ForkLink]:
        """The threads forked from this thread's checkpoints, sorted by fork thread id.

        A fork is a thread whose *first* checkpoint's parent is a checkpoint of another
        thread (what ``fork`` writes; a thread's own first checkpoint has no parent, and a
        pruned thread's first keeps a parent in the same thread). Checkpoint ids are random
        128-bit values, so a parent id names one checkpoint across the store.

        This default reads every thread's checkpoints (it needs only :meth:`list_threads`);
        a store that can look a parent id up overrides it (every first-party backend does).
        """
        mine = {row.checkpoint_id for row in await self.list_checkpoints(thread_id)}
        found: list[ForkLink] = []
        if not mine:
            return found
        for other in await self.list_threads():
            if other == thread_id:
                continue
            rows = await self.list_checkpoints(other)
            origin = rows[0].parent_id if rows else None
            if origin is not None and origin in mine:
                found.append(ForkLink(other, rows[0].checkpoint_id, origin))
        return found

    async def list_effects(self, thread_id: str, prefix: str = "") -> list[tuple[str, bytes]]:
        """The thread's journal entries whose key starts with ``prefix``, sorted by key, as
        ``(key, encoded value)`` (for inspecting a thread: the Studio's debugger)."""
        raise _unsupported(self, "listing journal entries", "list_effects")

    async def forget_effects(self, thread_id: str, keys: list[str]) -> None:
        """Remove the thread's journal entries under ``keys`` (missing ones are skipped), in one
        unit. Not for a run's own journal, whose entries stand for work done: it is for a
        journal kept as an outbox (entries owed until done, :meth:`list_effects` reading what
        is left — the A2A push notifications' index)."""
        raise _unsupported(self, "forgetting journal entries", "forget_effects")

    async def transact_effect(
        self,
        thread_id: str,
        key: str,
        fn: Callable[[Any], Any],
        encode: Callable[[Any], bytes],
        *,
        fence: str | None = None,
    ) -> tuple[bytes | None, Any]:
        """Run ``fn(connection)`` in a transaction of this store's own database and journal
        its encoded result under ``key`` in the same commit (``ctx.transaction``).

        Returns ``(recorded, None)`` when ``key`` was already journaled (``fn`` is not
        called), else ``(None, result)``. Only a store whose journal lives in a database
        the step can write to supports it (SQLite, PostgreSQL).
        """
        del thread_id, key, fn, encode, fence
        msg = (
            f"ctx.transaction needs a store that can commit the step's own writes with its "
            f"journal record (SqliteBackend or PostgresBackend); this run's store is "
            f"{type(self).__name__}. Use `ctx.step(name, fn, idempotency_key=...)` with a "
            "write your database dedupes by that key (an INSERT ... ON CONFLICT DO NOTHING), "
            "or run the thread on SQLite or PostgreSQL."
        )
        raise TransactionUnsupportedError(msg)

    def run_store(self) -> RunStore | None:
        """The store of run records (:mod:`tensorsketch.runtime.backends.runs`), an optional
        capability that ``AsyncRunner`` and the task API need; ``None`` when the backend has
        none (the default). Every first-party backend returns one."""
        return None

    async def aclose(self) -> None:  # noqa: B027 - optional hook, default does nothing
        """Release connections; the backend may not be used afterwards."""

    def describe(self) -> dict[str, Any]:
        """A small description for logs and ``tensorsketch plugins``."""
        return {"backend": self.name, "serializer": getattr(self.serializer, "name", "custom")}


def _unsupported(backend: Backend, what: str, method: str) -> BackendUnsupportedError:
    msg = (
        f"the {type(backend).__name__} backend does not support {what}: it implements only "
        f"the eight required operations. Override `{method}` on it, or use a first-party "
        "backend (memory, sqlite, postgres, redis)."
    )
    return BackendUnsupportedError(msg)


def lease_lost(thread_id: str) -> LeaseLostError:
    """The error a fenced write raises when its runner no longer holds the lease."""
    msg = (
        f"this run no longer holds the lease on thread {thread_id!r}: it stalled longer than "
        "the lease lasts and the lease lapsed or another process took the thread over, so "
        "the store refused its write (nothing of it was stored). The thread's state is the "
        "new owner's; invoke the thread again to continue from it, and raise `lease_ttl` if "
        "the run's event loop really blocks that long."
    )
    return LeaseLostError(msg)


#: Backends by name (``create_backend("postgres", ...)``), fed by the ``tensorsketch_backends``
#: hook.
backends: Registry[Backend] = Registry("backend", "tensorsketch_backends", "tensorsketch.backends")
