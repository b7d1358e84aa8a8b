"""``a2a_app`` end to end: the a2a-sdk's own client (1.0 and its 0.3 transport) against our
app served by uvicorn on 127.0.0.1, tasks kept in a SQLite file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import a2a_agents as agents  # type: ignore[import-not-found]  # conftest registers it
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError
from google.protobuf import json_format, struct_pb2

from tensorsketch import END, START, Context, Graph, Node, Schema, SqliteBackend
from tensorsketch.serve.a2a import AgentCard, AgentSkill, a2a_app

CARD = AgentCard(
    name="support-bot",
    description="Answers and refunds.",
    skills=(AgentSkill(id="refunds", name="Refunds", description="Refunds orders."),),
)


def user_message(text: str, **ids: str) -> pb.Message:
    return pb.Message(
        message_id=f"m-{text[:8]}", role=pb.ROLE_USER, parts=[pb.Part(text=text)], **ids
    )


async def client_for(url: str, *, streaming: bool, legacy: bool = False) -> Any:
    """The a2a-sdk client as a user builds it: from the card at the well-known path."""
    factory = ClientFactory(ClientConfig(streaming=streaming))
    path = "/.well-known/agent.json" if legacy else None
    return await factory.create_from_url(url, relative_card_path=path)


async def collect(stream: AsyncIterator[pb.StreamResponse]) -> list[pb.StreamResponse]:
    return [item async for item in stream]


def state(task: pb.Task) -> str:
    return pb.TaskState.Name(task.status.state)


def texts(parts: Any) -> str:
    return "".join(p.text for p in parts)


@pytest.fixture
def backend(tmp_path: Path) -> SqliteBackend:
    return SqliteBackend(str(tmp_path / "tasks.db"))


@pytest.fixture(autouse=True)
def _no_refunds() -> None:
    agents.REFUNDS.clear()


async def test_the_card_is_served_for_1_0_and_0_3_clients(live: Any, backend: Any) -> None:
    server = live(a2a_app(agents.make_agent(), card=CARD, backend=backend))
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, server.url).get_agent_card()
        legacy = (await http.get(f"{server.url}/.well-known/agent.json")).json()
    assert card.name == "support-bot" and card.description == "Answers and refunds."
    assert [(i.url, i.protocol_binding, i.protocol_version) for i in card.supported_interfaces] == [
        (f"{server.url}/", "JSONRPC", "1.0"),
        (f"{server.url}/", "JSONRPC", "0.3"),
    ]
    assert card.capabilities.streaming and card.skills[0].id == "refunds"
    assert list(card.default_input_modes) == ["text/plain", "application/json"]
    from a2a.compat.v0_3 import types as v03

    old = v03.AgentCard.model_validate(legacy)
    assert (old.url, old.protocol_version, old.preferred_transport) == (
        f"{server.url}/",
        "0.3.0",
        "JSONRPC",
    )


async def test_send_message_completes_a_task_and_get_and_list_find_it(
    live: Any, backend: Any
) -> None:
    server = live(a2a_app(agents.make_agent(), card=CARD, backend=backend))
    client = await client_for(server.url, streaming=False)
    try:
        [answer] = await collect(
            client.send_message(pb.SendMessageRequest(message=user_message("hello")))
        )
        task = answer.task
        assert state(task) == "TASK_STATE_COMPLETED"
        expected = "You said 'hello' (turn 1), and here is a longer answer."
        assert texts(task.artifacts[0].parts) == expected
        assert texts(task.status.message.parts) == expected
        assert [pb.Role.Name(m.role) for m in task.history] == ["ROLE_USER", "ROLE_AGENT"]
        got = await client.get_task(pb.GetTaskRequest(id=task.id))
        assert got.id == task.id and state(got) == "TASK_STATE_COMPLETED"
        assert texts(got.history[0].parts) == "hello"
        listed = await client.list_tasks(pb.ListTasksRequest(context_id=task.context_id))
        assert [t.id for t in listed.tasks] == [task.id] and listed.total_size == 1
        # The next message in the same context is a new task that sees the earlier turns.
        follow = user_message("again", context_id=task.context_id)
        [second] = await collect(client.send_message(pb.SendMessageRequest(message=follow)))
        assert second.task.context_id == task.context_id and second.task.id != task.id
        assert "(turn 2)" in texts(second.task.artifacts[0].parts)
        with pytest.raises(TaskNotFoundError):
            await client.get_task(pb.GetTaskRequest(id="no-such-task"))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(pb.CancelTaskRequest(id=task.id))
    finally:
        await client.close()


async def test_streaming_sends_real_token_deltas_then_the_final_state(
    live: Any, backend: Any
) -> None:
    server = live(a2a_app(agents.make_agent(), card=CARD, backend=backend))
    client = await client_for(server.url, streaming=True)
    try:
        events = await collect(
            client.send_message(pb.SendMessageRequest(message=user_message("stream me")))
        )
    finally:
        await client.close()
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task" and kinds[1] == "status_update"
    assert pb.TaskState.Name(events[1].status_update.status.state) == "TASK_STATE_WORKING"
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    deltas = [c for c in chunks if not c.last_chunk]
    expected = "You said 'stream me' (turn 1), and here is a longer answer."
    assert len(deltas) > 3, "the fake model streams token by token; each delta is forwarded"
    assert "".join(texts(c.artifact.parts) for c in deltas) == expected
    assert [c.append for c in deltas] == [False] + [True] * (len(deltas) - 1)
    assert chunks[-1].last_chunk and not chunks[-1].append
    assert texts(chunks[-1].artifact.parts) == expected
    final = events[-1].status_update
    assert pb.TaskState.Name(final.status.state) == "TASK_STATE_COMPLETED"


async def test_approval_is_input_required_and_the_next_message_continues(
    live: Any, backend: Any
) -> None:
    server = live(a2a_app(agents.make_agent(), card=CARD, backend=backend))
    client = await client_for(server.url, streaming=True)
    try:
        events = await collect(
            client.send_message(pb.SendMessageRequest(message=user_message("refund please")))
        )
        waiting = events[-1].status_update
        assert pb.TaskState.Name(waiting.status.state) == "TASK_STATE_INPUT_REQUIRED"
        asked = waiting.status.message
        assert "Approve the call to refund" in asked.parts[0].text
        assert agents.REFUNDS == []
        ids = {"task_id": waiting.task_id, "context_id": waiting.context_id}
        # An answer that is not a decision is refused, and the task still waits.
        with pytest.raises(Exception, match="approve"):
            await collect(
                client.send_message(pb.SendMessageRequest(message=user_message("maybe", **ids)))
            )
        # a decision as a data part takes only a decision's fields, and says which is wrong
        typo = json_format.ParseDict({"approved": True, "reasn": "ok"}, struct_pb2.Value())
        wrong = pb.Message(
            message_id="m-typo", role=pb.ROLE_USER, parts=[pb.Part(data=typo)], **ids
        )
        with pytest.raises(Exception, match="no field 'reasn'"):
            await collect(client.send_message(pb.SendMessageRequest(message=wrong)))
        assert agents.REFUNDS == []
        events = await collect(
            client.send_message(pb.SendMessageRequest(message=user_message("approve", **ids)))
        )
        final = events[-1].status_update
        assert pb.TaskState.Name(final.status.state) == "TASK_STATE_COMPLETED"
        assert texts(final.status.message.parts) == "Done: order 7 refunded."
        assert agents.REFUNDS == [{"order": 7}]
    finally:
        await client.close()


class Ask(Schema):
    prompt: str
    answer: str = ""


ANSWERED: list[str] = []


class Answer(Node):
    class In(Schema):
        prompt: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        ANSWERED.append(inp.prompt)
        return self.Out(answer=f"answered {inp.prompt}")


async def test_a_static_breakpoint_is_input_required_and_any_message_continues(
    live: Any, backend: Any
) -> None:
    """``interrupt_after`` on the last node pauses the task; the next message (any text) is
    not a decision: it lets the run end, and the node does not run again."""
    ANSWERED.clear()
    graph = (
        Graph(Ask, name="asker")
        .add(Answer)
        .edge(START, "Answer")
        .edge("Answer", END)
        .compile(interrupt_after=["Answer"])
    )
    app = a2a_app(
        graph,
        card=CARD,
        backend=backend,
        to_input=lambda messages: {"prompt": messages[-1].text},
        to_reply=lambda state: state.answer,
    )
    server = live(app)
    client = await client_for(server.url, streaming=True)
    try:
        events = await collect(
            client.send_message(pb.SendMessageRequest(message=user_message("why")))
        )
        paused = events[-1].status_update
        assert pb.TaskState.Name(paused.status.state) == "TASK_STATE_INPUT_REQUIRED"
        assert "breakpoint (after Answer)" in paused.status.message.parts[0].text
        ids = {"task_id": paused.task_id, "context_id": paused.context_id}
        events = await collect(
            client.send_message(pb.SendMessageRequest(message=user_message("go on", **ids)))
        )
        final = events[-1].status_update
        assert pb.TaskState.Name(final.status.state) == "TASK_STATE_COMPLETED"
        assert texts(final.status.message.parts) == "answered why"
        assert ANSWERED == ["why"]
    finally:
        await client.close()


async def test_a_task_survives_a_restart_on_the_same_sqlite_file(live: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "restart.db")
    first = live(a2a_app(agents.make_agent(), card=CARD, backend=SqliteBackend(path)))
    client = await client_for(first.url, streaming=False)
    [answer] = await collect(
        client.send_message(pb.SendMessageRequest(message=user_message("refund it")))
    )
    await client.close()
    task = answer.task
    assert state(task) == "TASK_STATE_INPUT_REQUIRED"
    first.stop()
    # A new process: a new app, agent and backend object over the same file.
    second = live(a2a_app(agents.make_agent(), card=CARD, backend=SqliteBackend(path)))
    client = await client_for(second.url, streaming=False)
    try:
        again = await client.get_task(pb.GetTaskRequest(id=task.id))
        assert state(again) == "TASK_STATE_INPUT_REQUIRED"
        assert texts(again.history[0].parts) == "refund it"
        ids = {"task_id": task.id, "context_id": task.context_id}
        [done] = await collect(
            client.send_message(pb.SendMessageRequest(message=user_message("yes", **ids)))
        )
        assert state(done.task) == "TASK_STATE_COMPLETED"
        assert texts(done.task.artifacts[0].parts) == "Done: order 7 refunded."
        assert agents.REFUNDS == [{"order": 7}]
    finally:
        await client.close()


async def test_the_0_3_surface_with_the_sdk_compat_transport(live: Any, backend: Any) -> None:
    server = live(a2a_app(agents.make_agent(), card=CARD, backend=backend))
    client = await client_for(server.url, streaming=False, legacy=True)
    try:
        assert type(client._transport).__name__ == "CompatJsonRpcTransport"
        [answer] = await collect(
            client.send_message(pb.SendMessageRequest(message=user_message("old client")))
        )
        assert state(answer.task) == "TASK_STATE_COMPLETED"
        assert "old client" in texts(answer.task.artifacts[0].parts)
        got = await client.get_task(pb.GetTaskRequest(id=answer.task.id))
        assert state(got) == "TASK_STATE_COMPLETED"
        [waiting] = await collect(
            client.send_message(pb.SendMessageRequest(message=user_message("refund")))
        )
        assert state(waiting.task) == "TASK_STATE_INPUT_REQUIRED"
        canceled = await client.cancel_task(pb.CancelTaskRequest(id=waiting.task.id))
        assert state(canceled) == "TASK_STATE_CANCELED"
    finally:
        await client.close()
    streaming = await client_for(server.url, streaming=True, legacy=True)
    try:
        events = await collect(
            streaming.send_message(pb.SendMessageRequest(message=user_message("old stream")))
        )
    finally:
        await streaming.close()
    deltas = [
        e.artifact_update
        for e in events
        if e.HasField("artifact_update") and not e.artifact_update.last_chunk
    ]
    assert len(deltas) > 3
    assert (
        "".join(texts(d.artifact.parts) for d in deltas)
        == "You said 'old stream' (turn 1), and here is a longer answer."
    )
    assert pb.TaskState.Name(events[-1].status_update.status.state) == "TASK_STATE_COMPLETED"


async def test_a2a_tool_consumes_our_own_server_and_serve_mounts_it(
    live: Any, backend: Any
) -> None:
    """Both ends are ours here: ``serve(graph, ["a2a"])`` exposes the agent and ``a2a_tool``
    calls it (the SDK-server side of ``a2a_tool`` is in test_a2a_tool.py)."""
    from tensorsketch.serve import a2a_tool, serve

    server = live(serve(agents.make_agent(), ["a2a"], card=CARD, backend=backend))
    ask = a2a_tool(server.url, name="ask_support")
    assert await ask.run({"message": "ping"}) == (
        "You said 'ping' (turn 1), and here is a longer answer."
    )
    waiting = await ask.run({"message": "refund"})
    assert "needs more input" in waiting and "Approve the call to refund" in waiting
    task_id = waiting.split("task_id=")[1].split(",")[0]
    context_id = waiting.split("context_id=")[1].split(")")[0]
    done = await ask.run({"message": "approve", "task_id": task_id, "context_id": context_id})
    assert done == "Done: order 7 refunded."


def test_without_a_card_the_graph_names_the_agent(live: Any) -> None:
    server = live(a2a_app(agents.make_agent()))
    card = httpx.get(f"{server.url}/.well-known/agent-card.json").json()
    assert card["name"] == agents.make_agent().name and card["skills"][0]["id"] == card["name"]
    with pytest.raises(TypeError, match="AgentCard"):
        a2a_app(agents.make_agent(), card={"name": "x"})  # type: ignore[arg-type]


def test_serve_all_puts_a2a_beside_the_openai_api(live: Any) -> None:
    from tensorsketch.serve import serve

    server = live(serve(agents.make_agent(), "all", model="bot", card=CARD))
    models = httpx.get(f"{server.url}/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["bot"]
    card = httpx.get(f"{server.url}/.well-known/agent-card.json").json()
    assert card["name"] == "support-bot"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "both"}]}},
    }
    task = httpx.post(server.url, json=body).json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_streamed_chunks_are_the_vendor_stream_s_own_deltas(live: Any) -> None:
    """The agent's model is the real OpenAI SDK talking to the providers' wire server: the
    artifact chunks an A2A client receives are the vendor's chunks, unchanged."""
    import vendor_plays  # type: ignore[import-not-found]  # registered by the conftest
    import wire_server  # type: ignore[import-not-found]

    from tensorsketch import create_agent

    play = vendor_plays.OpenAIPlay()
    vendor = wire_server.WireServer().start()
    server = None
    try:
        vendor.queue(play.stream_text(["Par", "is is ", "the capital."]))
        server = live(a2a_app(create_agent(play.provider(vendor.url)), card=CARD))
        client = await client_for(server.url, streaming=True)
        try:
            ask = pb.SendMessageRequest(message=user_message("Capital of France?"))
            events = await collect(client.send_message(ask))
        finally:
            await client.close()
        chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
        assert [texts(c.artifact.parts) for c in chunks if not c.last_chunk] == [
            "Par",
            "is is ",
            "the capital.",
        ]
        assert texts(chunks[-1].artifact.parts) == "Paris is the capital."
        assert play.sent(vendor.last).stream
    finally:
        vendor.stop()
        if server is not None:
            for provider in play.created:
                server.call(provider.aclose())
