"""The OpenTelemetry bridge, checked through the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tensorsketch import END, START, Context, Graph, Node, Reducer, Schema
from tensorsketch.observability.otel import OTelTracer, to_otel
from tensorsketch.observability.propagation import current_traceparent, use_traceparent
from tensorsketch.observability.tracing import Span

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


class S(Schema):
    query: str = ""
    answer: str = ""
    headers: Annotated[list[str], Reducer(lambda a, b: a + b)] = []


class Support(Node):
    """An agent-shaped node: an agent span holding a model call, a tool call, a model call."""

    class In(Schema):
        query: str

    class Out(Schema):
        answer: str
        headers: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        headers: list[str] = []
        with ctx.span("support", kind="agent", **{"gen_ai.agent.name": "support"}):
            with ctx.span(
                "model_call",
                kind="model",
                **{
                    "gen_ai.provider.name": "anthropic",
                    "gen_ai.request.model": "claude-sonnet-4-6",
                    "gen_ai.input.messages": [{"role": "user", "content": inp.query}],
                },
            ) as span:
                await asyncio.sleep(0)
                headers.append(current_traceparent() or "")
                span.set_attributes(
                    **{
                        "gen_ai.response.model": "claude-sonnet-4-6-20260101",
                        "gen_ai.usage.input_tokens": 1000,
                        "gen_ai.usage.output_tokens": 120,
                        "gen_ai.usage.cost_usd": 0.0048,
                        "gen_ai.output.messages": [{"role": "assistant", "content": "searching"}],
                    }
                )
            with ctx.span(
                "tool_call",
                kind="tool",
                **{
                    "gen_ai.tool.name": "search",
                    "gen_ai.tool.call.id": "call_1",
                    "gen_ai.tool.call.arguments": {"q": inp.query},
                },
            ) as span:
                span.set_attribute("gen_ai.tool.call.result", ["doc-1", "doc-2"])
            with ctx.span("model_call", kind="model") as span:
                # the model id known only once the call returns: the name follows
                span.set_attribute("gen_ai.request.model", "claude-haiku-4-5")
        return self.Out(answer="done", headers=headers)


APP = Graph(S).add(Support).edge(START, "Support").edge("Support", END).compile()


@pytest.fixture
def otel() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def _by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans}


def _hex(span: ReadableSpan | None, *, parent: bool = False) -> str | None:
    assert span is not None
    ctx = span.parent if parent else span.context
    return None if ctx is None else otel_trace.format_span_id(ctx.span_id)


async def test_an_agent_run_exports_genai_spans_with_nesting(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = otel
    out = await APP.invoke({"query": "what is tensorsketch?"}, tracer=OTelTracer(provider))
    assert out.answer == "done"

    spans = _by_name(exporter.get_finished_spans())
    assert set(spans) == {
        "invoke_workflow Graph[S]",
        "Support",
        "invoke_agent support",
        "chat claude-sonnet-4-6",
        "execute_tool search",
        "chat claude-haiku-4-5",
    }
    run = spans["invoke_workflow Graph[S]"]
    node = spans["Support"]
    agent = spans["invoke_agent support"]
    chat = spans["chat claude-sonnet-4-6"]
    tool = spans["execute_tool search"]
    late = spans["chat claude-haiku-4-5"]

    # nesting preserved, one trace
    assert run.parent is None
    assert _hex(node, parent=True) == _hex(run)
    assert _hex(agent, parent=True) == _hex(node)
    for child in (chat, tool, late):
        assert _hex(child, parent=True) == _hex(agent)
    assert len({s.context.trace_id for s in spans.values() if s.context}) == 1

    assert run.attributes["gen_ai.operation.name"] == "invoke_workflow"
    assert run.attributes["gen_ai.workflow.name"] == "Graph[S]"
    assert node.attributes["tensorsketch.node"] == "Support"
    assert "gen_ai.operation.name" not in node.attributes
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent.attributes["gen_ai.agent.name"] == "support"

    assert chat.kind is SpanKind.CLIENT
    assert dict(chat.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-sonnet-4-6",
        "gen_ai.response.model": "claude-sonnet-4-6-20260101",
        "gen_ai.usage.input_tokens": 1000,
        "gen_ai.usage.output_tokens": 120,
        "tensorsketch.usage.cost_usd": 0.0048,
        "tensorsketch.span.kind": "model",
    }
    assert tool.kind is SpanKind.INTERNAL
    assert dict(tool.attributes) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search",
        "gen_ai.tool.call.id": "call_1",
        "tensorsketch.span.kind": "tool",
    }
    assert late.attributes["gen_ai.request.model"] == "claude-haiku-4-5"
    assert all(s.status.status_code is StatusCode.UNSET for s in spans.values())

    # an outbound call made inside the model span would carry that span's id
    assert out.headers == [
        f"00-{otel_trace.format_trace_id(chat.context.trace_id)}-{_hex(chat)}-01"
    ]


async def test_content_is_exported_only_on_opt_in(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = otel
    await APP.invoke({"query": "secret plans"}, tracer=OTelTracer(provider, capture_content=True))
    spans = _by_name(exporter.get_finished_spans())
    chat, tool = spans["chat claude-sonnet-4-6"], spans["execute_tool search"]
    assert chat.attributes["gen_ai.input.messages"] == (
        '[{"role": "user", "content": "secret plans"}]'
    )
    assert chat.attributes["gen_ai.output.messages"] == (
        '[{"role": "assistant", "content": "searching"}]'
    )
    assert tool.attributes["gen_ai.tool.call.arguments"] == '{"q": "secret plans"}'
    assert tool.attributes["gen_ai.tool.call.result"] == ("doc-1", "doc-2")


async def test_errors_set_status_error_type_and_an_exception_event(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    class Flaky(Node):
        async def run(self, ctx: Context, inp: object) -> None:
            with ctx.span("tool_call", kind="tool", **{"gen_ai.tool.name": "charge"}):
                raise TimeoutError("payment API timed out")

    provider, exporter = otel
    app = Graph(S).add(Flaky).edge(START, "Flaky").compile()
    with pytest.raises(TimeoutError, match="payment API timed out"):
        await app.invoke({}, tracer=OTelTracer(provider))
    spans = _by_name(exporter.get_finished_spans())
    tool = spans["execute_tool charge"]
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.status.description == "TimeoutError: payment API timed out"
    assert tool.attributes["error.type"] == "TimeoutError"
    assert [e.name for e in tool.events] == ["exception"]
    assert tool.events[0].attributes is not None
    assert tool.events[0].attributes["exception.type"] == "TimeoutError"
    for name in ("Flaky", "invoke_workflow Graph[S]"):
        assert spans[name].status.status_code is StatusCode.ERROR


async def test_parallel_nodes_keep_their_own_children(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    both_open = asyncio.Barrier(2)

    def node(label: str) -> type[Node]:
        class Branch(Node):
            async def run(self, ctx: Context, inp: object) -> None:
                with ctx.span(f"{label}.work"):
                    await both_open.wait()
                    with ctx.span(f"{label}.leaf"):
                        await asyncio.sleep(0)

        Branch.__name__ = label
        return Branch

    provider, exporter = otel
    app = Graph(S).add(node("A")).add(node("B")).edge(START, "A").edge(START, "B").compile()
    await app.invoke({}, tracer=OTelTracer(provider))
    spans = _by_name(exporter.get_finished_spans())
    for label in ("A", "B"):
        assert _hex(spans[f"{label}.work"], parent=True) == _hex(spans[label])
        assert _hex(spans[f"{label}.leaf"], parent=True) == _hex(spans[f"{label}.work"])


async def test_a_run_nests_under_the_current_otel_span(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = otel
    with provider.get_tracer("web").start_as_current_span("POST /chat", kind=SpanKind.SERVER):
        await APP.invoke({"query": "hi"}, tracer=OTelTracer(provider))
    spans = _by_name(exporter.get_finished_spans())
    assert _hex(spans["invoke_workflow Graph[S]"], parent=True) == _hex(spans["POST /chat"])


@pytest.mark.parametrize("how", ["argument", "use_traceparent"])
async def test_a_run_joins_the_callers_trace_from_a_traceparent(
    otel: tuple[TracerProvider, InMemorySpanExporter], how: str
) -> None:
    provider, exporter = otel
    header = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
    if how == "argument":
        await APP.invoke({"query": "hi"}, tracer=OTelTracer(provider, traceparent=header))
    else:
        with use_traceparent(header):
            await APP.invoke({"query": "hi"}, tracer=OTelTracer(provider))
    spans = _by_name(exporter.get_finished_spans())
    run = spans["invoke_workflow Graph[S]"]
    assert run.parent is not None and run.parent.is_remote
    assert _hex(run, parent=True) == CALLER_SPAN
    assert {otel_trace.format_trace_id(s.context.trace_id) for s in spans.values()} == {
        CALLER_TRACE
    }


def test_an_invalid_traceparent_argument_is_refused() -> None:
    with pytest.raises(ValueError, match="traceparent='nope' is not a valid W3C traceparent"):
        OTelTracer(TracerProvider(), traceparent="nope")


def test_the_mapping_of_each_span_kind() -> None:
    def view(kind: str, name: str = "x", **attrs: Any) -> tuple[str, SpanKind, Any]:
        v = to_otel(Span(name, kind, attributes=attrs))
        return v.name, v.kind, v.attributes.get("gen_ai.operation.name")

    assert view("model", **{"gen_ai.request.model": "gpt-4o"}) == (
        "chat gpt-4o",
        SpanKind.CLIENT,
        "chat",
    )
    assert view("model") == ("chat", SpanKind.CLIENT, "chat")
    assert view(
        "model", **{"gen_ai.operation.name": "generate_content", "gen_ai.request.model": "g"}
    ) == (
        "generate_content g",
        SpanKind.CLIENT,
        "generate_content",
    )
    assert view("tool", "lookup") == ("execute_tool lookup", SpanKind.INTERNAL, "execute_tool")
    assert view("node", "Planner", **{"gen_ai.agent.name": "planner"}) == (
        "invoke_agent planner",
        SpanKind.INTERNAL,
        "invoke_agent",
    )
    assert view("node", "Planner") == ("Planner", SpanKind.INTERNAL, None)
    assert view("custom", "parse-invoice") == ("parse-invoice", SpanKind.INTERNAL, None)
    assert view("run", "run") == ("invoke_workflow", SpanKind.INTERNAL, "invoke_workflow")
    usage = to_otel(
        Span(
            "m",
            "model",
            attributes={
                "gen_ai.usage.cache_read_tokens": 50,
                "gen_ai.usage.cache_write_tokens": 25,
                "gen_ai.usage.cost_usd": None,  # unpriced: nothing to export
            },
        )
    ).attributes
    assert usage["gen_ai.usage.cache_read.input_tokens"] == 50
    assert usage["gen_ai.usage.cache_creation.input_tokens"] == 25
    assert "tensorsketch.usage.cost_usd" not in usage
    cancelled = Span("N", "node", status="cancelled")
    assert to_otel(cancelled).attributes["tensorsketch.status"] == "cancelled"
    suspended = Span("N", "node", status="suspended")
    assert to_otel(suspended).attributes["tensorsketch.status"] == "suspended"
    odd = to_otel(Span("c", "custom", attributes={"mixed": [1, "a"], "none": None, "ok": [1, 2]}))
    assert odd.attributes["mixed"] == '[1, "a"]'
    assert odd.attributes["ok"] == (1, 2)
    assert "none" not in odd.attributes


def test_the_interop_plugin_registers_the_otel_tracer() -> None:
    from tensorsketch.name_registry import resolve_target
    from tensorsketch.plugins import collect

    contributions = collect("tensorsketch_tracers")
    assert contributions["otel"].target == "tensorsketch.observability.otel:OTelTracer"
    assert resolve_target(contributions["otel"].target, what="tracer 'otel'") is OTelTracer


@pytest.mark.parametrize("blocked", ["opentelemetry", "opentelemetry.sdk"])
def test_a_missing_sdk_names_the_install_command(blocked: str) -> None:
    """Runs in a fresh interpreter where the OTel package is made unimportable (the SDK is
    installed here, so hiding it is the only way to see the message)."""
    code = textwrap.dedent(
        f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == {blocked!r} or name.startswith({blocked!r} + "."):
                    raise ModuleNotFoundError(name)
        sys.meta_path.insert(0, Block())
        try:
            import tensorsketch.observability.otel
        except ImportError as exc:
            print(exc)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert 'pip install "tensorsketch-interop[otel]"' in result.stdout


async def test_a_real_agent_run_maps_onto_the_conventions(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    from tensorsketch import Completion, FakeProvider, Usage, create_agent, tool
    from tensorsketch.messages import ToolCall, assistant

    @tool
    async def search(q: str) -> str:
        """Search the docs."""
        return f"results for {q}"

    provider = FakeProvider(
        [
            Completion(
                message=assistant(
                    tool_calls=[ToolCall(id="call_9", name="search", args={"q": "x"})]
                ),
                usage=Usage(input_tokens=10, output_tokens=2, cache_read_tokens=4),
                model="claude-sonnet-4-6",
            ),
            "done",
        ],
        model="claude-sonnet-4-6",
    )
    otel_provider, exporter = otel
    agent = create_agent(provider, [search], name="helper")
    await agent.invoke({"query": "q"}, tracer=OTelTracer(otel_provider))
    spans = exporter.get_finished_spans()
    names = [s.name for s in spans]
    assert names.count("chat claude-sonnet-4-6") == 2
    assert "execute_tool search" in names
    assert "invoke_workflow helper" in names
    first_chat = next(s for s in spans if s.name == "chat claude-sonnet-4-6")
    assert first_chat.attributes["gen_ai.provider.name"] == provider.provider_name
    assert first_chat.attributes["gen_ai.usage.cache_read.input_tokens"] == 4
    assert first_chat.attributes["tensorsketch.usage.cost_usd"] > 0
    tool_span = next(s for s in spans if s.name == "execute_tool search")
    assert tool_span.attributes["gen_ai.tool.call.id"] == "call_9"
    assert "gen_ai.tool.call.arguments" not in tool_span.attributes
    # the agent's node span is the `invoke_agent` span its model and tool calls hang off
    node = next(s for s in spans if s.name == "invoke_agent helper")
    assert node.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert node.attributes["gen_ai.agent.name"] == "helper"
    assert node.attributes["tensorsketch.node"] == "helper"
    assert _hex(tool_span, parent=True) == _hex(node)
    assert _hex(first_chat, parent=True) == _hex(node)
    workflow = next(s for s in spans if s.name == "invoke_workflow helper")
    assert _hex(node, parent=True) == _hex(workflow)


def test_the_documented_default_uses_the_global_tracer_provider() -> None:
    """``OTelTracer()`` with no provider uses the globally configured one (set once per
    process, hence a fresh interpreter)."""
    code = textwrap.dedent(
        """
        import asyncio
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from tensorsketch import START, Context, Graph, Node, Schema
        from tensorsketch.observability.otel import OTelTracer

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)

        class S(Schema):
            n: int = 0

        class Hello(Node):
            async def run(self, ctx: Context, inp: object) -> None:
                return None

        app = Graph(S).add(Hello).edge(START, "Hello").compile()
        asyncio.run(app.invoke({}, tracer=OTelTracer()))   # uses your globally-configured OTel tracer
        print(sorted(s.name for s in exporter.get_finished_spans()))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "['Hello', 'invoke_workflow Graph[S]']"


