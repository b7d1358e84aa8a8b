"""End to end over the wire: OTelTracer -> OTel SDK -> OTLP/HTTP exporter -> a local receiver.

The receiver is a small HTTP server on 127.0.0.1 that decodes each request body as the OTLP
``ExportTraceServiceRequest`` protobuf (``opentelemetry-proto``), the way a collector does.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as ProtoStatus
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tensorsketch import END, START, Context, Graph, Node, Schema
from tensorsketch.observability.otel import OTelTracer


class _Receiver(BaseHTTPRequestHandler):
    requests: list[tuple[str, str, ExportTraceServiceRequest]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        type(self).requests.append((self.path, self.headers["Content-Type"], request))
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def collector() -> Iterator[tuple[str, list[tuple[str, str, ExportTraceServiceRequest]]]]:
    handler = type("Receiver", (_Receiver,), {"requests": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1/traces", handler.requests
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def provider(collector: tuple[str, list[Any]]) -> Iterator[TracerProvider]:
    """An SDK pipeline exporting to the receiver; shut down while the receiver still runs."""
    session = requests.Session()
    session.trust_env = False  # never route 127.0.0.1 through a proxy from the environment
    exporter = OTLPSpanExporter(endpoint=collector[0], session=session, timeout=10)
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    yield provider
    provider.shutdown()


class S(Schema):
    query: str = ""
    answer: str = ""


class Agent(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        with ctx.span("agent", kind="agent", **{"gen_ai.agent.name": "researcher"}):
            with ctx.span(
                "model_call",
                kind="model",
                **{
                    "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.usage.input_tokens": 42,
                    "gen_ai.usage.output_tokens": 7,
                    "gen_ai.usage.cost_usd": 0.000175,
                },
            ):
                pass
            try:
                with ctx.span("tool_call", kind="tool", **{"gen_ai.tool.name": "fetch"}):
                    raise ConnectionError("site down")
            except ConnectionError:
                pass  # the agent hands the failure back to the model
        return self.Out(answer="ok")


def _value(value: AnyValue) -> Any:
    return getattr(value, value.WhichOneof("value"))


async def test_spans_arrive_over_otlp_http_with_names_attributes_and_parents(
    collector: tuple[str, list[tuple[str, str, ExportTraceServiceRequest]]],
    provider: TracerProvider,
) -> None:
    _, received = collector
    app = Graph(S).add(Agent).edge(START, "Agent").edge("Agent", END).compile()
    out = await app.invoke({"query": "q"}, tracer=OTelTracer(provider))
    assert out.answer == "ok"
    assert provider.force_flush(10_000)

    assert received, "the exporter sent nothing"
    assert {(path, kind) for path, kind, _ in received} == {
        ("/v1/traces", "application/x-protobuf")
    }
    spans: dict[str, ProtoSpan] = {}
    for _, _, request in received:
        for resource_spans in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            assert resource["service.name"] == "support-bot"
            for scope_spans in resource_spans.scope_spans:
                assert scope_spans.scope.name == "tensorsketch"
                for span in scope_spans.spans:
                    spans[span.name] = span
    assert set(spans) == {
        "invoke_workflow Graph[S]",
        "Agent",
        "invoke_agent researcher",
        "chat gpt-4o",
        "execute_tool fetch",
    }

    def attrs(name: str) -> dict[str, Any]:
        return {kv.key: _value(kv.value) for kv in spans[name].attributes}

    run, node = spans["invoke_workflow Graph[S]"], spans["Agent"]
    agent, chat, tool = (
        spans["invoke_agent researcher"],
        spans["chat gpt-4o"],
        spans["execute_tool fetch"],
    )
    assert run.parent_span_id == b""
    assert node.parent_span_id == run.span_id
    assert agent.parent_span_id == node.span_id
    assert chat.parent_span_id == tool.parent_span_id == agent.span_id
    assert len({s.trace_id for s in spans.values()}) == 1

    assert chat.kind == ProtoSpan.SpanKind.SPAN_KIND_CLIENT
    assert tool.kind == ProtoSpan.SpanKind.SPAN_KIND_INTERNAL
    assert attrs("chat gpt-4o") == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.usage.input_tokens": 42,
        "gen_ai.usage.output_tokens": 7,
        "tensorsketch.usage.cost_usd": 0.000175,
        "tensorsketch.span.kind": "model",
    }
    assert attrs("invoke_agent researcher")["gen_ai.operation.name"] == "invoke_agent"
    assert attrs("invoke_workflow Graph[S]")["gen_ai.workflow.name"] == "Graph[S]"
    tool_attrs = attrs("execute_tool fetch")
    assert tool_attrs["gen_ai.operation.name"] == "execute_tool"
    assert tool_attrs["error.type"] == "ConnectionError"
    assert tool.status.code == ProtoStatus.StatusCode.STATUS_CODE_ERROR
    assert tool.status.message == "ConnectionError: site down"
    assert [e.name for e in tool.events] == ["exception"]
    # the failure was handled inside the agent: nothing above the tool failed
    for name in ("invoke_agent researcher", "Agent", "invoke_workflow Graph[S]"):
        assert spans[name].status.code == ProtoStatus.StatusCode.STATUS_CODE_UNSET
