"""``PostgresBackend`` specifics on the real server: schema creation and versioning, the ways
to hand it connections, event-loop changes, one round trip per unit of work, and a missing
driver."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import pq
from psycopg_pool import AsyncConnectionPool

from tensorsketch import START, BackendUnavailableError, Context, Graph, Node, Schema
from tensorsketch.errors import CheckpointDecodeError, ThreadBusyError
from tensorsketch.registry import create_backend
from tensorsketch.runtime.backends.base import StoredCheckpoint, StoredEvent
from tensorsketch.runtime.backends.postgres import PostgresBackend
from tensorsketch.runtime.backends.sql import SCHEMA_VERSION, Query
from tensorsketch.runtime.loops import run_on_private_loop
from tensorsketch.testing.ports import free_port
from tensorsketch.threads import list_threads

pytestmark = pytest.mark.postgres


class Count(Schema):
    n: int = 0


class Inc(Node):
    class In(Schema):
        n: int

    class Out(Schema):
        n: int

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(n=await ctx.step("inc", lambda: inp.n + 1))


COUNTER = Graph(Count).add(Inc).edge(START, "Inc").loop("Inc", until=lambda s: s.n >= 3).compile()


def _tables(dsn: str, schema: str) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchall()
        names = {r[0] for r in rows}
        version = None
        if "tensorsketch_schema_version" in names:
            version = conn.execute(
                f'SELECT component, version FROM "{schema}".tensorsketch_schema_version'
            ).fetchall()
    return {"names": names, "version": version}


async def test_schema_and_tables_are_created_on_first_use(pg_dsn: str, pg_schema: str) -> None:
    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    assert _tables(pg_dsn, pg_schema)["names"] == set()
    out = await COUNTER.invoke({}, thread_id="t", backend=backend)
    assert out.n == 3
    found = _tables(pg_dsn, pg_schema)
    assert found["names"] == {
        "tensorsketch_schema_version",
        "tensorsketch_checkpoints",
        "tensorsketch_effects",
        "tensorsketch_events",
        "tensorsketch_leases",
        "tensorsketch_blobs",
    }
    assert found["version"] == [("durable", SCHEMA_VERSION)]
    await backend.aclose()


async def test_a_layout_1_store_is_migrated_once(pg_dsn: str, pg_schema: str) -> None:
    """Tables as 0.1.0 created them (no ``base_id``), migrated by several handles at once."""
    import json

    rows = [
        {
            "v": 1,
            "base": True,
            "source": "input",
            "seq": 0,
            "plan": [["Inc", None]],
            "changes": {"n": ["set", 0]},
        }
    ]
    rows += [
        {
            "v": 1,
            "base": False,
            "source": "loop",
            "seq": 0,
            "plan": [["Inc", None]] if n < 2 else [],
            "changes": {"n": ["set", n + 1]},
        }
        for n in range(3)
    ]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{pg_schema}"')
        conn.execute(
            f'CREATE TABLE "{pg_schema}".tensorsketch_schema_version '
            "(component VARCHAR(64) PRIMARY KEY, version INTEGER NOT NULL)"
        )
        conn.execute(
            f"INSERT INTO \"{pg_schema}\".tensorsketch_schema_version VALUES ('durable', 1)"
        )
        conn.execute(
            f'CREATE TABLE "{pg_schema}".tensorsketch_checkpoints (thread_id TEXT NOT NULL, '
            "position BIGINT NOT NULL, checkpoint_id TEXT NOT NULL, parent_id TEXT, step "
            "INTEGER NOT NULL, created_at DOUBLE PRECISION NOT NULL, payload BYTEA NOT NULL, "
            "PRIMARY KEY (thread_id, position), UNIQUE (thread_id, checkpoint_id))"
        )
        for n, payload in enumerate(rows):
            conn.execute(
                f'INSERT INTO "{pg_schema}".tensorsketch_checkpoints VALUES '
                "(%s, %s, %s, %s, %s, %s, %s)",
                (
                    "t",
                    n + 1,
                    f"old-{n}",
                    f"old-{n - 1}" if n else None,
                    n,
                    1.0 + n,
                    json.dumps(payload).encode(),
                ),
            )
    backends = [PostgresBackend(pg_dsn, schema=pg_schema) for _ in range(3)]
    states = await asyncio.gather(*(COUNTER.aget_state("t", b) for b in backends))
    assert [s.n for s in states if s is not None] == [3, 3, 3]
    assert _tables(pg_dsn, pg_schema)["version"] == [("durable", SCHEMA_VERSION)]
    assert [c.values["n"] for c in await COUNTER.aget_history("t", backends[0])] == [0, 1, 2, 3]
    out = await COUNTER.invoke({"n": 1}, thread_id="t", backend=backends[0])
    assert out.n == 3
    history = await COUNTER.aget_history("t", backends[1])
    assert [c.values["n"] for c in history] == [0, 1, 2, 3, 1, 2, 3]
    for b in backends:
        await b.aclose()


async def test_concurrent_first_use_from_many_backends(pg_dsn: str, pg_schema: str) -> None:
    """Several processes creating the tables at once must not collide (advisory lock)."""
    backends = [PostgresBackend(pg_dsn, schema=pg_schema) for _ in range(4)]
    results = await asyncio.gather(
        *(b.acquire_lease(f"t{i}", "me", 30) for i, b in enumerate(backends))
    )
    assert results == [True] * 4
    for b in backends:
        await b.aclose()


async def test_newer_table_layout_is_refused(pg_dsn: str, pg_schema: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{pg_schema}"')
        conn.execute(
            f'CREATE TABLE "{pg_schema}".tensorsketch_schema_version '
            "(component VARCHAR(64) PRIMARY KEY, version INTEGER NOT NULL)"
        )
        conn.execute(
            f"INSERT INTO \"{pg_schema}\".tensorsketch_schema_version VALUES ('durable', 5)"
        )
    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    with pytest.raises(CheckpointDecodeError, match="layout version 5"):
        await COUNTER.invoke({}, thread_id="t", backend=backend)
    await backend.aclose()


async def test_connection_inside_a_transaction_is_refused(pg_dsn: str, pg_schema: str) -> None:
    conn = await psycopg.AsyncConnection.connect(pg_dsn)
    try:
        await conn.execute("SELECT 1")  # opens a transaction the caller never closed
        backend = PostgresBackend(connection=conn, schema=pg_schema)
        with pytest.raises(RuntimeError, match="inside a transaction"):
            await backend.latest_checkpoint("t")
    finally:
        await conn.close()


def test_arguments_are_checked(pg_dsn: str) -> None:
    with pytest.raises(ValueError, match="exactly one of `dsn`"):
        PostgresBackend()
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(pg_dsn, open=False)
    with pytest.raises(ValueError, match="got dsn, pool"):
        PostgresBackend(pg_dsn, pool=pool)
    with pytest.raises(TypeError, match=r"psycopg\.AsyncConnection"):
        PostgresBackend(connection="postgresql://x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="schema"):
        PostgresBackend(pg_dsn, schema="")
    with pytest.raises(ValueError, match="lease_ttl"):
        PostgresBackend(pg_dsn, lease_ttl=-1)


async def test_selectable_by_name(pg_dsn: str, pg_schema: str) -> None:
    backend = create_backend("postgres", dsn=pg_dsn, schema=pg_schema, lease_ttl=5)
    assert isinstance(backend, PostgresBackend)
    assert backend.describe()["lease_ttl"] == 5.0
    assert (await COUNTER.invoke({}, thread_id="t", backend=backend)).n == 3
    await backend.aclose()


def test_survives_a_change_of_event_loop(pg_dsn: str, pg_schema: str) -> None:
    """Scripts call asyncio.run more than once; the pool follows the live loop."""
    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    first = asyncio.run(COUNTER.invoke({}, thread_id="a", backend=backend))
    second = asyncio.run(COUNTER.invoke({}, thread_id="b", backend=backend))
    assert (first.n, second.n) == (3, 3)
    state = COUNTER.get_state("a", backend)  # sync, no loop running: a private loop
    assert state is not None
    assert state.n == 3
    assert len(COUNTER.get_history("b", backend)) == 4


_HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from tensorsketch import END, START, Graph, Node, Schema
    from tensorsketch.runtime.backends import PostgresBackend

    class S(Schema):
        n: int = 0

    class Hold(Node):
        class In(Schema):
            n: int
        class Out(Schema):
            n: int
        async def run(self, ctx, inp):
            print("holding", flush=True)
            while not Path(sys.argv[3]).exists():
                await asyncio.sleep(0.02)
            return self.Out(n=inp.n + 1)

    async def main():
        backend = PostgresBackend(sys.argv[1], schema=sys.argv[2])
        app = Graph(S).add(Hold).edge(START, "Hold").edge("Hold", END).compile()
        out = await app.invoke({"n": 1}, thread_id="shared", backend=backend)
        await backend.aclose()
        print("done", out.n, flush=True)

    asyncio.run(main())
    """
)


