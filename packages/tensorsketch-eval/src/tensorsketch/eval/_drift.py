"""Drift detection over the stream of online results, against a :class:`Baseline`.

Three families, all standard library and O(window) memory:

* **pass rate** (overall and per grader): a one-sided two-proportion z-test of the rolling
  window against the baseline; binary outcomes make a proportion test the right one.
* **mean cost and latency**: the Page-Hinkley test fed each value *relative to the baseline
  mean* (1.0 = as in the baseline), with the baseline as its reference level, so one
  ``(delta, threshold)`` works for dollars and milliseconds and a stream that is shifted from
  its first record is caught too.
* **distribution** of a numeric field (cost, latency, steps, a grader's score): population
  stability index (PSI) and the two-sample Kolmogorov-Smirnov test of the window against the
  baseline's reference sample.

Every alert is latched: a sustained regression fires once, and the metric re-arms only after
it has recovered. The monitor persists nothing; alerts go to its reporter.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tensorsketch.eval._report import Report
from tensorsketch.eval._reporters import deliver

__all__ = [
    "Baseline",
    "DriftAlert",
    "DriftMonitor",
    "PageHinkley",
    "ks_2samp",
    "psi",
    "two_proportion_z",
]

#: Numeric fields of a trial record that distribution checks can watch.
NUMERIC_FIELDS = ("cost_usd", "latency_ms", "steps", "input_tokens", "output_tokens")


def two_proportion_z(p1: float, n1: int, p2: float, n2: int) -> float:
    """z statistic of ``p2 - p1`` (pooled); negative when the second proportion is lower."""
    if n1 <= 0 or n2 <= 0:
        return 0.0
    pooled = (p1 * n1 + p2 * n2) / (n1 + n2)
    variance = pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2)
    if variance <= 0.0:
        return 0.0
    return (p2 - p1) / math.sqrt(variance)


class PageHinkley:
    """The Page-Hinkley test for an increase in the mean of a stream.

    ``m_t = sum(x_i - ref_i - delta)`` and the test fires when ``m_t - min(m) > threshold``.
    ``ref_i`` is ``reference`` when given (a known healthy level) and the running mean
    otherwise (the textbook form). ``delta`` is the shift tolerated as noise.
    """

    def __init__(
        self, *, delta: float = 0.1, threshold: float = 5.0, reference: float | None = None
    ) -> None:
        if delta < 0 or threshold <= 0:
            msg = (
                "PageHinkley needs delta >= 0 and threshold > 0, got "
                f"delta={delta}, threshold={threshold}."
            )
            raise ValueError(msg)
        self.delta, self.threshold, self.reference = delta, threshold, reference
        self.reset()

    def reset(self) -> None:
        self.n = 0
        self.mean = 0.0
        self.cumulative = 0.0
        self.minimum = 0.0

    @property
    def statistic(self) -> float:
        return self.cumulative - self.minimum

    def update(self, x: float) -> bool:
        """Add one value; ``True`` when the test fires."""
        self.n += 1
        self.mean += (x - self.mean) / self.n
        ref = self.reference if self.reference is not None else self.mean
        self.cumulative += x - ref - self.delta
        self.minimum = min(self.minimum, self.cumulative)
        return self.statistic > self.threshold


def _edges(reference: Sequence[float], bins: int) -> list[float]:
    ordered = sorted(reference)
    cuts = {ordered[min(len(ordered) - 1, int(len(ordered) * q / bins))] for q in range(1, bins)}
    return sorted(cuts)


def psi(reference: Sequence[float], observed: Sequence[float], *, bins: int = 10) -> float:
    """Population stability index of ``observed`` against ``reference`` (quantile bins of the
    reference). Rule of thumb: < 0.1 stable, 0.1-0.25 moderate shift, > 0.25 major shift."""
    if not reference or not observed:
        msg = "psi() needs a non-empty reference and a non-empty observed sample."
        raise ValueError(msg)
    edges = _edges(reference, bins)
    slots = len(edges) + 1

    def shares(values: Sequence[float]) -> list[float]:
        counts = [0] * slots
        for value in values:
            counts[bisect.bisect_right(edges, value)] += 1
        return [max(c / len(values), 1e-4) for c in counts]

    expected, actual = shares(reference), shares(observed)
    return sum((a - e) * math.log(a / e) for a, e in zip(actual, expected, strict=True))


def _kolmogorov_q(lam: float) -> float:
    if lam < 1e-3:
        return 1.0
    total = 0.0
    for j in range(1, 101):
        term = 2.0 * (-1.0) ** (j - 1) * math.exp(-2.0 * j * j * lam * lam)
        total += term
        if abs(term) < 1e-10:
            break
    return min(1.0, max(0.0, total))


def ks_2samp(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Two-sample Kolmogorov-Smirnov test: ``(D, p_value)`` (asymptotic p-value)."""
    if not a or not b:
        msg = "ks_2samp() needs two non-empty samples."
        raise ValueError(msg)
    xs, ys = sorted(a), sorted(b)
    n, m = len(xs), len(ys)
    i = j = 0
    d = 0.0
    while i < n and j < m:
        value = min(xs[i], ys[j])
        while i < n and xs[i] <= value:
            i += 1
        while j < m and ys[j] <= value:
            j += 1
        d = max(d, abs(i / n - j / m))
    en = math.sqrt(n * m / (n + m))
    return d, _kolmogorov_q((en + 0.12 + 0.11 / en) * d)


