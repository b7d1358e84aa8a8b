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
        ({"approved": True, "reason": None}, Approval(True)),
    ],
)
def test_an_approval_reads_every_decision_form(decision: object, approval: Approval) -> None:
    assert Approval.read(decision) == approval


def test_an_unreadable_decision_is_refused() -> None:
    with pytest.raises(ValueError, match="approval decision"):
        Approval.read("maybe")
    # a reason that is not text is not made into one: the decision is refused as given
    with pytest.raises(ValueError, match="'reason' must be str"):
        Approval.read({"approved": True, "reason": 3})


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


async def test_only_a_journaled_run_digests_its_tool_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run without a thread keeps no journal, so nothing can fork it or compare a call's
    arguments: it must not pay for a JSON dump and a sha256 per tool call (bench_agents)."""
    from tensorsketch import FakeProvider, InMemoryBackend, create_agent, tool
    from tensorsketch.agents import tool_calls
    from tensorsketch.messages import assistant

    digested: list[str] = []
    real = tool_calls.tool_call_digest

    def counted(name: str, args: object) -> str:
        digested.append(name)
        return real(name, args)

    monkeypatch.setattr(tool_calls, "tool_call_digest", counted)

    @tool
    async def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    def agent() -> object:
        call = ToolCall(id="c1", name="add", args={"a": 1, "b": 2})
        return create_agent(FakeProvider([assistant(tool_calls=[call]), "3"]), tools=[add])

    result = await agent().invoke({"query": "1 + 2?"})  # type: ignore[attr-defined]
    assert result.output == "3" and digested == []
    backend = InMemoryBackend()
    durable = agent()
    assert (await durable.invoke({"query": "1 + 2?"}, thread_id="t", backend=backend)).output == "3"  # type: ignore[attr-defined]
    assert digested == ["add"]
    records = [value for _, value in await backend.list_effects("t")]
    assert any(b"args_digest" in value for value in records)
