"""``SqliteBackend``: durable runs in one local file, on the standard library's ``sqlite3``.

The file is opened in WAL mode, so readers (``get_state`` from another process) never block
the runner, and every checkpoint is committed before the next superstep starts. The blocking
``sqlite3`` calls run on a worker thread so the event loop is never blocked (``threaded=False``
trades that away for speed in scripts that run one graph at a time).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from tensorsketch.runtime.backends.base import StoredEvent
from tensorsketch.runtime.backends.rides import RecordRide
from tensorsketch.runtime.backends.sql import Query, SqlBackend
from tensorsketch.serializers import Serializer

__all__ = ["SqliteBackend"]

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]

#: Rows a batch of journal records or events writes in one multi-row ``INSERT`` at most (a
#: statement text per size, in the connection's statement cache); a larger batch is an
#: ``executemany``.
_ROWS_PER_INSERT = 16

_UNAVAILABLE = ("unable to open", "disk i/o error", "database is locked", "readonly database")


class SqliteBackend(SqlBackend):
    """Checkpoints, journal, events and leases in a SQLite database.

    :param dsn: a file path (``"runs.db"``), a ``sqlite:///path`` URL, or ``":memory:"`` (the
        default: private to this backend object, gone when it is).
    :param synchronous: SQLite's ``PRAGMA synchronous``. ``"FULL"`` (the default) syncs the
        write-ahead log at every commit, so a committed checkpoint survives a power cut;
        ``"NORMAL"`` survives a crash of the process but not of the machine, and is faster.
    :param busy_timeout: seconds to wait for another process's write to finish.
    :param threaded: ``True`` (the default) runs every statement on the backend's worker
        thread. ``False`` runs them on the event loop's thread: about 60 µs less per commit
        on a 2-core machine, but the loop stands still during each commit (its disk sync
        included) and while waiting out another process's lock — only for a script or job
        that runs one graph at a time.
    """

    name = "sqlite"
    placeholder: ClassVar[str] = "?"
    blob_type: ClassVar[str] = "BLOB"
    float_type: ClassVar[str] = "REAL"
    now_sql: ClassVar[str] = "((julianday('now') - 2440587.5) * 86400.0)"
    begin_sql: ClassVar[str | None] = "BEGIN IMMEDIATE"
    groups_commits: ClassVar[bool] = True
    inlines_nulls: ClassVar[bool] = True
    changes_sql: ClassVar[str | None] = "changes()"

    def __init__(
        self,
        dsn: str | os.PathLike[str] = ":memory:",
        *,
        serializer: Serializer | str | None = None,
        lease_ttl: float = 30.0,
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 30.0,
        table_prefix: str = "tensorsketch_",
        threaded: bool = True,
    ) -> None:
        super().__init__(
            serializer=serializer,
            lease_ttl=lease_ttl,
            table_prefix=table_prefix,
            threaded=threaded,
        )
        path = os.fspath(dsn) if isinstance(dsn, str | os.PathLike) else None
        if not isinstance(path, str):
            msg = f"SqliteBackend(dsn) needs a file path or ':memory:', got {dsn!r}."
            raise TypeError(msg)
        if path.startswith("sqlite:///"):
            path = path[len("sqlite:///") :] or ":memory:"
        elif path.startswith("sqlite://"):
            msg = (
                f"SqliteBackend got {dsn!r}; a SQLite URL has three slashes before a relative "
                "path ('sqlite:///runs.db') and four before an absolute one."
            )
            raise ValueError(msg)
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            msg = f"`synchronous` must be 'OFF', 'NORMAL', 'FULL' or 'EXTRA', got {synchronous!r}."
            raise ValueError(msg)
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        #: Multi-row INSERT texts by (kind, rows), built once each (see `_rows_sql`).
        self._rows_sqls: dict[tuple[str, int], str] = {}
        #: The fence that reads a ride's version (see `fence_reading_query`), or None where
        #: this class's units might not hold the write lock.
        self._fence_reading_sql: str | None = None
        if (self.begin_sql or "").upper().startswith(("BEGIN IMMEDIATE", "BEGIN EXCLUSIVE")):
            leases, runs = self.table("leases"), self.table("runs")
            self._fence_reading_sql = (
                f"SELECT (SELECT 1 FROM {leases} WHERE thread_id = ? AND owner = ? AND "
                f"expires_at >= {self.now_sql}), (SELECT version FROM {runs} WHERE run_id = ?)"
            )

    def connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout,
            isolation_level=None,  # autocommit; multi-statement work opens BEGIN IMMEDIATE
            check_same_thread=False,  # used from worker threads, always under a lock
        )
        if self.path != ":memory:":
            _switch_to_wal(conn, self.busy_timeout)
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        # Statement and savepoint journals (the pages a statement or a grouped unit may have
        # to undo) in memory: on disk, one that outgrows 64 KiB — a group commit's run
        # opening does — goes to a temporary file, two write calls per page from then on.
        conn.execute("PRAGMA temp_store=MEMORY")
        return conn

    def effects_query(self, thread_id: str, effects: Sequence[tuple[str, bytes]]) -> Query:
        # One statement for a unit's few records: one VDBE program run, not one per row, and
        # a statement that fails whole (the group commit then needs no savepoint for it).
        n = len(effects)
        if not 0 < n <= _ROWS_PER_INSERT:
            return super().effects_query(thread_id, effects)
        params = [v for key, value in effects for v in (thread_id, key, value)]
        return Query(self._rows_sqls.get(("effects", n)) or self._rows_sql("effects", n), params)

    def append_query(self, thread_id: str, events: Sequence[StoredEvent]) -> Query:
        n = len(events)
        if not 0 < n <= _ROWS_PER_INSERT:
            return super().append_query(thread_id, events)
        params = [v for e in events for v in (thread_id, e.seq, e.payload)]
        return Query(self._rows_sqls.get(("events", n)) or self._rows_sql("events", n), params)

    def _rows_sql(self, kind: str, rows: int) -> str:
        """The ``INSERT`` of ``rows`` journal records (first write of a key wins) or events."""
        sql = self._rows_sqls.get((kind, rows))
        if sql is None:
            values = ", ".join(["(?, ?, ?)"] * rows)
            if kind == "events":
                sql = (
                    f"INSERT INTO {self.table('events')} (thread_id, seq, payload) VALUES {values}"
                )
            else:
                sql = (
                    f"INSERT INTO {self.table('effects')} (thread_id, key, value) VALUES "
                    f"{values} ON CONFLICT (thread_id, key) DO NOTHING"
                )
            self._rows_sqls[(kind, rows)] = sql
        return sql

    def fence_reading_query(self, thread_id: str, owner: str, ride: RecordRide) -> Query | None:
        # One SELECT checks the lease and reads the record's version: the worker runs one
        # statement, not the fence's UPDATE and a SELECT. Every fenced unit runs inside
        # BEGIN IMMEDIATE, which holds the database's write lock until it commits, so no
        # takeover can slip in between the check and the writes without touching the row.
        # (An UPDATE ... RETURNING form cost more than the two statements it replaced.)
        sql = self._fence_reading_sql
        if sql is None:
            return None  # a subclass's units might not hold the write lock: touch the row
        return Query(sql, (thread_id, owner, ride.run_id), fetch="fence_row")

    def relaxed_statements(self) -> tuple[str, str] | None:
        # NORMAL, not OFF: in WAL mode a NORMAL commit skips the sync, but a WAL checkpoint
        # that runs inside it still syncs the log before copying and the database after, so a
        # relaxed commit can lose only itself to a power cut, never older data.
        if self.synchronous in ("OFF", "NORMAL"):
            return None  # commits already skip the sync
        return "PRAGMA synchronous=NORMAL", f"PRAGMA synchronous={self.synchronous}"

    def is_unavailable(self, exc: BaseException) -> bool:
        if isinstance(exc, sqlite3.OperationalError):
            text = str(exc).lower()
            return any(marker in text for marker in _UNAVAILABLE)
        return super().is_unavailable(exc)

    def unavailable_advice(self, exc: BaseException) -> str:
        """A file, not a server: name it, and what to check for the error SQLite gave."""
        text = str(exc).lower()
        where = f"the SQLite database file {self.path!r}"
        if "locked" in text:
            return (
                f"Another connection kept {where} locked for longer than busy_timeout="
                f"{self.busy_timeout:g}s; find the process holding it, or raise `busy_timeout`."
            )
        if "readonly" in text:
            return f"This process may not write {where}: check its and its directory's permissions."
        if os.path.isdir(self.path):
            return f"{self.path!r} is a directory: pass the path of a file in it (`runs.db`)."
        if "disk i/o" in text:
            return f"Reading or writing {where} failed: check the disk (free space, the mount)."
        return (
            f"Check that {where} can be opened: its directory exists and this process may "
            "create and write files there."
        )

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "path": self.path, "synchronous": self.synchronous}

    def __repr__(self) -> str:
        return f"SqliteBackend({self.path!r})"


def _switch_to_wal(conn: sqlite3.Connection, patience: float) -> None:
    """Turn on WAL, waiting out other connections that hold the lock the switch needs.

    SQLite can report "database is locked" for the switch at once, without consulting the
    busy timeout, when another connection is mid-transaction on a fresh file.
    """
    deadline = time.monotonic() + patience
    delay = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc).lower() or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
