"""A run the runner executes stores a streamed reply's consecutive text deltas as one
``token`` event: its followers read the stored events, which reach the store with the
superstep's commit, so the deltas came to them together anyway. A follower that attaches
while the model is still streaming gets the whole text, in its place among the reasoning
and tool-call fragments; a run somebody streams live still gets a ``token`` per delta."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tensorsketch import ChatProvider, Completion, Context, InMemoryBackend, create_agent, tool
from tensorsketch.constants import END, START
from tensorsketch.events import Event
from tensorsketch.graph import Graph
from tensorsketch.messages import ToolCall, assistant
from tensorsketch.node import Node
from tensorsketch.provider import ReasoningDelta, TextDelta, ToolCallDelta
from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.schema import Schema


@tool
async def add(ctx: Context, a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class Streaming(ChatProvider):
    """Streams reasoning, text in pieces, then a tool call's fragments; waits at ``gate``
    in the middle of its first reply (a follower attaches there)."""

    model = provider_name = "streaming"

    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.gate = asyncio.Event()

    async def complete(self, messages: Any, **_: Any) -> Completion:  # pragma: no cover
        raise AssertionError("streamed only")

    async def stream(self, messages: Any, **_: Any) -> AsyncIterator[Any]:
        if any(m.role == "tool" for m in messages):
            for piece in ("It is ", "5", "."):
                yield TextDelta(piece)
            yield Completion(message=assistant("It is 5."), model="streaming")
            return
        yield ReasoningDelta("sum it")
        for piece in ("Adding ", "two ", "numbers."):
            yield TextDelta(piece)
        self.reached.set()
        await self.gate.wait()
        yield ToolCallDelta(0, id="c1", name="add", arguments='{"a": 2, ')
        yield ToolCallDelta(0, arguments='"b": 3}')
        call = ToolCall(id="c1", name="add", args={"a": 2, "b": 3})
        yield Completion(message=assistant("Adding two numbers.", tool_calls=[call]))


def _shape(events: list[Event]) -> list[tuple[str, Any]]:
    kept = ("reasoning_delta", "token", "tool_call_delta", "tool")
    return [(e.type, e.data.get("text", e.data.get("phase"))) for e in events if e.type in kept]


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return SqliteBackend(str(tmp_path / "runs.db"))
    return InMemoryBackend()


async def test_a_follower_attached_mid_reply_gets_the_whole_text_in_its_place(
    backend: Backend,
) -> None:
    provider = Streaming()
    agent = create_agent(provider, tools=[add])
    async with AsyncRunner(agent, backend=backend) as runner:
        record = await runner.submit({"query": "2+3"}, thread_id="t")
        await provider.reached.wait()  # the model is streaming its first reply

        async def follow() -> list[Event]:
            return [e async for e in runner.events(record.run_id)]

        follower = asyncio.ensure_future(follow())
        await asyncio.sleep(0.05)
        provider.gate.set()
        done = await runner.await_run(record.run_id)
        followed = await asyncio.wait_for(follower, 10)
        replayed = [e async for e in runner.events(record.run_id, follow=False)]
    assert done.status == "succeeded"
    assert _shape(followed) == [
        ("reasoning_delta", "sum it"),
        ("token", "Adding two numbers."),  # three deltas, one event
        ("tool_call_delta", None),
        ("tool_call_delta", None),
        ("tool", "start"),
        ("tool", "end"),
        ("token", "It is 5."),
    ]
    assert [e.to_dict() for e in followed] == [e.to_dict() for e in replayed]
    assert [e.seq for e in followed] == list(range(followed[0].seq, followed[-1].seq + 1))


async def test_a_stream_still_gets_a_token_per_delta() -> None:
    provider = Streaming()
    provider.gate.set()
    agent = create_agent(provider, tools=[add])
    events = [e async for e in agent.stream({"query": "2+3"})]
    assert [text for kind, text in _shape(events) if kind == "token"] == [
        "Adding ",
        "two ",
        "numbers.",
        "It is ",
        "5",
        ".",
    ]


class Failing(ChatProvider):
    """Streams two pieces of text, then fails."""

    model = provider_name = "failing"

    async def complete(self, messages: Any, **_: Any) -> Completion:  # pragma: no cover
        raise AssertionError("streamed only")

    async def stream(self, messages: Any, **_: Any) -> AsyncIterator[Any]:
        yield TextDelta("half ")
        yield TextDelta("a reply")
        raise RuntimeError("connection reset")


async def test_text_streamed_before_a_failure_is_stored(backend: Backend) -> None:
    agent = create_agent(Failing())
    async with AsyncRunner(agent, backend=backend) as runner:
        record = await runner.submit({"query": "go"}, thread_id="t")
        done = await runner.await_run(record.run_id)
        events = [e async for e in runner.events(record.run_id, follow=False)]
    assert done.status == "failed" and (done.error or {}).get("message") == "connection reset"
    assert [e.data["text"] for e in events if e.type == "token"] == ["half a reply"]


class Count(Schema):
    n: int = 0


class Look(Node):
    """Notes what its context says of ``token`` and ``values`` events."""

    In, Out = Count, Count
    seen: ClassVar[list[tuple[bool, bool]]] = []

    async def run(self, ctx: Context, inp: Count) -> Count:
        self.seen.append((ctx.streams("token"), ctx.streams("values")))
        return Count(n=inp.n + 1)


async def test_a_context_says_which_events_reach_a_consumer_as_emitted() -> None:
    app = Graph(Count).add(Look).edge(START, "Look").edge("Look", END).compile()
    backend = InMemoryBackend()
    await app.invoke({}, thread_id="a", backend=backend)  # nobody consumes its events
    _ = [e async for e in app.stream({}, thread_id="b", backend=backend)]  # all of them
    async with AsyncRunner(app, backend=backend) as runner:  # the stop check's types
        record = await runner.submit({}, thread_id="c")
        await runner.await_run(record.run_id)
    assert Look.seen == [(False, False), (True, True), (False, True)]
