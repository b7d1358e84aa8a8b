"""The named types of an agent turn's tool calls: the approval decision and the deferral."""

from __future__ import annotations

import pytest

from tensorsketch.agents.tool_calls import APPROVED, Approval, Deferral
from tensorsketch.interrupts import Interrupt
from tensorsketch.messages import ToolCall


@pytest.mark.parametrize(
    ("decision", "approval"),
    [
        (True, Approval(True)),
        (False, Approval(False)),
        (" Approve ", Approval(True)),
        ("deny", Approval(False)),
        ({"approved": False, "reason": "too much"}, Approval(False, "too much")),
        ({"approved": True, "reason": 3}, Approval(True, "3")),
    ],
)
def test_an_approval_reads_every_decision_form(decision: object, approval: Approval) -> None:
    assert Approval.read(decision) == approval


def test_an_unreadable_decision_is_refused() -> None:
    with pytest.raises(ValueError, match="approval decision"):
        Approval.read("maybe")


def test_a_call_nobody_reviews_is_approved_without_a_reason() -> None:
    assert APPROVED.approved and APPROVED.reason is None


def test_a_deferral_is_keyed_and_timed_as_released() -> None:
    call = ToolCall(id="l1", name="later", args={})
    deferral = Deferral("0:agent:agent:0:tool:0:l1", 1)
    assert deferral.key == "0:agent:agent:0:tool:0:l1:defer1"
    waiting = deferral.timer(call, "agent", 50.0)
    assert isinstance(waiting, Interrupt)
    [pending] = waiting.pending
    assert (pending.id, pending.kind, pending.node, pending.wake_at) == (
        deferral.key,
        "timer",
        "agent",
        50.0,
    )
    assert pending.value == {"tool": "later", "call_id": "l1"}
    [fresh] = deferral.timer(call, "agent", 60.0, reason=None).pending
    assert fresh.value == {"tool": "later", "call_id": "l1", "reason": None}
