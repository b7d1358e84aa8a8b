"""Grades reach OpenTelemetry beside the spans they judge: the real SDK with an in-memory
exporter, through the interop distribution's bridge (skipped, saying so, without it)."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "tensorsketch.observability.otel",
    reason="needs tensorsketch-interop[otel] (the noxfile's TEST_PEERS installs it)",
)

from agents import capital_agent
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from tensorsketch.eval import Contains, score
from tensorsketch.observability.memory import Trace
from tensorsketch.observability.otel import OTelTracer

Q = {"query": "Capital of France?"}


async def test_grades_reach_opentelemetry_beside_the_spans_they_judge() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        otel = OTelTracer(provider)
        state = await capital_agent.invoke(Q, tracer=otel)
        # the run went to OTel; read its ids back from the exported spans to grade it
        exported = {s.name: s for s in exporter.get_finished_spans()}
        run = next(s for name, s in exported.items() if name.startswith("invoke_workflow"))
        trace = Trace.from_dicts(
            [
                {
                    "name": "run",
                    "kind": "run",
                    "trace_id": f"{run.context.trace_id:032x}",
                    "span_id": f"{run.context.span_id:016x}",
                    "duration_ms": 1.0,
                }
            ]
        )
        await score(state, trace, [Contains("Paris")], tracer=otel)
        (evaluation,) = [
            s for s in exporter.get_finished_spans() if s.name == "gen_ai.evaluation.result"
        ]
        assert evaluation.parent is not None and evaluation.parent.span_id == run.context.span_id
        assert evaluation.context.trace_id == run.context.trace_id
        (event,) = evaluation.events
        assert event.name == "gen_ai.evaluation.result"
        assert dict(event.attributes or {}) == {
            "gen_ai.evaluation.name": "Contains('Paris')",
            "gen_ai.evaluation.score.value": 1.0,
            "gen_ai.evaluation.score.label": "pass",
            "gen_ai.evaluation.explanation": "the answer contains 'Paris'",
        }
    finally:
        provider.shutdown()
