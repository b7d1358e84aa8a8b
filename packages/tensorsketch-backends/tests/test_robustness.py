"""Malformed records, failed opens, schema changes and bad thread ids, on every store.

Each case writes the damage straight into the store (as a bug, a foreign writer or an older
release would leave it) and checks that the run fails with a clear error, gives its lease
back, and leaves the thread's readable checkpoints usable.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis.asyncio as aioredis

from tensorsketch import END, START, Context, Graph, Node, Schema
from tensorsketch.errors import CheckpointDecodeError
from tensorsketch.runtime.backends.base import Backend, StoredCheckpoint
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
CALLS: dict[str, int] = {}


class Order(Schema):
    order: str
    paid: str = ""


class Pay(Node):
    class In(Schema):
        order: str

    class Out(Schema):
        paid: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        def call() -> str:
            CALLS[inp.order] = CALLS.get(inp.order, 0) + 1
            return f"paid-{inp.order}"

        return self.Out(paid=await ctx.step("pay", call, idempotency_key="pay"))


GRAPH = Graph(Order).add(Pay).edge(START, "Pay").edge("Pay", END).compile()


class Look(Node):
    class In(Schema):
        order: str

    class Out(Schema):
        paid: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(paid="")


#: Runs on a thread first, so it exists: a run on a thread it creates itself reads no
#: journal (nobody else can have written one), so planted entries need an existing thread.
OPENER = Graph(Order).add(Look).edge(START, "Look").edge("Look", END).compile()


def _thread() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    kind = request.param
    backend: Backend
    if kind == "memory":
        backend = InMemoryBackend()
    elif kind == "sqlite":
        backend = SqliteBackend(tmp_path / "runs.db", lease_ttl=30)
    elif kind == "postgres":
        dsn = request.getfixturevalue("pg_dsn")
        backend = PostgresBackend(dsn, schema=request.getfixturevalue("pg_schema"))
    else:
        url = request.getfixturevalue("redis_url")
        backend = RedisBackend(url, prefix=request.getfixturevalue("redis_prefix"))
    try:
        yield backend
    finally:
        await backend.aclose()


async def _lease_is_free(backend: Backend, thread: str) -> bool:
    """Whether another runner could take the thread now (taken and given back at once)."""
    other = uuid.uuid4().hex
    if not await backend.acquire_lease(thread, other, 30.0):
        return False
    await backend.release_lease(thread, other)
    return True


# -- 7: the shape of a journal entry ------------------------------------------------------------


@pytest.mark.parametrize("entry", ["zzz", {}, [], [1, 2], None])
async def test_malformed_journal_entry_is_a_clear_error(store: Backend, entry: Any) -> None:
    thread = _thread()
    await OPENER.invoke({"order": thread}, thread_id=thread, backend=store)
    await store.record_effect(thread, "idem:pay", store.serializer.dumps(entry))
    with pytest.raises(CheckpointDecodeError) as info:
        await GRAPH.invoke({"order": thread}, thread_id=thread, backend=store)
    assert thread in str(info.value)
    assert "idem:pay" in str(info.value)
    assert thread not in CALLS  # the malformed entry was neither replayed nor re-run
    assert await _lease_is_free(store, thread)


async def test_malformed_batched_journal_entry_is_a_clear_error(store: Backend) -> None:
    from tensorsketch.durable import RunJournal
    from tensorsketch.pregel.restore import SpecCodec

    thread = _thread()
    await store.record_effect(thread, "writes:cp:Pay", store.serializer.dumps("zzz"))
    journal = RunJournal(store, thread, SpecCodec(GRAPH.spec, store.serializer))
    with pytest.raises(CheckpointDecodeError, match=r"writes:cp:Pay.*|.*writes:cp:Pay"):
        await journal.lookup_many(["writes:cp:Pay"])


# -- 8: hostile nesting -----------------------------------------------------------------------

DEEP = 200_000


async def test_deeply_nested_journal_entry_is_a_decode_error(store: Backend) -> None:
    thread = _thread()
    await OPENER.invoke({"order": thread}, thread_id=thread, backend=store)
    await store.record_effect(thread, "idem:pay", b"[" * DEEP + b"]" * DEEP)
    with pytest.raises(CheckpointDecodeError, match="idem:pay"):
        await GRAPH.invoke({"order": thread}, thread_id=thread, backend=store)
    assert await _lease_is_free(store, thread)


async def test_deeply_nested_checkpoint_is_a_decode_error(store: Backend) -> None:
    thread = _thread()
    await GRAPH.invoke({"order": thread}, thread_id=thread, backend=store)
    good = await GRAPH.aget_history(thread, store)
    deep = b'{"v":1,"changes":{"paid":["set",' + b"[" * DEEP + b"]" * DEEP + b']},"plan":[]}'
    await store.save_checkpoint(StoredCheckpoint(thread, "cp-deep", good[-1].id, 9, 1.0, deep))
    with pytest.raises(CheckpointDecodeError, match="cp-deep"):
        await GRAPH.invoke(thread_id=thread, backend=store)
    assert await _lease_is_free(store, thread)
    with pytest.raises(CheckpointDecodeError, match="cp-deep"):
        await GRAPH.aget_state(thread, store)


# -- 9: a failed open gives the lease back; fork from an older checkpoint ------------------------


async def _garble_latest_record(store: Backend, thread: str) -> None:
    """Damage the latest checkpoint's *record* (not only its payload), as each store can be."""
    if isinstance(store, SqliteBackend):
        with sqlite3.connect(store.path) as conn:
            conn.execute(
                "UPDATE tensorsketch_checkpoints SET step = 'not-a-number' WHERE thread_id = ? "
                "AND position = (SELECT MAX(position) FROM tensorsketch_checkpoints "
                "WHERE thread_id = ?)",
                (thread, thread),
            )
    elif isinstance(store, RedisBackend):
        assert store.dsn is not None
        client = aioredis.Redis.from_url(store.dsn)
        await client.lset(store._key(thread, "cp"), -1, b"\x00\x00\x00\x05garbage")
        await client.aclose()
    elif isinstance(store, PostgresBackend):  # step is an INTEGER column: garble the payload
        assert store.dsn is not None
        async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as conn:
            await conn.execute(
                f"UPDATE {store.table('checkpoints')} SET payload = %s WHERE thread_id = %s "
                f"AND position = (SELECT MAX(position) FROM {store.table('checkpoints')} "
                "WHERE thread_id = %s)",
                (b"\x00garbage", thread, thread),
            )
    else:
        latest = (await store.list_checkpoints(thread))[-1]
        await store.save_checkpoint(
            StoredCheckpoint(thread, "cp-garbled", latest.checkpoint_id, 9, 1.0, b"\x00garbage")
        )


