"""Record rides on SQLite: what the worker thread runs for a ride in a fenced unit.

The fence and the version read are one ``SELECT`` (the unit's ``BEGIN IMMEDIATE`` holds the
database's write lock, so the check needs no write to the lease row): a fenced unit with a ride
runs one statement for both, and still fails whole when the lease is not held or expired.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from tensorsketch.errors import LeaseLostError
from tensorsketch.runtime.backends.base import StoredCheckpoint, StoredEvent
from tensorsketch.runtime.backends.rides import RecordRide, RideResult
from tensorsketch.runtime.backends.runs import RunRecord
from tensorsketch.runtime.backends.sql_runs import _columns
from tensorsketch.runtime.backends.sqlite import SqliteBackend


class Traced(SqliteBackend):
    """Keeps the statements its connection runs (their first words)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.statements: list[str] = []

    def connect(self) -> sqlite3.Connection:
        conn = super().connect()
        conn.set_trace_callback(lambda sql: self.statements.append(" ".join(sql.split()[:3])))
        return conn

    def take(self) -> list[str]:
        """The statements since the last call, without the transaction's own."""
        seen, self.statements = self.statements, []
        skip = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE", "PRAGMA")
        return [s for s in seen if not s.startswith(skip)]


async def _opened(backend: Traced, thread: str) -> RunRecord:
    store = backend.run_store()
    record, _ = await store.create(RunRecord(run_id=f"run-{thread}", thread_id=thread))
    first = StoredCheckpoint(thread, "c0", None, 0, time.time(), b"in")
    assert (await backend.open_thread(thread, "me", 30, first)).created
    backend.take()
    return record


async def test_a_fenced_units_version_read_rides_the_fence(tmp_path: Path) -> None:
    """Journal records and a commit with a ride: the fence returns the version, so the unit
    runs only its own writes and the ride's compare-and-set (no ``SELECT version``)."""
    backend = Traced(tmp_path / "runs.db")
    try:
        record = await _opened(backend, "t")
        reading = RecordRide(record.run_id)
        await backend.record_effects("t", [("k0", b"v0")], fence="me", ride=reading)
        assert backend.take() == [
            "SELECT (SELECT 1",
            "INSERT INTO tensorsketch_effects",
        ]
        assert reading.result == RideResult(record.version)

        writing = RecordRide(record.run_id, record.replace(status="running"))
        await backend.commit_step("t", None, [StoredEvent(0, b"e0")], fence="me", ride=writing)
        assert backend.take() == [
            "SELECT (SELECT 1",
            "INSERT INTO tensorsketch_events",
            "UPDATE tensorsketch_runs SET",
        ]
        assert writing.result == RideResult(record.version + 1, writing.write.replace(version=2))  # type: ignore[union-attr]

        # A stale write loses: the version the fence read is the stored one.
        stale = RecordRide(record.run_id, record.replace(status="failed"))
        await backend.record_effects("t", [("k1", b"v1")], fence="me", ride=stale)
        assert stale.result == RideResult(record.version + 1)
        stored = await backend.run_store().get(record.run_id)
        assert stored is not None and stored.status == "running"

        # A ride for a record that is not stored reads no version.
        missing = RecordRide("no-such-run")
        await backend.record_effects("t", [("k2", b"v2")], fence="me", ride=missing)
        assert missing.result == RideResult(None)
    finally:
        await backend.aclose()


async def test_a_refused_fence_that_reads_undoes_the_whole_unit(tmp_path: Path) -> None:
    backend = Traced(tmp_path / "runs.db")
    try:
        record = await _opened(backend, "t")
        late = RecordRide(record.run_id, record.replace(status="failed"))
        with pytest.raises(LeaseLostError, match="'t'"):
            await backend.commit_step("t", None, [StoredEvent(0, b"e")], fence="them", ride=late)
        with pytest.raises(LeaseLostError):
            await backend.record_effects("t", [("k", b"v")], fence="them", ride=late)
        assert late.result is None
        assert await backend.read_events("t") == []
        assert await backend.list_effects("t") == []
        stored = await backend.run_store().get(record.run_id)
        assert stored is not None and stored.status == "queued" and stored.version == 1
    finally:
        await backend.aclose()


