"""What a runner run asks of the Redis server (#49 item 1): the commands its scripts run and
the strings they make, watched with ``MONITOR`` (filtered to this test's keys, as the server
may be shared). Every byte of a string a script receives or cuts out costs the server a dozen
instructions to hash, and every ``redis.call`` a few thousand."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from tensorsketch.errors import LeaseLostError
from tensorsketch.runtime.backends.base import StoredCheckpoint, StoredEvent
from tensorsketch.runtime.backends.redis import RedisBackend
from tensorsketch.runtime.backends.rides import RecordRide
from tensorsketch.runtime.backends.runs import RunRecord

pytestmark = pytest.mark.redis


#: A ``MONITOR`` line: ``+<time> [<db> <client>] "<arg>" "<arg>" ...`` (redis-py's patterns).
_MONITOR_LINE = re.compile(r"\[(\d+) (.*?)\] (.*)")
_MONITOR_ARG = re.compile(r'"(.*?)(?<!\\)"')


async def _monitored(
    url: str, prefix: str, action: Callable[[], Awaitable[Any]]
) -> list[tuple[str, ...]]:
    """The commands the server ran (scripts' own included) that name a key under ``prefix``,
    while ``action`` ran.

    ``MONITOR`` streams every client's commands, other tests' too (the server is shared), one
    line each; a large write, its bytes escaped, passes 64 KiB on one line and overran
    redis-py's line reader (``ValueError: Separator is not found``). So the stream is read
    here, over a plain connection whose reader takes lines of up to 64 MiB."""
    address = urllib.parse.urlsplit(url)
    reader, writer = await asyncio.open_connection(
        address.hostname or "127.0.0.1", address.port or 6379, limit=1 << 26
    )
    marker = f"{prefix}:end-{uuid.uuid4().hex}"
    seen: list[tuple[str, ...]] = []

    async def listen() -> None:
        while True:
            line = await reader.readline()
            if not line:
                msg = "the MONITOR connection closed before the end marker came"
                raise ConnectionError(msg)
            found = _MONITOR_LINE.search(line.decode("utf-8", "replace"))
            if found is None:
                continue
            command = found.group(3)
            if marker in command:
                return
            if prefix in command:
                seen.append(tuple(arg.replace('\\"', '"') for arg in _MONITOR_ARG.findall(command)))

    echo = aioredis.Redis.from_url(url)
    task: asyncio.Task[None] | None = None
    try:
        if address.password:  # AUTH [user] password, as a RESP array
            words = [b"AUTH", *([address.username.encode()] if address.username else [])]
            words.append(urllib.parse.unquote(address.password).encode())
            writer.write(
                b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)
            )
            answer = await reader.readline()
            assert answer.startswith(b"+OK"), answer
        writer.write(b"MONITOR\r\n")
        await writer.drain()
        answer = await reader.readline()
        assert answer.startswith(b"+OK"), answer  # MONITOR is on before the action starts
        task = asyncio.create_task(listen())
        await action()
        await echo.echo(marker)
        await asyncio.wait_for(task, 10)
    finally:
        if task is not None:
            task.cancel()  # an action that raised leaves it reading
        await echo.aclose()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return seen


def _cp(thread: str, n: int) -> StoredCheckpoint:
    return StoredCheckpoint(thread, f"cp-{n}", None if n == 0 else f"cp-{n - 1}", n, 1.0, b"p")


def _new(run_id: str, thread: str) -> RunRecord:
    at = time.time()
    return RunRecord(run_id=run_id, thread_id=thread, owner="me", lease_expires_at=at + 30).replace(
        created_at=at, updated_at=at, version=1
    )


async def test_a_folded_run_that_takes_its_lease_is_stored_running_not_moved_there(
    redis_url: str, redis_prefix: str
) -> None:
    """A folded opening whose run heads its thread stores the record as the ride wrote it
    (``running``, version 2), where it stored it ``queued`` and then moved it: no ``queued``
    index or count touched, one hash write. A run behind another is stored ``queued``."""
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    store = backend.run_store()
    plain = aioredis.Redis.from_url(redis_url)
    base = f"{redis_prefix}:{{runs}}:"
    try:
        await store.create(_new("warm", "t-warm"))  # the run keys in use: folds_submits
        first = _new("run-first", "t-fold")
        ride = RecordRide(first.run_id, first.replace(status="running"), insert=first)

        async def fold() -> None:
            opened = await backend.open_thread("t-fold", "me", 30, _cp("t-fold", 0), ride=ride)
            assert opened.acquired

        commands = await _monitored(redis_url, redis_prefix, fold)
        assert ride.result is not None and ride.result.version == 2
        assert ride.result.stored is not None and ride.result.stored.status == "running"
        stored = await store.get(first.run_id)
        assert stored is not None and (stored.status, stored.version) == ("running", 2)
        names = [c[0].upper() for c in commands if c[0].upper() != "EVALSHA"]
        assert "ZREM" not in names and names.count("HSET") == 2  # the record, the chain index
        assert not any(f"{base}status:queued" in c for c in commands)
        assert await plain.hget(base + "counts", "running") == b"1"
        assert await plain.zrange(base + "status:running", 0, -1) == [b"run-first"]
        second = _new("run-second", "t-fold")
        behind = RecordRide(second.run_id, second.replace(status="running"), insert=second)
        refused = await backend.open_thread("t-fold", "me", 30, _cp("t-fold", 9), ride=behind)
        assert not refused.acquired and behind.result is not None
        assert behind.result.stored is None and behind.result.version == 1
        queued = await store.get(second.run_id)
        assert queued is not None and (queued.status, queued.version) == ("queued", 1)
        assert await plain.zrange(base + "status:queued", 0, -1) == [b"warm", b"run-second"]
    finally:
        await plain.aclose()
        await backend.aclose()


async def test_a_transition_leaves_the_due_and_undelivered_indexes_alone_unless_in_them(
    redis_url: str, redis_prefix: str
) -> None:
    """Moving a run from one status to another removes it from ``due`` and ``undelivered``
    only where its stored fields put it there (a suspended run with a wake-up time; a
    finished one with a webhook to deliver): two commands less a transition."""
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    store = backend.run_store()
    base = f"{redis_prefix}:{{runs}}:"
    try:
        queued, _ = await store.create(RunRecord(run_id="run-plain", thread_id="t-plain"))
        ending = RecordRide(queued.run_id, queued.replace(status="succeeded"))
        await backend.record_effects("t-plain", [("k0", b"v")], ride=ending)  # loads it

        async def finish() -> None:
            again = await store.get(queued.run_id)
            assert again is not None
            ride = RecordRide(again.run_id, again.replace(status="cancelled"))
            await backend.record_effects("t-plain", [("k1", b"v")], ride=ride)
            assert ride.result is not None and ride.result.stored is not None

        commands = await _monitored(redis_url, redis_prefix, finish)
        removed = [c[1] for c in commands if c[0].upper() == "ZREM"]
        assert removed == [f"{base}status:succeeded"]
        # A suspended run with a wake-up time is in `due`, and leaves it.
        sleeping, _ = await store.create(
            RunRecord(run_id="run-sleep", thread_id="t-sleep", status="suspended", wake_at=5.0)
        )
        assert await store.due(10.0) != []
        woken = RecordRide(sleeping.run_id, sleeping.replace(status="queued", wake_at=None))
        await backend.record_effects("t-sleep", [("k", b"v")], ride=woken)
        assert woken.result is not None and woken.result.stored is not None
        assert await store.due(10.0) == []
    finally:
        await backend.aclose()


async def test_a_ride_that_only_reads_sends_its_record_key_alone(
    redis_url: str, redis_prefix: str
) -> None:
    """A ride that reads the record's version (most rides: a journal write's) adds one short
    argument, the record's key after a flag, not a msgpack array the script must unpack."""
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    store = backend.run_store()
    try:
        queued, _ = await store.create(RunRecord(run_id="run-read", thread_id="t-read"))
        reading = RecordRide(queued.run_id)

        async def read() -> None:
            await backend.record_effects("t-read", [("k", b"v")], ride=reading)

        await read()  # loads the script
        commands = await _monitored(redis_url, redis_prefix, read)
        (call,) = [c for c in commands if c[0].upper() == "EVALSHA"]
        assert call[-1] == f"0{redis_prefix}:{{runs}}:rec:run-read"
        assert reading.result is not None and reading.result.version == queued.version
    finally:
        await backend.aclose()


