"""Tool-call argument streaming: a provider's ``ToolCallDelta`` chunks reach the run's stream
as ``tool_call_delta`` events, in order, as they arrive (not buffered to the call's end)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from tensorsketch import ChatProvider, Completion, FakeProvider, InMemoryBackend, create_agent, tool
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.provider import StreamDelta, TextDelta, ToolCallDelta


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def test_fake_provider_tool_calls_stream_as_tool_call_delta_events() -> None:
    provider = FakeProvider(
        [
            assistant("Adding.", tool_calls=[ToolCall(id="c1", name="add", args={"a": 2, "b": 3})]),
            "5",
        ]
    )
    events = [e async for e in create_agent(provider, tools=[add]).stream({"query": "2+3"})]
    types = [e.type for e in events]
    deltas = [e for e in events if e.type == "tool_call_delta"]
    assert [d.data for d in deltas] == [
        {"index": 0, "id": "c1", "name": "add", "arguments": '{"a": 2, "b": 3}'}
    ]
    assert deltas[0].node == "agent"
    # After the turn's text, before the tool runs.
    assert types.index("token") < types.index("tool_call_delta") < types.index("tool")


class Fragmented(ChatProvider):
    """Streams one call's arguments in three fragments, pausing between them, and records
    when each fragment was handed over."""

    model = "fragmented"
    provider_name = "fragmented"

    def __init__(self) -> None:
        self.turn = 0
        self.gate = asyncio.Event()

    async def complete(self, messages: Sequence[Message], **_: Any) -> Completion:
        raise AssertionError("streamed runs call stream()")

    async def stream(  # type: ignore[override]
        self, messages: Sequence[Message], **_: Any
    ) -> AsyncIterator[StreamDelta | Completion]:
        self.turn += 1
        if self.turn > 1:
            yield TextDelta("done")
            yield Completion(message=assistant("done"), model=self.model)
            return
        yield ToolCallDelta(0, "c9", "add")
        yield ToolCallDelta(0, arguments='{"a": 4')
        await self.gate.wait()  # the stream waits here until the consumer has seen the above
        yield ToolCallDelta(0, arguments=', "b": 5}')
        call = ToolCall(id="c9", name="add", args={"a": 4, "b": 5})
        yield Completion(message=assistant(tool_calls=[call]), model=self.model)


async def test_fragments_arrive_in_order_without_buffering() -> None:
    provider = Fragmented()
    agent = create_agent(provider, tools=[add])
    seen: list[dict[str, Any]] = []

    async def consume() -> None:
        async for event in agent.stream({"query": "4+5"}):
            if event.type == "tool_call_delta":
                seen.append(event.data)
                if len(seen) == 2:  # the second fragment is out while the model still streams
                    provider.gate.set()

    # Buffered fragments would never reach the consumer, which alone opens the gate.
    await asyncio.wait_for(consume(), timeout=5)
    assert [d["arguments"] for d in seen] == ["", '{"a": 4', ', "b": 5}']
    assert seen[0]["id"] == "c9" and seen[0]["name"] == "add"
    assert [d["index"] for d in seen] == [0, 0, 0]


async def test_a_replayed_model_call_streams_no_tool_call_deltas() -> None:
    provider = FakeProvider(
        [assistant(tool_calls=[ToolCall(id="c1", name="add", args={"a": 1, "b": 1})]), "2"]
    )
    agent = create_agent(provider, tools=[add])
    backend = InMemoryBackend()
    await agent.invoke({"query": "1+1"}, thread_id="t", backend=backend)
    again = [e async for e in agent.stream(thread_id="t", backend=backend)]
    assert not [e for e in again if e.type == "tool_call_delta"]
