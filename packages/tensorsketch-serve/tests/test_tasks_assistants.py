"""Assistants through the task API (``/assistants...`` and ``assistant_id`` on runs) on
SQLite, PostgreSQL and Redis: versions select the configuration a run executes with, the run
records which version it was, rollback brings an earlier one back, metadata filters the list,
and every mistake is a 4xx naming what was wrong. Real uvicorn, real httpx clients."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import task_graphs

from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.serve import task_app
from tensorsketch.testing.services import private_name

STORES = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("redis", marks=pytest.mark.redis),
]


@pytest.fixture(params=STORES)
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Any]]:
    """Backends on a store private to this test, dropped after."""
    if request.param == "sqlite":
        yield lambda: SqliteBackend(tmp_path / "runs.db", lease_ttl=2.0)
        return
    pytest.importorskip("tensorsketch.runtime.backends.postgres", reason="needs backends")
    name = private_name("asst")
    if request.param == "postgres":
        from tensorsketch.runtime.backends.postgres import PostgresBackend
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


@pytest.fixture
def client(live: Any, make_backend: Callable[[], Backend]) -> Iterator[httpx.Client]:
    """A client of the task API of :func:`task_graphs.configurable_agent` over uvicorn."""
    runner = AsyncRunner(
        task_graphs.configurable_agent(), backend=make_backend(), poll_interval=0.05
    )
    server = live(task_app(runner, drain_timeout=1.0))
    with httpx.Client(base_url=server.url, timeout=30) as http:
        yield http
    server.call(runner.aclose())
    server.call(runner.backend.aclose())
    server.stop()


def _answer(client: httpx.Client, **body: Any) -> tuple[str, dict[str, Any]]:
    done = client.post("/runs", json={"input": {"query": "hi"}, **body})
    assert done.status_code == 200, done.text
    record: dict[str, Any] = done.json()
    return record["output"]["output"], record


def test_versions_choose_what_a_run_executes_with_and_rollback_restores_one(
    client: httpx.Client,
) -> None:
    created = client.post(
        "/assistants",
        json={"name": "support", "config": {"system_prompt": "be brief", "tools": ["lookup"]}},
    )
    assert created.status_code == 201, created.text
    first = created.json()
    assert (first["version"], first["latest_version"]) == (1, 1)
    assert first["id"].startswith("asst_")

    answer, record = _answer(client, assistant_id="support")  # by name
    assert answer == "system=be brief tools=lookup"
    assert record["assistant"]["id"] == first["id"]
    assert (record["assistant"]["name"], record["assistant"]["version"]) == ("support", 1)

    updated = client.patch(
        f"/assistants/{first['id']}", json={"config": {"system_prompt": "be kind", "tools": []}}
    )
    assert updated.status_code == 200, updated.text
    assert (updated.json()["version"], updated.json()["latest_version"]) == (2, 2)
    answer, record = _answer(client, assistant_id=first["id"])  # by id
    assert answer == "system=be kind tools="
    assert record["assistant"]["version"] == 2

    rolled = client.post(f"/assistants/{first['id']}/rollback", json={"version": 1})
    assert rolled.status_code == 200, rolled.text
    assert (rolled.json()["version"], rolled.json()["latest_version"]) == (1, 2)
    answer, record = _answer(client, assistant_id="support")
    assert answer == "system=be brief tools=lookup"
    assert record["assistant"]["version"] == 1
    versions = client.get("/assistants/support/versions").json()["versions"]
    assert [v["version"] for v in versions] == [1, 2]
    assert versions[1]["config"] == {"system_prompt": "be kind", "tools": []}

    answer, record = _answer(client)  # no assistant: the graph as built
    assert answer == "system=default prompt tools=lookup,weather"
    assert record["assistant"] is None
    # The run's record, read back later, still says which version it ran with.
    assert client.get("/assistants/support").json()["config"]["system_prompt"] == "be brief"


def test_the_list_filters_on_metadata_in_the_store(client: httpx.Client) -> None:
    for name, owner in (("a", "alice"), ("b", "bob"), ("c", "alice")):
        made = client.post("/assistants", json={"name": name, "metadata": {"owner": owner}})
        assert made.status_code == 201, made.text
    listed = client.get("/assistants", params={"metadata": "owner=alice"}).json()["assistants"]
    assert [a["name"] for a in listed] == ["a", "c"]
    page = client.get("/assistants", params={"limit": 2}).json()
    rest = client.get("/assistants", params={"cursor": page["next_cursor"]}).json()
    assert [a["name"] for a in page["assistants"] + rest["assistants"]] == ["a", "b", "c"]
    assert client.get("/tasks").json()["tasks"] == []  # assistants are not runs


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "words"),
    [
        ("POST", "/assistants", {"name": "x", "config": {"tools": ["rm"]}}, 400, "lookup"),
        ("POST", "/assistants", {"name": "x", "config": {"temperature": 1}}, 400, "temperature"),
        ("POST", "/assistants", {"name": "asst_1"}, 400, "asst_"),
        ("POST", "/assistants", {"config": {}}, 400, "name"),
        ("POST", "/assistants", {"name": "x", "owner": "me"}, 400, "owner"),
        ("POST", "/assistants", {"name": "taken"}, 409, "already exists"),
        # Once a 500: the second create's metadata hit the first's label rows.
        ("POST", "/assistants", {"name": "taken", "metadata": {"owner": "me"}}, 409, "exists"),
        ("GET", "/assistants/nobody", None, 404, "no assistant"),
        ("PATCH", "/assistants/taken", {"description": "no config"}, 400, "config"),
        ("POST", "/assistants/taken/rollback", {"version": 7}, 404, "no version 7"),
        ("POST", "/assistants/taken/rollback", {"version": "1"}, 400, "version"),
        ("POST", "/tasks", {"input": {"query": "x"}, "assistant_id": "nobody"}, 404, "nobody"),
        ("POST", "/tasks", {"input": {"query": "x"}, "assistant_id": 3}, 400, "assistant_id"),
        ("GET", "/assistants?limit=0", None, 400, "limit"),
    ],
)
def test_mistakes_are_4xx_that_name_what_was_wrong(
    client: httpx.Client, method: str, path: str, body: Any, status: int, words: str
) -> None:
    taken = client.post("/assistants", json={"name": "taken", "metadata": {"owner": "me"}})
    assert taken.status_code == 201, taken.text
    answered = client.request(method, path, json=body)
    assert answered.status_code == status, answered.text
    assert words in answered.json()["error"]["message"]
