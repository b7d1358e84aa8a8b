"""An effect in doubt through the task API: a payment that timed out (it may have gone
through) is not re-run by the next task on the thread; the task suspends and its record shows
the call and its arguments."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tensorsketch import Context, Graph, Node, Schema
from tensorsketch.constants import END, START
from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.serve import task_app


class Paid(Schema):
    receipt: str = ""


def _graph(calls: list[int]) -> Any:
    class Pay(Node):
        class Out(Schema):
            receipt: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            def charge() -> str:
                calls.append(1)
                if len(calls) == 1:  # the provider took the charge, the answer never came
                    raise TimeoutError("the payment provider did not answer")
                return "r-2"

            receipt = await ctx.step(
                "pay", charge, in_doubt="ask", args={"order": "A-17", "amount": 40}
            )
            return self.Out(receipt=receipt)

    return Graph(Paid).add(Pay).edge(START, "Pay").edge("Pay", END).compile()


def _until(client: httpx.Client, task_id: str, status: str) -> Any:
    for _ in range(400):
        record = client.get(f"/tasks/{task_id}").json()
        if record["status"] == status:
            return record
        time.sleep(0.025)
    raise AssertionError(f"task {task_id} never got to {status}: {record}")


def test_a_task_shows_an_effect_in_doubt_with_its_arguments(live: Any) -> None:
    calls: list[int] = []
    runner = AsyncRunner(_graph(calls), backend=InMemoryBackend(), poll_interval=0.05)
    server = live(task_app(runner, drain_timeout=1.0))
    with httpx.Client(base_url=server.url, timeout=30) as client:
        first = client.post("/tasks", json={"input": {}, "thread_id": "order-A-17"}).json()
        failed = _until(client, first["id"], "failed")
        assert "did not answer" in str(failed["error"])
        second = client.post("/tasks", json={"thread_id": "order-A-17"}).json()
        record = _until(client, second["id"], "suspended")
    assert record["waiting_for"] == "input"
    (pending,) = record["interrupts"]
    assert pending["kind"] == "in_doubt" and pending["id"] == "0:Pay:0:pay"
    assert pending["value"]["args"] == {"order": "A-17", "amount": 40}
    assert pending["value"]["effect"] == "pay" and pending["value"]["policy"] == "ask"
    assert calls == [1]  # the charge was not made again
