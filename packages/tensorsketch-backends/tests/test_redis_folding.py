"""The folded submit on Redis (``RedisBackend.folds_submits``, #49 item 1): core's scenarios
of ``tests/test_runs_folding.py`` run here against the real server, plus what is Redis's own —
a runner run sends the invoke's commands, and the opening's one script is all or nothing."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from tensorsketch.runs import AsyncRunner, RunRecord
from tensorsketch.runtime.backends.base import Backend, StoredCheckpoint
from tensorsketch.runtime.backends.redis import RedisBackend
from tensorsketch.runtime.backends.rides import RecordRide
from tensorsketch.testing.runs import one_node_graph

pytestmark = pytest.mark.redis


def _core_scenarios() -> Any:
    """Core's folding tests, loaded by path (they are no package): their runner fixture and
    the scenarios that take any backend run here with :func:`backend` below."""
    path = Path(__file__).parents[2] / "tensorsketch-core" / "tests" / "test_runs_folding.py"
    name = "tensorsketch_core_test_runs_folding"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return module


_core = _core_scenarios()
Step = _core.Step
Openings = _core.Openings
runner = _core.runner
for _name in (
    "test_listeners_hear_a_folded_run_queued_then_running",
    "test_a_submit_with_a_key_or_labels_keeps_its_own_insert",
    "test_a_folded_run_behind_another_on_its_thread_stays_queued_and_waits",
    "test_a_folded_run_whose_thread_lease_is_held_elsewhere_waits_for_it",
    "test_an_opening_that_fails_before_storing_leaves_submit_to_store_the_run",
    "test_an_opening_that_stored_the_run_but_never_answered_is_found_not_doubled",
    "test_a_runner_closed_while_a_fold_is_in_flight_leaves_one_run",
    "test_enqueue_on_a_thread_busy_here_is_not_folded_and_runs_after",
    "test_enqueue_on_a_thread_busy_in_another_runner_folds_and_waits_its_turn",
    "test_a_wrong_guess_is_corrected_before_the_run_goes_on",
    "test_a_backend_that_ignores_the_insert_is_caught_and_the_run_stored_once",
    "test_a_folded_run_that_meets_a_busy_thread_later_retries_as_any_run",
):
    globals()[_name] = getattr(_core, _name)


@pytest.fixture
async def backend(redis_url: str, redis_prefix: str) -> AsyncIterator[Backend]:
    store = RedisBackend(redis_url, prefix=redis_prefix)
    yield store
    await store.aclose()


def _recording_client(url: str) -> tuple[aioredis.Redis, list[str]]:
    """A real client whose connections note the name of every command they send."""
    sent: list[str] = []

    class Recording(aioredis.Connection):
        async def send_command(self, *args: Any, **kwargs: Any) -> None:
            sent.append(str(args[0]).upper())
            await super().send_command(*args, **kwargs)

    pool = aioredis.ConnectionPool.from_url(url, connection_class=Recording)
    return aioredis.Redis(connection_pool=pool), sent


async def test_a_runner_run_sends_the_invokes_commands(redis_url: str, redis_prefix: str) -> None:
    """The submit's insert rides the run's opening: a runner run costs the direct invoke's
    round trips (it cost one more), and ``submit`` returns the record as stored."""
    client, sent = _recording_client(redis_url)
    backend = RedisBackend(client=client, prefix=redis_prefix)
    graph = one_node_graph(Step, "step")
    tasks = AsyncRunner(graph, backend=backend)
    try:
        warm = await tasks.submit({"n": 1}, thread_id="warm")  # loads the scripts
        await tasks.await_run(warm.run_id, timeout=30)
        await graph.invoke({"n": 1}, thread_id="warm-invoke", backend=backend)
        sent.clear()
        await graph.invoke({"n": 2}, thread_id=f"i-{uuid.uuid4().hex[:8]}", backend=backend)
        invoked = [c for c in sent if c != "SCRIPT LOAD"]
        sent.clear()
        record = await tasks.submit({"n": 2}, thread_id=f"r-{uuid.uuid4().hex[:8]}")
        assert (record.status, record.version) == ("queued", 1)
        done = await tasks.await_run(record.run_id, timeout=30)
        ran = [c for c in sent if c != "SCRIPT LOAD"]
    finally:
        await tasks.aclose()
        await backend.aclose()
        await client.aclose()
    assert done.status == "succeeded" and done.output["out"] == "did 2"
    assert len(ran) == len(invoked) and set(ran) == {"EVALSHA"}


async def test_a_folded_opening_is_one_command_and_stores_the_run_as_create_does(
    redis_url: str, redis_prefix: str
) -> None:
    """One ``EVALSHA`` stores the record, its indexes and counts exactly as
    ``RedisRunStore.create`` does (same keys, same hash fields), then the lease, the input
    checkpoint and ``running``; a refused insert (its id taken) writes nothing at all."""
    client, sent = _recording_client(redis_url)
    backend = RedisBackend(client=client, prefix=redis_prefix)
    store = backend.run_store()
    plain = aioredis.Redis.from_url(redis_url)
    try:
        at = time.time()

        def new(run_id: str, thread: str) -> RunRecord:
            return RunRecord(
                run_id=run_id, thread_id=thread, owner="me", lease_expires_at=at + 30
            ).replace(created_at=at, updated_at=at, version=1)

        await store.create(new("run-created", "t-created"))
        assert backend.folds_submits
        folded = new("run-folded", "t-folded")
        ride = RecordRide(folded.run_id, None, insert=folded)  # no write: compare the insert
        cp = StoredCheckpoint("t-folded", "c0", None, 0, at, b"in")
        await backend.open_thread("t-folded", "me", 30, cp, ride=ride)  # loads the script
        sent.clear()
        again = RecordRide(folded.run_id, folded.replace(status="running"), insert=folded)
        with pytest.raises(Exception, match="TSRUNEXISTS"):
            await backend.open_thread("t-other", "me", 30, cp, ride=again)
        assert sent == ["EVALSHA"]
        assert await plain.exists(f"{redis_prefix}:{{t-other}}:lease") == 0
        assert (await store.get(folded.run_id)).status == "queued"  # type: ignore[union-attr]
        base = f"{redis_prefix}:{{runs}}:"
        mine = await plain.hgetall(base + "rec:run-folded")
        theirs = await plain.hgetall(base + "rec:run-created")
        assert sorted(mine) == sorted(theirs)
        for field in (b"ver", b"status", b"kind", b"wake", b"waiting", b"owner"):
            assert mine[field] == theirs[field]
        assert mine[b"rec"] == folded.encode(store.serializer)
        for index in ("all", "kind:run", "status:queued"):
            members = await plain.zrange(base + index, 0, -1)
            assert {b"run-folded", b"run-created"} <= set(members)
        assert await plain.zrange(base + "thread:t-folded", 0, -1) == [b"run-folded"]
        assert await plain.hget(base + "counts", "queued") == b"2"
    finally:
        await plain.aclose()
        await backend.aclose()
        await client.aclose()


async def test_a_server_that_lost_its_scripts_has_them_loaded_again(
    redis_url: str, redis_prefix: str
) -> None:
    """After a restart or a ``SCRIPT FLUSH`` the server answers ``NOSCRIPT`` to every script
    the backend called by SHA: the folded opening and the rides load theirs again and the run
    goes on, once. Simulated by pointing the remembered SHAs at a script the server never
    saw (a real flush of the shared test server would reach other tests' connections)."""
    client, sent = _recording_client(redis_url)
    backend = RedisBackend(client=client, prefix=redis_prefix)
    graph = one_node_graph(Step, "step")
    tasks = AsyncRunner(graph, backend=backend)
    unknown = hashlib.sha1(uuid.uuid4().bytes).hexdigest()  # a SHA no script has
    try:
        warm = await tasks.submit({"n": 1}, thread_id=f"w-{uuid.uuid4().hex[:8]}")
        await tasks.await_run(warm.run_id, timeout=30)
        cached = (backend._carrier_shas, backend._fenced_carrier_shas, backend._reader_shas)
        remembered = {source: sha for shas in cached for source, sha in shas.items()}
        assert backend._carrier_shas and backend._fenced_carrier_shas  # opening, last ride
        for shas in cached:
            for source in shas:
                shas[source] = unknown
        sent.clear()
        record = await tasks.submit({"n": 2}, thread_id=f"r-{uuid.uuid4().hex[:8]}")
        done = await tasks.await_run(record.run_id, timeout=30)
        runs = await tasks.list(thread_id=record.thread_id)
    finally:
        await tasks.aclose()
        await backend.aclose()
        await client.aclose()
    assert done.status == "succeeded" and done.output["out"] == "did 2"
    assert [r.run_id for r in runs.records] == [record.run_id]
    assert "SCRIPT LOAD" in sent
    again = {source: sha for shas in cached for source, sha in shas.items()}
    assert unknown not in again.values()
    assert {again[s] for s in again if s in remembered} <= set(remembered.values())
