"""A store that goes away mid-run: the run fails with ``BackendUnavailableError`` naming what
it was doing, and the same thread resumes cleanly once the store is back — without repeating
the effect that completed before the outage.

The servers are cut off through a TCP proxy (a process of the test's own on 127.0.0.1) that is
SIGKILLed mid-run and restarted on the same port; the servers themselves keep their data.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tensorsketch import END, START, BackendUnavailableError, Context, Graph, Node, Schema
from tensorsketch.errors import ThreadBusyError
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.postgres import PostgresBackend
from tensorsketch.runtime.backends.redis import RedisBackend

CALLS: dict[tuple[str, str], int] = {}
CUT: dict[str, Callable[[], None]] = {}  # thread -> cut the store off, once


class Order(Schema):
    order: str
    paid: str = ""
    mailed: str = ""


def _effect(ctx: Context, name: str) -> Callable[[], str]:
    def call() -> str:
        key = (ctx.thread_id or "", name)
        CALLS[key] = CALLS.get(key, 0) + 1
        return f"{name}-{CALLS[key]}"

    return call


class Pay(Node):
    class In(Schema):
        order: str

    class Out(Schema):
        paid: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(paid=await ctx.step("pay", _effect(ctx, "pay")))


class Mail(Node):
    class In(Schema):
        paid: str

    class Out(Schema):
        mailed: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        cut = CUT.pop(ctx.thread_id or "", None)
        if cut is not None:
            cut()  # the store disappears between two effects
        return self.Out(mailed=await ctx.step("mail", _effect(ctx, "mail")))


APP = Graph(Order).add(Pay).add(Mail).edge(START, "Pay").edge("Pay", "Mail").edge("Mail", END)
GRAPH = APP.compile()


async def _resume_when_back(backend: Backend, thread: str) -> Order:
    """Retry while the failed run's lease (it could not release it) is still running out."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return await GRAPH.invoke(thread_id=thread, backend=backend)
        except (ThreadBusyError, BackendUnavailableError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def _outage_round_trip(backend: Backend, proxy: Any) -> None:
    thread = f"outage-{uuid.uuid4().hex[:8]}"
    CUT[thread] = proxy.kill
    with pytest.raises(BackendUnavailableError) as info:
        await GRAPH.invoke({"order": "o-1"}, thread_id=thread, backend=backend)
    message = str(info.value)
    assert "unavailable while" in message
    assert "resume" in message or "retry" in message
    assert CALLS[(thread, "pay")] == 1
    assert (thread, "mail") not in CALLS
    proxy.start()  # the store is back
    out = await _resume_when_back(backend, thread)
    assert (out.paid, out.mailed) == ("pay-1", "mail-1")
    assert CALLS[(thread, "pay")] == 1  # not repeated by the resume
    assert CALLS[(thread, "mail")] == 1


@pytest.mark.postgres
async def test_postgres_goes_away_mid_run(pg_dsn: str, pg_schema: str, pg_proxy: Any) -> None:
    backend = PostgresBackend(
        pg_proxy.via(pg_dsn), schema=pg_schema, lease_ttl=1.0, pool_kwargs={"timeout": 2.0}
    )
    try:
        await _outage_round_trip(backend, pg_proxy)
    finally:
        await backend.aclose()


@pytest.mark.redis
async def test_redis_goes_away_mid_run(redis_url: str, redis_prefix: str, redis_proxy: Any) -> None:
    backend = RedisBackend(redis_proxy.via(redis_url), prefix=redis_prefix, lease_ttl=1.0)
    try:
        await _outage_round_trip(backend, redis_proxy)
    finally:
        await backend.aclose()


@pytest.mark.postgres
async def test_postgres_sessions_killed_between_runs_are_replaced(
    pg_dsn: str, pg_schema: str
) -> None:
    """A server restart (or an admin killing sessions) while the pool is idle must not fail
    the next run: broken pooled connections are replaced at checkout."""
    label = f"ts-test-{uuid.uuid4().hex[:8]}"  # only this backend's sessions are killed
    backend = PostgresBackend(
        pg_dsn, schema=pg_schema, pool_kwargs={"kwargs": {"application_name": label}}
    )
    try:
        thread = f"idle-{uuid.uuid4().hex[:8]}"
        await GRAPH.invoke({"order": "o"}, thread_id=thread, backend=backend)
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (label,),
            ).fetchone()
        assert killed is not None
        assert killed[0] >= 1
        again = f"idle-{uuid.uuid4().hex[:8]}"
        out = await GRAPH.invoke({"order": "o"}, thread_id=again, backend=backend)
        assert out.mailed == "mail-1"
    finally:
        await backend.aclose()


