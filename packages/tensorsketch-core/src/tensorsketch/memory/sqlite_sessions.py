"""``SqliteSessionStore``: session histories in a SQLite file (or in memory), over ``sqlite3``.

An append is one ``BEGIN IMMEDIATE`` transaction, so several processes sharing the file append
in a total order and a turn is never appended twice.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from tensorsketch.memory._sqlite_file import SqliteFile, check_table_prefix
from tensorsketch.memory.sessions import SessionStore

__all__ = ["SqliteSessionStore"]

T = TypeVar("T")


class SqliteSessionStore(SessionStore):
    """Session histories in one SQLite table (``<table_prefix>session_messages``; several apps
    can share a file).

    :param path: a file path, a ``sqlite:///path`` URL, or ``":memory:"`` (the default).
    :param table_prefix: put before the table's name, to share a database file.
    :param busy_timeout: seconds to wait for another process's write lock.
    """

    name = "sqlite"

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        table_prefix: str = "tensorsketch_",
        busy_timeout: float = 30.0,
    ) -> None:
        self._file = SqliteFile(path, owner="SqliteSessionStore", busy_timeout=busy_timeout)
        self.path = self._file.path
        self._table = f"{check_table_prefix(table_prefix)}session_messages"
        self._conn = self._file.conn
        self._conn.execute(
            f"CREATE TABLE IF NOT EXISTS {self._table} ("
            "session_id TEXT NOT NULL, seq INTEGER NOT NULL, turn TEXT, message TEXT NOT NULL, "
            "PRIMARY KEY (session_id, seq))"
        )
        self._conn.execute(
            f"CREATE INDEX IF NOT EXISTS {self._table}_turn ON {self._table} (session_id, turn) "
            "WHERE turn IS NOT NULL"
        )

    def __repr__(self) -> str:
        return f"SqliteSessionStore({self.path!r})"

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._file.run(fn)

    async def aclose(self) -> None:
        await self._file.close()

    async def _append(self, session_id: str, turn: str | None, payloads: list[str]) -> int:
        def append(conn: sqlite3.Connection) -> int:
            conn.execute("BEGIN IMMEDIATE")
            try:
                (length,) = conn.execute(
                    f"SELECT COUNT(*) FROM {self._table} WHERE session_id = ?", (session_id,)
                ).fetchone()
                seen = (
                    turn is not None
                    and conn.execute(
                        f"SELECT 1 FROM {self._table} WHERE session_id = ? AND turn = ? LIMIT 1",
                        (session_id, turn),
                    ).fetchone()
                )
                if not seen:
                    conn.executemany(
                        f"INSERT INTO {self._table} (session_id, seq, turn, message) "
                        "VALUES (?, ?, ?, ?)",
                        [(session_id, length + i, turn, text) for i, text in enumerate(payloads)],
                    )
                    length += len(payloads)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return int(length)

        return await self._run(append)

    async def _read(self, session_id: str, last: int | None) -> list[tuple[int, str | None, str]]:
        def read(conn: sqlite3.Connection) -> list[tuple[int, str | None, str]]:
            if last is None:
                rows = conn.execute(
                    f"SELECT seq, turn, message FROM {self._table} WHERE session_id = ? "
                    "ORDER BY seq",
                    (session_id,),
                ).fetchall()
            else:
                rows = conn.execute(
                    f"SELECT seq, turn, message FROM {self._table} WHERE session_id = ? "
                    "ORDER BY seq DESC LIMIT ?",
                    (session_id, last),
                ).fetchall()
                rows.reverse()
            return [(int(seq), turn, message) for seq, turn, message in rows]

        return await self._run(read)

    async def _clear(self, session_id: str) -> int:
        def clear(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(f"DELETE FROM {self._table} WHERE session_id = ?", (session_id,))
            return int(cursor.rowcount)

        return await self._run(clear)

    async def _sessions(self, prefix: str, after: str | None, limit: int) -> list[str]:
        def listing(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                f"SELECT DISTINCT session_id FROM {self._table} "
                "WHERE substr(session_id, 1, ?) = ? AND (? IS NULL OR session_id > ?) "
                "ORDER BY session_id LIMIT ?",
                (len(prefix), prefix, after, after, limit),
            ).fetchall()
            return [row[0] for row in rows]

        return await self._run(listing)
