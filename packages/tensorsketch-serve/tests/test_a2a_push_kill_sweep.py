"""Owed A2A push notifications other than a 1.0 ``completed`` through a kill and the sweep:
an ``input-required`` (with its place in the history in the delivery id), and a webhook
registered through A2A 0.3 (its notification is the whole task as 0.3 spells it). The server
is SIGKILLed just before it POSTs; a new server over the same SQLite file delivers it.

Real processes (``a2a_server_proc.py`` on uvicorn), a real receiver (uvicorn in this process).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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

HERE = Path(__file__).resolve().parent
PUSH = {"allowed_hosts": ["127.0.0.1"], "attempts": 2, "backoff": 0.1, "timeout": 1.0}
V1 = {"A2A-Version": "1.0"}


class Server:
    """``a2a_server_proc.py`` in a child process."""

    def __init__(self, spec: dict[str, Any], **env: str) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        port = self.url.rsplit(":", 1)[1]
        script = str(HERE / "a2a_server_proc.py")
        self.process = subprocess.Popen(
            [sys.executable, script, json.dumps(spec), port], env={**os.environ, **env}
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if httpx.get(f"{self.url}/.well-known/agent-card.json", timeout=2).is_success:
                    return
            except httpx.HTTPError:
                pass
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


class Receiver:
    """A webhook: every body POSTed, with its headers."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], Any]] = []

        async def hook(request: Request) -> Response:
            self.got.append((dict(request.headers), await request.json()))
            return Response(status_code=204)

        self.app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])

    def wait_for(self, done: Any, seconds: float = 30) -> tuple[dict[str, str], Any]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for headers, body in list(self.got):
                if done(body):
                    return headers, body
            time.sleep(0.05)
        raise AssertionError(f"the webhook never got it; it got {[b for _h, b in self.got]}")


def _state_1_0(body: Any) -> str | None:
    state = body.get("statusUpdate", {}).get("status", {}).get("state")
    return None if state is None else str(state)


@pytest.mark.slow
def test_an_input_required_notification_is_swept_after_a_kill(tmp_path: Path, live: Any) -> None:
    receiver = Receiver()
    hook = live(receiver.app).url.rstrip("/") + "/hook"
    (tmp_path / "armed").touch()
    spec = {"target": "sqlite", "kwargs": {"dsn": str(tmp_path / "a2a.db")}, "graph": "ask"}
    first = Server(
        {**spec, "push": PUSH, "die_at": "push_sending", "die_on": "TASK_STATE_INPUT_REQUIRED"},
        TS_KILL_ARMED=str(tmp_path / "armed"),
    )
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    params = {"message": message, "configuration": {"taskPushNotificationConfig": {"url": hook}}}
    try:
        first.call("SendMessage", params, V1)
    except httpx.HTTPError:
        pass  # it died before answering
    assert first.process.wait(60) == -9
    assert [b for _h, b in receiver.got if _state_1_0(b) == "TASK_STATE_INPUT_REQUIRED"] == []
    sweeps = tmp_path / "sweeps"
    second = Server({**spec, "push": {**PUSH, "sweep_every": 0.2}}, TS_SWEEPS=str(sweeps))
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
    receiver = Receiver()
    hook = live(receiver.app).url.rstrip("/") + "/hook"
    (tmp_path / "armed").touch()
    spec = {"target": "sqlite", "kwargs": {"dsn": str(tmp_path / "a2a.db")}, "graph": "ask"}
    first = Server(
        {**spec, "push": PUSH, "die_at": "push_sending", "die_on": '"state": "completed"'},
        TS_KILL_ARMED=str(tmp_path / "armed"),
    )
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
    second = Server({**spec, "push": {**PUSH, "sweep_every": 0.2}}, TS_SWEEPS=str(sweeps))
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
