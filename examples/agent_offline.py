"""An offline agent with tools and human approval, durable on SQLite (no API key, no network).

The agent answers a support request: it looks the order up (a plain tool) and issues a refund
(a tool that needs a human's approval). The run suspends before the refund, ``invoke``
returns saying what awaits a decision, and a second ``invoke`` with the decision continues the
same thread — it could just as well be another process, hours later. The refund runs exactly
once. Run: python examples/agent_offline.py
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from tensorsketch import FakeProvider, SqliteBackend, create_agent, tool
from tensorsketch.messages import Message, ToolCall, assistant

REFUNDS: list[str] = []  # the "payment API": every real refund lands here


@tool
def lookup_order(order_id: str) -> dict[str, object]:
    """Look up an order.

    Args:
        order_id: the order number, e.g. "A-17".
    """
    return {"order": order_id, "amount": 40, "status": "delivered"}


@tool(requires_approval=True)
def issue_refund(order_id: str, amount: int) -> str:
    """Refund an order. A human approves every call.

    Args:
        order_id: the order to refund.
        amount: how many dollars to give back.
    """
    REFUNDS.append(order_id)
    return f"refund of ${amount} for {order_id} issued"


def scripted_model(messages: list[Message], tools: list[object]) -> Message:
    """A stand-in for a real model: decides from the conversation so far."""
    last = messages[-1]
    if last.role == "user":
        return assistant(
            "Let me check that order.",
            tool_calls=[ToolCall(id="call_lookup", name="lookup_order", args={"order_id": "A-17"})],
        )
    if last.name == "lookup_order":
        return assistant(
            "The order qualifies; refunding it.",
            tool_calls=[
                ToolCall(
                    id="call_refund",
                    name="issue_refund",
                    args={"order_id": "A-17", "amount": 40},
                )
            ],
        )
    return assistant(f"Done — {last.text}.")


async def main() -> None:
    workdir = Path(os.environ.get("TS_EXAMPLE_TMP") or tempfile.mkdtemp())
    backend = SqliteBackend(workdir / "agent.db")
    agent = create_agent(
        FakeProvider(policy=scripted_model),
        tools=[lookup_order, issue_refund],
        system="You are a support agent. Refunds need approval.",
    )

    out = await agent.invoke(
        {"query": "Please refund order A-17."}, thread_id="ticket-17", backend=backend
    )
    print(f"status: {out.status}")
    for pending in out.pending:
        print(
            f"awaiting approval: {pending.value['tool']}({pending.value['args']}) id={pending.id}"
        )

    # ... a human reviews the request, then the run continues where it stopped:
    out = await agent.invoke(thread_id="ticket-17", backend=backend, resume={"call_refund": True})
    print(f"status: {out.status}")
    print(f"answer: {out.output}")
    print(f"refunds issued: {len(REFUNDS)}")
    for message in out.messages:
        print(f"  {message.role:>9}: {message.text or [c.name for c in message.tool_calls]}")
    await backend.aclose()


if __name__ == "__main__":
    asyncio.run(main())
