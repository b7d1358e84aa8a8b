"""The HTML report: one self-contained file (inline CSS and SVG, no script or font from the
network) with the summary, pass rate per grader, per-case pass@k / pass^k, cost and latency
distributions, and every trial's transcript with the failing grader's reason.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from tensorsketch.eval._html_optimization import optimization_section
from tensorsketch.eval._report import (
    CaseResult,
    Report,
    TrialResult,
    clip,
    cost_text,
    mean_cost_text,
)

if TYPE_CHECKING:
    from tensorsketch.eval._optimizer import OptimizationResult

#: The stylesheet, inlined into every report.
CSS = (resources.files("tensorsketch.eval") / "report.css").read_text(encoding="utf-8")

__all__ = ["render_html"]

GREEN, RED, AMBER, BLUE, VIOLET = "#2f9e44", "#e03131", "#f08c00", "#1971c2", "#7048e8"
INK, MUTED, GRID = "#1f2933", "#6b7785", "#e6e9ee"


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _rate_color(rate: float) -> str:
    return GREEN if rate >= 0.999 else (AMBER if rate >= 0.5 else RED)


def _short_labels(labels: Sequence[str], width: int = 34) -> list[str]:
    """Labels cut to ``width`` in the middle, keeping the head (the grader) and the tail (its
    options: ``strict=True``, ``times=0``), and still telling distinct labels apart: when
    two cuts coincide, the cut point moves until none do (or every label is shown whole)."""

    def cut(label: str, head: int) -> str:
        return label if len(label) <= width else label[:head] + "…" + label[head + 1 - width :]

    for head in (width // 2, *range(width - 2, 0, -1)):
        shown = [cut(label, head) for label in labels]
        if len(set(shown)) == len(set(labels)):
            return shown
    return list(labels)


def _bars(rows: Sequence[tuple[str, float]], *, chart: str, width: int = 560) -> str:
    """Horizontal bars of rates in [0, 1], labelled; one row per item."""
    label_w, row_h, pad = 230, 26, 8
    bar_w = width - label_w - 60
    height = pad * 2 + row_h * max(len(rows), 1) + 18
    out = [
        f'<svg class="chart" data-chart="{chart}" viewBox="0 0 {width} {height}" '
        f'width="100%" role="img" aria-label="{_e(chart)}">'
    ]
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        x = label_w + bar_w * tick
        out.append(
            f'<line x1="{x:.1f}" y1="{pad}" x2="{x:.1f}" y2="{height - 18}" stroke="{GRID}"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{height - 4}" class="tick" text-anchor="middle">'
            f"{tick:.0%}</text>"
        )
    short = _short_labels([label for label, _ in rows])
    for i, ((label, rate), shown) in enumerate(zip(rows, short, strict=True)):
        y = pad + i * row_h
        out.append(
            f'<text x="{label_w - 8}" y="{y + 17}" class="label" text-anchor="end">'
            f"<title>{_e(label)}</title>{_e(shown)}</text>"
        )
        out.append(
            f'<rect x="{label_w}" y="{y + 4}" width="{bar_w}" height="{row_h - 10}" rx="4" '
            f'fill="{GRID}" opacity="0.6"/>'
        )
        out.append(
            f'<rect class="bar" x="{label_w}" y="{y + 4}" width="{max(bar_w * rate, 0.0):.1f}" '
            f'height="{row_h - 10}" rx="4" fill="{_rate_color(rate)}"/>'
        )
        out.append(f'<text x="{label_w + bar_w + 8}" y="{y + 17}" class="value">{rate:.0%}</text>')
    out.append("</svg>")
    return "".join(out)


def _case_bars(cases: Sequence[CaseResult], *, width: int = 560) -> str:
    """pass@k and pass^k side by side per case."""
    label_w, group_h, pad = 170, 34, 8
    bar_w = width - label_w - 60
    height = pad * 2 + group_h * max(len(cases), 1) + 34
    out = [
        f'<svg class="chart" data-chart="cases" viewBox="0 0 {width} {height}" width="100%" '
        'role="img" aria-label="pass@k and pass^k per case">'
    ]
    for tick in (0, 0.5, 1.0):
        x = label_w + bar_w * tick
        out.append(
            f'<line x1="{x:.1f}" y1="{pad}" x2="{x:.1f}" y2="{height - 34}" stroke="{GRID}"/>'
            f'<text x="{x:.1f}" y="{height - 20}" class="tick" text-anchor="middle">'
            f"{tick:.0%}</text>"
        )
    for i, case in enumerate(cases):
        y = pad + i * group_h
        shown = case.name if len(case.name) <= 24 else case.name[:23] + "…"
        out.append(
            f'<text x="{label_w - 8}" y="{y + 19}" class="label" text-anchor="end">'
            f"<title>{_e(case.name)}</title>{_e(shown)}</text>"
        )
        for j, (value, color) in enumerate(((case.pass_at_k, BLUE), (case.pass_pow_k, VIOLET))):
            by = y + 4 + j * 13
            out.append(
                f'<rect class="bar" x="{label_w}" y="{by}" width="{max(bar_w * value, 1.5):.1f}" '
                f'height="11" rx="3" fill="{color}"/>'
                f'<text x="{label_w + bar_w * value + 6:.1f}" y="{by + 10}" class="value small">'
                f"{value:.2f}</text>"
            )
    legend_y = height - 6
    out.append(
        f'<rect x="{label_w}" y="{legend_y - 9}" width="10" height="10" rx="2" fill="{BLUE}"/>'
        f'<text x="{label_w + 14}" y="{legend_y}" class="tick">pass@k</text>'
        f'<rect x="{label_w + 80}" y="{legend_y - 9}" width="10" height="10" rx="2" '
        f'fill="{VIOLET}"/>'
        f'<text x="{label_w + 94}" y="{legend_y}" class="tick">pass^k</text>'
    )
    out.append("</svg>")
    return "".join(out)


def _binning(values: Sequence[float]) -> tuple[float, float, int]:
    """``(low, high, bins)``: whole-number data get one bin per value (up to 12 bins); a
    constant sample gets a window around its value, so it draws as one bar in the middle."""
    lo, hi = min(values), max(values)
    if all(float(v).is_integer() for v in values) and hi - lo < 12:
        missing = max(0, 5 - int(hi - lo) - 1)  # at least five bins, so one value is one bar
        below = min(missing // 2, lo) if lo >= 0 else missing // 2
        lo, hi = lo - below, hi + missing - below
        return lo - 0.5, hi + 0.5, int(hi - lo) + 1
    if hi == lo:
        pad = abs(lo) * 0.5 or 0.5
        return lo - pad, hi + pad, 5
    return lo, hi, 12


def _message_chart(chart: str, title: str, detail: str, *, width: int = 360) -> str:
    """The chart's frame with a sentence in it, for a distribution there is nothing to draw of."""
    middle = f"{width / 2 + 17:.0f}"
    return (
        f'<svg class="chart" data-chart="{chart}" viewBox="0 0 {width} 180" width="100%" '
        f'role="img" aria-label="{_e(chart)}: {_e(title)}">'
        f'<rect x="34" y="14" width="{width - 46}" height="132" rx="8" fill="{GRID}" '
        'opacity="0.45"/>'
        f'<text x="{middle}" y="76" text-anchor="middle" class="label">{_e(title)}</text>'
        f'<text x="{middle}" y="96" text-anchor="middle" class="tick">{_e(detail)}</text>'
        "</svg>"
    )


