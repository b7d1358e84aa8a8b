"""A TensorSketch agent as an A2A agent, called by the a2a-sdk's client and by another agent.

Offline: the model is the fake one (it streams token by token), the server is uvicorn on
127.0.0.1, and tasks live in a SQLite file. The example

1. serves a support agent with ``a2a_app`` and reads its agent card,
2. streams an answer with the a2a-sdk client (the token deltas arrive as artifact chunks),
3. asks for a refund, which needs a person's approval: the task stops as ``input-required``,
   and the next message on the task ("approve") continues it,
4. gives a second agent the first one as a tool with ``a2a_tool``.

Run: python examples/serving_a2a.py
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb

from tensorsketch import FakeProvider, SqliteBackend, create_agent, tool
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.serve import AgentCard, a2a_app, a2a_tool


@tool(requires_approval=True)
def refund(order: int) -> str:
    """Refund an order (a person approves every refund)."""
    return f"order {order} refunded"


def support_model(messages: list[Message], tools: list[Any]) -> Message:
    last = messages[-1]
    if last.role == "tool":
        return assistant(f"Done: {last.text}.")
    if "refund" in last.text:
        return assistant("", tool_calls=[ToolCall(id="call_1", name="refund", args={"order": 7})])
    return assistant("Orders ship within two days.")


def orchestrator_model(messages: list[Message], tools: list[Any]) -> Message:
    last = messages[-1]
    if last.role == "user":
        ask = {"message": "When does my order ship?"}
        return assistant("", tool_calls=[ToolCall(id="ask_1", name="ask_support", args=ask)])
    return assistant(f"Support says: {last.text}")


async def main() -> None:
    folder = Path(os.environ.get("TS_EXAMPLE_TMP") or tempfile.mkdtemp())
    agent = create_agent(FakeProvider(policy=support_model), tools=[refund])
    card = AgentCard(name="support", description="Answers shipping questions and refunds orders.")
    app = a2a_app(agent, card=card, backend=SqliteBackend(str(folder / "a2a-tasks.db")))

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn offers no "started" event
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}"

    async with httpx.AsyncClient() as http:
        found = await A2ACardResolver(http, url).get_agent_card()
    versions = ", ".join(i.protocol_version for i in found.supported_interfaces)
    print(f"card: {found.name!r} speaks A2A {versions}")

    client = ClientFactory(ClientConfig(streaming=True)).create(found)
    try:
        question = pb.Message(
            message_id="q1", role=pb.ROLE_USER, parts=[pb.Part(text="When does it ship?")]
        )
        chunks = 0
        async for event in client.send_message(pb.SendMessageRequest(message=question)):
            if event.HasField("artifact_update") and not event.artifact_update.last_chunk:
                chunks += 1
            if event.HasField("status_update"):
                status = event.status_update.status
                print(f"  status: {pb.TaskState.Name(status.state)}")
        print(f"streamed the answer in {chunks} token chunks")

        ask = pb.Message(message_id="q2", role=pb.ROLE_USER, parts=[pb.Part(text="refund #7")])
        async for event in client.send_message(pb.SendMessageRequest(message=ask)):
            last = event
        waiting = last.status_update
        print(f"refund task {pb.TaskState.Name(waiting.status.state)}:")
        print(f"  {waiting.status.message.parts[0].text}")

        approve = pb.Message(
            message_id="q3",
            role=pb.ROLE_USER,
            parts=[pb.Part(text="approve")],
            task_id=waiting.task_id,
            context_id=waiting.context_id,
        )
        async for event in client.send_message(pb.SendMessageRequest(message=approve)):
            last = event
        done = last.status_update.status
        print(f"after approval: {pb.TaskState.Name(done.state)}: {done.message.parts[0].text}")
    finally:
        await client.close()

    orchestrator = create_agent(
        FakeProvider(policy=orchestrator_model), tools=[a2a_tool(url, name="ask_support")]
    )
    out = await orchestrator.invoke({"query": "Find out when my order ships."})
    print(f"orchestrator: {out.output}")

    server.should_exit = True
    await serving


if __name__ == "__main__":
    asyncio.run(main())
