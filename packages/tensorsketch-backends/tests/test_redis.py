"""``RedisBackend`` specifics on the real server: the key layout, idempotent writes, server-side
lease expiry, one script call per unit of work, clients and event loops, and a missing
driver."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
import uuid
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from tensorsketch import START, Context, Graph, Node, Schema
from tensorsketch.errors import BackendUnavailableError, CheckpointDecodeError
from tensorsketch.registry import create_backend
from tensorsketch.runtime.backends.base import StoredCheckpoint, StoredEvent
from tensorsketch.runtime.backends.redis import RedisBackend
from tensorsketch.runtime.backends.rides import RecordRide, RideResult
from tensorsketch.runtime.backends.runs import RunRecord
from tensorsketch.testing.ports import free_port

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


async def test_records_written_by_0_1_0_still_load(redis_url: str, redis_prefix: str) -> None:
    """Layout-1 records (a four-field header, no base) are deltas on their parent."""
    import json

    client = aioredis.Redis.from_url(redis_url)
    for n in range(4):
        payload = {
            "v": 1,
            "base": n == 0,
            "source": "input" if n == 0 else "loop",
            "seq": 0,
            "plan": [["Inc", None]] if n < 3 else [],
            "changes": {"n": ["set", n]},
        }
        header = json.dumps([f"old-{n}", f"old-{n - 1}" if n else None, n, 1.0 + n]).encode()
        record = len(header).to_bytes(4, "big") + header + json.dumps(payload).encode()
        await client.rpush(f"{redis_prefix}:{{t}}:cp", record)
        await client.hset(f"{redis_prefix}:{{t}}:cpi", f"old-{n}", n)
    await client.aclose()
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    assert [c.checkpoint_id for c in await backend.read_chain("t")] == [
        "old-0",
        "old-1",
        "old-2",
        "old-3",
    ]
    state = await COUNTER.aget_state("t", backend)
    assert state is not None and state.n == 3
    out = await COUNTER.invoke({"n": 1}, thread_id="t", backend=backend)
    assert out.n == 3
    history = await COUNTER.aget_history("t", backend)
    assert [c.values["n"] for c in history] == [0, 1, 2, 3, 1, 2, 3]
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


# -- one round trip per unit of work ------------------------------------------------------------


def _cp(thread: str, n: int) -> StoredCheckpoint:
    parent = None if n == 0 else f"cp-{n - 1}"
    payload = f"payload {n}".encode()
    return StoredCheckpoint(thread, f"cp-{n}", parent, n, float(n), payload, base_id=parent)


def _recording_client(url: str) -> tuple[aioredis.Redis, list[str]]:
    """A real client whose connections note the name of every command they send."""
    sent: list[str] = []

    class Recording(aioredis.Connection):
        async def send_command(self, *args: Any, **kwargs: Any) -> None:
            sent.append(str(args[0]).upper())
            await super().send_command(*args, **kwargs)

    pool = aioredis.ConnectionPool.from_url(url, connection_class=Recording)
    return aioredis.Redis(connection_pool=pool), sent


async def test_each_unit_of_work_is_one_command(redis_url: str, redis_prefix: str) -> None:
    client, sent = _recording_client(redis_url)
    backend = RedisBackend(client=client, prefix=redis_prefix)
    # Warm up: the layout check, and the first call of each script loads it on the server.
    assert (await backend.open_thread("warm-up", "me", 30, _cp("warm-up", 0))).created
    await backend.commit_step("warm-up", _cp("warm-up", 1), [StoredEvent(0, b"e")])
    thread = f"rt-{uuid.uuid4().hex[:8]}"
    units: dict[str, list[str]] = {}

    async def unit(name: str, call: Any) -> Any:
        sent.clear()
        result = await call
        units[name] = list(sent)
        return result

    opening = await unit(
        "open a new thread", backend.open_thread(thread, "alice", 30, _cp(thread, 0))
    )
    assert opening.created
    refused = await unit(
        "open a busy thread", backend.open_thread(thread, "bob", 30, _cp(thread, 9))
    )
    assert not refused.acquired
    await unit(
        "commit a superstep", backend.commit_step(thread, _cp(thread, 1), [StoredEvent(0, b"e0")])
    )
    resumed = await unit("open to resume", backend.open_thread(thread, "alice", 30))
    assert (resumed.checkpoints, resumed.last_event_seq) == ([_cp(thread, 0), _cp(thread, 1)], 0)
    events = [StoredEvent(1, b"e1"), StoredEvent(2, b"e2")]
    await unit(
        "commit the last superstep",
        backend.commit_step(thread, _cp(thread, 2), events, release_owner="alice"),
    )
    assert units == {name: ["EVALSHA"] for name in units}
    assert await backend.list_checkpoints(thread) == [_cp(thread, n) for n in range(3)]
    assert [e.seq for e in await backend.read_events(thread)] == [0, 1, 2]
    assert await backend.acquire_lease(thread, "bob", 30)  # released with the last commit
    await backend.aclose()
    await client.aclose()


async def test_open_thread_refused_writes_nothing(redis_url: str, redis_prefix: str) -> None:
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    assert await backend.acquire_lease("t", "alice", 30)
    refused = await backend.open_thread("t", "bob", 60, _cp("t", 0))
    assert (refused.acquired, refused.checkpoints, refused.last_event_seq) == (False, [], None)
    client = aioredis.Redis.from_url(redis_url)
    keys = await client.keys(f"{redis_prefix}:{{t}}:*")
    assert keys == [f"{redis_prefix}:{{t}}:lease".encode()]
    assert await client.get(f"{redis_prefix}:{{t}}:lease") == b"alice"
    assert await client.pttl(f"{redis_prefix}:{{t}}:lease") <= 30_000  # not bob's 60 s
    await client.aclose()
    await backend.aclose()


async def test_commit_step_is_seen_whole_or_not_at_all(redis_url: str, redis_prefix: str) -> None:
    """A reader taking consistent snapshots (MULTI/EXEC) while supersteps are committed never
    sees a superstep's events without its checkpoint, or the other way round."""
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    reader = aioredis.Redis.from_url(redis_url)
    thread, steps = "t", 150
    done = asyncio.Event()
    snapshots: list[tuple[int, int]] = []

    async def watch() -> None:
        while not done.is_set():
            async with reader.pipeline(transaction=True) as tx:
                tx.llen(f"{redis_prefix}:{{{thread}}}:cp")
                tx.zcard(f"{redis_prefix}:{{{thread}}}:ev")
                checkpoints, events = await tx.execute()
            snapshots.append((checkpoints, events))

    watcher = asyncio.create_task(watch())
    for n in range(steps):
        events = [StoredEvent(2 * n, b"a"), StoredEvent(2 * n + 1, b"b")]
        await backend.commit_step(thread, _cp(thread, n), events)
    done.set()
    await watcher
    assert len(snapshots) >= 10  # the reader did run between the commits
    assert all(events == 2 * checkpoints for checkpoints, events in snapshots)
    await reader.aclose()
    await backend.aclose()