def _histogram(
    values: Sequence[float], *, chart: str, unit: str, color: str, width: int = 360
) -> str:
    """A histogram (count of trials per bin) with the mean marked."""
    height, left, bottom, top = 184, 34, 34, 20
    plot_w, plot_h = width - left - 12, height - bottom - top
    head = (
        f'<svg class="chart" data-chart="{chart}" viewBox="0 0 {width} {height}" width="100%" '
        f'role="img" aria-label="{_e(chart)} distribution">'
    )
    if not values:
        return (
            head + '<text x="50%" y="50%" text-anchor="middle" class="tick">no trials</text></svg>'
        )
    lo, hi, bins = _binning(values)
    span = hi - lo
    counts = [0] * bins
    for value in values:
        counts[min(bins - 1, int((value - lo) / span * bins))] += 1
    peak = max(counts)
    out = [head]
    for frac in (0.5, 1.0):
        y = top + plot_h * (1 - frac)
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{width - 12}" y2="{y:.1f}" stroke="{GRID}"/>'
            f'<text x="{left - 4}" y="{y + 4:.1f}" class="tick" text-anchor="end">'
            f"{peak * frac:.3g}</text>"
        )
    slot = plot_w / bins
    gap = min(6.0, slot * 0.15)
    for i, count in enumerate(counts):
        if not count:
            continue
        h = plot_h * count / peak
        start = lo + span * i / bins
        out.append(
            f'<rect class="bar" x="{left + i * slot + gap / 2:.1f}" y="{top + plot_h - h:.1f}" '
            f'width="{max(slot - gap, 1):.1f}" height="{h:.1f}" rx="2" fill="{color}">'
            f"<title>{count} trial(s), {start:.4g} to {start + span / bins:.4g} {_e(unit)}"
            "</title></rect>"
        )
    mean = sum(values) / len(values)
    mx = left + plot_w * (mean - lo) / span
    anchor = "end" if mx > left + plot_w * 0.7 else "start"
    out.append(
        f'<line x1="{mx:.1f}" y1="{top - 16}" x2="{mx:.1f}" y2="{top + plot_h}" stroke="{INK}" '
        'stroke-dasharray="4 3"/>'
        f'<text x="{mx + (-4 if anchor == "end" else 4):.1f}" y="{top - 7}" class="tick" '
        f'text-anchor="{anchor}">mean {mean:.4g}</text>'
    )
    base = top + plot_h
    out.append(f'<line x1="{left}" y1="{base}" x2="{width - 12}" y2="{base}" stroke="{MUTED}"/>')
    if bins <= 12 and all(float(v).is_integer() for v in values):
        for i in range(bins):  # one label per whole-number bin
            out.append(
                f'<text x="{left + (i + 0.5) * slot:.1f}" y="{base + 15}" class="tick" '
                f'text-anchor="middle">{lo + 0.5 + i:g}</text>'
            )
    else:
        out.append(
            f'<text x="{left}" y="{base + 15}" class="tick">{lo:.4g}</text>'
            f'<text x="{width - 12}" y="{base + 15}" class="tick" text-anchor="end">{hi:.4g}</text>'
        )
    out.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{base + 30}" class="tick" text-anchor="middle">'
        f"{_e(unit)}</text></svg>"
    )
    return "".join(out)


