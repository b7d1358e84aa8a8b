"""``InMemoryBackend``: the full backend contract in process memory (dev and tests).

Values still go through the serializer, so what works here works on a real store.
"""

from __future__ import annotations

import threading
import time

from tensorsketch.runtime.backends.base import Backend, StoredCheckpoint, StoredEvent
from tensorsketch.serializers import Serializer

__all__ = ["InMemoryBackend"]


class InMemoryBackend(Backend):
    """Keeps every thread in dictionaries; safe to use from several event loops."""

    name = "memory"

    def __init__(self, *, serializer: Serializer | str | None = None) -> None:
        super().__init__(serializer=serializer)
        self._lock = threading.Lock()
        self._checkpoints: dict[str, list[StoredCheckpoint]] = {}
        #: thread -> checkpoint id -> index in its list (``read_chain`` follows base ids).
        self._positions: dict[str, dict[str, int]] = {}
        self._effects: dict[tuple[str, str], bytes] = {}
        self._events: dict[str, list[StoredEvent]] = {}
        self._leases: dict[str, tuple[str, float]] = {}

    async def save_checkpoint(self, checkpoint: StoredCheckpoint) -> None:
        with self._lock:
            rows = self._checkpoints.setdefault(checkpoint.thread_id, [])
            positions = self._positions.setdefault(checkpoint.thread_id, {})
            positions.setdefault(checkpoint.checkpoint_id, len(rows))
            rows.append(checkpoint)

    async def latest_checkpoint(self, thread_id: str) -> StoredCheckpoint | None:
        with self._lock:
            found = self._checkpoints.get(thread_id)
            return found[-1] if found else None

    async def get_checkpoint(self, thread_id: str, checkpoint_id: str) -> StoredCheckpoint | None:
        with self._lock:
            at = self._positions.get(thread_id, {}).get(checkpoint_id)
            return None if at is None else self._checkpoints[thread_id][at]

    async def list_checkpoints(self, thread_id: str) -> list[StoredCheckpoint]:
        with self._lock:
            return list(self._checkpoints.get(thread_id, ()))

    async def read_chain(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> list[StoredCheckpoint]:
        with self._lock:
            rows = self._checkpoints.get(thread_id, [])
            positions = self._positions.get(thread_id, {})
            at = len(rows) - 1 if checkpoint_id is None else positions.get(checkpoint_id)
            chain: list[StoredCheckpoint] = []
            while at is not None and at >= 0:
                chain.append(rows[at])
                base = rows[at].base_id
                below = None if base is None else positions.get(base)
                at = below if below is not None and below < at else None
            chain.reverse()
            return chain

    async def record_effect(self, thread_id: str, key: str, value: bytes) -> None:
        with self._lock:
            self._effects.setdefault((thread_id, key), value)

    async def lookup_effect(self, thread_id: str, key: str) -> bytes | None:
        with self._lock:
            return self._effects.get((thread_id, key))

    async def append_events(self, thread_id: str, events: list[StoredEvent]) -> None:
        with self._lock:
            self._events.setdefault(thread_id, []).extend(events)

    async def read_events(self, thread_id: str, since: int = 0) -> list[StoredEvent]:
        with self._lock:
            return [e for e in self._events.get(thread_id, ()) if e.seq >= since]

    async def acquire_lease(self, thread_id: str, owner: str, ttl: float) -> bool:
        now = time.monotonic()
        with self._lock:
            held = self._leases.get(thread_id)
            if held is not None and held[0] != owner and held[1] > now:
                return False
            self._leases[thread_id] = (owner, now + ttl)
            return True

    async def release_lease(self, thread_id: str, owner: str) -> None:
        with self._lock:
            held = self._leases.get(thread_id)
            if held is not None and held[0] == owner:
                del self._leases[thread_id]
