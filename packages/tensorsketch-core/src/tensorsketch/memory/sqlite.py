"""``SqliteStore``: a memory store in one local SQLite file, on the standard library's
``sqlite3``: several processes can share the file, and a batch of writes is one transaction.

Vectors are stored as float32 blobs beside the items. Search ranks them with sqlite-vec's
``vec0`` table when the connection can load that extension (the ``sqlite-vec`` extra), else
with an exact cosine scan over the namespace's vectors; ``search_mode`` and the repr say which.
"""

from __future__ import annotations

import array
import json
import os
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal, TypeVar

from tensorsketch.memory._sqlite_file import SqliteFile, check_table_prefix
from tensorsketch.memory._sqlite_vec import MAX_K, VecTable, vec_unavailable
from tensorsketch.memory.embedder import Embedder, cosine
from tensorsketch.memory.errors import MemoryConflictError
from tensorsketch.memory.item import Item, Namespace, namespace_text, prefix_bounds
from tensorsketch.memory.store import Fields, MemoryStore, StoredVector, VectorUpdate, Write

__all__ = ["SqliteStore", "VectorIndex", "sqlite_vec_unavailable"]

#: ``SqliteStore(vector_index=...)``: ``"auto"`` (vec0 when sqlite-vec loads, else exact),
#: ``"vec0"`` (sqlite-vec or an error saying why not) or ``"exact"`` (always scan).
VectorIndex = Literal["auto", "vec0", "exact"]


def sqlite_vec_unavailable() -> str | None:
    """Why a ``SqliteStore`` here cannot use sqlite-vec's index (``None``: it can)."""
    return vec_unavailable()


T = TypeVar("T")

_COLUMNS = "namespace, key, value, rev, created_at, updated_at, expires_at"