def _card(label: str, value: str, tone: str = "") -> str:
    return (
        f'<div class="card {tone}"><div class="k">{_e(label)}</div>'
        f'<div class="v">{value}</div></div>'
    )


def _args(raw: Any) -> str:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return str(raw)
    return json.dumps(raw, ensure_ascii=False, default=str)


def _transcript(trial: TrialResult) -> str:
    rows: list[str] = []
    for message in trial.transcript:
        role = str(message.get("role") or "?")
        if role == "system":
            continue
        text = message.get("text") or ""
        calls = message.get("tool_calls") or []
        body = f'<div class="text">{_e(text)}</div>' if text else ""
        for call in calls:
            body += (
                f'<div class="call">→ <b>{_e(call.get("name"))}</b>'
                f"<code>{_e(_args(call.get('args')))}</code></div>"
            )
        if role == "tool":
            body = (
                f'<div class="result"><b>{_e(message.get("name") or "tool")}</b> ⇒ {_e(text)}</div>'
            )
        rows.append(f'<div class="msg {role}"><span class="role">{_e(role)}</span>{body}</div>')
    if not rows:
        for span in trial.spans:
            if span.get("kind") == "tool":
                attrs = span.get("attributes") or {}
                rows.append(
                    f'<div class="msg tool"><span class="role">tool</span><div class="call">'
                    f"<b>{_e(attrs.get('gen_ai.tool.name'))}</b>"
                    f"<code>{_e(attrs.get('gen_ai.tool.call.arguments'))}</code> ⇒ "
                    f"{_e(attrs.get('gen_ai.tool.call.result'))}</div></div>"
                )
        if trial.output is not None:
            rows.append(
                f'<div class="msg assistant"><span class="role">output</span>'
                f'<div class="text">{_e(trial.output)}</div></div>'
            )
    return "".join(rows) or '<div class="muted">no transcript recorded</div>'


def _trial_block(trial: TrialResult, *, open_: bool = False) -> str:
    status = "pass" if trial.passed else "fail"
    grades = "".join(
        f'<tr class="{"ok" if g.passed else "bad"}"><td>{"✓" if g.passed else "✗"}</td>'
        f"<td>{_e(g.grader)}</td><td>{g.score:.2f}</td><td>{_e(g.reason)}</td></tr>"
        for g in trial.grades
    )
    error = f'<div class="error">{_e(trial.error)}</div>' if trial.error else ""
    reason = f'<span class="why">{_e(clip(trial.reason, 140))}</span>' if not trial.passed else ""
    return (
        f'<details class="trial {status}"{" open" if open_ else ""}><summary>'
        f'<span class="pill {status}">{status}</span>'
        f"trial {trial.index} · {trial.steps} steps · {trial.latency_ms:.1f} ms · "
        f"{cost_text(trial.cost_usd, bool(trial.unpriced_models), dollar=True)} {reason}"
        f"</summary>{error}"
        f'<table class="grades"><thead><tr><th></th><th>grader</th><th>score</th><th>reason</th>'
        f"</tr></thead><tbody>{grades}</tbody></table>"
        f'<div class="transcript">{_transcript(trial)}</div></details>'
    )


def _first_failure(case: CaseResult) -> TrialResult | None:
    return next((t for t in case.trials if not t.passed), None)


def _mean_of(case: CaseResult, name: str) -> float:
    values = [float(getattr(t, name)) for t in case.trials]
    return sum(values) / len(values) if values else 0.0


