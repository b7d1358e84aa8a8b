"""Agents the A2A tests serve: a fake model that streams, and a tool that needs approval."""

from __future__ import annotations

from typing import Any

from tensorsketch import FakeProvider, create_agent, tool
from tensorsketch.messages import Message, ToolCall, assistant

REFUNDS: list[dict[str, Any]] = []


@tool(requires_approval=True)
def refund(order: int) -> str:
    """Refund an order (a person approves each refund)."""
    REFUNDS.append({"order": order})
    return f"order {order} refunded"


def policy(messages: list[Message], tools: list[Any]) -> Message:
    """Ask for a refund when the user says so; otherwise answer about the last message."""
    last = messages[-1]
    if last.role == "tool":
        return assistant(f"Done: {last.text}.")
    if "refund" in last.text and any(t.name == "refund" for t in tools):
        return assistant("", tool_calls=[ToolCall(id="call_1", name="refund", args={"order": 7})])
    turns = sum(1 for m in messages if m.role == "user")
    return assistant(f"You said {last.text!r} (turn {turns}), and here is a longer answer.")


def make_agent() -> Any:
    return create_agent(FakeProvider(policy=policy), tools=[refund])
