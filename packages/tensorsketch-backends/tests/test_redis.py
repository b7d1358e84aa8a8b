"""``RedisBackend`` specifics on the real server: the key layout, idempotent writes, server-side
lease expiry, clients and event loops, and a missing driver."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from tensorsketch import START, Context, Graph, Node, Schema
from tensorsketch.errors import CheckpointDecodeError
from tensorsketch.registry import create_backend
from tensorsketch.runtime.backends.base import StoredCheckpoint
from tensorsketch.runtime.backends.redis import RedisBackend

pytestmark = pytest.mark.redis


class Count(Schema):
    n: int = 0


class Inc(Node):
    class In(Schema):
        n: int

    class Out(Schema):
        n: int

    async def run(self, ctx: Context, inp: Any) -> Any:
        await ctx.emit("tick", {"n": inp.n})
        return self.Out(n=await ctx.step("inc", lambda: inp.n + 1))


COUNTER = Graph(Count).add(Inc).edge(START, "Inc").loop("Inc", until=lambda s: s.n >= 3).compile()


async def test_keys_of_a_thread_share_one_cluster_slot(redis_url: str, redis_prefix: str) -> None:
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    async for _ in COUNTER.stream({}, thread_id="user-42", backend=backend):
        pass
    sync = redis.Redis.from_url(redis_url)
    keys = sorted(k.decode() for k in sync.scan_iter(match=f"{redis_prefix}:*"))
    sync.close()
    assert keys == [
        f"{redis_prefix}:schema_version",
        f"{redis_prefix}:{{user-42}}:cp",
        f"{redis_prefix}:{{user-42}}:cpi",
        f"{redis_prefix}:{{user-42}}:ev",
        f"{redis_prefix}:{{user-42}}:fx",
    ]  # the lease was released at the end of the run
    await backend.aclose()


async def test_saving_the_same_checkpoint_twice_appends_once(
    redis_url: str, redis_prefix: str
) -> None:
    """redis-py retries a command whose reply was lost; the write must be idempotent."""
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    checkpoint = StoredCheckpoint("t", "cp-1", None, 0, 1.0, b"payload")
    await backend.save_checkpoint(checkpoint)
    await backend.save_checkpoint(checkpoint)
    assert await backend.list_checkpoints("t") == [checkpoint]
    assert await backend.get_checkpoint("t", "cp-1") == checkpoint
    await backend.aclose()


async def test_lease_expiry_is_kept_by_the_server(redis_url: str, redis_prefix: str) -> None:
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    assert await backend.acquire_lease("t", "me", 30)
    client = aioredis.Redis.from_url(redis_url)
    ttl_ms = await client.pttl(f"{redis_prefix}:{{t}}:lease")
    assert 0 < ttl_ms <= 30_000
    assert await client.get(f"{redis_prefix}:{{t}}:lease") == b"me"
    await client.aclose()
    await backend.aclose()


async def test_newer_key_layout_is_refused(redis_url: str, redis_prefix: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    await client.set(f"{redis_prefix}:schema_version", 4)
    await client.aclose()
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    with pytest.raises(CheckpointDecodeError, match="layout version 4"):
        await backend.latest_checkpoint("t")
    await backend.aclose()


async def test_corrupt_record_names_the_thread(redis_url: str, redis_prefix: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    await client.rpush(f"{redis_prefix}:{{t}}:cp", b"\x00\x00\x00\x09not json!")
    await client.aclose()
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    with pytest.raises(CheckpointDecodeError, match="thread 't'"):
        await COUNTER.invoke(thread_id="t", backend=backend)
    await backend.aclose()


def test_arguments_are_checked(redis_url: str) -> None:
    with pytest.raises(ValueError, match="decode_responses"):
        RedisBackend(client=aioredis.Redis.from_url(redis_url, decode_responses=True))
    with pytest.raises(TypeError, match=r"redis\.asyncio\.Redis"):
        RedisBackend(client=redis.Redis.from_url(redis_url))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="braces"):
        RedisBackend(redis_url, prefix="a{b}")
    with pytest.raises(ValueError, match="dsn"):
        RedisBackend(None)
    with pytest.raises(ValueError, match="lease_ttl"):
        RedisBackend(redis_url, lease_ttl=0)


def test_survives_a_change_of_event_loop(redis_url: str, redis_prefix: str) -> None:
    backend = create_backend("redis", dsn=redis_url, prefix=redis_prefix)
    assert isinstance(backend, RedisBackend)
    first = asyncio.run(COUNTER.invoke({}, thread_id="a", backend=backend))
    second = asyncio.run(COUNTER.invoke({}, thread_id="b", backend=backend))
    assert (first.n, second.n) == (3, 3)
    state = COUNTER.get_state("a", backend)
    assert state is not None
    assert state.n == 3


async def test_shared_client_is_left_open(redis_url: str, redis_prefix: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    backend = RedisBackend(client=client, prefix=redis_prefix)
    await COUNTER.invoke({}, thread_id="t", backend=backend)
    await backend.aclose()
    assert await client.ping()  # the caller's client is the caller's to close
    await client.aclose()


def test_missing_driver_names_the_extra() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["redis"] = None  # as if the [redis] extra were not installed
        from tensorsketch import create_backend
        try:
            create_backend("redis", dsn="redis://127.0.0.1:6379/0")
        except ImportError as exc:
            print(exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert 'pip install "tensorsketch-backends[redis]"' in out.stdout


def test_shared_client_on_a_closed_loop_is_not_reused(redis_url: str, redis_prefix: str) -> None:
    """A caller's client belongs to the loop it was made on; after that loop is gone the
    backend talks through short-lived clients with the same settings."""

    async def make() -> aioredis.Redis:
        return aioredis.Redis.from_url(redis_url)

    client = asyncio.run(make())
    backend = RedisBackend(client=client, prefix=redis_prefix)
    assert asyncio.run(COUNTER.invoke({}, thread_id="a", backend=backend)).n == 3
    assert asyncio.run(COUNTER.invoke({}, thread_id="b", backend=backend)).n == 3
    state = COUNTER.get_state("a", backend)
    assert state is not None
    assert state.n == 3