@dataclass(slots=True)
class Baseline:
    """What healthy looked like: usually the last green offline eval (``from_report``)."""

    pass_rate: float
    n: int
    grader_pass_rates: dict[str, float] = field(default_factory=dict)
    mean_cost_usd: float | None = None
    mean_latency_ms: float | None = None
    samples: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.pass_rate <= 1.0 or self.n < 1:
            msg = (
                "Baseline needs pass_rate in [0, 1] and n >= 1 trials, got "
                f"{self.pass_rate!r}, n={self.n!r}."
            )
            raise ValueError(msg)

    @classmethod
    def from_report(cls, report: Report) -> Baseline:
        trials = report.trials
        if not trials:
            msg = "Baseline.from_report() needs a report with at least one trial."
            raise ValueError(msg)
        samples: dict[str, list[float]] = {
            "cost_usd": [t.cost_usd for t in trials],
            "latency_ms": [t.latency_ms for t in trials],
            "steps": [float(t.steps) for t in trials],
        }
        for t in trials:
            for g in t.grades:
                samples.setdefault(f"score:{g.grader}", []).append(g.score)
        return cls(
            pass_rate=report.completion_rate,
            n=len(trials),
            grader_pass_rates=report.grader_breakdown(),
            mean_cost_usd=report.mean_cost,
            mean_latency_ms=report.mean_latency,
            samples=samples,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "pass_rate": self.pass_rate,
            "n": self.n,
            "grader_pass_rates": dict(self.grader_pass_rates),
            "mean_cost_usd": self.mean_cost_usd,
            "mean_latency_ms": self.mean_latency_ms,
            "samples": {k: list(v) for k, v in self.samples.items()},
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Baseline:
        return cls(
            pass_rate=float(raw["pass_rate"]),
            n=int(raw["n"]),
            grader_pass_rates=dict(raw.get("grader_pass_rates") or {}),
            mean_cost_usd=raw.get("mean_cost_usd"),
            mean_latency_ms=raw.get("mean_latency_ms"),
            samples={k: [float(x) for x in v] for k, v in (raw.get("samples") or {}).items()},
        )


@dataclass(frozen=True, slots=True)
class DriftAlert:
    """One detected drift: which metric, which detector, the numbers and a sentence."""

    metric: str
    detector: str
    statistic: float
    threshold: float
    baseline: float | None
    observed: float | None
    at: int
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "drift_alert",
            "metric": self.metric,
            "detector": self.detector,
            "statistic": self.statistic,
            "threshold": self.threshold,
            "baseline": self.baseline,
            "observed": self.observed,
            "at": self.at,
            "message": self.message,
        }


