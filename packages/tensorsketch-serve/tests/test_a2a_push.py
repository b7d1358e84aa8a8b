"""A2A push notifications end to end: the a2a-sdk client registers webhooks on our app (uvicorn
on 127.0.0.1), and a real webhook receiver (uvicorn too) records what the app POSTs — the
spec's payloads and authentication headers, in order, retried after failures, kept across a
restart; non-public webhooks are refused unless the app allows them."""

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
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tensorsketch import END, START, Context, Graph, Node, Schema, SqliteBackend, interrupt
from tensorsketch.serve import sign_webhook
from tensorsketch.serve.a2a import AgentCard, PushNotifications, a2a_app

CARD = AgentCard(name="pusher", description="Tells webhooks how tasks go.")
LOCAL = PushNotifications(allowed_hosts=("127.0.0.1",), backoff=0.05)


class State(Schema):
    prompt: str = ""
    answer: str = ""


class Ask(Node):
    class In(Schema):
        prompt: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        name = await interrupt(ctx, "What is your name?")
        return self.Out(answer=f"Hello {name}.")


ASKING = Graph(State).add(Ask).edge(START, "Ask").edge("Ask", END).compile()


class Nap(Node):
    class In(Schema):
        prompt: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        await ctx.sleep(0.5)
        return self.Out(answer="rested")


NAPPING = Graph(State).add(Nap).edge(START, "Nap").edge("Nap", END).compile()


class Echo(Node):
    class In(Schema):
        prompt: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(answer=inp.prompt)


ECHO = Graph(State).add(Echo).edge(START, "Echo").edge("Echo", END).compile()


def app(push: PushNotifications | None = LOCAL, graph: Any = ASKING, **options: Any) -> Any:
    return a2a_app(
        graph,
        card=CARD,
        to_input=lambda messages: {"prompt": messages[-1].text},
        to_reply=lambda state: state.answer,
        push=push,
        **options,
    )


class Webhook:
    """A webhook receiver on a live uvicorn: records each POST; fails the first ``fail``."""

    def __init__(self, live: Any, fail: int = 0) -> None:
        self.received: list[tuple[dict[str, str], Any]] = []
        self.attempts = 0
        self.fail = fail

        async def hook(request: Request) -> Response:
            self.attempts += 1
            if self.attempts <= self.fail:
                return Response(status_code=503)
            self.received.append((dict(request.headers), await request.json()))
            return Response(status_code=204)

        self.server = live(Starlette(routes=[Route("/hook", hook, methods=["POST"])]))
        self.url = self.server.url.rstrip("/") + "/hook"

    def bodies(self) -> list[Any]:
        return [body for _headers, body in self.received]

    async def wait_for(self, done: Any, seconds: float = 20) -> None:
        for _ in range(int(seconds / 0.02)):
            if any(done(body) for body in self.bodies()):
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"the webhook never got it; it got {self.bodies()}")


def final_state(state: str) -> Any:
    return lambda body: body.get("statusUpdate", {}).get("status", {}).get("state") == state


def user(text: str, **ids: str) -> pb.Message:
    return pb.Message(message_id=f"m-{text}", role=pb.ROLE_USER, parts=[pb.Part(text=text)], **ids)


async def sdk(url: str) -> Any:
    return await ClientFactory(ClientConfig(streaming=False)).create_from_url(url)


async def ask(client: Any, text: str, **config: Any) -> pb.Task:
    request = pb.SendMessageRequest(
        message=user(text), configuration=pb.SendMessageConfiguration(**config)
    )
    [answer] = [r async for r in client.send_message(request)]
    task: pb.Task = answer.task
    return task


