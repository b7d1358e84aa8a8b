from __future__ import annotations

from collections.abc import Iterator

import pytest

from tensorsketch import Completion, FakeProvider, Schema, Usage, create_provider, tool
from tensorsketch.fake import FakeStreamFailure
from tensorsketch.messages import Message, ToolCall, assistant, user
from tensorsketch.provider import (
    ChatProvider,
    RateLimitError,
    StructuredOutputError,
    TextDelta,
    ToolCallDelta,
)


@tool
def ping(host: str) -> str:
    """Ping a host."""
    return "pong"


class Answer(Schema):
    value: int


async def test_script_is_handed_out_in_order_and_calls_are_recorded() -> None:
    provider = FakeProvider(["first", assistant("second")])
    one = await provider.complete([user("a")], tools=[ping], max_tokens=50, temperature=0)
    two = await provider.complete([user("a"), one.message, user("b")])
    assert (one.message.text, two.message.text) == ("first", "second")
    assert one.model == "fake-model" and one.stop_reason == "end_turn"
    assert provider.remaining == 0
    first = provider.calls[0]
    assert first.tool_names == ["ping"]
    assert first.max_tokens == 50 and first.options == {"temperature": 0}
    assert [m.text for m in provider.calls[1].messages] == ["a", "first", "b"]
    with pytest.raises(RuntimeError, match="script exhausted: it had 2 replies"):
        await provider.complete([user("c")])


async def test_scripted_exceptions_and_completions() -> None:
    canned = Completion(message=assistant("canned"), usage=Usage(input_tokens=7, output_tokens=1))
    provider = FakeProvider([RateLimitError("slow down", retry_after=2), canned])
    with pytest.raises(RateLimitError) as info:
        await provider.complete([user("x")])
    assert info.value.retryable and info.value.retry_after == 2
    got = await provider.complete([user("x")])
    assert got.usage.input_tokens == 7 and got.model == "fake-model"
    assert len(provider.calls) == 2  # a failed request is still recorded


async def test_policy_sync_and_async_and_the_echo_default() -> None:
    def policy(messages: list[Message], tools: list[object]) -> Message:
        return assistant(f"{len(messages)} messages, {len(tools)} tools")

    assert (await FakeProvider(policy=policy).complete([user("a")], tools=[ping])).text == (
        "1 messages, 1 tools"
    )

    async def slow(messages: list[Message], tools: list[object]) -> Message:
        return assistant("async")

    assert (await FakeProvider(policy=slow).complete([user("a")])).text == "async"
    assert (await FakeProvider().complete([user("say this")])).text == "say this"
    with pytest.raises(ValueError, match="not both"):
        FakeProvider(["a"], policy=policy)
    with pytest.raises(TypeError, match="wrap it in a list"):
        FakeProvider("hello")  # type: ignore[arg-type]


async def test_streams_token_deltas_then_the_completion() -> None:
    call = ToolCall(id="c1", name="ping", args={"host": "h"})
    provider = FakeProvider([assistant("Hello there, friend.", tool_calls=[call])])
    items = [item async for item in provider.stream([user("hi")])]
    texts = [i.text for i in items if isinstance(i, TextDelta)]
    assert len(texts) == 3 and "".join(texts) == "Hello there, friend."
    assert [i for i in items if isinstance(i, ToolCallDelta)] == [
        ToolCallDelta(0, "c1", "ping", '{"host": "h"}')
    ]
    assert isinstance(items[-1], Completion) and items[-1].message.tool_calls == [call]


async def test_default_stream_falls_back_to_complete() -> None:
    class Plain(ChatProvider):
        async def complete(self, messages, *, tools=None, output_schema=None, max_tokens=1024, **o):  # type: ignore[no-untyped-def]
            return Completion(message=assistant("whole"))

    items = [i async for i in Plain().stream([user("x")])]
    assert items[0] == TextDelta("whole") and isinstance(items[1], Completion)
    assert Plain().capabilities.tools and not Plain().capabilities.streaming


async def test_stream_failure_mid_reply() -> None:
    provider = FakeProvider([FakeStreamFailure("partial answer", RateLimitError("cut"))])
    seen: list[str] = []
    with pytest.raises(RateLimitError):
        async for item in provider.stream([user("x")]):
            assert isinstance(item, TextDelta)
            seen.append(item.text)
    assert "".join(seen) == "partial answer"


async def test_structured_output_parses_the_reply_text() -> None:
    provider = FakeProvider(['```json\n{"value": 4}\n```', '{"value": "four"}', "not json"])
    first = await provider.complete([user("2+2")], output_schema=Answer)
    assert first.parsed == Answer(value=4)
    with pytest.raises(StructuredOutputError, match="`value`") as info:
        await provider.complete([user("2+2")], output_schema=Answer)
    assert info.value.raw == '{"value": "four"}' and info.value.completion is not None
    with pytest.raises(StructuredOutputError, match="not valid JSON"):
        await provider.complete([user("2+2")], output_schema=Answer)


async def test_usage_is_fixed_or_estimated() -> None:
    fixed = FakeProvider(["x"], usage=Usage(input_tokens=10, output_tokens=2))
    assert (await fixed.complete([user("hello")])).usage == Usage(input_tokens=10, output_tokens=2)
    estimated = await FakeProvider(["a" * 40]).complete([user("b" * 80)])
    assert estimated.usage.output_tokens == 10
    assert estimated.usage.input_tokens == 24  # 80 chars / 4 + 4 per message


def test_capabilities_and_registry_name() -> None:
    provider = create_provider("fake", model="m1")
    assert isinstance(provider, FakeProvider) and provider.model == "m1"
    caps = provider.capabilities
    assert (caps.tools, caps.strict_json, caps.streaming, caps.vision) == (True, True, True, True)


async def test_a_function_passed_positionally_is_the_policy() -> None:
    def decide(messages: list[Message], tools: list[object]) -> Message:
        return assistant(f"decided on {messages[-1].text}")

    provider = FakeProvider(decide)
    assert (await provider.complete([user("x")])).text == "decided on x"
    assert provider.remaining is None  # a policy, not a script
    with pytest.raises(ValueError, match="not both"):
        FakeProvider(decide, policy=decide)

    class Both:
        def __call__(self, messages: list[Message], tools: list[object]) -> Message:
            return assistant("call")

        def __iter__(self) -> Iterator[str]:
            return iter(["iter"])

    with pytest.raises(TypeError, match=r"both callable and iterable; pass it as `policy=`"):
        FakeProvider(Both())
