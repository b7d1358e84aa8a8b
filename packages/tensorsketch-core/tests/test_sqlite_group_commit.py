"""Group commit on SQLite: units of work that wait for the worker thread together share one
transaction and one commit, and a unit that fails in the group fails alone."""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from tensorsketch.runtime.backends.runs import RunRecord
from tensorsketch.runtime.backends.sql import Query
from tensorsketch.runtime.backends.sqlite import SqliteBackend


class CountingBackend(SqliteBackend):
    """Counts the SQLite transactions its connection runs: each ``BEGIN`` and each write
    outside one (an autocommit statement is a transaction of its own)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.transactions = 0

    def connect(self) -> sqlite3.Connection:
        conn = super().connect()

        def seen(sql: str) -> None:
            head = sql.lstrip().upper()
            if head.startswith("BEGIN") or (
                not conn.in_transaction and head.startswith(("INSERT", "UPDATE", "DELETE"))
            ):
                self.transactions += 1

        conn.set_trace_callback(seen)
        return conn


async def together(backend: SqliteBackend, *calls: Awaitable[Any]) -> list[Any]:
    """Run ``calls`` so that all of them wait for the worker thread at once: the worker is
    held until every one has reached its queue."""
    gate, holding = threading.Event(), threading.Event()
    worker = backend._worker
    queued: list[int] = []  # the calls in each queue item (one item per loop turn)
    queue_all = worker._queue_all

    def counted(items: list[Any]) -> None:
        queued.append(len(items))
        queue_all(items)

    def hold() -> None:
        holding.set()
        gate.wait()

    worker._queue_all = counted  # type: ignore[method-assign]
    held = worker.run(hold)
    tasks = [asyncio.ensure_future(c) for c in calls]
    for _ in range(1000):
        if holding.is_set() and sum(queued) >= len(calls) + 1:
            break
        await asyncio.sleep(0.001)
    assert sum(queued) == len(calls) + 1
    gate.set()
    await held
    return await asyncio.gather(*tasks, return_exceptions=True)


def record(n: int) -> RunRecord:
    return RunRecord(run_id=f"run-{n}", thread_id=f"t-{n}", labels={"n": str(n)})


async def test_concurrent_submits_share_one_commit(tmp_path: Path) -> None:
    backend = CountingBackend(tmp_path / "runs.db")
    store = backend.run_store()
    await store.create(record(0))  # the tables exist
    before = backend.transactions
    results = await together(backend, *(store.create(record(n)) for n in range(1, 9)))
    assert [created for _, created in results] == [True] * 8
    # One transaction for the eight (each alone: eight).
    assert backend.transactions - before == 1
    page = await store.list(limit=50)
    assert sorted(r.run_id for r in page.records) == [f"run-{n}" for n in range(9)]
    stored = await store.get("run-5")
    assert stored is not None and stored.labels == {"n": "5"}
    await backend.aclose()


async def test_a_submit_that_fails_in_a_group_fails_alone(tmp_path: Path) -> None:
    backend = CountingBackend(tmp_path / "runs.db")
    store = backend.run_store()
    await store.create(record(0))
    before = backend.transactions
    calls = [store.create(record(1)), store.create(record(0)), store.create(record(2))]
    first, duplicate, last = await together(backend, *calls)
    assert isinstance(duplicate, sqlite3.IntegrityError)  # run-0 is stored already
    assert first[1] and last[1]
    assert backend.transactions - before == 1
    page = await store.list(limit=50)
    assert sorted(r.run_id for r in page.records) == ["run-0", "run-1", "run-2"]
    await backend.aclose()


async def _table(backend: SqliteBackend) -> None:
    create = Query("CREATE TABLE IF NOT EXISTS t (n INTEGER PRIMARY KEY)")
    await backend.run_queries("test", [create])


def _insert(*ns: int) -> list[Query]:
    return [Query("INSERT INTO t (n) VALUES (?)", (n,)) for n in ns]


async def _rows(backend: SqliteBackend) -> list[int]:
    q = Query("SELECT n FROM t ORDER BY n", fetch="all")
    return [n for (n,) in (await backend.run_queries("test", [q]))[0]]


async def test_a_failed_unit_is_undone_to_its_savepoint(tmp_path: Path) -> None:
    backend = CountingBackend(tmp_path / "units.db")
    await _table(backend)
    await backend.run_queries("test", _insert(1))
    before = backend.transactions
    a, b, c, empty = await together(
        backend,
        backend.run_queries("test", _insert(2)),
        # Its first insert succeeds, its second hits the primary key: both are undone.
        backend.run_queries("test", _insert(3, 1), transaction=True),
        backend.run_queries("test", _insert(4), transaction=True),
        backend.run_queries("test", [], transaction=True),
    )
    assert a == [None] and c == [None] and empty == []
    assert isinstance(b, sqlite3.IntegrityError)
    assert backend.transactions - before == 1
    assert await _rows(backend) == [1, 2, 4]
    await backend.aclose()


async def test_units_run_alone_when_an_error_ends_the_group(tmp_path: Path) -> None:
    backend = CountingBackend(tmp_path / "units.db")
    await _table(backend)
    # A unit that ends the group's transaction, then fails: the units before and after it
    # were not committed with the group and run again, each on its own.
    breaking = [Query("ROLLBACK"), Query("SELECT * FROM missing")]
    a, b, c = await together(
        backend,
        backend.run_queries("test", _insert(1)),
        backend.run_queries("test", breaking),
        backend.run_queries("test", _insert(2, 3), transaction=True),
    )
    assert a == [None] and c == [None, None]
    assert isinstance(b, sqlite3.OperationalError)
    assert await _rows(backend) == [1, 2, 3]
    await backend.aclose()


@pytest.mark.parametrize("durable", [True, False])
async def test_a_lone_unit_runs_as_before(tmp_path: Path, durable: bool) -> None:
    backend = CountingBackend(tmp_path / "units.db")
    await _table(backend)
    before = backend.transactions
    await backend.run_queries("test", _insert(1, 2), transaction=True, durable=durable)
    await backend.run_queries("test", _insert(3), durable=durable)
    assert backend.transactions - before == 2
    assert await _rows(backend) == [1, 2, 3]
    await backend.aclose()


async def test_units_made_in_one_loop_turn_share_a_commit_across_blocking_calls(
    tmp_path: Path,
) -> None:
    # A server's loop turn writes to sockets between the units its tasks make: each write
    # releases the GIL, and a worker that took every unit as it came would commit the first
    # ones alone. The units made in one turn reach the worker together.
    backend = CountingBackend(tmp_path / "turn.db")
    store = backend.run_store()
    await store.create(record(0))  # the tables exist
    before = backend.transactions

    async def block() -> None:
        time.sleep(0.02)  # a blocking call (a socket write) that lets the worker thread run

    # Every task's first step runs in the same turn, in this order: a unit, a blocking call,
    # the next unit, ...
    steps: list[Any] = []
    for n in range(1, 5):
        steps += [store.create(record(n)), block()]
    results = await asyncio.gather(*steps)
    assert [created for _, created in results[::2]] == [True] * 4
    assert backend.transactions - before == 1
    await backend.aclose()


async def test_a_unit_made_with_nothing_else_to_run_goes_to_the_worker_at_once(
    tmp_path: Path,
) -> None:
    # Waiting for the turn to end only pays where another unit may come in that turn: a lone
    # run's unit (the loop's ready queue empty) would wait a whole loop iteration for none.
    backend = SqliteBackend(tmp_path / "lone.db")
    store = backend.run_store()
    await store.create(record(0))
    worker = backend._worker
    handed: list[int] = []
    hand_over = worker._hand_over

    def counted(loop: asyncio.AbstractEventLoop) -> None:
        handed.append(len(worker._turns[loop]))
        hand_over(loop)

    worker._hand_over = counted  # type: ignore[method-assign]
    for n in range(1, 4):
        await store.create(record(n))
    assert handed == []
    # Units made in one turn with more to run still go together, at its end.
    await asyncio.gather(*(store.create(record(n)) for n in range(4, 8)))
    assert handed and sum(handed) == 4
    await backend.aclose()


async def test_a_unit_that_cannot_fail_half_done_runs_without_a_savepoint(
    tmp_path: Path,
) -> None:
    """A read and then one write (a reading fence and its journal record) cannot fail after
    a write of its own: it runs without a savepoint, and still fails alone (the database
    undoes the failed statement). A write followed by anything, or a batch of several rows,
    keeps its savepoint."""
    backend = CountingBackend(tmp_path / "units.db")
    await _table(backend)
    await backend.run_queries("test", _insert(1))
    savepoints: list[str] = []
    conn = backend._connection
    assert conn is not None
    conn.set_trace_callback(lambda sql: savepoints.append(sql) if "_unit" in sql else None)
    read = Query("SELECT COUNT(*) FROM t", fetch="one")
    many = Query("INSERT INTO t (n) VALUES (?)", [(7,), (1,)], many=True)
    a, b, c, d, e = await together(
        backend,
        backend.run_queries("test", [read, *_insert(2)], transaction=True),
        backend.run_queries("test", [read, *_insert(1)], transaction=True),  # the key exists
        backend.run_queries("test", [*_insert(3), read], transaction=True),
        backend.run_queries("test", [read, many], transaction=True),  # its second row fails
        backend.run_queries("test", [read, *_insert(4)], transaction=True),
    )
    assert a == [(1,), None] and c == [None, (3,)] and e[1] is None
    assert isinstance(b, sqlite3.IntegrityError) and isinstance(d, sqlite3.IntegrityError)
    assert await _rows(backend) == [1, 2, 3, 4]
    assert savepoints == [
        "SAVEPOINT tensorsketch_unit",  # the write followed by a read
        "RELEASE tensorsketch_unit",
        "SAVEPOINT tensorsketch_unit",  # the batch of two rows, undone
        "ROLLBACK TO tensorsketch_unit",
        "RELEASE tensorsketch_unit",
    ]


async def test_a_turns_units_reach_the_worker_as_one_queue_item(tmp_path: Path) -> None:
    # Each put may wake the worker (a futex call and a GIL hand-off) to take one unit: the
    # units a turn made go in one put, and the worker still takes them in order.
    backend = CountingBackend(tmp_path / "turn.db")
    await _table(backend)
    puts: list[Any] = []

    class Counting(queue.SimpleQueue[Any]):
        def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
            puts.append(item)
            super().put(item, block, timeout)

    backend._worker.stop()
    backend._worker._queue = Counting()
    before = backend.transactions
    results = await asyncio.gather(
        *(backend.run_queries("test", _insert(n)) for n in range(1, 9)),
        backend.run_queries("test", [Query("SELECT count(*) FROM t", fetch="one")]),
    )
    assert len(puts) == 1 and len(puts[0]) == 9
    assert results[-1] == [(8,)]  # in order: the eight inserts came before the count
    assert backend.transactions - before == 1  # still one group commit
    await backend.aclose()


async def test_a_group_takes_units_from_turns_already_waiting(tmp_path: Path) -> None:
    # Units of two turns that wait for the worker together still share one commit: the
    # group gathers from the first turn's list and then from the lists queued behind it.
    backend = CountingBackend(tmp_path / "turns.db")
    store = backend.run_store()
    await store.create(record(0))
    before = backend.transactions
    gate, holding = threading.Event(), threading.Event()

    def hold() -> None:
        holding.set()
        gate.wait()

    held = backend._worker.run(hold)
    first = asyncio.gather(*(store.create(record(n)) for n in range(1, 4)))
    await asyncio.sleep(0.01)  # a turn of its own
    second = asyncio.gather(*(store.create(record(n)) for n in range(4, 7)))
    for _ in range(1000):
        if holding.is_set() and backend._worker._queue.qsize() >= 2:
            break
        await asyncio.sleep(0.001)
    assert backend._worker._queue.qsize() == 2
    gate.set()
    await held
    assert [created for _, created in await first + await second] == [True] * 6
    assert backend.transactions - before == 1
    await backend.aclose()
