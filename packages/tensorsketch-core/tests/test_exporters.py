"""Exporters: the JSON Lines file, MultiTracer fan-out, and the non-blocking HTTP span feed."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import logging
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Annotated, Any

import pytest

from tensorsketch import (
    END,
    START,
    Context,
    FileTracer,
    Graph,
    InMemoryTracer,
    MultiTracer,
    Node,
    NoopTracer,
    Reducer,
    Schema,
    Span,
)
from tensorsketch.observability.export import http_span_sink
from tensorsketch.observability.memory import Trace

SPAN_KEYS = {
    "name",
    "kind",
    "trace_id",
    "span_id",
    "parent_id",
    "started_at",
    "duration_ms",
    "status",
    "error",
    "attributes",
}


class S(Schema):
    log: Annotated[list[str], Reducer(lambda a, b: a + b)] = []


class Payload(Schema):
    city: str


def _count_lines(path: Path) -> int:
    with path.open(encoding="utf-8") as file:
        return sum(1 for _ in file)


def _app(path: Path | None = None, *, nodes: int = 3) -> Any:
    """A chain whose nodes open a model-ish sub-span; with ``path``, each node also reads the
    trace file while the run is still going."""
    g = Graph(S)
    names = [f"N{i}" for i in range(nodes)]
    for name in names:

        class Step(Node):
            class Out(Schema):
                log: list[str]

            label = name

            async def run(self, ctx: Context, inp: object) -> Any:
                lines = _count_lines(path) if path is not None else -1
                with ctx.span(
                    "lookup",
                    kind="tool",
                    **{
                        "gen_ai.tool.name": "weather",
                        "gen_ai.tool.call.arguments": Payload(city="Oslo"),
                    },
                ) as span:
                    span.set_attribute("tags", {"a"})
                    span.set_attribute("raw", b"\x00bytes")
                    await asyncio.sleep(0)
                return self.Out(log=[f"{self.label}:{lines}"])

        g.add(Step(), name=name)
    g.edge(START, names[0])
    for a, b in itertools.pairwise(names):
        g.edge(a, b)
    g.edge(names[-1], END)
    return g.compile()


# -- FileTracer ------------------------------------------------------------------------------


async def test_file_tracer_writes_one_json_object_per_span_as_it_closes(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with FileTracer(path) as tracer:
        out = await _app(path).invoke({}, tracer=tracer)
    # each node saw the spans that had closed before it started: 0, then 2 (lookup + N0), then 4
    assert out.log == ["N0:0", "N1:2", "N2:4"]
    assert tracer.closed
    assert tracer.written == 7

    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [r["name"] for r in rows] == ["lookup", "N0", "lookup", "N1", "lookup", "N2", "run"]
    for row in rows:
        assert set(row) == SPAN_KEYS
        assert row["trace_id"] == tracer.trace_id
        assert row["status"] == "ok"
        assert isinstance(row["duration_ms"], float)
    lookup = rows[0]["attributes"]
    assert lookup["gen_ai.tool.call.arguments"] == {"city": "Oslo"}
    assert lookup["tags"] == ["a"]
    assert lookup["raw"] == "\x00bytes"
    assert rows[1]["attributes"]["tensorsketch.node"] == "N0"
    assert rows[0]["parent_id"] == rows[1]["span_id"]
    assert rows[-1]["parent_id"] is None

    trace = Trace.load(path)
    assert [s.name for _, s in trace.walk()] == [
        "run",
        "N0",
        "lookup",
        "N1",
        "lookup",
        "N2",
        "lookup",
    ]
    assert trace.tool_calls == 3


async def test_file_tracer_appends_on_request_and_accepts_a_stream(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    for _ in range(2):
        with FileTracer(path, append=True) as tracer:
            await _app(nodes=1).invoke({}, tracer=tracer)
    assert len(Trace.load(path).roots) == 2
    with FileTracer(path) as tracer:  # the default starts the file afresh
        await _app(nodes=1).invoke({}, tracer=tracer)
    assert len(Trace.load(path).roots) == 1

    stream = io.StringIO()
    tracer = FileTracer(stream)
    await _app(nodes=1).invoke({}, tracer=tracer)
    tracer.close()
    assert not stream.closed
    assert len(stream.getvalue().splitlines()) == 3


async def test_a_closed_file_tracer_loses_spans_loudly_but_never_breaks_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tracer = FileTracer(tmp_path / "run.jsonl")
    tracer.close()
    caplog.set_level(logging.ERROR, logger="tensorsketch.observability")
    out = await _app(nodes=1).invoke({}, tracer=tracer)
    assert out.log == ["N0:-1"]
    assert "is closed, so span 'lookup' was not written" in caplog.text


def test_file_tracer_names_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist; create it first"):
        FileTracer(tmp_path / "nope" / "run.jsonl")


def test_trace_load_explains_bad_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no trace file at"):
        Trace.load(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"name": "run", "kind": "run"}\nnot json\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        Trace.load(bad)
    bad.write_text("[1, 2]\n")
    with pytest.raises(ValueError, match="line 1 is not a span"):
        Trace.load(bad)


# -- MultiTracer -----------------------------------------------------------------------------


async def test_multi_tracer_hands_identical_spans_to_every_sink(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    collector = InMemoryTracer()
    fed: list[dict[str, Any]] = []
    with FileTracer(path) as file_tracer:
        tracer = MultiTracer(collector, file_tracer, lambda span: fed.append(span.to_dict()))
        await _app(nodes=2).invoke({}, tracer=tracer)

    from_file = [json.loads(line) for line in path.read_text().splitlines()]
    in_memory = [s.to_dict() for s in collector.spans]

    def identity(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(r["name"], r["trace_id"], r["span_id"], r["parent_id"]) for r in rows]

    assert identity(in_memory) == identity(from_file) == identity(fed)
    assert len(in_memory) == 5
    assert {r["trace_id"] for r in in_memory} == {tracer.trace_id}
    assert collector.trace_id == file_tracer.trace_id == tracer.trace_id
    # one timing per span, not one per sink
    assert [r["duration_ms"] for r in fed] == [r["duration_ms"] for r in from_file]
    assert [r["duration_ms"] for r in in_memory] == [r["duration_ms"] for r in from_file]


async def test_multi_tracer_keeps_feeding_the_other_sinks_when_one_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    collector = InMemoryTracer()

    def broken(span: Span) -> None:
        raise ConnectionError("viewer went away")

    caplog.set_level(logging.ERROR, logger="tensorsketch.observability")
    await _app(nodes=1).invoke({}, tracer=MultiTracer(broken, collector))
    assert [s.name for s in collector.spans] == ["lookup", "N0", "run"]
    assert caplog.text.count("failed to record span") == 3


def test_multi_tracer_refuses_what_cannot_be_a_sink() -> None:
    with pytest.raises(ValueError, match="at least one sink"):
        MultiTracer()
    with pytest.raises(TypeError, match="sink #1 is a NoopTracer, which drives its own span"):
        MultiTracer(InMemoryTracer(), NoopTracer())
    with pytest.raises(TypeError, match=r"sink #0 is 'run\.jsonl'"):
        MultiTracer("run.jsonl")  # type: ignore[arg-type]


async def test_multi_tracer_can_join_a_callers_trace() -> None:
    collector = InMemoryTracer()
    header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    await _app(nodes=1).invoke({}, tracer=MultiTracer(collector, traceparent=header))
    (run,) = collector.trace.roots
    assert (run.trace_id, run.parent_id) == ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")


# -- http_span_sink --------------------------------------------------------------------------


class _Collector(BaseHTTPRequestHandler):
    bodies: list[dict[str, Any]]

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        body = json.loads(self.rfile.read(length))
        type(self).bodies.append({"path": self.path, "type": self.headers["Content-Type"], **body})
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    handler = type("Handler", (_Collector,), {"bodies": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/api/trace", handler.bodies
    finally:
        server.shutdown()
        server.server_close()


async def test_http_sink_delivers_every_span_when_the_endpoint_is_up(
    receiver: tuple[str, list[dict[str, Any]]],
) -> None:
    url, bodies = receiver
    collector = InMemoryTracer()
    sink = http_span_sink(url)
    await _app(nodes=3).invoke({}, tracer=MultiTracer(collector, sink))
    assert await asyncio.to_thread(sink.flush, 10.0)
    received = [span for body in bodies for span in body["spans"]]
    assert {b["path"] for b in bodies} == {"/api/trace"}
    assert {b["type"] for b in bodies} == {"application/json"}
    assert [r["span_id"] for r in received] == [s.span_id for s in collector.spans]
    assert all(set(r) == SPAN_KEYS for r in received)
    assert received[-1]["name"] == "run"
    assert (sink.sent, sink.dropped, sink.failed) == (7, 0, 0)
    await asyncio.to_thread(sink.close)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_http_sink_drops_spans_when_nobody_listens() -> None:
    collector = InMemoryTracer()
    sink = http_span_sink(f"http://127.0.0.1:{_closed_port()}/api/trace")
    out = await _app(nodes=3).invoke({}, tracer=MultiTracer(collector, sink))
    assert out.log == ["N0:-1", "N1:-1", "N2:-1"]
    assert len(collector.spans) == 7
    assert await asyncio.to_thread(sink.flush, 10.0)
    assert sink.sent == 0
    assert sink.failed + sink.dropped == 7
    assert sink.failed >= 1


async def test_http_sink_never_waits_on_an_endpoint_that_hangs() -> None:
    """The endpoint accepts the connection and never answers. The run still finishes while the
    sink's thread is stuck on the first batch, and the bounded queue drops the overflow."""
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)  # the kernel completes handshakes; nobody ever reads
    port = hung.getsockname()[1]
    sink = http_span_sink(
        f"http://127.0.0.1:{port}/api/trace", max_queue=2, batch_size=1, timeout=60
    )
    collector = InMemoryTracer()
    try:
        out = await _app(nodes=5).invoke({}, tracer=MultiTracer(collector, sink))
        assert len(out.log) == 5
        assert len(collector.spans) == 11
        assert sink.sent == 0
        assert sink.pending >= 1  # still stuck on the endpoint after the run returned
        assert sink.dropped >= 11 - 3  # at most one in flight plus two queued
    finally:
        hung.close()  # resets the pending connection: the thread's POST fails at once
    assert await asyncio.to_thread(sink.flush, 30.0)
    assert sink.sent == 0
    assert sink.failed + sink.dropped == 11
    sink.close()
    sink(collector.spans[0])  # after close: dropped, never raises
    assert sink.dropped + sink.failed == 12


def test_http_sink_checks_its_url() -> None:
    with pytest.raises(
        ValueError, match=r"needs an http:// or https:// URL with a host, got 'localhost:8765'"
    ):
        http_span_sink("localhost:8765")
    with pytest.raises(ValueError, match="max_queue >= 1"):
        http_span_sink("http://127.0.0.1:1/x", max_queue=0)
