"""``openai_app`` end to end: the real ``openai`` SDK against uvicorn on 127.0.0.1.

The model is the fake provider (scripted, streaming word by word), a provider whose stream is
held back chunk by chunk (to prove nothing is buffered), or the real ``openai`` SDK talking to
the providers' wire server (so the token deltas are a real vendor stream).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import openai
import pytest
import vendor_plays  # type: ignore[import-not-found]  # loaded by conftest
import wire_server  # type: ignore[import-not-found]

from tensorsketch import (
    END,
    START,
    Context,
    FakeProvider,
    Graph,
    InMemoryBackend,
    Node,
    Schema,
    create_agent,
    tool,
)
from tensorsketch.agents import Agent
from tensorsketch.fake import FakeStreamFailure
from tensorsketch.interrupts import RetryLater, interrupt
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.provider import ChatProvider, Completion, ProviderError, RateLimitError, TextDelta
from tensorsketch.serve import CONVERSATION_HEADER, openai_app, thread_info

RAN: list[dict[str, Any]] = []


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    RAN.append({"add": [a, b]})
    return a + b


@tool(requires_approval=True)
def refund(order: int) -> str:
    """Refund an order (a person must approve)."""
    RAN.append({"refund": order})
    return f"refunded order {order}"


def _client(server: Any, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, **kw)


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


# -- models --------------------------------------------------------------------------------------


def test_models_lists_the_one_model_and_unknown_models_are_404(live: Any) -> None:
    server = live(openai_app(create_agent(FakeProvider(["hi"])), model="my-bot"))
    client = _client(server)
    [model] = client.models.list().data
    assert (model.id, model.object, model.owned_by) == ("my-bot", "model", "tensorsketch")
    assert isinstance(model.created, int)
    assert client.models.retrieve("my-bot").id == "my-bot"
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("gpt-4o")
    assert caught.value.body["code"] == "model_not_found"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError, match="does not exist; this server serves 'my-bot'"):
        client.chat.completions.create(model="gpt-4o", messages=[_user("hi")])


# -- completions ---------------------------------------------------------------------------------


def test_a_completion_runs_the_agent_with_tools_and_reports_its_real_usage(live: Any) -> None:
    RAN.clear()
    provider = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="c1", name="add", args={"a": 2, "b": 3})]),
            "2 + 3 = 5.",
        ]
    )
    backend = InMemoryBackend()
    server = live(openai_app(create_agent(provider, tools=[add]), model="bot", backend=backend))
    raw = _client(server).chat.completions.with_raw_response.create(
        model="bot",
        extra_headers={CONVERSATION_HEADER: "sums"},
        messages=[
            {"role": "system", "content": "You add."},
            _user("I have numbers."),
            {"role": "assistant", "content": "Which ones?"},
            _user("2 and 3"),
        ],
    )
    completion = raw.parse()
    assert completion.object == "chat.completion" and completion.id.startswith("chatcmpl-")
    [choice] = completion.choices
    assert (choice.message.role, choice.message.content) == ("assistant", "2 + 3 = 5.")
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    assert RAN == [{"add": [2, 3]}]
    sent = [(m.role, m.text) for m in provider.calls[0].messages]
    assert sent == [
        ("system", "You add."),
        ("user", "I have numbers."),
        ("assistant", "Which ones?"),
        ("user", "2 and 3"),
    ], "the whole history reaches the model"
    assert raw.headers[CONVERSATION_HEADER] == "sums"
    found = server.call(thread_info(create_agent(FakeProvider([])), "sums", backend))
    assert found is not None
    usage = found[0].usage
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == usage.input_tokens > 0
    assert completion.usage.completion_tokens == usage.output_tokens > 0
    assert completion.usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_a_stream_sends_the_model_deltas_with_one_id_then_usage_then_done(live: Any) -> None:
    provider = FakeProvider(["The answer is forty two.", "Again."])
    server = live(openai_app(create_agent(provider), model="bot"))
    chunks = list(
        _client(server).chat.completions.create(
            model="bot",
            messages=[_user("?")],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert len({(c.id, c.created, c.model) for c in chunks}) == 1
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    body, usage_chunk = chunks[:-1], chunks[-1]
    assert body[0].choices[0].delta.role == "assistant"
    deltas = [c.choices[0].delta.content for c in body[1:-1]]
    assert deltas == ["The", " answer", " is", " forty", " two."], "the fake model's chunks"
    assert [c.choices[0].finish_reason for c in body] == [None] * (len(body) - 1) + ["stop"]
    assert all(c.usage is None for c in body)
    assert usage_chunk.choices == [] and usage_chunk.usage is not None
    assert usage_chunk.usage.completion_tokens > 0

    with httpx.stream(
        "POST",
        f"{server.url}/v1/chat/completions",
        json={"model": "bot", "messages": [_user("again")], "stream": True},
    ) as response:
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert '"usage"' not in "".join(lines), "no usage fields unless include_usage"


class HeldStream(ChatProvider):
    """A model whose stream waits, after each chunk, until the test has seen it arrive."""

    provider_name = "held"
    model = "held"

    def __init__(self, pieces: Sequence[str]) -> None:
        self.pieces = list(pieces)
        self.seen = threading.Semaphore(0)
        self.cancelled = threading.Event()

    async def complete(self, messages: Sequence[Message], **options: Any) -> Completion:
        raise AssertionError("served runs stream")

    async def stream(  # type: ignore[override]
        self, messages: Sequence[Message], **options: Any
    ) -> AsyncIterator[TextDelta | Completion]:
        try:
            for piece in self.pieces:
                yield TextDelta(piece)
                if not await asyncio.to_thread(self.seen.acquire, True, 20):
                    raise AssertionError("the client never saw the chunk")
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        yield Completion(message=assistant("".join(self.pieces)), model="held")


def test_each_delta_reaches_the_client_before_the_model_produces_the_next(live: Any) -> None:
    provider = HeldStream(["one ", "two ", "three"])
    server = live(openai_app(create_agent(provider), model="bot"))
    stream = _client(server).chat.completions.create(
        model="bot", messages=[_user("count")], stream=True
    )
    got = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            got.append(chunk.choices[0].delta.content)
            provider.seen.release()  # only now may the model go on
    assert got == ["one ", "two ", "three"]


def test_a_client_that_disconnects_mid_stream_cancels_the_run(live: Any) -> None:
    provider = HeldStream(["first ", "never sent"])
    backend = InMemoryBackend()
    server = live(openai_app(create_agent(provider), model="bot", backend=backend))
    stream = _client(server).chat.completions.create(
        model="bot",
        messages=[_user("go")],
        stream=True,
        extra_headers={CONVERSATION_HEADER: "conv-gone"},
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            assert chunk.choices[0].delta.content == "first "
            break
    stream.close()  # the client goes away; the model is still waiting
    assert provider.cancelled.wait(20), "the run was cancelled"
    found = server.call(thread_info(create_agent(FakeProvider([])), "conv-gone", backend))
    assert found is not None and found[1].status == "pending", "the thread can be resumed"


def test_real_token_deltas_from_a_vendor_stream_over_the_wire(live: Any) -> None:
    """The agent's model is the real OpenAI SDK talking to the providers' wire server."""
    play = vendor_plays.OpenAIPlay()
    vendor = wire_server.WireServer().start()
    try:
        vendor.queue(play.stream_text(["Par", "is is ", "the capital."]))
        server = live(openai_app(create_agent(play.provider(vendor.url)), model="bot"))
        chunks = list(
            _client(server).chat.completions.create(
                model="bot",
                messages=[_user("Capital of France?")],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        deltas = [
            c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
        ]
        assert deltas == ["Par", "is is ", "the capital."], "the vendor's own chunks, unchanged"
        usage = chunks[-1].usage
        assert usage is not None
        assert (usage.prompt_tokens, usage.completion_tokens) == (
            vendor_plays.FRESH + vendor_plays.CACHED,
            vendor_plays.OUTPUT,
        )
        assert usage.prompt_tokens_details is not None
        assert usage.prompt_tokens_details.cached_tokens == vendor_plays.CACHED
        sent = play.sent(vendor.last)
        assert sent.turns[-1][1][0].value == "Capital of France?" and sent.stream
    finally:
        vendor.stop()
        for provider in play.created:
            server.call(provider.aclose())


# -- approvals -----------------------------------------------------------------------------------


def _refund_agent() -> tuple[Any, FakeProvider]:
    provider = FakeProvider(
        [
            assistant(
                "Checking.", tool_calls=[ToolCall(id="call_r1", name="refund", args={"order": 7})]
            ),
            "Order 7 is refunded.",
        ]
    )
    return create_agent(provider, tools=[refund]), provider


def test_an_approval_is_a_tool_call_and_a_tool_message_decides_it(live: Any) -> None:
    RAN.clear()
    agent, provider = _refund_agent()
    server = live(openai_app(agent, model="bot"))
    client = _client(server)
    conversation = {CONVERSATION_HEADER: "conv-refund"}
    history: list[dict[str, Any]] = [_user("refund order 7")]
    first = client.chat.completions.create(
        model="bot", messages=history, extra_headers=conversation
    )
    [choice] = first.choices
    assert choice.finish_reason == "tool_calls" and RAN == []
    [call] = choice.message.tool_calls or []
    assert (call.id, call.type, call.function.name) == ("call_r1", "function", "refund")
    assert json.loads(call.function.arguments) == {"order": 7}

    with pytest.raises(
        openai.ConflictError, match="waiting for a decision on 'call_r1' \\(refund\\)"
    ):
        client.chat.completions.create(
            model="bot", messages=[*history, _user("hello?")], extra_headers=conversation
        )
    history += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "call_r1", "content": "maybe"},
    ]
    with pytest.raises(openai.BadRequestError, match="must decide it: 'approve', 'reject'"):
        client.chat.completions.create(model="bot", messages=history, extra_headers=conversation)
    # `<word>: <reason>` with a word that decides nothing (a 500 before), and an object
    # with a field a decision does not have: each a 400 saying why
    for content, why in (
        ("maybe: the order is odd", "got 'maybe'"),
        ('{"approved": true, "reasn": "ok"}', "no field 'reasn'"),
    ):
        history[-1]["content"] = content
        with pytest.raises(openai.BadRequestError, match=why):
            client.chat.completions.create(
                model="bot", messages=history, extra_headers=conversation
            )
    history[-1]["content"] = "approve"
    second = client.chat.completions.create(
        model="bot", messages=history, extra_headers=conversation
    )
    assert second.choices[0].message.content == "Order 7 is refunded."
    assert second.choices[0].finish_reason == "stop"
    assert RAN == [{"refund": 7}], "the tool ran once, after the approval"
    assert provider.calls[1].messages[-1].text == "refunded order 7"


def test_a_streamed_approval_sends_tool_call_deltas_and_a_rejection_reason_reaches_the_model(
    live: Any,
) -> None:
    RAN.clear()
    agent, provider = _refund_agent()
    server = live(openai_app(agent, model="bot"))
    client = _client(server)
    raw = client.chat.completions.with_raw_response.create(
        model="bot", messages=[_user("refund order 7")], stream=True
    )
    conversation = raw.headers[CONVERSATION_HEADER]  # minted: the client did not name one
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Checking."
    calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices[0].delta.tool_calls]
    opening, arguments = calls[0][0], calls[1][0]
    assert (opening.index, opening.id, opening.type) == (0, "call_r1", "function")
    assert opening.function is not None and opening.function.name == "refund"
    assert opening.function.arguments == ""
    assert arguments.id is None and arguments.function is not None
    assert json.loads(arguments.function.arguments) == {"order": 7}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    answer = client.chat.completions.create(
        model="bot",
        messages=[
            _user("refund order 7"),
            {
                "role": "assistant",
                "content": text,
                "tool_calls": [
                    {
                        "id": "call_r1",
                        "type": "function",
                        "function": {"name": "refund", "arguments": '{"order": 7}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_r1", "content": "reject: over the limit"},
        ],
        metadata={"conversation_id": conversation},
    )
    assert answer.choices[0].message.content == "Order 7 is refunded."  # the scripted reply
    assert RAN == [], "a rejected call never runs"
    seen = provider.calls[1].messages[-1].text
    assert "rejected" in seen and "over the limit" in seen


# -- conversations -------------------------------------------------------------------------------


def test_without_a_conversation_id_a_run_that_cannot_wait_is_one_shot(live: Any) -> None:
    @tool
    def later(x: int) -> str:
        """Answers only later."""
        raise RetryLater("busy", delay=60)

    provider = FakeProvider(
        ["plain", assistant(tool_calls=[ToolCall(id="c9", name="later", args={"x": 1})])]
    )
    backend = InMemoryBackend()
    server = live(openai_app(create_agent(provider, tools=[later]), model="bot", backend=backend))
    client = _client(server)
    raw = client.chat.completions.with_raw_response.create(model="bot", messages=[_user("a")])
    assert raw.parse().choices[0].message.content == "plain"
    assert CONVERSATION_HEADER not in raw.headers, "no thread was made: the client has it all"
    with pytest.raises(openai.ConflictError, match="names no conversation") as caught:
        client.chat.completions.create(model="bot", messages=[_user("b")])
    assert caught.value.body["code"] == "conversation_required"  # type: ignore[index]


def test_a_conversation_id_continues_one_durable_thread(live: Any) -> None:
    provider = FakeProvider(["Hello Ada.", "You are Ada."])
    backend = InMemoryBackend()
    server = live(
        openai_app(create_agent(provider, system="Be brief."), model="bot", backend=backend)
    )
    client = _client(server)
    history = [_user("I am Ada.")]
    first = client.chat.completions.create(
        model="bot", messages=history, metadata={"conversation_id": "ada-1"}
    )
    history += [
        {"role": "assistant", "content": first.choices[0].message.content},
        _user("Who am I?"),
    ]
    client.chat.completions.create(
        model="bot", messages=history, metadata={"conversation_id": "ada-1"}
    )
    roles = [m.role for m in provider.calls[1].messages]
    assert roles == ["system", "user", "assistant", "user"], "the thread holds each turn once"
    found = server.call(thread_info(create_agent(FakeProvider([])), "ada-1", backend))
    assert found is not None
    assert [m.text for m in found[0].messages][-1] == "You are Ada."


def test_bad_conversation_ids_are_refused(live: Any) -> None:
    server = live(openai_app(create_agent(FakeProvider(["x"])), model="bot"))
    with pytest.raises(openai.BadRequestError, match="conversation id") as caught:
        _client(server).chat.completions.create(
            model="bot", messages=[_user("x")], extra_headers={CONVERSATION_HEADER: "a b"}
        )
    assert caught.value.body["param"] == "metadata.conversation_id"  # type: ignore[index]


# -- a graph that is not an agent ----------------------------------------------------------------


class Question(Schema):
    prompt: str = ""
    answer: str = ""


class Shout(Node):
    class In(Schema):
        prompt: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(answer=inp.prompt.upper() + "!")


def test_a_non_agent_graph_is_served_through_to_input_and_to_reply(live: Any) -> None:
    graph = Graph(Question).add(Shout).edge(START, "Shout").edge("Shout", END).compile()
    app = openai_app(
        graph,
        model="shouter",
        to_input=lambda messages: {"prompt": messages[-1].text},
        to_reply=lambda state: state.answer,
    )
    client = _client(live(app))
    reply = client.chat.completions.create(model="shouter", messages=[_user("hi")])
    assert reply.choices[0].message.content == "HI!"
    assert reply.usage is not None and reply.usage.total_tokens == 0, "no model, no tokens"
    chunks = list(
        client.chat.completions.create(model="shouter", messages=[_user("yo")], stream=True)
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "YO!"


# -- errors in OpenAI's shape --------------------------------------------------------------------


def test_bad_requests_are_400_naming_the_field(live: Any) -> None:
    server = live(openai_app(create_agent(FakeProvider(["x"])), model="bot"))
    client = _client(server)
    cases: list[tuple[Any, str]] = [
        ([], "messages"),
        ([{"role": "wizard", "content": "x"}], "messages[0].role"),
        ([{"role": "user", "content": 3}], "messages[0].content"),
        ([{"role": "user", "content": [{"type": "video_url"}]}], "messages[0].content[0].type"),
        ([{"role": "tool", "content": "x"}], "messages[0].tool_call_id"),
        (
            [
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "[1]"},
                        }
                    ],
                }
            ],
            "messages[0].tool_calls[0].function.arguments",
        ),
    ]
    for messages, param in cases:
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="bot", messages=messages)
        error = caught.value.body
        assert isinstance(error, dict) and error["param"] == param, error
        assert error["type"] == "invalid_request_error" and error["message"]
    with pytest.raises(openai.BadRequestError, match="`n` must be 1"):
        client.chat.completions.create(model="bot", messages=[_user("x")], n=2)
    response = httpx.post(f"{server.url}/v1/chat/completions", content=b"[1, 2")
    assert response.status_code == 400 and set(response.json()["error"]) == {
        "message",
        "type",
        "param",
        "code",
    }
    assert httpx.get(f"{server.url}/v1/chat/completions").status_code == 405
    missing = httpx.get(f"{server.url}/v2/anything")
    assert (
        missing.status_code == 404 and "/v1/chat/completions" in missing.json()["error"]["message"]
    )


def test_authenticate_and_the_body_limit_answer_401_and_413(live: Any) -> None:
    app = openai_app(
        create_agent(FakeProvider(["ok"])),
        model="bot",
        authenticate=lambda request: request.headers.get("authorization") == "Bearer s3cret",
        max_body_bytes=2000,
    )
    server = live(app)
    with pytest.raises(openai.AuthenticationError):
        _client(server).models.list()
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="s3cret", max_retries=0)
    assert client.models.list().data[0].id == "bot"
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="bot", messages=[_user("x" * 5000)])
    assert caught.value.status_code == 413
    assert client.chat.completions.create(model="bot", messages=[_user("x")]).choices


def test_provider_failures_map_to_429_502_and_a_500_that_hides_internals(live: Any) -> None:
    provider = FakeProvider(
        [
            RateLimitError("slow down", retry_after=3, provider="fake"),
            ProviderError("upstream exploded", provider="fake"),
            RuntimeError("password=hunter2"),
            FakeStreamFailure("Half an ", ProviderError("cut off", provider="fake")),
        ]
    )
    server = live(openai_app(create_agent(provider), model="bot"))
    client = _client(server)
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="bot", messages=[_user("1")])
    assert limited.value.response.headers["retry-after"] == "3"
    with pytest.raises(openai.InternalServerError) as upstream:
        client.chat.completions.create(model="bot", messages=[_user("2")])
    assert upstream.value.status_code == 502 and "upstream exploded" in upstream.value.message
    with pytest.raises(openai.InternalServerError) as fault:
        client.chat.completions.create(model="bot", messages=[_user("3")])
    assert fault.value.status_code == 500 and "hunter2" not in str(fault.value.body)
    stream = client.chat.completions.create(model="bot", messages=[_user("4")], stream=True)
    got = []
    with pytest.raises(openai.APIError, match="cut off"):
        for chunk in stream:
            got.append(chunk.choices[0].delta.content or "")
    assert "".join(got) == "Half an ", "the deltas before the failure were delivered"


# -- the Responses API ---------------------------------------------------------------------------


def test_responses_answers_and_streams_typed_events_with_sequence_numbers(live: Any) -> None:
    provider = FakeProvider(["Bonjour tout le monde.", "Salut."])
    server = live(openai_app(create_agent(provider), model="bot"))
    client = _client(server)
    response = client.responses.create(
        model="bot", input="Say hello in French.", instructions="Be French."
    )
    assert response.status == "completed" and response.output_text == "Bonjour tout le monde."
    assert response.usage is not None and response.usage.output_tokens > 0
    assert [m.role for m in provider.calls[0].messages] == ["system", "user"]
    events = list(
        client.responses.create(model="bot", input=[{"role": "user", "content": "Hi"}], stream=True)
    )
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Salut."
    assert events[-1].response.output_text == "Salut."


def test_responses_approvals_are_function_calls_answered_by_function_call_output(live: Any) -> None:
    RAN.clear()
    agent, _ = _refund_agent()
    server = live(openai_app(agent, model="bot"))
    client = _client(server)
    first = client.responses.create(
        model="bot", input="refund order 7", metadata={"conversation_id": "resp-1"}
    )
    [call] = [item for item in first.output if item.type == "function_call"]
    assert (call.call_id, call.name, json.loads(call.arguments)) == (
        "call_r1",
        "refund",
        {"order": 7},
    )
    second = client.responses.create(
        model="bot",
        input=[{"type": "function_call_output", "call_id": "call_r1", "output": "approve"}],
        metadata={"conversation_id": "resp-1"},
    )
    assert second.output_text == "Order 7 is refunded." and RAN == [{"refund": 7}]


def test_the_app_refuses_a_bad_configuration_when_it_is_built() -> None:
    with pytest.raises(ValueError, match="non-empty model id"):
        openai_app(create_agent(FakeProvider([])), model="")
    graph = Graph(Question).add(Shout).edge(START, "Shout").edge("Shout", END).compile()
    with pytest.raises(TypeError, match=r"openai_app\(\): graph .* is not an agent graph"):
        openai_app(graph)
    with pytest.raises(ValueError, match="max_body_bytes"):
        openai_app(create_agent(FakeProvider([])), max_body_bytes=0)


# -- one answer over several model turns ---------------------------------------------------------


def _checking_agent() -> Any:
    """Text before a tool call ("Let me check."), then the answer after it."""
    turns = [
        assistant(
            "Let me check.", tool_calls=[ToolCall(id="c1", name="add", args={"a": 2, "b": 3})]
        ),
        "Result: 5.",
    ]
    return create_agent(FakeProvider(turns * 4), tools=[add])


def test_a_streamed_answer_puts_a_blank_line_between_model_turns(live: Any) -> None:
    """The deltas of a choice add up to one message: turns must not run together
    ("Let me check.Result: 5."). The non-streamed answer is the final turn; the stream ends
    with it, as its last paragraph."""
    client = _client(live(openai_app(_checking_agent(), model="bot")))
    plain = client.chat.completions.create(model="bot", messages=[_user("2+3?")])
    assert plain.choices[0].message.content == "Result: 5."
    chunks = list(
        client.chat.completions.create(model="bot", messages=[_user("2+3?")], stream=True)
    )
    deltas = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert "".join(deltas) == "Let me check.\n\nResult: 5."
    assert "".join(deltas).split("\n\n")[-1] == plain.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "stop"
    # The Responses API: the same text in the deltas, the done event and the final response.
    answered = client.responses.create(model="bot", input="2+3?")
    assert answered.output_text == "Result: 5."
    events = list(client.responses.create(model="bot", input="2+3?", stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Let me check.\n\nResult: 5."
    [done] = [e for e in events if e.type == "response.output_text.done"]
    assert done.text == text
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == text


class Asked(Schema):
    prompt: str = ""
    answer: str = ""


class AskBack(Node):
    """Says something (as model tokens would), then asks a question."""

    class In(Schema):
        prompt: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        await ctx.emit("token", {"text": "Let me see."})
        order = await interrupt(ctx, "Which order?")
        return self.Out(answer=f"order {order}")


def test_a_question_after_streamed_text_follows_it_after_a_blank_line(live: Any) -> None:
    graph = Graph(Asked).add(AskBack).edge(START, "AskBack").edge("AskBack", END).compile()
    app = openai_app(
        graph,
        model="asker",
        to_input=lambda messages: {"prompt": messages[-1].text},
        to_reply=lambda state: state.answer,
    )
    client = _client(live(app))
    plain = client.chat.completions.create(model="asker", messages=[_user("refund")])
    assert plain.choices[0].message.content == "Which order?"
    chunks = list(
        client.chat.completions.create(model="asker", messages=[_user("refund")], stream=True)
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Let me see.\n\nWhich order?"
    events = list(client.responses.create(model="asker", input="refund", stream=True))
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert streamed == "Let me see.\n\nWhich order?"  # the question is not dropped
    assert events[-1].response.output_text == streamed


def test_turn_joiner_adds_only_the_break_that_is_missing() -> None:
    from tensorsketch.serve._openai_wire import TurnJoiner
    from tensorsketch.serve.events import TextDelta as Delta

    def joined(*turns: str) -> str:
        joiner = TurnJoiner()
        return "".join(joiner.delta(Delta(f"m{i}", text)) for i, text in enumerate(turns))

    assert joined("a", "b") == "a\n\nb"
    assert joined("a\n", "b") == "a\n\nb"
    assert joined("a\n\n", "b") == "a\n\nb"
    assert joined("", "a", "", "b") == "a\n\nb"  # an empty turn adds no break
    joiner = TurnJoiner()
    assert [joiner.delta(Delta("m", t)) for t in ("a", "b")] == ["a", "b"]  # one turn
    assert joiner.then("Q?") == "\n\nQ?"
    assert TurnJoiner().then("Q?") == "Q?"


def test_a_model_that_is_not_a_string_is_named_as_such(live: Any) -> None:
    server = live(openai_app(create_agent(FakeProvider(["x"])), model="bot"))
    client = _client(server)
    for create, extra in (
        (client.chat.completions.create, {"messages": [_user("x")]}),
        (client.responses.create, {"input": "x"}),
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            create(model=5, **extra)  # type: ignore[operator]
        error = caught.value.body
        assert isinstance(error, dict) and error["param"] == "model", error
        assert "`model` must be a string" in error["message"] and "got int" in error["message"]
    for path, body in (
        ("/v1/chat/completions", {"messages": [_user("x")]}),
        ("/v1/responses", {"input": "x"}),
    ):
        missing = httpx.post(f"{server.url}{path}", json=body)
        assert missing.status_code == 400 and "`model` is required" in missing.text
        empty = httpx.post(f"{server.url}{path}", json={**body, "model": ""})
        assert empty.status_code == 400 and "must not be empty" in empty.text


# -- what a client meets first: model names, retries, a rejection's words -----------------------


def test_without_a_model_any_name_a_client_sends_is_served(live: Any) -> None:
    """The docs' non-agent example builds the app without ``model=``; the SDK always sends
    one, and no name the client could guess was refused."""
    graph = Graph(Question).add(Shout).edge(START, "Shout").edge("Shout", END).compile()
    app = openai_app(
        graph, to_input=lambda messages: {"prompt": messages[-1].text}, to_reply=lambda s: s.answer
    )
    client = _client(live(app))
    reply = client.chat.completions.create(model="gpt-4o-mini", messages=[_user("hi")])
    assert (reply.model, reply.choices[0].message.content) == ("gpt-4o-mini", "HI!")
    streamed = list(client.chat.completions.create(model="x", messages=[_user("a")], stream=True))
    assert {c.model for c in streamed} == {"x"}
    assert client.responses.create(model="any/name:1", input="yo").model == "any/name:1"
    [listed] = client.models.list().data
    assert listed.id == graph.name
    assert client.models.retrieve("gpt-4o-mini").id == "gpt-4o-mini"


def _counting_client(server: Any, sent: list[str], **kw: Any) -> openai.OpenAI:
    """An SDK client with its default retry policy that records every request it sends."""
    http = httpx.Client(event_hooks={"request": [lambda r: sent.append(r.url.path)]})
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="k", http_client=http, **kw)


def test_every_4xx_tells_the_sdk_not_to_retry(live: Any) -> None:
    agent, _ = _refund_agent()
    server = live(
        openai_app(
            agent,
            model="bot",
            authenticate=lambda r: r.headers.get("authorization") != "Bearer blocked",
            max_body_bytes=4000,
        )
    )
    sent: list[str] = []
    client = _counting_client(server, sent, max_retries=3, timeout=10)
    conversation = {CONVERSATION_HEADER: "no-retry"}
    client.chat.completions.create(
        model="bot", messages=[_user("refund order 7")], extra_headers=conversation
    )
    sent.clear()
    with pytest.raises(openai.ConflictError) as conflict:
        client.chat.completions.create(
            model="bot", messages=[_user("hello?")], extra_headers=conversation
        )
    assert conflict.value.body["code"] == "decision_required"  # type: ignore[index]
    assert sent == ["/v1/chat/completions"], "a 409 decision_required was sent once"
    refusals: list[tuple[type[openai.APIStatusError], dict[str, Any]]] = [
        (openai.BadRequestError, {"model": "bot", "messages": []}),
        (openai.NotFoundError, {"model": "other", "messages": [_user("x")]}),
        (openai.APIStatusError, {"model": "bot", "messages": [_user("x" * 5000)]}),
        (
            openai.AuthenticationError,
            {
                "model": "bot",
                "messages": [_user("x")],
                "extra_headers": {"Authorization": "Bearer blocked"},
            },
        ),
    ]
    for kind, request in refusals:
        sent.clear()
        with pytest.raises(kind) as refused:
            client.chat.completions.create(**request)
        status = refused.value.status_code
        assert 400 <= status < 500 and len(sent) == 1, (status, sent)
        assert refused.value.response.headers["x-should-retry"] == "false"
    missing = httpx.get(f"{server.url}/v2/nothing")
    assert (missing.status_code, missing.headers["x-should-retry"]) == (404, "false")


def test_a_rate_limit_is_still_the_clients_to_retry(live: Any) -> None:
    """429 is the one 4xx worth sending again (after ``Retry-After``): no ``x-should-retry``."""
    provider = FakeProvider([RateLimitError("slow down", retry_after=0.01), "ok"])
    server = live(openai_app(create_agent(provider), model="bot"))
    sent: list[str] = []
    client = _counting_client(server, sent, max_retries=1)
    assert client.chat.completions.create(model="bot", messages=[_user("x")]).choices
    assert sent == ["/v1/chat/completions"] * 2


@pytest.mark.parametrize(
    ("content", "model_reads"),
    [
        ("reject: over the limit", "Reason: over the limit. Do not retry"),
        (
            "reject: Over the limit! Ask Ana: she decides (policy 4.2).",
            "Reason: Over the limit! Ask Ana: she decides (policy 4.2). Do not retry",
        ),
        ('{"approved": false, "reason": "why?"}', "Reason: why? Do not retry"),
        ("reject: ask Ana (the manager)", "Reason: ask Ana (the manager). Do not retry"),
    ],
)
def test_a_rejection_reason_reaches_the_model_with_its_own_punctuation(
    live: Any, content: str, model_reads: str
) -> None:
    """The reviewer's words, verbatim, as a sentence of their own (not run into the next)."""
    agent, provider = _refund_agent()
    client = _client(live(openai_app(agent, model="bot")))
    conversation = {CONVERSATION_HEADER: "reasons"}
    asked = client.chat.completions.create(
        model="bot", messages=[_user("refund order 7")], extra_headers=conversation
    )
    history = [
        _user("refund order 7"),
        asked.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "call_r1", "content": content},
    ]
    client.chat.completions.create(model="bot", messages=history, extra_headers=conversation)
    assert model_reads in provider.calls[1].messages[-1].text


