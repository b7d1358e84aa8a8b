"""The run store conformance suite on the two stores core ships, and the capability check."""

from __future__ import annotations

import dataclasses
import pickle
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
from tensorsketch.serializers import JsonSerializer, MsgpackSerializer
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


def test_every_field_is_copied_read_and_encoded() -> None:
    """A copy, the field values a record hands its writers and its encoding each carry every
    field (written out field by field, compiled once: one a copy left behind would come back
    at its default). Each field here holds a value of its own, none at its default."""
    values: dict[str, Any] = {f.name: [f.name] for f in dataclasses.fields(RunRecord)}
    for name in ("interrupts", "events", "steering"):  # tuples of mappings
        values[name] = ({"field": name},)
    values["version"] = 7
    record = RunRecord(**values)
    copy = record.replace(attempts=9)
    for f in dataclasses.fields(RunRecord):
        assert getattr(copy, f.name) is (9 if f.name == "attempts" else values[f.name]), f.name
    plain = {k: list(v) if type(v) is tuple else v for k, v in values.items()}
    assert record.to_dict() == plain
    serializer = MsgpackSerializer()
    assert serializer.loads(record.encode(serializer)) == plain


#: A record as the encoder wrote it before it left out default fields: every field, in
#: msgpack and in JSON (bytes captured from that encoder).
_OLD_MSGPACK = bytes.fromhex(
    "c1de0027a672756e5f6964a572756e5f31a97468726561645f6964a174a56772617068a167a6737461747573"
    "a973757370656e646564a46b696e64a372756ea5696e70757481a171920102a66f7574707574c0ab77616974"
    "696e675f666f72a8617070726f76616ca777616b655f6174c0aa696e74657272757074739182a26964a26931"
    "a46b696e64a8617070726f76616ca96465636973696f6e7381a2693081a8617070726f766564c3a66576656e"
    "74739181a26964a26531b364656c6976657265645f6576656e745f69647391a26530af6964656d706f74656e"
    "63795f6b6579c0a56f776e6572c0b06c656173655f657870697265735f6174c0aa637265617465645f6174cb"
    "3ff8000000000000aa757064617465645f6174cb4004000000000000aa737461727465645f6174cb3ffc0000"
    "00000000ac73757370656e6465645f6174cb4004000000000000ab66696e69736865645f6174c0a56572726f"
    "72c0a66c6162656c7381a47465616da161a8617474656d70747301af626173655f636865636b706f696e74a0"
    "a966697273745f73657100ae6163746976655f7365636f6e6473cb3fd0000000000000b27365676d656e745f"
    "737461727465645f6174c0a87363686564756c65c0b26d756c74697461736b5f7374726174656779c0ae7374"
    "6f705f726571756573746564c0aa73746f707065645f6279c0a7776562686f6f6bc0b0776562686f6f6b5f64"
    "656c6976657279c0a87374656572696e679183a373657101a7636f6e74656e74a26869a26174cb4000000000"
    "000000ae7374656572696e675f74616b656e01a9617373697374616e74c0aa6475726162696c697479a47379"
    "6e63a776657273696f6e03"
)
_OLD_JSON = (
    b'{"run_id":"run_1","thread_id":"t","graph":"g","status":"suspended","kind":"run","input'
    b'":{"q":[1,2]},"output":null,"waiting_for":"approval","wake_at":null,"interrupts":[{"id'
    b'":"i1","kind":"approval"}],"decisions":{"i0":{"approved":true}},"events":[{"id":"e1"}]'
    b',"delivered_event_ids":["e0"],"idempotency_key":null,"owner":null,"lease_expires_at":n'
    b'ull,"created_at":1.5,"updated_at":2.5,"started_at":1.75,"suspended_at":2.5,"finished_a'
    b't":null,"error":null,"labels":{"team":"a"},"attempts":1,"base_checkpoint":"","first_se'
    b'q":0,"active_seconds":0.25,"segment_started_at":null,"schedule":null,"multitask_strate'
    b'gy":null,"stop_requested":null,"stopped_by":null,"webhook":null,"webhook_delivery":nul'
    b'l,"steering":[{"seq":1,"content":"hi","at":2.0}],"steering_taken":1,"assistant":null,"'
    b'durability":"sync","version":3}'
)


