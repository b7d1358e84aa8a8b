"""A supervisor routing to two specialists, each an agent wrapped with ``as_tool`` (offline).

Each agent runs on a ``FakeProvider`` policy that stands in for a real model. The supervisor
sees ``billing`` and ``tech`` as tools, delegates, and relays the specialist's answer. The
trace shows one tree: the supervisor's model calls, the delegation, and the specialist's own
model and tool calls nested under it. Run: python examples/multi_agent.py
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tensorsketch import FakeProvider, InMemoryTracer, as_tool, create_agent, tool
from tensorsketch.messages import Message, ToolCall, assistant


@tool
def lookup_invoice(order: int) -> str:
    """Find the invoice of an order.

    Args:
        order: the order number.
    """
    return f"order #{order}: $40 charged on 2026-11-02, eligible for a refund"


@tool
def search_kb(topic: str) -> str:
    """Search the support knowledge base.

    Args:
        topic: what to search for.
    """
    return f"KB article for {topic!r}: unplug the router for 30 seconds"


def specialist(tool_name: str, arg: str) -> Callable[[list[Message], list[Any]], Message]:
    """A specialist's stand-in model: call its one tool, then answer from the result."""

    def policy(messages: list[Message], tools: list[Any]) -> Message:
        last = messages[-1]
        if last.role == "tool":
            return assistant(f"Based on our records: {last.text}.")
        value: object = 7 if arg == "order" else last.text
        return assistant(
            tool_calls=[ToolCall(id=f"{tool_name}-1", name=tool_name, args={arg: value})]
        )

    return policy


def supervisor_policy(messages: list[Message], tools: list[object]) -> Message:
    last = messages[-1]
    if last.role == "tool":
        return assistant(f"[{last.name}] {last.text}")
    target = "billing" if "refund" in last.text.lower() else "tech"
    return assistant(tool_calls=[ToolCall(id="route-1", name=target, args={"request": last.text})])


async def main() -> None:
    billing = create_agent(
        FakeProvider(policy=specialist("lookup_invoice", "order"), model="gpt-4o-mini"),
        tools=[lookup_invoice],
        system="You handle billing.",
        name="billing",
    )
    tech = create_agent(
        FakeProvider(policy=specialist("search_kb", "topic"), model="gpt-4o-mini"),
        tools=[search_kb],
        system="You debug technical issues.",
        name="tech",
    )
    supervisor = create_agent(
        FakeProvider(policy=supervisor_policy, model="gpt-4o"),
        tools=[
            as_tool(billing, name="billing", description="Answer billing questions."),
            as_tool(tech, name="tech", description="Debug technical problems."),
        ],
        system="Route each request to the right specialist, then relay the answer.",
        name="supervisor",
    )

    for query in ["I want a refund for order #7", "My wifi keeps dropping"]:
        tracer = InMemoryTracer()
        result = await supervisor.invoke({"query": query}, tracer=tracer)
        print(f"Q: {query}")
        print(f"A: {result.output}")
        print(tracer.trace.render())
        print(
            f"model calls: {tracer.trace.model_calls}, tool calls: {tracer.trace.tool_calls}, "
            f"tokens: {result.usage.total_tokens}, cost: ${result.cost_usd:.6f}"
        )
        print()


if __name__ == "__main__":
    asyncio.run(main())
