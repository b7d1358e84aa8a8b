"""Kill -9 an A2A server while it owes a task's push notification, start it again: the
webhook hears it — once when the first POST never left, twice with one delivery id when it
did and the server died before recording it. A final status on SQLite, PostgreSQL and Redis;
on SQLite also an ``input-required`` (its place in the history in the delivery id) and a
webhook registered through A2A 0.3 (its notification is the whole task as 0.3 spells it).

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
from a2a.compat.v0_3 import types as v03
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
V1 = {"A2A-Version": "1.0"}


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

    def call(self, method: str, params: Any, headers: dict[str, str] | None = None) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return httpx.post(self.url, json=body, headers=headers or {}, timeout=30).json()

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
    """A webhook in this process: every body POSTed with its headers, and the state and
    delivery id of every status."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], Any]] = []
        self.states: list[str] = []
        self.deliveries: list[str | None] = []

        async def hook(request: Request) -> Response:
            body = await request.json()
            self.got.append((dict(request.headers), body))
            if "statusUpdate" in body:  # artifact updates come too
                self.states.append(body["statusUpdate"]["status"]["state"])
                self.deliveries.append(request.headers.get("x-tensorsketch-delivery"))
            return Response(status_code=204)

        self.app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])

    def finals(self) -> list[str | None]:
        return [d for s, d in zip(self.states, self.deliveries, strict=True) if s == COMPLETED]

    def wait_for(self, done: Any, seconds: float = 30) -> tuple[dict[str, str], Any]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for headers, body in list(self.got):
                if done(body):
                    return headers, body
            time.sleep(0.05)
        raise AssertionError(f"the webhook never got it; it got {[b for _h, b in self.got]}")


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


def _armed_to_die(
    tmp_path: Path, live: Any, die_on: str
) -> tuple[Receiver, str, dict[str, Any], A2AServer]:
    """A webhook receiver, its URL, the store's spec, and an ``ask`` server on it that dies
    while sending the notification whose body holds ``die_on``."""
    receiver = Receiver()
    hook = live(receiver.app).url.rstrip("/") + "/hook"
    (tmp_path / "armed").touch()
    spec = {"target": "sqlite", "kwargs": {"dsn": str(tmp_path / "a2a.db")}, "graph": "ask"}
    first = A2AServer(
        {**spec, "push": PUSH, "die_at": "push_sending", "die_on": die_on},
        TS_KILL_ARMED=str(tmp_path / "armed"),
    )
    return receiver, hook, spec, first


def _state_1_0(body: Any) -> str | None:
    state = body.get("statusUpdate", {}).get("status", {}).get("state")
    return None if state is None else str(state)


@pytest.mark.slow
def test_an_input_required_notification_is_swept_after_a_kill(tmp_path: Path, live: Any) -> None:
    receiver, hook, spec, first = _armed_to_die(tmp_path, live, "TASK_STATE_INPUT_REQUIRED")
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    params = {"message": message, "configuration": {"taskPushNotificationConfig": {"url": hook}}}
    try:
        first.call("SendMessage", params, V1)
    except httpx.HTTPError:
        pass  # it died before answering
    assert first.process.wait(60) == -9
    assert [b for _h, b in receiver.got if _state_1_0(b) == "TASK_STATE_INPUT_REQUIRED"] == []
    sweeps = tmp_path / "sweeps"
    second = A2AServer({**spec, "push": {**PUSH, "sweep_every": 0.2}}, TS_SWEEPS=str(sweeps))
    try:
        [task] = second.call("ListTasks", {}, V1)["result"]["tasks"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        headers, body = receiver.wait_for(lambda b: _state_1_0(b) == "TASK_STATE_INPUT_REQUIRED")
        asked = body["statusUpdate"]
        assert asked["taskId"] == task["id"]
        assert asked["status"]["message"]["parts"][0]["text"] == "What is your name?"
        position = len(task["history"])  # the question is the history's last message
        delivery = f"{task['id']}:TASK_STATE_INPUT_REQUIRED:{position}"
        assert headers["x-tensorsketch-delivery"] == delivery
        # the task goes on on the new server, and its webhook hears the end
        answer = {**message, "messageId": "m2", "taskId": task["id"], "parts": [{"text": "Ada"}]}
        done = second.call("SendMessage", {"message": answer}, V1)["result"]["task"]
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        headers, _body = receiver.wait_for(lambda b: _state_1_0(b) == "TASK_STATE_COMPLETED")
        assert headers["x-tensorsketch-delivery"] == f"{task['id']}:TASK_STATE_COMPLETED"
        tally.wait_for(sweeps, tally.count(sweeps) + 2)  # a further delivery would come from these
    finally:
        assert second.stop() in (0, -15)
    states = [_state_1_0(b) for _h, b in receiver.got]
    assert states.count("TASK_STATE_INPUT_REQUIRED") == 1, states
    assert states.count("TASK_STATE_COMPLETED") == 1, states


@pytest.mark.slow
def test_a_0_3_webhook_s_final_task_is_swept_after_a_kill(tmp_path: Path, live: Any) -> None:
    receiver, hook, spec, first = _armed_to_die(tmp_path, live, '"state": "completed"')
    old = {"kind": "message", "messageId": "o1", "role": "user", "parts": [{"kind": "text"}]}
    old["parts"] = [{"kind": "text", "text": "hi"}]
    task = first.call("message/send", {"message": old})["result"]
    assert task["status"]["state"] == "input-required"
    config = {"id": "old-hook", "url": hook, "token": "tk"}
    made = first.call(
        "tasks/pushNotificationConfig/set",
        {"taskId": task["id"], "pushNotificationConfig": config},
    )
    assert made["result"]["pushNotificationConfig"]["id"] == "old-hook"
    answer = {**old, "messageId": "o2", "taskId": task["id"], "contextId": task["contextId"]}
    answer["parts"] = [{"kind": "text", "text": "Ada"}]
    try:
        first.call("message/send", {"message": answer})
    except httpx.HTTPError:
        pass  # it died before answering
    assert first.process.wait(60) == -9
    finals = [b for _h, b in receiver.got if b.get("status", {}).get("state") == "completed"]
    assert finals == []
    sweeps = tmp_path / "sweeps"
    second = A2AServer({**spec, "push": {**PUSH, "sweep_every": 0.2}}, TS_SWEEPS=str(sweeps))
    try:
        headers, body = receiver.wait_for(lambda b: b.get("status", {}).get("state") == "completed")
        tally.wait_for(sweeps, tally.count(sweeps) + 2)  # a further delivery would come from these
    finally:
        assert second.stop() in (0, -15)
    shown = v03.Task.model_validate(body)  # what an a2a-sdk 0.3 receiver reads
    assert shown.id == task["id"] and shown.context_id == task["contextId"]
    assert shown.status.state == v03.TaskState.completed
    assert body["kind"] == "task"
    assert body["artifacts"][0]["parts"] == [{"kind": "text", "text": "Hello Ada."}]
    assert headers["x-a2a-notification-token"] == "tk"
    assert headers["x-tensorsketch-delivery"] == f"{task['id']}:TASK_STATE_COMPLETED"
    states = [b.get("status", {}).get("state") for _h, b in receiver.got]
    assert states.count("completed") == 1, states