async def test_second_process_gets_thread_busy(pg_dsn: str, pg_schema: str, tmp_path: Path) -> None:
    release = tmp_path / "release"
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _HOLDER,
        pg_dsn,
        pg_schema,
        str(release),
        stdout=asyncio.subprocess.PIPE,
    )
    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    try:
        assert holder.stdout is not None
        assert (await holder.stdout.readline()).strip() == b"holding"
        with pytest.raises(ThreadBusyError, match="'shared'"):
            await COUNTER.invoke(thread_id="shared", backend=backend)
        release.touch()
        out, _ = await asyncio.wait_for(holder.communicate(), timeout=60)
        assert out.strip().endswith(b"done 2")
        assert holder.returncode == 0
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()
        await backend.aclose()


def test_missing_driver_names_the_extra() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["psycopg"] = None  # as if the [postgres] extra were not installed
        from tensorsketch.registry import backends
        assert "postgres" in backends.names()
        try:
            from tensorsketch.runtime.backends import PostgresBackend
        except ImportError as exc:
            print(exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert 'pip install "tensorsketch-backends[postgres]"' in out.stdout


def test_listing_backends_imports_no_driver() -> None:
    code = textwrap.dedent(
        """
        import sys
        import tensorsketch
        from tensorsketch.registry import backends
        print(backends.names())
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("psycopg", "psycopg_pool", "redis")))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    names, loaded = out.stdout.strip().splitlines()
    assert names == "['memory', 'postgres', 'redis', 'sqlite']"
    assert loaded == "[]"


def test_shared_connection_on_a_closed_loop_is_not_reused(pg_dsn: str, pg_schema: str) -> None:
    async def connect() -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(pg_dsn)

    conn = asyncio.run(connect())
    backend = PostgresBackend(connection=conn, schema=pg_schema)
    assert asyncio.run(COUNTER.invoke({}, thread_id="a", backend=backend)).n == 3
    assert asyncio.run(COUNTER.invoke({}, thread_id="b", backend=backend)).n == 3
    assert len(COUNTER.get_history("b", backend)) == 4
    asyncio.run(conn.close())


def test_forgetting_aclose_never_hangs_the_exit(pg_dsn: str, pg_schema: str) -> None:
    """``asyncio.run`` cancels every task at shutdown; an owned pool left open must not keep
    that shutdown waiting (it closes itself with its loop)."""
    code = textwrap.dedent(
        """
        import asyncio, sys
        from tensorsketch.runtime.backends import PostgresBackend

        backend = PostgresBackend(sys.argv[1], schema=sys.argv[2])
        for _ in range(8):  # a new loop each time, and never an aclose()
            asyncio.run(backend.acquire_lease("t", "me", 30))
        print("exited cleanly")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code, pg_dsn, pg_schema],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "exited cleanly"


def _pool_records(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("psycopg.pool")]


def _sessions(dsn: str, label: str, *, settle: float = 5.0) -> int:
    """How many server sessions carry ``label``, once closed ones have had time to go."""
    deadline = time.monotonic() + settle
    with psycopg.connect(dsn, autocommit=True) as admin:
        while True:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (label,)
            ).fetchone()
            assert row is not None
            if row[0] == 0 or time.monotonic() > deadline:
                return int(row[0])
            time.sleep(0.02)


