"""RunMetrics looks up each labelled child once: a run costs no ``labels()`` call after the
first run with the same label values (counted, not timed)."""

from __future__ import annotations

from typing import Any
from unittest import mock

from prometheus_client.metrics import MetricWrapperBase

from tensorsketch.agents import create_agent
from tensorsketch.fake import FakeProvider
from tensorsketch.observability import RecordingTracer
from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.serve import RunMetrics


def _sample(metrics: RunMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


async def test_a_run_after_the_first_looks_up_no_labelled_child() -> None:
    metrics = RunMetrics()
    runner = AsyncRunner(
        create_agent(FakeProvider(), name="echo"),
        backend=InMemoryBackend(),
        tracer=metrics.tracer,
        listeners=[metrics.observe],
    )
    real = MetricWrapperBase.labels
    calls: list[Any] = []

    def counted(self: MetricWrapperBase, *args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(self, *args, **kwargs)

    async with runner:
        with mock.patch.object(MetricWrapperBase, "labels", counted):
            first = await runner.submit({"query": "one"})
            await runner.await_run(first.run_id)
            assert calls, "the first run creates its children"
            calls.clear()
            for n in range(3):
                record = await runner.submit({"query": f"more {n}"})
                await runner.await_run(record.run_id)
    assert calls == []
    # ... and the cached children are the metrics' own: every run is counted.
    assert _sample(metrics, "tensorsketch_runs_finished_total", status="succeeded") == 4
    model = next(iter(metrics._model_calls.children))[0]
    assert _sample(metrics, "tensorsketch_model_calls_total", model=model) == 4
    assert _sample(metrics, "tensorsketch_run_duration_seconds_count", status="succeeded") == 4


async def test_the_metrics_tracer_opens_only_the_spans_it_counts() -> None:
    metrics = RunMetrics()
    runner = AsyncRunner(
        create_agent(FakeProvider(), name="echo"),
        backend=InMemoryBackend(),
        tracer=metrics.tracer,
        listeners=[metrics.observe],
    )
    real = RecordingTracer._start
    opened: list[str] = []

    def counted(self: RecordingTracer, name: str, kind: str, attributes: Any) -> Any:
        opened.append(kind)
        return real(self, name, kind, attributes)

    async with runner:
        with mock.patch.object(RecordingTracer, "_start", counted):
            record = await runner.submit({"query": "one"})
            await runner.await_run(record.run_id)
    # The model call's span only: the run's and the node's went to a sink that drops them.
    assert opened == ["model"]
    model = next(iter(metrics._model_calls.children))[0]
    assert _sample(metrics, "tensorsketch_model_calls_total", model=model) == 1
    assert _sample(metrics, "tensorsketch_model_duration_seconds_count", model=model) == 1
