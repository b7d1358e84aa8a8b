"""Steering a running agent through the task API (``POST /tasks/{id}/steer``) on SQLite,
PostgreSQL and Redis: a message sent while a tool runs is read at the next model call, in
that place in the thread; a finished or unknown run is a clear 4xx; and a server killed with
``-9`` after the agent took the message resumes the run without showing it twice. Real
uvicorn (in a thread, or a child process for the kill), real httpx clients."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import task_graphs

from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.serve import task_app
from tensorsketch.testing.ports import free_port
from tensorsketch.testing.services import private_name

HERE = Path(__file__).resolve().parent

STORES = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("redis", marks=pytest.mark.redis),
]


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A crash-harness spec of a store private to this test (dropped after)."""
    if request.param == "sqlite":
        yield {"target": "sqlite", "kwargs": {"dsn": str(tmp_path / "runs.db"), "lease_ttl": 2.0}}
        return
    pytest.importorskip("tensorsketch.runtime.backends.postgres", reason="needs backends")
    name = private_name("steer")
    if request.param == "postgres":
        from tensorsketch.testing import postgres_server

        dsn = postgres_server.reachable()
        yield {"target": "postgres", "kwargs": {"dsn": dsn, "schema": name, "lease_ttl": 2.0}}
        postgres_server.drop_schema(dsn, name)
        return
    from tensorsketch.testing import redis_server

    url = redis_server.reachable()
    yield {"target": "redis", "kwargs": {"dsn": url, "prefix": name, "lease_ttl": 2.0}}
    redis_server.delete_prefix(url, name)


def _backend(spec: dict[str, Any]) -> Backend:
    from tensorsketch.testing.crash import BackendSpec

    return BackendSpec(spec["target"], spec["kwargs"]).create()


@pytest.fixture
def serve(
    live: Any, store: dict[str, Any], tmp_path: Path
) -> Iterator[Callable[[], tuple[Any, Path]]]:
    """``serve()``: the task API of a runner of :func:`task_graphs.steer_agent` over uvicorn,
    and the agent's gate folder."""
    made: list[tuple[Any, AsyncRunner]] = []
    gates = tmp_path / "gates"
    gates.mkdir()

    def start() -> tuple[Any, Path]:
        runner = AsyncRunner(
            task_graphs.steer_agent(gates),
            backend=_backend(store),
            timer_refresh=0.5,
            poll_interval=0.05,
        )
        server = live(task_app(runner, drain_timeout=1.0))
        made.append((server, runner))
        return server, gates

    yield start
    for server, runner in made:
        server.call(runner.aclose())
        server.call(runner.backend.aclose())
        server.stop()


