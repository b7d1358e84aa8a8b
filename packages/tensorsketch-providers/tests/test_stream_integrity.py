"""A stream is a finished reply only once the vendor said why it stopped.

A stream cut off before its terminal event (Anthropic's ``message_delta``, the Chat Completions
chunk with a ``finish_reason``, the Responses API's ``response.completed``, Gemini's chunk with
a ``finishReason``) raises the retryable
``ProviderConnectionError`` a dropped connection raises, instead of passing the partial text
off as the answer. A server that answers a streaming request with one plain JSON body (it
ignored ``stream``) is read as that complete reply, on every provider.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from wire_server import Reply  # type: ignore[import-not-found]

from tensorsketch.messages import ToolCall, user
from tensorsketch.provider import (
    Completion,
    ProviderConnectionError,
    ProviderServerError,
    TextDelta,
    ToolCallDelta,
)
from tensorsketch.tools import tool

#: How many events at the end of a play's stream carry (or follow) its stop reason.
TERMINAL = {"anthropic": 2, "openai": 3, "openai-responses": 1, "google": 1}


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def _cut(play: Any, reply: Reply) -> Reply:
    """``reply`` without its terminal events, as if the connection closed before them."""
    return Reply(events=reply.events[: -TERMINAL[play.name]])


def _before_text(play: Any) -> Reply:
    """A text stream that ends before its first piece of text."""
    events = play.stream_text(["never sent"]).events
    # start (+ ping) / role chunk / response.created, output_item.added
    keep = {"anthropic": 2, "openai": 1, "openai-responses": 2, "google": 0}[play.name]
    return Reply(events=events[:keep])


async def _drain(stream: Any) -> list[Any]:
    return [item async for item in stream]


def _assert_cut_off(err: ProviderConnectionError, provider: Any, play: Any) -> None:
    assert err.retryable is True
    assert isinstance(err, ConnectionError)
    assert err.provider == provider.provider_name
    assert err.model == play.model
    assert err.status_code is None
    assert f"{provider.provider_name} model {play.model!r}" in str(err)
    assert "stream ended before the reply was complete" in str(err)


async def test_truncated_text_stream_raises_a_retryable_error(server: Any, play: Any) -> None:
    server.queue(_cut(play, play.stream_text(["Hel", "lo ", "world"])))
    provider = play.provider(server.url)

    seen: list[Any] = []
    with pytest.raises(ProviderConnectionError) as caught:
        async for item in provider.stream([user("Hi")]):
            seen.append(item)

    _assert_cut_off(caught.value, provider, play)
    assert not any(isinstance(i, Completion) for i in seen), "no Completion for a cut reply"
    assert any(isinstance(i, TextDelta) for i in seen), "the deltas that did arrive still stream"


async def test_truncated_tool_call_stream_raises(server: Any, play: Any) -> None:
    call = ToolCall(id="call_1", name="add", args={"a": 1, "b": 2})
    server.queue(_cut(play, play.stream_tool_calls([call], text="Adding.")))
    provider = play.provider(server.url)

    with pytest.raises(ProviderConnectionError) as caught:
        await _drain(provider.stream([user("1+2")], tools=[add]))
    _assert_cut_off(caught.value, provider, play)


async def test_stream_cut_before_any_text_raises(server: Any, play: Any) -> None:
    server.queue(_before_text(play))
    provider = play.provider(server.url)

    with pytest.raises(ProviderConnectionError) as caught:
        await _drain(provider.stream([user("Hi")]))
    _assert_cut_off(caught.value, provider, play)


async def test_empty_event_stream_raises(server: Any, play: Any) -> None:
    server.queue(Reply(events=[]))
    provider = play.provider(server.url)

    with pytest.raises(ProviderConnectionError) as caught:
        await _drain(provider.stream([user("Hi")]))
    _assert_cut_off(caught.value, provider, play)


async def test_anthropic_stream_without_message_stop_is_complete(server: Any) -> None:
    # `message_delta` carries the stop reason and the final usage: nothing of the reply is
    # missing when only the closing `message_stop` is.
    import vendor_plays  # type: ignore[import-not-found]

    play = vendor_plays.PLAYS["anthropic"]()
    server.queue(Reply(events=play.stream_text(["Hel", "lo"]).events[:-1]))
    provider = play.provider(server.url)
    try:
        items = await _drain(provider.stream([user("Hi")]))
    finally:
        await provider.aclose()
    assert items[-1].text == "Hello"
    assert items[-1].stop_reason == "end_turn"


async def test_json_body_answering_a_stream_is_the_whole_reply(server: Any, play: Any) -> None:
    server.queue(play.text("Hello world"), play.text("Hello world"))
    provider = play.provider(server.url)

    items = await _drain(provider.stream([user("Hi")]))
    expected = await provider.complete([user("Hi")])

    assert items == [TextDelta("Hello world"), expected]
    assert expected.stop_reason == "end_turn"
    assert expected.usage == play.expected_usage


async def test_json_body_with_tool_calls_answering_a_stream(server: Any, play: Any) -> None:
    call = ToolCall(id="call_7", name="add", args={"a": 2, "b": 5})
    server.queue(play.tool_calls([call]))
    provider = play.provider(server.url)

    items = await _drain(provider.stream([user("2+5")], tools=[add]))

    *deltas, completion = items
    assert isinstance(completion, Completion)
    assert completion.stop_reason == "tool_use"
    [got] = completion.message.tool_calls
    assert (got.name, got.args) == ("add", {"a": 2, "b": 5})
    calls = [d for d in deltas if isinstance(d, ToolCallDelta)]
    assert [(d.index, d.id, d.name, json.loads(d.arguments or "")) for d in calls] == [
        (0, got.id, "add", {"a": 2, "b": 5})
    ]


@pytest.mark.parametrize("name", ["anthropic", "openai"])
async def test_json_error_body_answering_a_stream_is_an_error(server: Any, name: str) -> None:
    import vendor_plays  # type: ignore[import-not-found]

    play = vendor_plays.PLAYS[name]()
    error = play.error(529 if name == "anthropic" else 500)
    server.queue(Reply(status=200, body=error.body))
    provider = play.provider(server.url)
    try:
        with pytest.raises(ProviderServerError) as caught:
            await _drain(provider.stream([user("Hi")]))
    finally:
        await provider.aclose()
    assert caught.value.retryable is True
    assert caught.value.provider == provider.provider_name


# -- the agent loop ------------------------------------------------------------------------------


async def test_agent_retry_recovers_from_a_truncated_stream(server: Any, play: Any) -> None:
    agents = pytest.importorskip("tensorsketch.agents")
    from tensorsketch.middleware import RetryMiddleware

    server.queue(_before_text(play), play.stream_text(["All ", "good."]))
    agent = agents.create_agent(
        play.provider(server.url), middleware=[RetryMiddleware(attempts=2, backoff=0)]
    )

    retries: list[Any] = []
    final: Any = None
    async for event in agent.stream({"query": "Hi"}):
        if event.type == "retry":
            retries.append(event.data)
        elif event.type == "values":
            final = event.data

    assert len(server.requests) == 2, "the cut-off call was sent again"
    assert [r["target"] for r in retries] == ["model"]
    assert "stream ended before the reply was complete" in retries[0]["error"]
    output = final["output"] if isinstance(final, dict) else final.output
    status = final["status"] if isinstance(final, dict) else final.status
    assert (output, status) == ("All good.", "completed")


async def test_agent_does_not_complete_on_a_cut_off_answer(server: Any, play: Any) -> None:
    # Text already reached the consumer, so the call is not retried (a second answer would
    # follow the first one's start) — but the run must not pass "Hel" off as the answer.
    agents = pytest.importorskip("tensorsketch.agents")

    server.queue(_cut(play, play.stream_text(["Hel", "lo ", "world"])))
    agent = agents.create_agent(play.provider(server.url))

    final: Any = None
    with pytest.raises(ProviderConnectionError):
        async for event in agent.stream({"query": "Hi"}):
            if event.type == "values":
                final = event.data
    assert final is None or (final["status"] if isinstance(final, dict) else final.status) != (
        "completed"
    )
