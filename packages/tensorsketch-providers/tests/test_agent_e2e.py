"""``create_agent`` end to end on each provider: the agent loop, the real SDK, a local vendor.

The agent asks the model, runs the tool the model asked for, sends the result back and returns
the model's answer — every hop over HTTP to the vendor-protocol server.
"""

from __future__ import annotations

from typing import Any

import pytest

from tensorsketch.messages import ToolCall
from tensorsketch.schema import Schema
from tensorsketch.tools import tool

agents = pytest.importorskip(
    "tensorsketch.agents", reason="create_agent (tensorsketch.agents) is not in core yet"
)

SEEN: list[dict[str, int]] = []


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    SEEN.append({"a": a, "b": b})
    return a + b


def _scripted(play: Any) -> ToolCall:
    call_id = {
        "anthropic": "toolu_01A",
        "openai": "call_abc",
        "openai-responses": "call_abc",
        "google": "unused",
    }[play.name]
    return ToolCall(id=call_id, name="add", args={"a": 2, "b": 3})


async def test_create_agent_runs_a_tool_loop(server: Any, play: Any) -> None:
    SEEN.clear()
    scripted = _scripted(play)
    server.queue(play.tool_calls([scripted]), play.text("2 + 3 = 5."))
    agent = agents.create_agent(
        play.provider(server.url), tools=[add], system="You are a careful calculator."
    )

    result = await agent.invoke({"query": "what is 2 + 3?"})

    assert result.output == "2 + 3 = 5."
    assert SEEN == [{"a": 2, "b": 3}], "the tool ran once with the model's arguments"
    assert [m.role for m in result.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert len(server.requests) == 2
    first, second = (play.sent(r) for r in server.requests)
    assert first.system == second.system == "You are a careful calculator."
    assert set(first.tools) == {"add"}
    [result_item] = second.turns[-1][1]
    assert (result_item.kind, result_item.value) == ("result", "5")
    assert result_item.id == play.wire_call_id(scripted)


async def test_create_agent_streams_tokens(server: Any, play: Any) -> None:
    SEEN.clear()
    scripted = _scripted(play)
    server.queue(play.stream_tool_calls([scripted]), play.stream_text(["The sum ", "is ", "5."]))
    agent = agents.create_agent(play.provider(server.url), tools=[add])

    tokens: list[str] = []
    final: Any = None
    async for event in agent.stream({"query": "2 + 3?"}):
        if event.type == "token":
            tokens.append(event.data["text"])
        elif event.type == "values":
            final = event.data

    assert tokens == ["The sum ", "is ", "5."]
    assert SEEN == [{"a": 2, "b": 3}]
    for request in server.requests:
        play.check_endpoint(request, stream=True)
    output = final["output"] if isinstance(final, dict) else final.output
    assert output == "The sum is 5."


class Forecast(Schema):
    city: str
    celsius: int


async def test_create_agent_repairs_structured_output(server: Any, play: Any) -> None:
    # The first answer misses a field; the agent sends the problem back and the model fixes it.
    server.queue(
        play.structured({"city": "Rome"}), play.structured({"city": "Rome", "celsius": 21})
    )
    agent = agents.create_agent(play.provider(server.url), output_schema=Forecast)

    result = await agent.invoke({"query": "Weather in Rome?"})

    assert result.parsed == Forecast(city="Rome", celsius=21)
    assert len(server.requests) == 2
    retry = play.sent(server.requests[1])
    assert retry.output_schema is not None
    feedback = [i.value for i in retry.turns[-1][1] if i.kind == "text"]
    assert any("celsius" in text for text in feedback), "the repair names the missing field"