def _old_record() -> RunRecord:
    """The record :data:`_OLD_MSGPACK` and :data:`_OLD_JSON` hold."""
    return RunRecord(
        run_id="run_1",
        thread_id="t",
        graph="g",
        status="suspended",
        input={"q": [1, 2]},
        waiting_for="approval",
        interrupts=({"id": "i1", "kind": "approval"},),
        decisions={"i0": {"approved": True}},
        events=({"id": "e1"},),
        delivered_event_ids=("e0",),
        created_at=1.5,
        updated_at=2.5,
        started_at=1.75,
        suspended_at=2.5,
        labels={"team": "a"},
        attempts=1,
        base_checkpoint="",
        first_seq=0,
        active_seconds=0.25,
        steering=({"seq": 1, "content": "hi", "at": 2.0},),
        steering_taken=1,
        version=3,
    )


@pytest.mark.parametrize(
    "serializer", [MsgpackSerializer(), JsonSerializer()], ids=["msgpack", "json"]
)
def test_records_stored_with_every_field_still_load(serializer: Any) -> None:
    """Records written before the encoder left out default fields (every field stored)
    decode as they did, with either serializer; and the new, shorter encoding of the same
    record decodes to the same record."""
    record = _old_record()
    assert RunRecord.decode(serializer, _OLD_MSGPACK, 3) == record
    assert RunRecord.decode(serializer, _OLD_JSON, 3) == record
    assert RunRecord.decode(serializer, _OLD_JSON, 7, 9.5) == record.replace(
        version=7, lease_expires_at=9.5
    )
    again = record.encode(serializer)
    assert len(again) < len(_OLD_MSGPACK if serializer.name == "msgpack" else _OLD_JSON)
    assert RunRecord.decode(serializer, again, 3) == record


@pytest.mark.parametrize(
    "serializer", [MsgpackSerializer(), JsonSerializer()], ids=["msgpack", "json"]
)
def test_a_record_is_stored_without_its_fields_at_their_defaults(serializer: Any) -> None:
    """A new run's record has some forty fields, nearly all at their defaults: only the
    others are encoded (what each of a run's record writes serializes), and decoding
    restores the rest."""
    record = RunRecord(run_id="r", thread_id="t", owner="me", lease_expires_at=5.0, version=1)
    stored = serializer.loads(record.encode(serializer, version=2))
    assert set(stored) - {"decisions", "labels"} == {
        "run_id",
        "thread_id",
        "owner",
        "lease_expires_at",
        "version",
    }
    assert stored["version"] == 2
    assert RunRecord.decode(serializer, record.encode(serializer), 1) == record
    # A value that merely equals its default is written, never compared (no __eq__ runs).
    equal = record.replace(graph="".join([]), steering_taken=0)
    assert RunRecord.decode(serializer, equal.encode(serializer), 1) == equal


def test_copying_or_decoding_a_record_runs_no_frozen_init(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The frozen ``__init__`` stores each of the forty fields with a call of its own; a
    copy (about ten a run) and a decoded record are built without it, yet are the same
    frozen records."""
    record = RunRecord(run_id="r", thread_id="t", labels={"a": "b"}, version=4)
    serializer = MsgpackSerializer()
    data = record.encode(serializer)
    init = RunRecord.__init__
    calls = []

    def counted(self: RunRecord, *args: Any, **kwargs: Any) -> None:
        calls.append(1)
        init(self, *args, **kwargs)

    monkeypatch.setattr(RunRecord, "__init__", counted)
    changed = record.replace(status="running", owner="me")
    decoded = RunRecord.decode(serializer, data, 6, 2.0)
    assert calls == []
    monkeypatch.undo()
    assert type(changed) is RunRecord and type(decoded) is RunRecord
    assert changed == RunRecord(
        run_id="r", thread_id="t", labels={"a": "b"}, version=4, status="running", owner="me"
    )
    assert decoded == record.replace(version=6, lease_expires_at=2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        changed.status = "queued"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(changed)) == changed
    assert RunRecord.from_dict({"run_id": "r", "thread_id": "t", "unknown": 1}) == RunRecord(
        run_id="r", thread_id="t"
    )
