"""Run reports from trace files: where the time and money went, and what changed between runs.

``run_report(trace)`` ranks every capability (node, tool, model, custom span) by the time spent
in it, totals tokens and cost per model, and flags models that have no price (their spend is
missing, not zero). ``diff_traces(a, b)`` pairs the spans of two runs by their position in the
tree and reports spans added and removed and the time, cost and token deltas. Both read the
JSON Lines files ``FileTracer`` writes; ``tensorsketch trace report|diff|show`` prints them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tensorsketch._arguments import count
from tensorsketch.observability.memory import Trace, cost_of, is_unpriced, model_of
from tensorsketch.observability.tracing import (
    ATTR_INPUT_TOKENS,
    ATTR_OUTPUT_TOKENS,
    ATTR_TOOL_NAME,
    Span,
)

__all__ = [
    "Capability",
    "ModelUsage",
    "RunReport",
    "SpanChange",
    "TraceDiff",
    "capability_of",
    "diff_traces",
    "run_report",
]


def _tokens(span: Span, key: str) -> int:
    value = span.attributes.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return int(value)


def capability_of(span: Span) -> str:
    """The capability a span stands for: ``node:plan``, ``tool:search``, ``model:gpt-4o``,
    ``agent:support`` or ``span:<name>`` for custom spans."""
    if span.kind == "model":
        return f"model:{model_of(span) or span.name}"
    if span.kind == "tool":
        return f"tool:{span.attributes.get(ATTR_TOOL_NAME) or span.name}"
    if span.kind in ("node", "agent", "run"):
        return f"{span.kind}:{span.name}"
    return f"span:{span.name}"


def _as_trace(source: Trace | str | Path) -> Trace:
    return source if isinstance(source, Trace) else Trace.load(source)


def _self_ms(trace: Trace, span: Span) -> float:
    children = sum(child.duration_ms for child in trace.children(span))
    return max(span.duration_ms - children, 0.0)


# -- the run report --------------------------------------------------------------------------


@dataclass(slots=True)
class Capability:
    """Time spent in one capability over the whole run."""

    key: str
    calls: int = 0
    total_ms: float = 0.0
    self_ms: float = 0.0
    errors: int = 0
    share: float = 0.0  # of the run's wall time


@dataclass(slots=True)
class ModelUsage:
    """Tokens and cost of one model; ``cost_usd`` covers only its priced calls."""

    model: str
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0

    @property
    def priced(self) -> bool:
        return self.unpriced_calls == 0


def _count(n: int, noun: str) -> str:
    """``1 tool call``, ``2 tool calls``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


@dataclass(slots=True)
class RunReport:
    """What one trace file says about a run (or several runs written to one file)."""

    summary: dict[str, Any]
    capabilities: list[Capability]
    models: list[ModelUsage]
    errors: list[dict[str, Any]] = field(default_factory=list)
    runs: int = 1
    #: Spans of a run whose own span was never written (its process stopped mid-run, so the
    #: file ends before the run does): its finished parts, under top-level spans not runs.
    unfinished: int = 0

    @property
    def unpriced_models(self) -> list[str]:
        return [m.model for m in self.models if not m.priced]

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": dict(self.summary),
            "runs": self.runs,
            "unfinished_spans": self.unfinished,
            "capabilities": [asdict(c) for c in self.capabilities],
            "models": [{**asdict(m), "priced": m.priced} for m in self.models],
            "unpriced_models": self.unpriced_models,
            "errors": list(self.errors),
        }

    def render(self, *, top: int | None = None) -> str:
        s = self.summary
        lines = [
            f"Run: {s['duration_ms']:.1f} ms, {_count(s['spans'], 'span')}, "
            f"{_count(s['model_calls'], 'model call')}, {_count(s['tool_calls'], 'tool call')}, "
            f"{_count(s['errors'], 'error')}" + (f" ({self.runs} runs)" if self.runs != 1 else ""),
            *(
                [
                    f"Incomplete: {_count(self.unfinished, 'span')} of a run that never ended "
                    "in this file (its process stopped mid-run): the times above are the "
                    "finished parts only"
                ]
                if self.unfinished
                else []
            ),
            f"Tokens: {s['input_tokens']} in / {s['output_tokens']} out; "
            f"cost ${s['cost_usd']:.6f}"
            + (" (excluding unpriced models)" if self.unpriced_models else ""),
            "",
            "Time by capability (total ms, ranked):",
        ]
        shown = self.capabilities if top is None else self.capabilities[:top]
        width = max((len(c.key) for c in shown), default=10)
        lines.append(
            f"  {'capability'.ljust(width)}  {'calls':>5}  {'total ms':>10}  {'self ms':>10}"
            f"  {'share':>6}  errors"
        )
        for c in shown:
            lines.append(
                f"  {c.key.ljust(width)}  {c.calls:>5}  {c.total_ms:>10.1f}  {c.self_ms:>10.1f}"
                f"  {c.share:>6.1%}  {c.errors}"
            )
        if top is not None and len(self.capabilities) > top:
            lines.append(f"  ... {len(self.capabilities) - top} more")
        lines += ["", "Models:"]
        if not self.models:
            lines.append("  (no model calls)")
        else:
            mwidth = max(len(m.model) for m in self.models)
            lines.append(
                f"  {'model'.ljust(mwidth)}  {'calls':>5}  {'in tok':>8}  {'out tok':>8}  "
                f"{'cost usd':>10}"
            )
            for m in self.models:
                if m.priced:
                    cost = f"{m.cost_usd:>10.6f}"
                elif m.unpriced_calls == m.calls:
                    cost = f"{'UNPRICED':>10}"
                else:
                    cost = f"{m.cost_usd:>10.6f}  UNPRICED for {m.unpriced_calls} calls"
                lines.append(
                    f"  {m.model.ljust(mwidth)}  {m.calls:>5}  {m.input_tokens:>8}  "
                    f"{m.output_tokens:>8}  {cost}"
                )
        if self.unpriced_models:
            lines.append(
                f"  ! no price for {', '.join(self.unpriced_models)}: their cost is not counted; "
                "add them to your price table."
            )
        if self.errors:
            lines += ["", "Errors:"]
            lines += [f"  {e['capability']}: {e['error']}" for e in self.errors]
        return "\n".join(lines)


