"""``SqlBackend``: the whole backend contract written once in portable SQL.

A dialect is a subclass that says how its database differs: the placeholder (``?`` or
``%s``), the binary column type, the clock expression used for leases, the upsert clause, and
how a unit of work reaches a connection. ``SqliteBackend`` (in core) is one; ``PostgresBackend``
(in ``tensorsketch-backends``) is another.

Layout (created on first use, inside one transaction)::

    tensorsketch_schema_version (component PK, version)        what a later release migrates from
    tensorsketch_checkpoints    (thread_id, position) PK        checkpoint payloads, oldest first;
                                                                base_id names the checkpoint a
                                                                delta applies to
    tensorsketch_effects        (thread_id, key) PK             the effect journal, first write wins
    tensorsketch_events         (thread_id, seq) PK             the persisted stream
    tensorsketch_leases         thread_id PK                    one writer per thread
    tensorsketch_blobs          (thread_id, hash) PK            large files stored by reference
                                                                (sha256 of the data), once per
                                                                thread
    tensorsketch_checkpoints_forks  index on parent_id of first checkpoints that have one:
                                the fork points, for list_forks

Every statement touches one thread's rows through its primary key, and a checkpoint save is a
single ``INSERT``, so the cost of a superstep does not depend on how long the thread is.
Rebuilding a checkpoint reads its chain of bases with one recursive query over the
``(thread_id, checkpoint_id)`` index: ``O(log n)`` rows, not the thread. A run
reaches the database once to open its thread (lease, input checkpoint and the reads a resume
needs, in one transaction) and once per superstep (its events and checkpoint, in one commit).
Leases are compared against the *database's* clock, so runners on hosts with skewed clocks
still agree on when a lease expired.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import queue
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any, ClassVar, NamedTuple

from tensorsketch.errors import BackendUnavailableError, CheckpointDecodeError, LeaseLostError
from tensorsketch.runtime.backends.base import (
    Backend,
    ForkLink,
    StoredCheckpoint,
    StoredEvent,
    ThreadOpening,
    ThreadSummary,
    lease_lost,
)
from tensorsketch.runtime.backends.rides import RecordRide, RideResult
from tensorsketch.runtime.backends.runs import RunStore
from tensorsketch.runtime.backends.sql_query import Query
from tensorsketch.runtime.backends.sql_runs import SqlRunStore
from tensorsketch.runtime.inbox import settle
from tensorsketch.runtime.loops import on_private_loop
from tensorsketch.serializers import Serializer

__all__ = ["SCHEMA_VERSION", "Query", "SqlBackend"]

#: Version of the table layout written by this release (2: ``checkpoints.base_id``).
SCHEMA_VERSION = 2
_COMPONENT = "durable"

#: Keys per ``IN (...)`` list: well under every driver's limit on bound parameters.
_KEYS_PER_QUERY = 500


class SqlBackend(Backend):
    """A backend over any SQL database; subclass it with a dialect.

    A subclass for a synchronous DB-API 2.0 driver only implements :meth:`connect`; its
    statements then run on a worker thread over one connection guarded by a lock (a sync
    helper's calls, on their private loop, use it from the calling thread under the same
    lock). A subclass for an async driver overrides :meth:`submit` instead.

    :param threaded: run a sync driver's statements on the backend's worker thread (the
        default), so the event loop never waits on the database. ``False`` runs them on the
        calling thread: it saves the hand-off between threads (two thread wake-ups per unit
        of work) but blocks the event loop for the length of every statement and commit,
        disk sync and lock waits included — for a script or worker process that runs one
        graph at a time, never for a server.
    :param lease_ttl: seconds a runner's lease on a thread lasts without renewal (renewed every
        third of that while the run is alive); a crashed runner's thread can be resumed by
        another process once it lapses.
    :param table_prefix: prefix of the five table names (to share one database between apps).
    """

    name = "sql"
    fences_writes = True
    stores_blobs = True
    #: A data-modifying statement may sit in a ``WITH`` clause (PostgreSQL): a record ride's
    #: compare-and-set and its version read are then one statement.
    writes_in_with: ClassVar[bool] = False
    #: A run record's writes spell its ``None`` columns as ``NULL`` in the statement text
    #: rather than binding them (a text per pattern of nulls): the standard library's
    #: ``sqlite3`` looks every bound ``None`` up in its adapter registry first, which costs
    #: about as much as binding three other values.
    inlines_nulls: ClassVar[bool] = False
    #: SQL for the number of rows the connection's previous statement changed, read inside
    #: the next one (SQLite's ``changes()``), or ``None``. A folded submit's insert and input
    #: checkpoint then ask it whether the statement before them wrote, rather than looking
    #: up the lease, the queue and the run again (see :meth:`_open_folding`).
    changes_sql: ClassVar[str | None] = None

    #: Placeholder of the driver's paramstyle: ``"?"`` (qmark) or ``"%s"`` (format).
    placeholder: ClassVar[str] = "?"
    #: Column type for encoded payloads.
    blob_type: ClassVar[str] = "BLOB"
    #: Column type for timestamps in seconds (fractional).
    float_type: ClassVar[str] = "DOUBLE PRECISION"
    #: SQL expression for the database's clock, in seconds since the epoch.
    now_sql: ClassVar[str] = "CURRENT_TIMESTAMP"
    #: Statement that opens an explicit transaction, or ``None`` when the driver opens them.
    begin_sql: ClassVar[str | None] = None
    #: Units of work already waiting for the worker thread share one transaction and one
    #: commit (each in a savepoint: one that fails is undone alone). Needs ``begin_sql``,
    #: ``SAVEPOINT`` and a connection's ``in_transaction`` (SQLite's driver has all three).
    groups_commits: ClassVar[bool] = False

    def __init__(
        self,
        *,
        serializer: Serializer | str | None = None,
        lease_ttl: float = 30.0,
        table_prefix: str = "tensorsketch_",
        threaded: bool = True,
    ) -> None:
        super().__init__(serializer=serializer)
        if not lease_ttl > 0:
            msg = f"`lease_ttl` must be a positive number of seconds, got {lease_ttl!r}."
            raise ValueError(msg)
        if not table_prefix.replace("_", "").isalnum():
            msg = f"`table_prefix` must be letters, digits and underscores, got {table_prefix!r}."
            raise ValueError(msg)
        self.lease_ttl = float(lease_ttl)
        self.table_prefix = table_prefix
        self.threaded = bool(threaded)
        self._ready = False
        self._sync_lock = threading.Lock()
        self._connection: Any = None
        self._worker = _DriverThread(f"tensorsketch-{self.name}")
        self._sql = self._statements()
        # Whether the dialect has the fence forms that carry a write or a ride (the base
        # methods answer None): a fenced unit then skips asking.
        cls = type(self)
        self._fence_carries = cls.fence_carrying_query is not SqlBackend.fence_carrying_query
        self._fence_rides = cls.fence_riding_query is not SqlBackend.fence_riding_query

    # -- dialect ----------------------------------------------------------------------------

    def table(self, name: str) -> str:
        """The (qualified) name of one of the backend's tables."""
        return f"{self.table_prefix}{name}"

    def q(self, sql: str) -> str:
        """Rewrite portable ``?`` placeholders into the driver's style."""
        return sql if self.placeholder == "?" else sql.replace("?", self.placeholder)

    def insert_ignore(self, table: str, columns: Sequence[str], key: Sequence[str]) -> str:
        """An ``INSERT`` that silently keeps the existing row when ``key`` already exists."""
        marks = ", ".join("?" for _ in columns)
        return (
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) "
            f"ON CONFLICT ({', '.join(key)}) DO NOTHING"
        )

    def lease_upsert(self) -> str:
        """Take a lease row when it is free, ours, or expired; affects 0 rows otherwise.

        Parameters: ``thread_id``, ``owner``, ``ttl``.
        """
        t = self.table("leases")
        now = self.now_sql
        return (
            f"INSERT INTO {t} (thread_id, owner, expires_at) VALUES (?, ?, {now} + ?) "
            f"ON CONFLICT (thread_id) DO UPDATE SET owner = excluded.owner, "
            f"expires_at = excluded.expires_at "
            f"WHERE {t}.owner = excluded.owner OR {t}.expires_at < {now}"
        )

    def append_query(self, thread_id: str, events: Sequence[StoredEvent]) -> Query:
        """The statement(s) adding ``events`` to the thread's log: one row each by default;
        a dialect with arrays overrides it with one statement for the whole batch."""
        rows = [(thread_id, e.seq, e.payload) for e in events]
        return Query(self._sql["append"], rows, many=True)

    def effects_query(self, thread_id: str, effects: Sequence[tuple[str, bytes]]) -> Query:
        """The statement(s) journaling ``effects`` (first write of a key wins): one row each
        by default; a dialect with arrays overrides it with one statement for the batch."""
        rows = [(thread_id, key, value) for key, value in effects]
        return Query(self._sql["record"], rows, many=True)

    def fence_query(self, thread_id: str, owner: str) -> Query:
        """A statement that fails the unit of work unless ``owner`` holds the thread's
        unexpired lease, locking the lease row until the unit commits (so no takeover can
        slip in between the check and the writes).

        The portable form touches the row and has the unit check its row count; a dialect
        that pipelines a unit (sends every statement at once) overrides it with a statement
        that raises in the database, and recognises that error in :meth:`lease_error`.
        """
        t = self.table("leases")
        sql = (
            f"UPDATE {t} SET expires_at = expires_at "
            f"WHERE thread_id = ? AND owner = ? AND expires_at >= {self.now_sql}"
        )
        return Query(self.q(sql), (thread_id, owner), fetch="fence")

    def fence_riding_query(self, thread_id: str, owner: str, ride: RecordRide) -> Query | None:
        """:meth:`fence_query` that also carries ``ride`` — its compare-and-set write, if any,
        and its version read — answered in the fence's row as ``(check, *ride columns)``
        (see :meth:`SqlRunStore.ride_result`), or ``None`` where the fence is no ``SELECT`` to
        carry it (the portable form, checked by its row count)."""
        return None

    def fence_carrying_query(
        self, thread_id: str, owner: str, write: Query, ride: RecordRide | None
    ) -> Query | None:
        """:meth:`fence_query` with ``write`` (the unit's journal records or events: one
        insert) made by the fence statement itself, and ``ride`` as in
        :meth:`fence_riding_query`, or ``None`` where the dialect cannot put a write inside
        another statement. A refused fence must undo the write with the rest of the unit."""
        return None

    def fence_reading_query(self, thread_id: str, owner: str, ride: RecordRide) -> Query | None:
        """:meth:`fence_query` that also reads ``ride``'s record version, answered in the
        fence's row as ``(check, version)`` (fetch ``"fence_row"``: no row, or a ``NULL``
        check, and the unit fails), or ``None`` where the dialect has no such statement.
        For a dialect that cannot put the ride's write inside the fence
        (:meth:`fence_riding_query`): the write still follows as a statement of its own, and
        the version read before it is the one after the unit unless that write wins
        (nothing else writes the record inside the unit)."""
        return None

    def lease_riding_query(
        self, thread_id: str, owner: str, ttl: float, ride: RecordRide
    ) -> Query | None:
        """The lease statement of :meth:`open_thread` carrying ``ride`` (its write only
        where the lease was taken), answered in one row ``(taken, *ride columns)``, or
        ``None`` where the dialect cannot put a write inside another statement."""
        return None

    def lease_error(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the dialect's fence statement refusing the unit."""
        return False

    def schema_prologue(self) -> list[str]:
        """Statements run first in the schema transaction (e.g. a lock, ``CREATE SCHEMA``)."""
        return []

    def dialect_ddl(self, component: str) -> list[str]:
        """Statements of the dialect's own run last in a component's schema transaction
        (``"durable"``: the checkpoint tables, ``"runs"``: the run tables), e.g. how payload
        columns are stored or an index its planner needs; none by default."""
        return []

    def ddl(self) -> list[str]:
        """``CREATE TABLE IF NOT EXISTS`` statements of the layout."""
        blob, flt = self.blob_type, self.float_type
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table('schema_version')} ("
            "component VARCHAR(64) PRIMARY KEY, version INTEGER NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS {self.table('checkpoints')} ("
            "thread_id TEXT NOT NULL, position BIGINT NOT NULL, checkpoint_id TEXT NOT NULL, "
            # base_id before the payload: the chain query reads it without walking the
            # payload's overflow pages (SQLite stores a row's columns in this order).
            f"parent_id TEXT, step INTEGER NOT NULL, created_at {flt} NOT NULL, "
            f"base_id TEXT, payload {blob} NOT NULL, PRIMARY KEY (thread_id, position), "
            "UNIQUE (thread_id, checkpoint_id))",
            f"CREATE TABLE IF NOT EXISTS {self.table('effects')} ("
            f"thread_id TEXT NOT NULL, key TEXT NOT NULL, value {blob} NOT NULL, "
            "PRIMARY KEY (thread_id, key))",
            f"CREATE TABLE IF NOT EXISTS {self.table('events')} ("
            f"thread_id TEXT NOT NULL, seq BIGINT NOT NULL, payload {blob} NOT NULL, "
            "PRIMARY KEY (thread_id, seq))",
            f"CREATE TABLE IF NOT EXISTS {self.table('leases')} ("
            f"thread_id TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at {flt} NOT NULL)",
            # Added beside layout 2 (no version bump: a release before it never reads it).
            f"CREATE TABLE IF NOT EXISTS {self.table('blobs')} ("
            f"thread_id TEXT NOT NULL, hash TEXT NOT NULL, data {blob} NOT NULL, "
            "PRIMARY KEY (thread_id, hash))",
            # Forks (list_forks): a thread's first checkpoint has a parent only when it was
            # forked from another thread, so this partial index holds just the fork points
            # and costs an ordinary save nothing but the predicate.
            f"CREATE INDEX IF NOT EXISTS {self.table_prefix}checkpoints_forks ON "
            f"{self.table('checkpoints')} (parent_id) "
            "WHERE position = 1 AND parent_id IS NOT NULL",
            *self.dialect_ddl(_COMPONENT),
        ]

    def _statements(self) -> dict[str, str]:
        cp = self.table("checkpoints")
        cols = "checkpoint_id, parent_id, step, created_at, payload, base_id"
        # The chain of bases of one checkpoint: one recursive query over the (thread_id,
        # checkpoint_id) index that carries only positions and base ids (a payload copied
        # through the recursion's queue would cost more than the read), then the rows by
        # primary key, oldest first. A base must be older, so a corrupt loop ends.
        chain = (
            "WITH RECURSIVE chain (position, base_id) AS ("
            f"SELECT position, base_id FROM {cp} WHERE thread_id = ? AND {{start}} "
            f"UNION ALL SELECT c.position, c.base_id FROM {cp} c JOIN chain "
            "ON c.thread_id = ? AND c.checkpoint_id = chain.base_id "
            f"AND c.position < chain.position) SELECT {cols} FROM {cp} WHERE thread_id = ? "
            "AND position IN (SELECT position FROM chain) ORDER BY position"
        )
        sql = {
            # The position is computed inside the INSERT: one statement, one round trip. Two
            # writers racing on a thread (which the lease prevents) would hit the primary key.
            "save": (
                f"INSERT INTO {cp} (thread_id, position, {cols}) "
                f"SELECT ?, COALESCE(MAX(position), 0) + 1, ?, ?, ?, ?, ?, ? FROM {cp} "
                "WHERE thread_id = ?"
            ),
            # A thread's first checkpoint, written only if the thread has none and the lease
            # (taken earlier in the same transaction) is ours.
            "initial": (
                f"INSERT INTO {cp} (thread_id, position, {cols}) "
                "SELECT ?, 1, ?, ?, ?, ?, ?, ? "
                f"WHERE NOT EXISTS (SELECT 1 FROM {cp} WHERE thread_id = ?) "
                f"AND EXISTS (SELECT 1 FROM {self.table('leases')} "
                "WHERE thread_id = ? AND owner = ?)"
            ),
            "latest": (
                f"SELECT {cols} FROM {cp} WHERE thread_id = ? ORDER BY position DESC LIMIT 1"
            ),
            "get": f"SELECT {cols} FROM {cp} WHERE thread_id = ? AND checkpoint_id = ?",
            "list": f"SELECT {cols} FROM {cp} WHERE thread_id = ? ORDER BY position",
            # A page of the history, newest first: keyed on the position of `before`.
            "page": f"SELECT {cols} FROM {cp} WHERE thread_id = ? ORDER BY position DESC LIMIT ?",
            "page_before": (
                f"SELECT {cols} FROM {cp} WHERE thread_id = ? AND position < (SELECT position "
                f"FROM {cp} WHERE thread_id = ? AND checkpoint_id = ?) "
                "ORDER BY position DESC LIMIT ?"
            ),
            "chain_latest": chain.format(
                start=f"position = (SELECT MAX(position) FROM {cp} WHERE thread_id = ?)"
            ),
            "chain_at": chain.format(start="checkpoint_id = ?"),
            # Layout 1 -> 2: every old delta applied to its parent.
            "add_base": f"ALTER TABLE {cp} ADD COLUMN base_id TEXT",
            "fill_base": f"UPDATE {cp} SET base_id = parent_id",
            "bump": (
                f"UPDATE {self.table('schema_version')} SET version = ? "
                "WHERE component = ? AND version = ?"
            ),
            "record": self.insert_ignore(
                self.table("effects"), ("thread_id", "key", "value"), ("thread_id", "key")
            ),
            "lookup": f"SELECT value FROM {self.table('effects')} WHERE thread_id = ? AND key = ?",
            "append": (
                f"INSERT INTO {self.table('events')} (thread_id, seq, payload) VALUES (?, ?, ?)"
            ),
            "read": (
                f"SELECT seq, payload FROM {self.table('events')} WHERE thread_id = ? "
                "AND seq >= ? ORDER BY seq"
            ),
            "last_seq": f"SELECT MAX(seq) FROM {self.table('events')} WHERE thread_id = ?",
            "lease": self.lease_upsert(),
            "release": f"DELETE FROM {self.table('leases')} WHERE thread_id = ? AND owner = ?",
            "renew": (
                f"UPDATE {self.table('leases')} SET expires_at = {self.now_sql} + ? "
                f"WHERE thread_id = ? AND owner = ? AND expires_at >= {self.now_sql}"
            ),
            "version_init": self.insert_ignore(
                self.table("schema_version"), ("component", "version"), ("component",)
            ),
            "version": f"SELECT version FROM {self.table('schema_version')} WHERE component = ?",
            # Thread administration: a prefix test that needs no LIKE escaping.
            "threads": (
                f"SELECT DISTINCT thread_id FROM {cp} WHERE "
                "substr(thread_id, 1, length(CAST(? AS TEXT))) = CAST(? AS TEXT) "
                "ORDER BY thread_id LIMIT ?"
            ),
            "summaries": (
                f"SELECT thread_id, COUNT(*), MAX(created_at) FROM {cp} WHERE "
                "substr(thread_id, 1, length(CAST(? AS TEXT))) = CAST(? AS TEXT) "
                "GROUP BY thread_id ORDER BY thread_id"
            ),
            # The terms of the partial index's predicate, spelled out so planners use it.
            "forks": (
                f"SELECT thread_id, checkpoint_id, parent_id FROM {cp} WHERE position = 1 "
                "AND parent_id IS NOT NULL AND thread_id <> ? AND parent_id IN "
                f"(SELECT checkpoint_id FROM {cp} WHERE thread_id = ?) ORDER BY thread_id"
            ),
            "effects_with": (
                f"SELECT key, value FROM {self.table('effects')} WHERE thread_id = ? AND "
                "substr(key, 1, length(CAST(? AS TEXT))) = CAST(? AS TEXT) ORDER BY key"
            ),
            "drop_checkpoints": f"DELETE FROM {cp} WHERE thread_id = ?",
            "drop_effects": f"DELETE FROM {self.table('effects')} WHERE thread_id = ?",
            "forget": f"DELETE FROM {self.table('effects')} WHERE thread_id = ? AND key = ?",
            "drop_events": f"DELETE FROM {self.table('events')} WHERE thread_id = ?",
            "drop_lease": f"DELETE FROM {self.table('leases')} WHERE thread_id = ?",
            "put_blob": self.insert_ignore(
                self.table("blobs"), ("thread_id", "hash", "data"), ("thread_id", "hash")
            ),
            "drop_blobs": f"DELETE FROM {self.table('blobs')} WHERE thread_id = ?",
            "insert_at": (
                f"INSERT INTO {cp} (thread_id, position, {cols}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            ),
        }
        return {k: self.q(v) for k, v in sql.items()}

    # -- reaching the database --------------------------------------------------------------

    def connect(self) -> Any:
        """Open a DB-API 2.0 connection (sync drivers). Called once, under the backend's
        lock, on the thread of the first unit of work (normally the worker thread)."""
        msg = (
            f"{type(self).__name__} must implement `connect()` (for a DB-API driver) or "
            "override `submit()` (for an async driver)."
        )
        raise NotImplementedError(msg)

    def is_unavailable(self, exc: BaseException) -> bool:
        """Whether a driver error means the database cannot be reached (vs. a bad query)."""
        return isinstance(exc, OSError | ConnectionError | TimeoutError)

    def unavailable_advice(self, exc: BaseException) -> str:
        """What to check when ``exc`` (an :meth:`is_unavailable` error) stopped a unit of work:
        a server database's advice; a file database says something else (see SQLite)."""
        return "Check that the database is running and reachable, then retry."

    def _unavailable(self, what: str, exc: BaseException) -> BackendUnavailableError:
        text = " ".join(str(exc).split()).rstrip(".")  # one sentence, ended once
        end = "" if text.endswith(("?", "!")) else "."
        msg = (
            f"{self.name} backend unavailable while {what}: {type(exc).__name__}: {text}{end} "
            f"{self.unavailable_advice(exc)}"
        )
        return BackendUnavailableError(msg)

    def relaxed_statements(self) -> tuple[str, str] | None:
        """Statements around a unit of work that need not survive a power cut, and back.

        Lease writes use it: a lease only matters while its owner is alive, so waiting for
        the disk on them buys nothing. ``None`` (the default) keeps every write durable.
        """
        return None

    async def submit(
        self, queries: Sequence[Query], *, transaction: bool = False, durable: bool = True
    ) -> list[Any]:
        """Run statements as one unit of work and return one result per statement.

        ``transaction=True`` makes them atomic; a single statement is atomic on its own. The
        unit is committed (visible to every other connection) before this returns;
        ``durable=False`` allows the commit to skip waiting for the disk. The statements run
        on the calling thread when the backend is not threaded, and also when the caller is
        a sync helper's private loop (:func:`~tensorsketch.runtime.loops.on_private_loop`),
        which nothing else waits on; the lock keeps the connection to one caller at a time.
        """
        if not self.threaded or on_private_loop():
            return self._submit_sync(queries, transaction, durable)
        if self.groups_commits and self.begin_sql:
            unit = _Unit(queries, transaction, durable)
            grouped: list[Any] = await self._worker.run_grouped(self._submit_group, unit)
            return grouped
        results: list[Any] = await self._worker.run(
            self._submit_sync, queries, transaction, durable
        )
        return results

    def _submit_group(self, units: Sequence[_Unit]) -> list[_Outcome]:
        """Run the units that were waiting together in one transaction, committed once (see
        :attr:`groups_commits`); a lone unit runs as it always did."""
        if len(units) == 1:
            return [_attempt(self._submit_sync, *units[0])]
        with self._sync_lock:
            conn = self._connected()
            together = self._commit_together(conn, units)
            # Units the group could not keep run one by one: nothing of theirs committed.
            return [
                _attempt(self._unit_sync, conn, *unit) if outcome is None else outcome
                for unit, outcome in zip(units, together, strict=True)
            ]

    def _commit_together(self, conn: Any, units: Sequence[_Unit]) -> list[_Outcome | None]:
        """Run ``units`` in one transaction and commit it once: every outcome is known only
        after that commit. A unit that fails is rolled back to its savepoint and fails alone
        (one whose failure cannot leave a write of its own behind needs none: the database
        undoes a failed statement itself; see :func:`_may_fail_half_done`). If
        the transaction cannot begin, or an error ends it, the other units come back as
        ``None``, to be run alone. A failed commit fails every unit (whether it landed is not
        known, so nothing runs twice). The relaxed statements apply only when no unit is
        durable."""
        relaxed = None if any(u.durable for u in units) else self.relaxed_statements()
        outcomes: list[_Outcome | None] = []
        cur = conn.cursor()
        try:
            if relaxed is not None:
                cur.execute(relaxed[0])
            try:
                cur.execute(self.begin_sql)
            except Exception:
                _roll_back(conn)
                return [None] * len(units)
            for unit in units:
                queries = unit.queries
                guarded = unit.transaction and _may_fail_half_done(queries)
                if guarded:
                    cur.execute(f"SAVEPOINT {_SAVEPOINT}")
                try:
                    results = [_run_query(cur, q) for q in queries]
                except Exception as exc:
                    if not conn.in_transaction:  # the error rolled the whole group back
                        redo: list[_Outcome | None] = [None] * len(units)
                        redo[len(outcomes)] = (None, exc)
                        return redo
                    if guarded:
                        cur.execute(f"ROLLBACK TO {_SAVEPOINT}")
                        cur.execute(f"RELEASE {_SAVEPOINT}")
                    outcomes.append((None, exc))
                    continue
                if guarded:
                    cur.execute(f"RELEASE {_SAVEPOINT}")
                outcomes.append((results, None))
            conn.commit()
            return outcomes
        except Exception as exc:
            _roll_back(conn)
            return [(None, exc)] * len(units)
        except BaseException:
            _roll_back(conn)
            raise
        finally:
            try:
                if relaxed is not None:
                    cur.execute(relaxed[1])
            finally:
                cur.close()

    def _submit_sync(self, queries: Sequence[Query], transaction: bool, durable: bool) -> list[Any]:
        with self._sync_lock:
            return self._unit_sync(self._connected(), queries, transaction, durable)

    def _connected(self) -> Any:
        """The connection (opened on first use); call it holding the lock."""
        conn = self._connection
        if conn is None:
            conn = self._connection = self.connect()
        return conn

    def _unit_sync(
        self, conn: Any, queries: Sequence[Query], transaction: bool, durable: bool
    ) -> list[Any]:
        cur = conn.cursor()
        relaxed = None if durable else self.relaxed_statements()
        try:
            if relaxed is not None:
                cur.execute(relaxed[0])
            if transaction and self.begin_sql:
                cur.execute(self.begin_sql)
            results = [_run_query(cur, q) for q in queries]
            conn.commit()
            return results
        except BaseException:
            _roll_back(conn)
            raise
        finally:
            try:
                if relaxed is not None:
                    cur.execute(relaxed[1])
            finally:
                cur.close()

    async def _run(
        self,
        what: str,
        queries: Sequence[Query],
        *,
        transaction: bool = False,
        durable: bool = True,
        idempotent: bool = False,
    ) -> Any:
        """Submit a unit of work, turning "cannot reach the database" into
        :class:`BackendUnavailableError`. An ``idempotent`` unit (a read, an insert-if-absent,
        a lease) is tried once more first: a pooled connection that died while idle fails
        its first use, and the second attempt gets a fresh one."""
        if not self._ready:
            await self._setup()
        attempts = 2 if idempotent else 1
        for attempt in range(attempts):
            try:
                return await self.submit(queries, transaction=transaction, durable=durable)
            except (BackendUnavailableError, LeaseLostError):
                raise
            except Exception as exc:
                if self.lease_error(exc):
                    raise lease_lost(_fenced_thread(queries)) from exc
                if not self.is_unavailable(exc):
                    raise
                # A timeout is not retried: a server that did not answer will not answer
                # faster now, and a retry would double the wait before the error.
                if attempt + 1 < attempts and not isinstance(exc, TimeoutError):
                    continue
                raise self._unavailable(what, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def run_queries(
        self,
        what: str,
        queries: Sequence[Query],
        *,
        transaction: bool = False,
        durable: bool = True,
        idempotent: bool = False,
    ) -> list[Any]:
        """Run a unit of work on the backend's connection, with its error handling (the run
        store's tables live beside the checkpoints and use this)."""
        results: list[Any] = await self._run(
            what, queries, transaction=transaction, durable=durable, idempotent=idempotent
        )
        return results

    async def _setup(self) -> None:
        """Create the tables (idempotent) and check the layout version."""
        statements = [*self.schema_prologue(), *self.ddl()]
        queries = [Query(s) for s in statements]
        queries.append(Query(self._sql["version_init"], (_COMPONENT, SCHEMA_VERSION)))
        queries.append(Query(self._sql["version"], (_COMPONENT,), fetch="one"))
        attempts = 5
        for attempt in range(attempts):
            try:
                results = await self.submit(queries, transaction=True)
                break
            except BackendUnavailableError:
                raise  # the backend already said why (a connection that cannot be opened)
            except Exception as exc:
                if not self.is_unavailable(exc):
                    raise
                if attempt + 1 < attempts and not isinstance(exc, TimeoutError):
                    # Several handles creating the tables at once can briefly lock each other
                    # out (SQLite's switch to WAL needs an exclusive lock): back off, retry.
                    await asyncio.sleep(0.05 * 2**attempt)
                    continue
                raise self._unavailable("creating its tables", exc) from exc
        found = int(results[-1][0])
        if found > SCHEMA_VERSION:
            msg = (
                f"the {self.name} store uses TensorSketch table layout version {found}, newer "
                f"than this release understands ({SCHEMA_VERSION}); upgrade tensorsketch to use "
                "it, or point this backend at another database/prefix."
            )
            raise CheckpointDecodeError(msg)
        if found < SCHEMA_VERSION:
            await self.migrate(found)
        self._ready = True

    async def migrate(self, found: int) -> None:
        """Bring an older table layout up to :data:`SCHEMA_VERSION`, in one transaction.

        1 -> 2 adds ``checkpoints.base_id`` and fills it with ``parent_id`` (a version-1
        delta applied to its parent; a snapshot's parent ends the chain as before). Two
        processes migrating at once: one adds the column, the other's transaction fails and
        finds the new version when it reads it again.
        """
        if found != 1:
            msg = (
                f"{self.name} tables ({self.table_prefix}*) use layout version {found}, which "
                f"this release cannot migrate to {SCHEMA_VERSION}; install the tensorsketch "
                "release that wrote them to read them, or point the backend at a new "
                "database or `table_prefix=`."
            )
            raise RuntimeError(msg)
        queries = [Query(q) for q in self.schema_prologue()]
        queries += [
            Query(self._sql["add_base"]),
            Query(self._sql["fill_base"]),
            Query(self._sql["bump"], (SCHEMA_VERSION, _COMPONENT, found)),
        ]
        try:
            await self.submit(queries, transaction=True)
        except Exception:
            check = Query(self._sql["version"], (_COMPONENT,), fetch="one")
            row = (await self.submit([check]))[0]
            if row is None or int(row[0]) < SCHEMA_VERSION:
                raise

    # -- checkpoints ------------------------------------------------------------------------

    def _save_query(self, c: StoredCheckpoint) -> Query:
        return Query(self._sql["save"], (*_row(c), c.thread_id))

    def _blob_queries(self, c: StoredCheckpoint) -> list[Query]:
        """The statement storing a checkpoint's new blobs (none for a row without)."""
        if not c.blobs:
            return []
        rows = [(c.thread_id, digest, data) for digest, data in c.blobs]
        return [Query(self._sql["put_blob"], rows, many=True)]

    async def save_checkpoint(self, checkpoint: StoredCheckpoint) -> None:
        queries = [*self._blob_queries(checkpoint), self._save_query(checkpoint)]
        await self._run("saving a checkpoint", queries, transaction=len(queries) > 1)

    async def get_blobs(self, thread_id: str, hashes: Collection[str]) -> dict[str, bytes]:
        wanted = sorted(set(hashes))
        queries = []
        for start in range(0, len(wanted), _KEYS_PER_QUERY):
            chunk = wanted[start : start + _KEYS_PER_QUERY]
            marks = ", ".join("?" for _ in chunk)
            sql = self.q(
                f"SELECT hash, data FROM {self.table('blobs')} "
                f"WHERE thread_id = ? AND hash IN ({marks})"
            )
            queries.append(Query(sql, (thread_id, *chunk), fetch="all", binary=True))
        if not queries:
            return {}
        results = await self._run("reading stored files", queries, idempotent=True)
        return {str(digest): bytes(data) for rows in results for digest, data in rows}

    async def latest_checkpoint(self, thread_id: str) -> StoredCheckpoint | None:
        q = Query(self._sql["latest"], (thread_id,), fetch="one")
        row = (await self._run("loading the latest checkpoint", [q], idempotent=True))[0]
        return None if row is None else _checkpoint(thread_id, row)

    async def get_checkpoint(self, thread_id: str, checkpoint_id: str) -> StoredCheckpoint | None:
        q = Query(self._sql["get"], (thread_id, checkpoint_id), fetch="one")
        row = (await self._run("loading a checkpoint", [q], idempotent=True))[0]
        return None if row is None else _checkpoint(thread_id, row)

    async def list_checkpoints(self, thread_id: str) -> list[StoredCheckpoint]:
        q = Query(self._sql["list"], (thread_id,), fetch="all", binary=True)
        rows = (await self._run("listing checkpoints", [q], idempotent=True))[0]
        return [_checkpoint(thread_id, row) for row in rows]

    async def page_checkpoints(
        self, thread_id: str, *, before: str | None = None, limit: int
    ) -> list[StoredCheckpoint]:
        if before is None:
            q = Query(self._sql["page"], (thread_id, limit), fetch="all", binary=True)
        else:
            params = (thread_id, thread_id, before, limit)
            q = Query(self._sql["page_before"], params, fetch="all", binary=True)
        rows = (await self._run("reading a page of checkpoints", [q], idempotent=True))[0]
        return [_checkpoint(thread_id, row) for row in rows]

    async def list_forks(self, thread_id: str) -> list[ForkLink]:
        q = Query(self._sql["forks"], (thread_id, thread_id), fetch="all")
        rows = (await self._run("listing forks", [q], idempotent=True))[0]
        return [ForkLink(str(r[0]), str(r[1]), str(r[2])) for r in rows]

    def _chain_query(self, thread_id: str, checkpoint_id: str | None = None) -> Query:
        if checkpoint_id is None:
            params: tuple[str, ...] = (thread_id, thread_id, thread_id, thread_id)
            return Query(self._sql["chain_latest"], params, fetch="all", binary=True)
        params = (thread_id, checkpoint_id, thread_id, thread_id)
        return Query(self._sql["chain_at"], params, fetch="all", binary=True)

    async def read_chain(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> list[StoredCheckpoint]:
        q = self._chain_query(thread_id, checkpoint_id)
        rows = (await self._run("reading a checkpoint", [q], idempotent=True))[0]
        return [_checkpoint(thread_id, row) for row in rows]

    def read_chain_blocking(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> list[StoredCheckpoint] | None:
        """The chain read on the calling thread, as a sync helper's private loop would run it
        (:meth:`submit`). ``None`` (take the async path) before the schema is set up, for a
        subclass whose statements do not run through the blocking driver or that reads its
        chain its own way, and when the database cannot be reached: the async path retries
        that and reports it."""
        cls = type(self)
        if not self._ready or (cls.submit, cls.read_chain) != (
            SqlBackend.submit,
            SqlBackend.read_chain,
        ):
            return None
        q = self._chain_query(thread_id, checkpoint_id)
        try:
            rows = self._submit_sync([q], False, True)[0]
        except Exception as exc:
            if self.is_unavailable(exc):
                return None
            raise
        return [_checkpoint(thread_id, row) for row in rows]

    # -- the effect journal -----------------------------------------------------------------

    async def record_effect(self, thread_id: str, key: str, value: bytes) -> None:
        q = Query(self._sql["record"], (thread_id, key, value))
        await self._run("recording an effect", [q], idempotent=True)

    async def lookup_effect(self, thread_id: str, key: str) -> bytes | None:
        q = Query(self._sql["lookup"], (thread_id, key), fetch="one")
        row = (await self._run("reading the effect journal", [q], idempotent=True))[0]
        return None if row is None else bytes(row[0])

    async def record_effects(
        self,
        thread_id: str,
        effects: list[tuple[str, bytes]],
        *,
        fence: str | None = None,
        ride: RecordRide | None = None,
    ) -> None:
        if not effects:
            return
        queries = [self.effects_query(thread_id, effects)]
        fenced, riding = self._fence_and_ride(thread_id, fence, ride, queries)
        queries = fenced + queries + riding
        results = await self._run(
            "recording effects",
            queries,
            transaction=len(queries) > 1 or queries[0].many,
            idempotent=ride is None or ride.write is None,
        )
        self._rode_fenced(ride, results, fenced, riding)

    async def lookup_effects(self, thread_id: str, keys: list[str]) -> dict[str, bytes]:
        queries = []
        for start in range(0, len(keys), _KEYS_PER_QUERY):
            chunk = keys[start : start + _KEYS_PER_QUERY]
            marks = ", ".join("?" for _ in chunk)
            sql = self.q(
                f"SELECT key, value FROM {self.table('effects')} "
                f"WHERE thread_id = ? AND key IN ({marks})"
            )
            queries.append(Query(sql, (thread_id, *chunk), fetch="all"))
        if not queries:
            return {}
        results = await self._run("reading the effect journal", queries, idempotent=True)
        return {str(key): bytes(value) for rows in results for key, value in rows}

    # -- the event log ----------------------------------------------------------------------

    async def append_events(self, thread_id: str, events: list[StoredEvent]) -> None:
        if not events:
            return
        q = self.append_query(thread_id, events)
        await self._run("appending events", [q], transaction=len(events) > 1)

    async def read_events(self, thread_id: str, since: int = 0) -> list[StoredEvent]:
        q = Query(self._sql["read"], (thread_id, since), fetch="all")
        rows = (await self._run("reading events", [q], idempotent=True))[0]
        return [StoredEvent(seq=int(seq), payload=bytes(payload)) for seq, payload in rows]

    async def last_event_seq(self, thread_id: str) -> int | None:
        q = Query(self._sql["last_seq"], (thread_id,), fetch="one")
        row = (await self._run("reading events", [q], idempotent=True))[0]
        return None if row is None or row[0] is None else int(row[0])

    async def thread_head(self, thread_id: str) -> tuple[str | None, int | None]:
        latest = Query(self._sql["latest"], (thread_id,), fetch="one")
        last = Query(self._sql["last_seq"], (thread_id,), fetch="one")
        # One unit (a pipeline on PostgreSQL): one round trip, and a consistent pair.
        cp, seq = await self._run(
            "reading the thread's head", [latest, last], transaction=True, idempotent=True
        )
        checkpoint_id = None if cp is None else _checkpoint(thread_id, cp).checkpoint_id
        return checkpoint_id, None if seq is None or seq[0] is None else int(seq[0])

    # -- leases -----------------------------------------------------------------------------

    async def acquire_lease(self, thread_id: str, owner: str, ttl: float) -> bool:
        q = Query(self._sql["lease"], (thread_id, owner, float(ttl)), fetch="rowcount")
        count = (await self._run("taking the thread lease", [q], durable=False, idempotent=True))[0]
        return bool(count)

    async def release_lease(self, thread_id: str, owner: str) -> None:
        q = Query(self._sql["release"], (thread_id, owner))
        await self._run("releasing the thread lease", [q], durable=False, idempotent=True)

    async def renew_lease(self, thread_id: str, owner: str, ttl: float) -> bool:
        q = Query(self._sql["renew"], (float(ttl), thread_id, owner), fetch="rowcount")
        count = (await self._run("renewing the thread lease", [q], durable=False))[0]
        return bool(count)

    # -- batched units of work ---------------------------------------------------------------

    async def open_thread(
        self,
        thread_id: str,
        owner: str,
        ttl: float,
        initial: StoredCheckpoint | None = None,
        *,
        ride: RecordRide | None = None,
    ) -> ThreadOpening:
        if ride is not None and ride.insert is not None:
            return await self._open_folding(thread_id, owner, ttl, initial, ride)
        leasing = None if ride is None else self.lease_riding_query(thread_id, owner, ttl, ride)
        lease = Query(self._sql["lease"], (thread_id, owner, float(ttl)), fetch="rowcount")
        queries = [lease if leasing is None else leasing]
        if initial is not None:
            params = (*_row(initial), thread_id, thread_id, owner)
            queries.append(Query(self._sql["initial"], params, fetch="rowcount"))
            # Stored whether or not the thread was new: they are the thread's either way
            # (the runtime hands an input with blobs to a thread it knows is new).
            queries += self._blob_queries(initial)
        queries.append(self._chain_query(thread_id))
        queries.append(Query(self._sql["last_seq"], (thread_id,), fetch="one"))
        riding = [] if leasing is not None else self._ride_queries(ride, (thread_id, owner))
        # The lease needs no disk sync, nor does the input checkpoint: it reaches the disk
        # with the run's next durable commit, and a power cut before that leaves no trace of
        # the run at all (its caller never got an answer). A ride's write changes a record
        # only where the lease was just taken (the runner passes a ride to its own run).
        results = await self._run(
            "opening the thread",
            queries + riding,
            transaction=True,
            durable=False,
            idempotent=ride is None or ride.write is None,
        )
        if riding:
            self._rode(ride, results, len(riding))
            results = results[: -len(riding)]
        elif leasing is not None:
            self._rode(ride, results, 0)
            results[0] = results[0][0]
        return self._opening(thread_id, results, initial)

    def _opening(
        self, thread_id: str, results: list[Any], initial: StoredCheckpoint | None
    ) -> ThreadOpening:
        """What :meth:`open_thread`'s unit read: ``results`` from its lease statement on."""
        if not results[0]:
            return ThreadOpening(acquired=False, checkpoints=[], last_event_seq=None)
        created = bool(results[1]) if initial is not None else False
        rows, last = results[-2], results[-1]
        checkpoints = [] if created else [_checkpoint(thread_id, row) for row in rows]
        return ThreadOpening(
            acquired=True,
            checkpoints=checkpoints,
            last_event_seq=None if last is None or last[0] is None else int(last[0]),
            created=created,
        )

    async def _open_folding(
        self,
        thread_id: str,
        owner: str,
        ttl: float,
        initial: StoredCheckpoint | None,
        ride: RecordRide,
    ) -> ThreadOpening:
        """:meth:`open_thread` for a folded submit (see :attr:`folds_submits`): one durable
        transaction (``submit`` returns what it stored) takes the lease only where no
        active run is ahead of the new one in its thread's queue, and only there stores
        the run — already ``running``, its ride's write being what is inserted (one row
        written, one record encoded) — and the input checkpoint. Where the lease was not
        taken the run is then stored ``queued``, in a unit of its own: nothing of it was
        stored before, and nothing sees it running without the lease. Where a
        data-modifying ``WITH`` is allowed (:attr:`writes_in_with`) the lease is a ``WITH``
        clause of the run's insert (one statement)."""
        store = self.run_store()
        assert isinstance(store, SqlRunStore) and ride.insert is not None
        # Where the dialect can read the previous statement's row count inside the next one,
        # the run's insert writes iff the lease's statement did (it took the lease, and no
        # run is ahead), and the input checkpoint iff the insert did: one lookup each, not
        # three (the lease, the queue's head, the run).
        by_changes = self.changes_sql is not None and not self.writes_in_with
        fold = self.__dict__.get("_fold_sql")
        if fold is None:
            insert, insert_leased = store.insert_sql
            t, now = self.table("leases"), self.now_sql
            lease = self.q(
                f"INSERT INTO {t} (thread_id, owner, expires_at) SELECT ?, ?, {now} + ? "
                f"WHERE NOT {store.ahead_sql} ON CONFLICT (thread_id) DO UPDATE SET "
                "owner = excluded.owner, expires_at = excluded.expires_at "
                f"WHERE {t}.owner = excluded.owner OR {t}.expires_at < {now}"
            )
            into, _, values = insert.partition(" VALUES ")
            if self.writes_in_with:  # the run's insert where the lease's WITH took it
                lease = f"WITH l AS ({lease} RETURNING 1) {into} "
                lease += f"SELECT {values[1:-1]} WHERE EXISTS (SELECT 1 FROM l)"
            first = self._sql["initial"]
            if by_changes:
                wrote = f"{self.changes_sql} = 1"
                insert_leased = f"{into} SELECT {values[1:-1]} WHERE {wrote}"
                first = first.partition(" WHERE ")[0] + self.q(
                    f" WHERE NOT EXISTS (SELECT 1 FROM {self.table('checkpoints')} "
                    f"WHERE thread_id = ?) AND {wrote}"
                )
            else:
                runs = self.table("runs")
                first += self.q(f" AND EXISTS (SELECT 1 FROM {runs} WHERE run_id = ?)")
            fold = self.__dict__["_fold_sql"] = {
                "lease": lease,
                "insert": insert_leased,
                "initial": first,
            }
        record = ride.insert
        columns, stored = store.folded_insert(ride)
        ahead = (thread_id, record.created_at, record.created_at, ride.run_id)
        leasing = (thread_id, owner, float(ttl), *ahead)
        if self.writes_in_with:  # one statement: the lease in the insert's WITH clause
            queries = [Query(fold["lease"], (*leasing, *columns), fetch="rowcount")]
        else:
            conditions = () if by_changes else (thread_id, owner, *ahead)
            queries = [
                Query(fold["lease"], leasing, fetch="rowcount"),
                Query(fold["insert"], (*columns, *conditions), fetch="rowcount"),
            ]
        if initial is not None:
            checks = (thread_id,) if by_changes else (thread_id, thread_id, owner, ride.run_id)
            params = (*_row(initial), *checks)
            queries.append(Query(fold["initial"], params, fetch="rowcount"))
            queries += self._blob_queries(initial)
        queries.append(self._chain_query(thread_id))
        queries.append(Query(self._sql["last_seq"], (thread_id,), fetch="one"))
        results = await self._run(
            "storing the run and opening its thread", queries, transaction=True
        )
        # The run's insert says whether the lease was taken (it is stored only then).
        opening = self._opening(thread_id, results[0 if self.writes_in_with else 1 :], initial)
        if opening.acquired:
            ride.result = RideResult(record.version if stored is None else stored.version, stored)
        else:
            await store._insert(record)
            ride.result = RideResult(record.version)
        return opening

    @property
    def folds_submits(self) -> bool:  # type: ignore[override]
        """A submit's insert may ride its run's opening (:attr:`Backend.folds_submits`)
        once the run store is in use. The opening's statements are portable (the lease an
        ``INSERT … SELECT … ON CONFLICT``); a dialect that cannot run them, or has a better
        form, sets ``folds_submits = False`` on its class."""
        return self.carries_rides

    async def commit_step(
        self,
        thread_id: str,
        checkpoint: StoredCheckpoint | None,
        events: list[StoredEvent],
        *,
        durable: bool = True,
        release_owner: str | None = None,
        fence: str | None = None,
        ride: RecordRide | None = None,
    ) -> None:
        queries: list[Query] = []
        if events:
            queries.append(self.append_query(thread_id, events))
        if checkpoint is not None:
            queries += self._blob_queries(checkpoint)
            queries.append(self._save_query(checkpoint))
        if release_owner is not None:
            queries.append(Query(self._sql["release"], (thread_id, release_owner)))
        if queries:
            # Only the events may go into the fence: the checkpoint's insert reads the
            # thread's last position, which it must read after the fence took the lease row.
            carried = queries if events else None
            fenced, riding = self._fence_and_ride(thread_id, fence, ride, carried)
            queries = fenced + queries
            results = await self._run(
                "saving a checkpoint",
                queries + riding,
                transaction=len(queries) + len(riding) > 1,
                durable=durable,
            )
            self._rode_fenced(ride, results, fenced, riding)

    # -- rides ------------------------------------------------------------------------------

    @property
    def carries_rides(self) -> bool:  # type: ignore[override]
        """Rides travel in this backend's units once its run store is in use (a runner
        passes one only for a run whose record it already stored)."""
        store = self.__dict__.get("_run_store")
        return isinstance(store, SqlRunStore) and store.ready

    def _ride_queries(
        self, ride: RecordRide | None, leased: tuple[str, str] | None = None
    ) -> list[Query]:
        if ride is None:
            return []
        store = self.run_store()
        assert isinstance(store, SqlRunStore)
        return store.ride_queries(ride, leased)

    def _fence_and_ride(
        self,
        thread_id: str,
        fence: str | None,
        ride: RecordRide | None,
        writes: list[Query] | None = None,
    ) -> tuple[list[Query], list[Query]]:
        """A unit's fence (first) and the statements its ride adds (last). A ride that only
        reads is answered by the fence's own row where the dialect allows; where it allows
        a write inside the fence statement, the first of ``writes`` (the unit's journal
        records or events) is taken out of the list and made by the fence."""
        if fence is None:
            return [], self._ride_queries(ride)
        if self._fence_carries and writes and not writes[0].many:
            carrying = self.fence_carrying_query(thread_id, fence, writes[0], ride)
            if carrying is not None:
                del writes[0]
                return [carrying], []
        if ride is not None:
            riding = self.fence_riding_query(thread_id, fence, ride) if self._fence_rides else None
            if riding is not None:
                return [riding], []
            reading = self.fence_reading_query(thread_id, fence, ride)
            if reading is not None:  # a statement less: the version read rides the fence
                if ride.write is None:
                    return [reading], []
                store = self.run_store()
                assert isinstance(store, SqlRunStore)
                write = store.ride_write(ride)
                return [reading], ([] if write is None else [write])
        return [self.fence_query(thread_id, fence)], self._ride_queries(ride)

    def _rode_fenced(
        self,
        ride: RecordRide | None,
        results: Sequence[Any],
        fenced: Sequence[Query],
        riding: Sequence[Query],
    ) -> None:
        """:meth:`_rode` for a unit from :meth:`_fence_and_ride`: a fence that read the
        version (:meth:`fence_reading_query`) answers it in its row, the ride's write (if
        any) by its row count, last."""
        if ride is not None and fenced and fenced[0].fetch == "fence_row":
            written = results[-1] if riding else None
            ride.result = SqlRunStore.ride_result_read_first(ride, results[0][1], written)
        else:
            self._rode(ride, results, len(riding))

    @staticmethod
    def _rode(ride: RecordRide | None, results: Sequence[Any], count: int) -> None:
        if ride is None:
            return
        if count:
            ride.result = SqlRunStore.ride_result(ride, results[-count:])
        else:  # the ride rode the first statement: its row is (that one's answer, the ride's)
            ride.result = SqlRunStore.ride_result(ride, [tuple(results[0][1:])])

    # -- run records ------------------------------------------------------------------------

    # -- thread administration --------------------------------------------------------------

    async def list_threads(self, prefix: str = "", limit: int | None = None) -> list[str]:
        params = (prefix, prefix, _NO_LIMIT if limit is None else limit)
        q = Query(self._sql["threads"], params, fetch="all")
        rows = (await self._run("listing threads", [q], idempotent=True))[0]
        return [str(row[0]) for row in rows]

    async def summarize_threads(self, prefix: str = "") -> list[ThreadSummary]:
        q = Query(self._sql["summaries"], (prefix, prefix), fetch="all")
        rows = (await self._run("listing threads", [q], idempotent=True))[0]
        return [ThreadSummary(str(t), int(n), float(at)) for t, n, at in rows]

    async def list_effects(self, thread_id: str, prefix: str = "") -> list[tuple[str, bytes]]:
        q = Query(self._sql["effects_with"], (thread_id, prefix, prefix), fetch="all")
        rows = (await self._run("reading the effect journal", [q], idempotent=True))[0]
        return sorted((str(key), bytes(value)) for key, value in rows)

    async def forget_effects(self, thread_id: str, keys: list[str]) -> None:
        if not keys:
            return
        q = Query(self._sql["forget"], [(thread_id, key) for key in keys], many=True)
        await self._run("forgetting journal entries", [q], transaction=True, idempotent=True)

    async def delete_thread(self, thread_id: str) -> None:
        kinds = ("drop_checkpoints", "drop_effects", "drop_events", "drop_lease", "drop_blobs")
        queries = [Query(self._sql[kind], (thread_id,)) for kind in kinds]
        await self._run("deleting a thread", queries, transaction=True, idempotent=True)

    async def replace_checkpoints(
        self,
        thread_id: str,
        checkpoints: list[StoredCheckpoint],
        *,
        blobs: Collection[str] | None = None,
    ) -> None:
        rows = [(c.thread_id, i + 1, *_row(c)[1:]) for i, c in enumerate(checkpoints)]
        queries = [Query(self._sql["drop_checkpoints"], (thread_id,))]
        if rows:
            queries.append(Query(self._sql["insert_at"], rows, many=True))
        for c in checkpoints:
            queries += self._blob_queries(c)
        if blobs is not None:
            kept = sorted(set(blobs))
            sql = f"DELETE FROM {self.table('blobs')} WHERE thread_id = ?"
            if kept:
                sql += f" AND hash NOT IN ({', '.join('?' for _ in kept)})"
            queries.append(Query(self.q(sql), (thread_id, *kept)))
        await self._run("pruning checkpoints", queries, transaction=True, idempotent=True)

    # -- a step's own writes, committed with its journal record ---------------------------

    async def transact_effect(
        self,
        thread_id: str,
        key: str,
        fn: Callable[[Any], Any],
        encode: Callable[[Any], bytes],
        *,
        fence: str | None = None,
    ) -> tuple[bytes | None, Any]:
        """A sync driver's form: ``fn`` gets the backend's own DB-API connection inside
        ``BEGIN`` and runs on the thread that holds it (keep it short: the store waits)."""
        if not self._ready:
            await self._setup()
        args = (thread_id, key, fn, encode, fence)
        try:
            if not self.threaded or on_private_loop():
                return self._transact_sync(*args)
            found: tuple[bytes | None, Any] = await self._worker.run(self._transact_sync, *args)
            return found
        except (BackendUnavailableError, LeaseLostError):
            raise
        except Exception as exc:
            if self.lease_error(exc):
                raise lease_lost(thread_id) from exc
            if self.is_unavailable(exc):
                raise self._unavailable("committing a database step", exc) from exc
            raise

    def _transact_sync(
        self,
        thread_id: str,
        key: str,
        fn: Callable[[Any], Any],
        encode: Callable[[Any], bytes],
        fence: str | None,
    ) -> tuple[bytes | None, Any]:
        with self._sync_lock:
            conn = self._connection
            if conn is None:
                conn = self._connection = self.connect()
            cur = conn.cursor()
            try:
                if self.begin_sql:
                    cur.execute(self.begin_sql)
                if fence is not None:
                    _run_query(cur, self.fence_query(thread_id, fence))
                row = _run_query(cur, Query(self._sql["lookup"], (thread_id, key), fetch="one"))
                if row is not None:  # journaled already: the writes committed with it
                    conn.rollback()
                    return bytes(row[0]), None
                result = fn(conn)
                if inspect.isawaitable(result):
                    close = getattr(result, "close", None)
                    if close is not None:
                        close()
                    msg = (
                        f"{type(self).__name__}'s connection is synchronous: give "
                        "ctx.transaction a plain `def fn(conn)`, not an async one."
                    )
                    raise TypeError(msg)
                _run_query(cur, Query(self._sql["record"], (thread_id, key, encode(result))))
                conn.commit()
                return None, result
            except BaseException:
                try:
                    conn.rollback()
                except Exception:  # the connection itself may be gone; the error says why
                    pass
                raise
            finally:
                cur.close()

    def run_store(self) -> RunStore:
        """The run records, in tables beside the checkpoints (see :mod:`.sql_runs`)."""
        store = self.__dict__.get("_run_store")
        if store is None:
            store = self.__dict__["_run_store"] = SqlRunStore(self)
        return store

    # -- lifecycle --------------------------------------------------------------------------

    async def aclose(self) -> None:
        store = self.__dict__.get("_run_store")
        if store is not None:
            store._ready = False
        if self.threaded:
            await self._worker.run(self._close_sync)
            self._worker.stop()
        else:
            self._close_sync()

    def _close_sync(self) -> None:
        with self._sync_lock:
            conn, self._connection = self._connection, None
            if conn is not None:
                conn.close()
            self._ready = False

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "tables": self.table("*"),
            "lease_ttl": self.lease_ttl,
            "threaded": self.threaded,
        }


class _Unit(NamedTuple):
    """One caller's unit of work, as :meth:`SqlBackend.submit` received it."""

    queries: Sequence[Query]
    transaction: bool
    durable: bool


#: A unit's result or its error.
_Outcome = tuple[Any, BaseException | None]
#: Units committed together at most (the wait of the group's first unit stays bounded).
_GROUP_LIMIT = 64
_SAVEPOINT = "tensorsketch_unit"


def _attempt(fn: Callable[..., Any], *args: Any) -> _Outcome:
    try:
        return fn(*args), None
    except Exception as exc:
        return None, exc


def _may_fail_half_done(queries: Sequence[Query]) -> bool:
    """Whether a unit could fail after a write of its own was made: a statement that may
    write followed by another one, or a batch of several rows. A ``SELECT`` writes nothing
    (SQLite, the dialect that groups commits, has no writing function in one), so a unit of
    a reading fence and one write needs no savepoint around it: two statements less."""
    wrote = False
    for q in queries:
        if wrote or (q.many and len(q.params) > 1):
            return True
        wrote = q.sql[:7].upper() != "SELECT "
    return False


def _roll_back(conn: Any) -> None:
    try:
        conn.rollback()
    except Exception:  # the connection itself may be gone; the unit's error says why
        pass


class _DriverThread:
    """The one thread that runs a backend's blocking driver calls, in order.

    Like ``asyncio.to_thread`` but leaner per call (a queue and one callback, no executor
    futures to chain), which matters when a call is made at every superstep. Callers on any
    event loop may use it. (The connection is shared under the backend's lock, so a unit of
    work run elsewhere, on a sync helper's private loop, never overlaps one run here.)
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        #: Calls each event loop made in its current turn, queued when the turn is over.
        self._turns: dict[asyncio.AbstractEventLoop, list[Any]] = {}

    def run(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Schedule ``fn(*args)`` on the worker; await the returned future for its result."""
        return self._put(fn, args, grouped=False)

    def run_grouped(
        self, together: Callable[[list[Any]], list[_Outcome]], item: Any
    ) -> asyncio.Future[Any]:
        """Schedule ``item`` for ``together``, which the worker calls once with this item and
        every other one for it already waiting in the queue (at most :data:`_GROUP_LIMIT`),
        returning one outcome each: calls that arrive together share one call, and a lone
        one waits for nothing."""
        return self._put(together, item, grouped=True)

    def _put(self, fn: Callable[..., Any], args: Any, *, grouped: bool) -> asyncio.Future[Any]:
        # The call reaches the queue when the loop's current turn is over, with every other
        # call made in that turn: a turn that also writes to sockets (an HTTP server's) lets
        # the thread run between its calls, which would otherwise commit them one by one.
        # A call made with nothing else left to run in the turn (asyncio's ready queue is
        # empty: a lone run's unit) goes at once, without waiting a loop iteration for none.
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        item = (fn, args, loop, future, grouped)
        turn = self._turns.get(loop)
        if turn is not None:
            turn.append(item)
        elif getattr(loop, "_ready", True):  # more to run this turn (or a loop without it)
            self._turns[loop] = [item]
            loop.call_soon(self._hand_over, loop)
        else:
            self._queue_all([item])
        return future

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        """Queue the calls ``loop`` made in its last turn, in order, at once."""
        self._queue_all(self._turns.pop(loop))

    def _queue_all(self, calls: list[Any]) -> None:
        """Put ``calls`` in the worker's queue as one item, starting the worker if it is not
        running: one put per turn, not one per call, and one get for the worker to take
        them all (a put wakes the worker only when it is blocked on the queue)."""
        if self._thread is None or not self._thread.is_alive():
            with self._start_lock:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(
                        target=_serve, args=(self._queue,), name=self._name
                    )
                    self._thread.daemon = True
                    self._thread.start()
        self._queue.put(calls)

    def stop(self) -> None:
        """Let the thread finish once the calls queued so far are done (a later call starts
        a new thread with a queue of its own)."""
        with self._start_lock:
            if self._thread is not None:
                self._queue.put(None)
                self._queue = queue.SimpleQueue()
                self._thread = None


def _serve(calls: queue.SimpleQueue[Any]) -> None:
    """The worker's loop: each queue item is the list of calls one loop turn made (``None``:
    stop once the calls before it are done), run in order; a grouped call takes the calls
    for the same function right behind it, from its list and from lists already waiting."""
    pending: collections.deque[Any] = collections.deque()
    stopping = False
    while True:
        if pending:
            item = pending.popleft()
        elif stopping or (turn := calls.get()) is None:
            return
        elif len(turn) == 1:  # a lone unit's turn (the common case when the loop is idle)
            item = turn[0]
        else:
            pending.extend(turn)
            item = pending.popleft()
        fn, args, loop, future, grouped = item
        if not grouped:
            _answer([(loop, future, _attempt(fn, *args))])
            continue
        group = [item]
        while len(group) < _GROUP_LIMIT:
            if not pending:
                if stopping:
                    break
                try:
                    turn = calls.get_nowait()
                except queue.Empty:
                    break
                if turn is None:
                    stopping = True
                    break
                pending.extend(turn)
            waiting = pending[0]
            if not waiting[4] or waiting[0] != fn:
                break
            group.append(pending.popleft())
        try:
            outcomes = fn([g[1] for g in group])
        except Exception as exc:
            outcomes = [(None, exc)] * len(group)
        _answer([(g[2], g[3], o) for g, o in zip(group, outcomes, strict=True)])


def _answer(answers: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], _Outcome]]) -> None:
    """Hand outcomes to their callers: one wake-up per event loop, not one per call."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], _Outcome]]] = {}
    for loop, future, outcome in answers:
        by_loop.setdefault(loop, []).append((future, outcome))
    for loop, settled in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle_all, settled)
        except RuntimeError:  # the caller's loop has closed: nobody is waiting
            pass


def _settle_all(settled: list[tuple[asyncio.Future[Any], _Outcome]]) -> None:
    for future, (result, error) in settled:
        settle(future, result, error)


def _fenced_thread(queries: Sequence[Query]) -> str:
    return str(queries[0].params[0]) if queries and queries[0].params else "?"


def _run_query(cur: Any, q: Query) -> Any:
    if q.many:
        cur.executemany(q.sql, q.params)
    else:
        cur.execute(q.sql, q.params)
    if q.fetch == "fence":
        if cur.rowcount != 1:  # raised inside the unit: it is rolled back whole
            raise lease_lost(str(q.params[0]))
        return None
    if q.fetch == "fence_row":
        # Read to the end, so the statement is finished before the unit goes on.
        rows = cur.fetchall()
        if len(rows) != 1 or rows[0][0] is None:
            raise lease_lost(str(q.params[0]))
        return rows[0]
    if q.fetch == "one":
        return cur.fetchone()
    if q.fetch == "all":
        return cur.fetchall()
    if q.fetch == "rowcount":
        return cur.rowcount
    return None


#: ``LIMIT`` when none was asked for (one statement for both; fits a signed 64-bit int).
_NO_LIMIT = 2**62


def _row(c: StoredCheckpoint) -> tuple[Any, ...]:
    """A checkpoint's column values in the order the insert statements list them."""
    return (c.thread_id, c.checkpoint_id, c.parent_id, c.step, c.created_at, c.payload, c.base_id)


def _checkpoint(thread_id: str, row: Sequence[Any]) -> StoredCheckpoint:
    checkpoint_id, parent_id, step, created_at, payload, base_id = row
    if (  # what the drivers return for intact rows: no conversions (a read takes ~16 rows)
        type(checkpoint_id) is str
        and type(step) is int
        and type(created_at) is float
        and type(payload) is bytes
        and (parent_id is None or type(parent_id) is str)
        and (base_id is None or type(base_id) is str)
    ):
        return StoredCheckpoint(
            thread_id, checkpoint_id, parent_id, step, created_at, payload, base_id
        )
    try:
        return StoredCheckpoint(
            thread_id=thread_id,
            checkpoint_id=str(checkpoint_id),
            parent_id=None if parent_id is None else str(parent_id),
            step=int(step),
            created_at=float(created_at),
            payload=bytes(payload),
            base_id=None if base_id is None else str(base_id),
        )
    except (TypeError, ValueError) as exc:  # e.g. a step of 'not-a-number' (SQLite allows it)
        msg = (
            f"checkpoint row {checkpoint_id!r} of thread {thread_id!r} is corrupt ({exc}); fork "
            "from an earlier checkpoint or start a new thread."
        )
        raise CheckpointDecodeError(msg) from exc
