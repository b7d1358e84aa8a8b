"""``interrupt(...)`` inside an agent's tool: the run suspends with the tool call it came from,
``resume`` answers it, the tool goes on, and its earlier journaled effects do not run again.

Mirrors LangGraph's documented human-in-the-loop-in-a-tool pattern (``interrupt()`` called
inside a tool of a prebuilt ReAct agent, answered with ``Command(resume=...)``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorsketch import Context, FakeProvider, InMemoryBackend, create_agent, run_info, tool
from tensorsketch.interrupts import interrupt
from tensorsketch.messages import ToolCall, assistant
from tensorsketch.runtime.backends.sqlite import SqliteBackend

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
