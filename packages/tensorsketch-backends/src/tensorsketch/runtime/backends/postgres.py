"""``PostgresBackend``: durable runs in PostgreSQL, over psycopg 3's async driver and pool.

It is the :class:`~tensorsketch.runtime.backends.sql.SqlBackend` layout with the PostgreSQL
dialect: ``%s`` placeholders, ``BYTEA`` payloads, the server's clock for leases, and an
advisory lock so two processes creating the tables at once do not collide.

Event loops: an asyncio pool belongs to the loop it was opened on. The backend opens its pool
on the first loop that uses it (and again on a new loop once that one has closed). A call made
from any *other* live loop uses a short-lived connection of its own instead of the pool, so it
never touches another loop's sockets. A sync helper's private loop (``app.get_state(...)``
from plain code, see :mod:`tensorsketch.runtime.loops`) never gets a pool: it lives for one
call, so the call's units share one plain connection, closed when that loop shuts down. A pool
there would be opened and torn down on every call, and its background connection attempts
(cancelled by the loop's shutdown) would be logged by psycopg_pool as failures.

Round trips: each unit of work is one. A single statement runs in autocommit mode; several
(opening a thread, committing a superstep) are sent together in pipeline mode and closed by
one Sync, which PostgreSQL runs as a single implicit transaction — no ``BEGIN``/``COMMIT``
exchanges. A connection of yours that is not in autocommit mode is switched to it for the
length of each unit and switched back.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import os
import socket
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, ClassVar

try:
    import psycopg
    from psycopg import pq
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    from psycopg_pool import AsyncConnectionPool
except ImportError as exc:  # pragma: no cover - exercised in a venv without the extra
    msg = (
        "PostgresBackend needs psycopg 3 and psycopg_pool; install them with "
        '`pip install "tensorsketch-backends[postgres]"`.'
    )
    raise ImportError(msg, name=exc.name) from exc

from tensorsketch.errors import BackendUnavailableError, LeaseLostError
from tensorsketch.runtime.backends.base import StoredEvent, lease_lost
from tensorsketch.runtime.backends.rides import RecordRide
from tensorsketch.runtime.backends.sql import Query, SqlBackend
from tensorsketch.runtime.backends.sql_runs import SqlRunStore
from tensorsketch.runtime.loops import on_private_loop
from tensorsketch.serializers import Serializer

__all__ = ["PostgresBackend"]

# pg_advisory_xact_lock key that serializes table creation across processes ("tsk-ddl").
_DDL_LOCK_KEY = 0x74736B2D64646C
# A pooled connection idle for longer than this is checked (one round trip) before use.
_STALE_AFTER = 1.0
# Pipeline mode needs libpq >= 14; without it a transaction costs a round trip per statement.
_PIPELINE = psycopg.AsyncPipeline.is_supported()
# Rows a batch of events or journal records sends as plain parameters; past it, as arrays.
_ROWS_PER_VALUES = 16
# Lets one transaction's commit skip the WAL flush (reverts when the transaction ends).
_RELAXED = "SELECT set_config('synchronous_commit', 'off', true)"
#: Cursors kept on a connection for the next units of work, one per statement text (a run
#: of the runner sends nine texts, the direct invoke ten).
_KEPT_CURSORS = 16
_IDLE = pq.TransactionStatus.IDLE
#: The text a refused fence tries to cast to an integer (it names itself in the error).
_LEASE_LOST = "tensorsketch: lease lost"
#: Sets lz4 on the ``BYTEA`` columns of the tables listed in ``{tables}`` (``VALUES`` rows)
#: that do not have it yet, where the server offers it (PostgreSQL 14+ built with lz4). A
#: table another session holds is left for the next start: a short ``lock_timeout`` keeps
#: this start from queueing that table's writers behind it. Values stored before keep their
#: compression (the server reads both), so an older build reads and writes the tables as before.
_LZ4 = """DO $tsk$
DECLARE
  col record;
  previous text := current_setting('lock_timeout');
BEGIN
  IF current_setting('server_version_num')::int < 140000 OR NOT EXISTS (
    SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression'
    AND 'lz4' = ANY(enumvals)
  ) THEN
    RETURN;
  END IF;
  PERFORM set_config('lock_timeout', '100ms', true);
  FOR col IN
    SELECT t.name, a.attname FROM (VALUES {tables}) AS t(name)
    JOIN pg_attribute a ON a.attrelid = to_regclass(t.name)
    WHERE a.atttypid = 'bytea'::regtype AND a.attnum > 0 AND NOT a.attisdropped
    AND a.attcompression <> 'l'
  LOOP
    BEGIN
      EXECUTE 'ALTER TABLE ' || col.name || ' ALTER COLUMN ' || quote_ident(col.attname)
        || ' SET COMPRESSION lz4';
    EXCEPTION WHEN lock_not_available OR deadlock_detected OR insufficient_privilege THEN
      NULL;
    END;
  END LOOP;
  PERFORM set_config('lock_timeout', previous, true);