async def test_commit_step_is_idempotent_and_takes_large_batches(
    redis_url: str, redis_prefix: str
) -> None:
    """A commit retried after a lost reply stores nothing twice; a superstep with thousands
    of events (more than one ZADD inside the script) keeps them all."""
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    events = [StoredEvent(seq, f"event {seq}".encode()) for seq in range(2_500)]
    await backend.commit_step("t", _cp("t", 0), events)
    await backend.commit_step("t", _cp("t", 0), events)
    assert await backend.list_checkpoints("t") == [_cp("t", 0)]
    assert await backend.read_events("t") == events
    opening = await backend.open_thread("t", "me", 30)
    assert (opening.checkpoints, opening.last_event_seq) == ([_cp("t", 0)], 2_499)
    await backend.aclose()


async def test_an_unreachable_server_is_named_in_one_clean_sentence() -> None:
    """redis-py's message ends with a period: it was followed by another (``..``)."""
    port = free_port()  # nothing listens there
    backend = RedisBackend(f"redis://127.0.0.1:{port}/0")
    try:
        with pytest.raises(BackendUnavailableError) as info:
            await backend.acquire_lease("t", "me", 5)
    finally:
        await backend.aclose()
    message = str(info.value)
    assert message.startswith("redis backend unavailable while taking the thread lease")
    assert f"127.0.0.1:{port}" in message
    assert ".." not in message