# -- response_format: the answer in the client's JSON schema --------------------------------------


class Pet(Schema):
    name: str
    age: int


PET_FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "pet",
        "description": "A pet and its age.",
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}


def test_a_json_schema_answer_is_repaired_until_it_validates_and_is_kept_on_the_thread(
    live: Any,
) -> None:
    provider = FakeProvider(
        [
            '{"name": "Rex"}',
            '```json\n{"name": "Rex", "age": "three"}\n```',
            '{"name": "Rex", "age": 3}',
        ]
    )
    backend = InMemoryBackend()
    server = live(
        openai_app(create_agent(provider, max_iterations=5), model="bot", backend=backend)
    )
    completion = _client(server).chat.completions.create(
        model="bot",
        messages=[_user("my pet?")],
        response_format=PET_FORMAT,  # type: ignore[arg-type]
        extra_headers={CONVERSATION_HEADER: "pets"},
    )
    assert completion.choices[0].message.content == '{"name":"Rex","age":3}'
    asked = provider.calls[0].output_schema
    assert asked is not None and asked.__name__ == "pet" and asked.__doc__ == "A pet and its age."
    assert asked.model_json_schema() == PET_FORMAT["json_schema"]["schema"]  # type: ignore[index]
    repairs = [c.messages[-1].text for c in provider.calls[1:]]
    assert "`age`: missing required field" in repairs[0]
    assert "`age`: expected integer" in repairs[1]
    state, _ = server.call(thread_info(create_agent(FakeProvider([])), "pets", backend))
    assert state.parsed == {"name": "Rex", "age": 3}, "the durable thread keeps the JSON as data"


