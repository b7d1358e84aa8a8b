"""The span tree of real agent runs (``create_agent`` + ``FakeProvider``): model and tool spans
under the agent node, costs from the price table, errors marked, replayed calls untraced."""

from __future__ import annotations

from typing import Any

import pytest

from tensorsketch import (
    Completion,
    FakeProvider,
    InMemoryBackend,
    InMemoryTracer,
    Usage,
    as_tool,
    create_agent,
    tool,
)
from tensorsketch.messages import ToolCall, assistant
from tensorsketch.observability.memory import Trace


def reply(text: str = "", *, calls: list[ToolCall] | None = None, inp: int, out: int) -> Completion:
    message = assistant(text, tool_calls=calls) if text else assistant(tool_calls=calls)
    return Completion(
        message=message,
        usage=Usage(input_tokens=inp, output_tokens=out),
        model="claude-sonnet-4-6",
    )


@tool
async def search(q: str) -> str:
    """Search the docs."""
    return f"results for {q}"


@tool
async def index_status(shard: int) -> str:
    """Check an index shard."""
    raise RuntimeError(f"shard {shard} offline")


def tree(trace: Trace) -> list[tuple[int, str, str]]:
    return [(depth, span.kind, span.name) for depth, span in trace.walk()]


async def test_an_agent_run_traces_model_and_tool_calls_with_costs_and_errors() -> None:
    provider = FakeProvider(
        [
            reply(
                calls=[
                    ToolCall(id="c1", name="search", args={"q": "tensorsketch"}),
                    ToolCall(id="c2", name="index_status", args={"shard": 3}),
                ],
                inp=1000,
                out=120,
            ),
            reply("TensorSketch is a typed agent framework.", inp=1200, out=120),
        ],
        model="claude-sonnet-4-6",
    )
    agent = create_agent(provider, [search, index_status], name="support")
    tracer = InMemoryTracer()
    out = await agent.invoke({"query": "what is tensorsketch?"}, tracer=tracer)
    assert out.output == "TensorSketch is a typed agent framework."

    trace = tracer.trace
    shape = tree(trace)
    assert shape[:2] == [(0, "run", "run"), (1, "node", "support")]
    assert [s for s in shape[2:] if s[1] == "model"] == [(2, "model", "model_call")] * 2
    assert sorted(s for s in shape[2:] if s[1] == "tool") == [(2, "tool", "tool_call")] * 2
    assert shape[2][1] == "model" and shape[-1][1] == "model"  # model, tools, model

    first, second = trace.model_spans
    assert first.attributes["gen_ai.request.model"] == "claude-sonnet-4-6"
    assert first.attributes["gen_ai.provider.name"] == provider.provider_name
    assert (
        first.attributes["gen_ai.usage.input_tokens"],
        first.attributes["gen_ai.usage.output_tokens"],
    ) == (1000, 120)
    # claude-sonnet-4-6 at $3 / $15 per million tokens
    assert first.attributes["gen_ai.usage.cost_usd"] == pytest.approx(0.0048)
    assert second.attributes["gen_ai.usage.cost_usd"] == pytest.approx(0.0054)

    tools = {s.attributes["gen_ai.tool.name"]: s for s in trace.tool_spans}
    assert tools["search"].status == "ok"
    assert tools["search"].attributes["gen_ai.tool.call.id"] == "c1"
    assert "tensorsketch" in tools["search"].attributes["gen_ai.tool.call.arguments"]
    assert tools["search"].attributes["gen_ai.tool.call.result"] == "results for tensorsketch"
    failed = tools["index_status"]
    assert failed.status == "error"
    assert failed.attributes["error.type"] == "RuntimeError"
    assert failed.error == "RuntimeError: shard 3 offline"

    summary = trace.summary()
    assert summary["spans"] == 6
    assert (summary["model_calls"], summary["tool_calls"]) == (2, 2)
    assert (summary["input_tokens"], summary["output_tokens"]) == (2200, 240)
    assert summary["cost_usd"] == pytest.approx(0.0102)
    assert summary["errors"] == 1  # the agent handed the failure back to the model and went on
    assert trace.roots[0].status == "ok"
    assert out.cost_usd == pytest.approx(trace.cost_usd)

    rendered = trace.render()
    assert "[claude-sonnet-4-6, 120 out-tok, $0.004800]" in rendered
    assert "[index_status] [error: RuntimeError: shard 3 offline]" in rendered


