"""The documentation's "Tracing & observability" examples, as written, running offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tensorsketch import (
    END,
    START,
    Completion,
    Context,
    FakeProvider,
    Graph,
    Node,
    Schema,
    Usage,
    create_agent,
    tool,
)
from tensorsketch.messages import ToolCall, assistant


@tool
async def search(query: str) -> str:
    """Search the docs."""
    return "TensorSketch is a framework for typed agent graphs."


def _rows(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as file:
        return [json.loads(line) for line in file]


def _agent() -> Any:
    return create_agent(
        FakeProvider(
            [
                Completion(
                    message=assistant(
                        tool_calls=[ToolCall(id="1", name="search", args={"query": "ts"})]
                    ),
                    usage=Usage(input_tokens=1000, output_tokens=120),
                    model="claude-sonnet-4-6",
                ),
                Completion(
                    message=assistant("A typed agent framework."),
                    usage=Usage(input_tokens=1200, output_tokens=120),
                    model="claude-sonnet-4-6",
                ),
            ],
            model="claude-sonnet-4-6",
        ),
        [search],
    )


async def test_the_shape_of_it(capsys: pytest.CaptureFixture[str]) -> None:
    agent = _agent()

    from tensorsketch import InMemoryTracer

    tracer = InMemoryTracer()
    out = await agent.invoke({"query": "what is tensorsketch?"}, tracer=tracer)

    print(tracer.trace.render())
    print(tracer.trace.summary())

    printed = capsys.readouterr().out.splitlines()
    assert [line.split(" (")[0] for line in printed[:5]] == [
        "run",
        "  agent",
        "    model_call",
        "    tool_call",
        "    model_call",
    ]
    assert printed[2].endswith("[claude-sonnet-4-6, 120 out-tok, $0.004800]")
    assert printed[3].endswith("[search]")
    assert printed[4].endswith("[claude-sonnet-4-6, 120 out-tok, $0.005400]")
    summary = tracer.trace.summary()
    assert {k: v for k, v in summary.items() if k != "duration_ms"} == {
        "spans": 5,
        "model_calls": 2,
        "tool_calls": 1,
        "input_tokens": 2200,
        "output_tokens": 240,
        "cost_usd": 0.0102,
        "errors": 0,
    }
    assert out.output == "A typed agent framework."


class Invoice(Schema):
    document: str
    score: float = 0.0


def parse(document: str) -> list[str]:
    return document.split()


async def score(data: list[str]) -> float:
    return len(data) / 10


class Review(Node):
    class In(Schema):
        document: str

    class Out(Schema):
        score: float

    async def run(self, ctx: Context, inp: In) -> Out:
        with ctx.span("parse-invoice"):
            data = parse(inp.document)
        with ctx.span("score", model="scorer-v2"):
            return self.Out(score=await score(data))


app = Graph(Invoice).add(Review).edge(START, "Review").edge("Review", END).compile()


async def test_trace_your_own_work() -> None:
    from tensorsketch import InMemoryTracer

    tracer = InMemoryTracer()
    await app.invoke({"document": "two widgets"}, tracer=tracer)
    trace = tracer.trace
    review = trace.find("Review")[0]
    assert [s.name for s in trace.children(review)] == ["parse-invoice", "score"]
    assert trace.find("score")[0].attributes == {"model": "scorer-v2"}


async def test_file_exporter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    from tensorsketch.observability.export import FileTracer

    with FileTracer("run.jsonl") as tracer:
        await app.invoke({"document": "two widgets"}, tracer=tracer)

    first = _rows("run.jsonl")[0]
    assert {"name", "kind", "duration_ms", "status", "attributes"} <= set(first)


async def test_fan_out_to_several_sinks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    class Feed:
        def __init__(self) -> None:
            self.sent: list[dict[str, Any]] = []

        def send(self, item: dict[str, Any]) -> None:
            self.sent.append(item)

    feed = Feed()

    from tensorsketch import FileTracer, InMemoryTracer, MultiTracer

    collector = InMemoryTracer()
    with FileTracer("run.jsonl") as file_tracer:
        tracer = MultiTracer(collector, file_tracer, lambda span: feed.send(span.to_dict()))
        await app.invoke({"document": "two widgets"}, tracer=tracer)

    print(collector.trace.render())  # exactly the spans that were written to run.jsonl
    written = [row["span_id"] for row in _rows("run.jsonl")]
    assert written == [s.span_id for s in collector.spans] == [f["span_id"] for f in feed.sent]


async def test_live_overlay_feed() -> None:
    agent = _agent()
    inputs = {"query": "what is tensorsketch?"}

    from tensorsketch import InMemoryTracer, MultiTracer
    from tensorsketch.observability.export import http_span_sink

    tracer = MultiTracer(
        InMemoryTracer(),  # keep the trace for yourself, and…
        http_span_sink("http://127.0.0.1:8765/api/trace"),  # …feed the Studio overlay
    )
    await agent.invoke(inputs, tracer=tracer)  # nodes light up as spans arrive

    # with or without a Studio listening, the run finished and kept its own trace
    collector = tracer.sinks[0]
    assert isinstance(collector, InMemoryTracer)
    assert collector.trace.model_calls == 2


def test_the_documented_imports_resolve() -> None:
    import tensorsketch

    for name in ("Tracer", "NoopTracer", "RecordingTracer", "Span", "InMemoryTracer", "Trace"):
        assert hasattr(tensorsketch, name)
    for name in ("MultiTracer", "FileTracer"):
        assert hasattr(tensorsketch, name)
    from tensorsketch.observability.export import FileTracer

    assert tensorsketch.FileTracer is FileTracer
