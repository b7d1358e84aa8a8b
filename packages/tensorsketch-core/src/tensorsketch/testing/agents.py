"""A crash-harness scenario for the agent loop: a deterministic model, tools with side effects.

``agent_scenario(ledger)`` builds a ``create_agent`` graph whose every real model call and
tool call is counted in the harness's :class:`~tensorsketch.testing.crash.EffectLedger`.
Running it under :func:`~tensorsketch.testing.crash.run_crash_matrix` kills the run after
each durable boundary and checks that, after resuming, each model call and each tool side
effect happened exactly once and the final state (answer, transcript, token usage) equals an
uninterrupted run's.

The model asks for two tools in its first turn (run one at a time, so no side effect is ever
in flight at a kill point), one tool in its second, and answers in its third.
"""

from __future__ import annotations

from typing import Any

from tensorsketch.agents import Agent, AgentState, create_agent, decompose
from tensorsketch.context import Context
from tensorsketch.fake import FakeProvider
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.middleware import Middleware, ModelHandler, ModelRequest
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.tools import Tool, tool

__all__ = ["AGENT_INPUT", "agent_scenario", "decomposed_agent_scenario"]

SCENARIO = "tensorsketch.testing.agents:agent_scenario"
AGENT_INPUT: dict[str, Any] = {"query": "refund order A-17"}


def _policy(messages: list[Message], tools: list[Tool]) -> Message:
    turn = sum(1 for m in messages if m.role == "assistant")
    if turn == 0:
        return assistant(
            "Looking it up.",
            tool_calls=[
                ToolCall(id="t0-lookup", name="lookup", args={"order": "A-17"}),
                ToolCall(id="t0-refund", name="refund", args={"order": "A-17", "amount": 40}),
            ],
        )
    if turn == 1:
        return assistant(tool_calls=[ToolCall(id="t1-notify", name="notify", args={"to": "ann"})])
    results = [m.text for m in messages if m.role == "tool"]
    return assistant("Done: " + "; ".join(results))


class _CountModelCalls(Middleware):
    def __init__(self, ledger: Any) -> None:
        self.ledger = ledger

    async def wrap_model(self, request: ModelRequest, call_next: ModelHandler) -> Any:
        turn = sum(1 for m in request.messages if m.role == "assistant")
        self.ledger.hit(request.ctx.thread_id or "", f"model:{turn}")
        return await call_next(request)


def agent_scenario(ledger: Any) -> CompiledGraph[AgentState]:
    """The agent graph the crash matrix kills and resumes (``ledger`` counts effects)."""

    @tool
    def lookup(ctx: Context, order: str) -> str:
        """Look up an order."""
        ledger.hit(ctx.thread_id or "", f"lookup:{order}")
        return f"{order} paid $40"

    @tool
    def refund(ctx: Context, order: str, amount: int) -> str:
        """Refund an order."""
        ledger.hit(ctx.thread_id or "", f"refund:{order}")
        return f"refunded ${amount}"

    @tool
    def notify(ctx: Context, to: str) -> str:
        """Notify someone."""
        ledger.hit(ctx.thread_id or "", f"notify:{to}")
        return f"notified {to}"

    return create_agent(
        FakeProvider(policy=_policy),
        tools=[lookup, refund, notify],
        system="You process refunds.",
        middleware=[_CountModelCalls(ledger)],
        tool_concurrency=1,
    )


def decomposed_agent_scenario(ledger: Any) -> CompiledGraph[Any]:
    """:func:`agent_scenario`'s agent with its loop drawn out (``agents.decompose``): the
    same effects, one ``model`` or ``tools`` superstep per turn."""
    app = agent_scenario(ledger)
    (spec,) = app.spec.nodes.values()
    assert isinstance(spec.node, Agent)
    return decompose(spec.node)