END
$tsk$"""


async def _close_with_loop(
    pool: AsyncConnectionPool[Any], opened: weakref.WeakSet[psycopg.AsyncConnection[Any]]
) -> None:
    """Close an owned pool, and every connection it opened, when its event loop shuts down.

    ``asyncio.run`` cancels every task before closing its loop; a pool left open then can keep
    the shutdown waiting on a connection attempt in flight. This task is cancelled with the
    others and closes the pool first, so forgetting ``aclose()`` never hangs a program's exit.
    The pool's own workers are cancelled at the same time, and ``close()`` stops at them (it
    re-raises their cancellation) before it closes the idle connections, so those are closed
    here: otherwise each such loop would leave a server session open until garbage collection.
    """
    try:
        await asyncio.get_running_loop().create_future()  # until cancelled
    finally:
        if not pool.closed:
            try:
                await pool.close(timeout=2.0)
            except (Exception, asyncio.CancelledError):
                # The loop is going: every task that holds one of them is being cancelled.
                for conn in list(opened):
                    if not conn.closed:
                        with contextlib.suppress(Exception):
                            await conn.close()


class _LoopConnection:
    """The one connection of a sync helper's private loop, opened on first use, and the task
    that closes it when that loop shuts down (held here: a loop keeps only weak references
    to its tasks)."""

    __slots__ = ("closer", "conn", "lock")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.conn: psycopg.AsyncConnection[Any] | None = None
        self.closer: asyncio.Task[None] | None = None


async def _close_loop_connection(
    slots: dict[asyncio.AbstractEventLoop, _LoopConnection], loop: asyncio.AbstractEventLoop
) -> None:
    """Close a private loop's connection when that loop shuts down (its pending tasks are
    cancelled then, this one among them)."""
    try:
        await loop.create_future()  # until cancelled
    finally:
        slot = slots.pop(loop, None)
        if slot is not None and slot.conn is not None and not slot.conn.closed:
            with contextlib.suppress(Exception):
                await slot.conn.close()


def _sever(conn: psycopg.AsyncConnection[Any]) -> None:
    """Shut a connection's socket down, so a call blocked on it fails at once.

    Cancelling psycopg instead would first send the server a cancel request and wait up to
    10 s for the answer, which a black-holed connection never gives; a shut-down socket
    reads as a lost connection, which psycopg raises and the pool then discards.
    """
    with contextlib.suppress(Exception):
        fd = conn.pgconn.socket
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)


@contextlib.asynccontextmanager
async def _deadline(conn: psycopg.AsyncConnection[Any], seconds: float) -> AsyncIterator[None]:
    """Bound the block's use of ``conn``: past ``seconds``, sever it and raise TimeoutError."""
    fired = False

    def fire() -> None:
        nonlocal fired
        fired = True
        _sever(conn)

    handle = asyncio.get_running_loop().call_later(seconds, fire)
    try:
        yield
    except psycopg.Error as exc:
        if fired:
            msg = (
                f"PostgreSQL did not answer within {seconds:g}s (command_timeout); the "
                "connection was dropped"
            )
            raise TimeoutError(msg) from exc
        raise
    finally:
        handle.cancel()


class _Watchdog:
    """``command_timeout`` for every unit of work in flight on one event loop, on one timer.

    A timer per unit cost a heap push, a cancel and the cancelled handle's later pop on every
    round trip. Units are kept in a dict (``[conn, deadline, fired]`` each); the one timer
    fires at the earliest deadline, severs what is overdue and re-arms for the next one, so a
    busy backend arms it about once per ``command_timeout``.
    """

    __slots__ = ("loop", "timer", "units")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.units: dict[int, list[Any]] = {}
        self.timer: asyncio.TimerHandle | None = None

    def watch(self, conn: psycopg.AsyncConnection[Any], seconds: float) -> list[Any]:
        deadline = self.loop.time() + seconds
        unit = [conn, deadline, False]
        self.units[id(unit)] = unit
        if self.timer is None:
            self.timer = self.loop.call_at(deadline, self._fire)
        return unit

    def done(self, unit: list[Any]) -> None:
        self.units.pop(id(unit), None)

    def _fire(self) -> None:
        self.timer = None
        now = self.loop.time()
        soonest: float | None = None
        for key, unit in list(self.units.items()):
            if unit[1] <= now:
                del self.units[key]
                unit[2] = True
                _sever(unit[0])
            elif soonest is None or unit[1] < soonest:
                soonest = unit[1]
        if soonest is not None:
            self.timer = self.loop.call_at(soonest, self._fire)


def _timed_out(seconds: float) -> TimeoutError:
    msg = (
        f"PostgreSQL did not answer within {seconds:g}s (command_timeout); the connection "
        "was dropped"
    )
    return TimeoutError(msg)


async def _check_if_stale(conn: psycopg.AsyncConnection[Any]) -> None:
    """Pool ``check``: test connections that sat idle (a server restart, an admin killing
    sessions) and skip the round trip for one used moments ago, as during a run. Bounded:
    a black-holed idle connection would otherwise hold the checkout forever."""
    used = getattr(conn, "_tensorsketch_used", None)
    if used is None or time.monotonic() - used > _STALE_AFTER:
        limit = getattr(conn, "_tensorsketch_check_timeout", 5.0)
        async with _deadline(conn, limit):
            await AsyncConnectionPool.check_connection(conn)


def _checked_dsn(dsn: str) -> None:
    """Refuse a connection string libpq cannot parse, or a port that is not a number, when
    the backend is made: the pool would otherwise retry it until its timeout, logging each
    attempt, and end in a ``PoolTimeout`` that hides the cause."""
    example = "e.g. 'postgresql://user:secret@localhost:5432/app' or 'host=localhost dbname=app'"
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        reason = " ".join(str(exc).split())
        msg = f"PostgresBackend: `dsn` is not a PostgreSQL connection string ({reason}); {example}."
        raise ValueError(msg) from None
    for port in (p.strip() for p in str(params.get("port") or "").split(",")):
        if port and not port.isdigit():
            msg = f"PostgresBackend: the port in `dsn` must be a number, got {port!r}; {example}."
            raise ValueError(msg)


