"""The memory store conformance kit (from core) on the real PostgreSQL and Redis servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from tensorsketch.memory import MemoryStore, create_memory_store, memory_stores
from tensorsketch.memory.postgres import PostgresStore
from tensorsketch.memory.redis import RedisStore
from tensorsketch.testing.memory_conformance import MemoryStoreConformance, StoreFactory


@pytest.mark.postgres
class TestPostgresStore(MemoryStoreConformance):
    @pytest.fixture
    async def store_factory(self, pg_dsn: str, pg_schema: str) -> AsyncIterator[StoreFactory]:
        made: list[MemoryStore] = []

        def make(**options: Any) -> MemoryStore:
            made.append(PostgresStore(pg_dsn, schema=pg_schema, **options))
            return made[-1]

        yield make
        for store in made:
            await store.aclose()


@pytest.mark.redis
class TestRedisStore(MemoryStoreConformance):
    @pytest.fixture
    async def store_factory(self, redis_url: str, redis_prefix: str) -> AsyncIterator[StoreFactory]:
        client = aioredis.Redis.from_url(redis_url)

        def make(**options: Any) -> MemoryStore:
            return RedisStore(client=client, prefix=redis_prefix, **options)

        yield make
        await client.aclose()


def test_first_party_stores_register_through_the_plugin_hook() -> None:
    assert {"memory", "sqlite", "postgres", "redis"} <= set(memory_stores.names())
    assert memory_stores.origin("postgres") == "plugin 'backends'"
    assert memory_stores.target_path("redis") == "tensorsketch.memory.redis:RedisStore"


@pytest.mark.redis
async def test_create_memory_store_by_name(redis_url: str, redis_prefix: str) -> None:
    store = create_memory_store("redis", url=redis_url, prefix=redis_prefix)
    assert repr(store) == f"RedisStore(prefix={redis_prefix!r}, search='exact')"
    assert await store.put(("n",), "k", {"v": 1}) == 1
    await store.aclose()
