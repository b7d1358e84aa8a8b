"""The connection pool a PostgreSQL memory or session store reads and writes through: the
caller's own, or one the store opens on first use (autocommit), with the store's tables
created once, under an advisory lock, before the first query."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from tensorsketch.errors import BackendUnavailableError

__all__ = ["StorePool"]

#: Serializes the stores' ``CREATE ... IF NOT EXISTS`` across processes.
_SETUP_LOCK = 7596102371


class StorePool:
    """Exactly one of ``dsn`` (the store opens and owns a pool) or ``pool`` (the caller's).

    :param owner: the store's class name, for errors.
    :param setup: creates the store's schema and tables on a connection in a transaction.
    """

    def __init__(
        self,
        dsn: str | None,
        pool: AsyncConnectionPool[Any] | None,
        *,
        owner: str,
        max_size: int,
        setup: Callable[[AsyncConnection[Any]], Awaitable[None]],
    ) -> None:
        if (dsn is None) == (pool is None):
            msg = f"{owner} needs exactly one of dsn='postgresql://...' or pool=<an open pool>."
            raise ValueError(msg)
        self._dsn = dsn
        self._pool = pool
        self._own = pool is None
        self._owner = owner
        self._max_size = max_size
        self._setup = setup
        self._ready = False
        self._opening = asyncio.Lock()

    async def get(self) -> AsyncConnectionPool[Any]:
        """The pool, opened and the tables created on the first call."""
        async with self._opening:
            if self._pool is None:
                pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                    self._dsn or "",
                    min_size=1,
                    max_size=self._max_size,
                    open=False,
                    kwargs={"autocommit": True},
                )
                try:
                    await pool.open(wait=True, timeout=10)
                except Exception as exc:
                    msg = f"{self._owner} cannot reach PostgreSQL: {exc}"
                    raise BackendUnavailableError(msg) from exc
                self._pool = pool
            if not self._ready:
                async with self._pool.connection() as conn, conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", [_SETUP_LOCK])
                    await self._setup(conn)
                self._ready = True
            return self._pool

    async def aclose(self) -> None:
        """Close the pool if the store opened it (a caller's pool stays open)."""
        if self._own and self._pool is not None:
            await self._pool.close()
            self._pool = None
