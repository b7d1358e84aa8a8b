"""The report's text: unpriced costs marked, long failure reasons cut with an ellipsis, and
``retry=`` keeping the stored run's trials."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from agents import capital_agent, flaky_agent, priced_agent

from tensorsketch.eval import (
    Case,
    Contains,
    Grader,
    JsonlReporter,
    Report,
    Suite,
    ToolSequence,
    evaluate,
    render_html,
)
from tensorsketch.eval.exceptions import GateFailed


async def test_render_marks_unpriced_costs() -> None:
    report = await evaluate(capital_agent, Case("c", {"query": "?"}, graders=[Contains("Paris")]))
    assert report.unpriced_models == ["fake-model"]
    text = report.render()
    row = next(line for line in text.splitlines() if line.startswith("c "))
    assert "UNPRICED" in row and "0.000000" not in row
    assert "mean_cost=UNPRICED" in text and "no price for fake-model" in text
    page = render_html(report)
    assert "UNPRICED" in page and "$0.000000" not in page


async def test_a_priced_run_shows_its_cost() -> None:
    report = await evaluate(priced_agent(), Case("c", {}, graders=[Contains("Paris")]))
    assert report.unpriced_models == [] and report.mean_cost > 0
    assert "UNPRICED" not in report.render() and "UNPRICED" not in render_html(report)


async def test_stored_records_keep_the_unpriced_mark(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    await evaluate(
        capital_agent,
        Case("c", {"query": "?"}, graders=[Contains("Paris")]),
        reporter=JsonlReporter(path),
        keep_spans=False,
    )
    assert Report.load(path).unpriced_models == ["fake-model"]


async def test_render_cuts_a_long_first_failure_with_an_ellipsis() -> None:
    report = await evaluate(
        flaky_agent("W"), Case("c", {}, graders=[Contains("Paris " * 30)], trials=1)
    )
    reason = report.trials[0].reason
    assert len(reason) > 70
    row = next(line for line in report.render().splitlines() if line.startswith("c "))
    assert row.endswith("…") and reason[:69] in row and reason not in row


async def test_retry_keeps_the_stored_trial_count_and_k(tmp_path: Path) -> None:
    suite = Suite("s", [Case("c", {"query": "?"}, graders=[Contains("Paris")], trials=3)])
    path = tmp_path / "run.jsonl"
    first = await evaluate(flaky_agent("RRWR"), suite, trials=4, k=2, reporter=JsonlReporter(path))
    assert [t.passed for t in first.trials] == [True, True, False, True]

    second = await evaluate(capital_agent, suite, retry=Report.load(path))
    (case,) = second.cases
    assert [t.index for t in case.trials] == [0, 1, 2, 3]  # the stored 4, not the case's 3
    assert case.passes == 4 and case.k_used == 2
    assert second.meta["retried"] == 1

    fewer = await evaluate(capital_agent, suite, trials=2, retry=Report.load(path))
    assert [t.index for t in fewer.trials] == [0, 1] and fewer.meta["retried"] == 0


async def test_a_cost_gate_fails_when_a_cost_is_unknown() -> None:
    """A ceiling on mean_cost cannot hold when some call had no price: the gate fails and
    says which model, as CostBudget fails such a run; a priced run is gated on its cost."""
    unpriced = await evaluate(capital_agent, Case("c", {"query": "?"}, graders=[Contains("Paris")]))
    with pytest.raises(GateFailed, match=r"mean_cost cannot be checked.*fake-model") as failed:
        unpriced.require(mean_cost=1.0)
    assert "mean_cost" in failed.value.failures
    unpriced.require(pass_pow_k=1.0)  # the other gates are unaffected
    priced = await evaluate(priced_agent(), Case("c", {}, graders=[Contains("Paris")]))
    priced.require(mean_cost=1.0)
    with pytest.raises(GateFailed, match=r"mean_cost = .* > required 1e-09"):
        priced.require(mean_cost=1e-9)


async def test_the_html_chart_tells_graders_apart_when_it_shortens_their_labels() -> None:
    tools = ["lookup_customer", "lookup_order", "issue_refund"]
    graders: list[Grader] = [
        ToolSequence(tools),
        ToolSequence(tools, strict=True),
        Contains("Paris"),
    ]
    report = await evaluate(capital_agent, Case("c", {"query": "?"}, graders=graders))
    page = render_html(report)
    chart = page.split('data-chart="graders"', 1)[1].split("</svg>", 1)[0]
    shown = {
        html.unescape(full): html.unescape(short)
        for full, short in re.findall(r"<title>(.*?)</title>(.*?)</text>", chart)
    }
    assert set(shown) == {g.name for g in graders}
    assert len(set(shown.values())) == 3, shown  # three graders, three different labels
    assert all(len(label) <= 34 for label in shown.values())
