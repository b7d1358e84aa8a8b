"""What the task API spends per request on the wire and in the store: the frames of an SSE
stream that are ready together leave in one write, a follower of a run executing in this
process does not re-read its record while it waits for events, and a route that shows a run
reads its record once even when the owner check has already read it (``authorize=``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from tensorsketch import FakeProvider, create_agent
from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.serve import Authorization, Identity, task_app
from tensorsketch.testing.runs import hang_graph


def _agent() -> Any:
    return create_agent(FakeProvider(), name="echo")


async def _get(app: Any, path: str) -> list[dict[str, Any]]:
    """Call ``app`` for ``GET path`` as a server would; every message it sends."""
    sent: list[dict[str, Any]] = []
    requested = False
    closed = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await closed.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            closed.set()

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"test")],
        "client": ("127.0.0.1", 1),
        "server": ("test", 80),
    }
    await app(scope, receive, send)
    return sent


async def test_a_finished_runs_events_leave_in_one_write_not_one_per_frame() -> None:
    runner = AsyncRunner(_agent(), backend=InMemoryBackend())
    app = task_app(runner, metrics=None)
    async with runner:
        record = await runner.submit({"query": "hello"})
        await runner.await_run(record.run_id, timeout=30)
        sent = await _get(app, f"/tasks/{record.run_id}/events")
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    writes = [m["body"] for m in sent[1:] if m["body"]]
    frames = [f for f in b"".join(writes).decode().split("\n\n") if f]
    # Every event once, in order, then the record: nothing lost by the batching.
    ids = [int(line[4:]) for f in frames for line in f.splitlines() if line.startswith("id: ")]
    assert ids == sorted(set(ids)) and len(ids) == len(frames) - 1 >= 4
    last = frames[-1].splitlines()
    assert last[0] == "event: task"
    assert json.loads(last[1].removeprefix("data: "))["status"] == "succeeded"
    # The stored events are read together, so they go out together (before: one write each).
    assert len(writes) <= 2 < len(frames)


async def test_an_authorized_get_reads_the_run_once() -> None:
    runner = AsyncRunner(_agent(), backend=InMemoryBackend())
    app = task_app(
        runner,
        metrics=None,
        authenticate=lambda request: Identity(request.headers["x-user"]),
        authorize=Authorization(),
    )
    reads: list[str] = []
    read = runner.get

    async def counted(run_id: str) -> Any:
        reads.append(run_id)
        return await read(run_id)

    runner.get = counted  # type: ignore[method-assign]
    transport = httpx.ASGITransport(app=app)
    async with runner, httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        created = await client.post(
            "/tasks", json={"input": {"query": "hi"}}, headers={"x-user": "ana"}
        )
        assert created.status_code == 202, created.text
        task_id = created.json()["id"]
        await runner.await_run(task_id, timeout=30)
        reads.clear()
        shown = await client.get(f"/tasks/{task_id}", headers={"x-user": "ana"})
        assert shown.status_code == 200 and shown.json()["id"] == task_id
        assert reads == [task_id]  # the owner check's read is the answer (before: two reads)
        hidden = await client.get(f"/tasks/{task_id}", headers={"x-user": "bob"})
        assert hidden.status_code == 404  # another user's run still looks missing


async def test_following_a_run_executing_here_polls_its_events_not_its_record() -> None:
    runner = AsyncRunner(hang_graph(), backend=InMemoryBackend())
    app = task_app(runner, metrics=None)
    store = runner._state.store
    reads: list[str] = []
    read = store.get

    async def counted(run_id: str) -> Any:
        reads.append(run_id)
        return await read(run_id)

    store.get = counted  # type: ignore[method-assign]
    async with runner:
        record = await runner.submit({"n": 1})
        reads.clear()
        sent = await _get(app, f"/tasks/{record.run_id}/events")
    frames = b"".join(m.get("body", b"") for m in sent[1:]).decode()
    assert '"status":"succeeded"' in frames.split("event: task\n")[-1]
    # The 404 check, the stream's start, and the final record; the second the run sleeps is
    # waited out on its events alone (before: a record read at every empty poll, ~7 more).
    assert len(reads) <= 4, reads
