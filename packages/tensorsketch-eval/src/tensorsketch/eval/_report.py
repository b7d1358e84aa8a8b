"""What an evaluation returns: per-trial results, per-case pass@k / pass^k, the suite's
:class:`Report` with its metrics, its text table and the CI gate ``require(...)``.

Everything serializes to plain JSON (``to_dict()``), which is what reporters receive and what
``Report.from_records`` reads back (``tensorsketch eval compare`` / ``--retry-failed``).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tensorsketch.eval._metrics import pass_at_k, pass_pow_k
from tensorsketch.eval._trial import Grade, Trial
from tensorsketch.eval.exceptions import EvalError, GateFailed
from tensorsketch.observability.memory import Trace

__all__ = ["CaseResult", "Report", "TrialResult", "transcript_of"]

#: Metrics that a gate bounds from above (the rest are rates bounded from below).
CEILINGS = frozenset({"mean_cost", "mean_latency"})
#: Every metric a gate (``require(...)``, ``--require``) can bound.
GATE_METRICS = frozenset({"completion_rate", "pass_at_k", "pass_pow_k", *CEILINGS})
#: What a cost shows when a model has no price (as ``tensorsketch trace report`` shows it).
UNPRICED = "UNPRICED"


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, ending in an ellipsis when it was cut."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def cost_text(cost: float, unpriced: bool, *, digits: int = 6, dollar: bool = False) -> str:
    """A USD amount, or ``UNPRICED`` when a model had no price (``0.12+UNPRICED`` when only
    some calls were priced, so the amount is a lower bound)."""
    amount = ("$" if dollar else "") + f"{cost:.{digits}f}"
    if not unpriced:
        return amount
    return f"{amount}+{UNPRICED}" if cost else UNPRICED


def _plain_args(args: Any) -> Any:
    dump = getattr(args, "model_dump", None)
    return dump(mode="json") if callable(dump) else args


def transcript_of(trial: Trial) -> list[dict[str, Any]]:
    """The trial's conversation as plain dicts (role, text, tool name, tool calls)."""
    rows: list[dict[str, Any]] = []
    for message in trial.messages:
        if isinstance(message, Mapping):  # a state that came back from a child process
            content = message.get("content")
            text = message.get("text") or (content if isinstance(content, str) else "")
            calls = message.get("tool_calls") or []
            rows.append(
                {
                    "role": message.get("role"),
                    "text": text or "",
                    "name": message.get("name"),
                    "tool_calls": [{"name": c.get("name"), "args": c.get("args")} for c in calls],
                }
            )
            continue
        rows.append(
            {
                "role": getattr(message, "role", None),
                "text": getattr(message, "text", "") or "",
                "name": getattr(message, "name", None),
                "tool_calls": [
                    {"name": call.name, "args": _plain_args(call.args)}
                    for call in getattr(message, "tool_calls", None) or ()
                ],
            }
        )
    return rows


