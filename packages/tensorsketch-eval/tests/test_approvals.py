"""Approvals inside trials: ``Case(approve=...)`` decides what a suspended run waits for, the
trial resumes with those decisions, and the graders see the run that followed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tensorsketch.eval import (
    Case,
    Contains,
    EvalError,
    FinalState,
    InProcessSandbox,
    JsonlReporter,
    Report,
    Sandbox,
    SandboxError,
    SubprocessSandbox,
    ToolCalled,
    evaluate,
)
from tensorsketch.interrupts import PendingInterrupt

pytestmark = pytest.mark.timeout(120)

SANDBOXES = [
    pytest.param(InProcessSandbox, id="in-process"),
    pytest.param(SubprocessSandbox, id="subprocess"),
]


def refund_case(approve: Any, amount: int = 40, **options: Any) -> Case:
    return Case(
        options.pop("name", "refund"),
        {"query": "Refund order A-1"},
        env={"amount": amount, "refunds": 0},
        approve=approve,
        **options,
    )


def refunded(state: dict[str, Any], env: dict[str, Any]) -> bool:
    return bool(state["status"] == "completed" and env["refunds"] == 1)


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_an_approved_call_runs_once_and_the_trial_continues(sandbox: type[Sandbox]) -> None:
    case = refund_case(
        {"issue_refund": True},
        graders=[
            ToolCalled("issue_refund", times=1),
            FinalState(refunded),
            Contains("refunded 40"),
        ],
    )
    report = await evaluate("agents:refund_agent", case, sandbox=sandbox())
    (result,) = report.trials
    assert result.passed, result.reason
    trial = result.trial
    assert trial is not None
    assert trial.decisions == [
        {
            "id": "r1",
            "kind": "approval",
            "tool": "issue_refund",
            "args": {"order_id": "A-1", "amount": 40},
            "decision": True,
        }
    ]


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_a_rejected_call_never_runs(sandbox: type[Sandbox]) -> None:
    case = refund_case(
        {"issue_refund": {"approved": False, "reason": "over the limit"}},
        graders=[
            ToolCalled("issue_refund", times=0),
            FinalState(lambda state, env: env["refunds"] == 0, status="completed"),
            Contains("over the limit"),
        ],
    )
    report = await evaluate("agents:refund_agent", case, sandbox=sandbox())
    assert report.completion_rate == 1.0, report.trials[0].reason


async def test_a_policy_function_decides_each_call_from_what_it_asks() -> None:
    def under_100(pending: PendingInterrupt) -> bool:
        return bool(pending.value["args"]["amount"] < 100)

    small = refund_case(under_100, 40, name="small", graders=[ToolCalled("issue_refund", times=1)])
    large = refund_case(under_100, 400, name="large", graders=[ToolCalled("issue_refund", times=0)])
    report = await evaluate("agents:refund_agent", [small, large])
    assert report.completion_rate == 1.0, [t.reason for t in report.trials]
    decided = [t.trial.decisions[0]["decision"] for t in report.trials if t.trial is not None]
    assert decided == [True, False]


async def test_a_call_the_policy_does_not_decide_fails_the_trial_and_says_how_to_decide_it() -> (
    None
):
    case = refund_case({"cancel_order": True}, graders=[ToolCalled("issue_refund", times=0)])
    (result,) = (await evaluate("agents:refund_agent", case)).trials
    assert not result.passed and result.error is not None
    assert "'issue_refund'" in result.error and "approve=" in result.error
    assert "case 'refund'" in result.error


async def test_without_approve_a_trial_ends_suspended_and_is_graded_as_such() -> None:
    case = refund_case(
        None,
        graders=[FinalState(lambda state, env: env["refunds"] == 0, status="suspended")],
    )
    report = await evaluate("agents:refund_agent", case)
    assert report.completion_rate == 1.0, report.trials[0].reason
    assert report.trials[0].trial is not None and report.trials[0].trial.decisions == []


def test_a_decision_that_is_not_one_is_refused_when_the_case_is_made() -> None:
    with pytest.raises(EvalError, match=r"case 'refund'.*'issue_refund'.*True/False"):
        refund_case({"issue_refund": "maybe"})
    with pytest.raises(EvalError, match=r"approve= takes a dict"):
        refund_case(["issue_refund"])


async def test_a_policy_function_cannot_travel_to_a_child_process() -> None:
    case = refund_case(lambda pending: True, graders=[ToolCalled("issue_refund")])
    with pytest.raises(SandboxError, match=r"approve=.*dict"):
        await evaluate("agents:refund_agent", case, sandbox=SubprocessSandbox())


async def test_the_decisions_are_in_the_trial_record_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    case = refund_case({"issue_refund": "reject"}, graders=[ToolCalled("issue_refund", times=0)])
    await evaluate("agents:refund_agent", case, reporter=JsonlReporter(path))
    (stored,) = Report.load(path).trials
    assert [(d["tool"], d["decision"]) for d in stored.decisions] == [("issue_refund", "reject")]
