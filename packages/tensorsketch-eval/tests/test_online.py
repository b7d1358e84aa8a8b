"""Online scoring: score() and OnlineMonitor, and the grades attached to the run's trace —
in a FileTracer file (the OTel bridge: test_scores_otel.py)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from agents import capital_agent

from tensorsketch import FileTracer, InMemoryTracer
from tensorsketch.eval import (
    CallbackReporter,
    Contains,
    Custom,
    FinalState,
    LatencyBudget,
    OnlineMonitor,
    ToolCalled,
    score,
)
from tensorsketch.observability.memory import Trace

Q = {"query": "Capital of France?"}


async def test_score_grades_a_live_run_reference_free() -> None:
    tracer = InMemoryTracer()
    state = await capital_agent.invoke(Q, tracer=tracer)
    result = await score(
        state,
        tracer.trace,
        [ToolCalled("search"), LatencyBudget(60_000), FinalState(status="completed")],
    )
    assert result.passed and result.case is None and result.steps == 3
    text_result = await score("Lyon", tracer.trace, [Contains("Paris")])
    assert not text_result.passed
    with pytest.raises(TypeError, match="needs a tensorsketch Trace"):
        await score(state, [], [Contains("Paris")])  # type: ignore[arg-type]


async def test_grades_join_the_runs_trace_in_a_file(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with FileTracer(path) as tracer:
        state = await capital_agent.invoke(Q, tracer=tracer)
        await score(state, Trace.load(path), [Contains("Paris"), Contains("Lyon")], tracer=tracer)
    trace = Trace.load(path)
    (run,) = [s for s in trace.roots if s.kind == "run"]
    evaluations = trace.find("gen_ai.evaluation.result")
    assert len(evaluations) == 2
    assert {s.parent_id for s in evaluations} == {run.span_id}
    assert {s.trace_id for s in evaluations} == {run.trace_id}
    labels = {
        s.attributes["gen_ai.evaluation.name"]: s.attributes["gen_ai.evaluation.score.label"]
        for s in evaluations
    }
    assert labels == {"Contains('Paris')": "pass", "Contains('Lyon')": "fail"}


async def test_observe_returns_before_scoring_and_flush_waits() -> None:
    gate = asyncio.Event()
    seen: list[dict[str, Any]] = []

    async def slow(trial: Any) -> bool:
        await gate.wait()
        return True

    monitor = OnlineMonitor([Custom(slow, name="slow")], reporter=CallbackReporter(seen.append))
    tracer = InMemoryTracer()
    state = await capital_agent.invoke(Q, tracer=tracer)
    assert await monitor.observe(state, tracer.trace) is True
    assert monitor.pending == 1 and seen == []  # scheduled, not yet scored
    gate.set()
    await monitor.flush()
    assert monitor.pending == 0 and len(seen) == 1 and seen[0]["grades"][0]["grader"] == "slow"


async def test_a_failing_scorer_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    def boom(record: dict[str, Any]) -> None:
        raise RuntimeError("warehouse down")

    monitor = OnlineMonitor([Contains("Paris")], reporter=CallbackReporter(boom))
    tracer = InMemoryTracer()
    state = await capital_agent.invoke(Q, tracer=tracer)
    with caplog.at_level(logging.ERROR, logger="tensorsketch.eval"):
        await monitor.observe(state, tracer.trace)
        await monitor.flush()
    assert monitor.failed == 1 and "online scoring failed" in caplog.text


def test_sample_must_be_a_fraction() -> None:
    with pytest.raises(ValueError, match=r"in \[0, 1\]; got 10"):
        OnlineMonitor([Contains("x")], sample=10)
