from __future__ import annotations

from typing import Any, Literal

import pytest

from tensorsketch import (
    END,
    START,
    ChatProvider,
    Completion,
    Context,
    FakeProvider,
    Graph,
    InMemoryBackend,
    InMemoryTracer,
    Node,
    Schema,
    ValidationError,
    generate_structured,
)
from tensorsketch.messages import assistant, user
from tensorsketch.provider import StructuredOutputError


class Sentiment(Schema):
    label: Literal["positive", "negative", "neutral"]
    confidence: float


async def test_valid_reply_comes_back_typed() -> None:
    provider = FakeProvider(['{"label": "positive", "confidence": 0.9}'])
    result = await generate_structured(provider, Sentiment, "I loved it!")
    assert result == Sentiment(label="positive", confidence=0.9)
    assert provider.calls[0].output_schema is Sentiment


async def test_invalid_replies_are_sent_back_for_repair() -> None:
    provider = FakeProvider(
        [
            "Sure! It is positive.",
            '{"label": "great", "confidence": 0.9}',
            '{"label": "positive", "confidence": 0.8}',
        ]
    )
    result = await generate_structured(provider, Sentiment, "I loved it!")
    assert result.label == "positive"
    second, third = provider.calls[1].messages, provider.calls[2].messages
    assert [m.role for m in second] == ["user", "assistant", "user"]
    assert second[1].text == "Sure! It is positive."
    assert "not valid JSON" in second[2].text
    assert "`label`" in third[-1].text and "Sentiment" in third[-1].text


async def test_giving_up_raises_a_validation_error_with_the_last_reply() -> None:
    provider = FakeProvider(["nope", "still nope"])
    with pytest.raises(StructuredOutputError, match="after 1 repair") as info:
        await generate_structured(provider, Sentiment, "?", max_repairs=1)
    assert isinstance(info.value, ValidationError)
    assert info.value.raw == "still nope"
    assert len(provider.calls) == 2


async def test_a_provider_that_parses_itself_is_trusted() -> None:
    class Native(ChatProvider):
        async def complete(self, messages, *, tools=None, output_schema=None, max_tokens=1024, **o):  # type: ignore[no-untyped-def]
            parsed = output_schema(label="neutral", confidence=0.5)
            return Completion(message=assistant(parsed.model_dump_json()), parsed=parsed)

    assert (await generate_structured(Native(), Sentiment, "meh")).label == "neutral"


async def test_conversation_prompts_and_system_prompt() -> None:
    provider = FakeProvider(['{"label": "negative", "confidence": 1}'])
    await generate_structured(
        provider, Sentiment, [user("first"), assistant("ok"), user("awful")], system_prompt="Rate."
    )
    assert [m.text for m in provider.calls[0].messages] == ["Rate.", "first", "ok", "awful"]


async def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="needs a Schema class"):
        await generate_structured(FakeProvider(), "Sentiment", "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_repairs"):
        await generate_structured(FakeProvider(), Sentiment, "x", max_repairs=-1)


class Crash(BaseException):
    pass


async def test_each_attempt_is_journaled_with_ctx() -> None:
    provider = FakeProvider(["bad", '{"label": "positive", "confidence": 0.7}'])
    crash = [True]

    class State(Schema):
        text: str
        label: str = ""

    class Classify(Node):
        class In(Schema):
            text: str

        class Out(Schema):
            label: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            result = await generate_structured(provider, Sentiment, inp.text, ctx=ctx)
            if crash.pop() if crash else False:
                raise Crash
            return self.Out(label=result.label)

    app = Graph(State).add(Classify).edge(START, "Classify").edge("Classify", END).compile()
    backend = InMemoryBackend()
    tracer = InMemoryTracer()
    with pytest.raises(Crash):
        await app.invoke({"text": "I loved it!"}, thread_id="t", backend=backend, tracer=tracer)
    assert tracer.trace.model_calls == 2 and len(provider.calls) == 2
    tracer = InMemoryTracer()
    out = await app.invoke(thread_id="t", backend=backend, tracer=tracer)
    assert out.label == "positive"
    assert len(provider.calls) == 2 and tracer.trace.model_calls == 0  # both attempts replayed