async def test_the_sdk_registers_a_webhook_and_it_gets_the_task_s_updates(live: Any) -> None:
    hook = Webhook(live)
    server = live(app())
    client = await sdk(server.url)
    try:
        task = await ask(client, "hi")
        assert pb.TaskState.Name(task.status.state) == "TASK_STATE_INPUT_REQUIRED"
        config = pb.TaskPushNotificationConfig(
            task_id=task.id,
            id="hook-1",
            url=hook.url,
            token="tok-123",
            authentication=pb.AuthenticationInfo(scheme="Bearer", credentials="s3cret"),
        )
        made = await client.create_task_push_notification_config(config)
        assert made.id == "hook-1" and made.url == hook.url and made.task_id == task.id
        got = await client.get_task_push_notification_config(
            pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="hook-1")
        )
        assert got.token == "tok-123" and got.authentication.scheme == "Bearer"
        listed = await client.list_task_push_notification_configs(
            pb.ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        assert [c.id for c in listed.configs] == ["hook-1"]
        ids = {"task_id": task.id, "context_id": task.context_id}
        request = pb.SendMessageRequest(message=user("Ada", **ids))
        [done] = [r async for r in client.send_message(request)]
        assert pb.TaskState.Name(done.task.status.state) == "TASK_STATE_COMPLETED"
        await hook.wait_for(final_state("TASK_STATE_COMPLETED"))
    finally:
        await client.close()
    states = [b["statusUpdate"]["status"]["state"] for b in hook.bodies() if "statusUpdate" in b]
    assert states == ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    artifacts = [b["artifactUpdate"] for b in hook.bodies() if "artifactUpdate" in b]
    assert artifacts[-1]["artifact"]["parts"] == [{"text": "Hello Ada."}]
    assert artifacts[-1]["taskId"] == task.id
    for headers, _body in hook.received:
        assert headers["x-a2a-notification-token"] == "tok-123"
        assert headers["authorization"] == "Bearer s3cret"
        assert headers["content-type"] == "application/json"
    # each body is a StreamResponse the SDK's own type reads
    for body in hook.bodies():
        ParseDict(body, pb.StreamResponse())


async def test_a_deployment_secret_signs_every_notification(live: Any) -> None:
    """With ``PushNotifications(secret=...)`` each POST carries the task API's HMAC headers
    over its exact body; without one, none (the spec's token is all there is)."""
    secret = "push-signing-secret-0123"
    hook = Webhook(live)
    server = live(app(LOCAL.model_copy(update={"secret": secret}), graph=ECHO))
    client = await sdk(server.url)
    try:
        webhook = pb.TaskPushNotificationConfig(url=hook.url, token="t")
        await ask(client, "sign me", task_push_notification_config=webhook)
        await hook.wait_for(final_state("TASK_STATE_COMPLETED"))
    finally:
        await client.close()
    assert hook.received
    for headers, body in hook.received:
        raw = json.dumps(body).encode()  # what the app sent: json.dumps of the payload
        stamp = headers["x-tensorsketch-timestamp"]
        assert headers["x-tensorsketch-signature"] == sign_webhook(secret, stamp, raw)
        assert headers["x-tensorsketch-signature"] != sign_webhook(
            "another-secret-12345", stamp, raw
        )
    with pytest.raises(ValueError, match="at least 16 characters"):
        PushNotifications(secret="short")


async def test_a_webhook_given_with_the_message_hears_the_whole_task(live: Any) -> None:
    hook = Webhook(live)
    server = live(app())
    client = await sdk(server.url)
    try:
        webhook = pb.TaskPushNotificationConfig(url=hook.url, token="t")
        task = await ask(client, "hello", task_push_notification_config=webhook)
        await hook.wait_for(final_state("TASK_STATE_INPUT_REQUIRED"))
        listed = await client.list_task_push_notification_configs(
            pb.ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        assert [(c.id, c.url) for c in listed.configs] == [(task.id, hook.url)]
    finally:
        await client.close()
    states = [b["statusUpdate"]["status"]["state"] for b in hook.bodies()]
    assert states == ["TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"]


async def test_a_deleted_webhook_hears_nothing_more(live: Any) -> None:
    kept, dropped = Webhook(live), Webhook(live)
    server = live(app())
    client = await sdk(server.url)
    try:
        task = await ask(client, "hi")
        for name, hook in (("kept", kept), ("dropped", dropped)):
            await client.create_task_push_notification_config(
                pb.TaskPushNotificationConfig(task_id=task.id, id=name, url=hook.url)
            )
        await client.delete_task_push_notification_config(
            pb.DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="dropped")
        )
        with pytest.raises(TaskNotFoundError):
            await client.get_task_push_notification_config(
                pb.GetTaskPushNotificationConfigRequest(task_id=task.id, id="dropped")
            )
        ids = {"task_id": task.id, "context_id": task.context_id}
        [_done] = [
            r async for r in client.send_message(pb.SendMessageRequest(message=user("Bo", **ids)))
        ]
        await kept.wait_for(final_state("TASK_STATE_COMPLETED"))
    finally:
        await client.close()
    assert dropped.attempts == 0


async def test_a_failing_webhook_is_retried_with_backoff_and_order_is_kept(live: Any) -> None:
    hook = Webhook(live, fail=2)  # the first two POSTs get a 503
    server = live(app())
    client = await sdk(server.url)
    try:
        webhook = pb.TaskPushNotificationConfig(url=hook.url)
        await ask(client, "hi", task_push_notification_config=webhook)
        await hook.wait_for(final_state("TASK_STATE_INPUT_REQUIRED"))
    finally:
        await client.close()
    assert hook.attempts == 4  # WORKING failed twice, then got through; then INPUT_REQUIRED
    states = [b["statusUpdate"]["status"]["state"] for b in hook.bodies()]
    assert states == ["TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED"]


async def test_a_webhook_that_keeps_failing_is_given_up_without_harming_the_task(
    live: Any,
) -> None:
    hook = Webhook(live, fail=1000)
    server = live(app(PushNotifications(allowed_hosts=("127.0.0.1",), attempts=3, backoff=0.01)))
    client = await sdk(server.url)
    try:
        webhook = pb.TaskPushNotificationConfig(url=hook.url)
        task = await ask(client, "hi", task_push_notification_config=webhook)
        assert pb.TaskState.Name(task.status.state) == "TASK_STATE_INPUT_REQUIRED"
        for _ in range(500):
            if hook.attempts >= 6:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)
    finally:
        await client.close()
    assert hook.attempts == 6  # two notifications, three attempts each


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("http://127.0.0.1:9/hook", "not a public address"),
        ("http://localhost:9/hook", "not a public address"),
        ("http://10.1.2.3/hook", "not a public address"),
        ("http://169.254.169.254/latest/meta-data", "not a public address"),
        ("http://[::1]:9/hook", "not a public address"),
        ("file:///etc/passwd", "http(s)"),
        ("not a url", "http(s)"),
    ],
)
async def test_a_non_public_webhook_is_refused_unless_allowed(
    live: Any, url: str, needle: str
) -> None:
    server = live(app(PushNotifications()))
    client = await sdk(server.url)
    try:
        task = await ask(client, "hi")
        with pytest.raises(InvalidParamsError) as caught:
            await client.create_task_push_notification_config(
                pb.TaskPushNotificationConfig(task_id=task.id, url=url)
            )
        assert needle in str(caught.value)
        with pytest.raises(InvalidParamsError):
            webhook = pb.TaskPushNotificationConfig(url=url)
            await ask(client, "again", task_push_notification_config=webhook)
        listed = await client.list_tasks(pb.ListTasksRequest())
        assert len(listed.tasks) == 1  # the refused message left no task behind
    finally:
        await client.close()