def run_report(source: Trace | str | Path) -> RunReport:
    """Summarize a trace (or a trace file): capabilities by time, per-model tokens and cost."""
    trace = _as_trace(source)
    wall = trace.duration_ms or 1e-9
    capabilities: dict[str, Capability] = {}
    models: dict[str, ModelUsage] = {}
    origins = {id(span) for span in trace.error_spans}
    for _, span in trace.walk():
        if span.kind == "run":
            continue
        key = capability_of(span)
        cap = capabilities.get(key) or capabilities.setdefault(key, Capability(key))
        cap.calls += 1
        cap.total_ms += span.duration_ms
        cap.self_ms += _self_ms(trace, span)
        cap.errors += id(span) in origins
        if span.kind == "model":
            name = model_of(span) or "(unknown model)"
            usage = models.get(name) or models.setdefault(name, ModelUsage(name))
            usage.calls += 1
            usage.input_tokens += _tokens(span, ATTR_INPUT_TOKENS)
            usage.output_tokens += _tokens(span, ATTR_OUTPUT_TOKENS)
            cost = cost_of(span)
            if cost is not None:
                usage.cost_usd += cost
            elif is_unpriced(span):
                usage.unpriced_calls += 1
    for cap in capabilities.values():
        cap.share = cap.total_ms / wall
    ranked = sorted(capabilities.values(), key=lambda c: (-c.total_ms, c.key))
    errors = [
        {"capability": capability_of(span), "span_id": span.span_id, "error": span.error}
        for span in trace.error_spans
    ]
    return RunReport(
        summary=trace.summary(),
        capabilities=ranked,
        models=sorted(models.values(), key=lambda m: (-m.cost_usd, -m.calls, m.model)),
        errors=errors,
        runs=sum(1 for span in trace.roots if span.kind == "run"),
        unfinished=_unfinished(trace),
    )


def _unfinished(trace: Trace) -> int:
    """The spans under top-level spans that are not runs and whose parent is not in the file:
    a run's finished parts, written before its process stopped (the run span never was)."""
    count, inside = 0, False
    for depth, span in trace.walk():
        if depth == 0:
            inside = span.kind != "run" and span.parent_id is not None
        count += inside
    return count


# -- the diff --------------------------------------------------------------------------------


def _label(span: Span) -> str:
    # a model span is paired by its role, not its model id, so a model swap is a change
    if span.kind == "tool":
        return f"tool:{span.attributes.get(ATTR_TOOL_NAME) or span.name}"
    return f"{span.kind}:{span.name}"


def _keyed(trace: Trace) -> dict[str, Span]:
    """Each span under a stable key: its label path from the root plus an occurrence count."""
    stack: list[str] = []  # the keys of the current span's ancestors (walk is depth-first)
    counts: dict[str, int] = {}
    out: dict[str, Span] = {}
    for depth, span in trace.walk():
        del stack[depth:]
        path = (stack[-1] + "/" if stack else "") + _label(span)
        n = counts.get(path, 0)
        counts[path] = n + 1
        key = f"{path}#{n}"
        stack.append(key)
        out[key] = span
    return out