@dataclass(slots=True)
class TrialResult:
    """One trial, graded. ``passed`` means every grader passed (and the run did not fail)."""

    case: str | None
    index: int
    passed: bool
    grades: list[Grade]
    output: Any = None
    error: str | None = None
    cost_usd: float = 0.0
    latency_ms: float = 0.0
    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    trace_id: str | None = None
    transcript: list[dict[str, Any]] = field(default_factory=list)
    spans: list[dict[str, Any]] = field(default_factory=list)
    trial: Trial | None = field(default=None, repr=False, compare=False)
    #: models called without a price: their cost is missing from ``cost_usd``
    unpriced_models: list[str] = field(default_factory=list)
    #: what ``Case(approve=...)`` decided during the trial (``Trial.decisions``)
    decisions: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, trial: Trial, grades: list[Grade], *, keep_spans: bool = True) -> TrialResult:
        trace = trial.trace
        ids = {span.trace_id for span in trace.spans if span.trace_id}
        return cls(
            case=trial.case.name if trial.case is not None else None,
            index=trial.index,
            passed=trial.error is None and bool(grades) and all(g.passed for g in grades),
            grades=grades,
            output=trial.output
            if isinstance(trial.output, str | int | float | bool | None)
            else str(trial.output),
            error=trial.error,
            cost_usd=trace.cost_usd,
            latency_ms=trial.latency_ms,
            steps=trial.steps,
            input_tokens=trace.input_tokens,
            output_tokens=trace.output_tokens,
            trace_id=next(iter(ids)) if len(ids) == 1 else None,
            transcript=transcript_of(trial),
            spans=trace.to_dicts() if keep_spans else [],
            trial=trial,
            unpriced_models=trace.unpriced_models,
            decisions=list(trial.decisions),
        )

    @property
    def failed_grades(self) -> list[Grade]:
        return [g for g in self.grades if not g.passed]

    @property
    def reason(self) -> str:
        """Why it failed, in one line ("" when it passed)."""
        if self.error:
            return f"error: {self.error}"
        failed = self.failed_grades
        return "; ".join(f"{g.grader}: {g.reason}" for g in failed) if failed else ""

    @property
    def trace(self) -> Trace:
        return self.trial.trace if self.trial is not None else Trace.from_dicts(self.spans)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "trial",
            "case": self.case,
            "trial": self.index,
            "passed": self.passed,
            "grades": [g.to_dict() for g in self.grades],
            "output": self.output,
            "error": self.error,
            "cost_usd": self.cost_usd,
            "latency_ms": round(self.latency_ms, 3),
            "steps": self.steps,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "trace_id": self.trace_id,
            "unpriced_models": self.unpriced_models,
            "transcript": self.transcript,
            "decisions": self.decisions,
            "spans": self.spans,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TrialResult:
        spans = list(raw.get("spans") or [])
        unpriced = raw.get("unpriced_models")
        if unpriced is None:  # a record from before the field: read it off the spans
            unpriced = Trace.from_dicts(spans).unpriced_models if spans else []
        return cls(
            case=raw.get("case"),
            index=int(raw.get("trial", 0)),
            passed=bool(raw["passed"]),
            grades=[Grade.from_dict(g) for g in raw.get("grades", [])],
            output=raw.get("output"),
            error=raw.get("error"),
            cost_usd=float(raw.get("cost_usd") or 0.0),
            latency_ms=float(raw.get("latency_ms") or 0.0),
            steps=int(raw.get("steps") or 0),
            input_tokens=int(raw.get("input_tokens") or 0),
            output_tokens=int(raw.get("output_tokens") or 0),
            trace_id=raw.get("trace_id"),
            transcript=list(raw.get("transcript") or []),
            spans=spans,
            unpriced_models=[str(m) for m in unpriced],
            decisions=list(raw.get("decisions") or []),
        )


@dataclass(slots=True)
class CaseResult:
    """A case's trials and its pass@k / pass^k (k defaults to the number of trials)."""

    name: str
    trials: list[TrialResult]
    k: int | None = None

    @property
    def n(self) -> int:
        return len(self.trials)

    @property
    def passes(self) -> int:
        return sum(t.passed for t in self.trials)

    @property
    def k_used(self) -> int:
        return min(self.k or self.n, self.n) if self.n else 0

    @property
    def pass_at_k(self) -> float:
        return pass_at_k(self.n, self.passes, self.k_used) if self.n else 0.0

    @property
    def pass_pow_k(self) -> float:
        return pass_pow_k(self.n, self.passes, self.k_used) if self.n else 0.0

    @property
    def pass_rate(self) -> float:
        return self.passes / self.n if self.n else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "case",
            "case": self.name,
            "n": self.n,
            "passes": self.passes,
            "k": self.k_used,
            "pass_at_k": self.pass_at_k,
            "pass_pow_k": self.pass_pow_k,
        }


def _mean(values: Iterable[float]) -> float:
    found = list(values)
    return statistics.fmean(found) if found else 0.0


def _unpriced(trials: Iterable[TrialResult]) -> list[str]:
    return list(dict.fromkeys(m for t in trials for m in t.unpriced_models))


def mean_cost_text(trials: list[TrialResult], *, digits: int = 6, dollar: bool = False) -> str:
    """The trials' mean cost as :func:`cost_text` shows it."""
    return cost_text(
        _mean(t.cost_usd for t in trials), bool(_unpriced(trials)), digits=digits, dollar=dollar
    )


