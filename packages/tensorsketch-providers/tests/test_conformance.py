"""The provider conformance suite: one set of tests, run against all three vendors.

Each test drives the real vendor SDK against a local server playing that vendor's wire protocol
(``wire_server.py`` / ``vendor_plays.py``), then checks both sides: what the SDK put on the
wire (decoded to a vendor-neutral view) and the :class:`Completion` our provider made of the
reply. SDK-internal retries are off (``max_retries=0``) except where a test is about them.
"""

from __future__ import annotations

import base64
import json
import socket
from typing import Any

import pytest

from tensorsketch.messages import ImageBlock, ToolCall, assistant, system, tool_result, user
from tensorsketch.provider import (
    AuthenticationError,
    BadRequestError,
    Completion,
    ProviderConnectionError,
    ProviderServerError,
    ProviderTimeoutError,
    RateLimitError,
    StructuredOutputError,
    TextDelta,
    ToolCallDelta,
)
from tensorsketch.schema import Schema
from tensorsketch.tools import tool

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake-image-bytes").decode()


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two numbers."""
    return a * b


class City(Schema):
    """Facts about a city."""

    name: str
    population: int
    tags: list[str] = []


async def _collect(stream: Any) -> tuple[list[Any], Completion]:
    items = [item async for item in stream]
    assert isinstance(items[-1], Completion), "a stream must end with the Completion"
    assert not any(isinstance(i, Completion) for i in items[:-1])
    return items[:-1], items[-1]


def _call(play: Any, n: int, name: str, args: dict[str, Any]) -> ToolCall:
    prefix = {
        "anthropic": "toolu_0",
        "openai": "call_",
        "openai-responses": "call_",
        "google": "fc_",
    }[play.name]
    return ToolCall(id=f"{prefix}{n}", name=name, args=args)


def _assert_call_ids(play: Any, got: list[ToolCall], scripted: list[ToolCall]) -> None:
    for mine, theirs in zip(got, scripted, strict=True):
        if play.wire_call_id(theirs) is None:
            assert mine.id.startswith("ts_call_"), "an id-less call needs a made-up id"
        else:
            assert mine.id == theirs.id
    assert len({c.id for c in got}) == len(got), "call ids must be unique"


# -- plain answers and history -------------------------------------------------------------------


async def test_plain_answer(server: Any, play: Any) -> None:
    server.queue(play.text("Hello there."))
    provider = play.provider(server.url)

    completion = await provider.complete([system("Be brief."), user("Hi")])

    play.check_endpoint(server.last, stream=False)
    sent = play.sent(server.last)
    assert sent.model == play.model
    assert sent.system == "Be brief."
    assert [(role, [(i.kind, i.value) for i in items]) for role, items in sent.turns] == [
        ("user", [("text", "Hi")])
    ]
    assert sent.tools == {}
    assert sent.output_schema is None
    assert sent.max_tokens == 1024

    assert completion.message.role == "assistant"
    assert completion.text == "Hello there."
    assert completion.message.tool_calls == []
    assert completion.parsed is None
    assert completion.usage == play.expected_usage
    assert completion.model == play.reply_model
    assert completion.stop_reason == "end_turn"


async def test_multi_turn_history_with_images_and_options(server: Any, play: Any) -> None:
    server.queue(play.text("A cat, then a dog."))
    provider = play.provider(server.url)
    history = [
        system("You describe pictures."),
        user("What is this?", ImageBlock(data=PNG, media_type="image/png")),
        assistant("A cat."),
        user("And this one?", ImageBlock(url="https://example.com/dog.jpg")),
    ]

    completion = await provider.complete(history, max_tokens=77, temperature=0.25)

    sent = play.sent(server.last)
    assert sent.system == "You describe pictures."
    assert sent.max_tokens == 77
    roles = [role for role, _ in sent.turns]
    assert roles == ["user", "assistant", "user"]
    first, _, last = (items for _, items in sent.turns)
    assert [(i.kind, i.value) for i in first] == [("text", "What is this?"), ("image", PNG)]
    assert first[1].media_type == "image/png"
    assert [i.value for i in sent.turns[1][1]] == ["A cat."]
    assert [(i.kind, i.value) for i in last] == [
        ("text", "And this one?"),
        ("image", "https://example.com/dog.jpg"),
    ]
    body = json.dumps(server.last.body)
    assert "0.25" in body, "options pass through to the API"
    assert completion.text == "A cat, then a dog."


# -- tools ---------------------------------------------------------------------------------------


async def test_tool_call_round_trip(server: Any, play: Any) -> None:
    scripted = _call(play, 1, "add", {"a": 2, "b": 3})
    server.queue(play.tool_calls([scripted]), play.text("2 + 3 = 5."))
    provider = play.provider(server.url)
    history = [system("Use tools."), user("What is 2 + 3?")]

    first = await provider.complete(history, tools=[add])

    sent = play.sent(server.last)
    assert sent.tools == {"add": add.json_schema()}
    assert sent.tool_descriptions == {"add": "Add two numbers."}
    assert first.stop_reason == "tool_use"
    [call] = first.message.tool_calls
    assert (call.name, call.args) == ("add", {"a": 2, "b": 3})
    _assert_call_ids(play, [call], [scripted])

    history += [first.message, tool_result(call, 5)]
    second = await provider.complete(history, tools=[add])

    sent = play.sent(server.last)
    assert [role for role, _ in sent.turns] == ["user", "assistant", "user"]
    [sent_call] = sent.turns[1][1]
    assert (sent_call.kind, sent_call.name, sent_call.args) == ("call", "add", {"a": 2, "b": 3})
    assert sent_call.id == play.wire_call_id(scripted)
    [result] = sent.turns[2][1]
    assert (result.kind, result.value, result.is_error) == ("result", "5", False)
    assert result.id == play.wire_call_id(scripted)
    assert result.name in (None, "add")
    assert second.text == "2 + 3 = 5."
    assert second.stop_reason == "end_turn"
    assert len(server.requests) == 2


async def test_parallel_tool_calls(server: Any, play: Any) -> None:
    scripted = [
        _call(play, 1, "add", {"a": 1, "b": 2}),
        _call(play, 2, "multiply", {"a": 3, "b": 4}),
    ]
    server.queue(play.tool_calls(scripted, text="Computing both."), play.text("3 and 12."))
    provider = play.provider(server.url)
    history = [user("1+2 and 3*4?")]

    first = await provider.complete(history, tools=[add, multiply])

    assert set(play.sent(server.last).tools) == {"add", "multiply"}
    assert first.text == "Computing both."
    assert [(c.name, c.args) for c in first.message.tool_calls] == [
        ("add", {"a": 1, "b": 2}),
        ("multiply", {"a": 3, "b": 4}),
    ]
    _assert_call_ids(play, first.message.tool_calls, scripted)

    calls = first.message.tool_calls
    history += [
        first.message,
        tool_result(calls[0], 3),
        tool_result(calls[1], "multiply is down", is_error=True),
    ]
    await provider.complete(history, tools=[add, multiply])

    sent = play.sent(server.last)
    assert [role for role, _ in sent.turns] == ["user", "assistant", "user"]
    assert [(i.kind, i.name) for i in sent.turns[1][1] if i.kind == "call"] == [
        ("call", "add"),
        ("call", "multiply"),
    ]
    results = sent.turns[2][1]
    assert [(r.kind, r.value) for r in results] == [
        ("result", "3"),
        ("result", "multiply is down"),
    ]
    if play.carries_tool_errors:
        assert [r.is_error for r in results] == [False, True]
    assert [r.id for r in results] == [play.wire_call_id(c) for c in scripted]


async def test_duplicate_tool_names_are_rejected(server: Any, play: Any) -> None:
    provider = play.provider(server.url)
    with pytest.raises(ValueError, match="two tools are named 'add'"):
        await provider.complete([user("hi")], tools=[add, add])
    assert server.requests == []


# -- structured output ---------------------------------------------------------------------------


async def test_structured_output(server: Any, play: Any) -> None:
    server.queue(play.structured({"name": "Paris", "population": 2100000, "tags": ["capital"]}))
    provider = play.provider(server.url)

    completion = await provider.complete([user("Tell me about Paris.")], output_schema=City)

    sent = play.sent(server.last)
    schema = sent.output_schema
    assert schema is not None
    assert set(schema["properties"]) == {"name", "population", "tags"}
    assert {"name", "population"} <= set(schema["required"])
    assert completion.parsed == City(name="Paris", population=2100000, tags=["capital"])
    assert json.loads(completion.text) == {
        "name": "Paris",
        "population": 2100000,
        "tags": ["capital"],
    }
    assert completion.message.tool_calls == []
    assert completion.stop_reason == "end_turn"
    assert completion.usage == play.expected_usage


async def test_structured_output_that_does_not_validate(server: Any, play: Any) -> None:
    server.queue(play.structured({"name": "Paris"}))
    provider = play.provider(server.url)

    with pytest.raises(
        StructuredOutputError, match=r"does not match the City schema.*population"
    ) as caught:
        await provider.complete([user("Paris?")], output_schema=City)
    # The failed reply travels with the error, so a repair loop can show it and count it.
    assert caught.value.completion is not None
    assert caught.value.completion.usage == play.expected_usage
    assert json.loads(caught.value.raw) == {"name": "Paris"}


# -- streaming -----------------------------------------------------------------------------------


async def test_streaming_text(server: Any, play: Any) -> None:
    pieces = ["Hel", "lo, ", "wor", "ld!"]
    server.queue(play.stream_text(pieces))
    provider = play.provider(server.url)

    deltas, completion = await _collect(provider.stream([system("Be brief."), user("Hi")]))

    play.check_endpoint(server.last, stream=True)
    assert play.sent(server.last).system == "Be brief."
    assert all(isinstance(d, TextDelta) for d in deltas)
    assert [d.text for d in deltas] == pieces
    assert completion.text == "Hello, world!"
    assert completion.usage == play.expected_usage
    assert completion.model == play.reply_model
    assert completion.stop_reason == "end_turn"


async def test_streamed_tool_calls(server: Any, play: Any) -> None:
    scripted = [
        _call(play, 1, "add", {"a": 10, "b": 20}),
        _call(play, 2, "multiply", {"a": 6, "b": 7}),
    ]
    server.queue(play.stream_tool_calls(scripted, text="On it."))
    provider = play.provider(server.url)

    deltas, completion = await _collect(
        provider.stream([user("10+20, 6*7")], tools=[add, multiply])
    )

    play.check_endpoint(server.last, stream=True)
    assert set(play.sent(server.last).tools) == {"add", "multiply"}
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == "On it."
    by_index: dict[int, list[ToolCallDelta]] = {}
    for d in deltas:
        if isinstance(d, ToolCallDelta):
            by_index.setdefault(d.index, []).append(d)
    assert sorted(by_index) == [0, 1]
    assembled = []
    for index in (0, 1):
        chunks = by_index[index]
        head = chunks[0]
        assert head.id is not None and head.name is not None, "id and name come first"
        assembled.append((head.id, head.name, json.loads("".join(c.arguments for c in chunks))))
    calls = completion.message.tool_calls
    assert [(c.id, c.name, c.args) for c in calls] == assembled
    assert [(c.name, c.args) for c in calls] == [(c.name, c.args) for c in scripted]
    _assert_call_ids(play, calls, scripted)
    assert completion.text == "On it."
    assert completion.stop_reason == "tool_use"
    assert completion.usage == play.expected_usage


async def test_streamed_structured_output(server: Any, play: Any) -> None:
    data = {"name": "Oslo", "population": 700000, "tags": []}
    server.queue(play.stream_structured(data))
    provider = play.provider(server.url)

    deltas, completion = await _collect(provider.stream([user("Oslo?")], output_schema=City))

    assert all(isinstance(d, TextDelta) for d in deltas), "structured output streams as text"
    assert json.loads("".join(d.text for d in deltas)) == data
    assert completion.parsed == City(**data)
    assert completion.message.tool_calls == []
    assert completion.stop_reason == "end_turn"


# -- errors --------------------------------------------------------------------------------------


async def test_rate_limit_with_retry_after(server: Any, play: Any) -> None:
    server.queue(play.error(429, retry_after="7"))
    provider = play.provider(server.url)

    with pytest.raises(RateLimitError) as caught:
        await provider.complete([user("Hi")])

    err = caught.value
    assert err.retry_after == 7.0
    assert err.retryable is True
    assert err.status_code == 429
    assert err.provider == provider.provider_name
    assert err.model == play.model
    assert "rate limited" in str(err)
    assert len(server.requests) == 1, "SDK retries are off in this test"


async def test_rate_limit_while_streaming(server: Any, play: Any) -> None:
    server.queue(play.error(429, retry_after="3"))
    provider = play.provider(server.url)

    with pytest.raises(RateLimitError) as caught:
        await _collect(provider.stream([user("Hi")]))
    assert caught.value.retry_after == 3.0


async def test_server_error(server: Any, play: Any) -> None:
    server.queue(play.error(500))
    provider = play.provider(server.url)

    with pytest.raises(ProviderServerError) as caught:
        await provider.complete([user("Hi")])
    assert caught.value.retryable is True
    assert caught.value.status_code == 500


async def test_timeout(server: Any, play: Any) -> None:
    server.queue(server_reply_that_hangs())
    provider = play.provider(server.url, timeout=0.5)

    with pytest.raises(ProviderTimeoutError) as caught:
        await provider.complete([user("Hi")])
    assert isinstance(caught.value, TimeoutError)
    assert caught.value.retryable is True


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, BadRequestError), (401, AuthenticationError), (403, AuthenticationError)],
)
async def test_client_errors_are_not_retryable(
    server: Any, play: Any, status: int, kind: type[Exception]
) -> None:
    server.queue(play.error(status))
    provider = play.provider(server.url)

    with pytest.raises(kind) as caught:
        await provider.complete([user("Hi")])
    assert caught.value.retryable is False  # type: ignore[attr-defined]
    assert caught.value.status_code == status  # type: ignore[attr-defined]


async def test_connection_refused(play: Any) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = play.provider(f"http://127.0.0.1:{port}")

    with pytest.raises(ProviderConnectionError) as caught:
        await provider.complete([user("Hi")])
    assert isinstance(caught.value, ConnectionError)


async def test_sdk_retries_after_a_rate_limit(server: Any, play: Any) -> None:
    server.queue(play.error(429, retry_after="0.01"), play.text("Second time lucky."))
    provider = play.provider(server.url, retries=1)

    completion = await provider.complete([user("Hi")])

    assert completion.text == "Second time lucky."
    assert len(server.requests) == 2


def server_reply_that_hangs() -> Any:
    import wire_server  # type: ignore[import-not-found]

    return wire_server.Reply(hang=True)
