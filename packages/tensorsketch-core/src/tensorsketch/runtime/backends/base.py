"""The ``Backend`` ABC: the eight operations a durable store implements, plus the lease.

A backend stores opaque bytes; the runtime decides what they mean. Everything is async and
must never block the event loop (wrap blocking drivers with ``asyncio.to_thread``). Backends
must also be usable from a different event loop than the one they were created in (the sync
``get_state`` helper runs reads on a private loop), so bind connections per loop or per call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from tensorsketch.serializers import Serializer, resolve_serializer

__all__ = ["Backend", "StoredCheckpoint", "StoredEvent", "ThreadOpening"]


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    """One checkpoint as a store keeps it. ``payload`` is produced by the runtime.

    ``base_id`` is the checkpoint whose state ``payload``'s changes apply to (``None`` for a
    full snapshot, or when unknown). The payload says the same; a store keeps it beside the
    payload only to answer :meth:`Backend.read_chain` with one indexed query.
    """

    thread_id: str
    checkpoint_id: str
    parent_id: str | None
    step: int
    created_at: float
    payload: bytes
    base_id: str | None = None


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One persisted stream event: its per-thread sequence number and encoded body."""

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


class Backend(ABC):
    """Where checkpoints, the effect journal and the event log of each thread live."""

    #: Registry name, set by subclasses ("memory", "sqlite", "postgres", ...).
    name: str = "backend"
    #: Seconds a runner's lease on a thread lasts unless renewed (every third of it while the
    #: run is alive); a crashed runner's thread can be taken over once it lapses.
    lease_ttl: float = 30.0

    def __init__(self, *, serializer: Serializer | str | None = None) -> None:
        self.serializer: Serializer = resolve_serializer(serializer)

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
        return await self.list_checkpoints(thread_id)

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

    @abstractmethod
    async def acquire_lease(self, thread_id: str, owner: str, ttl: float) -> bool:
        """Take (or renew) the thread's lease for ``ttl`` seconds.

        Returns ``False`` while another owner holds an unexpired lease; an expired lease (its
        owner crashed) may be taken over.
        """

    @abstractmethod
    async def release_lease(self, thread_id: str, owner: str) -> None:
        """Give the lease back if ``owner`` still holds it."""

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
    ) -> None:
        """Store a superstep's events and its checkpoint as one unit, and — for the run's
        last write — give the lease of ``release_owner`` back in the same unit.

        ``durable=False`` allows the commit to skip waiting for the disk (it must still be
        visible to other connections and survive this process dying).
        """
        if events:
            await self.append_events(thread_id, events)
        if checkpoint is not None:
            await self.save_checkpoint(checkpoint)
        if release_owner is not None:
            await self.release_lease(thread_id, release_owner)

    # -- optional ---------------------------------------------------------------------------

    async def last_event_seq(self, thread_id: str) -> int | None:
        """The highest stored event seq of the thread (override for a cheaper query)."""
        events = await self.read_events(thread_id, 0)
        return events[-1].seq if events else None

    async def aclose(self) -> None:  # noqa: B027 - optional hook, default does nothing
        """Release connections; the backend may not be used afterwards."""

    def describe(self) -> dict[str, Any]:
        """A small description for logs and ``tensorsketch plugins``."""
        return {"backend": self.name, "serializer": getattr(self.serializer, "name", "custom")}
