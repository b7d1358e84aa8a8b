"""Reasoning kept across turns, through the real SDKs against the wire server: Anthropic's
signed thinking blocks, OpenAI Responses reasoning items (summary and encrypted content) and
Gemini thought summaries and signatures come back as the message's ``reasoning``, stream as
reasoning deltas, stay in the transcript (journaled with it), and are sent back as each vendor
requires."""

from __future__ import annotations

import json
from typing import Any

from vendor_plays import (  # type: ignore[import-not-found]
    AnthropicPlay,
    GooglePlay,
    OpenAIPlay,
    OpenAIResponsesPlay,
    _field,
)
from wire_server import Reply  # type: ignore[import-not-found]

from tensorsketch import InMemoryBackend, InMemoryTracer, create_agent, tool
from tensorsketch.messages import Reasoning, ToolCall, user
from tensorsketch.provider import Completion, ReasoningDelta, TextDelta
from tensorsketch.providers.anthropic import AnthropicProvider
from tensorsketch.providers.google import GoogleProvider
from tensorsketch.providers.openai_responses import OpenAIResponsesProvider

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
    assert [i.text for i in items if isinstance(i, ReasoningDelta)] == [
        THINKING[:20],
        THINKING[20:],
    ]
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


# -- OpenAI: Responses API reasoning items -----------------------------------------------------

SUMMARY = "Need the weather: call lookup for Oslo."
ENCRYPTED = "gAAAAABo-encrypted-reasoning"


def responses_provider(server: Any, model: str = "o4-mini") -> OpenAIResponsesProvider:
    return OpenAIResponsesProvider(
        model=model, api_key="sk-test", base_url=f"{server.url}/v1", max_retries=0
    )


def reasoning_then_call(play: OpenAIResponsesPlay, *, encrypted: str | None = ENCRYPTED) -> Any:
    call = ToolCall(id="call_1", name="lookup", args={"city": "Oslo"})
    return [play.reasoning_item(SUMMARY, encrypted), play.call_item(call, 1)]


async def test_openai_reasoning_items_are_kept_and_sent_back_statelessly(server: Any) -> None:
    play = OpenAIResponsesPlay()
    server.queue(play.reply(reasoning_then_call(play)), play.text("Sunny in Oslo."))
    agent = create_agent(
        responses_provider(server),
        tools=[lookup],
        model_options={"reasoning": {"effort": "low", "summary": "auto"}},
    )
    result = await agent.invoke({"query": "weather in Oslo?"})
    assert result.output == "Sunny in Oslo."
    turn = result.messages[1]
    assert turn.reasoning == [
        Reasoning(provider="openai", text=SUMMARY, redacted=ENCRYPTED, id="rs_1")
    ]
    first, second = (r.body for r in server.requests)
    assert first["store"] is False
    assert first["include"] == ["reasoning.encrypted_content"]
    assert first["reasoning"] == {"effort": "low", "summary": "auto"}
    # The reasoning item goes back first, by its encrypted content and with no item ids (a
    # stateless request has no stored items for an id to name), then the call and its result.
    assert second["input"][1:] == [
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": SUMMARY}],
            "encrypted_content": ENCRYPTED,
        },
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "lookup",
            "arguments": '{"city": "Oslo"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "Oslo: sunny"},
    ]


async def test_openai_reasoning_without_encrypted_content_is_not_sent_back(server: Any) -> None:
    play = OpenAIResponsesPlay()
    server.queue(play.reply(reasoning_then_call(play, encrypted=None)), play.text("Sunny."))
    agent = create_agent(responses_provider(server, "gpt-4o"), tools=[lookup])
    result = await agent.invoke({"query": "weather in Oslo?"})
    assert result.messages[1].reasoning[0].text == SUMMARY
    first, second = (r.body for r in server.requests)
    assert "include" not in first  # not a reasoning model: the API would refuse the include
    assert [item.get("type") for item in second["input"]] == [
        None,
        "function_call",
        "function_call_output",
    ]