def test_sync_helpers_open_no_pool_and_log_no_connection_error(
    pg_dsn: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A sync helper's private loop is shut down as it returns (its tasks cancelled). A pool
    opened there had a connection attempt in flight then, which psycopg_pool logged as
    ``error connecting in 'tensorsketch-<schema>': `` (a cancelled connect, empty message)."""
    label = f"ts-test-{uuid.uuid4().hex[:8]}"
    backend = PostgresBackend(
        pg_dsn, schema=pg_schema, pool_kwargs={"kwargs": {"application_name": label}}
    )
    assert asyncio.run(COUNTER.invoke({}, thread_id="t", backend=backend)).n == 3
    with caplog.at_level(logging.DEBUG, logger="psycopg.pool"):
        for i in range(8):
            state = COUNTER.get_state("t", backend)
            assert state is not None
            assert state.n == 3
            history = COUNTER.get_history("t", backend)
            assert len(history) == (4 if i == 0 else 3)
            assert COUNTER.prune_thread("t", backend, keep=3) == (1 if i == 0 else 0)
            assert list_threads(backend) == ["t"]
    assert not [m for m in _pool_records(caplog) if "error connecting" in m]
    assert _pool_records(caplog) == []  # no pool at all on a helper's loop
    assert _sessions(pg_dsn, label) == 0  # each helper's connection closed with its loop


def test_a_sync_helper_uses_one_connection(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prune_thread is several units (lease, list, delete, release): one connection."""
    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    assert asyncio.run(COUNTER.invoke({}, thread_id="t", backend=backend)).n == 3
    opened: list[object] = []
    connect = psycopg.AsyncConnection.connect

    async def counting(*args: Any, **kwargs: Any) -> psycopg.AsyncConnection[Any]:
        conn = await connect(*args, **kwargs)
        opened.append(conn)
        return conn

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", counting)
    assert COUNTER.prune_thread("t", backend, keep=1) == 3
    assert len(opened) == 1
    assert COUNTER.get_state("t", backend) is not None
    assert len(opened) == 2  # a new helper call, a new loop: a new connection


def test_short_loops_leave_no_connection_attempt_behind(
    pg_dsn: str, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Short ``asyncio.run`` calls without ``aclose()``: the pool opened for each must not
    race a warm-up connection against the first checkout (the loser was still connecting
    when the loop shut down, and was logged as an ``error connecting``)."""
    label = f"ts-test-{uuid.uuid4().hex[:8]}"
    backend = PostgresBackend(
        pg_dsn, schema=pg_schema, pool_kwargs={"kwargs": {"application_name": label}}
    )
    assert asyncio.run(COUNTER.invoke({}, thread_id="t", backend=backend)).n == 3
    history = COUNTER.get_history("t", backend)
    with caplog.at_level(logging.INFO, logger="psycopg.pool"):
        for i in range(8):
            asyncio.run(backend.acquire_lease(f"l-{i}", "me", 30))
            forked = asyncio.run(
                COUNTER.fork(backend, "t", history[1].id, f"f-{i}", effects="rerun")
            )
            assert forked.n == 3
    records = _pool_records(caplog)
    assert not [m for m in records if "error connecting" in m]
    assert not [m for m in records if "growing pool" in m and not m.endswith(" to 1")]
    # Each loop's pool closed with it, idle connections included (its workers are cancelled
    # by the same shutdown, which used to stop the pool's close() before it closed them).
    assert _sessions(pg_dsn, label) == 0


@pytest.mark.parametrize(
    ("dsn", "reason"),
    [
        ("localhost:5432", r'missing "=" after "localhost:5432"'),
        ("postgres//localhost/db", r"not a PostgreSQL connection string"),
        ("postgresql://postgres@localhost:54x2/db", r"port in `dsn` must be a number, got '54x2'"),
    ],
)
def test_a_malformed_dsn_is_refused_when_the_backend_is_made(dsn: str, reason: str) -> None:
    """Not at the first run, after the pool retried it for 25 s (five ``error connecting``
    lines, then ``PoolTimeout: couldn't get a connection after 5.00 sec``)."""
    with pytest.raises(ValueError, match=reason) as info:
        PostgresBackend(dsn)
    assert "e.g. 'postgresql://" in str(info.value)


async def test_a_closed_port_fails_at_once_naming_the_address_and_the_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()  # nothing listens there
    backend = PostgresBackend(f"postgresql://postgres@127.0.0.1:{port}/test")
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="psycopg.pool"):
        for _ in range(2):  # the second run tries again (and fails the same way)
            with pytest.raises(BackendUnavailableError) as info:
                await COUNTER.invoke({}, thread_id="t", backend=backend)
            message = str(info.value)
            assert f"cannot connect to PostgreSQL at 127.0.0.1:{port}" in message
            assert "Connection refused" in message
            assert "PoolTimeout" not in message
    assert time.monotonic() - started < 10  # a guard against a hang; refused is immediate
    assert not [m for m in _pool_records(caplog) if "error connecting" in m]
    await backend.aclose()


def test_sync_helper_reports_an_unreachable_server(pg_schema: str) -> None:
    backend = PostgresBackend(
        "postgresql://postgres@127.0.0.1:1/test", schema=pg_schema, connect_timeout=1.0
    )
    with pytest.raises(BackendUnavailableError, match="postgres backend unavailable"):
        COUNTER.get_state("t", backend)


def test_a_private_loops_broken_connection_is_replaced(pg_dsn: str, pg_schema: str) -> None:
    label = f"ts-test-{uuid.uuid4().hex[:8]}"
    backend = PostgresBackend(
        pg_dsn, schema=pg_schema, pool_kwargs={"kwargs": {"application_name": label}}
    )
    assert asyncio.run(COUNTER.invoke({}, thread_id="t", backend=backend)).n == 3

    async def reads() -> int:
        assert len(await backend.list_checkpoints("t")) == 4
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (label,),
            )
        assert _sessions(pg_dsn, label) == 0
        # A read is retried once: the second try gets a new connection.
        return len(await backend.list_checkpoints("t"))

    assert run_on_private_loop(reads()) == 4
    assert _sessions(pg_dsn, label) == 0


# -- one round trip per unit of work ------------------------------------------------------------


@dataclass
class _Handle:
    """A backend on one of the three connection sources, and the one connection it uses."""

    backend: PostgresBackend
    conn: psycopg.AsyncConnection[Any]
    label: str  # the connection's application_name, to find its session on the server
    close: Callable[[], Awaitable[None]]


@pytest.fixture(params=["dsn", "pool", "connection"])
async def handle(
    request: pytest.FixtureRequest, pg_dsn: str, pg_schema: str
) -> AsyncIterator[_Handle]:
    """Each source pinned to a single connection, without the pool's idle check (a check is
    a round trip of its own and would hide the ones being counted)."""
    label = f"ts-test-{uuid.uuid4().hex[:8]}"
    used: list[psycopg.AsyncConnection[Any]] = []

    async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
        used.append(conn)

    pinned: dict[str, Any] = {"min_size": 1, "max_size": 1, "configure": configure}
    pool: AsyncConnectionPool[Any] | None = None
    shared: psycopg.AsyncConnection[Any] | None = None
    if request.param == "dsn":
        kwargs = {**pinned, "check": None, "kwargs": {"application_name": label}}
        backend = PostgresBackend(pg_dsn, schema=pg_schema, pool_kwargs=kwargs)
    elif request.param == "pool":  # the caller's pool: connections not in autocommit mode
        pool = AsyncConnectionPool(pg_dsn, open=False, kwargs={"application_name": label}, **pinned)
        await pool.open(wait=True)
        backend = PostgresBackend(pool=pool, schema=pg_schema)
    else:  # the caller's connection, not in autocommit mode
        shared = await psycopg.AsyncConnection.connect(pg_dsn, application_name=label)
        used.append(shared)
        backend = PostgresBackend(connection=shared, schema=pg_schema)
    assert await backend.acquire_lease("warm-up", "me", 30)  # tables created, pool open

    async def close() -> None:
        await backend.aclose()
        if pool is not None:
            await pool.close()
        if shared is not None:
            await shared.close()

    h = _Handle(backend, used[-1], label, close)
    yield h
    await h.close()


@contextlib.contextmanager
def _protocol_trace(conn: psycopg.AsyncConnection[Any]) -> Iterator[list[str]]:
    """The protocol messages of ``conn`` inside the block, from libpq's own trace."""
    if sys.platform != "linux":
        pytest.skip("psycopg supports libpq tracing on Linux only")
    lines: list[str] = []
    with tempfile.TemporaryFile() as f:
        fd = os.dup(f.fileno())
        conn.pgconn.trace(fd)
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield lines
        finally:
            conn.pgconn.untrace()  # flushes the stream
            os.close(fd)
            f.seek(0)
            lines.extend(f.read().decode().splitlines())


def _round_trips(trace: list[str]) -> int:
    """Times the client waited for the server: the server ends every Sync and every simple
    query with one ReadyForQuery, and nothing else sends one."""
    return sum(1 for line in trace if line.split("\t")[:1] == ["B"] and "ReadyForQuery" in line)


def _cp(thread: str, n: int) -> StoredCheckpoint:
    parent = None if n == 0 else f"cp-{n - 1}"
    payload = f"payload {n}".encode()
    return StoredCheckpoint(thread, f"cp-{n}", parent, n, float(n), payload, base_id=parent)


async def test_each_unit_of_work_is_one_round_trip(handle: _Handle) -> None:
    backend, thread = handle.backend, f"rt-{uuid.uuid4().hex[:8]}"
    trips: dict[str, int] = {}
    with _protocol_trace(handle.conn) as trace:
        opening = await backend.open_thread(thread, "alice", 30, _cp(thread, 0))
    assert opening.created
    trips["open a new thread"] = _round_trips(trace)
    with _protocol_trace(handle.conn) as trace:
        refused = await backend.open_thread(thread, "bob", 30, _cp(thread, 9))
    assert not refused.acquired
    trips["open a busy thread"] = _round_trips(trace)
    with _protocol_trace(handle.conn) as trace:
        await backend.commit_step(thread, _cp(thread, 1), [StoredEvent(0, b"e0")])
    trips["commit a superstep"] = _round_trips(trace)
    with _protocol_trace(handle.conn) as trace:
        resumed = await backend.open_thread(thread, "alice", 30)
    assert (resumed.checkpoints, resumed.last_event_seq) == ([_cp(thread, 0), _cp(thread, 1)], 0)
    trips["open to resume"] = _round_trips(trace)
    with _protocol_trace(handle.conn) as trace:
        await backend.commit_step(
            thread,
            _cp(thread, 2),
            [StoredEvent(1, b"e1"), StoredEvent(2, b"e2")],
            release_owner="alice",
        )
    trips["commit the last superstep"] = _round_trips(trace)
    assert "Sync" in "\n".join(trace)  # sent as a pipeline
    assert trips == dict.fromkeys(trips, 1)
    assert await backend.list_checkpoints(thread) == [_cp(thread, n) for n in range(3)]
    assert [e.seq for e in await backend.read_events(thread)] == [0, 1, 2]
    assert await backend.acquire_lease(thread, "bob", 30)  # released with the last commit
    # A caller's connection is handed back as it came: autocommit off, no transaction open,
    # and the relaxed commit of open_thread (durable=False) did not outlive its transaction.
    conn = handle.conn
    assert conn.info.transaction_status == pq.TransactionStatus.IDLE
    if not conn.autocommit:
        async with conn.transaction():
            setting = await (await conn.execute("SHOW synchronous_commit")).fetchone()
        assert setting == ("on",)


async def test_a_unit_of_work_makes_no_cursor_timer_or_commit_call_of_its_own(
    handle: _Handle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a unit of work costs the client besides its statements: its cursors are kept on
    the connection from one unit to the next, one timer bounds every unit in flight (it was
    a timer per unit), and a pooled connection is handed back without the pool's context
    manager, which called ``commit()`` on an autocommit connection (a lock and a wait)."""
    backend, thread = handle.backend, f"cost-{uuid.uuid4().hex[:8]}"
    counts = {"cursors": 0, "timers": 0, "commits": 0}
    cursor, commit = psycopg.AsyncConnection.cursor, psycopg.AsyncConnection.commit

    def counted_cursor(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["cursors"] += 1
        return cursor(self, *args, **kwargs)

    async def counted_commit(self: Any) -> None:
        counts["commits"] += 1
        await commit(self)

    loop = asyncio.get_running_loop()
    call_at = loop.call_at

    def counted_call_at(when: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(callback, "__module__", "") == PostgresBackend.__module__:
            counts["timers"] += 1
        return call_at(when, callback, *args, **kwargs)

    async def units() -> None:
        await backend.last_event_seq(thread)  # one statement
        await backend.thread_head(thread)  # two, in a pipeline

    await units()  # the cursors a pipeline of two needs
    monkeypatch.setattr(psycopg.AsyncConnection, "cursor", counted_cursor)
    monkeypatch.setattr(psycopg.AsyncConnection, "commit", counted_commit)
    monkeypatch.setattr(loop, "call_at", counted_call_at)
    for _ in range(10):
        await units()
    assert counts["cursors"] == 0, counts  # was one per statement
    assert counts["timers"] <= 1, counts  # was one per unit
    if handle.conn.autocommit:  # a pooled connection of the backend's own (the dsn)
        assert counts["commits"] == 0, counts  # was one per unit


async def test_a_statement_keeps_its_cursors_adapters_from_one_unit_to_the_next(
    handle: _Handle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psycopg builds a cursor's adapters (its dumpers and loaders) again whenever the cursor
    runs another statement than the time before: units that alternate statements on one
    connection, as a run's units do, each build none once every statement has its cursor."""
    backend, thread = handle.backend, f"adapters-{uuid.uuid4().hex[:8]}"
    assert await backend.acquire_lease(thread, "alice", 30)
    made = 0
    transformer = psycopg.adapt.Transformer

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal made
        made += 1
        return transformer(*args, **kwargs)

    async def units() -> None:
        await backend.last_event_seq(thread)  # one statement
        await backend.thread_head(thread)  # two, in a pipeline
        await backend.commit_step(thread, None, [], fence="alice")  # the fence alone

    await units()
    counted.from_context = transformer.from_context  # type: ignore[attr-defined]
    monkeypatch.setattr(psycopg.adapt, "Transformer", counted)
    for _ in range(5):
        await units()
    assert made == 0  # was one per statement that followed another on the first cursor


async def test_a_unit_that_repeats_a_statement_gets_a_cursor_for_each(handle: _Handle) -> None:
    """Each statement of a pipeline needs a cursor of its own (a cursor keeps only its last
    result): a unit that sends the same text twice reads both results."""
    backend, thread = handle.backend, f"repeat-{uuid.uuid4().hex[:8]}"
    assert (await backend.open_thread(thread, "alice", 30, _cp(thread, 0))).created
    await backend.commit_step(thread, _cp(thread, 1), [StoredEvent(0, b"e0")])
    read = Query(
        backend.q(f"SELECT count(*) FROM {backend.table('checkpoints')} WHERE thread_id = ?"),
        (thread,),
        fetch="one",
    )
    last = Query(
        backend.q(f"SELECT MAX(seq) FROM {backend.table('events')} WHERE thread_id = ?"),
        (thread,),
        fetch="one",
    )
    for _ in range(3):
        results = await backend.submit([read, last, read, last, read], transaction=True)
        assert [r[0] for r in results] == [2, 0, 2, 0, 2]
    # More texts than the connection keeps cursors for, in one unit and then one at a time.
    many = [Query(f"SELECT %s::int + {n}", (1,), fetch="one") for n in range(40)]
    for _ in range(2):
        results = await backend.submit(many, transaction=True)
        assert [r[0] for r in results] == [n + 1 for n in range(40)]
        for n, q in enumerate(many):
            assert (await backend.submit([q]))[0][0] == n + 1


async def test_a_failing_unit_leaves_nothing_behind(handle: _Handle) -> None:
    """A commit whose checkpoint cannot be stored (its id exists) stores none of its events
    and keeps the lease it would have released; the connection stays usable."""
    backend, thread = handle.backend, f"atomic-{uuid.uuid4().hex[:8]}"
    assert (await backend.open_thread(thread, "alice", 30, _cp(thread, 0))).created
    events = [StoredEvent(0, b"e0"), StoredEvent(1, b"e1")]
    with pytest.raises(psycopg.errors.UniqueViolation):
        await backend.commit_step(thread, _cp(thread, 0), events, release_owner="alice")
    assert handle.conn.info.transaction_status == pq.TransactionStatus.IDLE
    assert await backend.read_events(thread) == []
    assert await backend.list_checkpoints(thread) == [_cp(thread, 0)]
    assert not await backend.acquire_lease(thread, "bob", 30)  # the release was undone too
    await backend.commit_step(thread, _cp(thread, 1), events, release_owner="alice")
    assert [e.seq for e in await backend.read_events(thread)] == [0, 1]
    assert await backend.acquire_lease(thread, "bob", 30)


async def test_a_session_lost_before_a_unit_is_backend_unavailable(
    handle: _Handle, pg_dsn: str
) -> None:
    backend, thread = handle.backend, f"lost-{uuid.uuid4().hex[:8]}"
    assert (await backend.open_thread(thread, "alice", 30, _cp(thread, 0))).created
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (handle.label,),
        )
        for _ in range(200):  # until the session is gone
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                (handle.label,),
            ).fetchone()
            if row == (0,):
                break
            await asyncio.sleep(0.02)
    with pytest.raises(BackendUnavailableError, match="unavailable while saving a checkpoint"):
        await backend.commit_step(thread, _cp(thread, 1), [StoredEvent(0, b"e0")])
    if handle.conn is handle.backend._shared:
        return  # the caller's own connection is dead: replacing it is the caller's call
    # A pooled connection is replaced, and the unit that failed left no trace.
    assert await backend.list_checkpoints(thread) == [_cp(thread, 0)]
    await backend.commit_step(thread, _cp(thread, 1), [StoredEvent(0, b"e0")])
    assert [e.seq for e in await backend.read_events(thread)] == [0]


