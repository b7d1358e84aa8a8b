"""Budgets (tokens, dollars, sub-agents included), the price table, and model fallbacks."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tensorsketch import (
    DEFAULT_PRICES,
    BudgetExceededError,
    FakeProvider,
    InMemoryBackend,
    RetryMiddleware,
    Usage,
    as_tool,
    create_agent,
    estimate_cost,
    tool,
)
from tensorsketch.budget import Budget
from tensorsketch.fake import FakeStreamFailure
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.pricing import ModelPrice, price_for
from tensorsketch.provider import (
    AuthenticationError,
    BadRequestError,
    ProviderServerError,
    ProviderTimeoutError,
    RateLimitError,
)


@tool
def step(n: int) -> str:
    """One more step."""
    return f"step {n}"


def keep_stepping(messages: list[Message], tools: list[Any]) -> Message:
    turn = sum(1 for m in messages if m.role == "assistant")
    return assistant(
        f"working {turn}", tool_calls=[ToolCall(id=f"s{turn}", name="step", args={"n": turn})]
    )


# -- token and cost limits --------------------------------------------------------------------


async def test_max_total_tokens_stops_with_the_best_answer() -> None:
    provider = FakeProvider(policy=keep_stepping, usage=Usage(input_tokens=100, output_tokens=20))
    agent = create_agent(provider, tools=[step], max_total_tokens=250, max_iterations=10)
    result = await agent.invoke({"query": "go"})
    assert result.status == "budget_exceeded"
    assert len(provider.calls) == 3  # 120, 240, then 360 > 250: checked after each call
    assert result.usage.total_tokens == 360
    assert result.output == "working 2"
    assert "max_total_tokens=250" in result.stop_detail
    last_call, skipped = result.messages[-2], result.messages[-1]
    assert last_call.tool_calls[0].id == "s2"
    assert skipped.tool_call_id == "s2" and skipped.is_error and "budget" in skipped.text


async def test_max_cost_usd_stops_on_a_priced_model() -> None:
    provider = FakeProvider(
        policy=keep_stepping,
        model="gpt-4o",
        usage=Usage(input_tokens=100_000, output_tokens=10_000),
    )
    agent = create_agent(provider, tools=[step], max_cost_usd=0.5)
    result = await agent.invoke({"query": "go"})
    assert result.status == "budget_exceeded" and len(provider.calls) == 2
    assert result.cost_usd == pytest.approx(0.70)  # 2 x ($0.25 in + $0.10 out)
    assert "max_cost_usd=0.5" in result.stop_detail


async def test_an_unpriced_model_is_reported_not_counted_as_free(
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider = FakeProvider(policy=keep_stepping, model="house-model-1")
    agent = create_agent(provider, tools=[step], max_cost_usd=0.01, max_iterations=2)
    with caplog.at_level(logging.WARNING, logger="tensorsketch.budget"):
        result = await agent.invoke({"query": "go"})
    assert result.status == "max_iterations" and result.cost_usd is None
    assert "'house-model-1' has no price" in caplog.text


async def test_sub_agents_spend_from_the_callers_budget() -> None:
    specialist_model = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="x", name="step", args={"n": 1})]),
            assistant("specialist answer"),
        ],
        usage=Usage(input_tokens=900, output_tokens=100),
    )
    specialist = create_agent(specialist_model, tools=[step])
    supervisor_model = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="d1", name="expert", args={"request": "help"})]),
            assistant("never reached"),
        ],
        usage=Usage(input_tokens=80, output_tokens=20),
    )
    supervisor = create_agent(
        supervisor_model,
        tools=[as_tool(specialist, name="expert", description="Ask the expert.")],
        max_total_tokens=1500,
    )
    result = await supervisor.invoke({"query": "hard question"})
    assert result.status == "budget_exceeded"
    assert result.usage.total_tokens == 100 + 2 * 1000
    assert len(supervisor_model.calls) == 1 and len(specialist_model.calls) == 2


async def test_totals_survive_a_resume_including_replayed_sub_agents() -> None:
    @tool(requires_approval=True)
    def publish(text: str) -> str:
        """Publish."""
        return "published"

    def specialist() -> Any:
        return create_agent(
            FakeProvider(["draft text"], usage=Usage(input_tokens=500, output_tokens=500))
        )

    def supervisor_model() -> FakeProvider:
        return FakeProvider(
            [
                assistant(tool_calls=[ToolCall(id="d", name="writer", args={"request": "x"})]),
                assistant(tool_calls=[ToolCall(id="p", name="publish", args={"text": "t"})]),
                assistant("all done"),
            ],
            usage=Usage(input_tokens=10, output_tokens=10),
        )

    def supervisor(model: FakeProvider) -> Any:
        return create_agent(
            model, tools=[as_tool(specialist(), name="writer", description="Write."), publish]
        )

    backend = InMemoryBackend()
    model = supervisor_model()
    agent = supervisor(model)
    suspended = await agent.invoke({"query": "write and publish"}, thread_id="t", backend=backend)
    assert suspended.status == "suspended"
    done = await agent.invoke(thread_id="t", backend=backend, resume={"p": True})
    assert done.status == "completed"
    assert done.usage.total_tokens == 3 * 20 + 1000  # the writer's run was replayed, still counted
    fresh_model = supervisor_model()
    fresh = supervisor(fresh_model)
    await fresh.invoke({"query": "write and publish"}, thread_id="u", backend=backend)
    again = await fresh.invoke(thread_id="u", backend=backend, resume={"p": True})
    assert again.usage == done.usage


def test_budget_accounting_and_check() -> None:
    parent = Budget(max_total_tokens=100)
    child = Budget(parent=parent, max_cost_usd=1.0)
    assert child.charge(Usage(input_tokens=60), "gpt-4o") == pytest.approx(60 * 2.5 / 1e6)
    assert child.exceeded() is None
    child.charge(Usage(output_tokens=50), "nobody-prices-me")
    assert parent.total_tokens == 110 and parent.calls == 2
    assert child.cost_usd is None and child.unpriced == {"nobody-prices-me"}
    with pytest.raises(
        BudgetExceededError, match="110 tokens, over its max_total_tokens=100"
    ) as info:
        child.check()
    assert (info.value.kind, info.value.limit, info.value.actual) == ("tokens", 100, 110)
    with pytest.raises(ValueError, match="max_cost_usd"):
        Budget(max_cost_usd=0)


# -- prices ------------------------------------------------------------------------------------


def test_estimate_cost_from_the_default_table() -> None:
    million = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert estimate_cost("gpt-4o", million) == pytest.approx(12.5)
    cached = Usage(cache_read_tokens=1_000_000, cache_write_tokens=1_000_000)
    assert estimate_cost("claude-haiku-4-5", cached) == pytest.approx(0.10 + 1.25)
    assert estimate_cost("gpt-4o-2024-08-06", million) == pytest.approx(12.5)  # dated snapshot
    assert estimate_cost("claude-opus-5-20260724", million) == pytest.approx(30.0)
    assert estimate_cost("models/gemini-2.5-pro", million) == pytest.approx(11.25)
    # Gemini replies name numbered versions: priced as the base model
    assert estimate_cost("gemini-2.5-flash-001", million) == pytest.approx(2.80)
    assert estimate_cost("models/gemini-2.5-pro-002", million) == pytest.approx(11.25)
    assert estimate_cost("my-local-llama", million) is None
    assert estimate_cost(None, million) is None
    assert all(isinstance(p, ModelPrice) for p in DEFAULT_PRICES.values())


def test_price_overrides() -> None:
    usage = Usage(input_tokens=2_000_000, output_tokens=1_000_000)
    prices = {
        "my-local-llama": (0.0, 0.0),
        "gpt-4o": {"input": 1.0, "output": 2.0},
        "house": ModelPrice(0.5, 1.5, cache_read=0.05),
    }
    assert estimate_cost("my-local-llama", usage, prices) == 0.0
    assert estimate_cost("gpt-4o", usage, prices) == pytest.approx(4.0)
    assert estimate_cost("house", usage, prices) == pytest.approx(2.5)
    assert estimate_cost("claude-haiku-4-5", usage, prices) == pytest.approx(7.0)  # defaults stay
    assert price_for("gpt-4o-2024-08-06", prices) == ModelPrice(1.0, 2.0)
    with pytest.raises(ValueError, match="non-negative number"):
        ModelPrice(-1.0, 2.0)
    with pytest.raises(TypeError, match="price for 'x' must be"):
        estimate_cost("x", usage, {"x": "cheap"})  # type: ignore[dict-item]


async def test_agent_prices_override_reaches_the_budget() -> None:
    provider = FakeProvider(["hi"], model="house", usage=Usage(input_tokens=1_000_000))
    agent = create_agent(provider, prices={"house": (3.0, 0.0)})
    assert (await agent.invoke({"query": "q"})).cost_usd == pytest.approx(3.0)


# -- fallbacks --------------------------------------------------------------------------------


async def test_fallback_on_retryable_errors_and_each_turn_starts_at_the_primary() -> None:
    primary = FakeProvider(
        [
            RateLimitError("429"),
            assistant("primary answer"),
        ],
        model="primary",
    )
    backup = FakeProvider(
        [assistant(tool_calls=[ToolCall(id="s", name="step", args={"n": 1})])], model="backup"
    )
    agent = create_agent(primary, tools=[step], fallbacks=[backup])
    events = [e async for e in agent.stream({"query": "q"})]
    fallback = [e.data for e in events if e.type == "fallback"]
    assert fallback == [
        {"from": "primary", "to": "backup", "error": "429", "error_type": "RateLimitError"}
    ]
    assert len(primary.calls) == 2 and len(backup.calls) == 1
    assert events[-1].data["output"] == "primary answer"


@pytest.mark.parametrize(
    "error",
    [ProviderServerError("503"), ProviderTimeoutError("slow"), TimeoutError("socket")],
)
async def test_server_errors_and_timeouts_fall_back(error: Exception) -> None:
    backup = FakeProvider(["backup answer"])
    agent = create_agent(FakeProvider([error]), fallbacks=[backup])
    assert (await agent.invoke({"query": "q"})).output == "backup answer"


@pytest.mark.parametrize("error", [BadRequestError("bad"), AuthenticationError("no key")])
async def test_non_retryable_errors_do_not_fall_back(error: Exception) -> None:
    backup = FakeProvider(["backup answer"])
    agent = create_agent(FakeProvider([error]), fallbacks=[backup])
    with pytest.raises(type(error)):
        await agent.invoke({"query": "q"})
    assert backup.calls == []


async def test_no_fallback_after_text_was_streamed() -> None:
    backup = FakeProvider(["backup answer"])
    primary = FakeProvider([FakeStreamFailure("Half an ans", RateLimitError("cut off"))])
    agent = create_agent(primary, fallbacks=[backup])
    tokens: list[str] = []
    with pytest.raises(RateLimitError):
        async for event in agent.stream({"query": "q"}):
            if event.type == "token":
                tokens.append(event.data["text"])
    assert "".join(tokens) == "Half an ans" and backup.calls == []
    # Nothing streamed to anyone (invoke): the same failure falls back.
    primary = FakeProvider([FakeStreamFailure("Half an ans", RateLimitError("cut off"))])
    agent = create_agent(primary, fallbacks=[backup])
    assert (await agent.invoke({"query": "q"})).output == "backup answer"


async def test_retries_happen_per_provider_before_falling_back() -> None:
    primary = FakeProvider([RateLimitError("1"), RateLimitError("2")], model="p")
    backup = FakeProvider(["from backup"], model="b")
    agent = create_agent(
        primary, fallbacks=[backup], middleware=[RetryMiddleware(attempts=2, backoff=0)]
    )
    events = [e async for e in agent.stream({"query": "q"})]
    assert [e.type for e in events if e.type in ("retry", "fallback")] == ["retry", "fallback"]
    assert len(primary.calls) == 2 and len(backup.calls) == 1
    assert events[-1].data["output"] == "from backup"


async def test_a_fallback_answer_is_journaled_and_replayed() -> None:
    @tool(requires_approval=True)
    def ship() -> str:
        """Ship it."""
        return "shipped"

    primary = FakeProvider([ProviderServerError("down"), assistant("done")])
    backup = FakeProvider([assistant(tool_calls=[ToolCall(id="s", name="ship", args={})])])
    agent = create_agent(primary, tools=[ship], fallbacks=[backup])
    backend = InMemoryBackend()
    first = await agent.invoke({"query": "ship"}, thread_id="t", backend=backend)
    assert first.status == "suspended"
    done = await agent.invoke(thread_id="t", backend=backend, resume={"s": True})
    assert done.output == "done"
    assert len(primary.calls) == 2 and len(backup.calls) == 1
