"""Scores on traces: each grade becomes a ``gen_ai.evaluation.result`` span under the run's span.

The attributes follow the OpenTelemetry GenAI evaluation event (``gen_ai.evaluation.name``,
``gen_ai.evaluation.score.value``, ``gen_ai.evaluation.score.label``,
``gen_ai.evaluation.explanation``), so a trace viewer shows the verdicts beside the spans they
judge; through ``OTelTracer`` each one also carries the ``gen_ai.evaluation.result`` event.
"""

from __future__ import annotations

from collections.abc import Iterable

from tensorsketch.eval._trial import Grade
from tensorsketch.observability.memory import Trace
from tensorsketch.observability.tracing import RemoteParent, Tracer, current_span, remote_parent

__all__ = ["EVALUATION_SPAN", "record_grades"]

EVALUATION_SPAN = "gen_ai.evaluation.result"


def record_grades(tracer: Tracer, trace: Trace, grades: Iterable[Grade]) -> int:
    """Open one evaluation span per grade under ``trace``'s run span, through ``tracer``.

    Returns how many were recorded (0 when the trace has no root span to attach to).
    """
    roots = trace.roots
    run = next((span for span in roots if span.kind == "run"), roots[0] if roots else None)
    if run is None or not run.trace_id or not run.span_id or not tracer.enabled:
        return 0
    parent = remote_parent.set(RemoteParent(run.trace_id, run.span_id))
    outer = current_span.set(None)
    count = 0
    try:
        for grade in grades:
            with tracer.span(
                EVALUATION_SPAN,
                kind="evaluation",
                **{
                    "gen_ai.evaluation.name": grade.grader,
                    "gen_ai.evaluation.score.value": float(grade.score),
                    "gen_ai.evaluation.score.label": "pass" if grade.passed else "fail",
                    "gen_ai.evaluation.explanation": grade.reason,
                },
            ):
                count += 1
    finally:
        current_span.reset(outer)
        remote_parent.reset(parent)
    return count