def test_a_streamed_json_answer_sends_only_the_validated_json(live: Any) -> None:
    provider = FakeProvider(["Rex is three.", '{"name": "Rex", "age": 3}'])
    server = live(openai_app(create_agent(provider), model="bot"))
    chunks = list(
        _client(server).chat.completions.create(
            model="bot",
            messages=[_user("my pet?")],
            response_format={"type": "json_object"},
            stream=True,
        )
    )
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert pieces == ['{"name":"Rex","age":3}'], "no repaired attempt reaches the client"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_an_answer_still_invalid_when_the_agent_stops_ends_with_length(live: Any) -> None:
    provider = FakeProvider(["not json", "still not json"])
    server = live(openai_app(create_agent(provider, max_iterations=2), model="bot"))
    with pytest.raises(openai.LengthFinishReasonError):
        _client(server).chat.completions.parse(
            model="bot", messages=[_user("my pet?")], response_format=Pet
        )


def test_a_graph_that_cannot_answer_in_a_schema_is_a_400_saying_why(live: Any) -> None:
    shouter = Graph(Question).add(Shout).edge(START, "Shout").edge("Shout", END).compile()
    typed = create_agent(FakeProvider(['{"name": "Rex", "age": 3}']), output_schema=Pet)
    cases = [
        (
            openai_app(
                shouter,
                model="bot",
                to_input=lambda messages: {"prompt": messages[-1].text},
                to_reply=lambda state: state.answer,
            ),
            PET_FORMAT,
            "makes its reply with its own to_reply()",
        ),
        (openai_app(typed, model="bot"), PET_FORMAT, "answers in its own schema 'Pet'"),
        (
            openai_app(create_agent(FakeProvider(["x"])), model="bot"),
            {"type": "json_schema", "json_schema": {"name": "pet"}},
            "`response_format.json_schema.schema` must be a JSON schema object",
        ),
        (
            openai_app(create_agent(FakeProvider(["x"])), model="bot"),
            {"type": "yaml"},
            "use 'text', 'json_object' or 'json_schema'",
        ),
    ]
    for app, fmt, why in cases:
        client = _client(live(app))
        with pytest.raises(openai.BadRequestError, match=re.escape(why)) as caught:
            client.chat.completions.create(
                model="bot",
                messages=[_user("my pet?")],
                response_format=fmt,  # type: ignore[arg-type]
            )
        assert caught.value.body["param"].startswith("response_format")  # type: ignore[index]
    # An agent with its own schema already answers with a JSON object: json_object is fine.
    reply = _client(live(openai_app(typed, model="bot"))).chat.completions.create(
        model="bot", messages=[_user("my pet?")], response_format={"type": "json_object"}
    )
    assert json.loads(reply.choices[0].message.content or "") == {"name": "Rex", "age": 3}


