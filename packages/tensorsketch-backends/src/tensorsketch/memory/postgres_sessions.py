"""``PostgresSessionStore``: session histories in PostgreSQL, over psycopg 3's async pool.

An append is one transaction holding a transaction-scoped advisory lock on its session, so
appends from any number of processes land in one order and a turn is never appended twice.
"""

from __future__ import annotations

from typing import Any

try:
    from psycopg import AsyncConnection, sql
    from psycopg_pool import AsyncConnectionPool
except ImportError as exc:  # pragma: no cover - exercised in a venv without the extra
    msg = (
        "PostgresSessionStore needs psycopg 3 and psycopg_pool; install them with "
        '`pip install "tensorsketch-backends[postgres]"`.'
    )
    raise ImportError(msg, name=exc.name) from exc

from tensorsketch.memory._pg_pool import StorePool
from tensorsketch.memory.sessions import SessionStore

__all__ = ["PostgresSessionStore"]

#: The seed of each session's advisory lock key.
_LOCK_SPACE = 7596102372


class PostgresSessionStore(SessionStore):
    """Session histories in one table (``<schema>.session_messages``), created on first use.

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
        max_size: int = 4,
    ) -> None:
        self._schema = schema
        self._table = sql.Identifier(schema, "session_messages")
        self._pool = StorePool(
            dsn, pool, owner="PostgresSessionStore", max_size=max_size, setup=self._setup
        )

    def __repr__(self) -> str:
        return f"PostgresSessionStore(schema={self._schema!r})"

    async def _setup(self, conn: AsyncConnection[Any]) -> None:
        await conn.execute(
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self._schema))
        )
        await conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} ("
                'session_id text COLLATE "C" NOT NULL, seq bigint NOT NULL, '
                "turn text, message text NOT NULL, PRIMARY KEY (session_id, seq))"
            ).format(self._table)
        )
        await conn.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS session_messages_turn "
                "ON {} (session_id, turn) WHERE turn IS NOT NULL"
            ).format(self._table)
        )

    async def _connection_pool(self) -> AsyncConnectionPool[Any]:
        return await self._pool.get()

    async def aclose(self) -> None:
        await self._pool.aclose()

    async def _append(self, session_id: str, turn: str | None, payloads: list[str]) -> int:
        pool = await self._connection_pool()
        async with pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            await cur.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))", [session_id, _LOCK_SPACE]
            )
            await cur.execute(
                sql.SQL("SELECT count(*), bool_or(turn = %s) FROM {} WHERE session_id = %s").format(
                    self._table
                ),
                [turn, session_id],
            )
            row = await cur.fetchone()
            assert row is not None
            length, seen = int(row[0]), bool(row[1])
            if payloads and not seen:
                await cur.executemany(
                    sql.SQL(
                        "INSERT INTO {} (session_id, seq, turn, message) VALUES (%s, %s, %s, %s)"
                    ).format(self._table),
                    [(session_id, length + i, turn, text) for i, text in enumerate(payloads)],
                )
                length += len(payloads)
            return length

    async def _fetch(self, query: sql.Composable, params: list[Any]) -> list[tuple[Any, ...]]:
        pool = await self._connection_pool()
        async with pool.connection() as conn, conn.cursor() as cur:
            await cur.execute(query, params)
            rows: list[tuple[Any, ...]] = await cur.fetchall()
            return rows

    async def _read(self, session_id: str, last: int | None) -> list[tuple[int, str | None, str]]:
        if last is None:
            rows = await self._fetch(
                sql.SQL(
                    "SELECT seq, turn, message FROM {} WHERE session_id = %s ORDER BY seq"
                ).format(self._table),
                [session_id],
            )
        else:
            rows = await self._fetch(
                sql.SQL(
                    "SELECT seq, turn, message FROM {} WHERE session_id = %s "
                    "ORDER BY seq DESC LIMIT %s"
                ).format(self._table),
                [session_id, last],
            )
            rows.reverse()
        return [(int(seq), turn, message) for seq, turn, message in rows]

    async def _clear(self, session_id: str) -> int:
        pool = await self._connection_pool()
        async with pool.connection() as conn, conn.cursor() as cur:
            await cur.execute(
                sql.SQL("DELETE FROM {} WHERE session_id = %s").format(self._table), [session_id]
            )
            return int(cur.rowcount)

    async def _sessions(self, prefix: str, after: str | None, limit: int) -> list[str]:
        rows = await self._fetch(
            sql.SQL(
                "SELECT DISTINCT session_id FROM {} WHERE left(session_id, %s) = %s "
                "AND (%s::text IS NULL OR session_id > %s) ORDER BY session_id LIMIT %s"
            ).format(self._table),
            [len(prefix), prefix, after, after, limit],
        )
        return [row[0] for row in rows]
