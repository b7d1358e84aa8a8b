"""What an A2A push sweep reads, and a claim left by a sender that died.

A sweep reads only the notifications still owed: once delivered, a notification is out of
the outbox the sweep lists (counted in rows the backend returns, on every store). A sender
claims one attempt at a time, so a claim left by a dead sender blocks the delivery for one
attempt's claim, not for every attempt and backoff it had left.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tensorsketch import END, START, Context, Graph, InMemoryBackend, Node, Schema, SqliteBackend
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.serve.a2a import AgentCard, PushNotifications, a2a_app
from tensorsketch.testing.services import private_name

COMPLETED = "TASK_STATE_COMPLETED"
#: Many attempts and long backoffs: a claim held for all of them would last minutes.
PATIENT = PushNotifications(allowed_hosts=("127.0.0.1",), attempts=8, backoff=4.0, timeout=1.5)


class State(Schema):
    prompt: str = ""
    answer: str = ""


class Echo(Node):
    class In(Schema):
        prompt: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(answer=inp.prompt)


ECHO = Graph(State).add(Echo).edge(START, "Echo").edge("Echo", END).compile()


def _app(backend: Backend, push: PushNotifications = PATIENT) -> Any:
    return a2a_app(
        ECHO,
        card=AgentCard(name="echo", description="Echoes."),
        backend=backend,
        to_input=lambda messages: {"prompt": messages[-1].text},
        to_reply=lambda state: state.answer,
        push=push,
    )


class Hook:
    """A webhook on a live uvicorn: the delivery id of every final status POSTed."""

    def __init__(self, live: Any) -> None:
        self.finals: list[str | None] = []

        async def hook(request: Request) -> Response:
            body = await request.json()
            if body.get("statusUpdate", {}).get("status", {}).get("state") == COMPLETED:
                self.finals.append(request.headers.get("x-tensorsketch-delivery"))
            return Response(status_code=204)

        server = live(Starlette(routes=[Route("/hook", hook, methods=["POST"])]))
        self.url = server.url.rstrip("/") + "/hook"

    async def wait_for(self, count: int, seconds: float = 30) -> None:
        for _ in range(int(seconds / 0.02)):
            if len(self.finals) >= count:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"the webhook got {self.finals}, not {count} final statuses")


async def _send(service: Any, url: str, text: str) -> str:
    message = {"messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}]}
    params = {"message": message, "configuration": {"taskPushNotificationConfig": {"url": url}}}
    answer = await service.send(params)
    assert answer["task"]["status"]["state"] == COMPLETED
    return str(answer["task"]["id"])


#: Backend reads and how many rows (entries, events, checkpoints) each returned.
_READS: dict[str, Callable[[Any], int]] = {
    "list_effects": len,
    "lookup_effect": lambda found: int(found is not None),
    "lookup_effects": len,
    "read_events": len,
    "read_chain": len,
    "latest_checkpoint": lambda found: int(found is not None),
    "list_threads": len,
}


def _count_reads(backend: Backend) -> list[tuple[str, int]]:
    """Wrap ``backend``'s reads (on the object); the list fills with ``(read, rows)``."""
    seen: list[tuple[str, int]] = []
    for name, rows in _READS.items():
        setattr(backend, name, _counted(getattr(backend, name), name, rows, seen))
    return seen


def _counted(read: Any, name: str, rows: Callable[[Any], int], seen: list[tuple[str, int]]) -> Any:
    @functools.wraps(read)
    async def counted(*args: Any, **kwargs: Any) -> Any:
        found = await read(*args, **kwargs)
        seen.append((name, rows(found)))
        return found

    return counted


