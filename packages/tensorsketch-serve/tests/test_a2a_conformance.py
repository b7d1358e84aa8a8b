"""What the A2A compatibility kit checks, proved with the a2a-sdk client where it can reach
it and with raw JSON-RPC over httpx where it cannot: errors carry ``google.rpc.ErrorInfo``,
``SubscribeToTask`` follows a waiting task to its end (live, from another process, after a
restart), ``ListTasks`` and messages are validated, and the card is cacheable."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from google.protobuf.json_format import ParseDict

from tensorsketch import END, START, Context, Graph, Node, Schema, SqliteBackend, interrupt
from tensorsketch.serve.a2a import AgentCard, a2a_app

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
CARD = AgentCard(name="conformance", description="Answers what the kit asks.")


class State(Schema):
    prompt: str = ""
    answer: str = ""


class Ask(Node):
    """Asks for a name with ``interrupt()``, then greets."""

    class In(Schema):
        prompt: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        name = await interrupt(ctx, "What is your name?")
        return self.Out(answer=f"Hello {name}.")


class Nap(Node):
    """Sleeps on a durable timer (the run suspends; nobody waits), then answers."""

    class In(Schema):
        prompt: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        await ctx.sleep(0.8)
        return self.Out(answer=f"rested: {inp.prompt}")


def graph_of(node: type[Node]) -> Any:
    name = node.__name__
    return Graph(State).add(node).edge(START, name).edge(name, END).compile()


ASKING = graph_of(Ask)
NAPPING = graph_of(Nap)


def app(graph: Any = ASKING, **options: Any) -> Any:
    return a2a_app(
        graph,
        card=CARD,
        to_input=lambda messages: {"prompt": messages[-1].text},
        to_reply=lambda state: state.answer,
        **options,
    )


def rpc(method: str, params: Any = None, rid: Any = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        body["params"] = params
    return body


def send_params(text: str, **ids: str) -> dict[str, Any]:
    return {
        "message": {"messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}], **ids}
    }


def call(url: str, method: str, params: Any = None) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.post(url, json=rpc(method, params), timeout=30).json()
    return answer


# -- 1. error.data carries google.rpc.ErrorInfo --------------------------------------------


@pytest.mark.parametrize(
    ("method", "params", "code", "reason"),
    [
        ("GetTask", {"id": "nope"}, -32001, "TASK_NOT_FOUND"),
        ("tasks/get", {"id": "nope"}, -32001, "TASK_NOT_FOUND"),
        ("NoSuchMethod", {}, -32601, "METHOD_NOT_FOUND"),
        ("ListTasks", {"pageSize": 1000}, -32602, "INVALID_PARAMS"),
        ("tasks/cancel", {"id": "nope"}, -32001, "TASK_NOT_FOUND"),
    ],
)
def test_every_error_carries_an_error_info_in_the_a2a_domain(
    live: Any, method: str, params: Any, code: int, reason: str
) -> None:
    server = live(app())
    error = call(server.url, method, params)["error"]
    assert error["code"] == code
    info = error["data"][0]
    assert info["@type"] == ERROR_INFO
    assert info["reason"] == reason
    assert info["domain"] == "a2a-protocol.org"
    assert isinstance(info.get("metadata", {}), dict)


def test_a_parse_error_and_a_bad_request_carry_error_info_too(live: Any) -> None:
    server = live(app())
    parse = httpx.post(server.url, content=b"{nope").json()["error"]
    assert parse["code"] == -32700 and parse["data"][0]["domain"] == "a2a-protocol.org"
    bad = httpx.post(server.url, json={"jsonrpc": "2.0", "id": 1}).json()["error"]
    assert bad["code"] == -32600 and bad["data"][0]["reason"] == "INVALID_REQUEST"


async def test_the_sdk_client_reads_the_error_info_metadata(live: Any) -> None:
    server = live(app())
    client = await ClientFactory(ClientConfig(streaming=False)).create_from_url(server.url)
    try:
        with pytest.raises(TaskNotFoundError) as caught:
            await client.get_task(pb.GetTaskRequest(id="nope"))
        # the SDK hands the ErrorInfo's metadata over as the exception's data
        assert caught.value.data == {"taskId": "nope"}
    finally:
        await client.close()


# -- 2. SubscribeToTask follows a waiting task to its end ----------------------------------


async def _subscribe(url: str, task_id: str) -> tuple[Any, list[pb.StreamResponse]]:
    client = await ClientFactory(ClientConfig(streaming=True)).create_from_url(url)
    seen: list[pb.StreamResponse] = []

    async def listen() -> None:
        try:
            async for item in client.subscribe(pb.SubscribeToTaskRequest(id=task_id)):
                seen.append(item)
        finally:
            await client.close()

    listener = asyncio.create_task(listen())
    for _ in range(500):
        if seen or listener.done():
            break
        await asyncio.sleep(0.01)
    return listener, seen


def _states(items: list[pb.StreamResponse]) -> list[str]:
    out = []
    for item in items:
        if item.HasField("task"):
            out.append(pb.TaskState.Name(item.task.status.state))
        elif item.HasField("status_update"):
            out.append(pb.TaskState.Name(item.status_update.status.state))
    return out


async def test_subscribing_to_an_input_required_task_follows_it_when_it_is_answered(
    live: Any,
) -> None:
    server = live(app())
    task = call(server.url, "SendMessage", send_params("hi"))["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    listener, seen = await _subscribe(server.url, task["id"])
    await asyncio.sleep(0.3)
    assert not listener.done(), "the stream closed while the task still waited"
    answer = send_params("Ada", taskId=task["id"], contextId=task["contextId"])
    async with httpx.AsyncClient(timeout=30) as http:
        done = (await http.post(server.url, json=rpc("SendMessage", answer))).json()
    assert done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    await asyncio.wait_for(listener, 30)
    states = _states(seen)
    assert states[0] == "TASK_STATE_INPUT_REQUIRED"
    assert states[-1] == "TASK_STATE_COMPLETED"
    assert "TASK_STATE_WORKING" in states


async def test_a_subscriber_sees_a_task_another_process_answers(live: Any, tmp_path: Path) -> None:
    """Two servers share one store: the task is answered on the other one, so this one
    has no live run to listen to and follows the task through the store."""
    path = str(tmp_path / "shared.db")
    here = live(app(backend=SqliteBackend(path), namespace="shared"))
    there = live(app(backend=SqliteBackend(path), namespace="shared"))
    task = call(here.url, "SendMessage", send_params("hi"))["result"]["task"]
    listener, seen = await _subscribe(here.url, task["id"])
    answer = send_params("Grace", taskId=task["id"], contextId=task["contextId"])
    async with httpx.AsyncClient(timeout=30) as http:
        done = (await http.post(there.url, json=rpc("SendMessage", answer))).json()
    assert done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    await asyncio.wait_for(listener, 30)
    assert _states(seen)[-1] == "TASK_STATE_COMPLETED"
    final = seen[-1]
    assert final.HasField("status_update")
    assert "Hello Grace." in "".join(p.text for p in final.status_update.status.message.parts)


async def test_subscribing_to_a_task_on_a_timer_follows_it_until_it_completes(
    live: Any,
) -> None:
    server = live(app(NAPPING))
    task = call(server.url, "SendMessage", send_params("nap"))["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_WORKING"
    assert "wakeAt" in task["status"]["message"]["parts"][1]["data"]
    listener, seen = await _subscribe(server.url, task["id"])
    await asyncio.wait_for(listener, 30)
    assert _states(seen)[-1] == "TASK_STATE_COMPLETED"
    got = call(server.url, "GetTask", {"id": task["id"]})["result"]
    assert got["artifacts"][0]["parts"] == [{"text": "rested: nap"}]


async def test_a_timer_task_is_followed_to_its_end_after_a_restart(
    live: Any, tmp_path: Path
) -> None:
    path = str(tmp_path / "restart.db")
    first = live(app(NAPPING, backend=SqliteBackend(path)))
    task = call(first.url, "SendMessage", send_params("later"))["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_WORKING"
    first.stop()
    second = live(app(NAPPING, backend=SqliteBackend(path)))
    listener, seen = await _subscribe(second.url, task["id"])
    await asyncio.wait_for(listener, 30)
    assert _states(seen)[0] == "TASK_STATE_WORKING"
    assert _states(seen)[-1] == "TASK_STATE_COMPLETED"


# -- 3-5. ListTasks validation -------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"status": "INVALID_STATUS"}, "status"),
        ({"status": 99}, "status"),
        ({"pageSize": 0}, "pageSize"),
        ({"pageSize": -1}, "pageSize"),
        ({"historyLength": -1}, "historyLength"),
    ],
)
def test_list_tasks_refuses_out_of_range_filters(live: Any, params: Any, needle: str) -> None:
    server = live(app())
    call(server.url, "SendMessage", send_params("one"))
    error = call(server.url, "ListTasks", params)["error"]
    assert error["code"] == -32602, error
    assert needle in error["message"]


async def test_the_sdk_client_gets_invalid_params_for_a_zero_page_or_negative_history(
    live: Any,
) -> None:
    server = live(app())
    client = await ClientFactory(ClientConfig(streaming=False)).create_from_url(server.url)
    try:
        with pytest.raises(InvalidParamsError):
            await client.list_tasks(pb.ListTasksRequest(page_size=0))
        with pytest.raises(InvalidParamsError):
            await client.list_tasks(pb.ListTasksRequest(history_length=-1))
        listed = await client.list_tasks(pb.ListTasksRequest(page_size=1))
        assert listed.page_size == 1
    finally:
        await client.close()


# -- 6. a readable id is echoed even when the request is invalid ---------------------------


@pytest.mark.parametrize("rid", ["abc", 7])
def test_a_non_2_0_request_gets_its_id_echoed(live: Any, rid: Any) -> None:
    server = live(app())
    body = {"jsonrpc": "1.0", "id": rid, "method": "GetTask", "params": {"id": "x"}}
    answer = httpx.post(server.url, json=body).json()
    assert answer["error"]["code"] == -32600
    assert answer["id"] == rid


def test_an_unreadable_id_is_answered_with_null(live: Any) -> None:
    server = live(app())
    body = {"jsonrpc": "1.0", "id": {"x": 1}, "method": "GetTask"}
    answer = httpx.post(server.url, json=body).json()
    assert answer["error"]["code"] == -32600 and answer["id"] is None


# -- 7. a message needs messageId and role -------------------------------------------------


@pytest.mark.parametrize(
    ("method", "message", "needle"),
    [
        ("SendMessage", {"role": "ROLE_USER", "parts": [{"text": "hi"}]}, "messageId"),
        ("SendMessage", {"messageId": "m1", "parts": [{"text": "hi"}]}, "role"),
        (
            "SendMessage",
            {"messageId": "m1", "role": "ROLE_BOSS", "parts": [{"text": "hi"}]},
            "role",
        ),
        ("SendStreamingMessage", {"role": "ROLE_USER", "parts": [{"text": "hi"}]}, "messageId"),
        (
            "message/send",
            {"kind": "message", "role": "user", "parts": [{"kind": "text", "text": "hi"}]},
            "messageId",
        ),
        (
            "message/send",
            {"kind": "message", "messageId": "m1", "parts": [{"kind": "text", "text": "hi"}]},
            "role",
        ),
    ],
)
def test_a_message_without_message_id_or_role_is_invalid_params(
    live: Any, method: str, message: Any, needle: str
) -> None:
    server = live(app())
    error = call(server.url, method, {"message": message})["error"]
    assert error["code"] == -32602, error
    assert needle in error["message"]
    assert call(server.url, "ListTasks", {})["result"]["tasks"] == []


# -- 8. the card is cacheable and has only 1.0 fields --------------------------------------


@pytest.mark.parametrize("path", ["/.well-known/agent-card.json", "/.well-known/agent.json"])
def test_the_card_has_an_etag_cache_control_and_answers_304(live: Any, path: str) -> None:
    server = live(app())
    first = httpx.get(server.url.rstrip("/") + path)
    assert first.status_code == 200
    etag = first.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"')
    assert "max-age=" in first.headers["cache-control"]
    again = httpx.get(server.url.rstrip("/") + path, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == etag
    other = httpx.get(server.url.rstrip("/") + path, headers={"If-None-Match": '"other"'})
    assert other.status_code == 200 and other.json() == first.json()


def test_the_1_0_card_has_no_state_transition_history(live: Any) -> None:
    server = live(app())
    card = httpx.get(server.url.rstrip("/") + "/.well-known/agent-card.json").json()
    assert "stateTransitionHistory" not in card["capabilities"]
    # the SDK's own AgentCard type reads it strictly: no field A2A 1.0 does not have
    legacy = {"url", "preferredTransport", "protocolVersion"}
    ParseDict({k: v for k, v in card.items() if k not in legacy}, pb.AgentCard())
    old = httpx.get(server.url.rstrip("/") + "/.well-known/agent.json").json()
    assert old["capabilities"]["stateTransitionHistory"] is False  # a 0.3 field, kept there


async def test_a_timer_task_goes_on_by_itself_when_the_timer_is_due(live: Any) -> None:
    """Nobody subscribes and nobody writes: the server that ran the task wakes it."""
    server = live(app(NAPPING))
    task = call(server.url, "SendMessage", send_params("alone"))["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_WORKING"
    async with httpx.AsyncClient(timeout=30) as http:
        for _ in range(300):
            got = (await http.post(server.url, json=rpc("GetTask", {"id": task["id"]}))).json()
            if got["result"]["status"]["state"] == "TASK_STATE_COMPLETED":
                break
            await asyncio.sleep(0.05)
    assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert got["result"]["artifacts"][0]["parts"] == [{"text": "rested: alone"}]


async def test_the_sdk_s_0_3_client_still_reads_our_errors(live: Any) -> None:
    """The ErrorInfo list in ``data`` does not trouble a 0.3 client (0.3 leaves ``data``
    free-form): the a2a-sdk's 0.3 transport raises the error the code names."""
    server = live(app())
    factory = ClientFactory(ClientConfig(streaming=False))
    client = await factory.create_from_url(server.url, relative_card_path="/.well-known/agent.json")
    try:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(pb.GetTaskRequest(id="nope"))
    finally:
        await client.close()


def test_a_0_3_resubscription_on_an_input_required_task_lasts_until_it_completes(
    live: Any,
) -> None:
    server = live(app())
    old = {
        "kind": "message",
        "messageId": "o1",
        "role": "user",
        "parts": [{"kind": "text", "text": "hi"}],
    }
    task = call(server.url, "message/send", {"message": old})["result"]
    assert task["status"]["state"] == "input-required"
    frames: list[dict[str, Any]] = []
    answer = {**old, "messageId": "o2", "taskId": task["id"], "contextId": task["contextId"]}
    answer["parts"] = [{"kind": "text", "text": "Ada"}]
    body = rpc("tasks/resubscribe", {"id": task["id"]})
    with httpx.stream("POST", server.url, json=body, timeout=30) as stream:
        for line in stream.iter_lines():
            if line.startswith("data: "):
                frames.append(json.loads(line[6:])["result"])
                if len(frames) == 1:  # subscribed: now answer the question
                    done = call(server.url, "message/send", {"message": answer})["result"]
                    assert done["status"]["state"] == "completed"
    assert frames[0]["kind"] == "task"
    assert frames[-1]["kind"] == "status-update" and frames[-1]["final"] is True
    assert frames[-1]["status"]["state"] == "completed"
