"""A2A tasks on the PostgreSQL and Redis backends (the SQLite one is in test_a2a_app.py): an
approval task is input-required on one server, and a new server over the same store — new
app, new agent, new backend object — lists it, reads it and continues it. Skipped where the
backends distribution is not installed (this distribution's own nox session)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import a2a_agents as agents  # type: ignore[import-not-found]  # conftest registers it
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb

from tensorsketch.serve.a2a import AgentCard, a2a_app
from tensorsketch.testing.services import private_name

pytest.importorskip("tensorsketch.runtime.backends.postgres", reason="needs tensorsketch-backends")


@pytest.fixture
def postgres() -> Iterator[Callable[[], Any]]:
    """Makes PostgreSQL backends on one schema private to this test (dropped after)."""
    from tensorsketch.runtime.backends.postgres import PostgresBackend
    from tensorsketch.testing import postgres_server

    dsn = postgres_server.reachable()
    schema = private_name("a2a")
    yield lambda: PostgresBackend(dsn, schema=schema)
    postgres_server.drop_schema(dsn, schema)


@pytest.fixture
def redis() -> Iterator[Callable[[], Any]]:
    """Makes Redis backends on one key prefix private to this test (deleted after)."""
    from tensorsketch.runtime.backends.redis import RedisBackend
    from tensorsketch.testing import redis_server

    url = redis_server.reachable()
    prefix = private_name("a2a")
    yield lambda: RedisBackend(url, prefix=prefix)
    redis_server.delete_prefix(url, prefix)


async def _ask(url: str, text: str, **ids: str) -> pb.Task:
    client = await ClientFactory(ClientConfig(streaming=False)).create_from_url(url)
    try:
        message = pb.Message(
            message_id=uuid.uuid4().hex, role=pb.ROLE_USER, parts=[pb.Part(text=text)], **ids
        )
        [response] = [r async for r in client.send_message(pb.SendMessageRequest(message=message))]
        return response.task
    finally:
        await client.close()


@pytest.mark.parametrize(
    "store",
    [
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ],
)
async def test_an_approval_task_survives_a_restart(
    live: Any, store: str, request: pytest.FixtureRequest
) -> None:
    agents.REFUNDS.clear()
    make_backend = request.getfixturevalue(store)
    card = AgentCard(name="support")
    backend = make_backend()
    first = live(a2a_app(agents.make_agent(), card=card, backend=backend))
    task = await _ask(first.url, "refund please")
    assert pb.TaskState.Name(task.status.state) == "TASK_STATE_INPUT_REQUIRED"
    first.call(backend.aclose())  # its connections live on that server's loop
    first.stop()

    backend = make_backend()
    second = live(a2a_app(agents.make_agent(), card=card, backend=backend))
    client = await ClientFactory(ClientConfig(streaming=False)).create_from_url(second.url)
    try:
        listed = await client.list_tasks(pb.ListTasksRequest())
        assert [t.id for t in listed.tasks] == [task.id]
        again = await client.get_task(pb.GetTaskRequest(id=task.id))
        assert pb.TaskState.Name(again.status.state) == "TASK_STATE_INPUT_REQUIRED"
    finally:
        await client.close()
    done = await _ask(second.url, "approve", task_id=task.id, context_id=task.context_id)
    assert pb.TaskState.Name(done.status.state) == "TASK_STATE_COMPLETED"
    assert done.artifacts[0].parts[0].text == "Done: order 7 refunded."
    assert agents.REFUNDS == [{"order": 7}]
    second.call(backend.aclose())