async def test_unreadable_thread_releases_its_lease_and_forks(store: Backend) -> None:
    thread = _thread()
    await GRAPH.invoke({"order": thread}, thread_id=thread, backend=store)
    history = await GRAPH.aget_history(thread, store)
    await GRAPH.invoke({"order": thread}, thread_id=thread, backend=store)  # a later checkpoint
    await _garble_latest_record(store, thread)
    for _ in range(2):  # the same clear error each time, never ThreadBusyError
        with pytest.raises(CheckpointDecodeError) as info:
            await GRAPH.invoke(thread_id=thread, backend=store)
        assert thread in str(info.value)
        assert await _lease_is_free(store, thread)
    fork = _thread()
    out = await GRAPH.fork(store, thread, history[-1].id, fork)
    assert out.paid == f"paid-{thread}"
    assert await _lease_is_free(store, fork)


# -- 12: thread ids -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("thread_id", "why"),
    [(42, "str"), ("", "empty"), ("x" * 10_000, "long"), ("a\x00b", "NUL"), (b"t", "str")],
)
async def test_bad_thread_id_is_refused_on_every_store(
    store: Backend, thread_id: Any, why: str
) -> None:
    with pytest.raises((TypeError, ValueError), match="thread_id") as info:
        await GRAPH.invoke({"order": "o"}, thread_id=thread_id, backend=store)
    assert why in str(info.value)
    with pytest.raises((TypeError, ValueError), match="thread_id"):
        await GRAPH.aget_state(thread_id, store)
    with pytest.raises((TypeError, ValueError), match="thread_id"):
        await GRAPH.fork(store, "t", "cp", thread_id)


# -- 10: a changed state schema ---------------------------------------------------------------


class Echo(Node):
    class In(Schema):
        order: str

    class Out(Schema):
        order: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(order=inp.order)


def _graph(state: type[Schema], **compile_kwargs: Any) -> Any:
    return Graph(state).add(Echo).edge(START, "Echo").edge("Echo", END).compile(**compile_kwargs)


class Renamed(Schema):  # `paid` became `receipt`
    order: str
    receipt: str = ""


class Retyped(Schema):  # `paid` became an int
    order: str
    paid: int = 0


class Grown(Schema):  # a field added, with a default
    order: str
    paid: str = ""
    note: str = "none"


async def test_renamed_field_is_a_clear_error_pointing_at_migrate(store: Backend) -> None:
    thread = _thread()
    await GRAPH.invoke({"order": thread}, thread_id=thread, backend=store)
    renamed = _graph(Renamed)
    for attempt in (
        renamed.invoke(thread_id=thread, backend=store),
        renamed.aget_state(thread, store),
    ):
        with pytest.raises(CheckpointDecodeError) as info:
            await attempt
        assert "'paid'" in str(info.value)
        assert "migrate" in str(info.value)
    assert await _lease_is_free(store, thread)

    def migrate(values: dict[str, Any]) -> dict[str, Any]:
        values["receipt"] = values.pop("paid")
        return values

    migrated = _graph(Renamed, migrate=migrate)
    out = await migrated.invoke(thread_id=thread, backend=store)
    assert out.receipt == f"paid-{thread}"
    state = await migrated.aget_state(thread, store)
    assert state is not None
    assert state.receipt == f"paid-{thread}"


async def test_retyped_field_is_a_clear_error_pointing_at_migrate(store: Backend) -> None:
    thread = _thread()
    await GRAPH.invoke({"order": thread}, thread_id=thread, backend=store)
    with pytest.raises(CheckpointDecodeError, match=r"'paid'.*migrate"):
        await _graph(Retyped).invoke(thread_id=thread, backend=store)
    out = await _graph(Retyped, migrate=lambda v: {**v, "paid": len(v["paid"])}).invoke(
        thread_id=thread, backend=store
    )
    assert out.paid == len(f"paid-{thread}")


async def test_added_field_with_a_default_resumes(store: Backend) -> None:
    thread = _thread()
    await GRAPH.invoke({"order": thread}, thread_id=thread, backend=store)
    out = await _graph(Grown).invoke(thread_id=thread, backend=store)
    assert (out.paid, out.note) == (f"paid-{thread}", "none")
