"""Kill -9 an A2A server while it owes a task's final push notification, start it again: the
webhook hears the final status — once when the first POST never left, twice with one delivery
id when it did and the server died before recording it — on SQLite, PostgreSQL and Redis.

Real processes (``a2a_server_proc.py`` on uvicorn), a real receiver (uvicorn in this process).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tensorsketch.testing import tally
from tensorsketch.testing.ports import free_port
from tensorsketch.testing.services import POSTGRES_DSN, REDIS_URL

HERE = Path(__file__).resolve().parent
#: short claims (attempts x timeout and a bit), so a killed sender's claim lapses in seconds
PUSH = {"allowed_hosts": ["127.0.0.1"], "attempts": 2, "backoff": 0.1, "timeout": 1.0}


class A2AServer:
    """``a2a_server_proc.py`` in a child process."""

    def __init__(self, spec: dict[str, Any], **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "a2a_server_proc.py"), json.dumps(spec), str(self.port)],
            env={**os.environ, **env},
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                card = httpx.get(f"{self.url}/.well-known/agent-card.json", timeout=2)
                if card.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("the A2A server did not start")

    def stop(self) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        return self.process.returncode


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A store private to this test."""
    if request.param == "sqlite":
        yield {"target": "sqlite", "kwargs": {"dsn": str(tmp_path / "a2a.db")}}
    elif request.param == "postgres":
        postgres_server = pytest.importorskip("tensorsketch.testing.postgres_server")
        for schema in postgres_server.private_schema("a2akill", postgres_server.reachable()):
            yield {"target": "postgres", "kwargs": {"dsn": POSTGRES_DSN, "schema": schema}}
    else:
        redis_server = pytest.importorskip("tensorsketch.testing.redis_server")
        for prefix in redis_server.private_prefix("a2akill", redis_server.reachable()):
            yield {"target": "redis", "kwargs": {"dsn": REDIS_URL, "prefix": prefix}}


class Receiver:
    """A webhook in this process: the state and delivery id of every status POSTed."""

    def __init__(self) -> None:
        self.states: list[str] = []
        self.deliveries: list[str | None] = []

        async def hook(request: Request) -> Response:
            body = await request.json()
            if "statusUpdate" in body:  # artifact updates come too
                self.states.append(body["statusUpdate"]["status"]["state"])
                self.deliveries.append(request.headers.get("x-tensorsketch-delivery"))
            return Response(status_code=204)

        self.app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])

    def finals(self) -> list[str | None]:
        return [d for s, d in zip(self.states, self.deliveries, strict=True) if s == COMPLETED]


COMPLETED = "TASK_STATE_COMPLETED"
#: the restarted server's sweep interval: short, so the test waits on sweeps, not seconds
SWEEP_EVERY = 0.2


@pytest.mark.slow
@pytest.mark.parametrize("die_at", ["push_sending", "push_sent"])
def test_killed_while_a_task_s_final_notification_is_owed(
    store: dict[str, Any], tmp_path: Path, live: Any, die_at: str
) -> None:
    receiver = Receiver()
    hook = live(receiver.app)
    (tmp_path / "armed").touch()
    spec = {**store, "push": PUSH}
    first = A2AServer({**spec, "die_at": die_at}, TS_KILL_ARMED=str(tmp_path / "armed"))
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    webhook = {"url": hook.url.rstrip("/") + "/hook"}
    params = {"message": message, "configuration": {"taskPushNotificationConfig": webhook}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    try:
        answer = httpx.post(first.url, json=body, headers={"A2A-Version": "1.0"}, timeout=30)
        task_id = answer.json()["result"]["task"]["id"]
    except httpx.HTTPError:  # it may die before it answers: find the task after the restart
        task_id = None
    assert first.process.wait(60) == -9
    sent_before = len(receiver.finals())
    assert sent_before == (1 if die_at == "push_sent" else 0), receiver.states
    sweeps = tmp_path / "sweeps"
    second = A2AServer(
        {**spec, "push": {**PUSH, "sweep_every": SWEEP_EVERY}}, TS_SWEEPS=str(sweeps)
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(receiver.finals()) == sent_before:
            time.sleep(0.02)
        # A further delivery would come from a later sweep: wait for two more (the second
        # begins after the delivering one has recorded its outcome) instead of a while.
        tally.wait_for(sweeps, tally.count(sweeps) + 2)
        listing = {"jsonrpc": "2.0", "id": 2, "method": "ListTasks", "params": {}}
        found = httpx.post(second.url, json=listing, headers={"A2A-Version": "1.0"}, timeout=30)
        [task] = found.json()["result"]["tasks"]
        assert task_id in (None, task["id"])
        assert task["status"]["state"] == COMPLETED
    finally:
        assert second.stop() in (0, -15)
    finals = receiver.finals()
    assert len(finals) == sent_before + 1, receiver.states
    assert set(finals) == {f"{task['id']}:{COMPLETED}"}, finals
