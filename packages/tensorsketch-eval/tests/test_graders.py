"""Each code grader on real agent traces, passing and failing, with readable reasons."""

from __future__ import annotations

import re
from typing import Any

import pytest
from agents import capital_agent, orders_agent, priced_agent

from tensorsketch.eval import (
    Case,
    Contains,
    CostBudget,
    Custom,
    Equals,
    FinalState,
    Grade,
    GraderError,
    LatencyBudget,
    Regex,
    StepEfficiency,
    ToolArgs,
    ToolCalled,
    ToolSequence,
    Trial,
    evaluate,
    grader,
)

Q = {"query": "Capital of France?"}


async def grades_of(agent: Any, *graders: Any, **case: Any) -> list[Grade]:
    report = await evaluate(agent, Case("c", case.pop("inputs", Q), graders=list(graders), **case))
    return report.trials[0].grades


async def test_answer_graders() -> None:
    grades = await grades_of(
        capital_agent,
        Contains("Paris"),
        Contains("paris"),
        Contains("paris", ignore_case=True),
        Equals("The capital of France is Paris, according to atlas.example."),
        Equals("completed", field="status"),
        Regex(r"capital of \w+ is (Paris|Lyon)"),
        Regex(r"^Lyon"),
    )
    assert [g.passed for g in grades] == [True, False, True, True, True, True, False]
    assert "'paris' not in the answer" in grades[1].reason


async def test_tool_graders_read_the_trace() -> None:
    grades = await grades_of(
        capital_agent,
        ToolCalled("search"),
        ToolCalled("search", times=2),
        ToolCalled("book_flight"),
        ToolArgs("search", {"query": "Capital of France?"}),
        ToolArgs("search", lambda args: args["missing_key"] == 1),
        ToolSequence(["search"], strict=True),
        ToolSequence(["search", "search"]),
    )
    assert [g.passed for g in grades] == [True, False, False, True, False, True, False]
    assert "called 1 time(s)" in grades[1].reason and "tools used: ['search']" in grades[2].reason


def test_a_label_shows_every_argument_that_is_not_the_default() -> None:
    # `ToolCalled("issue_refund", times=0)` asserts the refund never ran: a label of
    # `ToolCalled('issue_refund')` read as the opposite
    labels = {
        ToolCalled("issue_refund"): "ToolCalled('issue_refund')",
        ToolCalled("issue_refund", times=0): "ToolCalled('issue_refund', times=0)",
        ToolCalled("search", min_times=2): "ToolCalled('search', min_times=2)",
        ToolSequence(["a", "b"]): "ToolSequence(['a', 'b'])",
        ToolSequence(["a", "b"], strict=True): "ToolSequence(['a', 'b'], strict=True)",
        Contains("x", ignore_case=True): "Contains('x', ignore_case=True)",
        Equals("x", field="f", strip=False): "Equals(f='x', strip=False)",
        Regex("x", flags=re.IGNORECASE): "Regex('x', flags=re.IGNORECASE)",
        StepEfficiency(3, slack=1.5): "StepEfficiency(3, slack=1.5)",
        CostBudget(0.01, unpriced="pass"): "CostBudget($0.01, unpriced='pass')",
        ToolArgs("search", lambda args: True): "ToolArgs('search', <lambda>)",
    }
    assert {g.name: want for g, want in labels.items()} == {want: want for want in labels.values()}


async def test_graders_that_differ_only_in_an_option_are_reported_apart() -> None:
    report = await evaluate(
        capital_agent,
        Case("c", Q, graders=[ToolCalled("search"), ToolCalled("search", times=0)]),
    )
    assert report.grader_breakdown() == {
        "ToolCalled('search')": 1.0,
        "ToolCalled('search', times=0)": 0.0,
    }


async def test_step_efficiency_scores_distance_from_optimal() -> None:
    exact, loose = await grades_of(capital_agent, StepEfficiency(3), StepEfficiency(2))
    assert exact.passed and exact.score == 1.0
    assert not loose.passed and loose.score == pytest.approx(2 / 3)
    assert "3 steps (2 model + 1 tool)" in loose.reason
    with pytest.raises(ValueError, match="optimal_steps must be >= 1"):
        StepEfficiency(0)


async def test_budgets() -> None:
    cheap, tight = await grades_of(priced_agent(), CostBudget(0.01), CostBudget(0.001))
    # 1000 input + 100 output tokens of claude-sonnet-4-6 at $3/$15 per million = $0.0045
    assert cheap.passed and not tight.passed and "$0.004500" in tight.reason
    unpriced, lenient = await grades_of(
        capital_agent, CostBudget(1.0), CostBudget(1.0, unpriced="pass")
    )
    assert not unpriced.passed and "fake-model" in unpriced.reason and lenient.passed
    fast, never = await grades_of(capital_agent, LatencyBudget(60_000), LatencyBudget(0))
    assert fast.passed and not never.passed


async def test_final_state_reads_state_and_the_fresh_env() -> None:
    def cancelled_once(state: Any, env: dict[str, Any]) -> bool:
        return env["orders"]["A-1"] == "cancelled" and env["cancellations"] == 1

    report = await evaluate(
        orders_agent,
        Case(
            "cancel",
            {"query": "cancel A-1"},
            graders=[FinalState(cancelled_once, status="completed"), Contains("A-1 cancelled")],
            env=lambda: {"orders": {"A-1": "open"}, "cancellations": 0},
            trials=3,
        ),
    )
    # every trial starts from a fresh env: never "already cancelled"
    assert report.completion_rate == 1.0
    assert [t.trial.env["cancellations"] for t in report.trials if t.trial] == [1, 1, 1]


async def test_env_value_is_deep_copied_per_trial() -> None:
    world = {"orders": {"A-1": "open"}, "cancellations": 0}
    report = await evaluate(
        orders_agent,
        Case("c", {"query": "x"}, graders=[Contains("A-1 cancelled")], env=world, trials=2),
    )
    assert report.completion_rate == 1.0 and world["orders"]["A-1"] == "open"


async def test_custom_and_decorated_graders() -> None:
    @grader
    def short(trial: Trial) -> bool:
        return len(trial.output) < 200

    @grader(name="polite", threshold=0.9)
    async def politeness(trial: Trial) -> float:
        return 0.5

    def with_reason(trial: Trial) -> tuple[bool, str]:
        return False, "no sources listed"

    grades = await grades_of(capital_agent, short, politeness, Custom(with_reason))
    assert [(g.grader, g.passed) for g in grades] == [
        ("short", True),
        ("polite", False),
        ("with_reason", False),
    ]
    assert grades[2].reason == "no sources listed"


async def test_a_grader_that_raises_fails_its_trial_and_a_bad_return_is_named() -> None:
    def broken(trial: Trial) -> bool:
        raise KeyError("oops")

    (grade,) = await grades_of(capital_agent, Custom(broken))
    assert not grade.passed and "grader raised KeyError" in grade.reason
    with pytest.raises(GraderError, match=r"grader 'odd' returned 'yes'.*return a bool"):
        await grades_of(capital_agent, Custom(lambda t: "yes", name="odd"))