class Report:
    """The result of :func:`~tensorsketch.eval.evaluate` over a suite."""

    def __init__(
        self, suite: str, cases: list[CaseResult], *, meta: dict[str, Any] | None = None
    ) -> None:
        self.suite = suite
        self.cases = cases
        self.meta = dict(meta or {})

    # -- the numbers ------------------------------------------------------------------------

    @property
    def trials(self) -> list[TrialResult]:
        return [t for case in self.cases for t in case.trials]

    @property
    def completion_rate(self) -> float:
        """Fraction of trials that passed every grader."""
        trials = self.trials
        return sum(t.passed for t in trials) / len(trials) if trials else 0.0

    @property
    def pass_at_k(self) -> float:
        """Mean over cases of the chance that at least one of k trials passes."""
        return _mean(c.pass_at_k for c in self.cases if c.n)

    @property
    def pass_pow_k(self) -> float:
        """Mean over cases of the chance that all k trials pass (the strict one)."""
        return _mean(c.pass_pow_k for c in self.cases if c.n)

    @property
    def mean_cost(self) -> float:
        """Mean estimated cost per trial, USD (the judge's calls are not included)."""
        return _mean(t.cost_usd for t in self.trials)

    @property
    def mean_latency(self) -> float:
        """Mean wall time per trial, ms."""
        return _mean(t.latency_ms for t in self.trials)

    @property
    def unpriced_models(self) -> list[str]:
        """Models some trial called without a price: their cost is missing from
        :attr:`mean_cost`."""
        return _unpriced(self.trials)

    @property
    def errors(self) -> int:
        """Trials whose run raised or timed out (recorded as failed)."""
        return sum(t.error is not None for t in self.trials)

    def grader_breakdown(self) -> dict[str, float]:
        """Pass rate per grader across every trial it graded."""
        seen: dict[str, list[bool]] = {}
        for trial in self.trials:
            for grade in trial.grades:
                seen.setdefault(grade.grader, []).append(grade.passed)
        return {name: sum(v) / len(v) for name, v in seen.items()}

    def summary(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "cases": len(self.cases),
            "trials": len(self.trials),
            "completion_rate": self.completion_rate,
            "pass_at_k": self.pass_at_k,
            "pass_pow_k": self.pass_pow_k,
            "mean_cost": self.mean_cost,
            "mean_latency": self.mean_latency,
            "errors": self.errors,
        }

    # -- the gate ---------------------------------------------------------------------------

    def require(self, **gates: float) -> Report:
        """Raise :class:`GateFailed` unless every gate holds; returns the report otherwise.

        Rates (``completion_rate``, ``pass_at_k``, ``pass_pow_k``) are floors; ``mean_cost``
        (USD) and ``mean_latency`` (ms) are ceilings. ``require(pass_pow_k=1.0)`` gates CI
        on every case passing every trial. A ``mean_cost`` gate fails when a trial called a
        model without a price (its cost is unknown), as :class:`CostBudget` does.
        """
        unknown = sorted(set(gates) - GATE_METRICS)
        if unknown:
            msg = f"require() got unknown metrics {unknown}; choose from {sorted(GATE_METRICS)}."
            raise EvalError(msg)
        failures: dict[str, tuple[float, float]] = {}
        for metric, bound in gates.items():
            value = float(getattr(self, metric))
            ok = value <= bound if metric in CEILINGS else value >= bound - 1e-12
            if metric == "mean_cost" and self.unpriced_models:
                ok = False  # a ceiling on a cost that is partly unknown cannot be checked
            if not ok:
                failures[metric] = (value, float(bound))
        if failures:
            lines = [
                f"mean_cost cannot be checked against {b:.4g}: {self.unpriced_note()[2:]}"
                if m == "mean_cost" and self.unpriced_models
                else f"{m} = {v:.4g} {'>' if m in CEILINGS else '<'} required {b:.4g}"
                for m, (v, b) in failures.items()
            ]
            worst = [
                f"  {c.name}: {c.passes}/{c.n} passed; "
                + clip(next(t.reason for t in c.trials if not t.passed), 160)
                for c in self.cases
                if c.passes < c.n
            ][:10]
            msg = f"suite {self.suite!r} failed its gate: " + "; ".join(lines)
            if worst:
                msg += "\n" + "\n".join(worst)
            raise GateFailed(msg, failures)
        return self

    # -- output -----------------------------------------------------------------------------

    def render(self) -> str:
        """A plain-text table: one row per case, then the suite's numbers."""
        rows = [("case", "passed", "pass@k", "pass^k", "mean $", "mean ms", "first failure")]
        for case in self.cases:
            failing = next((t for t in case.trials if not t.passed), None)
            rows.append(
                (
                    case.name,
                    f"{case.passes}/{case.n}",
                    f"{case.pass_at_k:.2f}",
                    f"{case.pass_pow_k:.2f}",
                    mean_cost_text(case.trials),
                    f"{_mean(t.latency_ms for t in case.trials):.1f}",
                    (clip(failing.reason, 70) if failing else ""),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [f"suite {self.suite!r}"]
        for number, row in enumerate(rows):
            lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
            if number == 0:
                lines.append("  ".join("-" * w for w in widths))
        s = self.summary()
        lines.append("")
        lines.append(
            f"completion_rate={s['completion_rate']:.3f}  pass@k={s['pass_at_k']:.3f}  "
            f"pass^k={s['pass_pow_k']:.3f}  mean_cost={self.mean_cost_text()}  "
            f"mean_latency={s['mean_latency']:.1f}ms  errors={s['errors']}"
        )
        breakdown = self.grader_breakdown()
        if breakdown:
            lines.append("graders: " + ", ".join(f"{g} {r:.0%}" for g, r in breakdown.items()))
        if self.unpriced_models:
            lines.append(self.unpriced_note())
        return "\n".join(lines)

    def mean_cost_text(self, *, digits: int = 6) -> str:
        """:attr:`mean_cost` for people: ``$0.000123``, or ``UNPRICED`` when a model had no
        price (``$0.000123+UNPRICED`` when only some had one)."""
        return mean_cost_text(self.trials, digits=digits, dollar=True)

    def unpriced_note(self) -> str:
        """One line naming the unpriced models ("" when every model had a price)."""
        models = self.unpriced_models
        if not models:
            return ""
        return (
            f"! no price for {', '.join(models)}: their cost is not counted; "
            "add them to your price table."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "report",
            **self.summary(),
            "grader_breakdown": self.grader_breakdown(),
            "unpriced_models": self.unpriced_models,
            "case_results": [c.to_dict() for c in self.cases],
            "trial_results": [t.to_dict() for t in self.trials],
            "meta": self.meta,
        }

    def to_jsonl(self, path: str | Path) -> Path:
        """Write every trial record, then the report record, one JSON object per line."""
        target = Path(path)
        with target.open("w", encoding="utf-8") as file:
            for trial in self.trials:
                file.write(json.dumps(trial.to_dict(), default=str) + "\n")
            summary = self.to_dict()
            summary.pop("trial_results")
            file.write(json.dumps(summary, default=str) + "\n")
        return target

    @classmethod
    def from_records(
        cls, records: Iterable[Mapping[str, Any]], *, suite: str | None = None
    ) -> Report:
        """Rebuild a report from ``trial`` records (a JSONL file's lines, or ``to_dict()``)."""
        by_case: dict[str, list[TrialResult]] = {}
        ks: dict[str, int] = {}
        name = suite
        for raw in records:
            kind = raw.get("type")
            if kind == "report":
                name = name or raw.get("suite")
                for case in raw.get("case_results", []):
                    ks[str(case["case"])] = int(case.get("k") or 0)
                for trial in raw.get("trial_results", []):
                    by_case.setdefault(str(trial.get("case")), []).append(
                        TrialResult.from_dict(trial)
                    )
            elif kind == "trial":
                by_case.setdefault(str(raw.get("case")), []).append(TrialResult.from_dict(raw))
        cases = [
            CaseResult(case, sorted(trials, key=lambda t: t.index), ks.get(case) or None)
            for case, trials in by_case.items()
        ]
        return cls(name or "suite", cases)

    @classmethod
    def load(cls, path: str | Path) -> Report:
        """Read a report written by ``to_jsonl`` or a ``JsonlReporter`` log."""
        file = Path(path)
        if not file.is_file():
            msg = (
                f"no eval results at {str(file)!r}; write them with `JsonlReporter` or "
                "`tensorsketch eval --out`."
            )
            raise EvalError(msg)
        records = []
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    msg = (
                        f"{str(file)!r} line {number} is not JSON; an eval log has one "
                        "record per line."
                    )
                    raise EvalError(msg) from None
        mappings = all(isinstance(r, dict) for r in records)
        if not mappings or not {r.get("type") for r in records} & {"trial", "report"}:
            # Empty, a trace, another tool's JSONL: read as "no cases", a compare would
            # report no regression and a --retry-failed would quietly run everything.
            msg = (
                f"{str(file)!r} holds no eval results (no `trial` or `report` record"
                + (f" in its {len(records)} line(s)" if records else ": it is empty")
                + "); pass a file written by `tensorsketch eval --out` or `JsonlReporter`."
            )
            raise EvalError(msg)
        return cls.from_records(records)

    def __repr__(self) -> str:
        return (
            f"Report({self.suite!r}, cases={len(self.cases)}, trials={len(self.trials)}, "
            f"completion_rate={self.completion_rate:.3f})"
        )