GENAI_CONTENT = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.definitions",
)


def _agent_with_a_tool() -> Any:
    from tensorsketch import Completion, FakeProvider, create_agent, tool
    from tensorsketch.messages import ToolCall, assistant

    @tool
    async def search(q: str) -> str:
        """Search the docs."""
        return f"results for {q}"

    provider = FakeProvider(
        [
            Completion(
                message=assistant(tool_calls=[ToolCall(id="c1", name="search", args={"q": "x"})]),
                stop_reason="tool_use",
            ),
            "done",
        ],
        model="claude-sonnet-4-6",
    )
    return create_agent(provider, tools=[search], system="be nice")


@pytest.mark.parametrize("capture", [True, False])
async def test_a_real_agent_exports_messages_instructions_and_tools_only_on_opt_in(
    otel: tuple[TracerProvider, InMemorySpanExporter], capture: bool
) -> None:
    import json

    otel_provider, exporter = otel
    tracer = OTelTracer(otel_provider, capture_content=capture)
    await _agent_with_a_tool().invoke({"query": "hi"}, tracer=tracer)
    chats = [s for s in exporter.get_finished_spans() if s.name == "chat claude-sonnet-4-6"]
    assert len(chats) == 2
    if not capture:
        for chat in chats:
            assert not set(GENAI_CONTENT) & set(chat.attributes or {})
        return
    first, second = (dict(c.attributes or {}) for c in chats)
    for attrs in (first, second):
        values = {key: json.loads(str(attrs[key])) for key in GENAI_CONTENT}
        assert values["gen_ai.system_instructions"] == [{"type": "text", "content": "be nice"}]
        (definition,) = values["gen_ai.tool.definitions"]
        assert definition["type"] == "function"
        assert definition["name"] == "search"
        assert definition["description"] == "Search the docs."
        assert definition["parameters"]["properties"] == {"q": {"type": "string"}}
        for message in values["gen_ai.input.messages"] + values["gen_ai.output.messages"]:
            assert message["role"] in {"user", "assistant", "tool"}
            assert message["parts"] and all("type" in part for part in message["parts"])
        (reply,) = values["gen_ai.output.messages"]
        assert reply["role"] == "assistant" and reply["finish_reason"] in {"tool_call", "stop"}
    assert json.loads(str(first["gen_ai.input.messages"])) == [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]}
    ]
    assert json.loads(str(first["gen_ai.output.messages"]))[0]["parts"] == [
        {"type": "tool_call", "id": "c1", "name": "search", "arguments": {"q": "x"}}
    ]
    roles = [m["role"] for m in json.loads(str(second["gen_ai.input.messages"]))]
    assert roles == ["user", "assistant", "tool"]


