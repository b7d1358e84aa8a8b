"""The run table's indexes on SQLite: what each write maintains and which query reads which.

The status index is partial (``status <> 'succeeded'``): a run that succeeded leaves it, and
the queries that need it still read it (``EXPLAIN QUERY PLAN``). A store made with the old full
``runs_by_status`` index loses that index on its next start.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tensorsketch.runtime.backends.runs import RunRecord
from tensorsketch.runtime.backends.sqlite import SqliteBackend


class Traced(SqliteBackend):
    """Keeps the list queries its connection runs, to explain them afterwards."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.listings: list[str] = []

    def connect(self) -> sqlite3.Connection:
        conn = super().connect()
        conn.set_trace_callback(self._seen)
        return conn

    def _seen(self, sql: str) -> None:
        if sql.startswith("SELECT version, lease_expires_at, record FROM tensorsketch_runs"):
            self.listings.append(sql)


def _indexes(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = "
            "'tensorsketch_runs' AND sql IS NOT NULL"
        )
        return {str(name): str(sql) for name, sql in rows}


def _plan(path: Path, sql: str) -> str:
    with sqlite3.connect(path) as conn:
        return " ".join(str(row[-1]) for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))


def _entries(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        sql = (
            "SELECT status, run_id FROM tensorsketch_runs INDEXED BY "
            "tensorsketch_runs_not_succeeded WHERE status <> 'succeeded' ORDER BY run_id"
        )
        return list(conn.execute(sql))


async def test_a_succeeded_run_leaves_the_status_index(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path / "runs.db")
    store = backend.run_store()
    try:
        for n, status in enumerate(("queued", "running", "failed", "suspended")):
            await store.create(RunRecord(run_id=f"r{n}", thread_id="t", status=status))  # type: ignore[arg-type]
        ok, _ = await store.create(RunRecord(run_id="r9", thread_id="t"))
        running = await store.transition(ok.run_id, lambda r: r.replace(status="running"))
        assert running is not None
        assert ("running", "r9") in _entries(tmp_path / "runs.db")
        await store.transition(ok.run_id, lambda r: r.replace(status="succeeded"))
    finally:
        await backend.aclose()
    assert _entries(tmp_path / "runs.db") == [
        ("queued", "r0"),
        ("running", "r1"),
        ("failed", "r2"),
        ("suspended", "r3"),
    ]
    assert set(_indexes(tmp_path / "runs.db")) == {
        "tensorsketch_runs_not_succeeded",
        "tensorsketch_runs_by_thread",
        "tensorsketch_runs_by_created",
        "tensorsketch_runs_due",
        "tensorsketch_runs_undelivered",
    }


async def test_the_queries_that_need_an_index_read_one(tmp_path: Path) -> None:
    """The orphan sweep (active runs, any thread) and a listing of failed runs read the
    partial status index; a listing of succeeded runs, or of every run, the creation-order
    index; a thread's queue head the thread index. None scans the table."""
    path = tmp_path / "runs.db"
    backend = Traced(path)
    store = backend.run_store()
    try:
        await store.create(RunRecord(run_id="r0", thread_id="t"))
        await store.orphans(now=0.0)
        await store.list(status="failed", kind="run")
        await store.list(status=["suspended", "queued"], thread_id="t")
        await store.list(status="succeeded")
        await store.list()
    finally:
        await backend.aclose()
    orphans, failed, waiting, succeeded, every = backend.listings
    assert "USING INDEX tensorsketch_runs_not_succeeded" in _plan(path, orphans)
    assert "USING INDEX tensorsketch_runs_not_succeeded" in _plan(path, failed)
    assert "USING INDEX" in _plan(path, waiting)
    assert "USING INDEX tensorsketch_runs_by_created" in _plan(path, succeeded)
    assert "USING INDEX tensorsketch_runs_by_created" in _plan(path, every)
    head = (
        "SELECT run_id FROM tensorsketch_runs WHERE thread_id = 't' AND kind = 'run' AND "
        "status IN ('queued', 'running') ORDER BY created_at, run_id LIMIT 1"
    )
    assert "USING INDEX tensorsketch_runs_by_thread" in _plan(path, head)


async def test_a_store_with_the_full_status_index_loses_it(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    backend = SqliteBackend(path)
    await backend.run_store().create(RunRecord(run_id="r0", thread_id="t"))
    await backend.aclose()
    with sqlite3.connect(path) as conn:  # as an earlier build left it
        conn.execute("DROP INDEX tensorsketch_runs_not_succeeded")
        conn.execute(
            "CREATE INDEX tensorsketch_runs_by_status ON tensorsketch_runs "
            "(status, created_at, run_id)"
        )
    backend = SqliteBackend(path)
    try:
        store = backend.run_store()
        assert (await store.get("r0")) is not None
        indexes = _indexes(path)
        assert "tensorsketch_runs_by_status" not in indexes
        assert "WHERE status <> 'succeeded'" in indexes["tensorsketch_runs_not_succeeded"]
        assert [r.run_id for r in (await store.list(status="queued")).records] == ["r0"]
    finally:
        await backend.aclose()


@pytest.mark.parametrize("status", ["queued", "succeeded"])
async def test_listing_by_status_finds_the_same_runs_either_way(
    tmp_path: Path, status: str
) -> None:
    backend = SqliteBackend(tmp_path / "runs.db")
    store = backend.run_store()
    try:
        for n in range(6):
            kept = "queued" if n % 2 else "succeeded"
            await store.create(RunRecord(run_id=f"r{n}", thread_id=f"t{n % 3}", status=kept))  # type: ignore[arg-type]
        found = [r.run_id for r in (await store.list(status=status)).records]
        assert found == [f"r{n}" for n in range(6) if (n % 2 == 1) == (status == "queued")]
    finally:
        await backend.aclose()
