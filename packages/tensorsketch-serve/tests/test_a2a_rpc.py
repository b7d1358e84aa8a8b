"""``a2a_app``'s JSON-RPC edges over uvicorn: a non-agent graph, cancel and subscribe on a
running task, and bad requests — each answered with a well-formed JSON-RPC error, never a 5xx
(hypothesis throws arbitrary bodies at it)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorsketch import END, START, Context, Graph, InMemoryBackend, Node, Schema, interrupt
from tensorsketch.serve.a2a import AgentCard, a2a_app

GATE = threading.Event()  # holds the slow graph's node until a test lets it go


class State(Schema):
    prompt: str = ""
    answer: str = ""


class Upper(Node):
    class In(Schema):
        prompt: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        if inp.prompt.startswith("slow"):
            await asyncio.to_thread(GATE.wait, 60)  # the test thread sets it
        return self.Out(answer=inp.prompt.upper())


GRAPH = Graph(State).add(Upper).edge(START, "Upper").edge("Upper", END).compile()
CARD = AgentCard(name="upper", description="Shouts back.")


def app(**options: Any) -> Any:
    return a2a_app(
        GRAPH,
        card=CARD,
        backend=InMemoryBackend(),
        to_input=lambda messages: {"prompt": messages[-1].text},
        to_reply=lambda state: state.answer,
        **options,
    )


def rpc(method: str, params: Any = None, rid: Any = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        body["params"] = params
    return body


def send_params(text: str, **config: Any) -> dict[str, Any]:
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text}]}
    return {"message": message, **({"configuration": config} if config else {})}


def test_a_non_agent_graph_is_served_through_to_input_and_to_reply(live: Any) -> None:
    server = live(app())
    reply = httpx.post(
        server.url, json=rpc("SendMessage", send_params("hi there")), headers={"A2A-Version": "1.0"}
    )
    assert reply.status_code == 200
    task = reply.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "HI THERE"}]
    # camelCase per the spec, for 0.3 too
    old = {
        "message": {
            "kind": "message",
            "messageId": "m2",
            "role": "user",
            "parts": [{"kind": "text", "text": "old"}],
        }
    }
    legacy = httpx.post(server.url, json=rpc("message/send", old)).json()["result"]
    assert legacy["kind"] == "task" and legacy["status"]["state"] == "completed"
    assert legacy["contextId"] and legacy["artifacts"][0]["parts"] == [
        {"kind": "text", "text": "OLD"}
    ]


async def test_cancel_and_subscribe_on_a_running_task(live: Any) -> None:
    GATE.clear()
    server = live(app())
    client = await ClientFactory(ClientConfig(streaming=True)).create_from_url(server.url)
    try:
        request = pb.SendMessageRequest(
            message=pb.Message(
                message_id="s1", role=pb.ROLE_USER, parts=[pb.Part(text="slow one")]
            ),
            configuration=pb.SendMessageConfiguration(return_immediately=True),
        )
        plain = await ClientFactory(ClientConfig(streaming=False)).create_from_url(server.url)
        [first] = [r async for r in plain.send_message(request)]
        task = first.task
        assert pb.TaskState.Name(task.status.state) in (
            "TASK_STATE_SUBMITTED",
            "TASK_STATE_WORKING",
        )
        listened: list[pb.StreamResponse] = []

        async def listen() -> None:
            async for item in client.subscribe(pb.SubscribeToTaskRequest(id=task.id)):
                listened.append(item)

        listener = asyncio.create_task(listen())
        for _ in range(200):
            if listened:
                break
            await asyncio.sleep(0.02)
        assert listened[0].task.id == task.id
        canceled = await plain.cancel_task(pb.CancelTaskRequest(id=task.id))
        assert pb.TaskState.Name(canceled.status.state) == "TASK_STATE_CANCELED"
        await asyncio.wait_for(listener, 30)
        assert pb.TaskState.Name(listened[-1].status_update.status.state) == "TASK_STATE_CANCELED"
        got = await plain.get_task(pb.GetTaskRequest(id=task.id))
        assert pb.TaskState.Name(got.status.state) == "TASK_STATE_CANCELED"
        await plain.close()
    finally:
        GATE.set()
        await client.close()


@pytest.mark.parametrize(
    ("body", "code", "needle"),
    [
        (b"{not json", -32700, "not valid JSON"),
        (b"[]", -32600, "batch"),
        (b'"text"', -32600, "object"),
        (json.dumps({"id": 1, "method": "GetTask"}).encode(), -32600, "jsonrpc"),
        (json.dumps(rpc("NoSuchMethod")).encode(), -32601, "SendMessage"),
        (json.dumps(rpc("GetTask", {"id": "missing"})).encode(), -32001, "missing"),
        (json.dumps(rpc("GetTask", [1, 2])).encode(), -32602, "object"),
        (json.dumps(rpc("SendMessage", {"message": {"parts": []}})).encode(), -32602, "part"),
        (json.dumps(rpc("SendMessage", {"message": {"parts": "x"}})).encode(), -32602, "1.0"),
        (json.dumps(rpc("message/send", {"message": {"parts": 3}})).encode(), -32602, "0.3"),
        (json.dumps(rpc("ListTasks", {"pageSize": 1000})).encode(), -32602, "pageSize"),
        (json.dumps(rpc("CreateTaskPushNotificationConfig", {})).encode(), -32602, "taskId"),
        # valid JSON, but no Unicode text: refused before anything is stored
        (
            json.dumps(rpc("SendMessage", {"message": {"parts": [{"text": "\ud800"}]}})).encode(),
            -32600,
            "lone UTF-16 surrogate",
        ),
    ],
)
def test_bad_requests_get_json_rpc_errors(live: Any, body: bytes, code: int, needle: str) -> None:
    server = live(app())
    reply = httpx.post(server.url, content=body, headers={"Content-Type": "application/json"})
    assert reply.status_code == 200
    error = reply.json()["error"]
    assert error["code"] == code and needle in error["message"], error


def test_version_header_body_limit_and_auth(live: Any) -> None:
    server = live(app(max_body_bytes=2000, authenticate=lambda r: r.headers.get("x-key") == "k"))
    key = {"x-key": "k"}
    refused = httpx.post(server.url, json=rpc("GetTask", {"id": "x"}))
    assert refused.status_code == 401 and refused.json()["error"]["code"] == -32600
    version = httpx.post(
        server.url, json=rpc("GetTask", {"id": "x"}), headers={**key, "A2A-Version": "2.0"}
    )
    assert version.json()["error"]["code"] == -32009
    big = httpx.post(server.url, json=rpc("SendMessage", send_params("x" * 5000)), headers=key)
    assert big.status_code == 413 and big.json()["error"]["code"] == -32600
    assert httpx.get(f"{server.url}/.well-known/agent-card.json", headers=key).status_code == 200


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
METHODS = st.sampled_from(
    [
        "SendMessage",
        "SendStreamingMessage",
        "GetTask",
        "ListTasks",
        "CancelTask",
        "SubscribeToTask",
        "message/send",
        "message/stream",
        "tasks/get",
        "tasks/cancel",
        "tasks/resubscribe",
        "other",
    ]
)
MESSAGE_LIKE = st.fixed_dictionaries(
    {
        "message": st.fixed_dictionaries(
            {
                "parts": st.lists(
                    st.dictionaries(
                        st.sampled_from(["text", "kind", "data", "url", "raw"]), JSON, max_size=3
                    ),
                    max_size=2,
                )
            },
            optional={
                "role": JSON,
                "taskId": JSON,
                "contextId": JSON,
                "kind": JSON,
                "messageId": JSON,
            },
        )
    },
    optional={
        "configuration": st.dictionaries(
            st.sampled_from(["historyLength", "returnImmediately", "acceptedOutputModes"]),
            JSON,
            max_size=2,
        )
    },
)
BODIES = st.one_of(
    st.builds(
        lambda m, p, i: {"jsonrpc": "2.0", "id": i, "method": m, "params": p},
        METHODS,
        JSON | MESSAGE_LIKE,
        JSON,
    ),
    st.dictionaries(st.sampled_from(["jsonrpc", "id", "method", "params"]), JSON, max_size=4),
    JSON,
)


@pytest.fixture
def fuzz_server(live: Any) -> Any:
    """One server for every example (hypothesis runs them all in one test call)."""
    GATE.set()
    return live(app())


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    body=BODIES
    | st.binary(max_size=64)
    | st.sampled_from(
        [
            b"NaN",
            b'{"jsonrpc": "2.0", "id": Infinity, "method": "GetTask"}',
            b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"parts":[{"data":NaN}]}}}',
        ]
    )
)
def test_fuzzed_bodies_never_get_a_server_error(fuzz_server: Any, body: Any) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    reply = httpx.post(
        fuzz_server.url,
        content=content,
        headers={"A2A-Version": "1.0", "Content-Type": "application/json"},
        timeout=30,
    )
    assert reply.status_code < 500, reply.text
    if reply.headers["content-type"].startswith("text/event-stream"):
        frames = [line[6:] for line in reply.text.splitlines() if line.startswith("data: ")]
        assert frames and all(json.loads(f)["jsonrpc"] == "2.0" for f in frames)
        assert all(json.loads(f).get("error", {}).get("code") != -32603 for f in frames)
        return
    answer = reply.json()
    assert answer["jsonrpc"] == "2.0" and ("result" in answer) != ("error" in answer)
    if "error" in answer:
        assert isinstance(answer["error"]["code"], int) and isinstance(
            answer["error"]["message"], str
        )


def test_a_record_left_behind_by_a_stopped_process_catches_up_with_its_run(live: Any) -> None:
    """The run finished (its checkpoint is saved) but the process stopped before the task's
    record said so: reading the task brings the record up to date from the thread."""
    served = app()
    server = live(served)
    service = served.state.a2a
    message = {"messageId": "m9", "role": "ROLE_USER", "parts": [{"text": "left behind"}]}

    async def run_without_the_app() -> str:
        task = await service.store.create(None, message)
        await GRAPH.invoke(
            {"prompt": "left behind"}, thread_id=task.thread_id, backend=service.store.backend
        )
        return task.id

    task_id = server.call(run_without_the_app())
    reply = httpx.post(server.url, json=rpc("GetTask", {"id": task_id}))
    task = reply.json()["result"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "LEFT BEHIND"}]


async def test_a_blocking_send_answers_with_the_task_a_cancel_stopped(live: Any) -> None:
    GATE.clear()
    server = live(app())
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            sending = asyncio.create_task(
                http.post("/", json=rpc("SendMessage", send_params("slow")))
            )
            listed: list[Any] = []
            for _ in range(500):
                listed = (await http.post("/", json=rpc("ListTasks", {}))).json()["result"]["tasks"]
                if listed:
                    break
                await asyncio.sleep(0.02)
            canceled = await http.post("/", json=rpc("CancelTask", {"id": listed[0]["id"]}))
            assert canceled.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED"
            answer = (await sending).json()
            assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_CANCELED"
            again = await http.post("/", json=rpc("CancelTask", {"id": listed[0]["id"]}))
            assert again.json()["error"]["code"] == -32002
    finally:
        GATE.set()


def test_a_task_whose_run_never_started_is_started_by_the_next_message(live: Any) -> None:
    """A process stopped after recording the task but before its run's first checkpoint."""
    served = app()
    server = live(served)
    message = {"messageId": "m8", "role": "ROLE_USER", "parts": [{"text": "not yet run"}]}
    task = server.call(served.state.a2a.store.create(None, message))
    follow = send_params("go on")
    follow["message"].update(taskId=task.id, contextId=task.context_id)
    reply = httpx.post(server.url, json=rpc("SendMessage", follow)).json()["result"]["task"]
    assert reply["status"]["state"] == "TASK_STATE_COMPLETED"
    assert reply["artifacts"][0]["parts"] == [{"text": "GO ON"}]