async def test_units_of_work_from_another_event_loop(pg_dsn: str, pg_schema: str) -> None:
    """While the pool's loop is alive, another loop's calls use a private connection; the
    pipelined units work there too."""
    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    assert await backend.acquire_lease("warm-up", "me", 30)  # the pool lives on this loop

    async def elsewhere() -> None:
        assert (await backend.open_thread("t", "alice", 30, _cp("t", 0))).created
        await backend.commit_step("t", _cp("t", 1), [StoredEvent(0, b"e")], release_owner="alice")

    try:
        await asyncio.to_thread(asyncio.run, elsewhere())
        assert await backend.list_checkpoints("t") == [_cp("t", 0), _cp("t", 1)]
        assert await backend.acquire_lease("t", "bob", 30)
    finally:
        await backend.aclose()


# -- what a run record costs ----------------------------------------------------------------------


def _statement_counter(backend: PostgresBackend) -> tuple[list[int], Any]:
    """A wrapper for ``backend.submit`` (install it when counting starts) and the list it
    fills: each unit's statements on the wire (a batched statement's rows one each)."""
    sent: list[int] = []
    submit = backend.submit

    async def counted(queries: Any, **options: Any) -> Any:
        sent.append(sum(len(q.params) if q.many else 1 for q in queries))
        return await submit(queries, **options)

    return sent, counted


