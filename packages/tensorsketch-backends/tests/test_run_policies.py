"""Issue #46's run policies on PostgreSQL and Redis, with runners in this process that share
one store through backend objects of their own: double-texting racing several threads, a
cron schedule fired once per tick by three runners, with its history, and thread retention (the HTTP side of
double-texting: tensorsketch-serve's tests/test_tasks_multitask.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tensorsketch.runs import AsyncRunner, Retention, RunConflictError, RunRecord, Scheduler
from tensorsketch.runs.retention import sweep
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.postgres import PostgresBackend
from tensorsketch.runtime.backends.redis import RedisBackend
from tensorsketch.testing.runs import (
    check_double_texting,
    check_run_durability,
    durability_graph,
    multitask_graph,
    ticks_of,
)


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def make_backend(request: pytest.FixtureRequest) -> Callable[[], Backend]:
    if request.param == "postgres":
        dsn, schema = request.getfixturevalue("pg_dsn"), request.getfixturevalue("pg_schema")
        return lambda: PostgresBackend(dsn, schema=schema, lease_ttl=2.0)
    url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
    return lambda: RedisBackend(url, prefix=prefix, lease_ttl=2.0)


@pytest.fixture
async def runner_for(make_backend: Callable[[], Backend]) -> AsyncIterator[Callable[..., Any]]:
    made: list[AsyncRunner] = []

    def build(**options: Any) -> AsyncRunner:
        runner = AsyncRunner(
            multitask_graph(),
            backend=make_backend(),
            timer_refresh=0.1,
            poll_interval=0.05,
            **options,
        )
        made.append(runner)
        return runner

    yield build
    for runner in made:
        await runner.aclose()
        await runner.backend.aclose()


@pytest.mark.parametrize("strategy", ["reject", "enqueue", "interrupt", "rollback"])
async def test_racing_inputs_keep_each_policys_promise(
    runner_for: Callable[..., AsyncRunner], strategy: str
) -> None:
    runner = runner_for(concurrency=4, multitask_strategy=strategy)
    threads = [f"race-{i}" for i in range(3)]

    async def send(thread: str, tag: str) -> RunRecord | None:
        try:
            return await runner.submit({"tag": tag}, thread_id=thread)
        except RunConflictError:
            return None

    sent = await asyncio.gather(*(send(t, tag) for tag in "abcd" for t in threads))
    done = [await runner.await_run(r.run_id, timeout=120) for r in sent if r is not None]
    for thread in threads:
        mine = [d.to_dict() for d in done if d.thread_id == thread]
        state = await runner.graph.aget_state(thread, runner.backend)
        check_double_texting(strategy, mine, ticks_of(state))


async def test_a_cron_tick_fires_once_across_three_runners(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runners = [runner_for() for _ in range(3)]
    # February only: the test makes the tick due itself; a real 09:00 passing while it runs
    # would be a second firing it does not expect.
    handle = await Scheduler(runners[0]).cron("0 9 * feb mon-fri", {"tag": "c"}, timezone="UTC")
    for runner in runners:
        await runner.start()
    store = runners[0].store

    def due(current: RunRecord) -> RunRecord:
        return current.replace(wake_at=time.time() - 0.01)

    assert await store.transition(handle.id, due) is not None
    for _ in range(1200):  # up to 60 s: a loaded machine took more than 10 once
        current = await store.get(handle.id)
        assert current is not None
        if current.wake_at and current.wake_at > time.time():
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # every timer loop has looked at the tick
    page = await handle.history()
    current = await store.get(handle.id)
    assert current is not None
    assert len(page.records) == 1
    assert current.schedule is not None and current.schedule["fired"] == 1
    nxt = dt.datetime.fromtimestamp(current.wake_at or 0, dt.UTC)
    assert (nxt.hour, nxt.minute) == (9, 0) and nxt.isoweekday() <= 5
    done = await runners[1].await_run(page.records[0].run_id, timeout=30)
    assert done.status == "succeeded"
    await handle.cancel()


async def test_retention_deletes_idle_threads_and_prunes_the_rest(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for()
    backend = runner.backend
    for thread in ("old", "fresh"):
        record = await runner.submit({"tag": "a"}, thread_id=thread)
        await runner.await_run(record.run_id, timeout=30)
    report = await sweep(backend, Retention(idle_days=2), at=time.time() + 3 * 86_400)
    assert sorted(report.deleted) == ["fresh", "old"]
    assert await backend.list_checkpoints("old") == []
    assert await backend.read_events("old") == []
    assert (await runner.list(thread_id="old")).records == []
    record = await runner.submit({"tag": "b"}, thread_id="kept")
    await runner.await_run(record.run_id, timeout=30)
    report = await sweep(backend, Retention(idle_days=2, keep_checkpoints=2))
    assert report.deleted == [] and set(report.pruned) == {"kept"}
    assert len(await backend.list_checkpoints("kept")) == 2
    state = await runner.graph.aget_state("kept", backend)
    assert ticks_of(state) == ["b0", "b1", "b2"]


async def test_submit_durability_is_kept_by_the_record_for_every_segment(
    make_backend: Callable[[], Backend],
) -> None:
    """submit(durability=...) on PostgreSQL and Redis: two runners with backends of their
    own; the mode is in the stored record, so the resume and the takeover use it (core's
    test_runs.py runs the same check on the in-memory store and SQLite)."""
    runners = [
        AsyncRunner(
            durability_graph(), backend=make_backend(), timer_refresh=0.1, poll_interval=0.05
        )
        for _ in range(2)
    ]
    try:
        await check_run_durability(*runners)
    finally:
        for runner in runners:
            await runner.aclose()
            await runner.backend.aclose()
