"""The shared backend conformance suite (from core) on the real PostgreSQL and Redis servers.

Each store runs the suite in every way it can be handed a connection: a DSN (the backend owns
its pool/client), a shared ``psycopg`` pool or connection, and a shared ``redis`` client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import redis.asyncio as aioredis
from psycopg_pool import AsyncConnectionPool

from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.postgres import PostgresBackend
from tensorsketch.runtime.backends.redis import RedisBackend
from tensorsketch.testing.backend_conformance import BackendConformance, BackendFactory
from tensorsketch.testing.run_store_conformance import RunStoreConformance


@pytest.mark.postgres
class TestPostgresDsn(BackendConformance):
    @pytest.fixture
    def backend_factory(self, pg_dsn: str, pg_schema: str) -> BackendFactory:
        def make(**kwargs: Any) -> Backend:
            return PostgresBackend(pg_dsn, schema=pg_schema, **kwargs)

        return make


@pytest.mark.postgres
class TestPostgresSharedPool(BackendConformance):
    @pytest.fixture
    async def backend_factory(self, pg_dsn: str, pg_schema: str) -> AsyncIterator[BackendFactory]:
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            pg_dsn, min_size=1, max_size=4, open=False
        )
        await pool.open(wait=True)

        def make(**kwargs: Any) -> Backend:
            return PostgresBackend(pool=pool, schema=pg_schema, **kwargs)

        yield make
        await pool.close()


@pytest.mark.postgres
class TestPostgresSharedConnection(BackendConformance):
    """One non-autocommit connection of the caller's; further handles use a DSN."""

    @pytest.fixture
    async def backend_factory(self, pg_dsn: str, pg_schema: str) -> AsyncIterator[BackendFactory]:
        conn = await psycopg.AsyncConnection.connect(pg_dsn)  # autocommit off, on purpose
        handles: list[Backend] = []

        def make(**kwargs: Any) -> Backend:
            if not handles and not kwargs:
                handles.append(PostgresBackend(connection=conn, schema=pg_schema))
                return handles[0]
            return PostgresBackend(pg_dsn, schema=pg_schema, **kwargs)

        yield make
        await conn.close()


@pytest.mark.redis
class TestRedisDsn(BackendConformance):
    @pytest.fixture
    def backend_factory(self, redis_url: str, redis_prefix: str) -> BackendFactory:
        def make(**kwargs: Any) -> Backend:
            return RedisBackend(redis_url, prefix=redis_prefix, **kwargs)

        return make


@pytest.mark.redis
class TestRedisSharedClient(BackendConformance):
    @pytest.fixture
    async def backend_factory(
        self, redis_url: str, redis_prefix: str
    ) -> AsyncIterator[BackendFactory]:
        client = aioredis.Redis.from_url(redis_url)

        def make(**kwargs: Any) -> Backend:
            return RedisBackend(client=client, prefix=redis_prefix, **kwargs)

        yield make
        await client.aclose()


@pytest.mark.postgres
class TestPostgresRuns(RunStoreConformance):
    @pytest.fixture
    def backend_factory(self, pg_dsn: str, pg_schema: str) -> BackendFactory:
        def make(**kwargs: Any) -> Backend:
            return PostgresBackend(pg_dsn, schema=pg_schema, **kwargs)

        return make


@pytest.mark.redis
class TestRedisRuns(RunStoreConformance):
    @pytest.fixture
    def backend_factory(self, redis_url: str, redis_prefix: str) -> BackendFactory:
        def make(**kwargs: Any) -> Backend:
            return RedisBackend(redis_url, prefix=redis_prefix, **kwargs)

        return make
