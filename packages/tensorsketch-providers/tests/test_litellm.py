"""LiteLLM as a provider: the real ``litellm`` package talking to the local wire server, once
as OpenAI (``openai/...``) and once through its own Anthropic client (``anthropic/...``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from vendor_plays import AnthropicPlay, OpenAIPlay  # type: ignore[import-not-found]

from tensorsketch import create_agent, tool
from tensorsketch.messages import ToolCall, tool_result, user
from tensorsketch.provider import Completion, RateLimitError, TextDelta, ToolCallDelta
from tensorsketch.providers.litellm import LiteLLMProvider
from tensorsketch.schema import Schema

litellm = pytest.importorskip("litellm")
litellm.telemetry = False

# LiteLLM's own code warns under pydantic 2.11 (a `ReadOnly` TypedDict, a deprecated
# attribute read while streaming); pytest turns warnings into errors, and these are LiteLLM's
# to fix, not ours.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Items? .* `ReadOnly` qualifier:UserWarning"),
    pytest.mark.filterwarnings("ignore:Accessing the 'model_:DeprecationWarning"),
]


class Verdict(Schema):
    ok: bool
    reason: str


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: sunny"


ROUTES = {
    # name: (the play answering, the LiteLLM model name, the endpoint LiteLLM is given)
    "openai": (OpenAIPlay, "openai/gpt-4o", "/v1"),
    "anthropic": (AnthropicPlay, "anthropic/claude-sonnet-4-6", ""),
}


@pytest.fixture(params=sorted(ROUTES))
def route(request: pytest.FixtureRequest, server: Any) -> tuple[Any, LiteLLMProvider]:
    play_type, model, suffix = ROUTES[request.param]
    provider = LiteLLMProvider(model, api_key="sk-test", base_url=f"{server.url}{suffix}")
    return play_type(), provider


async def test_a_text_reply_and_its_usage(server: Any, route: Any) -> None:
    play, provider = route
    server.queue(play.text("Hello there."))
    completion = await provider.complete([user("hi")], max_tokens=50, temperature=0.2)
    assert completion.text == "Hello there." and completion.stop_reason == "end_turn"
    assert completion.usage.output_tokens == 7 and completion.usage.input_tokens > 0
    body = server.last.body
    assert body["max_tokens"] == 50 and body["temperature"] == 0.2
    assert body["messages"][-1]["content"] in ("hi", [{"type": "text", "text": "hi"}])


async def test_tool_calls_round_trip(server: Any, route: Any) -> None:
    play, provider = route
    calls = [ToolCall(id="call_1", name="lookup", args={"city": "Oslo"})]
    server.queue(play.tool_calls(calls), play.text("Sunny in Oslo."))
    first = await provider.complete([user("weather in Oslo?")], tools=[lookup])
    [call] = first.message.tool_calls
    assert (call.name, call.args) == ("lookup", {"city": "Oslo"})
    assert first.stop_reason == "tool_use"
    second = await provider.complete(
        [user("weather in Oslo?"), first.message, tool_result(call, "Oslo: sunny")],
        tools=[lookup],
    )
    assert second.text == "Sunny in Oslo."
    sent = json.dumps(server.last.body)
    assert "Oslo: sunny" in sent and call.id in sent


async def test_streaming_text_and_tool_call_fragments(server: Any, route: Any) -> None:
    play, provider = route
    server.queue(play.stream_text(["Hel", "lo ", "there."]))
    items = [i async for i in provider.stream([user("hi")])]
    texts = [i.text for i in items if isinstance(i, TextDelta)]
    assert "".join(texts) == "Hello there." and len(texts) > 1
    assert isinstance(items[-1], Completion) and items[-1].text == "Hello there."

    calls = [ToolCall(id="call_9", name="lookup", args={"city": "Rome"})]
    server.queue(play.stream_tool_calls(calls))
    items = [i async for i in provider.stream([user("Rome?")], tools=[lookup])]
    fragments = [i for i in items if isinstance(i, ToolCallDelta)]
    assert fragments and fragments[0].name == "lookup"
    assert json.loads("".join(f.arguments for f in fragments)) == {"city": "Rome"}
    final = items[-1]
    assert isinstance(final, Completion) and final.message.tool_calls[0].args == {"city": "Rome"}


async def test_an_agent_runs_on_it(server: Any, route: Any) -> None:
    play, provider = route
    calls = [ToolCall(id="call_1", name="lookup", args={"city": "Oslo"})]
    server.queue(play.tool_calls(calls), play.text("It is sunny."))
    result = await create_agent(provider, tools=[lookup]).invoke({"query": "Oslo?"})
    assert result.output == "It is sunny." and result.iterations == 2


async def test_structured_output_in_tool_mode_works_for_any_route(server: Any, route: Any) -> None:
    play, provider = route
    final = [ToolCall(id="call_f", name="final_result", args={"ok": True, "reason": "fine"})]
    server.queue(play.tool_calls(final))
    agent = create_agent(provider, output_schema=Verdict, output_mode="tool")
    result = await agent.invoke({"query": "judge"})
    assert result.parsed == Verdict(ok=True, reason="fine")


async def test_a_rate_limit_is_the_core_error(server: Any, route: Any) -> None:
    play, provider = route
    server.queue(play.error(429, retry_after="7"))
    with pytest.raises(RateLimitError) as caught:
        await provider.complete([user("hi")])
    assert caught.value.retryable


def test_capabilities_come_from_litellms_model_map() -> None:
    known = LiteLLMProvider("openai/gpt-4o")
    assert known.capabilities.tools and known.capabilities.strict_json
    unknown = LiteLLMProvider("openai/some-local-model")
    assert unknown.capabilities.tools and not unknown.capabilities.strict_json


def test_create_provider_knows_it() -> None:
    from tensorsketch.registry import create_provider

    provider = create_provider("litellm", model="ollama/llama3")
    assert isinstance(provider, LiteLLMProvider) and provider.provider_name == "litellm"
