"""What a task hands back besides its text, read with the a2a-sdk client from our app on
uvicorn: an agent's structured output, images and files, a graph's files and data as
artifacts, image and document files a client sends reaching the model, and a direct
``Message`` reply."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import MessageToDict
from pydantic import BaseModel

from tensorsketch import END, START, Context, FakeProvider, Graph, Node, Schema, create_agent
from tensorsketch.messages import FileBlock, ImageBlock, Message, TextBlock, assistant
from tensorsketch.serve.a2a import AgentCard, a2a_app

CARD = AgentCard(name="maker", description="Makes things.")
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(32))


class Verdict(BaseModel):
    label: str
    score: float


def judge(messages: list[Message], tools: list[Any]) -> Message:
    return assistant('{"label": "spam", "score": 0.9}')


def painter(messages: list[Message], tools: list[Any]) -> Message:
    seen = len(messages[-1].images)
    chart = ImageBlock(url="https://charts.example/c.png", media_type="image/png")
    return Message(role="assistant", content=[TextBlock(text=f"I saw {seen} image(s)."), chart])


class State(Schema):
    prompt: str = ""
    report: str = ""
    chart: bytes = b""
    rows: list[dict[str, Any]] = []


class Report(Node):
    class In(Schema):
        prompt: str

    class Out(Schema):
        report: str
        chart: bytes
        rows: list[dict[str, Any]]

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(report=f"# {inp.prompt}", chart=PNG, rows=[{"a": 1}, {"a": 2}])


REPORTING = Graph(State).add(Report).edge(START, "Report").edge("Report", END).compile()


async def sdk(url: str, *, streaming: bool = False) -> Any:
    return await ClientFactory(ClientConfig(streaming=streaming)).create_from_url(url)


def user(*parts: pb.Part, **ids: str) -> pb.Message:
    return pb.Message(message_id="m1", role=pb.ROLE_USER, parts=list(parts), **ids)


async def only(stream: Any) -> Any:
    items = [item async for item in stream]
    return items[-1]


def artifact(task: pb.Task, name: str) -> pb.Artifact:
    [found] = [a for a in task.artifacts if a.name == name]
    return found


async def test_an_agent_s_structured_output_is_a_data_artifact_and_in_its_message(
    live: Any,
) -> None:
    agent = create_agent(FakeProvider(policy=judge), output_schema=Verdict)
    server = live(a2a_app(agent, card=CARD))
    client = await sdk(server.url)
    try:
        answer = await only(
            client.send_message(pb.SendMessageRequest(message=user(pb.Part(text="x"))))
        )
    finally:
        await client.close()
    task = answer.task
    output = artifact(task, "output")
    assert MessageToDict(output.parts[0].data) == {"label": "spam", "score": 0.9}
    assert output.parts[0].media_type == "application/json"
    said = task.status.message.parts
    assert [p.WhichOneof("content") for p in said] == ["text", "data"]
    assert MessageToDict(said[1].data) == {"label": "spam", "score": 0.9}


async def test_images_go_both_ways_as_file_parts(live: Any) -> None:
    server = live(a2a_app(create_agent(FakeProvider(policy=painter)), card=CARD))
    client = await sdk(server.url)
    try:
        sent = user(
            pb.Part(text="look"), pb.Part(raw=PNG, media_type="image/png", filename="a.png")
        )
        answer = await only(client.send_message(pb.SendMessageRequest(message=sent)))
    finally:
        await client.close()
    answer_artifact = artifact(answer.task, "answer")
    assert answer_artifact.parts[0].text == "I saw 1 image(s)."
    assert answer_artifact.parts[1].url == "https://charts.example/c.png"
    assert answer_artifact.parts[1].media_type == "image/png"


PDF = b"%PDF-1.7 quarterly numbers"


def reader(messages: list[Message], tools: list[Any]) -> Message:
    """Says which files it was given, and answers with a file of its own and one by URL."""
    content = messages[-1].content
    seen = [
        f"{b.name or b.url}:{b.media_type}:{base64.b64decode(b.data) if b.data else 'url'}"
        for b in (content if isinstance(content, list) else [])
        if isinstance(b, FileBlock)
    ]
    summary = FileBlock(
        data=base64.b64encode(b"summary").decode(), media_type="text/plain", name="summary.txt"
    )
    spoken = FileBlock(url="https://audio.example/summary.mp3", media_type="audio/mpeg")
    return Message(role="assistant", content=[TextBlock(text=" | ".join(seen)), summary, spoken])


async def test_files_go_both_ways_as_file_parts_by_bytes_and_by_uri(live: Any) -> None:
    server = live(a2a_app(create_agent(FakeProvider(policy=reader)), card=CARD))
    client = await sdk(server.url)
    try:
        sent = user(
            pb.Part(text="summarize"),
            pb.Part(raw=PDF, media_type="application/pdf", filename="q3.pdf"),
            pb.Part(url="https://files.example/call.wav", media_type="audio/wav"),
        )
        answer = await only(client.send_message(pb.SendMessageRequest(message=sent)))
    finally:
        await client.close()
    parts = artifact(answer.task, "answer").parts
    assert parts[0].text == (
        "q3.pdf:application/pdf:b'%PDF-1.7 quarterly numbers' | "
        "https://files.example/call.wav:audio/wav:url"
    )
    assert (parts[1].raw, parts[1].media_type, parts[1].filename) == (
        b"summary",
        "text/plain",
        "summary.txt",
    )
    assert (parts[2].url, parts[2].media_type) == (
        "https://audio.example/summary.mp3",
        "audio/mpeg",
    )


def test_an_a2a_0_3_file_part_reaches_the_model_as_a_file(live: Any) -> None:
    server = live(a2a_app(create_agent(FakeProvider(policy=reader)), card=CARD))
    file = {
        "bytes": base64.b64encode(PDF).decode(),
        "mimeType": "application/pdf",
        "name": "q3.pdf",
    }
    message = {
        "kind": "message",
        "messageId": "m",
        "role": "user",
        "parts": [{"kind": "text", "text": "read"}, {"kind": "file", "file": file}],
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    task = httpx.post(server.url, json=body, timeout=30).json()["result"]
    [answer] = [a for a in task["artifacts"] if a["name"] == "answer"]
    assert answer["parts"][0]["text"] == "q3.pdf:application/pdf:b'%PDF-1.7 quarterly numbers'"


def test_a_too_large_file_is_refused_naming_the_limit() -> None:
    from tensorsketch.messages import MAX_FILE_BYTES
    from tensorsketch.serve.a2a._parts import to_chat

    raw = base64.b64encode(b"%" * (MAX_FILE_BYTES + 3)).decode()
    message = {"role": "ROLE_USER", "parts": [{"raw": raw, "mediaType": "application/pdf"}]}
    with pytest.raises(Exception, match=r"file is refused: .* at most 32 MiB") as caught:
        to_chat(message)
    assert getattr(caught.value, "code", None) == -32602


async def test_to_artifacts_turns_a_graph_s_files_and_data_into_artifacts(live: Any) -> None:
    app = a2a_app(
        REPORTING,
        card=CARD,
        to_input=lambda messages: {"prompt": messages[-1].text},
        to_reply=lambda state: "done",
        to_artifacts=lambda state: {
            "report.md": state.report,
            "chart.png": state.chart,
            "rows": state.rows,
            "skipped": None,
        },
    )
    server = live(app)
    client = await sdk(server.url, streaming=True)
    try:
        stream = client.send_message(pb.SendMessageRequest(message=user(pb.Part(text="Q3"))))
        items = [item async for item in stream]
    finally:
        await client.close()
    streamed = {i.artifact_update.artifact.name for i in items if i.HasField("artifact_update")}
    assert {"answer", "report.md", "chart.png", "rows"} <= streamed
    client = await sdk(server.url)
    try:
        task_id = next(i.task.id for i in items if i.HasField("task"))
        task = await client.get_task(pb.GetTaskRequest(id=task_id))
    finally:
        await client.close()
    assert [a.name for a in task.artifacts] == ["answer", "report.md", "chart.png", "rows"]
    assert artifact(task, "report.md").parts[0].text == "# Q3"
    chart = artifact(task, "chart.png").parts[0]
    assert chart.raw == PNG and chart.media_type == "image/png" and chart.filename == "chart.png"
    rows = artifact(task, "rows").parts
    assert [MessageToDict(p.data) for p in rows] == [{"a": 1}, {"a": 2}]


def test_a_bad_to_artifacts_fails_the_task_with_a_reason(live: Any) -> None:
    app = a2a_app(
        REPORTING,
        card=CARD,
        to_input=lambda messages: {"prompt": messages[-1].text},
        to_reply=lambda state: "done",
        to_artifacts=lambda state: [state.report],
    )
    server = live(app)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}},
    }
    task = httpx.post(server.url, json=body, timeout=30).json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert "to_artifacts" in task["status"]["message"]["parts"][0]["text"]


@pytest.mark.parametrize("legacy", [False, True])
def test_message_replies_answer_with_the_agent_s_message(live: Any, legacy: bool) -> None:
    agent = create_agent(FakeProvider(policy=judge), output_schema=Verdict)
    server = live(a2a_app(agent, card=CARD, message_replies=True))
    if legacy:
        message = {
            "kind": "message",
            "messageId": "m",
            "role": "user",
            "parts": [{"kind": "text", "text": "x"}],
        }
        method = "message/send"
    else:
        message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}
        method = "SendMessage"
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": message}}
    result = httpx.post(server.url, json=body, timeout=30).json()["result"]
    reply = result if legacy else result["message"]
    if legacy:
        assert reply["kind"] == "message" and reply["role"] == "agent"
    else:
        assert reply["role"] == "ROLE_AGENT"
    assert reply["parts"][1]["data"] == {"label": "spam", "score": 0.9}
    get = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": reply["taskId"]}}
    task = httpx.post(server.url, json=get).json()["result"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_the_sdk_client_reads_a_direct_message_reply(live: Any) -> None:
    agent = create_agent(FakeProvider(policy=judge), output_schema=Verdict)
    server = live(a2a_app(agent, card=CARD, message_replies=True))
    client = await sdk(server.url)
    try:
        answer = await only(
            client.send_message(pb.SendMessageRequest(message=user(pb.Part(text="x"))))
        )
    finally:
        await client.close()
    assert answer.HasField("message") and not answer.HasField("task")
    assert answer.message.parts[0].text == '{"label": "spam", "score": 0.9}'
    assert answer.message.task_id


def test_a_part_with_no_content_is_invalid_params(live: Any) -> None:
    """``raw`` that is not base64 decodes to nothing (protobuf's JSON reading is lenient),
    leaving a part with no content: refused, rather than sent to the model as nothing."""
    server = live(a2a_app(create_agent(FakeProvider(policy=painter)), card=CARD))
    parts = [{"raw": "***", "mediaType": "image/png"}]
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": parts}},
    }
    error = httpx.post(server.url, json=body, timeout=30).json()["error"]
    assert error["code"] == -32602 and "part 1" in error["message"]
