"""MCP both ways, offline: serve TensorSketch tools over stdio, use them from an agent, and
expose an agent as one MCP tool (no API key, no network).

1. This file re-launches itself with ``--serve`` as an MCP server subprocess (``serve_stdio``)
   holding two tools. ``stdio_session`` connects to it over the real protocol, ``mcp_tools``
   wraps its tools, and an agent on the fake model calls one; a bad argument from the model
   comes back to it as a validation error, and the server never sees it.
2. ``graph_tool`` turns a whole agent into one MCP tool; the SDK's own ``Client`` calls it.

Run: python examples/mcp_interop.py
"""

from __future__ import annotations

import asyncio
import sys

from mcp import Client

from tensorsketch import FakeProvider, create_agent, tool
from tensorsketch.interop.mcp import (
    build_mcp_server,
    graph_tool,
    mcp_tools,
    serve_stdio,
    stdio_session,
)
from tensorsketch.messages import ToolCall, assistant


@tool
def convert(amount: float, rate: float) -> float:
    """Convert an amount of money at an exchange rate.

    Args:
        amount: how much money.
        rate: units of the target currency per unit of the source.
    """
    return round(amount * rate, 2)


@tool
def rate(source: str, target: str) -> dict[str, object]:
    """Today's exchange rate between two currencies (ISO codes)."""
    return {"pair": f"{source}/{target}", "rate": 0.92 if source == "USD" else 1.09}


async def use_served_tools() -> None:
    async with stdio_session(sys.executable, __file__, "--serve") as session:
        tools = await mcp_tools(session, prefix="fx_")
        print(f"connected to {session.name!r} over MCP {session.protocol_version}")
        print("tools:", ", ".join(t.name for t in tools))
        model = FakeProvider(
            [
                assistant(
                    tool_calls=[ToolCall(id="c1", name="fx_rate", args={"source": "USD"})]
                ),  # forgot `target`: the model reads the validation error and retries
                assistant(
                    tool_calls=[
                        ToolCall(id="c2", name="fx_rate", args={"source": "USD", "target": "EUR"})
                    ]
                ),
                assistant(
                    tool_calls=[
                        ToolCall(id="c3", name="fx_convert", args={"amount": 250, "rate": 0.92})
                    ]
                ),
                assistant("250 USD is 230.0 EUR today."),
            ]
        )
        agent = create_agent(model, tools=tools)
        result = await agent.invoke({"query": "How much is 250 USD in EUR?"})
    for message in result.messages:
        if message.role == "tool":
            flag = " (error)" if message.is_error else ""
            print(f"  {message.name}{flag}: {message.text[:90]}")
    print("agent:", result.output)


async def expose_an_agent() -> None:
    helper = create_agent(
        FakeProvider(lambda messages, tools: f"You asked: {messages[-1].text}"),
        name="helper",
    )
    server = build_mcp_server([graph_tool(helper, description="Ask the helper.")], "helpers")
    async with Client(server) as client:  # the SDK's own client, in-process
        (listed,) = (await client.list_tools()).tools
        print(f"{listed.name}: inputs {sorted(listed.input_schema['properties'])}")
        answer = await client.call_tool("helper", {"query": "what is MCP?"})
    assert answer.structured_content is not None
    print("helper via MCP:", answer.structured_content["output"])


async def main() -> None:
    await use_served_tools()
    await expose_an_agent()


if __name__ == "__main__":
    if "--serve" in sys.argv:
        asyncio.run(serve_stdio([convert, rate], name="fx"))
    else:
        asyncio.run(main())
