"""A durable task server, offline: a refund agent on the fake model behind the task API.

Runs the server on 127.0.0.1 (uvicorn, in this process), then plays a client against it:
submit a run with an Idempotency-Key, watch it suspend for approval, follow its events over
SSE, approve it, and read the result and the metrics. The runs live in a SQLite file, so a
server killed at any point picks them up again when started on the same file.

    python examples/task_server.py

To serve the agent for real instead (the same API, until Ctrl-C):

    tensorsketch serve examples.task_server:agent --protocol tasks
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
from pathlib import Path

import httpx
import uvicorn

from tensorsketch.agents import create_agent
from tensorsketch.fake import FakeProvider
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.serve import task_app
from tensorsketch.tools import tool


@tool(requires_approval=True)
def issue_refund(order_id: str) -> str:
    """Refund an order (a person approves every call)."""
    return f"refund for {order_id} issued"


def decide(messages: list[Message], tools: object) -> Message:
    """The scripted model: ask for a refund, then report the tool's answer."""
    last = messages[-1]
    if last.role == "tool":
        return assistant(f"Done: {last.text}.")
    call = ToolCall(id="call_refund", name="issue_refund", args={"order_id": "A-17"})
    return assistant(tool_calls=[call])


agent = create_agent(FakeProvider(policy=decide), [issue_refund], name="refunds")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def client_session(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        submitted = await client.post(
            "/tasks",
            json={"input": {"query": "please refund A-17"}, "labels": {"tenant": "acme"}},
            headers={"Idempotency-Key": "refund-A-17"},
        )
        task = submitted.json()
        print(f"submitted {task['id']}: {submitted.status_code} {task['status']}")
        again = await client.post(
            "/tasks",
            json={"input": {"query": "please refund A-17"}},
            headers={"Idempotency-Key": "refund-A-17"},
        )
        print(f"same key again: {again.status_code}, same task: {again.json()['id'] == task['id']}")

        for _ in range(600):  # a client polls the record (or follows the SSE events)
            task = (await client.get(f"/tasks/{task['id']}")).json()
            if task["status"] == "suspended":
                break
            await asyncio.sleep(0.05)
        pending = [i["id"] for i in task["interrupts"]]
        print(f"suspended, waiting for {task['waiting_for']}: {pending}")

        approved = await client.post(
            f"/tasks/{task['id']}/approve", json={"decisions": {pending[0]: True}}
        )
        print(f"approved: {approved.status_code}")

        kinds = []
        async with client.stream("GET", f"/tasks/{task['id']}/events") as events:
            async for line in events.aiter_lines():
                if line.startswith("event: "):
                    kinds.append(line.removeprefix("event: "))
        print(f"events (SSE): {' '.join(kinds)}")

        task = (await client.get(f"/tasks/{task['id']}")).json()
        print(f"{task['status']}: {task['output']['output']}")
        metrics = (await client.get("/metrics")).text
        finished = [m for m in metrics.splitlines() if m.startswith("tensorsketch_runs_finished")]
        print(f"metrics: {finished[0]}")


async def main() -> None:
    folder = Path(os.environ.get("TS_EXAMPLE_TMP") or tempfile.mkdtemp())
    runner = AsyncRunner(agent, backend=SqliteBackend(folder / "tasks.db"))
    port = free_port()
    config = uvicorn.Config(task_app(runner), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.02)
    try:
        await client_session(f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True  # a graceful shutdown drains the runner
        await serving


if __name__ == "__main__":
    asyncio.run(main())