def _settling_agent() -> Any:
    """The benchmarks' agent turn (bench_durable_runs.py): the model asks for one tool, the
    tool answers, the model answers."""
    from tensorsketch import create_agent, tool
    from tensorsketch.fake import FakeProvider
    from tensorsketch.messages import Message, ToolCall, assistant

    @tool
    async def settle(ctx: Context) -> str:
        """Settle the order."""
        return f"order of {ctx.thread_id} settled"

    def policy(messages: list[Message], tools: Any) -> Message:
        if any(m.role == "tool" for m in messages):
            return assistant("settled")
        return assistant(tool_calls=[ToolCall(id="c1", name="settle", args={})])

    return create_agent(FakeProvider(policy=policy), [settle])


async def test_a_runner_run_sends_no_more_statements_than_the_same_invoke(
    pg_dsn: str, pg_schema: str
) -> None:
    """Run records ride the run's own statements (#49): the record's writes are WITH clauses
    of the lease and fence statements, the runner's journal records share one INSERT, and the
    submit's insert reads the thread's queue in the same statement. The run's streamed events
    are a WITH clause of the last commit's fence. What is left on top of the direct invoke is
    that insert (a runner run sent 7 more before: 22 against 15 on the wire, then 2) — and
    since the folded submit (the insert a WITH clause of the opening's lease statement) not
    even a unit of its own: the same units as the invoke, one statement more. And since the
    folded opening inserts the run already ``running`` (the lease a WITH clause of that
    insert, no update after it), not even that statement."""
    from tensorsketch.runs import AsyncRunner

    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    sent, counted = _statement_counter(backend)
    backend.submit = counted  # type: ignore[method-assign]
    agent = _settling_agent()
    runner = AsyncRunner(agent, backend=backend)
    try:
        warm = await runner.submit({"query": "settle"}, thread_id=f"warm-{uuid.uuid4().hex[:8]}")
        assert (await runner.await_run(warm.run_id, timeout=30)).status == "succeeded"
        sent.clear()
        out = await agent.invoke(
            {"query": "settle"}, thread_id=f"direct-{uuid.uuid4().hex[:8]}", backend=backend
        )
        assert out.output == "settled"
        direct, units_direct = sum(sent), len(sent)
        sent.clear()
        record = await runner.submit({"query": "settle"}, thread_id=f"via-{uuid.uuid4().hex[:8]}")
        done = await runner.await_run(record.run_id, timeout=30)
        through, units_through = sum(sent), len(sent)
    finally:
        await runner.aclose()
        await backend.aclose()
    assert done.status == "succeeded" and done.output["output"] == "settled", done
    # At most: a store-independent change may take more off the runner's side.
    assert through <= direct, (direct, through)
    assert units_through == units_direct, (units_direct, units_through)


