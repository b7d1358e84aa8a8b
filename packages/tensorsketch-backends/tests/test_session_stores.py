"""The session store conformance kit (from core) on the real PostgreSQL and Redis servers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from tensorsketch.memory import SessionStore, create_session_store, session_stores
from tensorsketch.memory.postgres_sessions import PostgresSessionStore
from tensorsketch.memory.redis_sessions import RedisSessionStore
from tensorsketch.messages import user
from tensorsketch.testing.session_conformance import SessionFactory, SessionStoreConformance


@pytest.mark.postgres
class TestPostgresSessionStore(SessionStoreConformance):
    @pytest.fixture
    async def session_factory(self, pg_dsn: str, pg_schema: str) -> AsyncIterator[SessionFactory]:
        made: list[SessionStore] = []

        def make() -> SessionStore:
            made.append(PostgresSessionStore(pg_dsn, schema=pg_schema))
            return made[-1]

        yield make
        for store in made:
            await store.aclose()


@pytest.mark.redis
class TestRedisSessionStore(SessionStoreConformance):
    @pytest.fixture
    async def session_factory(
        self, redis_url: str, redis_prefix: str
    ) -> AsyncIterator[SessionFactory]:
        client = aioredis.Redis.from_url(redis_url)
        yield lambda: RedisSessionStore(client=client, prefix=redis_prefix)
        await client.aclose()


def test_first_party_stores_register_through_the_plugin_hook() -> None:
    assert {"memory", "sqlite", "postgres", "redis"} <= set(session_stores.names())
    assert session_stores.origin("postgres") == "plugin 'backends'"
    assert (
        session_stores.target_path("redis")
        == "tensorsketch.memory.redis_sessions:RedisSessionStore"
    )


@pytest.mark.redis
async def test_create_session_store_by_name(redis_url: str, redis_prefix: str) -> None:
    store = create_session_store("redis", url=redis_url, prefix=redis_prefix)
    assert repr(store) == f"RedisSessionStore(prefix={redis_prefix!r})"
    assert await store.append("s", [user("hi")]) == 1
    await store.aclose()


@pytest.mark.postgres
async def test_postgres_unreachable_is_a_clear_error() -> None:
    from tensorsketch.errors import BackendUnavailableError

    store = PostgresSessionStore("postgresql://postgres@127.0.0.1:1/none?connect_timeout=1")
    with pytest.raises(BackendUnavailableError, match="cannot reach PostgreSQL"):
        await store.load("s")
    await store.aclose()