def _suite_section(report: Report) -> str:
    s = report.summary()
    rate = s["completion_rate"]
    cards = "".join(
        [
            _card(
                "completion rate",
                f"{rate:.1%}",
                "good" if rate >= 0.999 else "warn" if rate >= 0.5 else "bad",
            ),
            _card("pass@k", f"{s['pass_at_k']:.3f}"),
            _card("pass^k", f"{s['pass_pow_k']:.3f}"),
            _card("mean cost", report.mean_cost_text(digits=5)),
            _card("mean latency", f"{s['mean_latency']:.1f} ms"),
            _card("cases · trials", f"{s['cases']} · {s['trials']}"),
            _card("errors", str(s["errors"]), "bad" if s["errors"] else ""),
        ]
    )
    breakdown = sorted(report.grader_breakdown().items(), key=lambda kv: (kv[1], kv[0]))
    case_rows = "".join(
        f'<tr><td>{_e(c.name)}</td><td class="num">'
        f'<span class="pill {"pass" if c.passes == c.n else "fail"}">'
        f'{c.passes}/{c.n}</span></td><td class="num">{c.k_used}</td>'
        f'<td class="num">{c.pass_at_k:.3f}</td><td class="num">{c.pass_pow_k:.3f}</td>'
        f'<td class="num">{_mean_of(c, "steps"):.1f}</td>'
        f'<td class="num">{_mean_of(c, "latency_ms"):.1f}</td>'
        f'<td class="num">{mean_cost_text(c.trials)}</td></tr>'
        for c in report.cases
    )
    trials = list(report.trials)
    failing_first = sorted(report.cases, key=lambda c: (c.pass_rate, c.name))
    blocks = "".join(
        f'<details class="case" {"open" if c.passes < c.n else ""}><summary><b>{_e(c.name)}</b>'
        f' <span class="pill {"pass" if c.passes == c.n else "fail"}">{c.passes}/{c.n}</span>'
        f' <span class="muted">pass@k {c.pass_at_k:.2f} · pass^k {c.pass_pow_k:.2f}</span>'
        "</summary>"
        + "".join(_trial_block(t, open_=t is _first_failure(c)) for t in c.trials)
        + "</details>"
        for c in failing_first
    )
    latency = _histogram([t.latency_ms for t in trials], chart="latency", unit="ms", color=BLUE)
    if trials and not any(t.cost_usd for t in trials):
        cost = _message_chart(
            "cost", "no priced model call", "the models used are not in the price table"
        )
    else:
        cost = _histogram([t.cost_usd for t in trials], chart="cost", unit="USD", color=AMBER)

    steps = _histogram(
        [float(t.steps) for t in trials], chart="steps", unit="model + tool calls", color=VIOLET
    )
    return f"""
<section class="suite">
  <h2>{_e(report.suite)}</h2>
  <div class="cards">{cards}</div>
  <div class="grid">
    <div class="panel"><h3>Pass rate per grader</h3>{_bars(breakdown, chart="graders")}</div>
    <div class="panel"><h3>pass@k and pass^k per case</h3>{_case_bars(report.cases)}</div>
  </div>
  <div class="grid three">
    <div class="panel"><h3>Latency per trial</h3>{latency}</div>
    <div class="panel"><h3>Cost per trial</h3>{cost}</div>
    <div class="panel"><h3>Steps per trial</h3>{steps}</div>
  </div>
  <div class="panel"><h3>Cases</h3><table class="cases"><thead><tr><th>case</th>
    <th class="num">passed</th><th class="num">k</th><th class="num">pass@k</th>
    <th class="num">pass^k</th><th class="num">mean steps</th><th class="num">mean ms</th>
    <th class="num">mean $</th></tr></thead><tbody>{case_rows}</tbody></table></div>
  <h3 class="section">Trials <span class="muted">(failing cases first; click to expand)</span></h3>
  {blocks}
</section>"""


def render_html(
    reports: Report | Sequence[Report],
    *,
    title: str = "TensorSketch eval report",
    optimization: OptimizationResult | None = None,
) -> str:
    """The whole report as one HTML document (nothing is fetched when it is opened).

    :param optimization: an optimizer's result: its history (every candidate's scores, the
        starting and best prompts) leads the report.
    """
    items = [reports] if isinstance(reports, Report) else list(reports)
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    trials = sum(len(r.trials) for r in items)
    sections = "".join(_suite_section(r) for r in items)
    if optimization is not None:
        sections = optimization_section(optimization) + sections
    passed = sum(t.passed for r in items for t in r.trials)
    rate = passed / trials if trials else math.nan
    meta = f"{len(items)} suite(s) · {trials} trials · {rate:.1%} passed · {stamp}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title><style>{CSS}</style></head>
<body><header><h1>{_e(title)}</h1>
<span class="meta">{meta}</span></header>
<main>{sections}
<footer>Generated by tensorsketch eval: graders ran in the harness, over each trial's trace.
</footer>
</main></body></html>
"""
