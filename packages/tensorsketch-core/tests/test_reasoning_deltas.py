"""Reasoning streaming: a provider's ``ReasoningDelta`` chunks reach the run's stream as
``reasoning_delta`` events, before the turn's text and tool calls, and the whole reasoning is
kept on the assistant message in the transcript."""

from __future__ import annotations

from tensorsketch import FakeProvider, create_agent, tool
from tensorsketch.messages import Message, Reasoning, ToolCall
from tensorsketch.provider import ReasoningDelta


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


THOUGHT = Reasoning(provider="fake", text="Two plus three: use add.")


def _scripted() -> FakeProvider:
    call = ToolCall(id="c1", name="add", args={"a": 2, "b": 3})
    return FakeProvider(
        [Message(role="assistant", content="Adding.", tool_calls=[call], reasoning=[THOUGHT]), "5"]
    )


async def test_reasoning_streams_as_reasoning_delta_events_before_the_text() -> None:
    agent = create_agent(_scripted(), tools=[add])
    events = [e async for e in agent.stream({"query": "2+3"})]
    types = [e.type for e in events]
    deltas = [e for e in events if e.type == "reasoning_delta"]
    assert [d.data for d in deltas] == [{"text": THOUGHT.text}]
    assert deltas[0].node == "agent"
    assert types.index("reasoning_delta") < types.index("token") < types.index("tool")


async def test_streamed_reasoning_is_kept_on_the_message() -> None:
    agent = create_agent(_scripted(), tools=[add])
    result = await agent.invoke({"query": "2+3"})
    assert result.messages[1].reasoning == [THOUGHT]


async def test_the_fake_provider_streams_reasoning_first() -> None:
    items = [i async for i in _scripted().stream([])]
    assert items[0] == ReasoningDelta(THOUGHT.text)