async def test_an_expired_lease_fails_a_fenced_unit_that_reads(tmp_path: Path) -> None:
    backend = Traced(tmp_path / "runs.db")
    try:
        record = await _opened(backend, "t")
        with sqlite3.connect(tmp_path / "runs.db") as conn:  # the lease ran out
            conn.execute("UPDATE tensorsketch_leases SET expires_at = expires_at - 3600")
        reading = RecordRide(record.run_id)
        with pytest.raises(LeaseLostError):
            await backend.record_effects("t", [("k", b"v")], fence="me", ride=reading)
        assert reading.result is None
        assert await backend.list_effects("t") == []
    finally:
        await backend.aclose()


async def test_a_units_journal_records_and_events_are_one_insert(tmp_path: Path) -> None:
    """A batch of up to 16 journal records or events is one multi-row ``INSERT`` (one
    statement, failing whole: the group commit needs no savepoint for it); the first write
    of a key still wins, and a larger batch is written row by row."""
    backend = Traced(tmp_path / "runs.db")
    try:
        await _opened(backend, "t")
        records = [("a", b"1"), ("b", b"2"), ("a", b"3")]
        await backend.record_effects("t", records, fence="me")
        events = [StoredEvent(n, b"e") for n in range(3)]
        await backend.commit_step("t", None, events, fence="me")
        assert backend.take() == [
            "UPDATE tensorsketch_leases SET",
            "INSERT INTO tensorsketch_effects",
            "UPDATE tensorsketch_leases SET",
            "INSERT INTO tensorsketch_events",
        ]
        assert await backend.list_effects("t") == [("a", b"1"), ("b", b"2")]
        many = [(f"k{n:02}", b"v") for n in range(17)]
        await backend.record_effects("t", many, fence="me")
        assert backend.take().count("INSERT INTO tensorsketch_effects") == 17
        assert len(await backend.list_effects("t", prefix="k")) == 17
        await backend.append_events("t", [StoredEvent(n, b"e") for n in range(3, 23)])
        assert [e.seq for e in await backend.read_events("t")] == list(range(23))
    finally:
        await backend.aclose()


async def test_units_that_may_not_hold_the_write_lock_keep_the_writing_fence(
    tmp_path: Path,
) -> None:
    """A subclass that begins its units another way gets the fence that touches the lease row
    and a version read of its own, with the same results."""

    class Deferred(Traced):
        begin_sql = "BEGIN"

    backend = Deferred(tmp_path / "runs.db")
    try:
        record = await _opened(backend, "t")
        reading = RecordRide(record.run_id)
        await backend.record_effects("t", [("k", b"v")], fence="me", ride=reading)
        assert backend.take() == [
            "UPDATE tensorsketch_leases SET",
            "INSERT INTO tensorsketch_effects",
            "SELECT version FROM",
        ]
        assert reading.result == RideResult(record.version)
    finally:
        await backend.aclose()


async def test_a_folded_opening_knows_the_version_it_inserted(tmp_path: Path) -> None:
    """A folded submit's opening stores the record itself, so it reads no ``SELECT
    version``: the ride's result is the version of the ``running`` record it inserted where
    the run took the thread, or the queued insert's."""
    backend = Traced(tmp_path / "runs.db")
    try:
        await _opened(backend, "warm")  # the run tables exist: the backend carries rides
        results = []
        for thread, owner in (("t", "me"), ("t", "me"), ("u", "me")):
            n = len(results)
            queued = RunRecord(run_id=f"run-{n}", thread_id=thread, owner=owner, version=1)
            ride = RecordRide(queued.run_id, queued.replace(status="running"), insert=queued)
            first = StoredCheckpoint(thread, f"c{n}", None, 0, time.time(), b"in")
            opening = await backend.open_thread(thread, owner, 30, first, ride=ride)
            statements = backend.take()
            assert "SELECT version FROM" not in statements
            results.append((opening.acquired, ride.result))
        store = backend.run_store()
        taken, behind, other = results
        # The first run heads its thread's queue: its `running` write won.
        assert taken[0] and taken[1] is not None and taken[1].version == 2
        assert taken[1].stored is not None and taken[1].stored.status == "running"
        # The second waits behind it, stored as inserted.
        assert behind == (False, RideResult(1))
        # A thread of its own: taken, though its lease owner is the same.
        assert other[0] and other[1] is not None and other[1].version == 2
        for run_id, status, version in (("run-0", "running", 2), ("run-1", "queued", 1)):
            stored = await store.get(run_id)
            assert stored is not None and (stored.status, stored.version) == (status, version)
    finally:
        await backend.aclose()


