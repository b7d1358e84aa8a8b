"""``interrupt(...)`` inside an agent's tool: the run suspends with the tool call it came from,
``resume`` answers it, the tool goes on, and its earlier journaled effects do not run again.

Mirrors LangGraph's documented human-in-the-loop-in-a-tool pattern (``interrupt()`` called
inside a tool of a prebuilt ReAct agent, answered with ``Command(resume=...)``).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest

from tensorsketch import Context, FakeProvider, InMemoryBackend, create_agent, run_info, tool
from tensorsketch.errors import ThreadBusyError
from tensorsketch.interrupts import interrupt
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.testing.crash import CrashingBackend, SimulatedCrash

EFFECTS: list[str] = []


@tool
async def send_email(ctx: Context, to: str) -> str:
    """Send an email.

    Args:
        to: the recipient.
    """
    draft = await ctx.step("draft", lambda: EFFECTS.append(f"drafted for {to}") or "draft-1")
    answer = await interrupt(ctx, {"question": f"send {draft} to {to}?"})
    if answer != "yes":
        return f"not sent ({answer})"
    await ctx.step("send", lambda: EFFECTS.append(f"sent to {to}"))
    return f"sent to {to}"


def _agent() -> object:
    model = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="call_9", name="send_email", args={"to": "bob"})]),
            assistant("done"),
        ]
    )
    return create_agent(model, tools=[send_email])


@pytest.mark.parametrize("store", ["memory", "sqlite"])
@pytest.mark.parametrize("answer", ["yes", "no"])
async def test_an_interrupt_in_a_tool_suspends_with_the_call_and_resumes_into_it(
    store: str, answer: str, tmp_path: Path
) -> None:
    EFFECTS.clear()
    backend = InMemoryBackend() if store == "memory" else SqliteBackend(tmp_path / "t.db")
    agent = _agent()
    out = await agent.invoke({"query": "mail bob"}, thread_id="t", backend=backend)  # type: ignore[attr-defined]
    (pending,) = run_info(out).interrupts
    assert pending.kind == "interrupt" and pending.value == {"question": "send draft-1 to bob?"}
    assert pending.tool_call == {"id": "call_9", "name": "send_email", "args": {"to": "bob"}}
    state = await agent.aget_state("t", backend)  # type: ignore[attr-defined]
    assert run_info(state).interrupts[0].tool_call == pending.tool_call  # read back, too
    done = await agent.invoke(thread_id="t", backend=backend, resume={pending.id: answer})  # type: ignore[attr-defined]
    assert run_info(done).status == "completed"
    tool_answer = next(m.text for m in done.messages if m.role == "tool")
    if answer == "yes":
        assert tool_answer == "sent to bob"
        assert EFFECTS == ["drafted for bob", "sent to bob"]  # drafted once, across the resume
    else:
        assert tool_answer == "not sent (no)" and EFFECTS == ["drafted for bob"]


# -- the crash harness around an interrupt in a tool ---------------------------------------------


def _mail_policy(messages: list[Message], tools: Any) -> Message:
    """Deterministic on the transcript (a resumed process rebuilds the agent): ask to mail
    bob, then say done with the tool's answer."""
    last = messages[-1]
    if last.role == "tool":
        return assistant(f"done: {last.text}")
    return assistant(tool_calls=[ToolCall(id="call_9", name="send_email", args={"to": "bob"})])


def _policy_agent() -> Any:
    return create_agent(FakeProvider(policy=_mail_policy), tools=[send_email])


async def _until_stopped(
    agent: Any, backend: Backend, thread: str, input: Any = None, **call: Any
) -> Any:
    """Invoke, waiting out a crashed run's lease (its process is gone, its lease runs out)."""
    for _ in range(400):
        try:
            return await agent.invoke(input, thread_id=thread, backend=backend, **call)
        except ThreadBusyError:
            await asyncio.sleep(0.05)
    raise AssertionError(f"thread {thread!r} stayed busy")


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_a_crash_at_every_boundary_around_a_tool_interrupt_repeats_no_effect(
    store: str, tmp_path: Path
) -> None:
    """Issue #44's crash harness for interrupts in tools: the run is killed (simulated:
    the store refuses every call after the n-th durable boundary, as a dead process would)
    at each boundary of the segment that suspends in the tool, and of the one that resumes
    into it; after the recovery the draft and the send each ran once, and the transcript is
    the uninterrupted run's."""
    backend: Backend = InMemoryBackend() if store == "memory" else SqliteBackend(tmp_path / "t.db")
    backend.lease_ttl = 0.3
    agent = _policy_agent()

    async def baseline() -> tuple[list[str], list[str], list[str]]:
        EFFECTS.clear()
        first = CrashingBackend(backend, mode="raise")
        out = await agent.invoke({"query": "mail bob"}, thread_id="base", backend=first)
        (pending,) = run_info(out).interrupts
        second = CrashingBackend(backend, mode="raise")
        done = await agent.invoke(thread_id="base", backend=second, resume={pending.id: "yes"})
        return first.boundaries, second.boundaries, [m.text for m in done.messages]

    suspend_points, resume_points, transcript = await baseline()
    assert EFFECTS == ["drafted for bob", "sent to bob"]
    assert transcript[-1] == "done: sent to bob"
    kills = 0
    for segment, points in (("suspend", suspend_points), ("resume", resume_points)):
        for n in range(1, len(points) + 1):
            EFFECTS.clear()
            thread = f"{segment}-{n}"
            if segment == "suspend":
                crashing = CrashingBackend(backend, crash_at=n, mode="raise")
                with contextlib.suppress(SimulatedCrash):  # the last point: after it all
                    await agent.invoke({"query": "mail bob"}, thread_id=thread, backend=crashing)
                started = await backend.latest_checkpoint(thread) is not None
                out = await _until_stopped(
                    agent, backend, thread, None if started else {"query": "mail bob"}
                )
                (pending,) = run_info(out).interrupts
                done = await _until_stopped(agent, backend, thread, resume={pending.id: "yes"})
            else:
                out = await agent.invoke({"query": "mail bob"}, thread_id=thread, backend=backend)
                (pending,) = run_info(out).interrupts
                crashing = CrashingBackend(backend, crash_at=n, mode="raise")
                with contextlib.suppress(SimulatedCrash):
                    await agent.invoke(
                        thread_id=thread, backend=crashing, resume={pending.id: "yes"}
                    )
                state = await agent.aget_state(thread, backend)
                if run_info(state).status == "completed":
                    done = state
                else:
                    again = {"resume": {pending.id: "yes"}} if run_info(state).suspended else {}
                    done = await _until_stopped(agent, backend, thread, **again)
            kills += 1
            assert run_info(done).status == "completed", (segment, n)
            assert [m.text for m in done.messages] == transcript, (segment, n)
            assert EFFECTS == ["drafted for bob", "sent to bob"], (segment, n, EFFECTS)
    assert kills == len(suspend_points) + len(resume_points) >= 6
