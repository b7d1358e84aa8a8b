"""What only the Anthropic mapping does: prompt-cache breakpoints, the forced ``respond`` tool,
SSE ``error`` events, option routing. The shared behaviour is in ``test_conformance.py``."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from vendor_plays import AnthropicPlay  # type: ignore[import-not-found]

from tensorsketch.messages import ImageBlock, ToolCall, assistant, system, tool_result, user
from tensorsketch.provider import AuthenticationError, ProviderServerError
from tensorsketch.providers.anthropic import RESPOND_TOOL, AnthropicProvider
from tensorsketch.schema import Schema
from tensorsketch.tools import tool


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return city


class Verdict(Schema):
    ok: bool
    reason: str


@pytest.fixture
async def play() -> Any:
    play = AnthropicPlay()
    yield play
    for provider in play.created:
        await provider.aclose()


async def test_cache_breakpoints_mark_the_stable_prefix(server: Any, play: Any) -> None:
    server.queue(play.text("ok"))
    provider = play.provider(server.url)

    await provider.complete([system("Rule one."), system("Rule two."), user("hi")], tools=[lookup])

    body = server.last.body
    assert body["system"] == [
        {"type": "text", "text": "Rule one."},
        {"type": "text", "text": "Rule two.", "cache_control": {"type": "ephemeral"}},
    ]
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    # The end of the conversation is a rolling breakpoint (the next call reads up to it).
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
        }
    ]


async def test_cache_prefix_can_be_turned_off(server: Any) -> None:
    server.queue(AnthropicPlay().text("ok"))
    provider = AnthropicProvider(
        model="claude-sonnet-4-6",
        api_key="k",
        base_url=server.url,
        max_retries=0,
        cache_prefix=False,
        cache_conversation=False,
    )
    try:
        await provider.complete([system("Rules."), user("hi")], tools=[lookup])
    finally:
        await provider.aclose()
    assert "cache_control" not in str(server.last.body)


async def test_structured_output_forces_the_respond_tool(server: Any, play: Any) -> None:
    server.queue(play.structured({"ok": True, "reason": "fine"}))
    provider = play.provider(server.url)

    completion = await provider.complete([user("Judge this.")], output_schema=Verdict)

    body = server.last.body
    assert body["tool_choice"] == {"type": "tool", "name": RESPOND_TOOL}
    [respond] = body["tools"]
    assert respond["name"] == RESPOND_TOOL
    assert respond["input_schema"] == Verdict.model_json_schema()
    assert completion.parsed == Verdict(ok=True, reason="fine")


async def test_structured_output_with_tools_lets_the_model_use_them_first(
    server: Any, play: Any
) -> None:
    call = ToolCall(id="toolu_9", name="lookup", args={"city": "Oslo"})
    server.queue(play.tool_calls([call]), play.structured({"ok": False, "reason": "cold"}))
    provider = play.provider(server.url)
    history = [user("Is Oslo warm?")]

    first = await provider.complete(history, tools=[lookup], output_schema=Verdict)

    body = server.last.body
    assert body["tool_choice"] == {"type": "any"}
    assert [t["name"] for t in body["tools"]] == ["lookup", RESPOND_TOOL]
    assert first.parsed is None
    assert first.message.tool_calls == [call]

    history += [first.message, tool_result(call, "-3C")]
    second = await provider.complete(history, tools=[lookup], output_schema=Verdict)
    assert second.parsed == Verdict(ok=False, reason="cold")
    assert second.message.tool_calls == []
    assert second.stop_reason == "end_turn"


async def test_respond_is_a_reserved_tool_name(server: Any, play: Any) -> None:
    @tool(name="respond")
    def clash() -> str:
        """Clash."""
        return ""

    provider = play.provider(server.url)
    with pytest.raises(ValueError, match="'respond' is reserved"):
        await provider.complete([user("hi")], tools=[clash], output_schema=Verdict)
    # Without structured output the name is free.
    server.queue(play.text("ok"))
    await provider.complete([user("hi")], tools=[clash])


async def test_an_error_event_in_the_stream_is_classified(server: Any, play: Any) -> None:
    reply = play.stream_text(["partial"])
    # After message_start, the API reports overload inside the open stream.
    reply.events.insert(
        1,
        (
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
    )
    server.queue(reply)
    provider = play.provider(server.url)

    with pytest.raises(ProviderServerError, match="Overloaded") as caught:
        async for _ in provider.stream([user("hi")]):
            pass
    assert caught.value.retryable is True


async def test_options_reach_the_wire_even_when_the_sdk_has_no_keyword(
    server: Any, play: Any
) -> None:
    server.queue(play.text("ok"))
    provider = play.provider(server.url)

    await provider.complete(
        [user("hi")], temperature=0.2, top_k=5, stop=["END"], metadata={"user_id": "u1"}
    )

    body = server.last.body
    assert body["temperature"] == 0.2
    assert body["top_k"] == 5
    assert body["stop_sequences"] == ["END"]
    assert body["metadata"] == {"user_id": "u1"}


async def test_tool_results_keep_images_and_merge_into_one_turn(server: Any, play: Any) -> None:
    png = base64.b64encode(b"png-bytes").decode()
    calls = [
        ToolCall(id="toolu_1", name="lookup", args={"city": "A"}),
        ToolCall(id="toolu_2", name="lookup", args={"city": "B"}),
    ]
    server.queue(play.text("ok"))
    provider = play.provider(server.url)

    await provider.complete(
        [
            user("Show me."),
            assistant("", tool_calls=calls),
            tool_result(calls[0], [ImageBlock(data=png, media_type="image/png")]),
            tool_result(calls[1], "not found", is_error=True),
        ],
        tools=[lookup],
    )

    messages = server.last.body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "A"}},
        {"type": "tool_use", "id": "toolu_2", "name": "lookup", "input": {"city": "B"}},
    ]
    first, second = messages[2]["content"]
    assert first == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": png},
            }
        ],
    }
    assert second == {
        "type": "tool_result",
        "tool_use_id": "toolu_2",
        "content": [{"type": "text", "text": "not found"}],
        "is_error": True,
        "cache_control": {"type": "ephemeral"},  # the end of the request: a rolling breakpoint
    }
    # ...and the end of the previous request (the turn before the latest reply) is another.
    assert messages[0]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_client_and_credentials_are_exclusive() -> None:
    with pytest.raises(ValueError, match="either `client=` or `api_key=`"):
        AnthropicProvider(client=object(), api_key="k")


def test_model_must_be_named() -> None:
    with pytest.raises(ValueError, match="needs a model id"):
        AnthropicProvider(model="", api_key="k")


def _no_anthropic_credentials(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """No key, token, profile or federation in the environment, and an empty home (the SDK
    would otherwise find a profile under this machine's ``~/.config/anthropic``)."""
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_PROFILE",
        "ANTHROPIC_IDENTITY_TOKEN",
        "ANTHROPIC_IDENTITY_TOKEN_FILE",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_CONFIG_DIR",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))


def test_no_key_is_a_clear_error_at_construction(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Like OpenAI and Google: refused when built, naming the variable (was the SDK's
    ``TypeError: Could not resolve authentication method`` at the first call)."""
    _no_anthropic_credentials(monkeypatch, tmp_path)
    with pytest.raises(AuthenticationError, match="`ANTHROPIC_API_KEY`") as info:
        AnthropicProvider(model="claude-sonnet-4-6")
    assert info.value.provider == "anthropic"


async def test_a_gateway_without_a_key(
    server: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_anthropic_credentials(monkeypatch, tmp_path)
    server.queue(AnthropicPlay().text("ok"))
    provider = AnthropicProvider(base_url=server.url, max_retries=0)
    try:
        completion = await provider.complete([user("hi")])
    finally:
        await provider.aclose()
    assert completion.text == "ok"
