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

__all__ = ["Backend", "StoredCheckpoint", "StoredEvent"]


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    """One checkpoint as a store keeps it. ``payload`` is produced by the runtime."""

    thread_id: str
    checkpoint_id: str
    parent_id: str | None
    step: int
    created_at: float
    payload: bytes


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One persisted stream event: its per-thread sequence number and encoded body."""

    seq: int
    payload: bytes


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
