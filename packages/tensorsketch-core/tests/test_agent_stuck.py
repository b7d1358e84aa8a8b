"""The stuck-loop stop: the same tool calls asked for ``stuck_after`` times in a row."""

from __future__ import annotations

from typing import Any

import pytest

from tensorsketch import FakeProvider, InMemoryBackend, InMemoryTracer, create_agent, tool
from tensorsketch.messages import Message, ToolCall, assistant


def calls(*pairs: tuple[str, dict[str, Any]]) -> Message:
    return assistant(
        tool_calls=[ToolCall(id="", name=n, args=a) for n, a in pairs],
    )


runs: list[tuple[str, Any]] = []


@tool
async def search(q: str) -> str:
    """Search the web."""
    runs.append(("search", q))
    return f"nothing new about {q}"


@tool
async def fetch(url: str) -> str:
    """Fetch a page."""
    runs.append(("fetch", url))
    return "404"


@pytest.fixture(autouse=True)
def _clear_runs() -> None:
    runs.clear()


def always(*pairs: tuple[str, dict[str, Any]]) -> FakeProvider:
    return FakeProvider(policy=lambda messages, tools: calls(*pairs))


async def test_the_same_call_three_times_in_a_row_stops_as_stuck_before_the_limit() -> None:
    provider = always(("search", {"q": "weather"}))
    agent = create_agent(provider, tools=[search, fetch], max_iterations=10)
    result = await agent.invoke({"query": "q"})
    assert result.status == "stuck"
    assert result.iterations == 3 and len(provider.calls) == 3
    assert runs == [("search", "weather")] * 2  # the third ask is not run
    assert 'search({"q":"weather"}) 3 times in a row' in result.stop_detail
    assert "stuck_after=3" in result.stop_detail
    last = result.messages[-1]  # the transcript stays well formed: the call is answered
    assert last.role == "tool" and last.is_error and "Not run" in last.text


async def test_argument_order_does_not_hide_a_repeat() -> None:
    replies = iter([{"url": "a", "x": 1}, {"x": 1, "url": "a"}, {"url": "a", "x": 1}])

    @tool
    async def get(url: str, x: int) -> str:
        """Get."""
        return "same"

    provider = FakeProvider(policy=lambda m, t: calls(("get", next(replies))))
    result = await create_agent(provider, tools=[get]).invoke({"query": "q"})
    assert result.status == "stuck" and result.iterations == 3


async def test_a_cycle_of_two_calls_repeated_stops_as_stuck() -> None:
    turn = 0

    def policy(messages: list[Message], tools: list[Any]) -> Message:
        nonlocal turn
        turn += 1
        if turn % 2:
            return calls(("search", {"q": "x"}))
        return calls(("fetch", {"url": "http://x"}))

    result = await create_agent(FakeProvider(policy=policy), tools=[search, fetch]).invoke(
        {"query": "q"}
    )
    assert result.status == "stuck" and result.iterations == 6
    assert "cycle" in result.stop_detail
    assert 'search({"q":"x"}) -> fetch({"url":"http://x"})' in result.stop_detail


async def test_progress_is_not_stuck_and_the_threshold_is_an_option() -> None:
    turn = 0

    def progressing(messages: list[Message], tools: list[Any]) -> Message:
        nonlocal turn
        turn += 1
        return calls(("search", {"q": f"page {turn}"})) if turn < 6 else assistant("done")

    result = await create_agent(FakeProvider(policy=progressing), tools=[search]).invoke(
        {"query": "q"}
    )
    assert (result.status, result.output, result.iterations) == ("completed", "done", 6)

    loose = create_agent(always(("search", {"q": "w"})), tools=[search], stuck_after=5)
    result = await loose.invoke({"query": "q"})
    assert result.status == "stuck" and result.iterations == 5

    off = create_agent(
        always(("search", {"q": "w"})), tools=[search], stuck_after=None, max_iterations=7
    )
    result = await off.invoke({"query": "q"})
    assert result.status == "max_iterations" and result.iterations == 7


async def test_a_new_user_turn_starts_a_new_count() -> None:
    backend = InMemoryBackend()
    script: list[Message] = [
        calls(("search", {"q": "w"})),
        calls(("search", {"q": "w"})),
        assistant("it is sunny"),
        calls(("search", {"q": "w"})),
        assistant("still sunny"),
    ]
    agent = create_agent(FakeProvider(script), tools=[search])
    first = await agent.invoke({"query": "weather?"}, thread_id="t", backend=backend)
    second = await agent.invoke({"query": "and now?"}, thread_id="t", backend=backend)
    assert (first.status, second.status) == ("completed", "completed")
    assert second.output == "still sunny"


async def test_the_stop_is_streamed_and_traced() -> None:
    agent = create_agent(always(("search", {"q": "w"})), tools=[search])
    tracer = InMemoryTracer()
    events = [e async for e in agent.stream({"query": "q"}, tracer=tracer)]
    stuck = [e for e in events if e.type == "agent.stuck"]
    assert len(stuck) == 1 and stuck[0].data["iteration"] == 2
    assert 'search({"q":"w"})' in stuck[0].data["detail"]
    assert any("agent.stuck" in span.attributes for span in tracer.trace.spans)


class Crash(BaseException):
    """Stands in for the process dying."""


async def test_the_count_survives_a_crash_and_resume() -> None:
    crashed = False

    @tool
    async def flaky(q: str) -> str:
        """Dies once, on its second run, like a process killed mid-call."""
        nonlocal crashed
        runs.append(("flaky", q))
        if len(runs) == 2 and not crashed:
            crashed = True
            raise Crash
        return "same"

    provider = always(("flaky", {"q": "w"}))
    agent = create_agent(provider, tools=[flaky])
    backend = InMemoryBackend()
    with pytest.raises(Crash):
        await agent.invoke({"query": "q"}, thread_id="t", backend=backend)
    assert len(provider.calls) == 2
    result = await agent.invoke(thread_id="t", backend=backend)
    # Turns 0 and 1 replay from the journal and still count: turn 2 is the third ask.
    assert result.status == "stuck" and result.iterations == 3
    assert len(provider.calls) == 3
    assert runs == [("flaky", "w"), ("flaky", "w"), ("flaky", "w")]


@pytest.mark.parametrize("bad", [0, 1, -3, 2.5, True, "3"])
def test_a_bad_threshold_names_the_fix(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"`stuck_after` must be an int >= 2 .* or None"):
        create_agent(FakeProvider(), stuck_after=bad)