def test_the_card_says_whether_push_is_on_and_it_can_be_turned_off(live: Any) -> None:
    on = live(app())
    card = httpx.get(on.url.rstrip("/") + "/.well-known/agent-card.json").json()
    assert card["capabilities"]["pushNotifications"] is True
    server = live(app(push=None))
    card = httpx.get(server.url.rstrip("/") + "/.well-known/agent-card.json").json()
    assert card["capabilities"]["pushNotifications"] is False
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "CreateTaskPushNotificationConfig",
        "params": {"taskId": "x", "url": "https://example.com/hook"},
    }
    error = httpx.post(server.url, json=body).json()["error"]
    assert (
        error["code"] == -32003 and error["data"][0]["reason"] == "PUSH_NOTIFICATION_NOT_SUPPORTED"
    )


async def test_the_0_3_methods_and_0_3_payloads(live: Any) -> None:
    hook = Webhook(live)
    server = live(app())

    def call(method: str, params: Any) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return httpx.post(server.url, json=body, timeout=30).json()

    old = {
        "kind": "message",
        "messageId": "o1",
        "role": "user",
        "parts": [{"kind": "text", "text": "hi"}],
    }
    task = call("message/send", {"message": old})["result"]
    assert task["status"]["state"] == "input-required"
    made = call(
        "tasks/pushNotificationConfig/set",
        {
            "taskId": task["id"],
            "pushNotificationConfig": {
                "id": "old-hook",
                "url": hook.url,
                "token": "tk",
                "authentication": {"schemes": ["Bearer"], "credentials": "c"},
            },
        },
    )["result"]
    assert made["taskId"] == task["id"]
    assert made["pushNotificationConfig"]["id"] == "old-hook"
    got = call(
        "tasks/pushNotificationConfig/get",
        {"id": task["id"], "pushNotificationConfigId": "old-hook"},
    )["result"]
    assert got["pushNotificationConfig"]["url"] == hook.url
    listed = call("tasks/pushNotificationConfig/list", {"id": task["id"]})["result"]
    assert [c["pushNotificationConfig"]["id"] for c in listed] == ["old-hook"]
    answer = {**old, "messageId": "o2", "taskId": task["id"], "contextId": task["contextId"]}
    answer["parts"] = [{"kind": "text", "text": "Ada"}]
    done = call("message/send", {"message": answer})["result"]
    assert done["status"]["state"] == "completed"
    await hook.wait_for(lambda body: body.get("status", {}).get("state") == "completed")
    bodies = hook.bodies()
    assert all(b["kind"] == "task" and b["id"] == task["id"] for b in bodies)
    assert [b["status"]["state"] for b in bodies] == ["working", "completed"]
    assert bodies[-1]["artifacts"][0]["parts"] == [{"kind": "text", "text": "Hello Ada."}]
    headers = hook.received[-1][0]
    assert headers["x-a2a-notification-token"] == "tk"
    assert headers["authorization"] == "Bearer c"
    deleted = call(
        "tasks/pushNotificationConfig/delete",
        {"id": task["id"], "pushNotificationConfigId": "old-hook"},
    )
    assert deleted["result"] is None
    assert call("tasks/pushNotificationConfig/list", {"id": task["id"]})["result"] == []


