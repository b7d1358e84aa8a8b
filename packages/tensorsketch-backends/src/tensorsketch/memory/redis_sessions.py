"""``RedisSessionStore``: session histories in Redis, over ``redis.asyncio``.

A session is a list of messages plus a hash of the turns it holds; a lexical sorted set (all
scores 0) lists the sessions. An append is one Lua script: atomic, one round trip, and a turn
already present appends nothing.
"""

from __future__ import annotations

import json
from typing import Any

try:
    import redis.asyncio as aioredis
    from redis import exceptions as redis_errors
except ImportError as exc:  # pragma: no cover - exercised in a venv without the extra
    msg = (
        "RedisSessionStore needs redis-py; install it with "
        '`pip install "tensorsketch-backends[redis]"`.'
    )
    raise ImportError(msg, name=exc.name) from exc

from tensorsketch.errors import BackendUnavailableError
from tensorsketch.memory.sessions import SessionStore

__all__ = ["RedisSessionStore"]

# KEYS: the session's list, its turns hash, the sessions zset. ARGV: session id, turn ("" for
# none), then the entries (JSON [turn, message]). Returns the session's length.
_APPEND = """
if #ARGV < 3 then return redis.call('LLEN', KEYS[1]) end
if ARGV[2] ~= '' and redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then
  return redis.call('LLEN', KEYS[1])
end
local length = 0
for i = 3, #ARGV do length = redis.call('RPUSH', KEYS[1], ARGV[i]) end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[2], ARGV[2], 1) end
redis.call('ZADD', KEYS[3], 0, ARGV[1])
return length
"""

# KEYS: the session's list, its turns hash, the sessions zset. ARGV: session id.
_CLEAR = """
local n = redis.call('LLEN', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
return n
"""


class RedisSessionStore(SessionStore):
    """Session histories as Redis lists under ``prefix``.

    :param url: a ``redis://`` URL (the store opens its own client).
    :param client: a ``redis.asyncio.Redis`` of yours to use instead.
    :param prefix: every key the store writes starts with it.
    """

    name = "redis"

    def __init__(
        self,
        url: str | None = None,
        *,
        client: aioredis.Redis | None = None,
        prefix: str = "tensorsketch",
    ) -> None:
        if (url is None) == (client is None):
            msg = (
                "RedisSessionStore needs exactly one of url='redis://...' or "
                "client=<a redis client>."
            )
            raise ValueError(msg)
        self._own_client = client is None
        self._client: aioredis.Redis = client or aioredis.Redis.from_url(url or "")
        self._prefix = prefix
        self._index_key = f"{prefix}:session:index"
        self._append_script = self._client.register_script(_APPEND)
        self._clear_script = self._client.register_script(_CLEAR)

    def __repr__(self) -> str:
        return f"RedisSessionStore(prefix={self._prefix!r})"

    def _keys(self, session_id: str) -> list[str]:
        return [
            f"{self._prefix}:session:log:{session_id}",
            f"{self._prefix}:session:turns:{session_id}",
            self._index_key,
        ]

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def _call(self, coro: Any) -> Any:
        try:
            return await coro
        except (redis_errors.ConnectionError, redis_errors.TimeoutError) as exc:
            msg = f"RedisSessionStore cannot reach Redis: {exc}"
            raise BackendUnavailableError(msg) from exc

    async def _append(self, session_id: str, turn: str | None, payloads: list[str]) -> int:
        entries = [json.dumps([turn, text], separators=(",", ":")) for text in payloads]
        args = [session_id, turn or "", *entries]
        return int(await self._call(self._append_script(keys=self._keys(session_id), args=args)))

    async def _read(self, session_id: str, last: int | None) -> list[tuple[int, str | None, str]]:
        key = self._keys(session_id)[0]
        if last is None:
            raw = await self._call(self._client.lrange(key, 0, -1))
            start = 0
        else:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.llen(key)
                pipe.lrange(key, -last, -1)
                length, raw = await self._call(pipe.execute())
            start = max(0, int(length) - last)
        rows: list[tuple[int, str | None, str]] = []
        for offset, blob in enumerate(raw):
            turn, text = json.loads(blob)
            rows.append((start + offset, turn, text))
        return rows

    async def _clear(self, session_id: str) -> int:
        return int(
            await self._call(self._clear_script(keys=self._keys(session_id), args=[session_id]))
        )

    async def _sessions(self, prefix: str, after: str | None, limit: int) -> list[str]:
        low = f"({after}" if after is not None and after >= prefix else f"[{prefix}"
        high = f"[{prefix}\U0010ffff" if prefix else "+"
        raw = await self._call(
            self._client.zrange(self._index_key, low, high, bylex=True, offset=0, num=limit)
        )
        ids = [m.decode() if isinstance(m, bytes) else str(m) for m in raw]
        return [s for s in ids if s.startswith(prefix)][:limit]
