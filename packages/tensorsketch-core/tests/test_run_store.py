"""The run store conformance suite on the two stores core ships, and the capability check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.runs import (
    RunRecord,
    RunStoreUnsupportedError,
    owner_is_dead,
    run_store,
)
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.serializers import MsgpackSerializer
from tensorsketch.testing.backend_conformance import BackendFactory, CountingBackend
from tensorsketch.testing.run_store_conformance import RunStoreConformance


class TestInMemoryRuns(RunStoreConformance):
    @pytest.fixture
    def backend_factory(self) -> BackendFactory:
        shared = InMemoryBackend()
        return lambda **kwargs: shared


class TestSqliteRuns(RunStoreConformance):
    @pytest.fixture
    def backend_factory(self, tmp_path: Path) -> BackendFactory:
        def make(**kwargs: Any) -> Backend:
            return SqliteBackend(tmp_path / "runs.db", **kwargs)

        return make


def test_a_backend_without_a_run_store_gets_a_clear_error() -> None:
    # CountingBackend implements only the documented operations (a backend from the docs).
    backend = CountingBackend(InMemoryBackend())
    with pytest.raises(RunStoreUnsupportedError, match=r"has no run store.*SqliteBackend"):
        run_store(backend)


@pytest.mark.asyncio
async def test_the_sqlite_run_tables_carry_a_layout_version(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path / "v.db")
    await run_store(backend).create(RunRecord(run_id="r1", thread_id="t"))
    await backend.aclose()
    import sqlite3

    with sqlite3.connect(tmp_path / "v.db") as conn:
        rows = dict(conn.execute("SELECT component, version FROM tensorsketch_schema_version"))
        conn.execute("UPDATE tensorsketch_schema_version SET version = 99 WHERE component='runs'")
    assert rows["runs"] == 1
    assert rows["durable"] >= 2
    again = SqliteBackend(tmp_path / "v.db")
    with pytest.raises(Exception, match="layout version 99"):
        await run_store(again).get("r1")
    await again.aclose()


def test_owner_liveness_is_judged_only_on_this_host() -> None:
    import os
    import socket
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    host = socket.gethostname()
    assert owner_is_dead(f"{host}:{child.pid}:x")
    assert not owner_is_dead(f"{host}:{os.getpid()}:x")
    assert not owner_is_dead(f"some-other-host:{child.pid}:x")
    assert not owner_is_dead("not-an-owner-id")


def test_a_record_copy_changes_only_what_it_names_and_refuses_unknown_fields() -> None:
    """``RunRecord.replace`` (a run's record changes about ten times) keeps every other
    field, names a field it does not have, and ``encode(version=...)`` stores the record
    under a version without a copy."""
    record = RunRecord(run_id="r", thread_id="t", labels={"a": "b"}, attempts=2, version=4)
    changed = record.replace(status="running", owner="me")
    assert changed.to_dict() == {**record.to_dict(), "status": "running", "owner": "me"}
    assert record.status == "queued"
    with pytest.raises(TypeError, match="no field 'stauts'"):
        record.replace(stauts="running")
    serializer = MsgpackSerializer()
    stored = RunRecord.decode(serializer, record.encode(serializer, version=5), 5)
    assert stored == record.replace(version=5)
    assert serializer.loads(record.encode(serializer, version=5))["version"] == 5
