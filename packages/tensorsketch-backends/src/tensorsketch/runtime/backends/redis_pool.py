"""``QuickPool``: redis-py's blocking connection pool, without its toll where nobody waits.

A ``RedisBackend`` checks a connection out of its pool and back for every command. redis-py's
``BlockingConnectionPool`` does both under an ``asyncio.Condition`` with a timeout scope and
pool observability around them: about 120 Python calls per command, a quarter of what a run's
command costs the client. When no caller waits for a connection (nobody holds or awaits the
condition), taking an idle one and giving it back need none of that: nothing else runs
between the check and the move on the event loop. Anything else (no idle connection, a
waiter, a connection to reconnect, maintenance) takes redis-py's own path, so waiting for a
connection, its timeout and the health check of a checked-out connection stay redis-py's.

Its connections send the same way: redis-py bounds every write by ``socket_timeout`` with
``asyncio.wait_for``, a task, a timer and two turns of the event loop per command (a quarter
of a command again), though a write the socket takes at once has nothing to wait for. Only
what the socket did not take waits, bounded by redis-py's own path.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

__all__ = ["QuickPool"]

#: This redis-py has what the quick path uses (else every checkout takes redis-py's path).
_QUICK = hasattr(aioredis.BlockingConnectionPool, "ensure_connection")


class _QuickSend:
    """Mixed into a connection class: a command the socket takes at once is sent without
    redis-py's ``wait_for`` (see the module docstring)."""

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        writer = getattr(self, "_writer", None)
        send = super().send_packed_command  # type: ignore[misc]
        if (
            writer is None
            or getattr(self, "_reader", None) is None  # not connected
            or getattr(self, "health_check_interval", True)  # a health check may be due
            or not isinstance(command, (bytes, list))
            or writer.transport.is_closing()
            or writer.transport.get_write_buffer_size()  # an earlier write still waits
        ):
            await send(command, check_health)
            return
        try:
            writer.writelines([command] if isinstance(command, bytes) else command)
        except BaseException:
            await self.disconnect(nowait=True)  # type: ignore[attr-defined]
            raise
        if writer.transport.get_write_buffer_size():
            # The socket did not take it all: the rest drains through redis-py's path,
            # bounded by its timeout and with its errors (it writes nothing more).
            await send([], False)


_QUICK_CLASSES: dict[type[Any], type[Any]] = {}


def _quick_sending(connection_class: type[Any]) -> type[Any]:
    """``connection_class`` with :class:`_QuickSend` mixed in (one class each)."""
    if not issubclass(connection_class, aioredis.Connection | aioredis.UnixDomainSocketConnection):
        return connection_class  # a class of somebody else's: left as it is
    quick = _QUICK_CLASSES.get(connection_class)
    if quick is None:
        name = f"Quick{connection_class.__name__}"
        quick = _QUICK_CLASSES[connection_class] = type(name, (_QuickSend, connection_class), {})
    return quick


class QuickPool(aioredis.BlockingConnectionPool):
    """A ``BlockingConnectionPool`` whose uncontended checkout and return skip the lock, and
    whose connections send without a task where the socket takes the command at once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["connection_class"] = _quick_sending(
            kwargs.get("connection_class", aioredis.Connection)
        )
        super().__init__(*args, **kwargs)

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
