"""``a2a_tool`` against an agent built with the a2a-sdk's own server classes (not ours), over
uvicorn: 1.0 and the SDK's 0.3 compatibility, a remote input-required task answered by a
second call, and the call journaled so a resumed run does not ask the remote agent again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2 as pb
from starlette.applications import Starlette

from tensorsketch import FakeProvider, SqliteBackend, create_agent, run_info, tool
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.serve.a2a import A2AToolError, a2a_tool


class Specialist(AgentExecutor):
    """The remote agent: answers, or asks for a password first when told "secret"."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        self.calls.append(text)
        task = context.current_task
        if task is None:
            task = pb.Task(
                id=context.task_id or "",
                context_id=context.context_id or "",
                status=pb.TaskStatus(state=pb.TASK_STATE_SUBMITTED),
                history=[context.message] if context.message else [],
            )
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        if text == "boom":
            await updater.failed(updater.new_agent_message([pb.Part(text="it broke")]))
            return
        if "secret" in text and len(task.history) <= 1:
            await updater.requires_input(
                updater.new_agent_message([pb.Part(text="What is the password?")])
            )
            return
        await updater.add_artifact([pb.Part(text=f"specialist: {text}")], name="answer")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def sdk_app(executor: Specialist, version: str) -> tuple[Starlette, pb.AgentCard]:
    card = pb.AgentCard(
        name="specialist",
        description="An a2a-sdk agent.",
        version="1.0.0",
        supported_interfaces=[
            pb.AgentInterface(
                url="http://placeholder/", protocol_binding="JSONRPC", protocol_version=version
            )
        ],
        capabilities=pb.AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[pb.AgentSkill(id="answer", name="Answer", description="Answers.", tags=["qa"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=version == "0.3"),
    ]
    return Starlette(routes=routes), card


def serve_sdk(live: Any, version: str) -> tuple[Any, Specialist]:
    executor = Specialist()
    app, card = sdk_app(executor, version)
    server = live(app)
    card.supported_interfaces[0].url = f"{server.url}/"  # the card routes serve this object
    return server, executor


@pytest.mark.parametrize("version", ["1.0", "0.3"])
async def test_the_tool_asks_an_sdk_server(live: Any, version: str) -> None:
    server, executor = serve_sdk(live, version)
    delegate = a2a_tool(server.url, name="ask_specialist")
    assert delegate.name == "ask_specialist"
    assert delegate.json_schema()["required"] == ["message"]
    assert await delegate.run({"message": "what is 2+2?"}) == "specialist: what is 2+2?"
    assert executor.calls == ["what is 2+2?"]
    with pytest.raises(A2AToolError, match="it broke"):
        await delegate.run({"message": "boom"})


async def test_a_remote_input_required_task_is_answered_by_a_second_call(live: Any) -> None:
    server, executor = serve_sdk(live, "1.0")
    delegate = a2a_tool(server.url, name="ask_specialist")
    asked = await delegate.run({"message": "the secret plan"})
    assert "needs more input" in asked and "What is the password?" in asked
    task_id = asked.split("task_id=")[1].split(",")[0]
    context_id = asked.split("context_id=")[1].split(")")[0]
    answer = await delegate.run(
        {"message": "swordfish", "task_id": task_id, "context_id": context_id}
    )
    assert answer == "specialist: swordfish"
    assert executor.calls == ["the secret plan", "swordfish"]


async def test_unreachable_agents_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="http"):
        a2a_tool("ftp://nowhere")
    delegate = a2a_tool("http://127.0.0.1:9", name="nobody", timeout=5)
    with pytest.raises(A2AToolError, match="agent card"):
        await delegate.run({"message": "hi"})


@tool(requires_approval=True)
def publish(text: str) -> str:
    """Publish a text (a person approves)."""
    return f"published {text}"


def delegating(messages: list[Message], tools: list[Any]) -> Message:
    last = messages[-1]
    if last.role == "user":
        return assistant(
            "", tool_calls=[ToolCall(id="ask", name="ask_specialist", args={"message": last.text})]
        )
    if last.role == "tool" and last.name == "ask_specialist":
        return assistant(
            "", tool_calls=[ToolCall(id="pub", name="publish", args={"text": last.text})]
        )
    return assistant(f"final: {last.text}")


async def test_inside_an_agent_the_call_is_journaled_and_not_repeated_on_resume(
    live: Any, tmp_path: Path
) -> None:
    server, executor = serve_sdk(live, "1.0")
    agent = create_agent(
        FakeProvider(policy=delegating),
        tools=[a2a_tool(server.url, name="ask_specialist"), publish],
    )
    backend = SqliteBackend(str(tmp_path / "journal.db"))
    out = await agent.invoke({"query": "summarize"}, thread_id="t1", backend=backend)
    assert run_info(out).awaiting == ["pub"]
    assert executor.calls == ["summarize"]
    # Another process resumes: the remote answer comes from the journal, not a second call.
    again = create_agent(
        FakeProvider(policy=delegating),
        tools=[a2a_tool(server.url, name="ask_specialist"), publish],
    )
    done = await again.invoke(
        thread_id="t1", backend=SqliteBackend(str(tmp_path / "journal.db")), resume={"pub": True}
    )
    assert done.output == "final: published specialist: summarize"
    assert executor.calls == ["summarize"]
    assert json.loads(json.dumps(done.status)) == "completed"
