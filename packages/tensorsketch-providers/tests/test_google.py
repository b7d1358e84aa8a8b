"""What only the Gemini mapping does: thought signatures, id-less function calls, finish
reasons, config options. The shared behaviour is in ``test_conformance.py``."""

from __future__ import annotations

from typing import Any

import pytest
from vendor_plays import GooglePlay, _field  # type: ignore[import-not-found]

from tensorsketch.messages import ToolCall, assistant, tool_result, user
from tensorsketch.provider import AuthenticationError
from tensorsketch.providers.google import SKIP_SIGNATURE, GoogleProvider
from tensorsketch.tools import tool


@tool
def weather(city: str) -> str:
    """Weather for a city."""
    return city


@pytest.fixture
async def play() -> Any:
    play = GooglePlay()
    yield play
    for provider in play.created:
        await provider.aclose()


def _provider(server: Any, model: str) -> GoogleProvider:
    return GoogleProvider(model=model, api_key="k", base_url=server.url, max_retries=0)


def _sent_calls(server: Any) -> list[dict[str, Any]]:
    return [
        part
        for content in server.last.body["contents"]
        for part in content["parts"]
        if _field(part, "functionCall") is not None
    ]


async def test_thought_signatures_go_back_with_their_calls(server: Any, play: Any) -> None:
    calls = [
        ToolCall(id="x", name="weather", args={"city": "Rome"}),
        ToolCall(id="y", name="weather", args={"city": "Oslo"}),
    ]
    server.queue(play.tool_calls(calls), play.text("Warm and cold."))
    provider = play.provider(server.url)
    history = [user("Weather in Rome and Oslo?")]

    first = await provider.complete(history, tools=[weather])
    history += [first.message]
    history += [tool_result(c, "sunny") for c in first.message.tool_calls]
    await provider.complete(history, tools=[weather])

    sent = _sent_calls(server)
    assert [_field(p, "thoughtSignature") for p in sent] == ["c2lnbmF0dXJlLW9uZQ==", None]
    # Gemini gave no ids: none go back, the results are matched by name and order.
    assert [_field(p, "functionCall").get("id") for p in sent] == [None, None]
    responses = [
        _field(part, "functionResponse") for part in server.last.body["contents"][-1]["parts"]
    ]
    assert [(r["name"], r.get("id")) for r in responses] == [("weather", None), ("weather", None)]


async def test_unknown_calls_get_the_documented_placeholder_on_gemini_3(server: Any) -> None:
    server.queue(GooglePlay().text("ok"))
    provider = _provider(server, "gemini-3-flash-preview")
    calls = [
        ToolCall(id="fc_1", name="weather", args={"city": "Rome"}),
        ToolCall(id="fc_2", name="weather", args={"city": "Oslo"}),
    ]
    try:
        await provider.complete(
            [
                user("?"),
                assistant(tool_calls=calls),
                tool_result(calls[0], "sunny"),
                tool_result(calls[1], "snow"),
            ],
            tools=[weather],
        )
    finally:
        await provider.aclose()

    sent = _sent_calls(server)
    # Only the first call of a turn carries a signature; real ids go back with the calls.
    assert [_field(p, "thoughtSignature") for p in sent] == [SKIP_SIGNATURE, None]
    assert [_field(p, "functionCall")["id"] for p in sent] == ["fc_1", "fc_2"]


async def test_older_models_get_no_placeholder(server: Any) -> None:
    server.queue(GooglePlay().text("ok"))
    provider = _provider(server, "gemini-2.5-flash")
    call = ToolCall(id="fc_1", name="weather", args={"city": "Rome"})
    try:
        await provider.complete(
            [user("?"), assistant(tool_calls=[call]), tool_result(call, "sunny")], tools=[weather]
        )
    finally:
        await provider.aclose()
    [part] = _sent_calls(server)
    assert _field(part, "thoughtSignature") is None


async def test_function_call_ids_from_the_api_are_kept(server: Any, play: Any) -> None:
    reply = play.tool_calls([ToolCall(id="-", name="weather", args={"city": "Rome"})])
    reply.body["candidates"][0]["content"]["parts"][0]["functionCall"]["id"] = "fc-abc"
    server.queue(reply)
    provider = play.provider(server.url)

    completion = await provider.complete([user("?")], tools=[weather])

    assert [c.id for c in completion.message.tool_calls] == ["fc-abc"]


async def test_safety_stop_is_reported_as_content_filter(server: Any, play: Any) -> None:
    server.queue(play.text(""))
    server._replies[-1].body["candidates"][0]["finishReason"] = "SAFETY"
    provider = play.provider(server.url)

    completion = await provider.complete([user("?")])
    assert completion.stop_reason == "content_filter"


async def test_a_blocked_prompt_has_no_candidates(server: Any, play: Any) -> None:
    server.queue(play.text(""))
    body = server._replies[-1].body
    body["candidates"] = []
    body["promptFeedback"] = {"blockReason": "SAFETY"}
    provider = play.provider(server.url)

    completion = await provider.complete([user("?")])
    assert completion.text == ""
    assert completion.stop_reason == "content_filter"


async def test_options_are_generation_config_fields(server: Any, play: Any) -> None:
    server.queue(play.text("ok"))
    provider = play.provider(server.url)

    await provider.complete([user("?")], temperature=0.3, stop=["END"], seed=7)

    config = server.last.body["generationConfig"]
    assert config["temperature"] == 0.3
    assert _field(config, "stopSequences") == ["END"]
    assert config["seed"] == 7
    with pytest.raises(TypeError, match="does not know the option 'frobnicate'"):
        await provider.complete([user("?")], frobnicate=1)


async def test_a_tool_result_needs_the_tool_name(server: Any, play: Any) -> None:
    provider = play.provider(server.url)
    with pytest.raises(ValueError, match="has no tool name"):
        await provider.complete([user("?"), tool_result("orphan-id", "x")])
    assert server.requests == []


def test_no_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(AuthenticationError, match="GEMINI_API_KEY"):
        GoogleProvider(model="gemini-2.5-flash")


async def test_a_gateway_without_a_key(server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    server.queue(GooglePlay().text("ok"))
    provider = GoogleProvider(base_url=server.url, max_retries=0)
    try:
        completion = await provider.complete([user("?")])
    finally:
        await provider.aclose()
    assert completion.text == "ok"