class TwoAgents(Schema):
    query: str = ""
    messages: list[Message] = []
    output: str = ""


def test_one_agent_writing_output_answers_and_several_are_a_400(live: Any) -> None:
    def agent(name: str, *script: str) -> Agent:
        return Agent(FakeProvider(list(script)), name=name, report=False)

    alone = Graph(TwoAgents).add(agent("solo", "Rex.", '{"pet": "Rex"}'))
    alone = alone.edge(START, "solo").edge("solo", END)
    client = _client(live(openai_app(alone.compile(), model="bot")))
    reply = client.chat.completions.create(
        model="bot", messages=[_user("x")], response_format={"type": "json_object"}
    )
    assert reply.choices[0].message.content == '{"pet":"Rex"}', "no `parsed` field needed"

    pair = Graph(TwoAgents).add(agent("first", "a")).add(agent("second", "b"))
    pair = pair.edge(START, "first").edge("first", "second").edge("second", END)
    client = _client(live(openai_app(pair.compile(), model="bot")))
    with pytest.raises(
        openai.BadRequestError, match=r"several agents write it \('first', 'second'\)"
    ):
        client.chat.completions.create(
            model="bot", messages=[_user("x")], response_format={"type": "json_object"}
        )


def test_the_responses_text_format_is_refused_by_a_graph_that_cannot_answer_in_it(
    live: Any,
) -> None:
    shouter = Graph(Question).add(Shout).edge(START, "Shout").edge("Shout", END).compile()
    app = openai_app(
        shouter,
        model="bot",
        to_input=lambda messages: {"prompt": messages[-1].text},
        to_reply=lambda state: state.answer,
    )
    client = _client(live(app))
    with pytest.raises(openai.BadRequestError, match="own to_reply") as caught:
        client.responses.create(model="bot", input="hi", text={"format": {"type": "json_object"}})
    assert caught.value.body["param"] == "text"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError, match=r"`text.format.name` must be 1-64"):
        client.responses.create(
            model="bot",
            input="hi",
            text={"format": {"type": "json_schema", "name": "a pet", "schema": {}}},  # type: ignore[typeddict-item]
        )
    plain = client.responses.create(model="bot", input="hi", text={"format": {"type": "text"}})
    assert plain.output_text == "HI!"