async def test_a_commits_one_event_is_sent_as_the_member_it_is_stored_as(
    redis_url: str, redis_prefix: str
) -> None:
    """A commit's one event (a run's events are one row a commit) travels as the member the
    script stores, not framed in an argument the script cuts it out of; several are framed."""
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    try:
        await backend.commit_step("warm", None, [StoredEvent(1, b"w")])  # loads the script

        async def commit() -> None:
            await backend.commit_step("t-ev", None, [StoredEvent(65, b"one-row")])

        commands = await _monitored(redis_url, redis_prefix, commit)
        (call,) = [c for c in commands if c[0].upper() == "EVALSHA"]
        assert call[-1] == "\\x00" * 7 + "Aone-row"  # the seq (65: "A"), the payload
        await backend.commit_step("t-ev", None, [StoredEvent(66, b"a"), StoredEvent(67, b"b")])
        stored = await backend.read_events("t-ev")
        assert [(e.seq, e.payload) for e in stored] == [(65, b"one-row"), (66, b"a"), (67, b"b")]
    finally:
        await backend.aclose()


async def test_a_fenced_last_commit_with_a_write_reads_the_lease_once(
    redis_url: str, redis_prefix: str
) -> None:
    """A run's last commit (fenced by its lease, releasing it, its record's write riding
    first) reads the lease once: the fence serves the ride and the release too (it read the
    lease three times). A lease another owner holds refuses all of it: no record written,
    the lease left alone. A fenced commit without a ride reads it once as well (was twice)."""
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    store = backend.run_store()
    plain = aioredis.Redis.from_url(redis_url)
    lease = f"{redis_prefix}:{{t-end}}:lease"
    try:
        queued, _ = await store.create(RunRecord(run_id="run-end", thread_id="t-end"))
        opening = RecordRide(queued.run_id, queued.replace(status="running", owner="me"))
        assert (
            await backend.open_thread("t-end", "me", 30, _cp("t-end", 0), ride=opening)
        ).acquired
        running = opening.result.stored if opening.result else None
        assert running is not None
        await plain.set(lease, "other")
        refused = RecordRide(running.run_id, running.replace(status="succeeded"))
        with pytest.raises(LeaseLostError):
            await backend.commit_step(
                "t-end", _cp("t-end", 1), [], release_owner="me", fence="me", ride=refused
            )
        assert await plain.get(lease) == b"other"
        assert (await store.get(running.run_id)).status == "running"  # type: ignore[union-attr]
        await plain.set(lease, "me")
        ending = RecordRide(running.run_id, running.replace(status="succeeded"))

        async def end() -> None:
            await backend.commit_step(
                "t-end", _cp("t-end", 1), [], release_owner="me", fence="me", ride=ending
            )

        commands = await _monitored(redis_url, redis_prefix, end)
        assert [c[0].upper() for c in commands].count("GET") == 1
        assert ending.result is not None and ending.result.stored is not None
        assert (await store.get(running.run_id)).status == "succeeded"  # type: ignore[union-attr]
        assert await plain.get(lease) is None
        await plain.set(lease, "me")

        async def release() -> None:
            await backend.commit_step("t-end", None, [], release_owner="me", fence="me")

        commands = await _monitored(redis_url, redis_prefix, release)
        assert [c[0].upper() for c in commands].count("GET") == 1
        assert await plain.get(lease) is None
    finally:
        await plain.aclose()
        await backend.aclose()


