from __future__ import annotations

from typing import Any

import pytest

from tensorsketch import (
    Completion,
    FakeProvider,
    InMemoryBackend,
    Middleware,
    ModelRequest,
    ObservabilityMiddleware,
    RetryMiddleware,
    ToolRequest,
    create_agent,
    tool,
)
from tensorsketch.messages import ToolCall, assistant
from tensorsketch.provider import BadRequestError, ProviderServerError, RateLimitError


class Trace(Middleware):
    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def wrap_model(self, request: ModelRequest, call_next: Any) -> Completion:
        self.log.append(f"{self.name}>model")
        result: Completion = await call_next(request)
        self.log.append(f"{self.name}<model")
        return result

    async def wrap_tool(self, request: ToolRequest, call_next: Any) -> Any:
        self.log.append(f"{self.name}>tool:{request.tool.name}")
        result = await call_next(request)
        self.log.append(f"{self.name}<tool")
        return result


@tool
def echo(text: str) -> str:
    """Echo."""
    return text


def one_tool_then_answer() -> FakeProvider:
    return FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="e", name="echo", args={"text": "hi"})]),
            assistant("done"),
        ]
    )


async def test_the_first_middleware_is_outermost() -> None:
    log: list[str] = []
    agent = create_agent(
        one_tool_then_answer(), tools=[echo], middleware=[Trace("A", log), Trace("B", log)]
    )
    await agent.invoke({"query": "q"})
    assert log == [
        "A>model", "B>model", "B<model", "A<model",
        "A>tool:echo", "B>tool:echo", "B<tool", "A<tool",
        "A>model", "B>model", "B<model", "A<model",
    ]  # fmt: skip


async def test_middleware_can_modify_and_short_circuit() -> None:
    class Cache(Middleware):
        async def wrap_model(self, request: ModelRequest, call_next: Any) -> Completion:
            if request.messages[-1].text == "cached?":
                return Completion(message=assistant("from cache"))
            return await call_next(request)

        async def wrap_tool(self, request: ToolRequest, call_next: Any) -> Any:
            request.call = request.call.model_copy(update={"args": {"text": "rewritten"}})
            result = await call_next(request)
            return result.upper()

    provider = one_tool_then_answer()
    agent = create_agent(provider, tools=[echo], middleware=[Cache()])
    assert (await agent.invoke({"query": "cached?"})).output == "from cache"
    assert provider.calls == []
    result = await agent.invoke({"query": "go"})
    assert result.messages[2].text == "REWRITTEN"


async def test_retry_counts_attempts_in_total_and_emits_events() -> None:
    provider = FakeProvider([ProviderServerError("503 a"), ProviderServerError("503 b"), "ok"])
    agent = create_agent(provider, middleware=[RetryMiddleware(attempts=3, backoff=0)])
    events = [e async for e in agent.stream({"query": "q"})]
    retries = [e.data for e in events if e.type == "retry"]
    assert retries == [
        {"target": "model", "attempt": 1, "error": "503 a"},
        {"target": "model", "attempt": 2, "error": "503 b"},
    ]
    assert events[-1].data["output"] == "ok"

    provider = FakeProvider([ProviderServerError("a"), ProviderServerError("b"), "ok"])
    agent = create_agent(provider, middleware=[RetryMiddleware(attempts=2, backoff=0)])
    with pytest.raises(ProviderServerError, match="b"):
        await agent.invoke({"query": "q"})
    assert len(provider.calls) == 2


async def test_retry_on_filters_and_non_retryable_errors_are_not_retried() -> None:
    provider = FakeProvider([ProviderServerError("x"), "ok"])
    agent = create_agent(
        provider, middleware=[RetryMiddleware(attempts=3, backoff=0, retry_on=(TimeoutError,))]
    )
    with pytest.raises(ProviderServerError):
        await agent.invoke({"query": "q"})
    provider = FakeProvider([BadRequestError("context too long"), "ok"])
    agent = create_agent(provider, middleware=[RetryMiddleware(attempts=3, backoff=0)])
    with pytest.raises(BadRequestError):
        await agent.invoke({"query": "q"})
    assert len(provider.calls) == 1


