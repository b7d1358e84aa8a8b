"""Stopping the lease heartbeat always wins, in bounded time, on every store.

Drivers do not always let a cancellation through: redis-py's ``wait_for`` can swallow it and
psycopg_pool turns it into ``PoolTimeout``; a call on a dead connection may not return at all.
A run that ends must still return (it used to wait for its heartbeat forever).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tensorsketch import END, START, Context, Graph, Node, Schema
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.postgres import PostgresBackend
from tensorsketch.runtime.backends.redis import RedisBackend
from tensorsketch.runtime.backends.sqlite import SqliteBackend

STORES = [
    "memory",
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("redis", marks=pytest.mark.redis),
]
#: "Does not hang": generous next to the second the runs below take.
RETURNS_WITHIN = 10.0


class Slow(Schema):
    seconds: float
    done: bool = False


class Nap(Node):
    class In(Schema):
        seconds: float

    class Out(Schema):
        done: bool

    async def run(self, ctx: Context, inp: Any) -> Any:
        await asyncio.sleep(inp.seconds)
        return self.Out(done=True)


GRAPH = Graph(Slow).add(Nap).edge(START, "Nap").edge("Nap", END).compile()


def _make(kind: str, request: pytest.FixtureRequest, tmp_path: Path, ttl: float) -> Backend:
    if kind == "memory":
        backend: Backend = InMemoryBackend()
        backend.lease_ttl = ttl
        return backend
    if kind == "sqlite":
        return SqliteBackend(tmp_path / "runs.db", lease_ttl=ttl)
    if kind == "postgres":
        dsn = request.getfixturevalue("pg_dsn")
        return PostgresBackend(dsn, schema=request.getfixturevalue("pg_schema"), lease_ttl=ttl)
    url = request.getfixturevalue("redis_url")
    return RedisBackend(url, prefix=request.getfixturevalue("redis_prefix"), lease_ttl=ttl)


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    backend = _make(request.param, request, tmp_path, ttl=0.3)
    try:
        yield backend
    finally:
        await backend.aclose()


def _renewals_that(store: Backend, misbehave: str) -> None:
    """Make lease renewals handle cancellation as ``misbehave``."""
    real = store.renew_lease

    async def renew_lease(thread_id: str, owner: str, ttl: float) -> bool:
        # The lease really is renewed (long enough for the run), then the call hangs: a
        # renewal still in flight when the run ends and stops its heartbeat.
        await real(thread_id, owner, 30.0)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if misbehave == "raise":
                raise RuntimeError("couldn't get a connection (PoolTimeout)") from None
            if misbehave == "ignore":  # a call on a dead connection: never returns in time
                await asyncio.sleep(30)
            # "swallow": return as if nothing happened
        return await real(thread_id, owner, ttl)

    store.renew_lease = renew_lease  # type: ignore[method-assign]


@pytest.mark.parametrize("misbehave", ["swallow", "raise", "ignore"])
async def test_run_returns_when_renewal_mishandles_cancellation(
    store: Backend, misbehave: str
) -> None:
    _renewals_that(store, misbehave)
    thread = f"hb-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    out = await asyncio.wait_for(
        GRAPH.invoke({"seconds": 0.5}, thread_id=thread, backend=store), RETURNS_WITHIN
    )
    # wait_for hands back a result a task produced after swallowing its cancellation.
    assert time.monotonic() - started < RETURNS_WITHIN
    assert out.done


async def test_cancelling_a_run_that_stops_its_heartbeat_is_not_swallowed(store: Backend) -> None:
    """The caller's own cancellation, arriving while the heartbeat is being stopped, wins."""
    _renewals_that(store, "ignore")
    thread = f"hb-{uuid.uuid4().hex[:8]}"
    run = asyncio.ensure_future(GRAPH.invoke({"seconds": 0.5}, thread_id=thread, backend=store))
    await asyncio.sleep(0.7)  # the run is ending: stopping a heartbeat that will not stop
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(run, RETURNS_WITHIN)


@pytest.mark.redis
async def test_redis_short_lease_and_a_slow_node_returns(redis_url: str, redis_prefix: str) -> None:
    """The reported case: ``lease_ttl=1.5`` and a node that sleeps 1 s hung every run."""
    backend = RedisBackend(redis_url, prefix=redis_prefix, lease_ttl=1.5)
    try:
        for _ in range(3):
            thread = f"hb-{uuid.uuid4().hex[:8]}"
            out = await asyncio.wait_for(
                GRAPH.invoke({"seconds": 1.0}, thread_id=thread, backend=backend), RETURNS_WITHIN
            )
            assert out.done
    finally:
        await backend.aclose()
