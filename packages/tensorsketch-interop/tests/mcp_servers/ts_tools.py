"""TensorSketch tools (and an agent as one tool) served over stdio with ``serve_stdio``.

``tensorsketch mcp serve ts_tools.py:tools`` serves the same list.
"""

from __future__ import annotations

import asyncio

from tensorsketch import FakeProvider, create_agent, tool
from tensorsketch.interop.mcp import graph_tool, serve_stdio


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def lookup(key: str) -> dict[str, str]:
    """Look a key up (a structured result)."""
    return {"key": key, "value": key.upper()}


@tool
def fail(reason: str) -> str:
    """Always fails, with the reason."""
    raise RuntimeError(reason)


echo_agent = create_agent(FakeProvider(lambda messages, tools: f"echo: {messages[-1].text}"))
tools = [add, lookup, fail, graph_tool(echo_agent, name="echo", description="Echo the query.")]

if __name__ == "__main__":
    asyncio.run(serve_stdio(tools, name="ts-tools"))