def _address(conninfo: str) -> str:
    """Where ``conninfo`` points, as ``host:port`` (libpq's defaults filled in), for messages."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "the server in the DSN"
    host = str(params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or "")
    port = str(params.get("port") or os.environ.get("PGPORT") or "5432")
    if not host or host.startswith("/"):
        return f"the local socket {host or '(default directory)'}, port {port}"
    hosts, ports = host.split(","), port.split(",")
    if len(ports) != len(hosts):  # one port for every host
        ports = ports[:1] * len(hosts)
    return ", ".join(f"{h}:{p}" for h, p in zip(hosts, ports, strict=True))


async def _connect(conninfo: str, timeout: float, **kwargs: Any) -> psycopg.AsyncConnection[Any]:
    """Open one connection, or raise ``BackendUnavailableError`` naming the address and the
    cause (refused, unknown host, authentication, timeout) as libpq reported it."""
    try:
        return await psycopg.AsyncConnection.connect(conninfo, **kwargs)
    except psycopg.OperationalError as exc:
        cause = " ".join(str(exc).split())
        msg = (
            f"postgres backend unavailable: cannot connect to PostgreSQL at "
            f"{_address(conninfo)} (connect_timeout={timeout:g}s): {cause}. Check that the "
            "server is running there and the DSN is right, then retry."
        )
        raise BackendUnavailableError(msg) from exc


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class PostgresBackend(SqlBackend):
    """Checkpoints, journal, events and leases in PostgreSQL.

    Pass exactly one of:

    :param dsn: a libpq connection string or URL; the backend opens and owns a pool.
    :param connection: an open ``psycopg.AsyncConnection`` to share (its calls are
        serialized; it must not be inside a transaction of yours when the backend uses it,
        and it is in autocommit mode while the backend uses it).
    :param pool: an ``psycopg_pool.AsyncConnectionPool`` to share (opened by you).

    :param schema: the PostgreSQL schema holding the tables (created if missing).
    :param pool_kwargs: extra ``AsyncConnectionPool`` arguments for the owned pool
        (``max_size``, ``timeout``, ...).
    :param connect_timeout: seconds to wait for a new connection (libpq counts whole seconds,
        at least 2) and, for the owned pool, for a free one (its ``timeout``).
    :param command_timeout: seconds a unit of work may wait for the server before its
        connection is dropped and the call fails with ``BackendUnavailableError``; each unit
        touches one thread's rows by primary key, so the default is far above a healthy
        server's latency (raise it for very large checkpoints over a slow link). It applies
        to every connection the backend uses, yours included; TCP keepalives are turned on
        for the connections it opens.
    """

    name = "postgres"
    placeholder: ClassVar[str] = "%s"
    blob_type: ClassVar[str] = "BYTEA"
    float_type: ClassVar[str] = "DOUBLE PRECISION"
    now_sql: ClassVar[str] = "EXTRACT(EPOCH FROM clock_timestamp())::double precision"
    writes_in_with: ClassVar[bool] = True
    #: Compression of the payload columns (checkpoints, journal, events, files, run records)
    #: where the server offers it, set when the tables are made and on existing tables at
    #: start; ``None`` keeps the server's default (pglz). lz4 stores about as small for a
    #: fraction of the server's CPU (a runner run's 2 kB events row: ~14 µs with pglz, ~3 µs).
    payload_compression: ClassVar[str | None] = "lz4"

    def __init__(
        self,
        dsn: str | None = None,
        *,
        connection: psycopg.AsyncConnection[Any] | None = None,
        pool: AsyncConnectionPool[Any] | None = None,
        serializer: Serializer | str | None = None,
        schema: str = "public",
        lease_ttl: float = 30.0,
        table_prefix: str = "tensorsketch_",
        pool_kwargs: dict[str, Any] | None = None,
        connect_timeout: float = 5.0,
        command_timeout: float = 10.0,
    ) -> None:
        for label, value in (
            ("connect_timeout", connect_timeout),
            ("command_timeout", command_timeout),
        ):
            if not value > 0:
                msg = f"`{label}` must be a positive number of seconds, got {value!r}."
                raise ValueError(msg)
        given = [n for n, v in (("dsn", dsn), ("connection", connection), ("pool", pool)) if v]
        if len(given) != 1:
            msg = (
                "PostgresBackend needs exactly one of `dsn`, `connection=` or `pool=`, got "
                f"{', '.join(given) or 'none'}; e.g. "
                "`PostgresBackend('postgresql://user@localhost/db')`."
            )
            raise ValueError(msg)
        if connection is not None and not isinstance(connection, psycopg.AsyncConnection):
            msg = (
                f"`connection=` must be a psycopg.AsyncConnection, got "
                f"{type(connection).__name__}; open one with "
                "`await psycopg.AsyncConnection.connect(dsn)`."
            )
            raise TypeError(msg)
        if pool is not None and not isinstance(pool, AsyncConnectionPool):
            msg = f"`pool=` must be a psycopg_pool.AsyncConnectionPool, got {type(pool).__name__}."
            raise TypeError(msg)
        if not schema or not isinstance(schema, str):
            msg = f"`schema` must be a non-empty schema name, got {schema!r}."
            raise ValueError(msg)
        if dsn is not None:
            _checked_dsn(dsn)
        self.schema = schema
        super().__init__(serializer=serializer, lease_ttl=lease_ttl, table_prefix=table_prefix)
        self.dsn = dsn
        self._shared = connection
        self._user_pool = pool
        self._pool_kwargs = dict(pool_kwargs or {})
        self.connect_timeout = float(connect_timeout)
        self.command_timeout = float(command_timeout)
        # The loop that owns the pool (or the shared connection), and the pool being opened.
        self._home: asyncio.AbstractEventLoop | None = None
        self._pool_task: asyncio.Task[AsyncConnectionPool[Any]] | None = None
        self._shared_lock: asyncio.Lock | None = None
        self._keeper: asyncio.Task[None] | None = None
        # Statements built on first use: batches by size, the ones a ride folds into.
        self._batch_sql: dict[str, str] = {}
        self._ride_sqls: dict[tuple[str, str, str], str] = {}
        # Sync helpers' private loops, each with the one connection its call uses.
        self._loop_conns: dict[asyncio.AbstractEventLoop, _LoopConnection] = {}
        # The deadlines of the units in flight on the home loop (see _Watchdog).
        self._watchdog: _Watchdog | None = None

    # -- dialect ----------------------------------------------------------------------------

    def table(self, name: str) -> str:
        return f"{_quote_ident(self.schema)}.{self.table_prefix}{name}"

    def lease_upsert(self) -> str:
        t = self.table("leases")
        now = self.now_sql
        return (
            f"INSERT INTO {t} AS l (thread_id, owner, expires_at) VALUES (?, ?, {now} + ?) "
            "ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner, "
            "expires_at = excluded.expires_at "
            f"WHERE l.owner = excluded.owner OR l.expires_at < {now}"
        )

    def schema_prologue(self) -> list[str]:
        statements = [f"SELECT pg_advisory_xact_lock({_DDL_LOCK_KEY})"]
        if self.schema != "public":
            statements.append(f"CREATE SCHEMA IF NOT EXISTS {_quote_ident(self.schema)}")
        return statements

    def dialect_ddl(self, component: str) -> list[str]:
        statements = []
        if component == "runs":
            tables = ["runs"]
            # The head of a thread's queue (which run goes next) reads only that thread's
            # active runs here. Without it, once threads hold many runs each, PostgreSQL's
            # generic plan scans the status index for every queued and running run of the
            # store and filters the thread: 11,000 queued runs made each read 1.3-1.6 ms.
            statements.append(
                f"CREATE INDEX IF NOT EXISTS {self.table_prefix}runs_queue ON "
                f"{self.table('runs')} (thread_id, created_at, run_id) "
                "WHERE kind = 'run' AND status IN ('queued', 'running')"
            )
        else:
            tables = ["checkpoints", "effects", "events", "blobs"]
        if self.payload_compression == "lz4":
            names = ", ".join("('" + self.table(t).replace("'", "''") + "')" for t in tables)
            statements.append(_LZ4.replace("{tables}", names))
        return statements

    def append_query(self, thread_id: str, events: Sequence[StoredEvent]) -> Query:
        # One statement for a step's events, however many: a row per event was a statement
        # (Bind + Execute, a plan, an index probe each) per event of every streamed run.
        if len(events) > _ROWS_PER_VALUES:
            sql = (
                f"INSERT INTO {self.table('events')} (thread_id, seq, payload) "
                "SELECT ?, s, p FROM unnest(?::bigint[], ?::bytea[]) AS u(s, p)"
            )
            seqs = [e.seq for e in events]
            return Query(self.q(sql), (thread_id, seqs, [e.payload for e in events]))
        params = [v for e in events for v in (thread_id, e.seq, e.payload)]
        return Query(self._rows_sql("events", len(events)), params)

    def effects_query(self, thread_id: str, effects: Sequence[tuple[str, bytes]]) -> Query:
        # One statement for a unit's journal records, as for events (a runner's run writes
        # three in one unit: a statement each was three Bind + Execute and three plans).
        if len(effects) > _ROWS_PER_VALUES:
            sql = (
                f"INSERT INTO {self.table('effects')} (thread_id, key, value) "
                "SELECT ?, k, v FROM unnest(?::text[], ?::bytea[]) AS u(k, v) "
                "ON CONFLICT (thread_id, key) DO NOTHING"
            )
            keys = [key for key, _ in effects]
            return Query(self.q(sql), (thread_id, keys, [value for _, value in effects]))
        params = [v for key, value in effects for v in (thread_id, key, value)]
        return Query(self._rows_sql("effects", len(effects)), params)

    def _rows_sql(self, kind: str, rows: int) -> str:
        """An ``INSERT`` of ``rows`` rows of events or journal records, built once per size:
        a few sizes recur (each is then a prepared statement), and plain parameters dump
        cheaper than arrays (a text array escapes every element with a regular expression)."""
        key = f"{kind}:{rows}"
        sql = self._batch_sql.get(key)
        if sql is None:
            if kind == "events":
                head, tail = "(thread_id, seq, payload)", ""
            else:
                head, tail = "(thread_id, key, value)", " ON CONFLICT (thread_id, key) DO NOTHING"
            values = ", ".join(["(%s, %s, %s)"] * rows)
            sql = self._batch_sql[key] = (
                f"INSERT INTO {self.table(kind)} {head} VALUES {values}{tail}"
            )
        return sql

    def fence_query(self, thread_id: str, owner: str) -> Query:
        # A unit is pipelined (every statement sent before any result is read), so the fence
        # must fail inside the database: the lease row is locked by the UPDATE, and when it
        # is not ours the cast of the marker text aborts the whole implicit transaction. The
        # cast sits outside a scalar subquery so the planner cannot fold it ahead of time.
        # Its text is built once (the same string each time keeps its cursor's adapters).
        return Query(self._ride_sql("fence"), (thread_id, owner))

    def _fence_sql(self, ride: str = "") -> str:
        """The fence, with ``ride`` (``, w AS (...)``) as a second data-modifying clause
        (the fence's own check still decides: a refused one aborts the whole statement)."""
        t = self.table("leases")
        return (
            f"WITH f AS (UPDATE {t} SET expires_at = expires_at WHERE thread_id = ? "
            f"AND owner = ? AND expires_at >= {self.now_sql} RETURNING 1){ride} "
            "SELECT CAST((SELECT CASE WHEN EXISTS (SELECT 1 FROM f) THEN '1' "
            f"ELSE '{_LEASE_LOST}' END) AS INTEGER)"
        )

    def fence_carrying_query(
        self, thread_id: str, owner: str, write: Query, ride: RecordRide | None
    ) -> Query | None:
        # The insert is one more WITH clause of the fence (a refused fence aborts the whole
        # statement, the insert included): a unit of a fence and its journal records or
        # events is one statement, sent without a pipeline. An insert needs no snapshot
        # taken after the fence's lock (the key decides, and a conflict waits for the row).
        carried = (thread_id, owner, *write.params)
        if ride is None:
            return Query(self._ride_sql("fence", carried=write.sql), carried)
        store = self.run_store()
        if not isinstance(store, SqlRunStore):
            return None
        ride_write = store.ride_write(ride)
        if ride_write is None:
            sql = self._ride_sql("fence_reading", carried=write.sql)
            return Query(sql, (*carried, ride.run_id), fetch="one")
        params = (*carried, *ride_write.params, ride.run_id)
        sql = self._ride_sql("fence_writing", ride_write.sql, write.sql)
        return Query(sql, params, fetch="one")

    def fence_riding_query(self, thread_id: str, owner: str, ride: RecordRide) -> Query | None:
        # The fence is a SELECT already: the ride's write is one more WITH clause of it (a
        # refused fence aborts the statement, write included), its version read one more
        # column. A statement per ride was a Bind + Execute and a plan of its own.
        store = self.run_store()
        if not isinstance(store, SqlRunStore):
            return None
        write = store.ride_write(ride)
        if write is None:
            return Query(
                self._ride_sql("fence_reading"), (thread_id, owner, ride.run_id), fetch="one"
            )
        params = (thread_id, owner, *write.params, ride.run_id)
        return Query(self._ride_sql("fence_writing", write.sql), params, fetch="one")

    def lease_riding_query(
        self, thread_id: str, owner: str, ttl: float, ride: RecordRide
    ) -> Query | None:
        # The lease is taken in a WITH clause whose row says it was: the ride's write is
        # made only beside that row, its version read is a column of the same answer.
        store = self.run_store()
        if not isinstance(store, SqlRunStore):
            return None
        write = store.ride_write(ride)
        taking = (thread_id, owner, float(ttl))
        if write is None:
            return Query(self._ride_sql("lease_reading"), (*taking, ride.run_id), fetch="one")
        params = (*taking, *write.params, ride.run_id)
        return Query(self._ride_sql("lease_writing", write.sql), params, fetch="one")

    def _ride_sql(self, kind: str, write: str = "", carried: str = "") -> str:
        """The statements a ride folds into, built once (``write`` is the store's
        compare-and-set, the same text for every ride; ``carried`` an insert the fence
        makes too, one text per batch size)."""
        key = (kind, write, carried)
        sql = self._ride_sqls.get(key)
        if sql is not None:
            return sql
        found = f"(SELECT version FROM {self.table('runs')} WHERE run_id = ?)"
        taking = f"WITH l AS ({self.lease_upsert()} RETURNING 1)"
        # The stored version is read only when the write lost (a won write returns its own):
        # the subquery in a CASE branch not taken is never run, an index probe saved.
        lost = f"CASE WHEN EXISTS (SELECT 1 FROM w) THEN NULL ELSE {found} END"
        written = f"(SELECT version FROM w), {lost}"
        carry = ", c AS (#)" if carried else ""
        sql = self.q(
            {
                "fence": self._fence_sql(carry),
                "fence_reading": f"{self._fence_sql(carry)}, {found}",
                "fence_writing": (
                    f"{self._fence_sql(f'{carry}, w AS (@ RETURNING version)')}, {written}"
                ),
                "lease_reading": f"{taking} SELECT (SELECT count(*) FROM l), {found}",
                "lease_writing": (
                    f"{taking}, w AS (@ AND EXISTS (SELECT 1 FROM l) RETURNING version) "
                    f"SELECT (SELECT count(*) FROM l), {written}"
                ),
            }[kind]
        )
        # The write and the insert are in the driver's style already (and carry no ``?``).
        sql = sql.replace("@", write).replace("#", carried)
        self._ride_sqls[key] = sql
        return sql

    def lease_error(self, exc: BaseException) -> bool:
        return isinstance(exc, psycopg.errors.InvalidTextRepresentation) and _LEASE_LOST in str(exc)

    def is_unavailable(self, exc: BaseException) -> bool:
        if isinstance(exc, psycopg.OperationalError):
            return True  # includes PoolTimeout, refused connections and terminated sessions
        if isinstance(exc, psycopg.InterfaceError) and "closed" in str(exc):
            return True
        return super().is_unavailable(exc)

    # -- connections ------------------------------------------------------------------------

    async def submit(
        self, queries: Sequence[Query], *, transaction: bool = False, durable: bool = True
    ) -> list[Any]:
        # ``durable=False`` relaxes a pipelined unit's commit at no cost; a lone statement (a
        # lease) keeps PostgreSQL's own commit durability, as relaxing it takes a round trip.
        try:
            return await self._submit(queries, transaction, durable)
        except psycopg.OperationalError:
            await self._drop_broken()
            raise

    async def _drop_broken(self) -> None:
        """After a connection failed, discard every broken idle one, so the next call (the
        resume, once the server is back) gets a working connection."""
        task = self._pool_task
        if self._home is not asyncio.get_running_loop() or task is None or not task.done():
            return
        if task.exception() is None:
            # Bounded without waiting on the cancellation (a cancelled psycopg call first
            # waits for the server to confirm it, which a dead one never does).
            checking = asyncio.ensure_future(task.result().check())
            await asyncio.wait([checking], timeout=self.connect_timeout)
            if not checking.done():
                checking.cancel()
            checking.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _submit(
        self, queries: Sequence[Query], transaction: bool, durable: bool
    ) -> list[Any]:
        """One network round trip per unit of work.

        Statements run in autocommit mode (a non-autocommit connection is switched for the
        length of the unit), so psycopg sends no ``BEGIN``/``COMMIT`` of its own. A
        transaction is a pipeline: every statement is sent at once, followed by a single
        Sync, and PostgreSQL runs everything up to that Sync as one implicit transaction —
        committed when all succeed, rolled back (later statements skipped) when one fails.
        """
        loop = asyncio.get_running_loop()
        if self._home is loop and self._shared is None:
            # The pool's loop (every call of a running graph): the connection straight from
            # the pool, without its context manager (which would commit an autocommit
            # connection: a lock and a call for nothing).
            pool = await self._pool()
            conn = await pool.getconn(self._checkout_timeout())
            try:
                return await self._timed(conn, loop, queries, transaction, durable)
            finally:
                conn._tensorsketch_used = time.monotonic()
                await pool.putconn(conn)
        async with self._checkout() as conn:
            return await self._timed(conn, loop, queries, transaction, durable)

    async def _timed(
        self,
        conn: psycopg.AsyncConnection[Any],
        loop: asyncio.AbstractEventLoop,
        queries: Sequence[Query],
        transaction: bool,
        durable: bool,
    ) -> list[Any]:
        """The unit on ``conn``, severed past ``command_timeout``."""
        watchdog = self._watchdog
        if watchdog is None or watchdog.loop is not loop:
            watchdog = _Watchdog(loop)
            if loop is self._home:
                self._watchdog = watchdog
        seconds = self.command_timeout
        unit = watchdog.watch(conn, seconds)
        try:
            if conn.pgconn.transaction_status != _IDLE:
                msg = (
                    "the connection given to PostgresBackend is inside a transaction, so "
                    "checkpoints would not be committed until you commit it; give the "
                    "backend a connection (or pool) it can use on its own."
                )
                raise RuntimeError(msg)
            if conn.autocommit:
                return await _unit(conn, queries, transaction, durable)
            async with _autocommit(conn):
                return await _unit(conn, queries, transaction, durable)
        except psycopg.Error as exc:
            if unit[2]:
                raise _timed_out(seconds) from exc
            raise
        finally:
            watchdog.done(unit)
            if watchdog is not self._watchdog and watchdog.timer is not None:
                watchdog.timer.cancel()  # another loop's, made for this unit alone

    async def transact_effect(
        self,
        thread_id: str,
        key: str,
        fn: Callable[[Any], Any],
        encode: Callable[[Any], bytes],
        *,
        fence: str | None = None,
    ) -> tuple[bytes | None, Any]:
        """``fn`` gets a pooled ``psycopg.AsyncConnection`` inside a transaction (``async
        def fn(conn)``; a plain ``def`` may return a value too), with the step's journal
        record inserted before the one commit."""
        if not self._ready:
            await self._setup()
        try:
            async with (
                self._checkout() as conn,
                _autocommit(conn),
                conn.transaction(),
                conn.cursor() as cur,
            ):
                if fence is not None:
                    await _send(cur, self.fence_query(thread_id, fence))
                lookup = Query(self._sql["lookup"], (thread_id, key), fetch="one")
                await _send(cur, lookup)
                row = await _result(cur, lookup)
                if row is not None:
                    raise _Recorded(bytes(row[0]))  # rolls the transaction back
                result = fn(conn)
                if inspect.isawaitable(result):
                    result = await result
                record = Query(self._sql["record"], (thread_id, key, encode(result)))
                await _send(cur, record)
            return None, result
        except _Recorded as found:
            return found.value, None
        except (BackendUnavailableError, LeaseLostError):
            raise
        except Exception as exc:
            if self.lease_error(exc):
                raise lease_lost(thread_id) from exc
            if self.is_unavailable(exc):
                raise self._unavailable("committing a database step", exc) from exc
            raise

    @contextlib.asynccontextmanager
    async def _checkout(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        loop = asyncio.get_running_loop()
        home = self._home
        if home is not loop and on_private_loop():
            # A sync helper's loop: it never becomes home (a pool opened there would be torn
            # down with it a moment later, and the loop that owns the pool is left alone).
            async with self._loop_connection(loop) as conn:
                yield conn
            return
        owned = self._shared is None and self._user_pool is None
        if home is None or (home is not loop and owned and home.is_closed()):
            # Our own pool follows the live loop. A pool or connection you passed stays on
            # the loop it was first used on; once that loop is gone, calls use their own.
            home = self._rehome(loop)
        if home is loop:
            if self._shared is not None:
                assert self._shared_lock is not None
                async with self._shared_lock:
                    yield self._shared
                return
            pool = await self._pool()
            async with pool.connection(timeout=self._checkout_timeout()) as conn:
                try:
                    yield conn
                finally:
                    conn._tensorsketch_used = time.monotonic()
            return
        # Another live loop owns the pool: use a private connection for this call.
        conn = await self._connect_once()
        try:
            yield conn
        finally:
            await conn.close()

    @contextlib.asynccontextmanager
    async def _loop_connection(
        self, loop: asyncio.AbstractEventLoop
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The private loop's connection: opened by its first unit, replaced once broken (a
        unit past ``command_timeout`` severs it), closed when the loop shuts down."""
        slots = self._loop_conns
        slot = slots.get(loop)
        if slot is None:
            for gone in [other for other in slots if other.is_closed()]:
                slots.pop(gone, None)  # closed without shutting its tasks down
            slot = slots[loop] = _LoopConnection()
            slot.closer = loop.create_task(_close_loop_connection(slots, loop))
        async with slot.lock:
            conn = slot.conn
            if conn is None or conn.closed or conn.broken:
                slot.conn = None
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
                conn = slot.conn = await self._connect_once()
            yield conn

    def _rehome(self, loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop:
        self._home = loop
        if self._shared is not None:
            self._shared_lock = asyncio.Lock()
        elif self._user_pool is None:
            self._pool_task = loop.create_task(self._open_pool())
        return loop

    async def _pool(self) -> AsyncConnectionPool[Any]:
        if self._user_pool is not None:
            return self._user_pool
        task = self._pool_task
        assert task is not None
        try:
            return task.result() if task.done() else await asyncio.shield(task)
        except BackendUnavailableError:
            if self._pool_task is task:  # the next call tries to open it again
                self._pool_task = self._home = None
            raise

    def _checkout_timeout(self) -> float | None:
        """The owned pool waits ``connect_timeout`` for a connection (or your ``timeout``);
        a pool you passed keeps its own setting."""
        if self._user_pool is not None:
            return None
        return float(self._pool_kwargs.get("timeout", self.connect_timeout))

    def _connect_kwargs(self) -> dict[str, Any]:
        """libpq settings that bound connecting and notice a dead peer on an idle socket."""
        return {
            "connect_timeout": max(2, math.ceil(self.connect_timeout)),
            "keepalives": 1,
            "keepalives_idle": max(1, math.ceil(self.command_timeout / 2)),
            "keepalives_interval": max(1, math.ceil(self.command_timeout / 6)),
            "keepalives_count": 3,
        }

    async def _open_pool(self) -> AsyncConnectionPool[Any]:
        options: dict[str, Any] = {
            # No connection opened ahead of the first checkout: that checkout waits anyway and
            # makes the pool grow by one, so a warm-up connection would only race it, and be
            # left in flight (then cancelled, and logged as a failure) when a short loop ends.
            "min_size": 0,
            "max_size": 8,
            "timeout": self.connect_timeout,
            # A connection that broke while idle (server restart, network blip) is replaced
            # at checkout instead of failing the run.
            "check": _check_if_stale,
            "name": f"tensorsketch-{self.schema}",
        }
        options.update(self._pool_kwargs)
        kwargs = {**self._connect_kwargs(), "autocommit": True, **options.pop("kwargs", {})}
        limit = self.connect_timeout
        theirs = options.pop("configure", None)
        opened: weakref.WeakSet[psycopg.AsyncConnection[Any]] = weakref.WeakSet()

        async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
            conn._tensorsketch_check_timeout = limit  # type: ignore[attr-defined]
            opened.add(conn)
            if theirs is not None:
                await theirs(conn)

        # One connection first, outside the pool: a server that cannot be reached (or a DSN
        # it refuses) fails here at once with libpq's reason, where the pool would retry in
        # the background, log each attempt, and time out with a bare ``PoolTimeout``.
        probe = await _connect(self.dsn or "", limit, **kwargs)
        await probe.close()
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self.dsn or "", open=False, kwargs=kwargs, configure=configure, **options
        )
        await pool.open(wait=False)
        self._keeper = asyncio.get_running_loop().create_task(_close_with_loop(pool, opened))
        return pool

    async def _connect_once(self) -> psycopg.AsyncConnection[Any]:
        kwargs: dict[str, Any] = {**self._connect_kwargs(), "autocommit": True}
        if self._shared is not None:
            info = self._shared.info
            conninfo = make_conninfo(info.dsn, password=info.password or None)
        elif self._user_pool is not None:
            source: Any = self._user_pool.conninfo
            conninfo = await source() if callable(source) else source
            extra: Any = self._user_pool.kwargs
            kwargs.update((await extra()) if callable(extra) else (extra or {}))
            kwargs["autocommit"] = True
        else:
            # The settings the owned pool's connections get (``pool_kwargs={"kwargs": ...}``).
            conninfo = self.dsn or ""
            kwargs.update(self._pool_kwargs.get("kwargs") or {})
            kwargs["autocommit"] = True
        return await _connect(conninfo, self.connect_timeout, **kwargs)

    async def aclose(self) -> None:
        """Close the pool this backend opened (call it on the loop that ran the graph)."""
        task, self._pool_task = self._pool_task, None
        home, self._home = self._home, None
        self._ready = False
        if task is None or home is not asyncio.get_running_loop():
            return
        keeper, self._keeper = self._keeper, None
        if not task.done():
            task.cancel()
        elif task.exception() is None:
            await task.result().close()
        if keeper is not None:
            keeper.cancel()
            await asyncio.wait([keeper])

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "schema": self.schema,
            "connect_timeout": self.connect_timeout,
            "command_timeout": self.command_timeout,
        }

    def __repr__(self) -> str:
        where = "connection" if self._shared else "pool" if self._user_pool else "dsn"
        return f"PostgresBackend({where}, schema={self.schema!r})"


class _Recorded(Exception):
    """The step's key is journaled already: leave the transaction without writing."""

    def __init__(self, value: bytes) -> None:
        self.value = value


@contextlib.asynccontextmanager
async def _autocommit(conn: psycopg.AsyncConnection[Any]) -> AsyncIterator[None]:
    """Run the block in autocommit mode, then give the connection back as it was."""
    if conn.autocommit:
        yield
        return
    await conn.set_autocommit(True)  # a flag of the client: no round trip
    try:
        yield
    except BaseException:
        # A connection the error left dead or mid-query refuses the switch; its own error
        # says more than that refusal would.
        with contextlib.suppress(psycopg.Error):
            await conn.set_autocommit(False)
        raise
    await conn.set_autocommit(False)


async def _unit(
    conn: psycopg.AsyncConnection[Any],
    queries: Sequence[Query],
    transaction: bool,
    durable: bool,
) -> list[Any]:
    if not transaction:
        return await _execute(conn, queries)
    if _PIPELINE:
        if not durable:
            # Free inside a pipeline: the commit may skip waiting for the disk (the
            # contract of ``durable=False``); visible to all at once anyway.
            return (await _execute_pipelined(conn, [Query(_RELAXED), *queries]))[1:]
        return await _execute_pipelined(conn, queries)
    async with conn.transaction():  # libpq < 14: BEGIN, each statement, COMMIT
        return await _execute(conn, queries)


def _cursors(
    conn: psycopg.AsyncConnection[Any], queries: Sequence[Query]
) -> tuple[list[psycopg.AsyncCursor[Any]], list[psycopg.AsyncCursor[Any]]]:
    """A cursor for each of ``queries``, and those of them to close after the unit.

    Cursors are kept on ``conn`` from one unit to the next, one per statement text: psycopg
    keeps a cursor's adapters (the dumpers of its parameters' types, the loaders of its
    columns) only while the cursor runs the same statement as the time before, and builds
    them again otherwise. Cursors handed out by position ran a different statement nearly
    every time (eight of a run's ten), ~8 µs of the client's CPU each. Past
    :data:`_KEPT_CURSORS` texts the least recently used one's cursor is taken over; a text
    that comes twice in one unit (each statement of a pipeline needs a cursor of its own)
    gets a fresh cursor for the repeat, closed after the unit (see :func:`_release`).
    """
    kept: dict[str, psycopg.AsyncCursor[Any]] | None = getattr(conn, "_tensorsketch_cursors", None)
    if kept is None:
        kept = conn._tensorsketch_cursors = {}  # type: ignore[attr-defined]
    cursors: list[psycopg.AsyncCursor[Any]] = []
    fresh: list[psycopg.AsyncCursor[Any]] = []
    for q in queries:
        cur = kept.pop(q.sql, None)
        if cur is None and len(kept) >= _KEPT_CURSORS:
            oldest = next(iter(kept))
            if kept[oldest] not in cursors:
                cur = kept.pop(oldest)  # taken over from the least recently used text
        if cur is None or cur in cursors:
            if cur is not None:  # the text came before in this unit: its cursor stays
                kept[q.sql] = cur
            cur = conn.cursor()
            if q.sql in kept or len(kept) >= _KEPT_CURSORS:
                fresh.append(cur)
            else:
                kept[q.sql] = cur
        else:
            kept[q.sql] = cur  # the most recently used text, last
        cursors.append(cur)
    return cursors, fresh


async def _release(fresh: Sequence[psycopg.AsyncCursor[Any]]) -> None:
    """Close the cursors a unit did not keep."""
    for cur in fresh:
        await cur.close()


async def _execute(conn: psycopg.AsyncConnection[Any], queries: Sequence[Query]) -> list[Any]:
    cursors, fresh = _cursors(conn, queries)
    try:
        results = []
        for cur, q in zip(cursors, queries, strict=True):
            await _send(cur, q)
            results.append(await _result(cur, q))
        return results
    finally:
        await _release(fresh)


async def _execute_pipelined(
    conn: psycopg.AsyncConnection[Any], queries: Sequence[Query]
) -> list[Any]:
    """Send every statement, then one Sync, and read the results: one round trip.

    Each statement gets a cursor of its own (a cursor keeps only its latest result), and
    nothing is fetched before the pipeline ends: a fetch inside it would force a Sync of its
    own. The first statement that fails raises its error as it would outside a pipeline
    (while later ones are sent, or when the pipeline ends), and the server skips the rest and
    rolls the transaction back at the Sync, so the connection is usable again.
    """
    cursors, fresh = _cursors(conn, queries)
    try:
        async with conn.pipeline():
            for cur, q in zip(cursors, queries, strict=True):
                await _send(cur, q)
        return [await _result(cur, q) for cur, q in zip(cursors, queries, strict=True)]
    finally:
        await _release(fresh)


async def _send(cur: psycopg.AsyncCursor[Any], q: Query) -> None:
    if q.many:
        await cur.executemany(q.sql, q.params)
    else:
        # Binary results for checkpoint reads: BYTEA as raw bytes, not hex text (2.4x faster
        # for a 465 kB chain).
        await cur.execute(q.sql, q.params, binary=q.binary)


async def _result(cur: psycopg.AsyncCursor[Any], q: Query) -> Any:
    if q.fetch == "one":
        return await cur.fetchone()
    if q.fetch == "all":
        return await cur.fetchall()
    if q.fetch == "rowcount":
        return cur.rowcount
    return None