async def test_a_unit_carrying_a_record_ride_is_one_command(
    redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unit's script and the ride's run as one script (not a MULTI of two), and a script
    the server does not know (it restarted or flushed them) is loaded and called again: the
    refused call ran nothing."""
    client, sent = _recording_client(redis_url)
    backend = RedisBackend(client=client, prefix=redis_prefix)
    store = backend.run_store()
    thread = f"ride-{uuid.uuid4().hex[:8]}"
    queued, _ = await store.create(RunRecord(run_id=f"run-{thread}", thread_id=thread))
    assert backend.carries_rides
    opening = RecordRide(queued.run_id, queued.replace(status="running", owner="me"))
    await backend.open_thread(thread, "me", 30, _cp(thread, 0), ride=opening)  # loads it
    assert opening.result is not None and opening.result.version == queued.version + 1
    lost = iter(["0" * 40])  # the first call names a script the server does not have
    sha = backend._sha

    async def forgetful(client: Any, source: str) -> str:
        return next(lost, None) or await sha(client, source)

    monkeypatch.setattr(backend, "_sha", forgetful)
    sent.clear()
    reading = RecordRide(queued.run_id)
    await backend.record_effects(thread, [("k", b"v")], fence="me", ride=reading)
    assert sent == ["EVALSHA", "SCRIPT LOAD", "EVALSHA"]
    assert reading.result == RideResult(queued.version + 1)
    assert await backend.lookup_effect(thread, "k") == b"v"
    sent.clear()
    ending = RecordRide(queued.run_id, opening.result.stored.replace(status="succeeded"))  # type: ignore[union-attr]
    await backend.commit_step(
        thread, _cp(thread, 1), [], release_owner="me", fence="me", ride=ending
    )
    assert [c for c in sent if c != "SCRIPT LOAD"] == ["EVALSHA"]  # its first call loads it
    assert ending.result is not None and ending.result.stored is not None
    assert (await store.get(queued.run_id)).status == "succeeded"  # type: ignore[union-attr]
    await backend.aclose()
    await client.aclose()


async def test_a_ride_finds_its_loaded_script_without_a_call(
    redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a unit's carrying script is loaded, a ride finds its SHA in one look-up: no
    ``_sha`` coroutine (and its two helpers) per ride. The server losing its scripts still
    loads them again (``test_a_unit_carrying_a_record_ride_is_one_command``)."""
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    store = backend.run_store()
    thread = f"sha-{uuid.uuid4().hex[:8]}"
    queued, _ = await store.create(RunRecord(run_id=f"run-{thread}", thread_id=thread))
    opening = RecordRide(queued.run_id, queued.replace(status="running", owner="me"))
    await backend.open_thread(thread, "me", 30, _cp(thread, 0), ride=opening)
    await backend.record_effects(thread, [("k0", b"v")], fence="me", ride=RecordRide(queued.run_id))
    looked_up = []
    sha = backend._sha

    async def counting(client: Any, source: str) -> str:
        looked_up.append(source)
        return await sha(client, source)

    monkeypatch.setattr(backend, "_sha", counting)
    for n in range(1, 4):
        reading = RecordRide(queued.run_id)
        await backend.record_effects(thread, [(f"k{n}", b"v")], fence="me", ride=reading)
        assert reading.result == RideResult(queued.version + 1)
    assert looked_up == []
    await backend.aclose()


def _packing_client(url: str) -> tuple[aioredis.Redis, list[tuple[Any, ...]]]:
    """A real client whose connections note every command they pack, with its arguments
    (a pipeline's commands too)."""
    packed: list[tuple[Any, ...]] = []

    class Recording(aioredis.Connection):
        def pack_command(self, *args: Any) -> Any:
            packed.append(args)
            return super().pack_command(*args)

    pool = aioredis.ConnectionPool.from_url(url, connection_class=Recording)
    return aioredis.Redis(connection_pool=pool), packed


async def test_a_run_is_stored_and_its_threads_head_read_in_one_command(
    redis_url: str, redis_prefix: str
) -> None:
    """Submitting a run stores it and reads where its thread stands in one script (it was a
    pipeline of three commands, which cost redis-py as much again as the script); the
    newest checkpoint's id comes from its header, and a corrupt one is still named."""
    client, packed = _packing_client(redis_url)
    backend = RedisBackend(client=client, prefix=redis_prefix)
    store = backend.run_store()
    fresh = await store.create_in_turn(RunRecord(run_id="warm-up", thread_id="warm-up"))
    assert fresh.thread_head == (None, None)  # no checkpoint, no event yet
    thread = f"head-{uuid.uuid4().hex[:8]}"
    await backend.open_thread(thread, "me", 30, _cp(thread, 0))
    events = [StoredEvent(0, b"e0"), StoredEvent(4, b"e4")]
    await backend.commit_step(thread, _cp(thread, 1), events, release_owner="me")
    packed.clear()
    turn = await store.create_in_turn(RunRecord(run_id=f"run-{thread}", thread_id=thread))
    assert [args[0] for args in packed] == ["EVALSHA"]
    assert turn.created and turn.queue_head == f"run-{thread}"
    assert turn.thread_head == ("cp-1", 4)
    await client.rpush(f"{redis_prefix}:{{{thread}}}:cp", b"\x00\x00\x00\x09not json!")
    with pytest.raises(CheckpointDecodeError, match=f"thread '{thread}'"):
        await store.create_in_turn(RunRecord(run_id=f"next-{thread}", thread_id=thread))
    await backend.aclose()
    await client.aclose()


async def test_a_commits_events_travel_in_one_argument(redis_url: str, redis_prefix: str) -> None:
    """However many events a superstep commits, they are one argument of its command (a
    score and a member each cost redis-py a dozen calls to pack), and stored as before."""
    client, packed = _packing_client(redis_url)
    backend = RedisBackend(client=client, prefix=redis_prefix)
    sizes = []
    for n, count in enumerate((1, 40)):
        await backend.commit_step("warm-up", None, [StoredEvent(100 + n, b"w")])  # loads it
        packed.clear()
        events = [StoredEvent(10 * n + i, f"event {n}/{i}".encode()) for i in range(count)]
        await backend.commit_step("t", _cp("t", n), events)
        (command,) = [args for args in packed if args[0] == "EVALSHA"]
        sizes.append(len(command))
    assert sizes[0] == sizes[1]
    stored = await backend.read_events("t")
    assert [(e.seq, e.payload) for e in stored] == [(0, b"event 0/0")] + [
        (10 + i, f"event 1/{i}".encode()) for i in range(40)
    ]
    await backend.aclose()
    await client.aclose()


async def test_a_ride_adds_one_argument_to_its_unit(redis_url: str, redis_prefix: str) -> None:
    """A ride's arguments travel packed in one argument of the unit's command, a write's
    record right after the packed text (it is bytes), and the lease key they are fenced by is
    the unit's own. Each argument costs redis-py a dozen calls; they were 8 and 15 more, then
    one and two. A run's insert is one argument too (it was two)."""
    client, packed = _packing_client(redis_url)
    backend = RedisBackend(client=client, prefix=redis_prefix)
    store = backend.run_store()
    thread, other = f"pack-{uuid.uuid4().hex[:8]}", f"plain-{uuid.uuid4().hex[:8]}"
    queued, _ = await store.create(RunRecord(run_id=f"run-{thread}", thread_id=thread))

    async def size(call: Any) -> int:
        packed.clear()
        await call
        (command,) = [args for args in packed if args[0] == "EVALSHA"]
        return len(command)

    # Warm up: the first call of a script loads it (a second EVALSHA).
    await backend.open_thread(f"warm-{other}", "me", 30, _cp(f"warm-{other}", 0))
    await backend.record_effects(f"warm-{other}", [("k", b"v")], fence="me")
    plain = await size(backend.open_thread(other, "me", 30, _cp(other, 0)))
    opening = RecordRide(queued.run_id, queued.replace(status="running", owner="me"))
    riding = await size(backend.open_thread(thread, "me", 30, _cp(thread, 0), ride=opening))
    assert opening.result is not None and opening.result.stored is not None
    assert riding - plain == 1
    plain = await size(backend.record_effects(other, [("k", b"v")], fence="me"))
    reading = RecordRide(queued.run_id)
    riding = await size(backend.record_effects(thread, [("k", b"v")], fence="me", ride=reading))
    assert riding - plain == 1
    assert reading.result == RideResult(opening.result.stored.version)
    ending = RecordRide(queued.run_id, opening.result.stored.replace(status="succeeded"))
    plain = await size(
        backend.commit_step(other, _cp(other, 1), [], release_owner="me", fence="me")
    )
    riding = await size(
        backend.commit_step(thread, _cp(thread, 1), [], release_owner="me", fence="me", ride=ending)
    )
    assert riding - plain == 1
    assert ending.result is not None and ending.result.stored is not None
    stored = await store.get(queued.run_id)
    assert stored is not None and stored.status == "succeeded" and stored.owner == "me"
    inserted = RunRecord(run_id=f"run-{other}", thread_id=other, labels={"team": "a"})
    assert await size(store.create(inserted)) == 4  # EVALSHA, its sha, no keys, one argument
    found = await store.get(inserted.run_id)
    assert found is not None and (found.thread_id, found.labels) == (other, {"team": "a"})
    page = await store.list(labels={"team": "a"})
    assert [r.run_id for r in page.records] == [inserted.run_id]
    await backend.aclose()
    await client.aclose()


def _replying_client(url: str) -> tuple[aioredis.Redis, list[Any]]:
    """A real client whose connections note every reply they read, as parsed."""
    replies: list[Any] = []

    class Recording(aioredis.Connection):
        async def read_response(self, *args: Any, **kwargs: Any) -> Any:
            reply = await super().read_response(*args, **kwargs)
            replies.append(reply)
            return reply

    pool = aioredis.ConnectionPool.from_url(url, connection_class=Recording)
    return aioredis.Redis(connection_pool=pool), replies


def _elements(reply: Any) -> int:
    """The RESP elements redis-py's parser reads for ``reply`` (an array's header is one)."""
    if isinstance(reply, list):
        return 1 + sum(_elements(r) for r in reply)
    return 1


async def test_a_ride_adds_one_reply_element_at_most_to_its_unit(
    redis_url: str, redis_prefix: str
) -> None:
    """What a ride saw comes back as one integer: alone where the unit's own reply is not
    wanted (a journal write, a commit), else first among that reply's elements. Each element
    costs redis-py's parser a dozen calls; a ride's reply was an array of two around the
    unit's reply and a string (three elements more, two for the opening)."""
    client, replies = _replying_client(redis_url)
    backend = RedisBackend(client=client, prefix=redis_prefix)
    store = backend.run_store()
    thread, other = f"reply-{uuid.uuid4().hex[:8]}", f"plain-{uuid.uuid4().hex[:8]}"
    queued, _ = await store.create(RunRecord(run_id=f"run-{thread}", thread_id=thread))

    async def elements(call: Any) -> int:
        replies.clear()
        await call
        return sum(_elements(r) for r in replies)

    # Warm up: the first call of a script loads it (one reply more), with a ride or not (a
    # ride that reads and one that writes travel in scripts of their own).
    warm, _ = await store.create(RunRecord(run_id=f"warm-{thread}", thread_id=f"warm-{thread}"))
    writing = warm.replace(status="running", owner="me")
    for ride in (None, RecordRide(warm.run_id), RecordRide(warm.run_id, writing)):
        await backend.open_thread(f"warm-{other}", "me", 30, _cp(f"warm-{other}", 0), ride=ride)
        await backend.record_effects(f"warm-{other}", [("k", b"v")], fence="me", ride=ride)
        await backend.commit_step(
            f"warm-{other}", _cp(f"warm-{other}", 1), [], fence="me", ride=ride
        )
    plain = await elements(backend.open_thread(other, "me", 30, _cp(other, 0)))
    opening = RecordRide(queued.run_id, queued.replace(status="running", owner="me"))
    riding = await elements(backend.open_thread(thread, "me", 30, _cp(thread, 0), ride=opening))
    assert riding - plain == 1
    assert opening.result is not None and opening.result.stored is not None
    running = opening.result.stored
    assert running.version == queued.version + 1
    plain = await elements(backend.record_effects(other, [("k", b"v")], fence="me"))
    reading = RecordRide(queued.run_id)
    riding = await elements(backend.record_effects(thread, [("k", b"v")], fence="me", ride=reading))
    assert riding == plain == 1
    assert reading.result == RideResult(running.version)
    plain = await elements(backend.commit_step(other, _cp(other, 1), [], fence="me"))
    ending = RecordRide(queued.run_id, running.replace(status="succeeded"))
    riding = await elements(
        backend.commit_step(thread, _cp(thread, 1), [], release_owner="me", fence="me", ride=ending)
    )
    assert riding == plain == 1
    assert ending.result is not None and ending.result.stored is not None
    assert ending.result.version == running.version + 1
    assert await store.get(queued.run_id) == ending.result.stored
    lost = RecordRide(queued.run_id, running.replace(status="failed"))  # a stale version
    await backend.record_effects(thread, [("k2", b"v")], ride=lost)
    assert lost.result == RideResult(running.version + 1)  # not stored, the version read
    gone = RecordRide("no-such-run")
    await backend.record_effects(thread, [("k3", b"v")], ride=gone)
    assert gone.result == RideResult(None)
    await backend.aclose()
    await client.aclose()


async def test_a_stored_run_and_its_threads_head_come_back_as_one_reply_element(
    redis_url: str, redis_prefix: str
) -> None:
    """Storing a run in turn answers with one string (the queue's head and where the thread
    stands), not a nested array of six elements at a dozen parser calls each; ids with
    spaces come through whole, and an idempotent repeat still gets the stored run."""
    client, replies = _replying_client(redis_url)
    backend = RedisBackend(client=client, prefix=redis_prefix)
    store = backend.run_store()
    await store.create_in_turn(RunRecord(run_id="warm-up", thread_id="warm-up"))
    thread = f"head {uuid.uuid4().hex[:8]}"
    for fresh_thread in (True, False):
        if not fresh_thread:
            await backend.open_thread(thread, "me", 30, _cp(thread, 0))
            first = StoredCheckpoint(thread, "cp 1 b", "cp-0", 1, 1.0, b"p", base_id="cp-0")
            await backend.commit_step(thread, first, [StoredEvent(7, b"e")], release_owner="me")
        replies.clear()
        run_id = f"run {fresh_thread} of {thread}"
        record = RunRecord(run_id=run_id, thread_id=thread, idempotency_key=f"key {run_id}")
        turn = await store.create_in_turn(record)
        assert sum(_elements(r) for r in replies) == 1
        head = run_id if fresh_thread else f"run True of {thread}"
        assert (turn.created, turn.queue_head) == (True, head)
        assert turn.thread_head == ((None, None) if fresh_thread else ("cp 1 b", 7))
    again = await store.create_in_turn(
        RunRecord(run_id="another", thread_id=thread, idempotency_key=f"key {run_id}")
    )
    assert not again.created and again.record.run_id == run_id
    await backend.aclose()
    await client.aclose()


async def test_a_commits_events_are_framed_at_two_calls_each(
    redis_url: str, redis_prefix: str
) -> None:
    """Framing a commit's events into its one argument costs two C calls an event (a length
    and a struct pack), where it took six (a generator, two helpers, three conversions)."""
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        calls += event in ("call", "c_call")

    spent = []
    for n, size in enumerate((1, 201)):
        await backend.commit_step("warm-up", None, [StoredEvent(500 + n, b"w")])
        events = [StoredEvent(1000 * n + i, f"event {i}".encode()) for i in range(size)]
        calls = 0
        sys.setprofile(count)
        try:
            await backend.commit_step("t", None, events)
        finally:
            sys.setprofile(None)
        spent.append(calls)
    assert (spent[1] - spent[0]) / 200 < 3
    assert len(await backend.read_events("t")) == 202
    await backend.aclose()


async def test_more_calls_at_once_than_the_pool_holds_wait_for_a_connection(
    redis_url: str, redis_prefix: str
) -> None:
    """A busy server (32 runs, 64 HTTP requests, followers) has more calls in flight than
    the client's pool holds connections: they wait for one (up to ``command_timeout``)
    instead of failing at once with redis-py's "Too many connections" — which a runner took
    for an outage and could not store a run's outcome (found by bench_double_texting.py)."""
    backend = RedisBackend(redis_url, prefix=redis_prefix, max_connections=8)
    try:
        found = await asyncio.gather(*(backend.latest_checkpoint(f"t{n}") for n in range(300)))
        assert found == [None] * 300
        pool = backend._client.connection_pool  # type: ignore[union-attr]
        assert pool.max_connections == 8
    finally:
        await backend.aclose()
    with pytest.raises(ValueError, match="max_connections"):
        RedisBackend(redis_url, max_connections=0)


async def test_an_idle_connection_is_checked_out_and_back_without_the_pools_lock(
    redis_url: str, redis_prefix: str
) -> None:
    """Where nobody waits for a connection, a command takes an idle one and gives it back
    without the blocking pool's condition (its lock, timeout scope and bookkeeping cost a
    quarter of a command); callers beyond the pool's size still wait their turn there."""
    backend = RedisBackend(redis_url, prefix=redis_prefix, max_connections=4)
    try:
        assert await backend.latest_checkpoint("t") is None  # one connection, idle again
        pool: Any = backend._client.connection_pool  # type: ignore[union-attr]
        entered: list[int] = []

        class Watched(asyncio.Condition):
            async def __aenter__(self) -> None:
                entered.append(1)
                await super().__aenter__()

        pool._condition = Watched()
        assert await backend.latest_checkpoint("t") is None
        assert entered == []
        found = await asyncio.gather(*(backend.latest_checkpoint(f"t{n}") for n in range(50)))
        assert found == [None] * 50
        assert entered  # more callers than connections: they waited on the condition
        assert len(pool._in_use_connections) == 0
        assert len(pool._available_connections) <= 4
    finally:
        await backend.aclose()


async def test_a_command_the_socket_takes_is_sent_without_a_task(
    redis_url: str, redis_prefix: str
) -> None:
    """redis-py bounds every write with ``asyncio.wait_for``: a task, a timer and two turns
    of the event loop per command, a quarter of what a command costs the client. A write
    the socket takes at once has nothing to wait for, so the backend's connections skip it."""
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    loop = asyncio.get_running_loop()
    tasks: list[Any] = []

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        tasks.append(coro)
        return asyncio.Task(coro, loop=loop, **kwargs)

    try:
        assert await backend.latest_checkpoint("t") is None  # connected, scripts loaded
        await backend.record_effects("t", [("warm", b"v")])
        loop.set_task_factory(counting)  # type: ignore[arg-type]
        await backend.record_effects("t", [("k", b"v")])
        assert await backend.lookup_effect("t", "k") == b"v"
        assert await backend.latest_checkpoint("t") is None
        assert tasks == []
    finally:
        loop.set_task_factory(None)
        await backend.aclose()


async def test_a_write_the_socket_cannot_take_at_once_drains_within_the_timeout(
    redis_url: str, redis_prefix: str, redis_proxy: Any
) -> None:
    """What the socket does not take at once goes out through redis-py's bounded path: a
    large value arrives whole, and one the server stops reading fails within
    ``command_timeout`` as the backend being unavailable, not a hang."""
    backend = RedisBackend(redis_proxy.via(redis_url), prefix=redis_prefix, command_timeout=2.0)
    try:
        large = bytes(range(256)) * (64 * 1024)  # 16 MiB: more than the socket takes at once
        await backend.record_effects("t", [("large", large)])
        assert await backend.lookup_effect("t", "large") == large
        redis_proxy.freeze()
        try:
            with pytest.raises(BackendUnavailableError, match="Timeout writing to socket"):
                await backend.record_effects("t", [("stuck", large * 2)])
        finally:
            redis_proxy.thaw()
        assert await backend.lookup_effect("t", "large") == large  # a fresh connection
    finally:
        await backend.aclose()


async def test_a_runners_run_on_redis_leaves_no_reference_cycle(
    redis_url: str, redis_prefix: str
) -> None:
    """Every object a run made on Redis is freed as the run ends, none waits for the garbage
    collector: its collections were a fifth of a runner's run (the serializer's hooks, the
    run's effect log and its journal's fork resolver each made a cycle per run)."""
    import gc

    from tensorsketch.runs import AsyncRunner

    backend = RedisBackend(redis_url, prefix=redis_prefix)
    runner = AsyncRunner(COUNTER, backend=backend)
    await runner.start()

    async def run(thread: str) -> None:
        record = await runner.submit({}, thread_id=thread)
        assert (await runner.await_run(record.run_id)).status == "succeeded"

    try:
        for i in range(3):
            await run(f"warm-{i}")
        gc.collect()
        gc.disable()
        try:
            for i in range(3):
                await run(f"measured-{i}")
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            left = sorted({type(o).__qualname__ for o in gc.garbage})
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    finally:
        await runner.aclose()
        await backend.aclose()
    assert left == []


async def test_due_skips_a_record_that_moved_on_after_the_index_was_read(
    redis_url: str, redis_prefix: str
) -> None:
    """``due`` reads the index, then the records: a schedule fired by another runner in
    between still has its old score in what was read, and must not come back as due."""
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    store = backend.run_store()
    later = time.time() + 3600
    record = RunRecord(
        run_id="sched-1",
        thread_id="schedule_t",
        graph="g",
        kind="schedule",
        status="suspended",
        waiting_for="timer",
        wake_at=later,
    )
    await store.create(record)
    client = aioredis.Redis.from_url(redis_url)
    await client.zadd(f"{redis_prefix}:{{runs}}:due", {"sched-1": time.time() - 1})
    await client.aclose()
    assert await store.due(time.time()) == []
    await backend.aclose()