@pytest.mark.postgres
async def test_postgres_unreachable_from_the_start(pg_schema: str) -> None:
    backend = PostgresBackend(
        "postgresql://postgres@127.0.0.1:1/test", schema=pg_schema, pool_kwargs={"timeout": 1.0}
    )
    try:
        with pytest.raises(BackendUnavailableError, match="postgres backend unavailable"):
            await GRAPH.invoke({"order": "o"}, thread_id="t", backend=backend)
    finally:
        await backend.aclose()


@pytest.mark.redis
async def test_redis_unreachable_from_the_start(redis_prefix: str) -> None:
    backend = RedisBackend("redis://127.0.0.1:1/0", prefix=redis_prefix)
    try:
        with pytest.raises(BackendUnavailableError, match="redis backend unavailable"):
            await GRAPH.invoke({"order": "o"}, thread_id="t", backend=backend)
    finally:
        await backend.aclose()


# -- a black-holed store: connections that stay open and never answer ------------------------

#: Generous next to the one-second timeouts set below: the run must fail, not hang.
FAILS_WITHIN = 10.0


async def _black_hole_round_trip(backend: Backend, proxy: Any) -> float:
    """The store stops answering between two effects; return the seconds to the error."""
    thread = f"hole-{uuid.uuid4().hex[:8]}"
    cut_at: list[float] = []

    def freeze() -> None:
        cut_at.append(time.monotonic())
        proxy.freeze()

    CUT[thread] = freeze
    try:
        with pytest.raises(BackendUnavailableError) as info:
            await asyncio.wait_for(
                GRAPH.invoke({"order": "o-1"}, thread_id=thread, backend=backend), 60
            )
        took = time.monotonic() - cut_at[0]
    finally:
        proxy.thaw()
    assert "unavailable while" in str(info.value)
    assert took < FAILS_WITHIN
    assert CALLS[(thread, "pay")] == 1
    out = await _resume_when_back(backend, thread)
    assert (out.paid, out.mailed) == ("pay-1", "mail-1")
    assert CALLS[(thread, "pay")] == 1
    return took


@pytest.mark.postgres
async def test_postgres_black_hole_fails_fast_and_resumes(
    pg_dsn: str, pg_schema: str, pg_proxy: Any
) -> None:
    backend = PostgresBackend(
        pg_proxy.via(pg_dsn),
        schema=pg_schema,
        lease_ttl=1.0,
        connect_timeout=1.0,
        command_timeout=1.0,
    )
    try:
        await _black_hole_round_trip(backend, pg_proxy)
    finally:
        await backend.aclose()


@pytest.mark.redis
async def test_redis_black_hole_fails_fast_and_resumes(
    redis_url: str, redis_prefix: str, redis_proxy: Any
) -> None:
    backend = RedisBackend(
        redis_proxy.via(redis_url),
        prefix=redis_prefix,
        lease_ttl=1.0,
        connect_timeout=1.0,
        command_timeout=1.0,
    )
    try:
        await _black_hole_round_trip(backend, redis_proxy)
    finally:
        await backend.aclose()


@pytest.mark.postgres
async def test_postgres_reset_fails_fast_with_default_pool_timeout(
    pg_dsn: str, pg_schema: str, pg_proxy: Any
) -> None:
    """No ``pool_kwargs``: the pool's wait for a connection follows ``connect_timeout``."""
    backend = PostgresBackend(
        pg_proxy.via(pg_dsn), schema=pg_schema, lease_ttl=1.0, connect_timeout=1.0
    )
    try:
        thread = f"reset-{uuid.uuid4().hex[:8]}"
        CUT[thread] = pg_proxy.kill
        started = time.monotonic()
        with pytest.raises(BackendUnavailableError):
            await asyncio.wait_for(
                GRAPH.invoke({"order": "o-1"}, thread_id=thread, backend=backend), 60
            )
        assert time.monotonic() - started < FAILS_WITHIN
        pg_proxy.start()
        out = await _resume_when_back(backend, thread)
        assert out.mailed == "mail-1"
    finally:
        await backend.aclose()
