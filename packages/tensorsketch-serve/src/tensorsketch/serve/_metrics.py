"""``RunMetrics``: Prometheus metrics of a runner, with every label's cardinality capped.

Built on ``prometheus_client`` (its own registry per instance, so two apps in one process do
not collide). Three sources feed it: the runner's stored records (runs by status, latency),
a tracer that sees every tool and model span (calls, errors, latency, tokens, cost, unpriced
turns), and the runner's health at scrape time (queue depth, in flight, suspended by reason).

Every label that takes values from the outside — tool names, model ids, the attribution labels
you name in ``label_keys`` — keeps at most a fixed number of distinct values; later ones fold
into ``other`` and are counted in ``tensorsketch_metrics_folded_values_total{kind}``, so the
folding is never silent and memory stays bounded however many tenants or tools appear.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tensorsketch.observability.tracing import (
    ATTR_COST_USD,
    ATTR_INPUT_TOKENS,
    ATTR_OUTPUT_TOKENS,
    ATTR_REQUEST_MODEL,
    ATTR_RESPONSE_MODEL,
    ATTR_TOOL_NAME,
    NOOP_TRACER,
    RecordingTracer,
    Span,
)
from tensorsketch.runtime.backends.runs import TERMINAL, RunRecord

if TYPE_CHECKING:
    from tensorsketch.runs import AsyncRunner

__all__ = ["CONTENT_TYPE_LATEST", "OTHER", "MetricsTracer", "RunMetrics"]

#: The value a capped label takes once its distinct values are used up.
OTHER = "other"
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)


class _Cap:
    """Admit at most ``limit`` distinct values; fold the rest into ``other`` (and count)."""

    def __init__(self, kind: str, limit: int, folded: Counter) -> None:
        self.kind = kind
        self.limit = limit
        self.seen: set[str] = set()
        self.folded = folded
        self.lock = threading.Lock()

    def __call__(self, value: str) -> str:
        with self.lock:
            if value in self.seen:
                return value
            if len(self.seen) < self.limit:
                self.seen.add(value)
                return value
        self.folded.labels(kind=self.kind).inc()
        return OTHER


class _Children:
    """A labelled metric's children by their label values, each looked up once:
    ``labels()`` checks, converts and locks on every call, several times per run (the values
    are capped, so this stays as small as the metric)."""

    def __init__(self, metric: Any) -> None:
        self.metric = metric
        self.children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self.children.get(values)
        if child is None:
            child = self.children[values] = self.metric.labels(*values)
        return child


class RunMetrics:
    """Metrics for one runner; ``render()`` is the Prometheus text ``/metrics`` returns.

    :param label_keys: attribution label keys (from ``submit(labels=...)``) to put on the run
        metrics; none by default. Each keeps at most ``max_label_values`` values, and all of
        them together at most ``max_label_combos`` combinations.
    :param max_tools: / :param max_models: distinct tool names / model ids before ``other``.
    """

    def __init__(
        self,
        *,
        label_keys: Sequence[str] = (),
        max_label_values: int = 100,
        max_label_combos: int = 200,
        max_tools: int = 200,
        max_models: int = 50,
        prefix: str = "tensorsketch_",
    ) -> None:
        for name, value in (
            ("max_label_values", max_label_values),
            ("max_label_combos", max_label_combos),
            ("max_tools", max_tools),
            ("max_models", max_models),
        ):
            if type(value) is not int or value < 1:
                msg = f"RunMetrics({name}=...) must be an int >= 1 (a memory cap), got {value!r}."
                raise ValueError(msg)
        keys = list(label_keys)
        bad = [k for k in keys if not isinstance(k, str) or not k.isidentifier()]
        if bad or len(set(keys)) != len(keys):
            msg = f"label_keys must be distinct identifiers (metric label names), got {keys!r}."
            raise ValueError(msg)
        reserved = {"status", "tool", "model", "reason", "kind"} & set(keys)
        if reserved:
            msg = f"label_keys {sorted(reserved)} clash with the metrics' own labels; rename them."
            raise ValueError(msg)
        self.registry = CollectorRegistry(auto_describe=True)
        self.label_keys = keys
        p = prefix
        r = self.registry
        self.folded = Counter(
            f"{p}metrics_folded_values",
            "Label values folded into 'other' by a cardinality cap, by label kind.",
            ["kind"],
            registry=r,
        )
        for kind in ("tool", "model", "score", *(f"label:{k}" for k in keys), "label:combos"):
            self.folded.labels(kind=kind)  # always present: zero means nothing was folded
        self._tools = _Cap("tool", max_tools, self.folded)
        self._models = _Cap("model", max_models, self.folded)
        self._scores = _Cap("score", max_models * 4, self.folded)
        self._labels = {k: _Cap(f"label:{k}", max_label_values, self.folded) for k in keys}
        self._combos = _Cap("label:combos", max_label_combos, self.folded)
        run_labels = ["status", *keys]
        self.runs = Counter(
            f"{p}runs_finished", "Runs that reached a final status.", run_labels, registry=r
        )
        self.run_latency = Histogram(
            f"{p}run_duration_seconds",
            "Submit-to-finish time of finished runs.",
            run_labels,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tool_calls = Counter(f"{p}tool_calls", "Tool calls run.", ["tool"], registry=r)
        self.tool_errors = Counter(
            f"{p}tool_errors", "Tool calls that failed.", ["tool"], registry=r
        )
        self.tool_latency = Histogram(
            f"{p}tool_duration_seconds",
            "Tool call time.",
            ["tool"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.model_calls = Counter(f"{p}model_calls", "Model calls made.", ["model"], registry=r)
        self.model_errors = Counter(
            f"{p}model_errors", "Model calls that failed.", ["model"], registry=r
        )
        self.model_latency = Histogram(
            f"{p}model_duration_seconds",
            "Model call time.",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            f"{p}model_tokens", "Tokens used, by direction.", ["model", "direction"], registry=r
        )
        self.cost = Counter(f"{p}model_cost_usd", "Estimated model cost.", ["model"], registry=r)
        self.unpriced = Counter(
            f"{p}model_unpriced_turns",
            "Model calls whose cost is unknown (the model is not in the price table).",
            ["model"],
            registry=r,
        )
        self.status = Gauge(f"{p}runs", "Runs in the store by status.", ["status"], registry=r)
        self.suspended = Gauge(
            f"{p}runs_suspended", "Suspended runs by what they wait for.", ["reason"], registry=r
        )
        self.queue_depth = Gauge(
            f"{p}queue_depth", "New runs waiting for a slot in this process.", registry=r
        )
        self.in_flight = Gauge(f"{p}runs_in_flight", "Runs held by this process.", registry=r)
        self.scores = Gauge(f"{p}score", "The latest score by name.", ["name"], registry=r)
        #: Pass as ``AsyncRunner(tracer=...)`` so tool and model calls are counted.
        self.tracer = MetricsTracer(self)
        self._runs = _Children(self.runs)
        self._run_latency = _Children(self.run_latency)
        self._tool_calls = _Children(self.tool_calls)
        self._tool_errors = _Children(self.tool_errors)
        self._tool_latency = _Children(self.tool_latency)
        self._model_calls = _Children(self.model_calls)
        self._model_errors = _Children(self.model_errors)
        self._model_latency = _Children(self.model_latency)
        self._tokens = _Children(self.tokens)
        self._cost = _Children(self.cost)
        self._unpriced = _Children(self.unpriced)

    # -- feeding it ---------------------------------------------------------------------------

    def observe(self, record: RunRecord) -> None:
        """A runner listener: count each run once, when it reaches a final status."""
        if record.kind != "run" or record.status not in TERMINAL:
            return
        values = self._label_values(record)
        self._runs(record.status, *values).inc()
        if record.finished_at is not None and record.created_at:
            took = max(0.0, record.finished_at - record.created_at)
            self._run_latency(record.status, *values).observe(took)

    def _label_values(self, record: RunRecord) -> list[str]:
        if not self.label_keys:
            return []
        values = [self._labels[k](record.labels.get(k, "")) for k in self.label_keys]
        if self._combos("\x00".join(values)) == OTHER:
            return [OTHER] * len(values)
        return values

    def span(self, span: Span) -> None:
        """Count a finished tool or model span."""
        attrs = span.attributes
        seconds = span.duration_ms / 1000.0
        failed = span.status == "error"
        if span.kind == "tool":
            tool = self._tools(str(attrs.get(ATTR_TOOL_NAME) or span.name))
            self._tool_calls(tool).inc()
            self._tool_latency(tool).observe(seconds)
            if failed:
                self._tool_errors(tool).inc()
        elif span.kind == "model":
            raw = attrs.get(ATTR_RESPONSE_MODEL) or attrs.get(ATTR_REQUEST_MODEL) or "unknown"
            model = self._models(str(raw))
            self._model_calls(model).inc()
            self._model_latency(model).observe(seconds)
            if failed:
                self._model_errors(model).inc()
                return
            for direction, key in (("input", ATTR_INPUT_TOKENS), ("output", ATTR_OUTPUT_TOKENS)):
                count = attrs.get(key)
                if isinstance(count, int | float) and count > 0:
                    self._tokens(model, direction).inc(count)
            cost = attrs.get(ATTR_COST_USD)
            if isinstance(cost, int | float):
                self._cost(model).inc(max(0.0, float(cost)))
            else:
                self._unpriced(model).inc()

    def score(self, name: str, value: float) -> None:
        """Record an evaluation score by grader name (capped like the other labels)."""
        self.scores.labels(self._scores(name)).set(value)

    async def refresh(self, runner: AsyncRunner) -> None:
        """Read the gauges from the runner and its store (``/metrics`` calls it per scrape)."""
        health = await runner.health()
        for status in ("queued", "running", "suspended", "succeeded", "failed", "cancelled"):
            self.status.labels(status).set(health["runs"].get(status, 0))
        for reason in ("approval", "timer", "input", "event", "breakpoint"):
            self.suspended.labels(reason).set(health["suspended"].get(reason, 0))
        self.queue_depth.set(health["waiting_for_slot"])
        self.in_flight.set(health["in_flight"])

    def render(self) -> bytes:
        """The Prometheus text exposition (``prometheus_client.generate_latest``)."""
        return generate_latest(self.registry)

    content_type = CONTENT_TYPE_LATEST


#: The span kinds :class:`RunMetrics` counts; the others (run, node, ...) it never sees.
_COUNTED = frozenset({"tool", "model"})


class MetricsTracer(RecordingTracer):
    """A tracer whose only sink is :class:`RunMetrics` (combine it with your own tracer
    through ``tensorsketch.observability``'s multi-tracer if you trace too).

    Only tool and model spans are opened: a run's and its nodes' spans would be built, timed
    and handed to a sink that drops them (two spans per run of a one-node agent). The
    others get the no-op span of :data:`~tensorsketch.observability.NOOP_TRACER`."""

    def __init__(self, metrics: RunMetrics) -> None:
        super().__init__()
        self.metrics = metrics

    def span(
        self, name: str, *, kind: str = "custom", **attributes: Any
    ) -> contextlib.AbstractContextManager[Span]:
        if kind not in _COUNTED:
            return NOOP_TRACER.span(name, kind=kind)
        return super().span(name, kind=kind, **attributes)

    def _record(self, span: Span) -> None:
        if span.kind in _COUNTED:
            self.metrics.span(span)