@pytest.mark.parametrize("size", [2, 3, 17])
async def test_a_batch_of_events_or_journal_records_is_one_statement(
    pg_dsn: str, pg_schema: str, size: int
) -> None:
    """Several rows go in one INSERT (plain parameters up to 16 rows, arrays past that); a
    journal key recorded before keeps its first value, the others are added."""
    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    sent: list[str] = []
    submit = backend.submit

    async def counted(queries: Any, **options: Any) -> Any:
        sent.extend(q.sql.split(" (")[0] for q in queries for _ in (q.params if q.many else [0]))
        return await submit(queries, **options)

    backend.submit = counted  # type: ignore[method-assign]
    thread = f"batch-{uuid.uuid4().hex[:8]}"
    try:
        await backend.record_effect(thread, "k0", b"first")
        sent.clear()
        effects = [(f"k{n}", f"v{n}".encode()) for n in range(size)]
        await backend.record_effects(thread, effects)
        events = [StoredEvent(n, f"e{n}".encode()) for n in range(size)]
        await backend.commit_step(thread, None, events)
        assert len(sent) == 2, sent
        stored = dict(await backend.list_effects(thread))
        assert stored == {"k0": b"first", **{f"k{n}": f"v{n}".encode() for n in range(1, size)}}
        assert await backend.read_events(thread) == events
    finally:
        await backend.aclose()


async def test_a_ride_that_only_reads_is_a_column_of_the_lease_statement(
    pg_dsn: str, pg_schema: str
) -> None:
    """The opening unit answers a reading ride from the lease statement's own row, taken or
    refused, with no statement of its own."""
    from tensorsketch.runtime.backends.rides import RecordRide, RideResult
    from tensorsketch.runtime.backends.runs import RunRecord

    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    sent: list[int] = []
    submit = backend.submit

    async def counted(queries: Any, **options: Any) -> Any:
        sent.append(len(queries))
        return await submit(queries, **options)

    thread = f"reads-{uuid.uuid4().hex[:8]}"
    store = backend.run_store()
    try:
        record, _ = await store.create(RunRecord(run_id=f"run-{thread}", thread_id=thread))
        backend.submit = counted  # type: ignore[method-assign]
        mine = RecordRide(record.run_id)
        opened = await backend.open_thread(thread, "me", 30, ride=mine)
        theirs = RecordRide(record.run_id)
        refused = await backend.open_thread(thread, "them", 30, ride=theirs)
        plain = await backend.open_thread(thread, "me", 30)
        assert (opened.acquired, refused.acquired, plain.acquired) == (True, False, True)
        assert mine.result == theirs.result == RideResult(record.version)
        assert sent[0] == sent[1] == sent[2]  # the ride added no statement
    finally:
        await backend.aclose()


