"""Double-texting through the task API (``multitask_strategy`` on POST /tasks and POST
/runs, or the runner's default) on SQLite, PostgreSQL and Redis: a test per policy, and
racing inputs on several threads whose final states keep each policy's promise. Real uvicorn,
real httpx clients."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.serve import task_app
from tensorsketch.testing.runs import check_double_texting, multitask_graph, ticks_of
from tensorsketch.testing.services import private_name

STORES = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("redis", marks=pytest.mark.redis),
]


@pytest.fixture(params=STORES)
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """Backends on a store private to this test (SQLite file, PostgreSQL schema, Redis
    prefix), dropped after."""
    if request.param == "sqlite":
        yield lambda: SqliteBackend(tmp_path / "runs.db", lease_ttl=2.0)
        return
    pytest.importorskip("tensorsketch.runtime.backends.postgres", reason="needs backends")
    name = private_name("mt")
    if request.param == "postgres":
        from tensorsketch.runtime.backends.postgres import (
            PostgresBackend,
        )
        from tensorsketch.testing import postgres_server

        dsn = postgres_server.reachable()
        yield lambda: PostgresBackend(dsn, schema=name, lease_ttl=2.0)
        postgres_server.drop_schema(dsn, name)
        return
    from tensorsketch.runtime.backends.redis import RedisBackend
    from tensorsketch.testing import redis_server

    url = redis_server.reachable()
    yield lambda: RedisBackend(url, prefix=name, lease_ttl=2.0)
    redis_server.delete_prefix(url, name)


@pytest.fixture
def serve(live: Any, make_backend: Callable[[], Backend]) -> Iterator[Callable[..., Any]]:
    """``serve(**runner_options)``: the task API of a runner of :func:`multitask_graph` over
    uvicorn; its backend is closed on the server's own loop (where its connections live)."""
    made: list[tuple[Any, AsyncRunner]] = []

    def start(pause: float = 0.05, **runner: Any) -> Any:
        backend = make_backend()
        built = AsyncRunner(
            multitask_graph(pause),
            backend=backend,
            timer_refresh=0.5,
            poll_interval=0.05,
            **runner,
        )
        server = live(task_app(built, drain_timeout=1.0))
        made.append((server, built))
        return server

    yield start
    for server, runner in made:
        server.call(runner.aclose())
        server.call(runner.backend.aclose())
        server.stop()


def _done(client: httpx.Client, task_id: str) -> dict[str, Any]:
    for _ in range(1200):
        record: dict[str, Any] = client.get(f"/tasks/{task_id}").json()
        if record["status"] in ("succeeded", "failed", "cancelled"):
            return record
        time.sleep(0.025)
    raise AssertionError(f"task {task_id} never finished: {record}")


def _ticking(client: httpx.Client, task_id: str, ticks: int = 1) -> None:
    """Follow the run's SSE events until it has passed ``ticks`` superstep barriers (its
    ``values`` events): it is running, with that much checkpointed."""
    seen = 0
    with client.stream("GET", f"/tasks/{task_id}/events") as events:
        for line in events.iter_lines():
            seen += line == "event: values"
            if seen >= ticks:
                return
    raise AssertionError(f"task {task_id} ended before {ticks} supersteps")


