"""Test agents on FakeProvider: deterministic, offline, importable by name (for the
subprocess sandbox and the CLI: ``agents:capital_agent``)."""

from __future__ import annotations

import itertools
from typing import Any

from tensorsketch import Completion, Context, FakeProvider, Usage, create_agent, tool
from tensorsketch.messages import Message, ToolCall, assistant


@tool
def search(query: str) -> str:
    """Search the web.

    Args:
        query: what to look for.
    """
    return "Paris is the capital of France (source: atlas.example)."


def capital_policy(messages: list[Message], tools: list[object]) -> Message:
    """search once, then answer with the search result."""
    last = messages[-1]
    if last.role == "user":
        return assistant(tool_calls=[ToolCall(id="c1", name="search", args={"query": last.text})])
    return assistant("The capital of France is Paris, according to atlas.example.")


def capital_agent_factory() -> Any:
    return create_agent(FakeProvider(policy=capital_policy), [search])


capital_agent = capital_agent_factory()


def priced_agent() -> Any:
    """A scripted, priced model (claude-sonnet-4-6 is in the price table)."""
    return create_agent(
        FakeProvider(
            policy=lambda messages, tools: Completion(
                message=assistant("Paris."),
                usage=Usage(input_tokens=1000, output_tokens=100),
                model="claude-sonnet-4-6",
            )
        )
    )


def flaky_agent(pattern: str) -> Any:
    """Answers right ('Paris') or wrong ('Lyon') following ``pattern`` ('RRWR...')."""
    cycle = itertools.cycle(pattern)

    def policy(messages: list[Message], tools: list[object]) -> Message:
        return assistant("Paris" if next(cycle) == "R" else "Lyon")

    return create_agent(FakeProvider(policy=policy))


# -- a world the tools act on: the environment is fresh per trial --------------------------


def orders_agent(env: dict[str, Any]) -> Any:
    """A factory: its tools read and write this trial's ``env``."""

    @tool
    def cancel_order(order_id: str) -> str:
        """Cancel an order.

        Args:
            order_id: the order.
        """
        if env["orders"][order_id] == "cancelled":
            return f"{order_id} was already cancelled"
        env["orders"][order_id] = "cancelled"
        env["cancellations"] += 1
        return f"{order_id} cancelled"

    def policy(messages: list[Message], tools: list[object]) -> Message:
        if messages[-1].role == "user":
            return assistant(
                tool_calls=[ToolCall(id="c1", name="cancel_order", args={"order_id": "A-1"})]
            )
        return assistant(f"Done: {messages[-1].text}")

    return create_agent(FakeProvider(policy=policy), [cancel_order])


# -- a refund behind human approval: the case's `approve=` decides it ----------------------


def refund_agent(env: dict[str, Any]) -> Any:
    """Refunds ``env["amount"]`` on order A-1 through a tool that needs approval, then answers
    with the tool's result (or the reviewer's rejection). ``env["refunds"]`` counts refunds."""

    @tool(requires_approval=True)
    def issue_refund(order_id: str, amount: int) -> str:
        """Refund an order.

        Args:
            order_id: the order.
            amount: the amount in euros.
        """
        env["refunds"] += 1
        return f"refunded {amount} EUR on {order_id}"

    def policy(messages: list[Message], tools: list[object]) -> Message:
        if messages[-1].role == "user":
            args = {"order_id": "A-1", "amount": env["amount"]}
            return assistant(tool_calls=[ToolCall(id="r1", name="issue_refund", args=args)])
        return assistant(f"Result: {messages[-1].text}")

    return create_agent(FakeProvider(policy=policy), [issue_refund])


# -- tools that reach the world through ctx.deps: the case's env is the run's deps ----------


@tool(requires_approval=True)
def close_account(ctx: Context[dict[str, Any]], account: str) -> str:
    """Close an account.

    Args:
        account: the account id.
    """
    ctx.deps["closed"].append(account)
    return f"closed {account}"


def _close_policy(messages: list[Message], tools: list[object]) -> Message:
    if messages[-1].role == "user":
        call = ToolCall(id="k1", name="close_account", args={"account": messages[-1].text})
        return assistant(tool_calls=[call])
    return assistant(f"Result: {messages[-1].text}")


#: One module-level agent (importable by a child process); each trial's env is its deps.
deps_agent = create_agent(FakeProvider(policy=_close_policy), [close_account])
