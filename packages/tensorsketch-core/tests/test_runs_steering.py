"""``AsyncRunner.steer`` on the in-memory store: which runs take a steering message and what
is refused (the HTTP route and the three real stores, the kill included:
tensorsketch-serve's tests/test_tasks_steering.py)."""

from __future__ import annotations

import asyncio

import pytest

from tensorsketch.runs import AsyncRunner, RunConflictError, RunNotFoundError
from tensorsketch.runs.steering import MAX_PENDING_STEERING
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.testing.runs import hang_graph, refund_agent


async def _running(runner: AsyncRunner, run_id: str) -> None:
    for _ in range(400):
        if (await runner.get(run_id)).status == "running":
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the run never started")


async def test_a_running_run_buffers_messages_in_order_up_to_the_limit() -> None:
    async with AsyncRunner(hang_graph(), backend=InMemoryBackend()) as runner:
        run = await runner.submit({"n": 30})
        await _running(runner, run.run_id)
        for k in range(MAX_PENDING_STEERING):
            await runner.steer(run.run_id, {"content": f"note {k}"})
        record = await runner.get(run.run_id)
        assert [m["seq"] for m in record.steering] == list(range(1, MAX_PENDING_STEERING + 1))
        with pytest.raises(RunConflictError, match="not taken"):
            await runner.steer(run.run_id, "one too many")
        await runner.cancel(run.run_id)
        with pytest.raises(RunConflictError, match="already cancelled"):
            await runner.steer(run.run_id, "after the end")


async def test_a_suspended_run_is_pointed_to_signal() -> None:
    async with AsyncRunner(refund_agent(), backend=InMemoryBackend()) as runner:
        run = await runner.submit({"query": "order-7"})
        record = await runner.await_run(run.run_id, timeout=30)
        assert record.status == "suspended"
        with pytest.raises(RunConflictError, match="signal"):
            await runner.steer(run.run_id, "hurry")


@pytest.mark.parametrize(
    ("message", "problem"),
    [("", "non-empty"), ({"content": "x", "role": "system"}, "role"), (7, "non-empty")],
)
async def test_a_malformed_message_is_refused_before_the_run_is_read(
    message: object, problem: str
) -> None:
    async with AsyncRunner(hang_graph(), backend=InMemoryBackend()) as runner:
        with pytest.raises(ValueError, match=problem):
            await runner.steer("nope", message)  # type: ignore[arg-type]
        with pytest.raises(RunNotFoundError):
            await runner.steer("nope", "hello")