def test_the_clients_schema_reaches_a_real_vendor_sdk_as_its_response_format(live: Any) -> None:
    """The agent's model is the real OpenAI SDK against the providers' wire server: the
    client's JSON schema is what the vendor is asked for (strict, under the client's name)."""
    play = vendor_plays.OpenAIPlay()
    vendor = wire_server.WireServer().start()
    try:
        vendor.queue(play.structured({"name": "Rex", "age": 3}))
        server = live(openai_app(create_agent(play.provider(vendor.url)), model="bot"))
        completion = _client(server).chat.completions.create(
            model="bot",
            messages=[_user("my pet?")],
            response_format=PET_FORMAT,  # type: ignore[arg-type]
        )
        assert json.loads(completion.choices[0].message.content or "") == {"name": "Rex", "age": 3}
        upstream = vendor.last.body["response_format"]
        assert upstream["type"] == "json_schema"
        sent = upstream["json_schema"]
        assert (sent["name"], sent["strict"]) == ("pet", True)
        assert sent["schema"] == PET_FORMAT["json_schema"]["schema"]  # type: ignore[index]
    finally:
        vendor.stop()
        for provider in play.created:
            server.call(provider.aclose())


class _FragmentedArgs(FakeProvider):
    """Streams each tool call's JSON arguments in three fragments, as real providers do."""

    async def stream(self, messages: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        from tensorsketch.provider import ToolCallDelta

        async for item in super().stream(messages, **kwargs):
            if isinstance(item, ToolCallDelta):
                text = item.arguments
                cuts = [0, len(text) // 3, 2 * len(text) // 3, len(text)]
                yield ToolCallDelta(item.index, item.id, item.name, "")
                for a, b in itertools.pairwise(cuts):
                    yield ToolCallDelta(item.index, arguments=text[a:b])
            else:
                yield item


def test_approval_call_arguments_stream_fragment_by_fragment_to_the_sdk_helper(
    live: Any,
) -> None:
    RAN.clear()
    provider = _FragmentedArgs(
        [
            assistant(
                "Checking.",
                tool_calls=[
                    ToolCall(id="call_l1", name="lookup_order", args={"order": 7}),
                    ToolCall(id="call_r1", name="refund", args={"order": 7}),
                ],
            )
        ]
    )

    @tool
    def lookup_order(order: int) -> str:
        """Look an order up."""
        return "paid"

    agent = create_agent(provider, tools=[refund, lookup_order])
    server = live(openai_app(agent, model="bot"))
    with _client(server).chat.completions.stream(
        model="bot", messages=[_user("refund order 7")]
    ) as events:
        seen = [e for e in events if e.type.startswith("tool_calls.")]
        final = events.get_final_completion()
    deltas = [
        e for e in seen if e.type == "tool_calls.function.arguments.delta" and e.arguments_delta
    ]  # (the opening chunk's empty arguments, as OpenAI sends them, are a delta of "")
    # Only the call waiting for the client's decision is a tool call; each fragment the model
    # streamed is its own delta, in order, before the stream ends.
    assert [d.name for d in deltas] == ["refund"] * 3
    assert json.loads("".join(d.arguments_delta for d in deltas)) == {"order": 7}
    assert [e.type for e in seen][-1] == "tool_calls.function.arguments.done"
    [call] = final.choices[0].message.tool_calls or []
    assert (call.id, call.function.name) == ("call_r1", "refund")
    assert json.loads(call.function.arguments) == {"order": 7}
    assert final.choices[0].finish_reason == "tool_calls" and RAN == []


def test_file_and_audio_parts_reach_the_agent_as_file_blocks(live: Any) -> None:
    from tensorsketch.messages import FileBlock

    provider = FakeProvider(["Read and heard."])
    server = live(openai_app(create_agent(provider), model="bot"))
    pdf = base64.b64encode(b"%PDF-1.7 report").decode()
    wav = base64.b64encode(b"RIFF....WAVE").decode()
    reply = _client(server).chat.completions.create(
        model="bot",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Summarize both."},
                    {
                        "type": "file",
                        "file": {
                            "filename": "report.pdf",
                            "file_data": f"data:application/pdf;base64,{pdf}",
                        },
                    },
                    {"type": "input_audio", "input_audio": {"data": wav, "format": "wav"}},
                ],
            }
        ],
    )
    assert reply.choices[0].message.content == "Read and heard."
    content = provider.calls[0].messages[-1].content
    assert isinstance(content, list)
    assert content[1:] == [
        FileBlock(data=pdf, media_type="application/pdf", name="report.pdf"),
        FileBlock(data=wav, media_type="audio/wav"),
    ]


@pytest.mark.parametrize(
    ("part", "says"),
    [
        ({"type": "file", "file": {"file_id": "file-abc"}}, "keeps no uploaded files"),
        ({"type": "file", "file": {"file_data": "https://x/a.pdf"}}, "data:<type>;base64"),
        ({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "ogg"}}, "'wav' or"),
        ({"type": "input_audio", "input_audio": {"data": "@@", "format": "wav"}}, "base64"),
    ],
)
def test_bad_file_parts_are_a_400_naming_the_field(live: Any, part: Any, says: str) -> None:
    server = live(openai_app(create_agent(FakeProvider(["x"])), model="bot"))
    body = {"model": "bot", "messages": [{"role": "user", "content": [part]}]}
    answer = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=10)
    assert answer.status_code == 400
    assert says in answer.json()["error"]["message"]