class Server:
    """``task_server_proc.py`` serving :func:`task_graphs.steer_agent` in a child process."""

    def __init__(self, spec: dict[str, Any]) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "task_server_proc.py"), json.dumps(spec), str(port)],
            env={**os.environ},
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("the task server did not start")

    def kill(self) -> None:
        self.process.kill()  # SIGKILL: no drain, no hand-back
        self.process.wait(30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def _await_file(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def _done(client: httpx.Client, task_id: str, timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with_record = client.get(f"/tasks/{task_id}")
        if with_record.status_code == 200:
            record: dict[str, Any] = with_record.json()
            if record["status"] in ("succeeded", "failed", "cancelled"):
                return record
        time.sleep(0.05)
    raise AssertionError(f"task {task_id} never finished")


def _turns(record: dict[str, Any]) -> list[tuple[str, str]]:
    """The thread's messages as ``(role, text or the tool call's gate)``."""
    out = []
    for m in record["output"]["messages"]:
        content = m.get("content")
        text = (
            content
            if isinstance(content, str)
            else "".join(b.get("text", "") for b in content or [] if isinstance(b, dict))
        )
        if m.get("tool_calls"):
            text = "call " + m["tool_calls"][0]["args"]["gate"]
        out.append((m["role"], text))
    return out


EXPECTED = [
    ("user", "plan my trip"),
    ("assistant", "call one"),
    ("tool", "gate one open"),
    ("user", "use metric units"),  # sent while the tool ran: before the next model call
    ("assistant", "call two"),
    ("tool", "gate two open"),
    ("assistant", "saw: plan my trip | use metric units"),
]


def test_a_message_sent_while_a_tool_runs_is_read_at_the_next_model_call(serve: Any) -> None:
    server, gates = serve()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        submitted = client.post("/tasks", json={"input": {"query": "plan my trip"}})
        assert submitted.status_code == 202, submitted.text
        task_id = submitted.json()["id"]
        _await_file(gates / "started-one")
        steered = client.post(f"/tasks/{task_id}/steer", json={"content": "use metric units"})
        assert steered.status_code == 202, steered.text
        pending = steered.json()["steering"]
        assert [(m["seq"], m["content"]) for m in pending] == [(1, "use metric units")]
        (gates / "one").touch()
        _await_file(gates / "started-two")
        (gates / "two").touch()
        record = _done(client, task_id)
    assert record["status"] == "succeeded", record
    assert _turns(record) == EXPECTED
    assert record["steering"] == [] and record["steering_taken"] == 1


def test_steering_a_finished_unknown_or_malformed_request_is_a_clear_4xx(serve: Any) -> None:
    server, gates = serve()
    (gates / "one").touch()
    (gates / "two").touch()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        task_id = client.post("/tasks", json={"input": {"query": "hi"}}).json()["id"]
        assert _done(client, task_id)["status"] == "succeeded"
        late = client.post(f"/tasks/{task_id}/steer", json={"content": "too late"})
        assert late.status_code == 409, late.text
        assert "already succeeded" in late.json()["error"]["message"]
        assert client.get(f"/tasks/{task_id}").json()["steering"] == []  # not accepted
        unknown = client.post("/tasks/nope/steer", json={"content": "hello?"})
        assert unknown.status_code == 404, unknown.text
        empty = client.post(f"/tasks/{task_id}/steer", json={"content": "  "})
        assert empty.status_code == 400 and empty.json()["error"]["param"] == "content"
        extra = client.post(f"/tasks/{task_id}/steer", json={"content": "x", "role": "system"})
        assert extra.status_code == 400 and extra.json()["error"]["param"] == "role"


@pytest.mark.slow
def test_a_run_resumed_after_kill_9_does_not_see_the_message_twice(
    store: dict[str, Any], tmp_path: Path
) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    spec = {**store, "graph": "steer", "gates": str(gates)}
    first = Server(spec)
    try:
        with httpx.Client(base_url=first.url, timeout=30) as client:
            task_id = client.post("/tasks", json={"input": {"query": "plan my trip"}}).json()["id"]
            _await_file(gates / "started-one")
            steered = client.post(f"/tasks/{task_id}/steer", json={"content": "use metric units"})
            assert steered.status_code == 202, steered.text
            (gates / "one").touch()
            _await_file(gates / "started-two")  # the message was taken before this call
            assert client.get(f"/tasks/{task_id}").json()["steering_taken"] == 1
    finally:
        first.kill()
    (gates / "started-two").unlink()
    second = Server(spec)
    try:
        with httpx.Client(base_url=second.url, timeout=30) as client:
            _await_file(gates / "started-two")  # taken over once the lease lapsed
            (gates / "two").touch()
            record = _done(client, task_id)
    finally:
        second.stop()
    assert record["status"] == "succeeded", record
    assert record["attempts"] >= 2  # it really was resumed
    assert _turns(record) == EXPECTED


@pytest.mark.slow
def test_a_kill_between_journaling_and_marking_replays_the_message_at_its_call(
    store: dict[str, Any], tmp_path: Path
) -> None:
    """The server dies right after the agent journaled the message, before the record marks
    it taken: the resumed run finds it in the journal at the same call (and marks it then),
    not again in the record at an earlier one."""
    gates = tmp_path / "gates"
    gates.mkdir()
    spec = {**store, "graph": "steer", "gates": str(gates)}
    first = Server({**spec, "die_before_mark": True})
    try:
        with httpx.Client(base_url=first.url, timeout=30) as client:
            task_id = client.post("/tasks", json={"input": {"query": "plan my trip"}}).json()["id"]
            _await_file(gates / "started-one")
            steered = client.post(f"/tasks/{task_id}/steer", json={"content": "use metric units"})
            assert steered.status_code == 202, steered.text
            (gates / "one").touch()
        assert first.process.wait(60) == -signal.SIGKILL
    finally:
        first.kill()
    second = Server(spec)
    try:
        with httpx.Client(base_url=second.url, timeout=30) as client:
            _await_file(gates / "started-two")
            (gates / "two").touch()
            record = _done(client, task_id)
    finally:
        second.stop()
    assert record["status"] == "succeeded", record
    assert _turns(record) == EXPECTED
    assert record["steering"] == [] and record["steering_taken"] == 1
