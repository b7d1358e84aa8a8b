"""``SqlCache``: node results in a table of a SQL backend's database (SQLite or PostgreSQL),
through the backend's own connection, dialect and error handling."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tensorsketch.cache.store import NodeCache
from tensorsketch.runtime.backends.sql_query import Query

if TYPE_CHECKING:
    from tensorsketch.runtime.backends.sql import SqlBackend

__all__ = ["SqlCache", "SqliteCache"]


class SqlCache(NodeCache):
    """Entries in ``<table_prefix>node_cache`` of ``backend``'s database (created on first
    use); ``PostgresBackend`` and ``SqliteBackend`` both work, and the cache may share the
    database (and the backend object) of a graph's checkpoints."""

    def __init__(self, backend: SqlBackend) -> None:
        self.backend = backend
        self.serializer = backend.serializer
        self._ready = False
        b = backend
        table = b.table("node_cache")
        self._sql = {
            "create": (
                f"CREATE TABLE IF NOT EXISTS {table} (namespace TEXT NOT NULL, key TEXT NOT "
                f"NULL, value {b.blob_type} NOT NULL, expires_at {b.float_type}, "
                "PRIMARY KEY (namespace, key))"
            ),
            "get": (
                f"SELECT value FROM {table} WHERE namespace = ? AND key = ? "
                "AND (expires_at IS NULL OR expires_at > ?)"
            ),
            "set": (
                f"INSERT INTO {table} (namespace, key, value, expires_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, "
                "expires_at = excluded.expires_at"
            ),
            "clear_all": f"DELETE FROM {table}",
            "clear_namespace": f"DELETE FROM {table} WHERE namespace = ?",
            "clear_key": f"DELETE FROM {table} WHERE namespace = ? AND key = ?",
        }
        self._sql = {k: b.q(v) for k, v in self._sql.items()}

    async def _ensure(self) -> None:
        if not self._ready:
            # The backend's own setup first (a PostgreSQL schema it creates, its tables).
            await self.backend.list_threads(limit=1)
            create = [Query(self._sql["create"])]
            await self.backend.run_queries("creating the node cache table", create)
            self._ready = True

    async def get(self, namespace: str, key: str) -> bytes | None:
        await self._ensure()
        (row,) = await self.backend.run_queries(
            "reading the node cache",
            [Query(self._sql["get"], (namespace, key, time.time()), fetch="one", binary=True)],
            durable=False,
            idempotent=True,
        )
        return bytes(row[0]) if row is not None else None

    async def set(self, namespace: str, key: str, value: bytes, ttl: float | None) -> None:
        await self._ensure()
        expires = time.time() + ttl if ttl is not None else None
        await self.backend.run_queries(
            "writing the node cache",
            [Query(self._sql["set"], (namespace, key, value, expires))],
            durable=False,
            idempotent=True,
        )

    async def clear(self, namespace: str | None = None, keys: Iterable[str] | None = None) -> int:
        if keys is not None and namespace is None:
            msg = "clear(keys=...) needs the namespace the keys are in."
            raise ValueError(msg)
        await self._ensure()
        if namespace is None:
            queries = [Query(self._sql["clear_all"], fetch="rowcount")]
        elif keys is None:
            queries = [Query(self._sql["clear_namespace"], (namespace,), fetch="rowcount")]
        else:
            queries = [
                Query(self._sql["clear_key"], (namespace, key), fetch="rowcount") for key in keys
            ]
        counts = await self.backend.run_queries("clearing the node cache", queries)
        return sum(int(c or 0) for c in counts)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.backend!r})"


class SqliteCache(SqlCache):
    """A :class:`SqlCache` on a SQLite file of its own (``":memory:"``: this process only).

    :param path: a file path or a ``sqlite:///path`` URL.
    """

    def __init__(self, path: str | os.PathLike[str] = ":memory:") -> None:
        from tensorsketch.runtime.backends.sqlite import SqliteBackend  # noqa: PLC0415 - sqlite3 on use

        super().__init__(SqliteBackend(path))