async def test_an_unpriced_model_is_flagged_in_the_trace() -> None:
    provider = FakeProvider(["hello"], model="in-house-llm-7b")
    tracer = InMemoryTracer()
    await create_agent(provider).invoke({"query": "hi"}, tracer=tracer)
    (span,) = tracer.trace.model_spans
    assert span.attributes.get("gen_ai.usage.cost_usd") is None
    assert tracer.trace.unpriced_models == ["in-house-llm-7b"]
    assert "unpriced]" in tracer.trace.render()


class Crash(BaseException):
    """A process death in the middle of a tool (not an ``Exception``: the agent can't catch it)."""


async def test_a_resumed_agent_opens_no_span_for_replayed_model_calls() -> None:
    charged: list[int] = []

    @tool
    async def charge(amount: int) -> str:
        """Charge the card."""
        charged.append(amount)
        if len(charged) == 1:
            raise Crash("the worker died mid-charge")
        return "charged"

    provider = FakeProvider(
        [
            reply(calls=[ToolCall(id="c1", name="charge", args={"amount": 5})], inp=100, out=10),
            reply("Done: charged $5.", inp=120, out=5),
        ],
        model="claude-sonnet-4-6",
    )
    agent = create_agent(provider, [charge])
    backend = InMemoryBackend()
    first = InMemoryTracer()
    with pytest.raises(Crash):
        await agent.invoke({"query": "pay"}, thread_id="t-1", backend=backend, tracer=first)
    assert [s.kind for s in first.trace.spans if s.kind in ("model", "tool")] == ["model", "tool"]

    second = InMemoryTracer()
    out = await agent.invoke(None, thread_id="t-1", backend=backend, tracer=second)
    assert out.output == "Done: charged $5."
    assert len(provider.calls) == 2  # the first model call was not made again...
    # ...so the resumed run's trace holds only what ran: the retried tool and the new call
    assert tree(second.trace) == [
        (0, "run", "run"),
        (1, "node", "agent"),
        (2, "tool", "tool_call"),
        (2, "model", "model_call"),
    ]
    assert second.trace.model_calls == 1
    assert second.trace.output_tokens == 5


async def test_a_specialist_called_as_a_tool_nests_under_the_delegating_call() -> None:
    specialist = create_agent(
        FakeProvider(["Refunds take 5 days."], model="claude-haiku-4-5"), name="billing"
    )
    supervisor = create_agent(
        FakeProvider(
            [
                reply(
                    calls=[ToolCall(id="d1", name="ask_billing", args={"request": "refund?"})],
                    inp=50,
                    out=5,
                ),
                reply("Refunds take 5 days.", inp=80, out=6),
            ],
            model="claude-sonnet-4-6",
        ),
        [as_tool(specialist, name="ask_billing", description="Ask the billing specialist.")],
        name="supervisor",
    )
    tracer = InMemoryTracer()
    await supervisor.invoke({"query": "how long do refunds take?"}, tracer=tracer)
    trace = tracer.trace
    (delegation,) = [
        s for s in trace.tool_spans if s.attributes["gen_ai.tool.name"] == "ask_billing"
    ]
    below = [(d, s.kind, s.name) for d, s in _subtree(trace, delegation)]
    assert below[0] == (0, "tool", "tool_call")
    assert (1, "run", "run") in below
    assert (2, "node", "billing") in below
    assert (3, "model", "model_call") in below
    models = [s.attributes["gen_ai.request.model"] for s in trace.model_spans]
    assert sorted(models) == ["claude-haiku-4-5", "claude-sonnet-4-6", "claude-sonnet-4-6"]
    assert trace.model_calls == 3
    assert len({s.trace_id for s in trace.spans}) == 1


