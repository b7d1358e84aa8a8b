"""A new input on a thread whose run is suspended: the later run goes on with the thread (as
``invoke`` with input does) and takes over what the earlier one waited on. The earlier run is
superseded: deciding it is refused naming the run to decide, and a timer or an expired
approval that would resume it ends it instead — it never runs the thread under its record.
On the in-memory and SQLite stores."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tensorsketch import FakeProvider, create_agent, tool
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.runs import AsyncRunner, RunConflictError
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.sqlite import SqliteBackend

REFUNDS: list[str] = []


@tool(requires_approval=True)
def refund(order: str) -> str:
    """Refund an order (a person approves)."""
    REFUNDS.append(order)
    return f"refunded {order}"


def _desk(messages: list[Message], tools: Any) -> Message:
    """Asks to refund A on "refund A" (once), else answers the latest question."""
    asked = [m.text for m in messages if m.role == "user"]
    if asked[-1].startswith("refund") and not any(m.role == "tool" for m in messages):
        return assistant(tool_calls=[ToolCall(id="c1", name="refund", args={"order": "A"})])
    return assistant(f"answer to {asked[-1]!r}")


@pytest.fixture(params=["memory", "sqlite"])
async def runner_for(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Callable[..., AsyncRunner]]:
    REFUNDS.clear()
    made: list[AsyncRunner] = []

    def build(**options: Any) -> AsyncRunner:
        backend: Backend = (
            InMemoryBackend() if request.param == "memory" else SqliteBackend(tmp_path / "r.db")
        )
        agent = create_agent(FakeProvider(policy=_desk), tools=[refund], name="desk")
        runner = AsyncRunner(agent, backend=backend, timer_refresh=0.2, **options)
        made.append(runner)
        return runner

    yield build
    for runner in made:
        await runner.aclose()


async def _suspended_twice(runner: AsyncRunner) -> tuple[str, str]:
    """The first run asks to refund A; a second input on its thread goes on with it."""
    first = await runner.submit({"query": "refund A"}, thread_id="t1")
    waiting = await runner.await_run(first.run_id, timeout=10)
    assert (waiting.status, waiting.waiting_for) == ("suspended", "approval")
    second = await runner.submit({"query": "are you there?"}, thread_id="t1")
    took = await runner.await_run(second.run_id, timeout=10)
    # it resumed the thread with its input: the pending call is asked again, in this run
    assert (took.status, took.waiting_for) == ("suspended", "approval")
    assert [i["id"] for i in took.interrupts] == ["c1"]
    return first.run_id, second.run_id


async def test_deciding_a_superseded_run_is_refused_naming_the_run_to_decide(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for()
    first, second = await _suspended_twice(runner)
    with pytest.raises(RunConflictError, match=rf"superseded: run '{second}' went on"):
        await runner.approve(first, {"c1": True})
    ended = await runner.get(first)
    assert ended.status == "cancelled" and ended.error is not None
    assert ended.error["type"] == "Superseded" and second in ended.error["message"]
    assert ended.interrupts == () and REFUNDS == []  # nothing ran under the old record
    with pytest.raises(RunConflictError, match="cancelled"):
        await runner.approve(first, {"c1": True})
    # the run that took over is decided as usual, and answers its own input
    await runner.approve(second, {"c1": True})
    done = await runner.await_run(second, timeout=10)
    assert done.status == "succeeded", done
    assert done.output["output"] == "answer to 'are you there?'"
    assert done.decisions == {"c1": True}  # a finished run shows what it was decided with
    assert REFUNDS == ["A"]


async def test_an_expired_approval_ends_a_superseded_run_instead_of_resuming_it(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    """The resume nobody asked for (an approval timeout's rejection) meets the same check
    where the run would go on, not only where a person decides."""
    runner = runner_for(approval_timeout=0.3)
    first, second = await _suspended_twice(runner)
    await asyncio.sleep(0.4)
    for _ in range(100):  # a read rejects an expired approval and resumes the run
        record = await runner.get(first)
        if record.terminal:
            break
        await asyncio.sleep(0.05)
    assert record.status == "cancelled", record
    assert record.error is not None and record.error["type"] == "Superseded"
    later = await runner.await_run(second, timeout=10)  # its own timeout rejects it
    assert later.status == "succeeded" and later.output["output"] == "answer to 'are you there?'"
    assert REFUNDS == []
