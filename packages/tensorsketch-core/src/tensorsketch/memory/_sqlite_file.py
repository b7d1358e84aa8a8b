"""The SQLite connection a file-backed store shares between its calls.

The memory store and the session store both keep one connection per object (WAL mode for a
file, so readers never wait on the writer), used by one thread at a time, with every call run
off the event loop.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["SqliteFile", "check_table_prefix"]

T = TypeVar("T")


def check_table_prefix(prefix: str) -> str:
    """``prefix`` if it is safe to put before a table's name (letters, digits, ``_``)."""
    if not isinstance(prefix, str) or not prefix.replace("_", "").isalnum():
        msg = f"table_prefix must be letters, digits and underscores, got {prefix!r}."
        raise ValueError(msg)
    return prefix


class SqliteFile:
    """One connection to ``path`` (a file path, a ``sqlite:///path`` URL or ``":memory:"``).

    :param owner: the store's class name, for the error a bad path gets.
    :param busy_timeout: seconds to wait for another process's write lock.
    """

    def __init__(
        self, path: Any, *, owner: str, busy_timeout: float, with_vec: bool = False
    ) -> None:
        if not isinstance(path, str | os.PathLike):
            msg = f"{owner}(path) needs a file path or ':memory:', got {path!r}."
            raise TypeError(msg)
        text = os.fspath(path)
        if text.startswith("sqlite:///"):
            text = text[len("sqlite:///") :] or ":memory:"
        #: The file's path (``":memory:"`` for a private in-memory database).
        self.path = text
        #: Why sqlite-vec is not loaded (``None`` when it is, or was not asked for).
        self.vec_missing: str | None = None
        conn = None
        if with_vec:
            from tensorsketch.memory._sqlite_vec import connect_with_vec  # noqa: PLC0415

            conn, self.vec_missing = connect_with_vec(text, busy_timeout)
        #: Whether the connection has loaded sqlite-vec (``with_vec=True`` and it could).
        self.has_vec = conn is not None
        self.conn: sqlite3.Connection = conn or sqlite3.connect(
            text, timeout=busy_timeout, check_same_thread=False, isolation_level=None
        )
        self._lock = threading.Lock()
        if text != ":memory:":
            self.conn.execute("PRAGMA journal_mode=WAL")

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` on a worker thread, alone on the connection."""

        def locked() -> T:
            with self._lock:
                return fn(self.conn)

        return await asyncio.to_thread(locked)

    async def close(self) -> None:
        await self.run(lambda conn: conn.close())
