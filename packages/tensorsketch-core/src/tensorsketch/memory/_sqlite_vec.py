"""sqlite-vec for ``SqliteStore``: a connection that has loaded the extension, and the ``vec0``
table that indexes one embedder's vectors.

The standard library's ``sqlite3`` is often built without ``enable_load_extension`` (as on
python.org's and many distributions' builds), so the store also tries ``pysqlite3`` (its
wheel bundles a SQLite that can load extensions); both come with the ``sqlite-vec`` extra.
Nothing here is imported unless a store with an embedder asks for the index.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Sequence
from typing import Any

__all__ = ["VecTable", "connect_with_vec", "item_id", "vec_unavailable"]

_INSTALL = 'pip install "tensorsketch-core[sqlite-vec]"'
#: vec0 answers at most this many neighbours per query.
MAX_K = 4096


def _drivers() -> list[Any]:
    """The DB-API modules to try, the standard library's first."""
    import sqlite3  # noqa: PLC0415 - the stdlib, named beside its alternative

    found: list[Any] = [sqlite3]
    try:
        found.append(importlib.import_module("pysqlite3.dbapi2"))
    except ImportError:
        pass
    return found


def connect_with_vec(path: str, timeout: float) -> tuple[Any, str | None]:
    """A connection to ``path`` with sqlite-vec loaded, or ``(None, why not)``."""
    try:
        sqlite_vec = importlib.import_module("sqlite_vec")
    except ImportError:
        return None, f"the sqlite-vec package is not installed ({_INSTALL})"
    tried = []
    for driver in _drivers():
        if not hasattr(driver.Connection, "enable_load_extension"):
            tried.append(f"{driver.__name__} cannot load extensions")
            continue
        conn = driver.connect(path, timeout=timeout, check_same_thread=False, isolation_level=None)
        try:
            conn.enable_load_extension(True)
            sqlite_vec.load(conn)
            conn.enable_load_extension(False)
        except Exception as exc:  # a driver that refuses: try the next one
            conn.close()
            tried.append(f"{driver.__name__}: {exc}")
            continue
        return conn, None
    if len(tried) == 1:
        tried.append(f"pysqlite3 is not installed ({_INSTALL})")
    return None, "; ".join(tried)


def vec_unavailable() -> str | None:
    """Why this Python cannot use sqlite-vec (``None``: it can)."""
    conn, why = connect_with_vec(":memory:", 1.0)
    if conn is not None:
        conn.close()
    return why


def item_id(namespace_text: str, key: str) -> str:
    """The vec0 row id of an item (unique per (namespace, key))."""
    return json.dumps([namespace_text, key], separators=(",", ":"), ensure_ascii=False)


class VecTable:
    """The vec0 table holding one embedder's vectors, by item (cosine distance).

    Each embedder gets its own table (named by a digest of its name), since a table has one
    dimension and search compares only the current embedder's vectors.
    """

    def __init__(self, items_table: str, embedder: str, dimension: int) -> None:
        digest = hashlib.sha256(embedder.encode()).hexdigest()[:12]
        self.name = f"{items_table}_vec_{digest}"
        self.items_table = items_table
        self.embedder = embedder
        self.dimension = dimension

    def create(self, conn: Any) -> None:
        """Create the table if needed, and fill it from the items' vectors when its row
        count says another connection wrote without it (a file written before the index, or
        by a process that could not load sqlite-vec)."""
        conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {self.name} USING vec0("
            "item TEXT PRIMARY KEY, namespace TEXT, "
            f"embedding float[{self.dimension}] distance_metric=cosine)"
        )
        conn.execute("BEGIN IMMEDIATE")
        try:
            indexed = (
                f"FROM {self.items_table} WHERE embedder = ? AND length(vector) = ? "
                "AND vector != zeroblob(length(vector))"
            )
            wanted = (self.embedder, 4 * self.dimension)
            (have,) = conn.execute(f"SELECT count(*) FROM {self.name}").fetchone()
            (want,) = conn.execute(f"SELECT count(*) {indexed}", wanted).fetchone()
            if have != want:
                conn.execute(f"DELETE FROM {self.name}")
                rows = conn.execute(f"SELECT namespace, key, vector {indexed}", wanted)
                conn.executemany(
                    f"INSERT INTO {self.name} (item, namespace, embedding) VALUES (?, ?, ?)",
                    ((item_id(ns, key), ns, blob) for ns, key, blob in rows.fetchall()),
                )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def put(
        self, conn: Any, address: tuple[str, str], blob: bytes | None, embedder: str | None
    ) -> None:
        """Keep the item's row in step with its write (inside the write's transaction): its
        vector when the current embedder made it, else no row (all zeros: no direction)."""
        ident = item_id(*address)
        conn.execute(f"DELETE FROM {self.name} WHERE item = ?", (ident,))
        if blob is not None and embedder == self.embedder and any(blob):
            conn.execute(
                f"INSERT INTO {self.name} (item, namespace, embedding) VALUES (?, ?, ?)",
                (ident, address[0], blob),
            )

    def nearest(
        self, conn: Any, query: bytes, k: int, bounds: Sequence[str] | None
    ) -> list[tuple[str, str, float]]:
        """Up to ``k`` (namespace text, key, cosine similarity), nearest first, among the
        namespaces from ``bounds[0]`` (inclusive) to ``bounds[1]`` (exclusive)."""
        sql = f"SELECT item, distance FROM {self.name} WHERE embedding MATCH ? AND k = ?"
        params: list[Any] = [query, k]
        if bounds is not None:
            sql += " AND namespace >= ? AND namespace < ?"
            params += list(bounds)
        out = []
        for ident, distance in conn.execute(sql, params).fetchall():
            namespace, key = json.loads(ident)
            out.append((namespace, key, 1.0 - float(distance)))
        return out