def _topmost(keys: Iterable[str]) -> list[str]:
    chosen = sorted(keys)
    picked: list[str] = []
    for key in chosen:
        if not any(key.startswith(p + "/") for p in picked):
            picked.append(key)
    return picked


@dataclass(slots=True)
class SpanChange:
    """One span present in both runs, and what differs about it."""

    key: str
    duration_ms: tuple[float, float]
    changes: dict[str, tuple[Any, Any]]


@dataclass(slots=True)
class TraceDiff:
    """What changed from run ``a`` to run ``b``."""

    totals: dict[str, tuple[Any, Any]]
    added: list[str]
    removed: list[str]
    changed: list[SpanChange]
    capabilities: list[tuple[str, float, float]]
    models: list[tuple[str, float, float, int, int]]  # model, cost a/b, out tokens a/b
    #: Models each run called without a price: their cost is missing from a/b's cost_usd.
    unpriced: tuple[list[str], list[str]] = field(default_factory=lambda: ([], []))

    def to_dict(self) -> dict[str, Any]:
        return {
            "totals": {k: {"a": a, "b": b} for k, (a, b) in self.totals.items()},
            "added": list(self.added),
            "removed": list(self.removed),
            "changed": [
                {
                    "key": c.key,
                    "duration_ms": {"a": c.duration_ms[0], "b": c.duration_ms[1]},
                    "changes": {k: {"a": a, "b": b} for k, (a, b) in c.changes.items()},
                }
                for c in self.changed
            ],
            "capabilities": [
                {"key": k, "a_ms": a, "b_ms": b, "delta_ms": b - a} for k, a, b in self.capabilities
            ],
            "models": [
                {
                    "model": m,
                    "cost_a": ca,
                    "cost_b": cb,
                    "output_tokens_a": ta,
                    "output_tokens_b": tb,
                }
                for m, ca, cb, ta, tb in self.models
            ],
            "unpriced_models": {"a": list(self.unpriced[0]), "b": list(self.unpriced[1])},
        }

    def render(self) -> str:
        lines = ["Totals (a -> b):"]
        gaps = [bool(self.unpriced[0]), bool(self.unpriced[1])]
        for name, (a, b) in self.totals.items():
            if name == "cost_usd" and any(gaps):  # a partly unknown cost has no delta
                fa, fb = (
                    _fmt(name, v) + ("+UNPRICED" if gap else "")
                    for v, gap in zip((a, b), gaps, strict=True)
                )
                lines.append(f"  {name:<14} {fa:>12} -> {fb:<12} (not comparable: unpriced models)")
                continue
            lines.append(
                f"  {name:<14} {_fmt(name, a):>12} -> {_fmt(name, b):<12} {_delta(name, a, b)}"
            )
        lines += ["", f"Spans added ({len(self.added)}):"]
        lines += [f"  + {key}" for key in self.added] or ["  (none)"]
        lines += ["", f"Spans removed ({len(self.removed)}):"]
        lines += [f"  - {key}" for key in self.removed] or ["  (none)"]
        notable = [c for c in self.changed if c.changes]
        lines += ["", f"Spans changed ({len(notable)}):"]
        for change in notable:
            what = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in change.changes.items())
            lines.append(f"  ~ {change.key}: {what}")
        if not notable:
            lines.append("  (none)")
        lines += ["", "Time by capability (ms, a -> b):"]
        for key, a, b in self.capabilities:
            lines.append(f"  {key:<32} {a:>10.1f} -> {b:<10.1f} {b - a:+.1f}")
        if self.models:
            lines += ["", "Models (cost usd, output tokens; a -> b):"]
            for model, ca, cb, ta, tb in self.models:
                cost_a = "UNPRICED" if model in self.unpriced[0] else f"${ca:.6f}"
                cost_b = "UNPRICED" if model in self.unpriced[1] else f"${cb:.6f}"
                lines.append(f"  {model:<24} {cost_a} -> {cost_b}   {ta} -> {tb} out-tok")
            for side, models in zip("ab", self.unpriced, strict=True):
                if models:
                    lines.append(f"  ! no price for {', '.join(models)} in {side}")
        return "\n".join(lines)


def _fmt(name: str, value: Any) -> str:
    if name == "cost_usd":
        return f"${value:.6f}"
    if name == "duration_ms":
        return f"{value:.1f}"
    return str(value)