async def test_retry_wraps_tools_too() -> None:
    attempts: list[int] = []

    @tool
    def flaky() -> str:
        """Fails twice."""
        attempts.append(1)
        if len(attempts) < 3:
            raise ConnectionError("reset")
        return "finally"

    provider = FakeProvider(
        [assistant(tool_calls=[ToolCall(id="f", name="flaky", args={})]), assistant("ok")]
    )
    agent = create_agent(
        provider, tools=[flaky], middleware=[RetryMiddleware(attempts=3, backoff=0)]
    )
    events = [e async for e in agent.stream({"query": "q"})]
    assert [e.data["attempt"] for e in events if e.type == "retry"] == [1, 2]
    assert {e.data["target"] for e in events if e.type == "retry"} == {"tool"}
    assert provider.calls[1].messages[-1].text == "finally"


def test_retry_backoff_honours_retry_after() -> None:
    retry = RetryMiddleware(attempts=5, backoff=0.5, max_backoff=10)
    assert retry._delay(1, ValueError()) == 0.5
    assert retry._delay(3, ValueError()) == 2.0
    assert retry._delay(1, RateLimitError("slow", retry_after=4)) == 4
    assert retry._delay(1, RateLimitError("slow", retry_after=60)) == 10
    with pytest.raises(ValueError, match="attempts"):
        RetryMiddleware(attempts=0)


async def test_observability_events_for_a_failing_tool() -> None:
    @tool
    def broken() -> str:
        """Breaks."""
        raise RuntimeError("disk full")

    provider = FakeProvider(
        [assistant(tool_calls=[ToolCall(id="b", name="broken", args={})]), assistant("sorry")]
    )
    agent = create_agent(provider, tools=[broken], middleware=[ObservabilityMiddleware()])
    events = [
        e.data for e in [e async for e in agent.stream({"query": "q"})] if e.type == "tool_call"
    ]
    assert [d["phase"] for d in events] == ["start", "error"]
    assert events[1]["error"] == "disk full" and events[1]["tool"] == "broken"
    # Without a stream consumer it does nothing and changes nothing.
    provider = FakeProvider(
        [assistant(tool_calls=[ToolCall(id="b", name="broken", args={})]), assistant("sorry")]
    )
    agent = create_agent(provider, tools=[broken], middleware=[ObservabilityMiddleware()])
    assert (await agent.invoke({"query": "q"})).output == "sorry"


async def test_the_stack_runs_inside_the_journaled_step() -> None:
    log: list[str] = []

    @tool(requires_approval=True)
    def deploy() -> str:
        """Deploy."""
        return "deployed"

    provider = FakeProvider(
        [
            ProviderServerError("blip"),
            assistant(tool_calls=[ToolCall(id="d", name="deploy", args={})]),
            assistant("live"),
        ]
    )
    agent = create_agent(
        provider,
        tools=[deploy],
        middleware=[Trace("T", log), RetryMiddleware(attempts=2, backoff=0)],
    )
    backend = InMemoryBackend()
    await agent.invoke({"query": "ship"}, thread_id="t", backend=backend)
    assert log == ["T>model", "T<model"]  # one journaled success, after an inner retry
    log.clear()
    out = await agent.invoke(thread_id="t", backend=backend, resume={"d": True})
    assert out.output == "live"
    assert log == ["T>tool:deploy", "T<tool", "T>model", "T<model"]  # turn 0 was replayed
    assert len(provider.calls) == 3


async def test_observability_marks_a_suspending_tool_call() -> None:
    from tensorsketch.interrupts import RetryLater

    @tool
    def later() -> str:
        """Not ready yet."""
        raise RetryLater("busy", delay=60)

    provider = FakeProvider([assistant(tool_calls=[ToolCall(id="l", name="later", args={})])])
    agent = create_agent(provider, tools=[later], middleware=[ObservabilityMiddleware()])
    backend = InMemoryBackend()
    events = [e async for e in agent.stream({"query": "q"}, thread_id="t", backend=backend)]
    phases = [e.data["phase"] for e in events if e.type == "tool_call"]
    assert phases == ["start", "suspended"]
    assert events[-1].type == "interrupt"