async def test_a_folded_openings_writes_ask_whether_the_statement_before_wrote(
    tmp_path: Path,
) -> None:
    """The run's insert is made iff the lease's statement wrote (it took the lease and no run
    is ahead), the input checkpoint iff the insert was: ``changes()``, not the lease, the
    queue and the run looked up again. A run that waits stores neither its running record nor
    its input, even with the thread's lease already its owner's."""
    backend = Traced(tmp_path / "runs.db")
    texts: list[str] = []
    try:
        await _opened(backend, "warm")
        assert backend._connection is not None
        backend._connection.set_trace_callback(texts.append)
        for n in range(2):
            queued = RunRecord(run_id=f"run-{n}", thread_id="t", owner="me", version=1)
            ride = RecordRide(queued.run_id, queued.replace(status="running"), insert=queued)
            first = StoredCheckpoint("t", f"c{n}", None, 0, time.time(), b"in")
            opening = await backend.open_thread("t", "me", 30, first, ride=ride)
            assert opening.acquired == (n == 0) and opening.created == (n == 0)
        writes = [
            t
            for t in texts
            if t.startswith(
                ("INSERT INTO tensorsketch_runs", "INSERT INTO tensorsketch_checkpoints")
            )
        ]
        assert writes and all(t.endswith("changes() = 1") for t in writes[:2])
        assert all("tensorsketch_leases" not in t for t in writes[:2])
        assert [c.checkpoint_id for c in await backend.list_checkpoints("t")] == ["c0"]
        stored = await backend.run_store().get("run-1")
        assert stored is not None and stored.status == "queued"
    finally:
        await backend.aclose()


async def test_a_records_writes_spell_its_nulls_out(tmp_path: Path) -> None:
    """A run's insert and compare-and-set writes bind no ``None`` (``sqlite3`` adapts each
    bound ``None`` through its adapter registry): those columns are ``NULL`` in the
    statement's text, one text per pattern of nulls, and the row holds what the record says."""
    backend = Traced(tmp_path / "runs.db")
    try:
        record = await _opened(backend, "t")
        store = backend.run_store()
        queued = RunRecord(run_id="run-x", thread_id="t", owner="me", version=1)
        cols = _columns(queued, store.serializer)  # type: ignore[attr-defined]
        insert = store._insert_query(cols)  # type: ignore[attr-defined]
        assert None not in insert.params and "NULL" in insert.sql
        await backend.run_queries("inserting", [insert])
        writes = [
            record.replace(status="running", owner="me", lease_expires_at=5.0),
            record.replace(status="suspended", waiting_for="timer", wake_at=9.0, version=2),
            record.replace(status="succeeded", version=3),
        ]
        texts = set()
        for write in writes:
            q = store._replace_query(write, version=write.version + 1)  # type: ignore[attr-defined]
            assert None not in q.params
            texts.add(q.sql)
            stored = await store._replace(write)  # type: ignore[attr-defined]
            assert stored is not None and stored.version == write.version + 1
            with sqlite3.connect(tmp_path / "runs.db") as conn:
                row = conn.execute(
                    "SELECT status, waiting_for, wake_at, owner, lease_expires_at, version "
                    "FROM tensorsketch_runs WHERE run_id = ?",
                    (record.run_id,),
                ).fetchone()
            wake = write.wake_at if write.status == "suspended" else None
            expected = (write.status, write.waiting_for, wake, write.owner)
            assert row == (*expected, write.lease_expires_at, write.version + 1)
        assert len(texts) == 3
        got = await store.get("run-x")
        assert got is not None and (got.status, got.owner, got.idempotency_key) == (
            "queued",
            "me",
            None,
        )
    finally:
        await backend.aclose()
