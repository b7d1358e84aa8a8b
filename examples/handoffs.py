"""A triage agent hands a customer over to billing, which carries on the conversation (offline).

Each agent runs on a ``FakeProvider`` policy standing in for a real model. The triage agent
calls ``transfer_to_billing``; from then on the billing agent holds the conversation with its
own instructions and tools. Billing's refund tool needs a person's approval, so the run
suspends; the approval resumes it (the triage turn is replayed from the journal, not asked
again), and the customer's next message goes straight to billing. Run:
python examples/handoffs.py
"""

from __future__ import annotations

import asyncio
from typing import Any

from tensorsketch import Agent, FakeProvider, InMemoryBackend, create_agent, handoff, tool
from tensorsketch.agents import without_tools
from tensorsketch.messages import Message, ToolCall, assistant


@tool
def lookup_invoice(order: str) -> str:
    """Find an order's invoice.

    Args:
        order: the order id, e.g. "A-17".
    """
    return f"{order}: $40 charged on 2026-11-02"


@tool(requires_approval=True)
def refund(order: str) -> str:
    """Refund an order in full.

    Args:
        order: the order id.
    """
    return f"{order} refunded: $40"


def triage_model(messages: list[Message], tools: list[Any]) -> Message:
    """The triage agent's stand-in model: billing questions go to billing."""
    question = messages[-1].text.lower()
    if "refund" in question or "invoice" in question:
        return assistant(tool_calls=[ToolCall(id="t1", name="transfer_to_billing", args={})])
    return assistant("I can help with that myself.")


def billing_model(messages: list[Message], tools: list[Any]) -> Message:
    """The billing agent's stand-in model: look the order up, refund it, then answer."""
    last = messages[-1]
    if last.role == "user" and "refund" in last.text:  # it sees no triage tool traffic
        return assistant(
            tool_calls=[ToolCall(id="b1", name="lookup_invoice", args={"order": "A-17"})]
        )
    if last.role == "user":
        return assistant("Billing here: glad to help, goodbye.")
    if last.name == "lookup_invoice":
        return assistant(tool_calls=[ToolCall(id="b2", name="refund", args={"order": "A-17"})])
    return assistant(f"Done: {last.text}.")


async def main() -> None:
    billing = Agent(
        FakeProvider(policy=billing_model),
        tools=[lookup_invoice, refund],
        name="billing",
        system="You handle invoices and refunds.",
        handoffs=["triage"],  # it may hand back (by name: triage is built after it)
    )
    triage = create_agent(
        FakeProvider(policy=triage_model),
        name="triage",
        system="Hand each request to the right team.",
        handoffs=[handoff(billing, input_filter=without_tools)],
    )
    backend = InMemoryBackend()

    events = [
        e
        async for e in triage.stream(
            {"query": "please refund order A-17"}, thread_id="c1", backend=backend
        )
    ]
    for event in events:
        if event.type == "agent.handoff":
            print(f"handoff: {event.data['from']} -> {event.data['to']}")
    state = triage.get_state("c1", backend)
    assert state is not None
    waiting = state.pending[0].value
    print(f"{state.status}: {waiting['agent']} waits for approval of {waiting['tool']}")

    result = await triage.invoke(thread_id="c1", backend=backend, resume={"b2": True})
    print(f"[{result.active_agent}] {result.output}")

    follow_up = await triage.invoke({"query": "thanks, bye"}, thread_id="c1", backend=backend)
    print(f"[{follow_up.active_agent}] {follow_up.output}")
    assert (result.active_agent, follow_up.active_agent) == ("billing", "billing")
    print("transcript:", " / ".join(f"{m.role}:{m.name or ''}" for m in follow_up.messages))


if __name__ == "__main__":
    asyncio.run(main())