async def test_openai_reasoning_summary_streams_as_reasoning_deltas(server: Any) -> None:
    play = OpenAIResponsesPlay()
    output = [*reasoning_then_call(play), play.message_item("Checking.")]
    server.queue(play.stream(output))
    items = [i async for i in responses_provider(server).stream([user("?")], tools=[lookup])]
    reasoning = [i.text for i in items if isinstance(i, ReasoningDelta)]
    assert "".join(reasoning) == SUMMARY and len(reasoning) > 1
    kinds = [type(i).__name__ for i in items]
    assert kinds.index("ReasoningDelta") < kinds.index("ToolCallDelta")
    assert kinds.index("ToolCallDelta") < kinds.index("TextDelta")
    final = items[-1]
    assert isinstance(final, Completion)
    assert final.message.reasoning == [
        Reasoning(provider="openai", text=SUMMARY, redacted=ENCRYPTED, id="rs_1")
    ]
    assert final.message.tool_calls == [ToolCall(id="call_1", name="lookup", args={"city": "Oslo"})]
    assert final.usage.output_tokens == 7


async def test_reasoning_reaches_the_runs_stream_as_reasoning_delta_events(server: Any) -> None:
    play = OpenAIResponsesPlay()
    server.queue(play.stream(reasoning_then_call(play)), play.stream([play.message_item("Sunny.")]))
    agent = create_agent(responses_provider(server), tools=[lookup])
    events = [e async for e in agent.stream({"query": "weather?"})]
    deltas = [e.data["text"] for e in events if e.type == "reasoning_delta"]
    assert "".join(deltas) == SUMMARY
    types = [e.type for e in events]
    assert types.index("reasoning_delta") < types.index("tool_call_delta") < types.index("tool")


# -- Gemini: thought summaries and thought signatures --------------------------------------------

THOUGHT = "I should look the weather up."
SIGNED = "c2lnbmVkLWNhbGw="  # base64 of b"signed-call"


def gemini(server: Any, model: str = "gemini-3-flash-preview") -> GoogleProvider:
    return GoogleProvider(model=model, api_key="k", base_url=server.url, max_retries=0)


def thought_then_call(play: GooglePlay) -> Any:
    from wire_server import Reply  # type: ignore[import-not-found]

    parts = [
        {"text": THOUGHT, "thought": True},
        {"functionCall": {"name": "lookup", "args": {"city": "Oslo"}}, "thoughtSignature": SIGNED},
    ]
    return Reply(body=play._response(parts))


def _model_parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    model_turns = [c for c in body["contents"] if c["role"] == "model"]
    parts: list[dict[str, Any]] = model_turns[0]["parts"]
    return parts


async def test_gemini_thoughts_and_signatures_live_in_the_transcript(server: Any) -> None:
    play = GooglePlay()
    server.queue(thought_then_call(play), play.text("Sunny."), play.text("Still sunny."))
    backend = InMemoryBackend()
    first_provider = gemini(server)
    try:
        agent = create_agent(first_provider, tools=[lookup])
        await agent.invoke({"query": "weather in Oslo?"}, thread_id="t", backend=backend)
    finally:
        await first_provider.aclose()
    state = agent.get_state("t", backend)
    assert state is not None
    [call] = state.messages[1].tool_calls
    assert state.messages[1].reasoning == [
        Reasoning(provider="gcp.gemini", text=THOUGHT),
        Reasoning(provider="gcp.gemini", signature=SIGNED, call_id=call.id),
    ]
    # A new provider (another process, after a restart) sends the signature back from the
    # transcript, on the call it came with, and the thought as a thought part.
    second_provider = gemini(server)
    try:
        agent = create_agent(second_provider, tools=[lookup])
        await agent.invoke({"query": "and now?"}, thread_id="t", backend=backend)
    finally:
        await second_provider.aclose()
    parts = _model_parts(server.last.body)
    assert parts[0]["text"] == THOUGHT and parts[0]["thought"] is True
    assert _field(parts[1], "functionCall")["name"] == "lookup"
    assert _field(parts[1], "thoughtSignature") == SIGNED


