"""``graph_tool(..., deps=...)``: every call's run reads them as ``ctx.deps``."""

from __future__ import annotations

from typing import Any

from tensorsketch import Context, FakeProvider, create_agent, tool
from tensorsketch.interop.mcp import graph_tool
from tensorsketch.messages import Message, ToolCall, assistant


class Shop:
    def __init__(self, price: int) -> None:
        self.prices = {"tea": price}


@tool
def price(ctx: Context[Shop], item: str) -> int:
    """The price of an item.

    Args:
        item: the item.
    """
    return ctx.deps.prices[item]


def _policy(messages: list[Message], tools: list[object]) -> Message:
    if messages[-1].role == "user":
        return assistant(tool_calls=[ToolCall(id="c1", name="price", args={"item": "tea"})])
    return assistant(f"tea costs {messages[-1].text}")


async def test_a_graph_tool_runs_with_its_deps() -> None:
    agent: Any = create_agent(FakeProvider(policy=_policy), [price], name="shop", deps_type=Shop)
    exposed = graph_tool(agent, inputs=["query"], outputs=["output"], deps=Shop(7))
    assert await exposed.run({"query": "tea?"}) == {"output": "tea costs 7"}
