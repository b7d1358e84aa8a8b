"""Completion webhooks of the task API on SQLite, PostgreSQL and Redis: a run names a URL,
its terminal record is POSTed there signed (HMAC-SHA256 with the deployment's secret),
retried with backoff after failures, and the outcome recorded on the run; loopback and
private addresses are refused unless allowed (these tests allow 127.0.0.1 explicitly).
A real receiver on uvicorn, real httpx clients."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.serve import RunWebhooks, sign_webhook, task_app
from tensorsketch.testing.runs import multitask_graph
from tensorsketch.testing.services import private_name

SECRET = "s3cret-for-the-webhook-tests"
STORES = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("redis", marks=pytest.mark.redis),
]


@pytest.fixture(params=STORES)
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    if request.param == "sqlite":
        yield lambda: SqliteBackend(tmp_path / "runs.db", lease_ttl=2.0)
        return
    pytest.importorskip("tensorsketch.runtime.backends.postgres", reason="needs backends")
    name = private_name("wh")
    if request.param == "postgres":
        from tensorsketch.runtime.backends.postgres import (
            PostgresBackend,
        )
        from tensorsketch.testing import postgres_server

        dsn = postgres_server.reachable()
        yield lambda: PostgresBackend(dsn, schema=name, lease_ttl=2.0)
        postgres_server.drop_schema(dsn, name)
        return
    from tensorsketch.runtime.backends.redis import RedisBackend
    from tensorsketch.testing import redis_server

    url = redis_server.reachable()
    yield lambda: RedisBackend(url, prefix=name, lease_ttl=2.0)
    redis_server.delete_prefix(url, name)


class Receiver:
    """A webhook receiver: records every POST; answers 503 to the first ``fail`` of them."""

    def __init__(self, fail: int = 0) -> None:
        self.fail = fail
        self.seen: list[tuple[float, dict[str, str], bytes]] = []

        async def hook(request: Request) -> Response:
            self.seen.append((time.time(), dict(request.headers), await request.body()))
            return Response(status_code=503 if len(self.seen) <= self.fail else 204)

        self.app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])


@pytest.fixture
def serve(live: Any, make_backend: Callable[[], Backend]) -> Iterator[Callable[..., Any]]:
    made: list[tuple[Any, AsyncRunner]] = []

    def start(**app: Any) -> Any:
        runner = AsyncRunner(
            multitask_graph(), backend=make_backend(), timer_refresh=0.5, poll_interval=0.05
        )
        server = live(task_app(runner, drain_timeout=1.0, **app))
        made.append((server, runner))
        return server

    yield start
    for server, runner in made:
        server.call(runner.aclose())
        server.call(runner.backend.aclose())
        server.stop()


def _delivered(client: httpx.Client, task_id: str) -> dict[str, Any]:
    for _ in range(400):
        record: dict[str, Any] = client.get(f"/tasks/{task_id}").json()
        if record.get("webhook_delivery"):
            return record
        time.sleep(0.025)
    raise AssertionError(f"task {task_id}'s webhook was never recorded: {record}")


def test_a_finished_run_is_posted_signed_after_retries_and_recorded(live: Any, serve: Any) -> None:
    receiver = Receiver(fail=2)
    hook = live(receiver.app)
    options = RunWebhooks(secret=SECRET, allowed_hosts=("127.0.0.1",), backoff=0.2)
    server = serve(webhooks=options)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        url = f"{hook.url}/hook"
        done = client.post("/runs", json={"input": {"tag": "w"}, "webhook": url}).json()
        assert done["status"] == "succeeded" and done["webhook"] == url
        record = _delivered(client, done["id"])
    delivery = record["webhook_delivery"]
    assert delivery["delivered"] is True and delivery["attempts"] == 3
    assert delivery["status"] == 204
    assert len(receiver.seen) == 3  # two 503s, then delivered
    gaps = [b[0] - a[0] for a, b in zip(receiver.seen, receiver.seen[1:], strict=False)]
    assert gaps[0] >= 0.18 and gaps[1] >= 0.36  # backoff doubles
    _, headers, body = receiver.seen[-1]
    stamp = headers["x-tensorsketch-timestamp"]
    expected = (
        "sha256="
        + hmac.new(SECRET.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    )
    assert headers["x-tensorsketch-signature"] == expected == sign_webhook(SECRET, stamp, body)
    assert abs(int(stamp) - time.time()) < 60
    assert headers["x-tensorsketch-event"] == "run.succeeded"
    assert headers["x-tensorsketch-run"] == done["id"]
    payload = json.loads(body)
    assert payload["event"] == "run.succeeded"
    assert payload["run"]["id"] == done["id"] and payload["run"]["output"]["ticks"][-1] == "w2"
    # A signature made with another secret does not match.
    assert sign_webhook("another-secret-entirely", stamp, body) != expected


def test_a_cancelled_run_is_delivered_and_a_receiver_that_stays_down_is_recorded(
    live: Any, serve: Any
) -> None:
    receiver = Receiver(fail=100)
    hook = live(receiver.app)
    options = RunWebhooks(secret=SECRET, allowed_hosts=("127.0.0.0/8",), attempts=2, backoff=0.05)
    server = serve(webhooks=options)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        task = client.post(
            "/tasks", json={"input": {"tag": "x"}, "webhook": f"{hook.url}/hook"}
        ).json()
        client.post(f"/tasks/{task['id']}/cancel")
        record = _delivered(client, task["id"])
    delivery = record["webhook_delivery"]
    assert delivery["delivered"] is False and delivery["attempts"] == 2
    assert delivery["status"] == 503 and delivery["problem"] == "HTTP 503"
    assert len(receiver.seen) == 2
    assert json.loads(receiver.seen[0][2])["event"] == "run.cancelled"


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://127.0.0.1:9/hook", "points at 127.0.0.1, which is not a public address"),
        ("http://10.1.2.3/hook", "points at 10.1.2.3, which is not a public address"),
        ("http://[::1]/hook", "points at ::1, which is not a public address"),
        ("ftp://example.com/hook", "must be an http(s) URL"),
    ],
)
def test_a_private_or_loopback_webhook_is_a_400_unless_allowed(
    serve: Any, url: str, words: str
) -> None:
    server = serve(webhooks=RunWebhooks(secret=SECRET))
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for route in ("/tasks", "/runs"):
            refused = client.post(route, json={"input": {"tag": "a"}, "webhook": url})
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
            assert error["param"] == "webhook" and words in error["message"]
        assert client.get("/tasks").json()["tasks"] == []  # nothing was stored


def test_a_webhook_on_a_server_without_webhooks_is_a_400(serve: Any) -> None:
    server = serve()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        refused = client.post(
            "/tasks", json={"input": {"tag": "a"}, "webhook": "https://example.com/hook"}
        )
        assert refused.status_code == 400
        assert "task_app(webhooks=RunWebhooks(secret=...))" in refused.json()["error"]["message"]


def test_run_webhooks_refuses_a_short_secret() -> None:
    with pytest.raises(ValueError, match="at least 16 characters"):
        RunWebhooks(secret="short")


@pytest.mark.asyncio
async def test_two_servers_sweeping_one_owed_webhook_deliver_it_once(
    live: Any, make_backend: Callable[[], Backend]
) -> None:
    """A finished run whose webhook nobody delivered (its server died) is in the store's
    undelivered index; two servers' senders sweep it at the same moment: the claim lets one
    of them POST, once, and the outcome takes it out of the index."""
    import asyncio

    from tensorsketch.runs import RunRecord, run_store
    from tensorsketch.serve._run_webhooks import RunWebhookSender
    from tensorsketch.serve._tasks import _record_json

    receiver = Receiver()
    hook = live(receiver.app)
    options = RunWebhooks(secret=SECRET, allowed_hosts=("127.0.0.1",), backoff=0.05)
    one, two = make_backend(), make_backend()
    try:
        store = run_store(one)
        owed = RunRecord(
            run_id=private_name("run"),
            thread_id=private_name("t"),
            status="succeeded",
            webhook=f"{hook.url}/hook",
        )
        await store.create(owed)
        senders = [
            RunWebhookSender(options, run_store(backend), _record_json, f"host:{n}:x")
            for n, backend in enumerate((one, two))
        ]
        started = await asyncio.gather(*(s.sweep() for s in senders))
        assert sum(started) >= 1
        for sender in senders:
            await sender.aclose(grace=10.0)
        record = await store.get(owed.run_id)
        assert record is not None and record.webhook_delivery is not None
        assert record.webhook_delivery["delivered"] and record.owner is None, record
        assert len(receiver.seen) == 1, receiver.seen
        headers = receiver.seen[0][1]
        assert headers["x-tensorsketch-delivery"] == f"{owed.run_id}:run.succeeded"
        assert owed.run_id not in {r.run_id for r in await store.undelivered(1000)}
        assert await asyncio.gather(*(s.sweep() for s in senders)) == [0, 0]
    finally:
        await one.aclose()
        await two.aclose()