def _thread(client: httpx.Client, thread_id: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = client.get("/tasks", params={"thread_id": thread_id}).json()[
        "tasks"
    ]
    return records


def test_reject_answers_409_while_the_thread_runs(serve: Any) -> None:
    server = serve(pause=0.5, multitask_strategy="reject")
    with httpx.Client(base_url=server.url, timeout=30) as client:
        first = client.post("/tasks", json={"input": {"tag": "a"}, "thread_id": "t"}).json()
        _ticking(client, first["id"])
        refused = client.post("/tasks", json={"input": {"tag": "b"}, "thread_id": "t"})
        assert refused.status_code == 409, refused.text
        assert "multitask_strategy is 'reject'" in refused.json()["error"]["message"]
        # Per request, the runner's default is overridden.
        queued = client.post(
            "/tasks",
            json={"input": {"tag": "c"}, "thread_id": "t", "multitask_strategy": "enqueue"},
        )
        assert queued.status_code == 202 and queued.json()["multitask_strategy"] == "enqueue"
        last = _done(client, queued.json()["id"])
        assert ticks_of(last["output"]) == ["a0", "a1", "a2", "c0", "c1", "c2"]


def test_enqueue_over_post_runs_waits_for_the_runs_before(serve: Any) -> None:
    server = serve()
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for tag in "ab":
            client.post("/tasks", json={"input": {"tag": tag}, "thread_id": "t"})
        done = client.post(
            "/runs",
            json={"input": {"tag": "c"}, "thread_id": "t", "multitask_strategy": "enqueue"},
        )
        assert done.status_code == 200, done.text
        assert ticks_of(done.json()["output"]) == [f"{t}{i}" for t in "abc" for i in range(3)]
        check_double_texting("enqueue", _thread(client, "t"), ticks_of(done.json()["output"]))


def test_interrupt_over_http_keeps_what_the_stopped_run_did(serve: Any) -> None:
    server = serve(pause=0.5)  # the stop must land while the run is still ticking
    with httpx.Client(base_url=server.url, timeout=60) as client:
        first = client.post("/tasks", json={"input": {"tag": "a"}, "thread_id": "t"}).json()
        _ticking(client, first["id"])
        done = client.post(
            "/runs",
            json={"input": {"tag": "b"}, "thread_id": "t", "multitask_strategy": "interrupt"},
        ).json()
        old = client.get(f"/tasks/{first['id']}").json()
        assert old["status"] == "cancelled" and old["error"]["type"] == "Interrupted"
        assert old["stopped_by"] == done["id"]
        ticks = ticks_of(done["output"])
        assert ticks[0] == "a0" and ticks[-3:] == ["b0", "b1", "b2"]
        check_double_texting("interrupt", _thread(client, "t"), ticks)


def test_rollback_over_http_discards_the_stopped_runs_work(serve: Any) -> None:
    server = serve(pause=0.5)  # the stop must land while the run is still ticking
    with httpx.Client(base_url=server.url, timeout=60) as client:
        client.post("/runs", json={"input": {"tag": "z"}, "thread_id": "t"})
        first = client.post("/tasks", json={"input": {"tag": "a"}, "thread_id": "t"}).json()
        _ticking(client, first["id"], ticks=2)
        done = client.post(
            "/runs",
            json={"input": {"tag": "b"}, "thread_id": "t", "multitask_strategy": "rollback"},
        ).json()
        old = client.get(f"/tasks/{first['id']}").json()
        assert old["status"] == "cancelled" and old["error"]["type"] == "RolledBack"
        assert ticks_of(done["output"]) == ["z0", "z1", "z2", "b0", "b1", "b2"]
        check_double_texting("rollback", _thread(client, "t"), ticks_of(done["output"]))


def test_an_unknown_strategy_is_a_400_naming_the_policies(serve: Any) -> None:
    server = serve()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for route in ("/tasks", "/runs"):
            bad = client.post(route, json={"input": {"tag": "a"}, "multitask_strategy": "drop"})
            assert bad.status_code == 400, bad.text
            error = bad.json()["error"]
            assert error["param"] == "multitask_strategy"
            assert "reject, enqueue, interrupt, rollback" in error["message"]


def test_durability_is_part_of_the_run_body_and_kept_in_its_record(serve: Any) -> None:
    """``durability`` in the body of POST /tasks and POST /runs goes into the record (what a
    resume or a takeover on another instance runs with; core's test_runs.py checks that the
    segments use it); an unknown mode is a 400 naming the modes."""
    server = serve()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        made = client.post("/tasks", json={"input": {"tag": "a"}, "durability": "exit"})
        assert made.status_code == 202, made.text
        assert made.json()["durability"] == "exit"
        assert _done(client, made.json()["id"])["durability"] == "exit"
        ran = client.post("/runs", json={"input": {"tag": "b"}, "durability": "async"})
        assert ran.status_code == 200, ran.text
        assert ran.json()["durability"] == "async" and ran.json()["status"] == "succeeded"
        plain = client.post("/tasks", json={"input": {"tag": "c"}})
        assert plain.json()["durability"] == "sync"
        for route in ("/tasks", "/runs"):
            for bad_mode in ("later", 3, None):
                bad = client.post(route, json={"input": {"tag": "a"}, "durability": bad_mode})
                assert bad.status_code == 400, bad.text
                error = bad.json()["error"]
                assert error["param"] == "durability"
                assert "sync, async, exit" in error["message"]


@pytest.mark.parametrize("strategy", ["reject", "enqueue", "interrupt", "rollback"])
def test_racing_http_inputs_keep_each_policys_promise(serve: Any, strategy: str) -> None:
    """3 threads x 4 inputs, all POSTed at once with the policy in the body: each thread's
    runs and final state are what the policy promises (check_double_texting)."""
    server = serve(concurrency=4)
    threads = [f"race-{i}" for i in range(3)]

    async def race() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            return await asyncio.gather(
                *(
                    client.post(
                        "/tasks",
                        json={
                            "input": {"tag": tag},
                            "thread_id": thread,
                            "multitask_strategy": strategy,
                        },
                    )
                    for tag in "abcd"
                    for thread in threads
                )
            )

    answers = asyncio.run(race())
    assert {a.status_code for a in answers} <= ({202, 409} if strategy == "reject" else {202})
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for answer in answers:
            if answer.status_code == 202:
                _done(client, answer.json()["id"])
        for thread in threads:
            runs = _thread(client, thread)
            assert runs, thread
            if strategy != "reject":
                assert len(runs) == 4
            last = max(runs, key=lambda r: r["created_at"])
            check_double_texting(strategy, runs, ticks_of(last["output"]))
