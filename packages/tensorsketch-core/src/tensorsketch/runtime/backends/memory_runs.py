"""``MemoryRunStore``: the run store in process memory (the :class:`InMemoryBackend`'s).

Records are kept encoded, as a real store keeps them, so what works here works there. The
due index is a sorted list of ``(wake_at, run_id)``; the undelivered-webhook index a set of ids.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence

from tensorsketch.runtime.backends.rides import RecordRide, RideResult
from tensorsketch.runtime.backends.runs import ACTIVE, RunRecord, RunStore
from tensorsketch.serializers import Serializer

__all__ = ["MemoryRunStore"]


class MemoryRunStore(RunStore):
    """Run records in dictionaries; safe to use from several event loops."""

    def __init__(self, serializer: Serializer) -> None:
        super().__init__(serializer)
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[bytes, int]] = {}
        self._keys: dict[str, str] = {}
        self._due: list[tuple[float, str]] = []
        self._undelivered: set[str] = set()

    def _load(self, run_id: str) -> RunRecord | None:
        row = self._rows.get(run_id)
        return None if row is None else RunRecord.decode(self.serializer, *row)

    def _unindex(self, old: RunRecord) -> None:
        self._undelivered.discard(old.run_id)
        if old.status == "suspended" and old.wake_at is not None:
            at = bisect.bisect_left(self._due, (old.wake_at, old.run_id))
            if at < len(self._due) and self._due[at] == (old.wake_at, old.run_id):
                del self._due[at]

    def _index(self, old: RunRecord | None, new: RunRecord) -> None:
        if old is not None:
            self._unindex(old)
        if new.status == "suspended" and new.wake_at is not None:
            bisect.insort(self._due, (new.wake_at, new.run_id))
        if new.webhook_pending:
            self._undelivered.add(new.run_id)

    async def _insert(self, record: RunRecord) -> tuple[RunRecord, bool]:
        with self._lock:
            key = record.idempotency_key
            if key is not None and key in self._keys:
                existing = self._load(self._keys[key])
                if existing is not None and existing.status != "failed":
                    return existing, False
            if record.run_id in self._rows:
                msg = f"a run with id {record.run_id!r} already exists."
                raise ValueError(msg)
            self._rows[record.run_id] = (record.encode(self.serializer), record.version)
            if key is not None:
                self._keys[key] = record.run_id
            self._index(None, record)
            return record, True

    async def get(self, run_id: str) -> RunRecord | None:
        with self._lock:
            return self._load(run_id)

    async def _list(
        self,
        statuses: tuple[str, ...] | None,
        thread_id: str | None,
        labels: dict[str, str],
        kind: str | None,
        after: tuple[float, str] | None,
        limit: int,
    ) -> list[RunRecord]:
        with self._lock:
            records = [r for r in map(self._load, list(self._rows)) if r is not None]
        records.sort(key=lambda r: (r.created_at, r.run_id))
        found: list[RunRecord] = []
        for r in records:
            if after is not None and (r.created_at, r.run_id) <= after:
                continue
            if statuses is not None and r.status not in statuses:
                continue
            if thread_id is not None and r.thread_id != thread_id:
                continue
            if kind is not None and r.kind != kind:
                continue
            if any(r.labels.get(k) != v for k, v in labels.items()):
                continue
            found.append(r)
            if len(found) == limit:
                break
        return found

    async def _replace(self, record: RunRecord) -> RunRecord | None:
        with self._lock:
            row = self._rows.get(record.run_id)
            if row is None or row[1] != record.version:
                return None
            old = RunRecord.decode(self.serializer, *row)
            stored = record.replace(version=record.version + 1)
            self._rows[record.run_id] = (stored.encode(self.serializer), stored.version)
            self._index(old, stored)
            return stored

    async def carry(self, ride: RecordRide) -> RideResult:
        stored = None
        if ride.write is not None:
            stored = await self._replace(ride.write)
        if stored is not None:
            return RideResult(stored.version, stored)
        with self._lock:
            row = self._rows.get(ride.run_id)
        return RideResult(None if row is None else row[1])

    async def due(self, before: float, limit: int = 100) -> list[RunRecord]:
        with self._lock:
            ids = [run_id for wake, run_id in self._due[:limit] if wake <= before]
            return [r for r in map(self._load, ids) if r is not None]

    async def undelivered(self, limit: int = 100) -> list[RunRecord]:
        with self._lock:
            found = [r for r in map(self._load, self._undelivered) if r is not None]
        found.sort(key=lambda r: (r.created_at, r.run_id))
        return found[:limit]

    async def next_wake(self) -> float | None:
        with self._lock:
            return self._due[0][0] if self._due else None

    async def renew(self, owner: str, run_ids: Sequence[str], lease_expires_at: float) -> set[str]:
        kept: set[str] = set()
        with self._lock:
            for run_id in run_ids:
                record = self._load(run_id)
                if record is None or record.owner != owner or record.status not in ACTIVE:
                    continue
                stored = record.replace(
                    lease_expires_at=lease_expires_at, version=record.version + 1
                )
                self._rows[run_id] = (stored.encode(self.serializer), stored.version)
                kept.add(run_id)
        return kept

    async def _delete(self, record: RunRecord) -> bool:
        with self._lock:
            current = self._load(record.run_id)
            if current is None or current.status in ACTIVE:
                return False
            del self._rows[current.run_id]
            key = current.idempotency_key
            if key is not None and self._keys.get(key) == current.run_id:
                del self._keys[key]
            self._unindex(current)
            return True

    async def _delete_thread(self, thread_id: str) -> tuple[int, list[RunRecord]]:
        removed = 0
        kept: list[RunRecord] = []
        with self._lock:
            for run_id in list(self._rows):
                record = self._load(run_id)
                if record is None or record.thread_id != thread_id:
                    continue
                if record.status in ACTIVE:
                    kept.append(record)
                    continue
                del self._rows[run_id]
                key = record.idempotency_key
                if key is not None and self._keys.get(key) == run_id:
                    del self._keys[key]
                self._unindex(record)
                removed += 1
        return removed, kept

    async def counts(self) -> dict[str, int]:
        with self._lock:
            records = [r for r in map(self._load, list(self._rows)) if r is not None]
        counts: dict[str, int] = {}
        for r in records:
            if r.kind != "run":
                continue
            counts[r.status] = counts.get(r.status, 0) + 1
            if r.status == "suspended" and r.waiting_for:
                name = f"suspended:{r.waiting_for}"
                counts[name] = counts.get(name, 0) + 1
        return counts