async def test_a_fenced_unit_makes_its_journal_records_or_events_in_the_fence_statement(
    pg_dsn: str, pg_schema: str
) -> None:
    """A fenced unit of journal records, or of a commit's events, is one statement: the
    insert is a WITH clause of the fence (it was a statement of its own, in a pipeline). A
    refused fence still undoes it, and a ride still rides the same statement — its write
    won, or lost to a stale version, and the stored version read only then."""
    from tensorsketch.errors import LeaseLostError
    from tensorsketch.runtime.backends.rides import RecordRide, RideResult
    from tensorsketch.runtime.backends.runs import RunRecord

    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    sent, counted = _statement_counter(backend)
    thread = f"carry-{uuid.uuid4().hex[:8]}"
    store = backend.run_store()
    try:
        record, _ = await store.create(RunRecord(run_id=f"run-{thread}", thread_id=thread))
        assert (await backend.open_thread(thread, "me", 30, _cp(thread, 0))).created
        backend.submit = counted  # type: ignore[method-assign]
        await backend.record_effects(thread, [("k0", b"v0")], fence="me")
        await backend.record_effects(thread, [("k1", b"v1"), ("k2", b"v2")], fence="me")
        reading = RecordRide(record.run_id)
        await backend.record_effects(thread, [("k3", b"v3")], fence="me", ride=reading)
        await backend.commit_step(thread, None, [StoredEvent(0, b"e0")], fence="me")
        writing = RecordRide(record.run_id, write=record.replace(status="running"))
        events = [StoredEvent(1, b"e1"), StoredEvent(2, b"e2")]
        await backend.commit_step(thread, None, events, fence="me", ride=writing)
        stale = RecordRide(record.run_id, write=record.replace(status="failed"))
        await backend.record_effects(thread, [("k4", b"v4")], fence="me", ride=stale)
        assert sent == [1, 1, 1, 1, 1, 1], sent
        assert reading.result == RideResult(record.version)
        assert writing.result is not None and writing.result.stored is not None
        assert writing.result.version == record.version + 1
        assert stale.result == RideResult(record.version + 1)  # lost: the stored version
        for refused in (
            backend.record_effects(thread, [("k5", b"v5")], fence="them"),
            backend.commit_step(thread, None, [StoredEvent(3, b"e3")], fence="them"),
        ):
            with pytest.raises(LeaseLostError):
                await refused
        assert sorted(dict(await backend.list_effects(thread))) == [f"k{n}" for n in range(5)]
        assert [e.seq for e in await backend.read_events(thread)] == [0, 1, 2]
        stored = await store.get(record.run_id)
        assert stored is not None and stored.status == "running"
    finally:
        await backend.aclose()


def _scans(plan: dict[str, Any], table: str) -> list[int]:
    """The loops of every scan of ``table`` in an ``EXPLAIN (ANALYZE, FORMAT JSON)`` plan."""
    found = [int(plan["Actual Loops"])] if plan.get("Relation Name") == table else []
    for child in plan.get("Plans", []):
        found += _scans(child, table)
    return found


@pytest.mark.parametrize("wins", [True, False])
async def test_a_ride_reads_the_stored_version_only_when_its_write_lost(
    pg_dsn: str, pg_schema: str, wins: bool
) -> None:
    """A won write returns its own version; the stored one (an index probe of the runs
    table) is read only for a write that lost, in the lease and the fence statements."""
    from tensorsketch.runtime.backends.rides import RecordRide
    from tensorsketch.runtime.backends.runs import RunRecord

    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    thread = f"probe-{uuid.uuid4().hex[:8]}"
    store = backend.run_store()
    try:
        record, _ = await store.create(RunRecord(run_id=f"run-{thread}", thread_id=thread))
        assert await backend.acquire_lease(thread, "me", 30)
        write = record if wins else record.replace(version=record.version + 5)
        queries = [
            backend.lease_riding_query(thread, "me", 30, RecordRide(record.run_id, write=write)),
            backend.fence_riding_query(thread, "me", RecordRide(record.run_id, write=write)),
        ]
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
            for q in queries:
                assert q is not None
                cur = await conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {q.sql}", q.params)
                row = await cur.fetchone()
                assert row is not None
                loops = _scans(row[0][0]["Plan"], "tensorsketch_runs")
                # the update and its scan, then the probe: run only when the write lost
                assert sorted(loops) == ([0, 1, 1] if wins else [1, 1, 1]), (q.sql, loops)
                await conn.rollback()  # each statement on the record as stored
    finally:
        await backend.aclose()


async def test_the_status_index_is_partial_and_replaces_the_full_one(
    pg_dsn: str, pg_schema: str
) -> None:
    """A schema made with the old full ``runs_by_status`` index loses it on the next start;
    the partial index that replaces it holds no succeeded run, and the orphan sweep's query
    (which spells out its predicate) can read it."""
    from tensorsketch.runtime.backends.runs import RunRecord

    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    await backend.run_store().create(RunRecord(run_id="r0", thread_id="t"))
    await backend.aclose()
    runs = f'"{pg_schema}".tensorsketch_runs'
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # as an earlier build left it
        conn.execute(f'DROP INDEX "{pg_schema}".tensorsketch_runs_not_succeeded')
        conn.execute(
            f"CREATE INDEX tensorsketch_runs_by_status ON {runs} (status, created_at, run_id)"
        )
    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    try:
        store = backend.run_store()
        await store.create(RunRecord(run_id="r1", thread_id="t", status="succeeded"))
        assert [r.run_id for r in await store.orphans(now=time.time() + 3600)] == ["r0"]
    finally:
        await backend.aclose()
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s", (pg_schema,)
        ).fetchall()
        indexes = {str(name): str(sql) for name, sql in rows}
        assert "tensorsketch_runs_by_status" not in indexes
        assert "WHERE (status <> 'succeeded'::text)" in indexes["tensorsketch_runs_not_succeeded"]
        # On two rows any index will do: without the creation-order one (in a transaction
        # rolled back), the planner shows it can prove the partial index's predicate.
        conn.execute(f'DROP INDEX "{pg_schema}".tensorsketch_runs_by_created')
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = conn.execute(
            f"EXPLAIN SELECT record FROM {runs} WHERE status IN ('queued', 'running') "
            "AND status <> 'succeeded' ORDER BY created_at, run_id LIMIT 200"
        ).fetchall()
        assert "tensorsketch_runs_not_succeeded" in " ".join(str(row[0]) for row in plan)
        conn.rollback()


class _OlderBuild(PostgresBackend):
    """A build from before lz4 and the queue index: its schema transactions add nothing of
    their own to the portable layout."""

    def dialect_ddl(self, component: str) -> list[str]:
        return []