def _subtree(trace: Trace, top: Any) -> list[tuple[int, Any]]:
    found: list[tuple[int, Any]] = []

    def visit(span: Any, depth: int) -> None:
        found.append((depth, span))
        for child in trace.children(span):
            visit(child, depth + 1)

    visit(top, 0)
    return found


CONTENT_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.definitions",
)


def _tool_then_answer() -> FakeProvider:
    return FakeProvider(
        [
            Completion(
                message=assistant(tool_calls=[ToolCall(id="c1", name="search", args={"q": "x"})]),
                stop_reason="tool_use",
            ),
            "the answer",
        ],
        model="claude-sonnet-4-6",
    )


async def test_model_spans_carry_no_content_unless_the_tracer_captures_it() -> None:
    tracer = InMemoryTracer()
    agent = create_agent(_tool_then_answer(), [search], system="be nice")
    await agent.invoke({"query": "hi"}, tracer=tracer)
    for span in tracer.trace.model_spans:
        assert not set(CONTENT_KEYS) & set(span.attributes)


async def test_recording_tracers_take_capture_content_as_an_argument(tmp_path: Any) -> None:
    """``FileTracer(path, capture_content=True)`` (and the in-memory and fan-out tracers) turn
    content on without setting the attribute afterwards; a sink that wants it turns it on
    for the MultiTracer that feeds it; a subclass's class-level ``True`` is kept."""
    from tensorsketch import FileTracer, MultiTracer
    from tensorsketch.observability import RecordingTracer

    class Loud(RecordingTracer):
        capture_content = True

        def _record(self, span: Any) -> None:
            pass

    assert Loud().capture_content and not InMemoryTracer().capture_content
    assert MultiTracer(InMemoryTracer(capture_content=True)).capture_content
    assert not MultiTracer(InMemoryTracer()).capture_content
    path = tmp_path / "run.jsonl"
    with FileTracer(path, capture_content=True) as tracer:
        agent = create_agent(_tool_then_answer(), [search], system="be nice")
        await agent.invoke({"query": "hi"}, tracer=tracer)
    models = Trace.load(path).model_spans
    assert models and all(set(CONTENT_KEYS) <= set(s.attributes) for s in models)


async def test_captured_content_follows_the_genai_message_shapes() -> None:
    import json

    tracer = InMemoryTracer()
    tracer.capture_content = True
    agent = create_agent(_tool_then_answer(), [search], system="be nice")
    await agent.invoke({"query": "hi"}, tracer=tracer)
    first, second = tracer.trace.model_spans
    for span in (first, second):
        assert all(isinstance(span.attributes[k], str) for k in CONTENT_KEYS)
        assert json.loads(span.attributes["gen_ai.system_instructions"]) == [
            {"type": "text", "content": "be nice"}
        ]
        assert json.loads(span.attributes["gen_ai.tool.definitions"]) == [
            {
                "type": "function",
                "name": "search",
                "description": "Search the docs.",
                "parameters": search.json_schema(),
            }
        ]
    assert json.loads(first.attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]}
    ]
    assert json.loads(first.attributes["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "c1", "name": "search", "arguments": {"q": "x"}}],
            "finish_reason": "tool_call",
        }
    ]
    # the second call resends the transcript: the tool call and its result, no system message
    assert json.loads(second.attributes["gen_ai.input.messages"])[1:] == [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "c1", "name": "search", "arguments": {"q": "x"}}],
        },
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": "c1", "response": "results for x"}],
            "name": "search",
        },
    ]
    assert json.loads(second.attributes["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "the answer"}],
            "finish_reason": "stop",
        }
    ]