class SqliteStore(MemoryStore):
    """Items in a SQLite table (WAL mode), written under ``BEGIN IMMEDIATE`` so conditional
    writes from several processes are exact.

    :param path: a file path, a ``sqlite:///path`` URL, or ``":memory:"`` (the default:
        private to this object).
    :param table_prefix: the prefix of the table's name (several apps can share a file).
    :param busy_timeout: seconds to wait for another process's write to finish.
    :param vector_index: how ``search`` ranks by a query: ``"auto"`` (the default) uses
        sqlite-vec's ``vec0`` table when the connection can load the extension (``pip install
        "tensorsketch-core[sqlite-vec]"``) and the exact scan otherwise; ``"vec0"`` insists
        (``RuntimeError`` saying why it cannot load); ``"exact"`` always scans. A search
        with ``filter=`` always scans. Every process writing the file should open it the
        same way: one without the index leaves it behind, and it is rebuilt when a store
        with it next opens the file and finds it short.
    """

    name = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        embedder: Embedder | None = None,
        index: Mapping[Namespace, Fields] | None = None,
        default_ttl: float | None = None,
        clock: Callable[[], float] | None = None,
        table_prefix: str = "tensorsketch_",
        busy_timeout: float = 30.0,
        vector_index: VectorIndex = "auto",
    ) -> None:
        kwargs = {} if clock is None else {"clock": clock}
        super().__init__(embedder=embedder, index=index, default_ttl=default_ttl, **kwargs)
        if vector_index not in ("auto", "vec0", "exact"):
            msg = f"vector_index= must be 'auto', 'vec0' or 'exact', got {vector_index!r}."
            raise ValueError(msg)
        if vector_index == "vec0" and embedder is None:
            msg = "vector_index='vec0' indexes an embedder's vectors: pass embedder= too."
            raise ValueError(msg)
        with_vec = embedder is not None and vector_index != "exact"
        self._file = SqliteFile(
            path, owner="SqliteStore", busy_timeout=busy_timeout, with_vec=with_vec
        )
        if vector_index == "vec0" and not self._file.has_vec:
            self._file.conn.close()
            msg = (
                f"SqliteStore(vector_index='vec0'): sqlite-vec cannot load here: "
                f"{self._file.vec_missing}. Use vector_index='auto' to fall back to the "
                "exact scan."
            )
            raise RuntimeError(msg)
        self.path = self._file.path
        self._table = f"{check_table_prefix(table_prefix)}memory_items"
        self._conn = self._file.conn
        self._conn.execute(
            f"CREATE TABLE IF NOT EXISTS {self._table} ("
            "namespace TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, "
            "rev INTEGER NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL, "
            "expires_at REAL, vector BLOB, embedder TEXT, PRIMARY KEY (namespace, key))"
        )
        #: The vec0 table of the current embedder's vectors (``None``: exact scan).
        self._vec: VecTable | None = None
        if self._file.has_vec and embedder is not None:
            self._vec = VecTable(self._table, embedder.name, embedder.dimension)
            self._vec.create(self._conn)
            self.search_mode = "vec0"

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r}, search={self.search_mode!r})"

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._file.run(fn)

    async def aclose(self) -> None:
        await self._file.close()

    async def _read(
        self, addresses: Sequence[tuple[Namespace, str]], now: float
    ) -> list[Item | None]:
        def read(conn: sqlite3.Connection) -> list[Item | None]:
            found: dict[tuple[str, str], Item] = {}
            wanted = [(namespace_text(ns), key) for ns, key in addresses]
            for start in range(0, len(wanted), 400):
                chunk = wanted[start : start + 400]
                where = " OR ".join("(namespace = ? AND key = ?)" for _ in chunk)
                rows = conn.execute(
                    f"SELECT {_COLUMNS} FROM {self._table} WHERE ({where}) "
                    "AND (expires_at IS NULL OR expires_at > ?)",
                    [*(part for address in chunk for part in address), now],
                ).fetchall()
                for row in rows:
                    found[(row[0], row[1])] = _item(row)
            return [found.get(address) for address in wanted]

        return await self._run(read)

    async def _write(self, writes: Sequence[Write], now: float) -> list[int]:
        def write_all(conn: sqlite3.Connection) -> list[int]:
            conn.execute("BEGIN IMMEDIATE")
            try:
                results = self._apply(conn, writes, now)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return results

        return await self._run(write_all)

    def _apply(self, conn: sqlite3.Connection, writes: Sequence[Write], now: float) -> list[int]:
        current: list[tuple[int, float] | None] = []
        for write in writes:
            row = conn.execute(
                f"SELECT rev, created_at FROM {self._table} WHERE namespace = ? AND key = ? "
                "AND (expires_at IS NULL OR expires_at > ?)",
                (namespace_text(write.namespace), write.key, now),
            ).fetchone()
            current.append(None if row is None else (int(row[0]), float(row[1])))
        for write, found in zip(writes, current, strict=True):
            rev = None if found is None else found[0]
            if write.if_rev is not None and write.if_rev != (rev or 0):
                raise MemoryConflictError(write.namespace, write.key, write.if_rev, rev)
        results: list[int] = []
        revs: dict[tuple[str, str], tuple[int, float] | None] = {}
        for write, found in zip(writes, current, strict=True):
            address = (namespace_text(write.namespace), write.key)
            found = revs.get(address, found)
            if write.is_delete:
                conn.execute(f"DELETE FROM {self._table} WHERE namespace = ? AND key = ?", address)
                if self._vec is not None:
                    self._vec.put(conn, address, None, None)
                results.append(int(found is not None))
                revs[address] = None
                continue
            rev = 1 if found is None else found[0] + 1
            created = now if found is None else found[1]
            vector = write.vector
            blob = None if vector is None else array.array("f", vector.values).tobytes()
            conn.execute(
                f"INSERT OR REPLACE INTO {self._table} ({_COLUMNS}, vector, embedder) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    *address,
                    json.dumps(write.value, separators=(",", ":")),
                    rev,
                    created,
                    now,
                    write.expires_at,
                    blob,
                    None if vector is None else vector.embedder,
                ),
            )
            if self._vec is not None:
                self._vec.put(conn, address, blob, None if vector is None else vector.embedder)
            results.append(rev)
            revs[address] = (rev, created)
        return results

    async def _scan(
        self, prefix: Namespace, now: float, after: tuple[Namespace, str] | None, limit: int
    ) -> list[Item]:
        where, params = _under(prefix, now)
        if after is not None:
            where += " AND (namespace > ? OR (namespace = ? AND key > ?))"
            text = namespace_text(after[0])
            params += [text, text, after[1]]

        def scan(conn: sqlite3.Connection) -> list[Item]:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM {self._table} WHERE {where} "
                "ORDER BY namespace, key LIMIT ?",
                [*params, limit],
            ).fetchall()
            return [_item(row) for row in rows]

        return await self._run(scan)

    async def _namespaces(self, prefix: Namespace, now: float) -> list[Namespace]:
        where, params = _under(prefix, now)

        def namespaces(conn: sqlite3.Connection) -> list[Namespace]:
            rows = conn.execute(
                f"SELECT DISTINCT namespace FROM {self._table} WHERE {where} ORDER BY namespace",
                params,
            ).fetchall()
            return [tuple(row[0].split("\x1f")) for row in rows]

        return await self._run(namespaces)

    async def _candidates(
        self, prefix: Namespace, now: float
    ) -> list[tuple[Item, StoredVector | None]]:
        where, params = _under(prefix, now)

        def candidates(conn: sqlite3.Connection) -> list[tuple[Item, StoredVector | None]]:
            rows = conn.execute(
                f"SELECT {_COLUMNS}, vector, embedder FROM {self._table} WHERE {where} "
                "ORDER BY namespace, key",
                params,
            ).fetchall()
            return [(_item(row), _vector(row[7], row[8])) for row in rows]

        return await self._run(candidates)

    async def _set_vectors(self, updates: Sequence[VectorUpdate]) -> int:
        def update_all(conn: sqlite3.Connection) -> int:
            done = 0
            conn.execute("BEGIN IMMEDIATE")
            try:
                for u in updates:
                    blob = array.array("f", u.vector.values).tobytes()
                    address = (namespace_text(u.namespace), u.key)
                    changed = conn.execute(
                        f"UPDATE {self._table} SET vector = ?, embedder = ? "
                        "WHERE namespace = ? AND key = ? AND rev = ?",
                        (blob, u.vector.embedder, *address, u.rev),
                    ).rowcount
                    if changed and self._vec is not None:
                        self._vec.put(conn, address, blob, u.vector.embedder)
                    done += changed
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return done

        return await self._run(update_all)

    async def _nearest(
        self, prefix: Namespace, query: Sequence[float], limit: int, now: float
    ) -> list[Item] | None:
        vec = self._vec
        if vec is None or not any(query):
            return None
        blob = array.array("f", query).tobytes()
        bounds = prefix_bounds(prefix)
        # [the prefix itself, past its last descendant): what the exact scan's range covers
        span = None if bounds is None else (bounds[0], bounds[2])

        def nearest(conn: sqlite3.Connection) -> list[Item] | None:
            k = min(MAX_K, max(4 * limit, 32))
            while True:
                near = vec.nearest(conn, blob, k, span)
                hits = [
                    (ns, key, score)
                    for ns, key, score in near
                    if bounds is None or ns == bounds[0] or ns.startswith(bounds[1])
                ]
                live = self._live(conn, hits, query, now)
                exhausted = len(near) < k
                # the k-th neighbour's score: items tied with it may lie past k, and the
                # exact scan breaks ties by address, so a tie there needs a bigger k
                floor = near[-1][2] if near else 0.0
                # (vec0 scores in float32: a margin keeps its rounding from hiding a tie)
                clear = (
                    (live[limit - 1].score or 0.0) > floor + 1e-5 if live[limit - 1 :] else False
                )
                if len(live) >= limit and (exhausted or clear):
                    return live[:limit]
                if exhausted or k == MAX_K:
                    # the index ran out (or capped) before ``limit`` live items: items with
                    # no direction (all-zero vectors) rank last in the exact scan — use it
                    return None
                k = min(MAX_K, k * 4)

        return await self._run(nearest)

    def _live(
        self,
        conn: sqlite3.Connection,
        hits: list[tuple[str, str, float]],
        query: Sequence[float],
        now: float,
    ) -> list[Item]:
        """The live items among ``hits`` scored as the exact scan scores them (the cosine of
        their stored vectors, in double precision), best first, ties by address."""
        if not hits:
            return []
        found: dict[tuple[str, str], Item] = {}
        for start in range(0, len(hits), 400):
            chunk = hits[start : start + 400]
            where = " OR ".join("(namespace = ? AND key = ?)" for _ in chunk)
            rows = conn.execute(
                f"SELECT {_COLUMNS}, vector, embedder FROM {self._table} WHERE ({where}) "
                "AND (expires_at IS NULL OR expires_at > ?)",
                [*(part for ns, key, _ in chunk for part in (ns, key)), now],
            ).fetchall()
            for row in rows:
                vector = _vector(row[7], row[8])
                if vector is not None:
                    score = cosine(query, vector.values)
                    found[(row[0], row[1])] = replace(_item(row), score=score)
        scored = [found[(ns, key)] for ns, key, _ in hits if (ns, key) in found]
        return sorted(scored, key=lambda i: (-(i.score or 0.0), i.namespace, i.key))


def _under(prefix: Namespace, now: float) -> tuple[str, list[Any]]:
    live = "(expires_at IS NULL OR expires_at > ?)"
    bounds = prefix_bounds(prefix)
    if bounds is None:
        return live, [now]
    text, low, high = bounds
    return f"(namespace = ? OR (namespace >= ? AND namespace < ?)) AND {live}", [
        text,
        low,
        high,
        now,
    ]


def _item(row: Sequence[Any]) -> Item:
    return Item(
        namespace=tuple(row[0].split("\x1f")),
        key=row[1],
        value=json.loads(row[2]),
        rev=int(row[3]),
        created_at=float(row[4]),
        updated_at=float(row[5]),
        expires_at=None if row[6] is None else float(row[6]),
    )


def _vector(blob: bytes | None, embedder: str | None) -> StoredVector | None:
    if blob is None or embedder is None:
        return None
    values = array.array("f")
    values.frombytes(blob)
    return StoredVector(values.tolist(), embedder)
