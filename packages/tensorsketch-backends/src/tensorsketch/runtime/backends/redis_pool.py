"""``QuickPool``: redis-py's blocking connection pool, without its toll where nobody waits.

A ``RedisBackend`` checks a connection out of its pool and back for every command. redis-py's
``BlockingConnectionPool`` does both under an ``asyncio.Condition`` with a timeout scope and
pool observability around them: about 120 Python calls per command, a quarter of what a run's
command costs the client. When no caller waits for a connection (nobody holds or awaits the
condition), taking an idle one and giving it back need none of that: nothing else runs
between the check and the move on the event loop. Anything else (no idle connection, a
waiter, a connection to reconnect, maintenance) takes redis-py's own path, so waiting for a
connection, its timeout and the health check of a checked-out connection stay redis-py's.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

__all__ = ["QuickPool"]

#: This redis-py has what the quick path uses (else every checkout takes redis-py's path).
_QUICK = hasattr(aioredis.BlockingConnectionPool, "ensure_connection")


class QuickPool(aioredis.BlockingConnectionPool):
    """A ``BlockingConnectionPool`` whose uncontended checkout and return skip the lock."""

    def _uncontended(self) -> bool:
        condition = self._condition
        # A missing attribute (another redis-py) reads as contended: redis-py's path.
        waiting = getattr(condition, "_waiters", True)
        busy = condition.locked() or waiting or getattr(self, "_in_maintenance", False)
        return _QUICK and not busy

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs or not self._available_connections or not self._uncontended():
            return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        connection = self._available_connections.pop()
        self._in_use_connections.add(connection)
        try:
            await self.ensure_connection(connection)  # connected, and nothing left unread
        except BaseException:
            await self.release(connection)
            raise
        return connection

    async def release(self, connection: Any) -> None:
        reconnect = getattr(connection, "should_reconnect", None)
        if not self._uncontended() or reconnect is None or reconnect():
            await super().release(connection)
            return
        self._in_use_connections.remove(connection)
        self._available_connections.append(connection)
