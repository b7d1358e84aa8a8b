"""Serve an agent over the OpenAI-compatible API and call it with the `openai` SDK — offline.

The agent runs on the fake model (scripted replies, streamed word by word), uvicorn serves it on
127.0.0.1 at a free port, and the real `openai` client talks to it over HTTP: a plain answer, a
streamed one, and a refund that waits for a person's approval before the tool runs.

    python examples/serving.py
"""

from __future__ import annotations

import asyncio
import json
import socket

import uvicorn
from openai import AsyncOpenAI

from tensorsketch import FakeProvider, create_agent, tool
from tensorsketch.messages import ToolCall, assistant
from tensorsketch.serve import openai_app

REFUNDS: list[int] = []


@tool(requires_approval=True)
def refund(order: int) -> str:
    """Refund an order (a person approves first)."""
    REFUNDS.append(order)
    return f"refunded order {order}"


model = FakeProvider(
    [
        "Hello! I can refund orders.",
        "Refunds take three to five days to arrive.",
        assistant(tool_calls=[ToolCall(id="call_7", name="refund", args={"order": 7})]),
        "Order 7 is refunded.",
    ]
)
app = openai_app(create_agent(model, tools=[refund]), model="shop-bot")


async def talk(base_url: str) -> None:
    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0)
    models = await client.models.list()
    print("models:", [m.id for m in models.data])

    reply = await client.chat.completions.create(
        model="shop-bot", messages=[{"role": "user", "content": "hi"}]
    )
    print("answer:", reply.choices[0].message.content)

    print("stream:", end=" ")
    stream = await client.chat.completions.create(
        model="shop-bot",
        messages=[{"role": "user", "content": "How long do refunds take?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            print(repr(chunk.choices[0].delta.content), end=" ")
        if chunk.usage:
            print(f"\n  usage: {chunk.usage.total_tokens} tokens")

    conversation = {"conversation_id": "order-7"}
    history: list[dict[str, object]] = [{"role": "user", "content": "Please refund order 7."}]
    asked = await client.chat.completions.create(
        model="shop-bot", messages=history, metadata=conversation
    )
    [call] = asked.choices[0].message.tool_calls or []
    print(
        f"approval needed ({asked.choices[0].finish_reason}): {call.function.name}"
        f"({json.loads(call.function.arguments)}), refunds so far: {REFUNDS}"
    )
    history += [
        asked.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "approve"},
    ]
    done = await client.chat.completions.create(
        model="shop-bot", messages=history, metadata=conversation
    )
    print("after approval:", done.choices[0].message.content, "refunds:", REFUNDS)
    await client.close()


async def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 - uvicorn offers no event to wait on
        await asyncio.sleep(0.01)
    try:
        await talk(f"http://127.0.0.1:{port}/v1")
    finally:
        server.should_exit = True
        await serving
        sock.close()


if __name__ == "__main__":
    asyncio.run(main())