class Ask(Node):
    """Asks a person a question with ``interrupt()`` and answers with what they said."""

    class In(Schema):
        prompt: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        name = await interrupt(ctx, "What is your name?")
        return self.Out(answer=f"Hello {name}, you asked {inp.prompt!r}.")


ASKING = Graph(State).add(Ask).edge(START, "Ask").edge("Ask", END).compile()


def test_an_interrupt_question_is_input_required_and_the_answer_resumes(live: Any) -> None:
    served = a2a_app(
        ASKING,
        card=CARD,
        to_input=lambda messages: {"prompt": messages[-1].text},
        to_reply=lambda state: state.answer,
    )
    server = live(served)
    first = httpx.post(server.url, json=rpc("SendMessage", send_params("hi"))).json()
    task = first["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    parts = task["status"]["message"]["parts"]
    assert parts[0] == {"text": "What is your name?"}
    assert parts[1]["data"]["interrupts"][0]["kind"] == "interrupt"
    answer = send_params("Ada")
    answer["message"].update(taskId=task["id"], contextId=task["contextId"])
    done = httpx.post(server.url, json=rpc("SendMessage", answer)).json()["result"]["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert done["artifacts"][0]["parts"] == [{"text": "Hello Ada, you asked 'hi'."}]
    # the history holds the question, the answer and the reply, in order
    said = [(m["role"], m["parts"][0].get("text")) for m in done["history"]]
    assert said == [
        ("ROLE_USER", "hi"),
        ("ROLE_AGENT", "What is your name?"),
        ("ROLE_USER", "Ada"),
        ("ROLE_AGENT", "Hello Ada, you asked 'hi'."),
    ]


def test_0_3_non_blocking_send_then_resubscribe_until_it_completes(live: Any) -> None:
    GATE.clear()
    server = live(app())
    try:
        old = {
            "message": {
                "kind": "message",
                "messageId": "o1",
                "role": "user",
                "parts": [{"kind": "text", "text": "slow old"}],
            },
            "configuration": {"blocking": False},
        }
        task = httpx.post(server.url, json=rpc("message/send", old)).json()["result"]
        assert task["kind"] == "task" and task["status"]["state"] in ("submitted", "working")
        frames: list[dict[str, Any]] = []
        with httpx.stream(
            "POST", server.url, json=rpc("tasks/resubscribe", {"id": task["id"]}), timeout=60
        ) as stream:
            for line in stream.iter_lines():
                if line.startswith("data: "):
                    frames.append(json.loads(line[6:]))
                    if len(frames) == 1:
                        GATE.set()  # subscribed: let the run finish
        results = [f["result"] for f in frames]
        assert results[0]["kind"] == "task" and results[0]["id"] == task["id"]
        assert results[-1]["kind"] == "status-update" and results[-1]["final"] is True
        assert results[-1]["status"]["state"] == "completed"
        assert any(
            r["kind"] == "artifact-update"
            and r["artifact"]["parts"] == [{"kind": "text", "text": "SLOW OLD"}]
            for r in results
        )
    finally:
        GATE.set()
