"""The task API's memory and session routes over a real uvicorn server, with httpx: every
route, conditional writes racing, the errors bad requests get, authentication, and a
schemathesis run over the extended OpenAPI with no 5xx."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
import task_graphs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from tensorsketch.memory import HashingEmbedder, InMemorySessionStore, InMemoryStore
from tensorsketch.memory.sqlite import SqliteStore
from tensorsketch.memory.sqlite_sessions import SqliteSessionStore
from tensorsketch.messages import user
from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.serve import task_app


def _server(live: Any, tmp_path: Path, **app: Any) -> Any:
    runner = AsyncRunner(task_graphs.work_graph(), backend=InMemoryBackend())
    memory = SqliteStore(tmp_path / "memory.db", embedder=HashingEmbedder())
    sessions = SqliteSessionStore(tmp_path / "sessions.db")
    server = live(task_app(runner, memory=memory, sessions=sessions, drain_timeout=1.0, **app))
    server.memory, server.sessions = memory, sessions
    return server


def test_memory_items_put_get_list_search_delete(live: Any, tmp_path: Path) -> None:
    server = _server(live, tmp_path)
    ns = ["users", "ana", "prefs"]
    with httpx.Client(base_url=server.url, timeout=30) as client:
        put = client.put(
            "/memory/items",
            json={"namespace": ns, "key": "lang", "value": {"content": "answers in Portuguese"}},
        )
        assert put.status_code == 200 and put.json() == {"rev": 1}
        client.put(
            "/memory/items",
            json={"namespace": ns, "key": "tea", "value": {"content": "green tea, never coffee"}},
        )
        got = client.get(
            "/memory/items", params=[("namespace", label) for label in ns] + [("key", "lang")]
        )
        assert got.status_code == 200
        assert got.json()["value"] == {"content": "answers in Portuguese"}
        assert got.json()["rev"] == 1 and got.json()["namespace"] == ns
        listed = client.post("/memory/list", json={"namespace_prefix": ["users"], "limit": 1})
        assert [i["key"] for i in listed.json()["items"]] == ["lang"]
        more = client.post(
            "/memory/list",
            json={"namespace_prefix": ["users"], "cursor": listed.json()["next_cursor"]},
        )
        assert [i["key"] for i in more.json()["items"]] == ["tea"]
        found = client.post(
            "/memory/search",
            json={"namespace_prefix": ["users", "ana"], "query": "which tea", "limit": 1},
        )
        assert [i["key"] for i in found.json()["items"]] == ["tea"]
        assert found.json()["items"][0]["score"] is not None
        spaces = client.post("/memory/namespaces", json={})
        assert spaces.json() == {"namespaces": [ns]}
        params = [("namespace", label) for label in ns] + [("key", "lang")]
        assert client.delete("/memory/items", params=params).json() == {"deleted": True}
        assert client.delete("/memory/items", params=params).json() == {"deleted": False}
        missing = client.get("/memory/items", params=params)
        assert missing.status_code == 404 and "no item 'lang'" in missing.json()["error"]["message"]


def test_a_conditional_write_that_loses_is_a_409_naming_the_revision(
    live: Any, tmp_path: Path
) -> None:
    server = _server(live, tmp_path)

    async def race() -> list[int]:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            answers = await asyncio.gather(
                *(
                    client.put(
                        "/memory/items",
                        json={"namespace": ["n"], "key": "k", "value": i, "if_rev": 0},
                    )
                    for i in range(8)
                )
            )
            return [a.status_code for a in answers]

    statuses = asyncio.run(race())
    assert sorted(statuses) == [200] + [409] * 7
    with httpx.Client(base_url=server.url, timeout=30) as client:
        stale = client.put(
            "/memory/items", json={"namespace": ["n"], "key": "k", "value": 9, "if_rev": 5}
        )
        assert stale.status_code == 409
        assert "1" in stale.json()["error"]["message"]


def test_sessions_append_read_list_clear(live: Any, tmp_path: Path) -> None:
    server = _server(live, tmp_path)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        turn = {
            "messages": [
                {"role": "user", "content": "I'm Ana."},
                {"role": "assistant", "content": "Hi Ana."},
            ],
            "turn": "t1",
        }
        assert client.post("/sessions/support:ana", json=turn).json() == {"length": 2}
        assert client.post("/sessions/support:ana", json=turn).json() == {"length": 2}
        asyncio.run(server.sessions.append("support:bob", [user("hey")]))
        read = client.get("/sessions/support:ana", params={"last": 1}).json()
        assert read["session_id"] == "support:ana"
        assert [(e["seq"], e["turn"], e["message"]["content"]) for e in read["entries"]] == [
            (1, "t1", "Hi Ana.")
        ]
        assert client.get("/sessions", params={"prefix": "support:"}).json() == {
            "sessions": ["support:ana", "support:bob"]
        }
        assert client.delete("/sessions/support:ana").json() == {"removed": 2}
        assert client.get("/sessions/support:ana").json()["entries"] == []


BAD = [
    (
        "PUT",
        "/memory/items",
        {"json": {"namespace": "users", "key": "k", "value": 1}},
        "list of strings",
    ),
    ("PUT", "/memory/items", {"json": {"namespace": ["u"], "key": "k"}}, "`value` is required"),
    (
        "PUT",
        "/memory/items",
        {"json": {"namespace": ["u"], "key": "k", "value": 1, "x": 1}},
        "unknown field",
    ),
    ("PUT", "/memory/items", {"json": {"namespace": ["u"], "key": "k", "value": None}}, "delete()"),
    (
        "PUT",
        "/memory/items",
        {"json": {"namespace": ["u"], "key": "k", "value": 1, "ttl": "x"}},
        "`ttl`",
    ),
    ("GET", "/memory/items", {"params": {"key": "k"}}, "at least one label"),
    ("GET", "/memory/items", {"params": {"namespace": "u"}}, "`key` once"),
    ("GET", "/memory/items", {"params": {"namespace": "u", "key": "k", "q": "1"}}, "unknown query"),
    (
        "DELETE",
        "/memory/items",
        {"params": {"namespace": "u", "key": "k", "if_rev": "x"}},
        "integer",
    ),
    ("POST", "/memory/list", {"json": {"limit": 0}}, "limit"),
    ("POST", "/memory/list", {"json": {"cursor": "garbage"}}, "cursor"),
    ("POST", "/memory/search", {"json": {"query": 3}}, "`query` must be a string"),
    ("POST", "/memory/search", {"json": {"filter": [1]}}, "filter"),
    ("POST", "/sessions/s", {"json": {"messages": [{"role": "robot"}]}}, "not a list of messages"),
    ("POST", "/sessions/s", {"json": {}}, "`messages` is required"),
    ("POST", "/sessions/s", {"json": {"messages": [], "turn": 5}}, "`turn` must be a string"),
    ("GET", "/sessions/s", {"params": {"last": "-1"}}, "non-negative"),
    ("GET", "/sessions/s", {"params": {"last": "1785042627169600667721282879488"}}, "64 bits"),
    (
        "DELETE",
        "/memory/items",
        {"params": {"namespace": "u", "key": "k", "if_rev": str(1 << 70)}},
        "64 bits",
    ),
    (
        "PUT",
        "/memory/items",
        {"json": {"namespace": ["u"], "key": "k", "value": 1, "if_rev": 1 << 64}},
        "64 bits",
    ),
    ("GET", "/sessions", {"params": {"limit": "5000"}}, "from 1 to 1000"),
]


@pytest.fixture(scope="module")
def shared_server(live_module: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return _server(live_module, tmp_path_factory.mktemp("bad"))


@pytest.mark.parametrize(("method", "path", "request_args", "says"), BAD)
def test_bad_requests_are_400s_that_say_what_is_wrong(
    shared_server: Any, method: str, path: str, request_args: Any, says: str
) -> None:
    with httpx.Client(base_url=shared_server.url, timeout=30) as client:
        answer = client.request(method, path, **request_args)
    assert answer.status_code == 400, answer.text
    assert says in answer.json()["error"]["message"]


def test_the_routes_sit_behind_authenticate_and_exist_only_when_configured(live: Any) -> None:
    runner = AsyncRunner(task_graphs.work_graph(), backend=InMemoryBackend())
    app = task_app(
        runner,
        memory=InMemoryStore(),
        sessions=InMemorySessionStore(),
        authenticate=lambda request: request.headers.get("authorization") == "Bearer ok",
        drain_timeout=1.0,
    )
    server = live(app)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.post("/memory/namespaces", json={}).status_code == 401
        assert client.get("/sessions").status_code == 401
        ok = client.get("/sessions", headers={"authorization": "Bearer ok"})
        assert ok.status_code == 200
    plain = live(task_app(AsyncRunner(task_graphs.work_graph(), backend=InMemoryBackend())))
    with httpx.Client(base_url=plain.url, timeout=30) as client:
        assert client.get("/sessions").status_code == 404
        assert "/memory/items" not in client.get("/openapi.json").json()["paths"]


def test_task_app_refuses_what_is_not_a_store() -> None:
    runner = AsyncRunner(task_graphs.work_graph(), backend=InMemoryBackend())
    with pytest.raises(TypeError, match="needs a MemoryStore"):
        task_app(runner, memory="memory.db")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs a SessionStore"):
        task_app(runner, sessions=InMemoryStore())  # type: ignore[arg-type]


@pytest.mark.slow
def test_the_memory_routes_answer_fuzzed_requests_without_a_5xx(live: Any, tmp_path: Path) -> None:
    server = _server(live, tmp_path)
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    operations = [
        result.ok()
        for result in schema.get_all_operations()
        if result.ok().path.startswith(("/memory", "/sessions"))
    ]
    assert len(operations) == 10
    strategy = st.one_of(*(op.as_strategy() for op in operations))
    answered: dict[int, int] = {}

    @settings(
        max_examples=250, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(case=strategy)
    def fuzz(case: schemathesis.Case) -> None:
        response = case.call(base_url=server.url, timeout=30)
        answered[response.status_code] = answered.get(response.status_code, 0) + 1
        case.validate_response(response, checks=[not_a_server_error])

    fuzz()
    assert not any(status >= 500 for status in answered), answered
    assert answered.get(200, 0) > 0
    # Nothing corrupted: every namespace still lists.
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.post("/memory/list", json={"limit": 1000}).status_code == 200
        assert client.get("/sessions", params={"limit": 1000}).status_code == 200