async def test_a_webhook_outlives_a_restart(live: Any, tmp_path: Path) -> None:
    hook = Webhook(live)
    path = str(tmp_path / "push.db")
    first = live(app(backend=SqliteBackend(path)))
    client = await sdk(first.url)
    task = await ask(client, "hi")
    await client.create_task_push_notification_config(
        pb.TaskPushNotificationConfig(task_id=task.id, id="durable", url=hook.url)
    )
    await client.close()
    first.stop()
    second = live(app(backend=SqliteBackend(path)))
    client = await sdk(second.url)
    try:
        ids = {"task_id": task.id, "context_id": task.context_id}
        [_done] = [
            r async for r in client.send_message(pb.SendMessageRequest(message=user("Cy", **ids)))
        ]
        await hook.wait_for(final_state("TASK_STATE_COMPLETED"))
    finally:
        await client.close()


async def test_a_client_that_only_listens_by_webhook_hears_a_timer_task_finish(live: Any) -> None:
    """returnImmediately, a webhook, and nobody polling: the run sleeps on a durable timer,
    the server wakes it when it is due, and the webhook hears the task complete."""
    hook = Webhook(live)
    server = live(app(graph=NAPPING))
    client = await sdk(server.url)
    try:
        webhook = pb.TaskPushNotificationConfig(url=hook.url)
        await ask(client, "nap", task_push_notification_config=webhook, return_immediately=True)
        await hook.wait_for(final_state("TASK_STATE_COMPLETED"))
    finally:
        await client.close()
    states = [b["statusUpdate"]["status"]["state"] for b in hook.bodies() if "statusUpdate" in b]
    assert states[0] == "TASK_STATE_WORKING" and states[-1] == "TASK_STATE_COMPLETED"


async def test_an_owed_notification_is_swept_once_by_two_apps_on_one_store(
    live: Any, tmp_path: Path
) -> None:
    """The server that ran the task died before POSTing its final status (its sender drops
    everything): two apps sweeping the same store deliver it once, with the delivery id, and
    it is settled (a later sweep sends nothing)."""
    hook = Webhook(live)
    path = str(tmp_path / "owed.db")
    dead = app(backend=SqliteBackend(path), graph=ECHO)
    dead.state.a2a.push.send = lambda *args, **kwargs: None  # died before any POST
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "nap"}]}
    webhook = {"url": hook.url, "token": "t0k"}
    answer = await dead.state.a2a.send(
        {"message": message, "configuration": {"taskPushNotificationConfig": webhook}}
    )
    task_id = answer["task"]["id"]
    assert answer["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert hook.received == []
    one = app(backend=SqliteBackend(path), graph=ECHO).state.a2a
    two = app(backend=SqliteBackend(path), graph=ECHO).state.a2a
    await asyncio.gather(one.sweep_push(), two.sweep_push())
    assert [body["statusUpdate"]["status"]["state"] for body in hook.bodies()] == [
        "TASK_STATE_COMPLETED"
    ]
    headers = hook.received[0][0]
    assert headers["x-tensorsketch-delivery"] == f"{task_id}:TASK_STATE_COMPLETED"
    assert headers["x-a2a-notification-token"] == "t0k"
    assert await one.sweep_push() == 0 and await two.sweep_push() == 0
    assert await one.store.owed() == {}
    assert len(hook.received) == 1
