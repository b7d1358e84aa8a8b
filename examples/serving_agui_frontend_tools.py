"""AG-UI frontend tools and custom events, offline (fake model, in-process HTTP).

The frontend declares a tool it runs itself (``pick_size``: a size picker in the page). The
agent calls it, so the run suspends with a ``tool_call`` interrupt; the "frontend" answers with
``resume`` carrying the tool's result, and the agent goes on with it. The server's own tool
reports its progress with ``ctx.emit``, which the frontend receives as ``CUSTOM`` events.
Run: python examples/serving_agui_frontend_tools.py
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from ag_ui.core import Event, EventType
from pydantic import TypeAdapter

from tensorsketch import Context, FakeProvider, InMemoryBackend, create_agent, tool
from tensorsketch.messages import ToolCall, assistant
from tensorsketch.serve import agui_app


@tool
async def check_stock(size: int, ctx: Context) -> str:
    """Check whether a shoe size is in stock."""
    await ctx.emit("progress", {"checking": size})
    return f"size {size}: 3 pairs left"


PICK_SIZE = {
    "name": "pick_size",
    "description": "Ask the person to pick their shoe size in the page.",
    "parameters": {
        "type": "object",
        "properties": {"sizes": {"type": "array", "items": {"type": "integer"}}},
        "required": ["sizes"],
    },
}

model = FakeProvider(
    [
        assistant(tool_calls=[ToolCall(id="call_1", name="pick_size", args={"sizes": [41, 42]})]),
        assistant(tool_calls=[ToolCall(id="call_2", name="check_stock", args={"size": 42})]),
        "Size 42 is in stock: 3 pairs left.",
    ]
)
app = agui_app(create_agent(model, tools=[check_stock]), backend=InMemoryBackend())
EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


async def run(http: httpx.AsyncClient, body: dict[str, Any]) -> list[Any]:
    response = await http.post("/", json={"threadId": "shoes", "tools": [PICK_SIZE], **body})
    events = [
        EVENTS.validate_json(line[6:])
        for line in response.text.splitlines()
        if line[:6] == "data: "
    ]
    for event in events:
        if event.type == EventType.CUSTOM:
            print(f"  CUSTOM {event.name} {event.value}")
        elif event.type == EventType.TOOL_CALL_START:
            print(f"  TOOL_CALL_START {event.tool_call_name}")
    return events


async def main() -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://agent") as http:
        print("run 1: the user asks; the agent calls the frontend's tool")
        user = {"id": "u1", "role": "user", "content": "Do you have my size?"}
        first = await run(http, {"runId": "run-1", "messages": [user]})
        [ask] = first[-1].outcome.interrupts
        print(f"-> paused: {ask.reason} {ask.metadata['tool']}({ask.metadata['args']})")

        print("run 2: the page ran pick_size; the person chose 42")
        answer = {"interruptId": ask.id, "status": "resolved", "payload": "42"}
        second = await run(http, {"runId": "run-2", "messages": [], "resume": [answer]})
        assert second[-1].type == EventType.RUN_FINISHED
        print(f"-> {second[-1].result}")


if __name__ == "__main__":
    asyncio.run(main())