class DriftMonitor:
    """A reporter that watches ``trial`` records and emits :class:`DriftAlert` records.

    :param baseline: what healthy looked like.
    :param reporter: where alerts go (a ``JsonlReporter``, a ``WebhookReporter``, ...).
    :param window: how many recent records the rate and distribution checks look at.
    :param min_samples: records needed before a rate check may fire (distribution checks
        wait for a full ``window``).
    :param z_threshold: fire when the window's pass rate is this many standard errors below
        the baseline's (one-sided; 3.0 is about a 0.1% chance per check on healthy traffic).
    :param ph_delta: / ``ph_threshold``: Page-Hinkley's tolerated relative shift and alarm
        level for mean cost and latency.
    :param distributions: numeric fields whose distribution is compared with the baseline's
        reference sample by PSI and KS (``()`` to switch off).
    :param psi_threshold: / ``ks_alpha``: fire at PSI above it / KS p-value below it.
    :param check_every: run the distribution checks every this many records.
    """

    def __init__(
        self,
        baseline: Baseline,
        *,
        reporter: Any = None,
        window: int = 200,
        min_samples: int = 30,
        z_threshold: float = 3.0,
        ph_delta: float = 0.1,
        ph_threshold: float = 5.0,
        distributions: Sequence[str] = ("cost_usd", "latency_ms"),
        psi_threshold: float = 0.25,
        ks_alpha: float = 0.001,
        check_every: int = 10,
    ) -> None:
        if window < min_samples or min_samples < 1:
            msg = (
                "DriftMonitor needs 1 <= min_samples <= window, got "
                f"min_samples={min_samples}, window={window}."
            )
            raise ValueError(msg)
        self.baseline = baseline
        self.reporter = reporter
        self.window, self.min_samples = window, min_samples
        self.z_threshold = z_threshold
        self.ph_delta, self.ph_threshold = ph_delta, ph_threshold
        self.psi_threshold, self.ks_alpha, self.check_every = psi_threshold, ks_alpha, check_every
        self.distributions = [d for d in distributions if len(baseline.samples.get(d, ())) >= 2]
        self.seen = 0
        self.alerts: list[DriftAlert] = []
        self._latched: set[str] = set()
        self._passes: deque[bool] = deque(maxlen=window)
        self._grader_passes: dict[str, deque[bool]] = {
            name: deque(maxlen=window) for name in baseline.grader_pass_rates
        }
        self._values: dict[str, deque[float]] = {}
        self._relative: dict[str, deque[float]] = {}
        self._ph: dict[str, PageHinkley] = {}
        for metric, mean in (
            ("cost_usd", baseline.mean_cost_usd),
            ("latency_ms", baseline.mean_latency_ms),
        ):
            if mean is not None and mean > 0:
                self._ph[metric] = PageHinkley(
                    delta=ph_delta, threshold=ph_threshold, reference=1.0
                )
                self._relative[metric] = deque(maxlen=min_samples)
        for name in self.distributions:
            self._values[name] = deque(maxlen=window)

    @property
    def latched(self) -> frozenset[str]:
        """Metrics whose alert is active (fired and not yet recovered)."""
        return frozenset(self._latched)

    async def emit(self, record: Any) -> None:
        """Consume one record (the ``Reporter`` protocol); non-trial records are ignored."""
        if not isinstance(record, Mapping):
            record = record.to_dict()
        if record.get("type", "trial") != "trial" or "passed" not in record:
            return
        for alert in self.observe(record):
            self.alerts.append(alert)
            if self.reporter is not None:
                await deliver(self.reporter, alert.to_dict())

    def _fire(self, metric: str, alert: DriftAlert | None, recovered: bool) -> list[DriftAlert]:
        if alert is not None and metric not in self._latched:
            self._latched.add(metric)
            return [alert]
        if alert is None and recovered:
            self._latched.discard(metric)
        return []

    def observe(self, record: Mapping[str, Any]) -> list[DriftAlert]:
        """Update every detector with one trial record; the new alerts (also latched)."""
        self.seen += 1
        fired: list[DriftAlert] = []
        self._passes.append(bool(record["passed"]))
        fired += self._rate("pass_rate", self.baseline.pass_rate, self._passes)
        for grade in record.get("grades") or ():
            window = self._grader_passes.get(str(grade.get("grader")))
            if window is not None:
                window.append(bool(grade.get("passed")))
                name = str(grade["grader"])
                fired += self._rate(f"grader:{name}", self.baseline.grader_pass_rates[name], window)
        for metric, detector in self._ph.items():
            value = record.get(metric)
            if value is None:
                continue
            mean = (
                self.baseline.mean_cost_usd
                if metric == "cost_usd"
                else self.baseline.mean_latency_ms
            )
            assert mean is not None  # only metrics with a positive baseline mean have a detector
            relative = float(value) / mean
            recent = self._relative[metric]
            recent.append(relative)
            hit = detector.update(relative)
            alert = None
            if hit:
                observed = statistics.fmean(recent) * mean
                alert = DriftAlert(
                    metric,
                    "page_hinkley",
                    detector.statistic,
                    self.ph_threshold,
                    mean,
                    observed,
                    self.seen,
                    f"{metric} rose: recent mean {observed:.6g} vs baseline {mean:.6g} "
                    f"(Page-Hinkley {detector.statistic:.2f} > {self.ph_threshold:g})",
                )
                detector.reset()
            recovered = (
                len(recent) == recent.maxlen and statistics.fmean(recent) <= 1.0 + self.ph_delta
            )
            fired += self._fire(metric, alert, recovered)
        for name, values in self._values.items():
            raw = (
                record.get(name)
                if not name.startswith("score:")
                else next(
                    (
                        g.get("score")
                        for g in record.get("grades") or ()
                        if f"score:{g.get('grader')}" == name
                    ),
                    None,
                )
            )
            if raw is None:
                continue
            values.append(float(raw))
            # PSI and KS are noisy on small samples (PSI's noise floor is about bins / n):
            # they wait for a full window
            if len(values) == values.maxlen and self.seen % self.check_every == 0:
                fired += self._distribution(name, values)
        return fired

    def _rate(self, metric: str, base: float, window: deque[bool]) -> list[DriftAlert]:
        if len(window) < self.min_samples:
            return []
        observed = sum(window) / len(window)
        z = two_proportion_z(base, self.baseline.n, observed, len(window))
        alert = None
        if z < -self.z_threshold:
            alert = DriftAlert(
                metric,
                "two_proportion_z",
                z,
                -self.z_threshold,
                base,
                observed,
                self.seen,
                f"{metric} dropped to {observed:.1%} over the last {len(window)} runs from "
                f"{base:.1%} (z = {z:.2f})",
            )
        return self._fire(metric, alert, z > -self.z_threshold / 2)

    def _distribution(self, name: str, values: deque[float]) -> list[DriftAlert]:
        reference = self.baseline.samples[name]
        fired: list[DriftAlert] = []
        index = psi(reference, list(values))
        alert = None
        if index > self.psi_threshold:
            alert = DriftAlert(
                f"psi:{name}",
                "psi",
                index,
                self.psi_threshold,
                statistics.fmean(reference),
                statistics.fmean(values),
                self.seen,
                f"{name} distribution shifted: PSI {index:.3f} > {self.psi_threshold:g}",
            )
        fired += self._fire(f"psi:{name}", alert, index < self.psi_threshold / 2)
        d, p = ks_2samp(reference, list(values))
        alert = None
        if p < self.ks_alpha:
            alert = DriftAlert(
                f"ks:{name}",
                "ks",
                d,
                self.ks_alpha,
                statistics.fmean(reference),
                statistics.fmean(values),
                self.seen,
                f"{name} distribution differs from the baseline: KS D={d:.3f}, p={p:.2g}",
            )
        fired += self._fire(f"ks:{name}", alert, p > self.ks_alpha * 10)
        return fired
