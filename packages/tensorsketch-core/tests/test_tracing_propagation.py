"""W3C trace context: a run joins its caller's trace, and hands its spans to outbound calls."""

from __future__ import annotations

import pytest

from tensorsketch import START, Context, Graph, InMemoryTracer, Node, Schema
from tensorsketch.observability.propagation import (
    RemoteParent,
    current_traceparent,
    format_traceparent,
    inject,
    parse_traceparent,
    use_traceparent,
)

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
HEADER = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


class S(Schema):
    seen: list[str | None] = []


class Outbound(Node):
    """Records the traceparent it would send on an outbound HTTP call."""

    class Out(Schema):
        seen: list[str | None]

    async def run(self, ctx: Context, inp: object) -> Out:
        seen = [current_traceparent()]
        with ctx.span("fetch", kind="custom"):
            seen.append(current_traceparent())
            seen.append(inject({"accept": "application/json"}).get("traceparent"))
        return self.Out(seen=seen)


APP = Graph(S).add(Outbound).edge(START, "Outbound").compile()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (HEADER, RemoteParent(CALLER_TRACE, CALLER_SPAN, True)),
        (f"00-{CALLER_TRACE}-{CALLER_SPAN}-00", RemoteParent(CALLER_TRACE, CALLER_SPAN, False)),
        (f"  00-{CALLER_TRACE.upper()}-{CALLER_SPAN}-01 ", RemoteParent(CALLER_TRACE, CALLER_SPAN)),
        # a later version may append fields; version 00 may not
        (
            f"cc-{CALLER_TRACE}-{CALLER_SPAN}-01-what-the-future-holds",
            RemoteParent(CALLER_TRACE, CALLER_SPAN),
        ),
        (f"00-{CALLER_TRACE}-{CALLER_SPAN}-01-extra", None),
        (f"ff-{CALLER_TRACE}-{CALLER_SPAN}-01", None),
        (f"00-{'0' * 32}-{CALLER_SPAN}-01", None),
        (f"00-{CALLER_TRACE}-{'0' * 16}-01", None),
        (f"00-{CALLER_TRACE[:-1]}-{CALLER_SPAN}-01", None),
        ("00-not-hex-at-all-01", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_traceparent(value: str | None, expected: RemoteParent | None) -> None:
    assert parse_traceparent(value) == expected


def test_format_round_trips() -> None:
    assert format_traceparent(CALLER_TRACE, CALLER_SPAN) == HEADER
    parsed = parse_traceparent(HEADER)
    assert parsed is not None
    assert format_traceparent(parsed.trace_id, parsed.span_id) == HEADER


async def test_a_tracer_given_a_traceparent_joins_the_callers_trace() -> None:
    tracer = InMemoryTracer(traceparent=HEADER)
    await APP.invoke({}, tracer=tracer)
    trace = tracer.trace
    (run,) = trace.roots
    assert run.name == "run"
    assert run.parent_id == CALLER_SPAN
    assert {s.trace_id for s in trace.spans} == {CALLER_TRACE}
    assert tracer.trace_id == CALLER_TRACE


async def test_use_traceparent_joins_the_callers_trace_for_any_tracer() -> None:
    tracer = InMemoryTracer()
    with use_traceparent(HEADER) as parent:
        assert parent == RemoteParent(CALLER_TRACE, CALLER_SPAN)
        assert current_traceparent() == HEADER  # outside a span: the caller's own context
        out = await APP.invoke({}, tracer=tracer)
    assert current_traceparent() is None
    by_name = {s.name: s for s in tracer.trace.spans}
    assert by_name["run"].parent_id == CALLER_SPAN
    assert by_name["run"].trace_id == CALLER_TRACE
    # inside the node the outbound header points at the node span, then at the sub-span
    assert out.seen == [
        f"00-{CALLER_TRACE}-{by_name['Outbound'].span_id}-01",
        f"00-{CALLER_TRACE}-{by_name['fetch'].span_id}-01",
        f"00-{CALLER_TRACE}-{by_name['fetch'].span_id}-01",
    ]


async def test_a_malformed_header_on_the_wire_just_starts_a_new_trace() -> None:
    tracer = InMemoryTracer()
    with use_traceparent("garbage") as parent:
        assert parent is None
        await APP.invoke({}, tracer=tracer)
    (run,) = tracer.trace.roots
    assert run.parent_id is None
    assert run.trace_id != CALLER_TRACE


def test_an_invalid_explicit_traceparent_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"traceparent='00-abc' is not a valid W3C traceparent"):
        InMemoryTracer(traceparent="00-abc")


async def test_without_tracing_there_is_no_traceparent_to_send() -> None:
    out = await APP.invoke({})
    assert out.seen == [None, None, None]