@pytest.fixture(
    params=[
        "memory",
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """Makes backends on one store private to this test."""
    if request.param == "memory":
        shared = InMemoryBackend()
        yield lambda: shared
    elif request.param == "sqlite":
        yield lambda: SqliteBackend(str(tmp_path / "outbox.db"))
    elif request.param == "postgres":
        pytest.importorskip("tensorsketch.runtime.backends.postgres")
        from tensorsketch.runtime.backends.postgres import PostgresBackend
        from tensorsketch.testing import postgres_server

        dsn = postgres_server.reachable()
        schema = private_name("a2aoutbox")
        yield lambda: PostgresBackend(dsn, schema=schema)
        postgres_server.drop_schema(dsn, schema)
    else:
        pytest.importorskip("tensorsketch.runtime.backends.redis")
        from tensorsketch.runtime.backends.redis import RedisBackend
        from tensorsketch.testing import redis_server

        url = redis_server.reachable()
        prefix = private_name("a2aoutbox")
        yield lambda: RedisBackend(url, prefix=prefix)
        redis_server.delete_prefix(url, prefix)


async def test_a_sweep_after_delivered_notifications_reads_nothing(
    live: Any, make_backend: Callable[[], Any]
) -> None:
    """Every task's final notification was delivered: a sweep (this server's, and a new
    server's over the same store) reads no row at all."""
    hook = Hook(live)
    backend = make_backend()
    service = _app(backend).state.a2a
    for n in range(5):
        await _send(service, hook.url, f"hello {n}")
    await hook.wait_for(5)
    for _ in range(200):  # the POST answered; its removal from the outbox follows
        if not await service.store.owed():
            break
        await asyncio.sleep(0.02)
    reads = _count_reads(backend)
    assert await service.sweep_push() == 0
    assert sum(rows for _name, rows in reads) == 0, reads
    other = make_backend()
    later = _app(other).state.a2a
    reads = _count_reads(other)
    assert await later.sweep_push() == 0
    assert sum(rows for _name, rows in reads) == 0, reads
    assert len(hook.finals) == 5


async def test_a_claim_left_by_a_dead_sender_blocks_one_attempt_only(
    live: Any, tmp_path: Path
) -> None:
    """A sender claimed a task's final notification and died before POSTing it (its claim
    stays in the store, as a killed process leaves it). Another server delivers it once that
    one attempt's claim lapses — not after the claim of every attempt and backoff the dead
    sender had left (8 attempts, backoffs doubling from 4 s: over 8 minutes)."""
    hook = Hook(live)
    path = str(tmp_path / "claimed.db")
    dead = _app(SqliteBackend(path)).state.a2a
    dead.push.send = lambda *args, **kwargs: None  # it dies before any POST...
    task_id = await _send(dead, hook.url, "hi")
    delivery, config = f"{task_id}:{COMPLETED}", task_id  # a config's id defaults to the task's
    # ... after claiming it, as a sender does before its first attempt
    assert await dead.store.claim_push(delivery, config, "elsewhere:1:dead", PATIENT)
    alive = _app(SqliteBackend(path)).state.a2a
    await alive.sweep_push()
    assert hook.finals == []  # held: not sent while the claim lasts
    for _ in range(200):  # it lapses after PATIENT.claim_seconds (3 s)
        await alive.sweep_push()
        if hook.finals:
            break
        await asyncio.sleep(0.1)
    assert hook.finals == [f"{task_id}:{COMPLETED}"]
    assert not await alive.store.owed()


async def test_a_sender_whose_claim_was_taken_between_attempts_stops(live: Any) -> None:
    """A sender's claim covers one attempt: when another sender took the delivery over
    during its backoff, it makes no further attempt and leaves the notification owed (to
    the sender that holds it now)."""
    posts: list[str | None] = []

    async def failing(request: Request) -> Response:
        posts.append(request.headers.get("x-tensorsketch-delivery"))
        return Response(status_code=503)

    url = live(Starlette(routes=[Route("/hook", failing, methods=["POST"])])).url + "/hook"
    slow = PushNotifications(allowed_hosts=("127.0.0.1",), attempts=3, backoff=2.0, timeout=0.2)
    service = _app(InMemoryBackend(), slow).state.a2a
    service.push.send = lambda *args, **kwargs: None  # this test drives the sender itself
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    params = {"message": message, "configuration": {"taskPushNotificationConfig": {"url": url}}}
    task = (await service.send(params))["task"]
    delivery, target = f"{task['id']}:{COMPLETED}", (await service.store.get(task["id"])).push
    [config] = target.values()
    sending = asyncio.ensure_future(service.push.deliver_owed(delivery, config, {"x": 1}))
    for _ in range(500):
        if posts:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(2 * slow.claim_seconds)  # its claim (one attempt) has lapsed...
    other = PushNotifications(timeout=5.0)  # another server's, whose attempt lasts longer
    assert await service.store.claim_push(delivery, config.id, "another:1:sender", other)
    assert await sending is False  # ... and its retry found the delivery taken: it stopped
    assert posts == [delivery]
    assert await service.store.is_owed(delivery, config.id)
