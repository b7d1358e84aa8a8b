"""Two users (and an admin and a support agent) of an authorizing task API, served by uvicorn
on SQLite, PostgreSQL or Redis: the fixtures the authorization and schedule tests share.

Test modules import the fixtures by name (``from authz_servers import make_stores, serve``)
so pytest finds them there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import task_graphs

from tensorsketch.memory import HashingEmbedder
from tensorsketch.memory.sqlite import SqliteStore
from tensorsketch.memory.sqlite_sessions import SqliteSessionStore
from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.serve import Authorization, Identity, task_app
from tensorsketch.testing.services import private_name

__all__ = ["PEOPLE", "STORES", "as_user", "authenticate", "make_stores", "serve"]

STORES = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("redis", marks=pytest.mark.redis),
]

PEOPLE = {
    "ana-key": Identity("ana"),
    "bob-key": Identity("bob"),
    "root-key": Identity("root", admin=True),
    "sue-key": Identity("sue", claims={"roles": ["support"]}),
}


def authenticate(request: Any) -> Identity | None:
    token = request.headers.get("authorization", "").removeprefix("Bearer ")
    return PEOPLE.get(token)


def as_user(who: str) -> dict[str, str]:
    return {"authorization": f"Bearer {who}-key"}


@pytest.fixture(params=STORES)
def make_stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], tuple[Any, Any, Any]]]:
    """``() -> (backend, memory store, session store)`` on one store kind, private to the
    test (an SQLite folder, a PostgreSQL schema, a Redis prefix), dropped after."""
    if request.param == "sqlite":
        yield lambda: (
            SqliteBackend(tmp_path / "runs.db"),
            SqliteStore(tmp_path / "memory.db", embedder=HashingEmbedder()),
            SqliteSessionStore(tmp_path / "sessions.db"),
        )
        return
    pytest.importorskip("tensorsketch.runtime.backends.postgres", reason="needs backends")
    name = private_name("authz")
    if request.param == "postgres":
        from tensorsketch.memory.postgres import PostgresStore
        from tensorsketch.memory.postgres_sessions import PostgresSessionStore
        from tensorsketch.runtime.backends.postgres import PostgresBackend
        from tensorsketch.testing import postgres_server

        dsn = postgres_server.reachable()
        yield lambda: (
            PostgresBackend(dsn, schema=name),
            PostgresStore(dsn, schema=name, embedder=HashingEmbedder()),
            PostgresSessionStore(dsn, schema=name),
        )
        postgres_server.drop_schema(dsn, name)
        return
    from tensorsketch.memory.redis import RedisStore
    from tensorsketch.memory.redis_sessions import RedisSessionStore
    from tensorsketch.runtime.backends.redis import RedisBackend
    from tensorsketch.testing import redis_server

    url = redis_server.reachable()
    yield lambda: (
        RedisBackend(url, prefix=name),
        RedisStore(url, prefix=name, embedder=HashingEmbedder()),
        RedisSessionStore(url, prefix=name),
    )
    redis_server.delete_prefix(url, name)


@pytest.fixture
def serve(
    live: Any, make_stores: Callable[[], tuple[Any, Any, Any]]
) -> Iterator[Callable[..., Any]]:
    """``serve(auth)``: the task API with memory and sessions, authorizing with ``auth``;
    its stores are closed on the server's own loop (where their connections live)."""
    made: list[tuple[Any, AsyncRunner, Any, Any]] = []

    def start(auth: Authorization | None = None) -> Any:
        backend, memory, sessions = make_stores()
        runner = AsyncRunner(task_graphs.work_graph(), backend=backend)
        app = task_app(
            runner,
            authenticate=authenticate,
            authorize=auth or Authorization(),
            memory=memory,
            sessions=sessions,
            drain_timeout=1.0,
        )
        server = live(app)
        server.app = app
        made.append((server, runner, memory, sessions))
        return server

    yield start
    for server, runner, memory, sessions in made:
        server.call(runner.aclose())
        server.call(runner.backend.aclose())
        for store in (memory, sessions):
            close = getattr(store, "aclose", None)
            if close is not None:
                server.call(close())
        server.stop()
