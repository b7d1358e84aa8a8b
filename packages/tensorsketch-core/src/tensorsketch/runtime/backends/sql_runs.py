"""``SqlRunStore``: the run store in portable SQL, beside a :class:`SqlBackend`'s checkpoints.

Layout (created on first use, versioned as component ``runs`` in the schema-version table)::

    tensorsketch_runs        run_id PK          the encoded record, plus the columns the
                                                queries filter on (status, thread, kind,
                                                owner, lease expiry, wake_at, creation time)
                                                and the compare-and-set ``version``
    tensorsketch_run_keys    key PK             idempotency key -> run id (``failed`` = 1 once
                                                that run failed: the key may then move on)
    tensorsketch_run_labels  (key, value, run)  label index for filtered listing

``wake_at`` is only set on suspended rows, so the due-timer query reads a partial index.
The status index holds only the rows that did not succeed (the bulk of a store, once finished,
leaves it): the status change of a successful run's last write deletes its entry instead of
moving it, and the queries that need the index (the orphan sweep over active runs, a listing
of failed or suspended ones) spell out its predicate, ``status <> 'succeeded'``, so that
planners use it. Listing succeeded runs reads the creation-order index instead (most rows
match). It replaced a full ``runs_by_status`` index, dropped where found.
``waiting_for`` is ``'webhook'`` on a finished row whose webhook is not delivered yet (set by
the write that finishes the run, cleared by the one recording the delivery): the sweep of
undelivered webhooks reads a partial index too.
Every write is one statement or one transaction; leases are the writers' wall clocks.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tensorsketch.errors import CheckpointDecodeError
from tensorsketch.runtime.backends.rides import RecordRide, RideResult
from tensorsketch.runtime.backends.runs import (
    RUN_LAYOUT_VERSION,
    InTurn,
    RunRecord,
    RunStore,
    ThreadHead,
    waiting_column,
)
from tensorsketch.runtime.backends.sql_query import Query

if TYPE_CHECKING:
    from tensorsketch.runtime.backends.sql import SqlBackend

__all__ = ["SqlRunStore"]

_COMPONENT = "runs"
_COLUMNS = (
    "run_id, thread_id, kind, status, waiting_for, wake_at, owner, lease_expires_at, "
    "created_at, idempotency_key, version, record"
)
#: What a run's compare-and-set write sets from its record (``_replace_query``'s first
#: parameters, in this order).
_SET = "status = ?, waiting_for = ?, wake_at = ?, owner = ?, lease_expires_at = ?"
#: Positions in ``_columns`` that may be ``None`` (waiting_for, wake_at, owner, lease expiry,
#: idempotency key): the ones a dialect that inlines nulls writes as ``NULL``.
_NULLABLE = (4, 5, 6, 7, 9)
_CHUNK = 500
#: A row that no runner is working on (one that may be deleted with its thread).
_IDLE = "status NOT IN ('queued', 'running')"
#: The predicate of the partial status index, spelled the same in the queries that use it
#: (SQLite uses a partial index only for a query with the very same term).
_NOT_SUCCEEDED = "status <> 'succeeded'"


def _columns(r: RunRecord, serializer: Any) -> tuple[Any, ...]:
    wake = r.wake_at if r.status == "suspended" else None
    return (
        r.run_id,
        r.thread_id,
        r.kind,
        r.status,
        waiting_column(r),
        wake,
        r.owner,
        r.lease_expires_at,
        r.created_at,
        r.idempotency_key,
        r.version,
        r.encode(serializer),
    )


class SqlRunStore(RunStore):
    """Run records in three tables of the backend's database."""

    reads_thread_head = True  # the checkpoints live in the same database

    def __init__(self, backend: SqlBackend) -> None:
        super().__init__(backend.serializer)
        self.backend = backend
        self._ready = False
        b = backend
        runs, keys, labels = b.table("runs"), b.table("run_keys"), b.table("run_labels")
        self._tables = runs, keys, labels
        marks = ", ".join("?" for _ in _COLUMNS.split(", "))
        self._sql = {
            "insert": f"INSERT INTO {runs} ({_COLUMNS}) VALUES ({marks})",
            "insert_keyed": (
                f"INSERT INTO {runs} ({_COLUMNS}) SELECT {marks} WHERE EXISTS "
                f"(SELECT 1 FROM {keys} WHERE key = ? AND run_id = ?) "
                f"AND NOT EXISTS (SELECT 1 FROM {runs} WHERE run_id = ?)"
            ),
            # Take the key if it is free or its run failed; keep it otherwise. The condition
            # reads only the conflicting row, which PostgreSQL re-checks after waiting for a
            # concurrent insert of the same key (a subquery would see a stale snapshot).
            "take_key": (
                f"INSERT INTO {keys} AS k (key, run_id, failed) VALUES (?, ?, 0) "
                "ON CONFLICT (key) DO UPDATE SET run_id = excluded.run_id, failed = 0 "
                "WHERE k.failed = 1"
            ),
            # The key's run; its record only when it is another run than the one inserted
            # (the caller has that one already: no blob to read and decode).
            "by_key": (
                "SELECT run_id, version, lease_expires_at, CASE WHEN run_id = ? THEN NULL "
                f"ELSE record END FROM {runs} WHERE run_id = "
                f"(SELECT run_id FROM {keys} WHERE key = ?)"
            ),
            "label": (
                f"INSERT INTO {labels} (key, value, run_id) SELECT ?, ?, ? WHERE EXISTS "
                f"(SELECT 1 FROM {runs} WHERE run_id = ?)"
            ),
            "get": f"SELECT version, lease_expires_at, record FROM {runs} WHERE run_id = ?",
            "version_of": f"SELECT version FROM {runs} WHERE run_id = ?",
            "latest_id": (
                f"SELECT checkpoint_id FROM {b.table('checkpoints')} WHERE thread_id = ? "
                "ORDER BY position DESC LIMIT 1"
            ),
            "last_seq": f"SELECT MAX(seq) FROM {b.table('events')} WHERE thread_id = ?",
            "head": (
                f"SELECT run_id FROM {runs} WHERE thread_id = ? AND kind = 'run' AND status "
                "IN ('queued', 'running') ORDER BY created_at, run_id LIMIT 1"
            ),
            "replace": (
                f"UPDATE {runs} SET {_SET}, version = version + 1, record = ? "
                "WHERE run_id = ? AND version = ?"
            ),
            # A ride's write in the unit that opens a thread: only where the lease was taken.
            "replace_leased": (
                f"UPDATE {runs} SET {_SET}, version = version + 1, record = ? "
                "WHERE run_id = ? AND version = ? AND EXISTS (SELECT 1 FROM "
                f"{b.table('leases')} WHERE thread_id = ? AND owner = ?)"
            ),
            # A folded submit's opening (the run's insert in the unit that opens its
            # thread), before the run is stored: an active run of the thread is ahead of it
            # in the queue (so it does not head the queue once stored). Parameters: the
            # thread, the run's created_at twice, the run.
            "ahead": (
                f"EXISTS (SELECT 1 FROM {runs} WHERE thread_id = ? AND kind = 'run' AND "
                "status IN ('queued', 'running') AND (created_at < ? OR (created_at = ? "
                "AND run_id < ?)))"
            ),
            "key_failed": f"UPDATE {keys} SET failed = 1 WHERE key = ? AND run_id = ?",
            "due": (
                f"SELECT version, lease_expires_at, record FROM {runs} "
                "WHERE wake_at IS NOT NULL AND wake_at <= ? ORDER BY wake_at LIMIT ?"
            ),
            "next_wake": f"SELECT MIN(wake_at) FROM {runs} WHERE wake_at IS NOT NULL",
            "undelivered": (
                f"SELECT version, lease_expires_at, record FROM {runs} "
                "WHERE waiting_for = 'webhook' AND status IN ('succeeded', 'failed', "
                "'cancelled') ORDER BY created_at, run_id LIMIT ?"
            ),
            "counts": (
                f"SELECT status, waiting_for, COUNT(*) FROM {runs} WHERE kind = 'run' "
                "GROUP BY status, waiting_for"
            ),
            # Deleting a thread's runs skips active rows by their own status, so a run that
            # starts meanwhile is never removed (PostgreSQL re-checks a row it waited for).
            "drop_labels": (
                f"DELETE FROM {labels} WHERE run_id IN (SELECT run_id FROM {runs} "
                f"WHERE thread_id = ? AND {_IDLE})"
            ),
            "drop_keys": (
                f"DELETE FROM {keys} WHERE run_id IN (SELECT run_id FROM {runs} "
                f"WHERE thread_id = ? AND {_IDLE})"
            ),
            "drop_runs": f"DELETE FROM {runs} WHERE thread_id = ? AND {_IDLE}",
            "drop_run_labels": (
                f"DELETE FROM {labels} WHERE run_id IN (SELECT run_id FROM {runs} "
                f"WHERE run_id = ? AND {_IDLE})"
            ),
            "drop_run_key": (
                f"DELETE FROM {keys} WHERE run_id IN (SELECT run_id FROM {runs} "
                f"WHERE run_id = ? AND {_IDLE})"
            ),
            "drop_run": f"DELETE FROM {runs} WHERE run_id = ? AND {_IDLE}",
            "thread_active": (
                f"SELECT version, lease_expires_at, record FROM {runs} "
                f"WHERE thread_id = ? AND NOT ({_IDLE})"
            ),
            "version_init": b.insert_ignore(
                b.table("schema_version"), ("component", "version"), ("component",)
            ),
            "version": f"SELECT version FROM {b.table('schema_version')} WHERE component = ?",
        }
        # Where a thread stands (its latest checkpoint, its last event) and, for a new run,
        # its queue's head: one statement, one snapshot.
        latest, last = self._sql["latest_id"], self._sql["last_seq"]
        self._sql["thread_at"] = f"SELECT ({latest}), ({last})"
        self._sql["turn_at"] = f"SELECT ({self._sql['head']}), ({latest}), ({last})"
        # A ride's write with its version read in one statement, where the dialect allows
        # a data-modifying WITH: the new version if the compare-and-set won, and the version
        # as the statement found it (the outer read does not see the update).
        read = f"SELECT (SELECT version FROM w), (SELECT version FROM {runs} WHERE run_id = ?)"
        for name in ("replace", "replace_leased"):
            self._sql[f"{name}_read"] = f"WITH w AS ({self._sql[name]} RETURNING version) {read}"
        # A new run's insert with the ``turn_at`` read in one statement where the dialect
        # allows: the read does not see the insert, so the queue's head is taken over the
        # stored active runs and the inserted row together.
        active = "kind = 'run' AND status IN ('queued', 'running')"
        head = (
            f"SELECT run_id FROM (SELECT run_id, created_at FROM {runs} WHERE thread_id = ? "
            f"AND {active} UNION ALL SELECT run_id, created_at FROM i WHERE {active}) AS h "
            "ORDER BY created_at, run_id LIMIT 1"
        )
        # The insert as a WITH clause whose row the queue's head above reads as ``i``.
        self._sql["insert_with"] = (
            f"WITH i AS ({self._sql['insert']} RETURNING run_id, created_at, kind, status)"
        )
        # A folded submit's run stored where the opening took the lease: after the lease's
        # statement, the run heads its queue and this owner holds the lease (parameters: the
        # columns, the thread, the owner, then as ``ahead``).
        self._sql["insert_leased"] = (
            f"INSERT INTO {runs} ({_COLUMNS}) SELECT {marks} WHERE EXISTS (SELECT 1 FROM "
            f"{b.table('leases')} WHERE thread_id = ? AND owner = ?) AND NOT {self._sql['ahead']}"
        )
        self._sql["insert_turn"] = (
            f"{self._sql['insert_with']} SELECT ({head}), ({latest}), ({last})"
        )
        self._sql = {k: b.q(v) for k, v in self._sql.items()}
        #: Statement texts with ``NULL`` written in for the ``None`` values of a write, by
        #: (statement, which values are ``None``): see :attr:`SqlBackend.inlines_nulls`.
        self._null_sqls: dict[tuple[str, tuple[bool, ...]], str] = {}
        #: The insert's texts likewise, with the positions of the values they still bind.
        self._null_inserts: dict[tuple[bool, ...], tuple[str, operator.itemgetter[Any]]] = {}
        self._inlines_nulls = bool(getattr(b, "inlines_nulls", False))

    def _ddl(self) -> list[str]:
        runs, keys, labels = self._tables
        b = self.backend
        flt, blob = b.float_type, b.blob_type
        prefix = b.table_prefix
        return [
            f"CREATE TABLE IF NOT EXISTS {b.table('schema_version')} ("
            "component VARCHAR(64) PRIMARY KEY, version INTEGER NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS {runs} (run_id TEXT PRIMARY KEY, "
            "thread_id TEXT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL, "
            f"waiting_for TEXT, wake_at {flt}, owner TEXT, lease_expires_at {flt}, "
            f"created_at {flt} NOT NULL, idempotency_key TEXT, version BIGINT NOT NULL, "
            f"record {blob} NOT NULL)",
            f"CREATE INDEX IF NOT EXISTS {prefix}runs_not_succeeded ON {runs} "
            f"(status, created_at, run_id) WHERE {_NOT_SUCCEEDED}",
            # Its predecessor indexed every row; a store made with it loses it here (a build
            # that still creates it puts it back, and the next start drops it again).
            f"DROP INDEX IF EXISTS {b.table('runs_by_status')}",
            f"CREATE INDEX IF NOT EXISTS {prefix}runs_by_thread ON {runs} "
            "(thread_id, created_at, run_id)",
            f"CREATE INDEX IF NOT EXISTS {prefix}runs_by_created ON {runs} (created_at, run_id)",
            f"CREATE INDEX IF NOT EXISTS {prefix}runs_due ON {runs} (wake_at) "
            "WHERE wake_at IS NOT NULL",
            f"CREATE INDEX IF NOT EXISTS {prefix}runs_undelivered ON {runs} "
            "(created_at, run_id) WHERE waiting_for = 'webhook'",
            f"CREATE TABLE IF NOT EXISTS {keys} (key TEXT PRIMARY KEY, run_id TEXT NOT NULL, "
            "failed INTEGER NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS {labels} (key TEXT NOT NULL, value TEXT NOT NULL, "
            "run_id TEXT NOT NULL, PRIMARY KEY (key, value, run_id))",
            *b.dialect_ddl(_COMPONENT),
        ]

    async def _ensure(self) -> None:
        if self._ready:
            return
        b = self.backend
        queries = [Query(s) for s in (*b.schema_prologue(), *self._ddl())]
        queries.append(Query(self._sql["version_init"], (_COMPONENT, RUN_LAYOUT_VERSION)))
        queries.append(Query(self._sql["version"], (_COMPONENT,), fetch="one"))
        results = await b.run_queries("creating the run tables", queries, transaction=True)
        found = int(results[-1][0])
        if found != RUN_LAYOUT_VERSION:
            msg = (
                f"the {b.name} run tables ({b.table_prefix}runs*) use layout version {found}, "
                f"which this release does not understand (it writes {RUN_LAYOUT_VERSION}); "
                "use the matching tensorsketch release or another database / `table_prefix=`."
            )
            raise CheckpointDecodeError(msg)
        self._ready = True

    async def _go(self, what: str, queries: list[Query], **options: Any) -> list[Any]:
        await self._ensure()
        results: list[Any] = await self.backend.run_queries(what, queries, **options)
        return results

    def _decode(self, row: Sequence[Any] | None) -> RunRecord | None:
        if row is None:
            return None
        version, lease, record = row
        return RunRecord.decode(self.serializer, record, version, lease)

    async def _insert(self, record: RunRecord) -> tuple[RunRecord, bool]:
        cols = _columns(record, self.serializer)
        key = record.idempotency_key
        labels = [(k, v, record.run_id, record.run_id) for k, v in record.labels.items()]
        if key is None:
            queries = [self._insert_query(cols)]
            if labels:
                queries.append(Query(self._sql["label"], labels, many=True))
            await self._go("creating a run", queries, transaction=len(queries) > 1)
            return record, True
        queries = [
            Query(self._sql["take_key"], (key, record.run_id)),
            Query(self._sql["insert_keyed"], (*cols, key, record.run_id, record.run_id)),
        ]
        if labels:
            queries.append(Query(self._sql["label"], labels, many=True))
        queries.append(Query(self._sql["by_key"], (record.run_id, key), fetch="one"))
        results = await self._go("creating a run", queries, transaction=True)
        return self._keyed(record, key, results[-1])

    def _keyed(
        self, record: RunRecord, key: str, row: Sequence[Any] | None
    ) -> tuple[RunRecord, bool]:
        """``(stored, created)`` from the ``by_key`` row read after inserting ``record``."""
        if row is None:  # pragma: no cover - the key row always names a stored run
            msg = f"idempotency key {key!r} names a run that is not stored; the store is corrupt."
            raise CheckpointDecodeError(msg)
        if row[0] == record.run_id:
            return record, True
        stored = self._decode(row[1:])
        assert stored is not None
        return stored, False

    @staticmethod
    def _head(latest: Any, seq: Any) -> ThreadHead:
        """A thread's head from the ``thread_at`` / ``turn_at`` columns."""
        return (None if latest is None else str(latest)), (None if seq is None else int(seq))

    async def _replace_reading_head(
        self, record: RunRecord, *, durable: bool = True
    ) -> tuple[RunRecord | None, ThreadHead]:
        # The head is read first, in the same unit: where the thread stood as the run began.
        stored = record.replace(version=record.version + 1)
        queries = [
            Query(self._sql["thread_at"], (record.thread_id, record.thread_id), fetch="one"),
            self._replace_query(record, version=stored.version),
        ]
        results = await self._go("updating a run", queries, transaction=True, durable=durable)
        return (stored if results[-1] == 1 else None), self._head(*results[0])

    async def _insert_in_turn(self, record: RunRecord) -> InTurn:
        # The insert, the read of the thread's queue head and of where the thread stands
        # share one round trip.
        cols = _columns(record, self.serializer)
        key = record.idempotency_key
        labels = [(k, v, record.run_id, record.run_id) for k, v in record.labels.items()]
        queries: list[Query] = []
        if key is None and not labels and self.backend.writes_in_with:
            turn = Query(self._sql["insert_turn"], (*cols, *(record.thread_id,) * 3), fetch="one")
            head, latest, last = (await self._go("creating a run", [turn]))[0]
            return InTurn(record, True, head, self._head(latest, last))
        if key is None:
            queries.append(self._insert_query(cols))
        else:
            queries.append(Query(self._sql["take_key"], (key, record.run_id)))
            queries.append(
                Query(self._sql["insert_keyed"], (*cols, key, record.run_id, record.run_id))
            )
        if labels:
            queries.append(Query(self._sql["label"], labels, many=True))
        if key is not None:
            queries.append(Query(self._sql["by_key"], (record.run_id, key), fetch="one"))
        queries.append(Query(self._sql["turn_at"], (record.thread_id,) * 3, fetch="one"))
        results = await self._go("creating a run", queries, transaction=True)
        head, latest, last = results[-1]
        thread_head = self._head(latest, last)
        if key is None:
            return InTurn(record, True, head, thread_head)
        stored, created = self._keyed(record, key, results[-2])
        return InTurn(stored, created, head, thread_head if created else None)

    async def get(self, run_id: str) -> RunRecord | None:
        q = Query(self._sql["get"], (run_id,), fetch="one")
        return self._decode((await self._go("reading a run", [q], idempotent=True))[0])

    async def _list(
        self,
        statuses: tuple[str, ...] | None,
        thread_id: str | None,
        labels: dict[str, str],
        kind: str | None,
        after: tuple[float, str] | None,
        limit: int,
    ) -> list[RunRecord]:
        runs, _, label_table = self._tables
        where: list[str] = []
        params: list[Any] = []
        if statuses is not None:
            where.append(f"status IN ({', '.join('?' for _ in statuses)})")
            params += statuses
            if "succeeded" not in statuses:  # the status index's own term
                where.append(_NOT_SUCCEEDED)
        if thread_id is not None:
            where.append("thread_id = ?")
            params.append(thread_id)
        if kind is not None:
            where.append("kind = ?")
            params.append(kind)
        for key, value in labels.items():
            where.append(
                f"run_id IN (SELECT run_id FROM {label_table} WHERE key = ? AND value = ?)"
            )
            params += (key, value)
        if after is not None:
            where.append("(created_at > ? OR (created_at = ? AND run_id > ?))")
            params += (after[0], after[0], after[1])
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        sql = (
            f"SELECT version, lease_expires_at, record FROM {runs} {clause}"
            "ORDER BY created_at, run_id LIMIT ?"
        )
        q = Query(self.backend.q(sql), (*params, limit), fetch="all", binary=True)
        rows = (await self._go("listing runs", [q], idempotent=True))[0]
        return [r for r in map(self._decode, rows) if r is not None]

    @property
    def ready(self) -> bool:
        """Its tables are known to exist (a ride's statements need them)."""
        return self._ready

    # -- rides: record writes in the checkpoints' own units (tensorsketch.runtime.backends.rides)

    def ride_queries(self, ride: RecordRide, leased: tuple[str, str] | None = None) -> list[Query]:
        """The statements that carry ``ride`` in a unit of the backend's: the
        compare-and-set write (if any; with ``leased``, only where that thread's lease is
        that owner's), then the version read."""
        queries = []
        write = ride.write  # its updated_at is the rider's (the stored copy must match)
        if write is not None:
            name = "replace" if leased is None else "replace_leased"
            q = self._replace_query(write, version=write.version + 1, name=name)
            params = q.params if leased is None else (*q.params, *leased)
            if self.backend.writes_in_with:
                sql = self._sql[f"{name}_read"]
                return [Query(sql, (*params, ride.run_id), fetch="one")]
            queries.append(Query(q.sql, params, fetch="rowcount"))
        queries.append(Query(self._sql["version_of"], (ride.run_id,), fetch="one"))
        return queries

    def folded_insert(self, ride: RecordRide) -> tuple[tuple[Any, ...], RunRecord | None]:
        """What a folded submit's opening inserts where it takes the thread's lease: the
        ride's ``write`` as it is stored (its version bumped past the insert's) — the run
        stored ``running`` at once, one row written and one record encoded — or, without a
        write that applies to the insert, the insert itself. Its columns (as ``insert``
        takes them) and that stored write (``None``: no write rode)."""
        insert, write = ride.insert, ride.write
        assert insert is not None
        if write is None or write.version != insert.version:
            return _columns(insert, self.serializer), None
        stored = write.replace(version=write.version + 1)
        return _columns(stored, self.serializer), stored

    def _insert_query(self, cols: tuple[Any, ...]) -> Query:
        """The plain insert of a record's ``cols``, its ``None`` columns written as ``NULL``
        where the dialect inlines nulls."""
        if not self._inlines_nulls:
            return Query(self._sql["insert"], cols)
        # The positions of _NULLABLE, spelled out (no generator to run per insert).
        nulls = (
            cols[4] is None,
            cols[5] is None,
            cols[6] is None,
            cols[7] is None,
            cols[9] is None,
        )
        if True not in nulls:
            return Query(self._sql["insert"], cols)
        found = self._null_inserts.get(nulls)
        if found is None:
            dropped = {i for i, null in zip(_NULLABLE, nulls, strict=True) if null}
            marks = ", ".join("NULL" if i in dropped else "?" for i in range(len(cols)))
            sql = self.backend.q(f"INSERT INTO {self._tables[0]} ({_COLUMNS}) VALUES ({marks})")
            kept = operator.itemgetter(*(i for i in range(len(cols)) if i not in dropped))
            found = self._null_inserts[nulls] = (sql, kept)
        sql, kept = found
        return Query(sql, kept(cols))

    @property
    def ahead_sql(self) -> str:
        """The condition that an active run is ahead of a run not stored yet in its thread's
        queue (parameters: the thread, the run's ``created_at`` twice, the run)."""
        return self._sql["ahead"]

    @property
    def insert_sql(self) -> tuple[str, str]:
        """The plain insert of a new run (parameters: its columns), and the one that stores
        it only where its opening took the lease (see :meth:`folded_insert`)."""
        return self._sql["insert"], self._sql["insert_leased"]

    def ride_write(self, ride: RecordRide) -> Query | None:
        """The compare-and-set write ``ride`` carries (``None``: it only reads), for a
        dialect that folds it into another statement of the unit (a ``WITH`` clause)."""
        write = ride.write
        return None if write is None else self._replace_query(write, version=write.version + 1)

    @staticmethod
    def ride_result(ride: RecordRide, results: Sequence[Any]) -> RideResult:
        """What the unit saw, from the results of :meth:`ride_queries`' statements."""
        row = results[-1]
        write = ride.write
        if write is not None and len(results) == 1:  # the write and the read in one
            won = row is not None and row[0] is not None
            stored = write.replace(version=int(row[0])) if won else None
            version = int(row[0]) if won else (None if row[1] is None else int(row[1]))
            return RideResult(version, stored)
        version = None if row is None else int(row[0])
        stored = None
        if write is not None and results[0] == 1:
            stored = write.replace(version=write.version + 1)
        return RideResult(version, stored)

    @staticmethod
    def ride_result_read_first(ride: RecordRide, found: Any, written: int | None) -> RideResult:
        """What the unit saw, from a version read made before the ride's write in the same
        unit (``found``; ``None``: no record) and that write's row count (``written``;
        ``None``: the ride only reads). Nothing else writes the record inside the unit, so
        a lost write leaves the version the read found."""
        write = ride.write
        if write is not None and written == 1:
            stored = write.replace(version=write.version + 1)
            return RideResult(stored.version, stored)
        return RideResult(None if found is None else int(found))

    async def _replace_relaxed(self, record: RunRecord) -> RunRecord | None:
        return await self._replace(record, durable=False)

    def _replace_query(self, record: RunRecord, *, version: int, name: str = "replace") -> Query:
        """The compare-and-set write of ``record`` (stored under ``version``) as statement
        ``name`` (``replace``, or a form with more conditions, whose parameters the caller
        appends); its ``None`` values written as ``NULL`` where the dialect inlines nulls."""
        status, owner, lease = record.status, record.owner, record.lease_expires_at
        waiting = waiting_column(record)
        wake = record.wake_at if status == "suspended" else None
        values: tuple[Any, ...] = (status, waiting, wake, owner, lease)
        tail = (record.encode(self.serializer, version=version), record.run_id, record.version)
        sql = self._sql[name]
        if self._inlines_nulls:
            nulls = (False, waiting is None, wake is None, owner is None, lease is None)
            if True in nulls:
                sql = self._null_sqls.get((name, nulls)) or self._nulls_set(name, nulls)
                values = tuple([v for v in values if v is not None])
        return Query(sql, (*values, *tail), fetch="rowcount")

    def _nulls_set(self, name: str, nulls: tuple[bool, ...]) -> str:
        """Statement ``name`` with ``NULL`` in its ``SET`` clause where ``nulls`` says."""
        sets = [part.split(" = ")[0] for part in _SET.split(", ")]
        clause = ", ".join(
            f"{c} = NULL" if null else f"{c} = ?" for c, null in zip(sets, nulls, strict=True)
        )
        sql = self._sql[name].replace(self.backend.q(_SET), self.backend.q(clause), 1)
        self._null_sqls[(name, nulls)] = sql
        return sql

    async def _replace(self, record: RunRecord, durable: bool = True) -> RunRecord | None:
        stored = record.replace(version=record.version + 1)
        queries = [self._replace_query(record, version=stored.version)]
        if stored.status == "failed" and stored.idempotency_key is not None:
            key_params = (stored.idempotency_key, stored.run_id)
            queries.append(Query(self._sql["key_failed"], key_params))
        # A relaxed write is a unit of its own (on PostgreSQL, a pipeline that can switch
        # the commit's wait for the disk off).
        results = await self._go(
            "updating a run", queries, transaction=len(queries) > 1 or not durable, durable=durable
        )
        return stored if results[0] == 1 else None

    async def due(self, before: float, limit: int = 100) -> list[RunRecord]:
        q = Query(self._sql["due"], (before, limit), fetch="all")
        rows = (await self._go("reading due timers", [q], idempotent=True))[0]
        return [r for r in map(self._decode, rows) if r is not None]

    async def undelivered(self, limit: int = 100) -> list[RunRecord]:
        q = Query(self._sql["undelivered"], (limit,), fetch="all")
        rows = (await self._go("reading undelivered webhooks", [q], idempotent=True))[0]
        return [r for r in map(self._decode, rows) if r is not None and r.webhook_pending]

    async def next_wake(self) -> float | None:
        q = Query(self._sql["next_wake"], (), fetch="one")
        row = (await self._go("reading due timers", [q], idempotent=True))[0]
        return None if row is None or row[0] is None else float(row[0])

    async def renew(self, owner: str, run_ids: Sequence[str], lease_expires_at: float) -> set[str]:
        runs = self._tables[0]
        kept: set[str] = set()
        ids = list(run_ids)
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            marks = ", ".join("?" for _ in chunk)
            where = f"owner = ? AND status IN ('queued', 'running') AND run_id IN ({marks})"
            update = self.backend.q(
                f"UPDATE {runs} SET lease_expires_at = ?, version = version + 1 WHERE {where}"
            )
            select = self.backend.q(f"SELECT run_id FROM {runs} WHERE {where}")
            queries = [
                Query(update, (lease_expires_at, owner, *chunk)),
                Query(select, (owner, *chunk), fetch="all"),
            ]
            results = await self._go("renewing run leases", queries, transaction=True)
            kept.update(str(row[0]) for row in results[-1])
        return kept

    async def _delete(self, record: RunRecord) -> bool:
        run_id = record.run_id
        queries = [
            Query(self._sql["drop_run_labels"], (run_id,)),
            Query(self._sql["drop_run_key"], (run_id,)),
            Query(self._sql["drop_run"], (run_id,), fetch="rowcount"),
        ]
        results = await self._go("deleting a run", queries, transaction=True)
        return int(results[2]) > 0

    async def _delete_thread(self, thread_id: str) -> tuple[int, list[RunRecord]]:
        queries = [
            Query(self._sql["drop_labels"], (thread_id,)),
            Query(self._sql["drop_keys"], (thread_id,)),
            Query(self._sql["drop_runs"], (thread_id,), fetch="rowcount"),
            Query(self._sql["thread_active"], (thread_id,), fetch="all"),
        ]
        results = await self._go("deleting a thread's runs", queries, transaction=True)
        kept = [r for r in map(self._decode, results[3]) if r is not None]
        return int(results[2]), kept

    async def counts(self) -> dict[str, int]:
        q = Query(self._sql["counts"], (), fetch="all")
        rows = (await self._go("counting runs", [q], idempotent=True))[0]
        counts: dict[str, int] = {}
        for status, waiting_for, n in rows:
            counts[str(status)] = counts.get(str(status), 0) + int(n)
            if status == "suspended" and waiting_for:
                counts[f"suspended:{waiting_for}"] = int(n) + counts.get(
                    f"suspended:{waiting_for}", 0
                )
        return counts
