"""An agent behind AG-UI, with a human approval, offline (fake model, in-process HTTP).

A frontend such as CopilotKit POSTs an AG-UI ``RunAgentInput`` and renders the SSE events it
gets back. Here the "frontend" is httpx talking to the app in-process, and each event is
parsed with the ``ag-ui-protocol`` package's own models. The first run streams the agent's
words and its order lookup, then stops: the refund needs approval (``RUN_FINISHED`` with an
``interrupt`` outcome). The second request answers the interrupt (``resume``) on the same
thread, and the run completes. Run: python examples/serving_agui.py
(serve it for real with ``uvicorn examples.serving_agui:app``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from ag_ui.core import Event, EventType
from pydantic import TypeAdapter

from tensorsketch import FakeProvider, InMemoryBackend, create_agent, tool
from tensorsketch.messages import ToolCall, assistant
from tensorsketch.serve import agui_app


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order.

    Args:
        order_id: the order number, e.g. "A-17".
    """
    return f"order {order_id}: running shoes, $40, delivered"


@tool(requires_approval=True)
def issue_refund(order_id: str, amount: int) -> str:
    """Refund an order (a human approves every call).

    Args:
        order_id: the order to refund.
        amount: how many dollars to give back.
    """
    return f"refunded ${amount} on {order_id}"


model = FakeProvider(
    [
        assistant(
            "Let me look that order up.",
            tool_calls=[ToolCall(id="call_1", name="lookup_order", args={"order_id": "A-17"})],
        ),
        assistant(
            tool_calls=[
                ToolCall(id="call_2", name="issue_refund", args={"order_id": "A-17", "amount": 40})
            ]
        ),
        "Done: $40 is on its way back for order A-17.",
    ]
)
agent = create_agent(model, tools=[lookup_order, issue_refund], system="You help with orders.")
app = agui_app(agent, backend=InMemoryBackend())  # threadId -> a durable thread

EVENTS: TypeAdapter[Any] = TypeAdapter(Event)


async def run(http: httpx.AsyncClient, body: dict[str, Any]) -> list[Any]:
    """POST one RunAgentInput and print its events as a UI would receive them."""
    events = []
    async with http.stream("POST", "/", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = EVENTS.validate_json(line[len("data: ") :])
            events.append(event)
            if event.type == EventType.TEXT_MESSAGE_CONTENT:
                print(f"  {event.type.value:<22} {event.delta!r}")
            elif event.type in (EventType.TOOL_CALL_START, EventType.TOOL_CALL_RESULT):
                detail = getattr(event, "tool_call_name", None) or getattr(event, "content", "")
                print(f"  {event.type.value:<22} {event.tool_call_id} {detail}")
            else:
                print(f"  {event.type.value}")
    return events


async def main() -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://agent") as http:
        print("run 1: the user asks")
        first = await run(
            http,
            {
                "threadId": "order-A-17",
                "runId": "run-1",
                "messages": [{"id": "u1", "role": "user", "content": "Refund order A-17?"}],
            },
        )
        outcome = first[-1].outcome
        assert outcome.type == "interrupt"
        [waiting] = outcome.interrupts
        print(f"-> paused: {waiting.reason} for {waiting.tool_call_id}: {waiting.message}")

        print("run 2: the user approves")
        second = await run(
            http,
            {
                "threadId": "order-A-17",
                "runId": "run-2",
                "messages": [],
                "resume": [
                    {"interruptId": waiting.id, "status": "resolved", "payload": {"approved": True}}
                ],
            },
        )
        assert second[-1].type == EventType.RUN_FINISHED
        print(f"-> {second[-1].result}")


if __name__ == "__main__":
    asyncio.run(main())
