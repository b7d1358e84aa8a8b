"""The HTML report's optimization section: the score of every candidate an optimizer tried,
round by round, the best-so-far line, and the starting and winning prompts side by side."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tensorsketch.eval._optimizer import OptimizationResult, OptimizationRound, Score

__all__ = ["optimization_section"]

GREEN, RED, MUTED, GRID, BLUE = "#2f9e44", "#e03131", "#6b7785", "#e6e9ee", "#1971c2"


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _history_chart(rounds: list[OptimizationRound], *, width: int = 960, height: int = 220) -> str:
    """Each candidate's training score (hollow) and held-out score (filled, green if kept),
    with the best held-out score so far as a line."""
    left, right, top, bottom = 44, 12, 10, 28
    last = max((r.index for r in rounds), default=0) or 1
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(index: int) -> float:
        return left + plot_w * index / last

    def y(rate: float) -> float:
        return top + plot_h * (1 - rate)

    out = [
        f'<svg class="chart" data-chart="optimization" viewBox="0 0 {width} {height}" '
        'width="100%" role="img" aria-label="optimization history">'
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        out.append(
            f'<line x1="{left}" y1="{y(tick):.1f}" x2="{width - right}" y2="{y(tick):.1f}" '
            f'stroke="{GRID}"/><text x="{left - 6}" y="{y(tick) + 4:.1f}" class="tick" '
            f'text-anchor="end">{tick:.0%}</text>'
        )
    for index in sorted({r.index for r in rounds}):
        out.append(
            f'<text x="{x(index):.1f}" y="{height - 8}" class="tick" '
            f'text-anchor="middle">{index}</text>'
        )
    best: list[tuple[float, float]] = []
    level = None
    for entry in rounds:
        if entry.accepted and entry.holdout is not None:
            level = entry.holdout.rate
        if level is not None:
            best.append((x(entry.index), y(level)))
    if best:
        points = " ".join(f"{px:.1f},{py:.1f}" for px, py in best)
        out.append(
            f'<polyline points="{points}" fill="none" stroke="{BLUE}" stroke-width="2" '
            'data-series="best"/>'
        )
    for entry in rounds:
        cx = x(entry.index)
        out.append(
            f'<circle cx="{cx:.1f}" cy="{y(entry.train.rate):.1f}" r="4" fill="#fff" '
            f'stroke="{MUTED}" data-series="train"><title>round {entry.index} training '
            f"{_e(entry.train)}</title></circle>"
        )
        if entry.holdout is not None:
            color = GREEN if entry.accepted else RED
            out.append(
                f'<circle cx="{cx:.1f}" cy="{y(entry.holdout.rate):.1f}" r="5" fill="{color}" '
                f'data-series="holdout"><title>round {entry.index} held-out '
                f"{_e(entry.holdout)}</title></circle>"
            )
    out.append("</svg>")
    return "".join(out)


def _score_cell(score: Score | None) -> str:
    return "-" if score is None else _e(score)


def _prompt_block(title: str, text: str) -> str:
    return f'<div class="panel"><h3>{_e(title)}</h3><pre class="prompt">{_e(text)}</pre></div>'


def optimization_section(result: OptimizationResult) -> str:
    """The optimization history as one report section."""
    rows = "".join(
        f'<tr class="{"kept" if r.accepted else "dropped"}"><td class="num">{r.index}</td>'
        f'<td><span class="pill {"pass" if r.accepted else "fail"}">'
        f"{'kept' if r.accepted else 'dropped'}</span></td>"
        f"<td>{_score_cell(r.train)}</td><td>{_score_cell(r.holdout)}</td>"
        f'<td class="num">{len(r.prompt.examples)}</td>'
        f'<td class="num">${r.cost_usd:.4f}</td><td>{_e(r.note)}</td></tr>'
        for r in result.rounds
    )
    budget = f" of ${result.budget_usd:.4f}" if result.budget_usd is not None else ""
    unpriced = (
        f" · unpriced: {_e(', '.join(result.unpriced_models))}" if result.unpriced_models else ""
    )
    return f"""
<section class="suite optimization" data-section="optimization">
  <h2>Optimization: {_e(result.optimizer)} on {_e(result.suite)}</h2>
  <p class="note">held-out {_e(result.before)} → {_e(result.after)} · training
  {_e(result.before_train)} → {_e(result.after_train)} · stopped: {_e(result.stopped)} ·
  spent ${result.spent_usd:.4f}{budget}{unpriced}</p>
  <div class="panel"><h3>Score per round <span class="muted">(hollow: training; filled:
  held-out, green when kept; line: best held-out so far)</span></h3>
  {_history_chart(result.rounds)}</div>
  <div class="panel"><h3>Rounds</h3><table class="rounds"><thead><tr>
    <th class="num">round</th><th>result</th><th>training</th><th>held-out</th>
    <th class="num">examples</th><th class="num">cost</th><th>note</th></tr></thead>
    <tbody>{rows}</tbody></table></div>
  <div class="grid">
    {_prompt_block("Starting prompt", result.initial.render())}
    {_prompt_block("Best prompt", result.best.render())}
  </div>
</section>"""
