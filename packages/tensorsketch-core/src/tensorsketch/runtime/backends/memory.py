"""``InMemoryBackend``: the full backend contract in process memory (dev and tests).

Values still go through the serializer, so what works here works on a real store.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Collection

from tensorsketch.runtime.backends.base import (
    Backend,
    ForkLink,
    StoredCheckpoint,
    StoredEvent,
    ThreadOpening,
    ThreadSummary,
)
from tensorsketch.runtime.backends.memory_runs import MemoryRunStore
from tensorsketch.runtime.backends.rides import RecordRide, RideResult
from tensorsketch.serializers import Serializer

__all__ = ["InMemoryBackend"]


class InMemoryBackend(Backend):
    """Keeps every thread in dictionaries; safe to use from several event loops."""

    name = "memory"
    fences_writes = True
    carries_rides = True
    folds_submits = True
    stores_blobs = True

    def __init__(self, *, serializer: Serializer | str | None = None) -> None:
        super().__init__(serializer=serializer)
        self._lock = threading.Lock()
        self._checkpoints: dict[str, list[StoredCheckpoint]] = {}
        #: thread -> checkpoint id -> index in its list (``read_chain`` follows base ids).
        self._positions: dict[str, dict[str, int]] = {}
        self._effects: dict[tuple[str, str], bytes] = {}
        self._events: dict[str, list[StoredEvent]] = {}
        #: thread -> sha256 hex -> a large file's payload (see Backend.stores_blobs).
        self._blobs: dict[str, dict[str, bytes]] = {}
        # Leases: the Backend default (an in-process table) is exactly what this store needs.
        self._runs = MemoryRunStore(self.serializer)

    def run_store(self) -> MemoryRunStore:
        return self._runs

    async def save_checkpoint(self, checkpoint: StoredCheckpoint) -> None:
        with self._lock:
            if checkpoint.blobs:
                held = self._blobs.setdefault(checkpoint.thread_id, {})
                for digest, data in checkpoint.blobs:
                    held.setdefault(digest, data)
                checkpoint = dataclasses.replace(checkpoint, blobs=())
            rows = self._checkpoints.setdefault(checkpoint.thread_id, [])
            positions = self._positions.setdefault(checkpoint.thread_id, {})
            positions.setdefault(checkpoint.checkpoint_id, len(rows))
            rows.append(checkpoint)

    async def latest_checkpoint(self, thread_id: str) -> StoredCheckpoint | None:
        with self._lock:
            found = self._checkpoints.get(thread_id)
            return found[-1] if found else None

    async def get_blobs(self, thread_id: str, hashes: Collection[str]) -> dict[str, bytes]:
        with self._lock:
            held = self._blobs.get(thread_id, {})
            return {d: held[d] for d in hashes if d in held}

    async def get_checkpoint(self, thread_id: str, checkpoint_id: str) -> StoredCheckpoint | None:
        with self._lock:
            at = self._positions.get(thread_id, {}).get(checkpoint_id)
            return None if at is None else self._checkpoints[thread_id][at]

    async def list_checkpoints(self, thread_id: str) -> list[StoredCheckpoint]:
        with self._lock:
            return list(self._checkpoints.get(thread_id, ()))

    async def page_checkpoints(
        self, thread_id: str, *, before: str | None = None, limit: int
    ) -> list[StoredCheckpoint]:
        with self._lock:
            rows = self._checkpoints.get(thread_id, [])
            end = len(rows) if before is None else self._positions.get(thread_id, {}).get(before)
            return [] if end is None else rows[max(0, end - limit) : end][::-1]

    async def read_chain(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> list[StoredCheckpoint]:
        return self._chain(thread_id, checkpoint_id)

    def read_chain_blocking(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> list[StoredCheckpoint] | None:
        if type(self).read_chain is not InMemoryBackend.read_chain:
            return None  # a subclass reads its chain its own way: await it
        return self._chain(thread_id, checkpoint_id)

    def _chain(self, thread_id: str, checkpoint_id: str | None) -> list[StoredCheckpoint]:
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

    async def list_threads(self, prefix: str = "", limit: int | None = None) -> list[str]:
        with self._lock:
            found = sorted(
                t for t, rows in self._checkpoints.items() if rows and t.startswith(prefix)
            )
        return found if limit is None else found[:limit]

    async def delete_thread(self, thread_id: str) -> None:
        with self._lock:
            self._checkpoints.pop(thread_id, None)
            self._positions.pop(thread_id, None)
            self._events.pop(thread_id, None)
            self._blobs.pop(thread_id, None)
            for key in [k for k in self._effects if k[0] == thread_id]:
                del self._effects[key]
        with self._lease_guard():
            self._leases.pop(thread_id, None)

    async def summarize_threads(self, prefix: str = "") -> list[ThreadSummary]:
        with self._lock:
            return [
                ThreadSummary(t, len(rows), rows[-1].created_at)
                for t, rows in sorted(self._checkpoints.items())
                if rows and t.startswith(prefix)
            ]

    async def list_forks(self, thread_id: str) -> list[ForkLink]:
        with self._lock:
            mine = self._positions.get(thread_id, {})
            found = []
            for other, rows in sorted(self._checkpoints.items()):
                origin = rows[0].parent_id if rows and other != thread_id else None
                if origin is not None and origin in mine:
                    found.append(ForkLink(other, rows[0].checkpoint_id, origin))
            return found

    async def list_effects(self, thread_id: str, prefix: str = "") -> list[tuple[str, bytes]]:
        with self._lock:
            return sorted(
                (key, value)
                for (thread, key), value in self._effects.items()
                if thread == thread_id and key.startswith(prefix)
            )

    async def forget_effects(self, thread_id: str, keys: list[str]) -> None:
        with self._lock:
            for key in keys:
                self._effects.pop((thread_id, key), None)

    async def replace_checkpoints(
        self,
        thread_id: str,
        checkpoints: list[StoredCheckpoint],
        *,
        blobs: Collection[str] | None = None,
    ) -> None:
        with self._lock:
            if blobs is not None:
                held = self._blobs.get(thread_id, {})
                self._blobs[thread_id] = {d: held[d] for d in blobs if d in held}
            self._checkpoints[thread_id] = list(checkpoints)
            self._positions[thread_id] = {c.checkpoint_id: i for i, c in enumerate(checkpoints)}

    async def record_effect(self, thread_id: str, key: str, value: bytes) -> None:
        with self._lock:
            self._effects.setdefault((thread_id, key), value)

    async def lookup_effect(self, thread_id: str, key: str) -> bytes | None:
        with self._lock:
            return self._effects.get((thread_id, key))

    async def record_effects(
        self,
        thread_id: str,
        effects: list[tuple[str, bytes]],
        *,
        fence: str | None = None,
        ride: RecordRide | None = None,
    ) -> None:
        if fence is not None:
            self.check_fence(thread_id, fence)
        with self._lock:
            for key, value in effects:
                self._effects.setdefault((thread_id, key), value)
        if ride is not None:
            ride.result = await self._runs.carry(ride)

    # The batched units: the composed defaults, then the ride (process memory has no unit
    # to share, and nothing survives the process anyway).

    async def open_thread(
        self,
        thread_id: str,
        owner: str,
        ttl: float,
        initial: StoredCheckpoint | None = None,
        *,
        ride: RecordRide | None = None,
    ) -> ThreadOpening:
        insert = None if ride is None else ride.insert  # a folded submit's (folds_submits)
        # Stored first (as a submit stores it); the lease only if the run heads its queue.
        if (
            ride is not None
            and insert is not None
            and (await self._runs._insert_in_turn(insert)).queue_head != insert.run_id
        ):
            ride.result = RideResult(insert.version)
            return ThreadOpening(acquired=False, checkpoints=[], last_event_seq=None)
        opening = await super().open_thread(thread_id, owner, ttl, initial)
        if ride is not None and opening.acquired:
            ride.result = await self._runs.carry(ride)
        elif ride is not None and insert is not None:
            ride.result = RideResult(insert.version)
        return opening

    async def commit_step(
        self,
        thread_id: str,
        checkpoint: StoredCheckpoint | None,
        events: list[StoredEvent],
        *,
        durable: bool = True,
        release_owner: str | None = None,
        fence: str | None = None,
        ride: RecordRide | None = None,
    ) -> None:
        await super().commit_step(
            thread_id,
            checkpoint,
            events,
            durable=durable,
            release_owner=release_owner,
            fence=fence,
        )
        if ride is not None:
            ride.result = await self._runs.carry(ride)

    async def lookup_effects(self, thread_id: str, keys: list[str]) -> dict[str, bytes]:
        with self._lock:
            effects = self._effects
            return {k: effects[(thread_id, k)] for k in keys if (thread_id, k) in effects}

    async def append_events(self, thread_id: str, events: list[StoredEvent]) -> None:
        with self._lock:
            self._events.setdefault(thread_id, []).extend(events)

    async def read_events(self, thread_id: str, since: int = 0) -> list[StoredEvent]:
        with self._lock:
            return [e for e in self._events.get(thread_id, ()) if e.seq >= since]
