"""Reasoning kept across turns: Anthropic's signed thinking blocks come back as the message's
``reasoning``, stay in the transcript (journaled with it), and are sent back first in their
turn, streamed or not — through the real SDK against the wire server."""

from __future__ import annotations

from typing import Any

from vendor_plays import AnthropicPlay  # type: ignore[import-not-found]

from tensorsketch import InMemoryBackend, InMemoryTracer, create_agent, tool
from tensorsketch.messages import Reasoning, ToolCall, user
from tensorsketch.providers.anthropic import AnthropicProvider

THINKING = "The user wants the weather; I should call lookup."
SIGNATURE = "EqQBCkYIARgCKkC-signed"


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: sunny"


def provider(server: Any) -> AnthropicProvider:
    return AnthropicProvider(
        model="claude-sonnet-4-6", api_key="sk-ant-test", base_url=server.url, max_retries=0
    )


def thinking_then_call(play: AnthropicPlay) -> Any:
    return play._message(
        [
            {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE},
            {"type": "redacted_thinking", "data": "opaque=="},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Oslo"}},
        ],
        "tool_use",
    )


def streamed_thinking_then_call(play: AnthropicPlay) -> Any:
    return play._stream(
        [
            (
                {"type": "thinking", "thinking": "", "signature": ""},
                [
                    {"type": "thinking_delta", "thinking": THINKING[:20]},
                    {"type": "thinking_delta", "thinking": THINKING[20:]},
                    {"type": "signature_delta", "signature": SIGNATURE},
                ],
            ),
            (
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}},
                play._json_deltas({"city": "Oslo"}),
            ),
        ],
        "tool_use",
    )


async def test_thinking_is_kept_and_sent_back_before_the_tool_use(server: Any) -> None:
    play = AnthropicPlay()
    server.queue(thinking_then_call(play), play.text("Sunny in Oslo."))
    agent = create_agent(
        provider(server),
        tools=[lookup],
        model_options={"thinking": {"type": "enabled", "budget_tokens": 2048}},
    )
    tracer = InMemoryTracer(capture_content=True)
    result = await agent.invoke({"query": "weather in Oslo?"}, tracer=tracer)
    assert result.output == "Sunny in Oslo."
    turn = result.messages[1]
    assert turn.reasoning == [
        Reasoning(provider="anthropic", text=THINKING, signature=SIGNATURE),
        Reasoning(provider="anthropic", redacted="opaque=="),
    ]
    assert turn.text == "" and turn.tool_calls[0].name == "lookup"
    first, second = (r.body for r in server.requests)
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    replayed = second["messages"][1]
    assert replayed["role"] == "assistant"
    assert replayed["content"][:2] == [
        {"type": "thinking", "thinking": THINKING, "signature": SIGNATURE},
        {"type": "redacted_thinking", "data": "opaque=="},
    ]
    assert replayed["content"][2]["type"] == "tool_use"
    # The trace shows the reasoning: a part of the first call's output, of the second's input.
    models = [sp for sp in tracer.trace.spans if sp.kind == "model"]
    part = f'"type": "reasoning", "content": "{THINKING}"'
    assert part in str(models[0].attributes.get("gen_ai.output.messages"))
    assert part in str(models[1].attributes.get("gen_ai.input.messages"))


async def test_streamed_thinking_with_its_signature(server: Any) -> None:
    play = AnthropicPlay()
    server.queue(streamed_thinking_then_call(play))
    items = [i async for i in provider(server).stream([user("weather?")], tools=[lookup])]
    final = items[-1]
    assert final.message.reasoning == [
        Reasoning(provider="anthropic", text=THINKING, signature=SIGNATURE)
    ]
    assert final.message.tool_calls == [
        ToolCall(id="toolu_1", name="lookup", args={"city": "Oslo"})
    ]


async def test_reasoning_survives_the_journal_and_a_resumed_thread(server: Any) -> None:
    play = AnthropicPlay()
    server.queue(thinking_then_call(play), play.text("Sunny."), play.text("Still sunny."))
    agent = create_agent(provider(server), tools=[lookup])
    backend = InMemoryBackend()
    await agent.invoke({"query": "weather in Oslo?"}, thread_id="t", backend=backend)
    state = agent.get_state("t", backend)
    assert state is not None and state.messages[1].reasoning[0].signature == SIGNATURE
    await agent.invoke({"query": "and now?"}, thread_id="t", backend=backend)
    third = server.requests[-1].body["messages"]
    assert third[1]["content"][0] == {
        "type": "thinking",
        "thinking": THINKING,
        "signature": SIGNATURE,
    }


def test_other_vendors_reasoning_is_not_sent_to_anthropic() -> None:
    from tensorsketch.messages import Message

    mapped = AnthropicProvider(model="claude-sonnet-4-6", api_key="k").build_request(
        [
            user("hi"),
            Message(
                role="assistant",
                content="hello",
                reasoning=[Reasoning(provider="openai", text="x", signature="enc")],
            ),
            user("again"),
        ],
        None,
        None,
        100,
        {},
    )
    assert mapped["messages"][1]["content"][0]["type"] == "text"
