"""The task API keeps a webhook sender's claim internal: while a finished run's completion
webhook is being delivered, the sender holds the run as its ``owner`` in the store, but
``GET /tasks/{id}`` shows a finished run without an owner or a lease."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.serve import RunWebhooks, task_app
from tensorsketch.testing.runs import multitask_graph

SECRET = "s3cret-for-the-webhook-tests"


def test_a_finished_run_being_delivered_shows_no_owner(live: Any, tmp_path: Path) -> None:
    posts: list[float] = []

    async def hook(request: Request) -> Response:
        posts.append(time.time())
        return Response(status_code=503)  # retried after a long backoff: the claim stays

    receiver = live(Starlette(routes=[Route("/hook", hook, methods=["POST"])]))
    runner = AsyncRunner(multitask_graph(), backend=SqliteBackend(tmp_path / "runs.db"))
    options = RunWebhooks(secret=SECRET, allowed_hosts=("127.0.0.1",), attempts=2, backoff=30)
    server = live(task_app(runner, webhooks=options, drain_timeout=1.0))
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            url = f"{receiver.url}/hook"
            done = client.post("/runs", json={"input": {"tag": "w"}, "webhook": url}).json()
            assert done["status"] == "succeeded"
            for _ in range(400):
                if posts:
                    break
                time.sleep(0.025)
            assert posts, "the webhook was never POSTed"
            stored = server.call(runner.store.get(done["id"]))
            assert stored.owner == runner.owner  # the sender's claim, in the store
            shown = client.get(f"/tasks/{done['id']}").json()
            assert shown["status"] == "succeeded" and shown["webhook_delivery"] is None
            assert shown["owner"] is None and shown["lease_expires_at"] is None
            listed = client.get("/tasks").json()["tasks"]
            assert [(t["owner"], t["lease_expires_at"]) for t in listed] == [(None, None)]
    finally:
        server.call(runner.aclose())
        server.call(runner.backend.aclose())
        server.stop()


def test_the_claim_is_given_back_in_the_store_once_delivered(live: Any, tmp_path: Path) -> None:
    """What ``GET`` no longer shows is checked where it lives: the record that stores the
    delivery's outcome has no owner or lease left."""

    async def hook(request: Request) -> Response:
        return Response(status_code=204)

    receiver = live(Starlette(routes=[Route("/hook", hook, methods=["POST"])]))
    runner = AsyncRunner(multitask_graph(), backend=SqliteBackend(tmp_path / "runs.db"))
    options = RunWebhooks(secret=SECRET, allowed_hosts=("127.0.0.1",))
    server = live(task_app(runner, webhooks=options, drain_timeout=1.0))
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            url = f"{receiver.url}/hook"
            done = client.post("/runs", json={"input": {"tag": "w"}, "webhook": url}).json()
            for _ in range(400):
                stored = server.call(runner.store.get(done["id"]))
                if stored.webhook_delivery is not None:
                    break
                time.sleep(0.025)
            assert stored.webhook_delivery is not None and stored.webhook_delivery["delivered"]
            assert stored.owner is None and stored.lease_expires_at is None
    finally:
        server.call(runner.aclose())
        server.call(runner.backend.aclose())
        server.stop()