def _compression(dsn: str, schema: str) -> dict[str, str]:
    """``table.column`` -> its compression setting ('' = the server's default), per BYTEA column."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT c.relname, a.attname, a.attcompression FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND a.atttypid = 'bytea'::regtype AND a.attnum > 0",
            (schema,),
        ).fetchall()
    return {f"{table}.{column}": str(method or "") for table, column, method in rows}


def _lz4_offered(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' "
            "AND 'lz4' = ANY(enumvals)"
        ).fetchone()
    return row is not None


class Notes(Schema):
    text: str = ""


class Write(Node):
    class Out(Schema):
        text: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        # Large enough for the server to compress it (past ~2 kB a row), and compressible.
        return self.Out(text=" ".join(f"note {i}" for i in range(600)))


NOTES = Graph(Notes).add(Write).edge(START, "Write").compile()


async def test_payload_columns_use_lz4_and_an_older_store_is_migrated_on_start(
    pg_dsn: str, pg_schema: str
) -> None:
    """Tables an older build made (pglz, the default) get lz4 on the next start; what the
    older build stored still reads, and the older build reads what the new one stores."""
    if not _lz4_offered(pg_dsn):
        pytest.skip("this PostgreSQL has no lz4 compression")
    from tensorsketch.runtime.backends.runs import RunRecord

    older = _OlderBuild(pg_dsn, schema=pg_schema)
    assert (await NOTES.invoke({}, thread_id="old", backend=older)).text.startswith("note 0")
    await older.run_store().create(RunRecord(run_id="r-old", thread_id="old"))
    await older.aclose()
    columns = _compression(pg_dsn, pg_schema)
    assert set(columns) == {
        "tensorsketch_checkpoints.payload",
        "tensorsketch_effects.value",
        "tensorsketch_events.payload",
        "tensorsketch_blobs.data",
        "tensorsketch_runs.record",
    }
    assert set(columns.values()) == {""}

    newer = PostgresBackend(pg_dsn, schema=pg_schema)
    assert (await NOTES.aget_state("old", newer)).text.startswith("note 0")
    assert (await newer.run_store().get("r-old")) is not None
    await newer.run_store().create(RunRecord(run_id="r-new", thread_id="new"))
    assert (await NOTES.invoke({}, thread_id="new", backend=newer)).text.startswith("note 0")
    await newer.aclose()
    assert set(_compression(pg_dsn, pg_schema).values()) == {"l"}
    with psycopg.connect(pg_dsn) as conn:
        stored = conn.execute(
            "SELECT thread_id, pg_column_compression(payload) FROM "
            f'"{pg_schema}".tensorsketch_checkpoints WHERE length(payload) > 2500'
        ).fetchall()
    assert {(t, m) for t, m in stored} == {("old", "pglz"), ("new", "lz4")}

    older = _OlderBuild(pg_dsn, schema=pg_schema)  # a rolling upgrade: the old build reads on
    try:
        assert (await NOTES.aget_state("new", older)).text.startswith("note 0")
        assert (await older.run_store().get("r-new")) is not None
        assert (await NOTES.invoke({}, thread_id="old2", backend=older)).text
    finally:
        await older.aclose()


async def test_a_table_in_use_keeps_its_compression_until_a_later_start(
    pg_dsn: str, pg_schema: str
) -> None:
    """The start does not wait on a table another session holds (it would queue that table's
    writers behind it): the column is left as it was, and the next start sets it."""
    if not _lz4_offered(pg_dsn):
        pytest.skip("this PostgreSQL has no lz4 compression")
    older = _OlderBuild(pg_dsn, schema=pg_schema)
    await COUNTER.invoke({}, thread_id="t", backend=older)
    await older.aclose()
    with psycopg.connect(pg_dsn) as holder:  # a transaction reading the events, left open
        holder.execute(f'SELECT count(*) FROM "{pg_schema}".tensorsketch_events').fetchone()
        backend = PostgresBackend(pg_dsn, schema=pg_schema)
        assert (await COUNTER.invoke({}, thread_id="t2", backend=backend)).n == 3
        await backend.aclose()
        columns = _compression(pg_dsn, pg_schema)
        assert columns["tensorsketch_events.payload"] == ""
        assert columns["tensorsketch_checkpoints.payload"] == "l"
        holder.rollback()
    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    assert (await COUNTER.aget_state("t2", backend)) is not None
    await backend.aclose()
    assert _compression(pg_dsn, pg_schema)["tensorsketch_events.payload"] == "l"


async def test_a_threads_queue_head_reads_only_that_threads_active_runs(
    pg_dsn: str, pg_schema: str
) -> None:
    """With a backlog of queued runs on other threads, the queue head's generic plan (the one
    a prepared statement ends up with) reads the partial queue index, not every active run of
    the store; a store an older build made gets the index on the next start, and the older
    build goes on working beside it."""
    from tensorsketch.runtime.backends.runs import RunRecord
    from tensorsketch.runtime.backends.sql_runs import SqlRunStore

    older = _OlderBuild(pg_dsn, schema=pg_schema)
    await older.run_store().create(RunRecord(run_id="r0", thread_id="t"))
    await older.aclose()
    runs = f'"{pg_schema}".tensorsketch_runs'
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {runs} (run_id, thread_id, kind, status, created_at, version, record) "
            "SELECT 'q' || g, 'other-' || (g % 500), 'run', 'queued', g, 1, '\\x00' "
            "FROM generate_series(1, 5000) AS g"
        )
        conn.execute(f"ANALYZE {runs}")
    backend = PostgresBackend(pg_dsn, schema=pg_schema)
    try:
        store = backend.run_store()
        assert isinstance(store, SqlRunStore)
        await store.create(RunRecord(run_id="r1", thread_id="t"))
        head = store._sql["head"]
    finally:
        await backend.aclose()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE head(text) AS {head.replace('%s', '$1')}")
        plan = " ".join(str(r[0]) for r in conn.execute("EXPLAIN EXECUTE head('t')").fetchall())
        assert "tensorsketch_runs_queue" in plan
        assert conn.execute("EXECUTE head('t')").fetchone() == ("r0",)
    older = _OlderBuild(pg_dsn, schema=pg_schema)
    try:
        store = older.run_store()
        await store.create(RunRecord(run_id="r2", thread_id="t"))
        assert [r.run_id for r in (await store.list(thread_id="t")).records] == ["r0", "r1", "r2"]
    finally:
        await older.aclose()
