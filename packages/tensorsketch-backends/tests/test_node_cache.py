"""Node result caching on PostgreSQL (``SqlCache`` over a ``PostgresBackend``) and Redis
(``RedisCache``): the same contract and graph check core runs on memory and SQLite."""

from __future__ import annotations

import pytest

from tensorsketch.cache import SqlCache
from tensorsketch.runtime.backends.postgres import PostgresBackend
from tensorsketch.runtime.backends.redis import RedisBackend
from tensorsketch.runtime.backends.redis_cache import RedisCache
from tensorsketch.testing.cache_conformance import check_node_cache


@pytest.mark.postgres
async def test_the_cache_contract_on_postgres(pg_dsn: str, pg_schema: str) -> None:
    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    try:
        await check_node_cache(SqlCache(backend))
    finally:
        await backend.aclose()


@pytest.mark.redis
async def test_the_cache_contract_on_redis(redis_url: str, redis_prefix: str) -> None:
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    try:
        await check_node_cache(RedisCache(backend))
    finally:
        await backend.aclose()
