"""``PostgresStore``: a memory store in PostgreSQL, over psycopg 3's async driver and pool.

A batch of writes is one transaction that first takes a transaction-scoped advisory lock per
item (in a fixed order, so two batches never deadlock): conditional writes are exact even for
items that do not exist yet, across any number of processes. Search is an exact cosine scan
over the namespace's vectors (``real[]`` columns); the ``repr`` says so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

try:
    from psycopg import AsyncConnection, sql
    from psycopg.types.json import Jsonb
    from psycopg_pool import AsyncConnectionPool
except ImportError as exc:  # pragma: no cover - exercised in a venv without the extra
    msg = (
        "PostgresStore needs psycopg 3 and psycopg_pool; install them with "
        '`pip install "tensorsketch-backends[postgres]"`.'
    )
    raise ImportError(msg, name=exc.name) from exc

from tensorsketch.memory._pg_pool import StorePool
from tensorsketch.memory.embedder import Embedder
from tensorsketch.memory.errors import MemoryConflictError
from tensorsketch.memory.item import Item, Namespace, namespace_text, prefix_bounds
from tensorsketch.memory.store import Fields, MemoryStore, StoredVector, VectorUpdate, Write

__all__ = ["PostgresStore"]

_COLUMNS = "namespace, key, value, rev, created_at, updated_at, expires_at"


class PostgresStore(MemoryStore):
    """Items in one PostgreSQL table (``<schema>.memory_items``), created on first use.

    :param dsn: a libpq connection string or ``postgresql://`` URL (the store opens a pool).
    :param pool: an open ``psycopg_pool.AsyncConnectionPool`` of yours to use instead.
    :param schema: the schema holding the table (created if missing).
    :param max_size: the most connections the store's own pool opens.
    """

    name = "postgres"

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: AsyncConnectionPool[Any] | None = None,
        schema: str = "public",
        embedder: Embedder | None = None,
        index: Mapping[Namespace, Fields] | None = None,
        default_ttl: float | None = None,
        clock: Callable[[], float] | None = None,
        max_size: int = 4,
    ) -> None:
        kwargs = {} if clock is None else {"clock": clock}
        super().__init__(embedder=embedder, index=index, default_ttl=default_ttl, **kwargs)
        self._schema = schema
        self._table = sql.Identifier(schema, "memory_items")
        self._pool = StorePool(
            dsn, pool, owner="PostgresStore", max_size=max_size, setup=self._setup
        )

    def __repr__(self) -> str:
        return f"PostgresStore(schema={self._schema!r}, search={self.search_mode!r})"

    async def _setup(self, conn: AsyncConnection[Any]) -> None:
        await conn.execute(
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self._schema))
        )
        await conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                'namespace text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL, '
                "value jsonb NOT NULL, rev bigint NOT NULL, "
                "created_at double precision NOT NULL, "
                "updated_at double precision NOT NULL, expires_at double precision, "
                "vector real[], embedder text, PRIMARY KEY (namespace, key))"
            ).format(self._table)
        )

    async def _connection_pool(self) -> AsyncConnectionPool[Any]:
        return await self._pool.get()

    async def aclose(self) -> None:
        await self._pool.aclose()

    async def _fetch(self, query: sql.Composable, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        pool = await self._connection_pool()
        async with pool.connection() as conn, conn.cursor() as cur:
            await cur.execute(query, params)
            rows: list[tuple[Any, ...]] = await cur.fetchall()
            return rows

    async def _read(
        self, addresses: Sequence[tuple[Namespace, str]], now: float
    ) -> list[Item | None]:
        texts = [namespace_text(ns) for ns, _ in addresses]
        keys = [key for _, key in addresses]
        rows = await self._fetch(
            sql.SQL(
                "SELECT {cols} FROM {t} JOIN unnest(%s::text[], %s::text[]) AS a(ns, k) "
                'ON namespace = a.ns COLLATE "C" AND key = a.k COLLATE "C" '
                "WHERE expires_at IS NULL OR expires_at > %s"
            ).format(cols=sql.SQL(_COLUMNS), t=self._table),
            [texts, keys, now],
        )
        found = {(row[0], row[1]): _item(row) for row in rows}
        return [found.get((text, key)) for text, key in zip(texts, keys, strict=True)]

    async def _write(self, writes: Sequence[Write], now: float) -> list[int]:
        if len(writes) == 1 and not writes[0].is_delete:
            return [await self._put_one(writes[0], now)]
        pool = await self._connection_pool()
        addresses = [(namespace_text(w.namespace), w.key) for w in writes]
        async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            await cur.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(a.ns || chr(29) || a.k, 43)) "
                'FROM (SELECT DISTINCT ns COLLATE "C" AS ns, k COLLATE "C" AS k '
                "FROM unnest(%s::text[], %s::text[]) AS u(ns, k) ORDER BY 1, 2) AS a",
                [[a[0] for a in addresses], [a[1] for a in addresses]],
            )
            await cur.execute(
                sql.SQL(
                    "SELECT namespace, key, rev, created_at FROM {t} "
                    "JOIN unnest(%s::text[], %s::text[]) AS a(ns, k) "
                    'ON namespace = a.ns COLLATE "C" AND key = a.k COLLATE "C" '
                    "WHERE expires_at IS NULL OR expires_at > %s"
                ).format(t=self._table),
                [[a[0] for a in addresses], [a[1] for a in addresses], now],
            )
            live: dict[tuple[str, str], tuple[int, float] | None] = {
                (row[0], row[1]): (int(row[2]), float(row[3])) for row in await cur.fetchall()
            }
            for write, address in zip(writes, addresses, strict=True):
                found = live.get(address)
                rev = None if found is None else found[0]
                if write.if_rev is not None and write.if_rev != (rev or 0):
                    raise MemoryConflictError(write.namespace, write.key, write.if_rev, rev)
            results: list[int] = []
            upsert = sql.SQL(
                "INSERT INTO {t} ({cols}, vector, embedder) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value, "
                "rev = EXCLUDED.rev, created_at = EXCLUDED.created_at, "
                "updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at, "
                "vector = EXCLUDED.vector, embedder = EXCLUDED.embedder"
            ).format(t=self._table, cols=sql.SQL(_COLUMNS))
            delete = sql.SQL("DELETE FROM {t} WHERE namespace = %s AND key = %s").format(
                t=self._table
            )
            pending: list[list[Any]] = []  # upserts sent together (pipelined) by executemany
            for write, address in zip(writes, addresses, strict=True):
                found = live.get(address)
                if write.is_delete:
                    if pending:
                        await cur.executemany(upsert, pending)
                        pending = []
                    await cur.execute(delete, address)
                    results.append(int(found is not None))
                    live[address] = None
                    continue
                rev = 1 if found is None else found[0] + 1
                created = now if found is None else found[1]
                vector = write.vector
                pending.append(
                    [
                        *address,
                        Jsonb(write.value),
                        rev,
                        created,
                        now,
                        write.expires_at,
                        None if vector is None else vector.values,
                        None if vector is None else vector.embedder,
                    ]
                )
                results.append(rev)
                live[address] = (rev, created)
            if pending:
                await cur.executemany(upsert, pending)
            return results

    async def _put_one(self, write: Write, now: float) -> int:
        """One put in one statement (one round trip, no explicit transaction): the row lock
        ``ON CONFLICT`` takes orders racing writers, and ``if_rev`` is checked against the row
        as locked. A write that loses its condition changes nothing and returns no row."""
        vector = write.vector
        values = [
            namespace_text(write.namespace),
            write.key,
            Jsonb(write.value),
            now,
            now,
            write.expires_at,
            None if vector is None else vector.values,
            None if vector is None else vector.embedder,
        ]
        live = sql.SQL("(t.expires_at IS NULL OR t.expires_at > EXCLUDED.updated_at)")
        if write.if_rev is None or write.if_rev == 0:
            condition = (
                sql.SQL("") if write.if_rev is None else sql.SQL("WHERE NOT {}").format(live)
            )
            query = sql.SQL(
                "INSERT INTO {t} AS t ({cols}, vector, embedder) "
                "VALUES (%s, %s, %s, 1, %s, %s, %s, %s, %s) "
                "ON CONFLICT (namespace, key) DO UPDATE SET value = EXCLUDED.value, "
                "rev = CASE WHEN {live} THEN t.rev + 1 ELSE 1 END, "
                "created_at = CASE WHEN {live} THEN t.created_at ELSE EXCLUDED.created_at END, "
                "updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at, "
                "vector = EXCLUDED.vector, embedder = EXCLUDED.embedder {condition} RETURNING rev"
            ).format(t=self._table, cols=sql.SQL(_COLUMNS), live=live, condition=condition)
            params: list[Any] = values
        else:
            query = sql.SQL(
                "UPDATE {t} SET value = %s, rev = rev + 1, updated_at = %s, expires_at = %s, "
                "vector = %s, embedder = %s WHERE namespace = %s AND key = %s AND rev = %s "
                "AND (expires_at IS NULL OR expires_at > %s) RETURNING rev"
            ).format(t=self._table)
            params = [values[2], now, *values[5:], values[0], write.key, write.if_rev, now]
        rows = await self._fetch(query, params)
        if rows:
            return int(rows[0][0])
        assert write.if_rev is not None  # an unconditional upsert always returns its row
        (current,) = await self._read([(write.namespace, write.key)], now)
        raise MemoryConflictError(
            write.namespace, write.key, write.if_rev, None if current is None else current.rev
        )

    def _under(self, prefix: Namespace, now: float) -> tuple[sql.Composable, list[Any]]:
        live = sql.SQL("(expires_at IS NULL OR expires_at > %s)")
        bounds = prefix_bounds(prefix)
        if bounds is None:
            return live, [now]
        text, low, high = bounds
        return sql.SQL(
            "(namespace = %s OR (namespace >= %s AND namespace < %s)) AND {live}"
        ).format(live=live), [text, low, high, now]

    async def _scan(
        self, prefix: Namespace, now: float, after: tuple[Namespace, str] | None, limit: int
    ) -> list[Item]:
        where, params = self._under(prefix, now)
        if after is not None:
            where = sql.SQL("{w} AND (namespace, key) > (%s, %s)").format(w=where)
            params += [namespace_text(after[0]), after[1]]
        rows = await self._fetch(
            sql.SQL("SELECT {cols} FROM {t} WHERE {w} ORDER BY namespace, key LIMIT %s").format(
                cols=sql.SQL(_COLUMNS), t=self._table, w=where
            ),
            [*params, limit],
        )
        return [_item(row) for row in rows]

    async def _namespaces(self, prefix: Namespace, now: float) -> list[Namespace]:
        where, params = self._under(prefix, now)
        rows = await self._fetch(
            sql.SQL("SELECT DISTINCT namespace FROM {t} WHERE {w} ORDER BY namespace").format(
                t=self._table, w=where
            ),
            params,
        )
        return [tuple(row[0].split("\x1f")) for row in rows]

    async def _candidates(
        self, prefix: Namespace, now: float
    ) -> list[tuple[Item, StoredVector | None]]:
        where, params = self._under(prefix, now)
        rows = await self._fetch(
            sql.SQL(
                "SELECT {cols}, vector, embedder FROM {t} WHERE {w} ORDER BY namespace, key"
            ).format(cols=sql.SQL(_COLUMNS), t=self._table, w=where),
            params,
        )
        return [
            (_item(row), None if row[7] is None else StoredVector(list(row[7]), row[8]))
            for row in rows
        ]

    async def _set_vectors(self, updates: Sequence[VectorUpdate]) -> int:
        pool = await self._connection_pool()
        done = 0
        async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            for u in updates:
                await cur.execute(
                    sql.SQL(
                        "UPDATE {t} SET vector = %s, embedder = %s "
                        "WHERE namespace = %s AND key = %s AND rev = %s"
                    ).format(t=self._table),
                    [u.vector.values, u.vector.embedder, namespace_text(u.namespace), u.key, u.rev],
                )
                done += cur.rowcount
        return done


def _item(row: Sequence[Any]) -> Item:
    return Item(
        namespace=tuple(row[0].split("\x1f")),
        key=row[1],
        value=row[2],  # psycopg parses jsonb
        rev=int(row[3]),
        created_at=float(row[4]),
        updated_at=float(row[5]),
        expires_at=None if row[6] is None else float(row[6]),
    )