async def test_the_head_of_a_long_threads_queue_is_found_without_reading_every_run(
    redis_url: str, redis_prefix: str
) -> None:
    """A submit finds the oldest queued or running run of its thread (the head of its queue)
    from the status indexes past the thread's first sixteen runs: no status read of each of its
    finished runs (a thread's every earlier run was read at every submit), the same head,
    for a stored run and a folded opening alike."""
    backend = RedisBackend(redis_url, prefix=redis_prefix)
    store = backend.run_store()
    at = time.time()

    async def fill(thread: str, active: dict[int, str]) -> None:
        for i in range(40):
            status = active.get(i, "succeeded")
            record = RunRecord(run_id=f"{thread}-{i:02d}", thread_id=thread, status=status)  # type: ignore[arg-type]
            await store.create(record.replace(created_at=at + i, updated_at=at + i))

    try:
        await fill("t-busy", {35: "queued", 37: "running"})
        await fill("t-done", {})
        # a queued record of another kind (a schedule) does not hold a run back
        cron = RunRecord(run_id="t-done-cron", thread_id="t-done", kind="schedule")
        await store.create(cron.replace(created_at=at + 3, updated_at=at + 3))
        late = RunRecord(run_id="t-busy-new", thread_id="t-busy").replace(
            created_at=at + 50, updated_at=at + 50
        )
        turns: list[Any] = []

        async def submit() -> None:
            turns.append(await store.create_in_turn(late))

        commands = await _monitored(redis_url, redis_prefix, submit)
        assert turns[0].created and turns[0].queue_head == "t-busy-35"
        assert sum(c[0].upper() == "HMGET" for c in commands) == 16  # the first 16, not 36
        early = RunRecord(run_id="t-busy-early", thread_id="t-busy").replace(
            created_at=at + 35, updated_at=at + 35
        )
        assert (await store.create_in_turn(early)).queue_head == "t-busy-35"  # a tie: by id
        tied = RunRecord(run_id="t-busy-34z", thread_id="t-busy").replace(
            created_at=at + 35, updated_at=at + 35
        )
        assert (await store.create_in_turn(tied)).queue_head == "t-busy-34z"
        first = RunRecord(run_id="t-busy-000", thread_id="t-busy").replace(
            created_at=at - 1, updated_at=at - 1
        )
        assert (await store.create_in_turn(first)).queue_head == "t-busy-000"
        fresh = _new("t-done-new", "t-done")
        ride = RecordRide(fresh.run_id, fresh.replace(status="running"), insert=fresh)
        opened = await backend.open_thread("t-done", "me", 30, _cp("t-done", 0), ride=ride)
        assert opened.acquired and ride.result is not None and ride.result.version == 2
        behind = _new("t-busy-fold", "t-busy")
        ride = RecordRide(behind.run_id, behind.replace(status="running"), insert=behind)
        refused = await backend.open_thread("t-busy", "me", 30, _cp("t-busy", 0), ride=ride)
        assert not refused.acquired and ride.result is not None and ride.result.version == 1
    finally:
        await backend.aclose()