async def test_gemini_streamed_thoughts_are_reasoning_deltas_kept_as_one(server: Any) -> None:
    from wire_server import Reply  # type: ignore[import-not-found]

    play = GooglePlay()
    chunks = [
        play._response([{"text": "I should look ", "thought": True}], None),
        play._response([{"text": "it up.", "thought": True}], None),
        play._response([{"text": "Sunny."}], None),
        play._response([{"text": "", "thoughtSignature": SIGNED}], "STOP"),
    ]
    server.queue(Reply(events=[(None, c) for c in chunks]))
    provider = gemini(server, "gemini-2.5-flash")
    try:
        items = [i async for i in provider.stream([user("weather?")])]
    finally:
        await provider.aclose()
    assert [i.text for i in items if isinstance(i, ReasoningDelta)] == ["I should look ", "it up."]
    assert [i.text for i in items if isinstance(i, TextDelta)] == ["Sunny."]
    final = items[-1]
    assert final.message.text == "Sunny."
    assert final.message.reasoning == [
        Reasoning(provider="gcp.gemini", text="I should look it up."),
        Reasoning(provider="gcp.gemini", signature=SIGNED),
    ]
    # Sent back: the thought as a thought part, the signature on the reply's text.
    server.queue(play.text("ok"))
    provider = gemini(server, "gemini-2.5-flash")
    try:
        await provider.complete([user("weather?"), final.message, user("thanks")])
    finally:
        await provider.aclose()
    parts = _model_parts(server.last.body)
    assert parts[0] == {"text": "I should look it up.", "thought": True}
    assert parts[1]["text"] == "Sunny." and _field(parts[1], "thoughtSignature") == SIGNED


def test_gemini_leaves_other_vendors_reasoning_out() -> None:
    from tensorsketch.messages import Message

    request = GoogleProvider(model="gemini-2.5-flash", api_key="k").build_request(
        [
            user("hi"),
            Message(
                role="assistant",
                content="hello",
                reasoning=[Reasoning(provider="openai", text="x", redacted="enc")],
            ),
        ],
        None,
        None,
        100,
        {},
    )
    model_parts = request["contents"][1].parts
    assert [p.text for p in model_parts] == ["hello"] and not model_parts[0].thought


# -- Chat Completions servers that return reasoning beside the text (vLLM, DeepSeek, Ollama) ---


async def test_a_compatible_servers_reasoning_content_is_kept_not_sent_back(server: Any) -> None:
    play = OpenAIPlay()
    reply = play.text("Sunny.")
    reply.body["choices"][0]["message"]["reasoning_content"] = THOUGHT
    server.queue(reply, play.text("ok"))
    provider = play.provider(server.url)
    first = await provider.complete([user("weather?")])
    assert first.message.reasoning == [Reasoning(provider="openai", text=THOUGHT)]
    await provider.complete([user("weather?"), first.message, user("thanks")])
    assert "reasoning" not in json.dumps(server.last.body)


async def test_a_compatible_servers_streamed_reasoning_is_reasoning_deltas(server: Any) -> None:
    play = OpenAIPlay()
    events = play.stream_text(["Sun", "ny."]).events
    first_piece = [
        (None, play._chunk({"reasoning": "I should look "})),
        (None, play._chunk({"reasoning": "it up."})),
    ]
    server.queue(Reply(events=[events[0], *first_piece, *events[1:]]))
    items = [i async for i in play.provider(server.url).stream([user("weather?")])]
    assert [i.text for i in items if isinstance(i, ReasoningDelta)] == ["I should look ", "it up."]
    kinds = [type(i).__name__ for i in items]
    assert kinds.index("ReasoningDelta") < kinds.index("TextDelta")
    assert items[-1].message.reasoning == [
        Reasoning(provider="openai", text="I should look it up.")
    ]
    assert items[-1].message.text == "Sunny."