def _delta(name: str, a: Any, b: Any) -> str:
    diff = b - a
    if not diff:
        return "="
    text = (
        f"{'+' if diff > 0 else '-'}${abs(diff):.6f}"
        if name == "cost_usd"
        else (f"{diff:+.1f}" if name == "duration_ms" else f"{diff:+d}")
    )
    if a:
        text += f" ({diff / a:+.0%})"
    return text


def _span_changes(a: Span, b: Span) -> dict[str, tuple[Any, Any]]:
    changes: dict[str, tuple[Any, Any]] = {}
    if a.status != b.status:
        changes["status"] = (a.status, b.status)
    if a.kind == "model":
        if model_of(a) != model_of(b):
            changes["model"] = (model_of(a), model_of(b))
        for key, label in (
            (ATTR_INPUT_TOKENS, "input_tokens"),
            (ATTR_OUTPUT_TOKENS, "output_tokens"),
        ):
            ta, tb = _tokens(a, key), _tokens(b, key)
            if ta != tb:
                changes[label] = (ta, tb)
        ca, cb = cost_of(a), cost_of(b)
        if ca != cb:
            changes["cost_usd"] = (ca, cb)
    return changes


def diff_traces(a: Trace | str | Path, b: Trace | str | Path) -> TraceDiff:
    """Compare two runs: totals, spans added/removed, per-span and per-capability deltas.

    Spans are paired by their path of ``kind:name`` labels from the root plus their
    occurrence order, so the second tool call of an agent pairs with the second tool call.
    A missing subtree is reported once, at its top.
    """
    ta, tb = _as_trace(a), _as_trace(b)
    sa, sb = ta.summary(), tb.summary()
    totals = {name: (sa[name], sb[name]) for name in sa}
    ka, kb = _keyed(ta), _keyed(tb)
    added = _topmost(k for k in kb if k not in ka)
    removed = _topmost(k for k in ka if k not in kb)
    changed = [
        SpanChange(key, (ka[key].duration_ms, kb[key].duration_ms), _span_changes(ka[key], kb[key]))
        for key in ka
        if key in kb
    ]
    ra, rb = run_report(ta), run_report(tb)
    ms_a = {c.key: c.total_ms for c in ra.capabilities}
    ms_b = {c.key: c.total_ms for c in rb.capabilities}
    capabilities = sorted(
        ((k, ms_a.get(k, 0.0), ms_b.get(k, 0.0)) for k in {*ms_a, *ms_b}),
        key=lambda row: (-abs(row[2] - row[1]), row[0]),
    )
    ma = {m.model: m for m in ra.models}
    mb = {m.model: m for m in rb.models}
    models = [
        (
            name,
            ma[name].cost_usd if name in ma else 0.0,
            mb[name].cost_usd if name in mb else 0.0,
            ma[name].output_tokens if name in ma else 0,
            mb[name].output_tokens if name in mb else 0,
        )
        for name in sorted({*ma, *mb})
    ]
    unpriced = (list(ra.unpriced_models), list(rb.unpriced_models))
    return TraceDiff(totals, added, removed, changed, capabilities, models, unpriced)


# -- the ``tensorsketch trace`` command ------------------------------------------------------


def configure_cli(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``tensorsketch trace``."""
    sub = parser.add_subparsers(dest="trace_command", metavar="ACTION", required=True)
    report = sub.add_parser("report", help="time by capability, tokens and cost per model")
    report.add_argument("file", help="a JSON Lines trace written by FileTracer")
    report.add_argument("--top", type=count, default=None, help="show only the N slowest")
    report.add_argument("--json", action="store_true", help="print machine-readable JSON")
    diff = sub.add_parser("diff", help="what changed between two runs")
    diff.add_argument("a", help="the baseline trace file")
    diff.add_argument("b", help="the trace file to compare with it")
    diff.add_argument("--json", action="store_true", help="print machine-readable JSON")
    show = sub.add_parser("show", help="the span tree and the summary")
    show.add_argument("file", help="a JSON Lines trace written by FileTracer")


def run_cli(args: argparse.Namespace) -> int:
    """Run ``tensorsketch trace <action>``; bad files exit 2 with the reason on stderr."""
    try:
        if args.trace_command == "report":
            report = run_report(args.file)
            print(
                json.dumps(report.to_dict(), indent=2) if args.json else report.render(top=args.top)
            )
        elif args.trace_command == "diff":
            diff = diff_traces(args.a, args.b)
            print(json.dumps(diff.to_dict(), indent=2) if args.json else diff.render())
        else:
            trace = Trace.load(args.file)
            print(trace.render())
            print(trace.summary())
    except (FileNotFoundError, ValueError, IsADirectoryError) as exc:
        print(f"tensorsketch trace: {exc}", file=sys.stderr)
        return 2
    return 0