async def test_a_tool_error_the_agent_handles_still_gets_an_exception_event(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    from tensorsketch import Completion, FakeProvider, create_agent, tool
    from tensorsketch.messages import ToolCall, assistant

    @tool
    async def boom(x: int) -> str:
        """Explode."""
        raise RuntimeError("kaboom")

    provider = FakeProvider(
        [
            Completion(
                message=assistant(tool_calls=[ToolCall(id="c1", name="boom", args={"x": 1})])
            ),
            "recovered",
        ],
        model="m1",
    )
    otel_provider, exporter = otel
    out = await create_agent(provider, tools=[boom]).invoke(
        {"query": "hi"}, tracer=OTelTracer(otel_provider)
    )
    assert out.output == "recovered"
    spans = _by_name(exporter.get_finished_spans())
    failed = spans["execute_tool boom"]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes is not None and failed.attributes["error.type"] == "RuntimeError"
    assert [e.name for e in failed.events] == ["exception"]
    event = failed.events[0].attributes
    assert event is not None
    assert event["exception.type"] == "RuntimeError"
    assert event["exception.message"] == "kaboom"
    assert "raise RuntimeError" in str(event["exception.stacktrace"])
    assert spans["invoke_workflow agent"].status.status_code is StatusCode.UNSET


async def test_a_span_marked_failed_by_hand_still_gets_an_exception_event(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = otel
    with OTelTracer(provider).span("charge", kind="tool") as span:
        span.status = "error"
        span.error = "PaymentDeclined: card expired"
        span.set_attribute("error.type", "PaymentDeclined")
    (exported,) = exporter.get_finished_spans()
    assert exported.status.status_code is StatusCode.ERROR
    assert [e.name for e in exported.events] == ["exception"]
    assert dict(exported.events[0].attributes or {}) == {
        "exception.type": "PaymentDeclined",
        "exception.message": "card expired",
    }
