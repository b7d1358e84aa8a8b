"""``RedisStore``: a memory store in Redis, over ``redis.asyncio``.

Each item is a hash; one sorted set (all scores 0) orders every address lexically, which gives
paging and namespace-prefix ranges with ``ZRANGE ... BYLEX``. A batch of writes is one Lua
script, so it is atomic and one round trip; a batch of reads is one pipeline. Redis has no
vector index here: search is an exact cosine scan over the namespace's vectors, which the
``repr`` says.
"""

from __future__ import annotations

import array
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

try:
    import redis.asyncio as aioredis
    from redis import exceptions as redis_errors
except ImportError as exc:  # pragma: no cover - exercised in a venv without the extra
    msg = 'RedisStore needs redis-py; install it with `pip install "tensorsketch-backends[redis]"`.'
    raise ImportError(msg, name=exc.name) from exc

from tensorsketch.errors import BackendUnavailableError
from tensorsketch.memory.embedder import Embedder
from tensorsketch.memory.errors import MemoryConflictError
from tensorsketch.memory.item import Item, Namespace, namespace_text, prefix_bounds
from tensorsketch.memory.store import Fields, MemoryStore, StoredVector, VectorUpdate, Write

__all__ = ["RedisStore"]

#: Between a namespace and its key in an address (below the namespace separator, so an
#: address sorts as its (namespace, key) pair does).
_KEY_SEPARATOR = "\x1d"

# KEYS: the index zset, then one hash per write. ARGV: now, then per write: op ("put" /
# "del"), if_rev ("" for none), value, expires_at ("" for none), vector, embedder, member.
# Checks every condition first and writes only if all hold; returns {"ok", rev...} or
# {"conflict", i, current-rev-or-""}.
_WRITE = """
local now = tonumber(ARGV[1])
local n = #KEYS - 1
local function live_rev(key)
  local got = redis.call('HMGET', key, 'rev', 'expires_at', 'created_at')
  if not got[1] then return nil, nil end
  if got[2] and got[2] ~= '' and tonumber(got[2]) <= now then return nil, nil end
  return tonumber(got[1]), got[3]
end
for i = 1, n do
  local base = 1 + (i - 1) * 7
  local want = ARGV[base + 2]
  if want ~= '' then
    local rev = live_rev(KEYS[i + 1])
    if tonumber(want) ~= (rev or 0) then
      return {'conflict', tostring(i), rev and tostring(rev) or ''}
    end
  end
end
local out = {'ok'}
for i = 1, n do
  local base = 1 + (i - 1) * 7
  local key = KEYS[i + 1]
  local rev, created = live_rev(key)
  if ARGV[base + 1] == 'del' then
    redis.call('DEL', key)
    redis.call('ZREM', KEYS[1], ARGV[base + 7])
    out[#out + 1] = rev and '1' or '0'
  else
    local new_rev = (rev or 0) + 1
    redis.call('DEL', key)
    redis.call('HSET', key, 'value', ARGV[base + 3], 'rev', new_rev,
      'created_at', rev and created or ARGV[1], 'updated_at', ARGV[1],
      'expires_at', ARGV[base + 4], 'vector', ARGV[base + 5], 'embedder', ARGV[base + 6])
    redis.call('ZADD', KEYS[1], 0, ARGV[base + 7])
    out[#out + 1] = tostring(new_rev)
  end
end
return out
"""

# KEYS: one hash per update. ARGV: per update: rev, vector, embedder. Sets the vector only
# where the item still has that revision; returns how many were set.
_SET_VECTORS = """
local done = 0
for i = 1, #KEYS do
  local base = (i - 1) * 3
  if redis.call('HGET', KEYS[i], 'rev') == ARGV[base + 1] then
    redis.call('HSET', KEYS[i], 'vector', ARGV[base + 2], 'embedder', ARGV[base + 3])
    done = done + 1
  end
end
return done
"""


class RedisStore(MemoryStore):
    """Items as Redis hashes under ``prefix``, ordered by one lexical sorted set.

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
        embedder: Embedder | None = None,
        index: Mapping[Namespace, Fields] | None = None,
        default_ttl: float | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        kwargs = {} if clock is None else {"clock": clock}
        super().__init__(embedder=embedder, index=index, default_ttl=default_ttl, **kwargs)
        if (url is None) == (client is None):
            msg = "RedisStore needs exactly one of url='redis://...' or client=<a redis client>."
            raise ValueError(msg)
        self._own_client = client is None
        self._client: aioredis.Redis = client or aioredis.Redis.from_url(url or "")
        self._prefix = prefix
        self._index_key = f"{prefix}:memory:index"
        self._script = self._client.register_script(_WRITE)
        self._vectors_script = self._client.register_script(_SET_VECTORS)

    def __repr__(self) -> str:
        return f"RedisStore(prefix={self._prefix!r}, search={self.search_mode!r})"

    def _item_key(self, member: str) -> str:
        return f"{self._prefix}:memory:item:{member}"

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def _hashes(self, members: Sequence[str]) -> list[dict[bytes, bytes]]:
        if not members:
            return []
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for member in members:
                    pipe.hgetall(self._item_key(member))
                result: list[dict[bytes, bytes]] = await pipe.execute()
        except (redis_errors.ConnectionError, redis_errors.TimeoutError) as exc:
            msg = f"RedisStore cannot reach Redis: {exc}"
            raise BackendUnavailableError(msg) from exc
        return result

    async def _read(
        self, addresses: Sequence[tuple[Namespace, str]], now: float
    ) -> list[Item | None]:
        members = [_member(ns, key) for ns, key in addresses]
        return [
            _item(member, h, now)
            for member, h in zip(members, await self._hashes(members), strict=True)
        ]

    async def _write(self, writes: Sequence[Write], now: float) -> list[int]:
        keys = [self._index_key]
        args: list[Any] = [repr(now)]
        for write in writes:
            member = _member(write.namespace, write.key)
            keys.append(self._item_key(member))
            vector = write.vector
            args += [
                "del" if write.is_delete else "put",
                "" if write.if_rev is None else str(write.if_rev),
                "" if write.is_delete else json.dumps(write.value, separators=(",", ":")),
                "" if write.expires_at is None else repr(write.expires_at),
                b"" if vector is None else array.array("f", vector.values).tobytes(),
                "" if vector is None else vector.embedder,
                member,
            ]
        try:
            reply = await self._script(keys=keys, args=args)
        except (redis_errors.ConnectionError, redis_errors.TimeoutError) as exc:
            msg = f"RedisStore cannot reach Redis: {exc}"
            raise BackendUnavailableError(msg) from exc
        status = reply[0].decode()
        if status == "conflict":
            write = writes[int(reply[1]) - 1]
            current = reply[2].decode()
            raise MemoryConflictError(
                write.namespace, write.key, write.if_rev or 0, int(current) if current else None
            )
        return [int(x) for x in reply[1:]]

    async def _members(self, prefix: Namespace) -> list[str]:
        bounds = prefix_bounds(prefix)
        ranges: list[tuple[str, str]]
        if bounds is None:
            ranges = [("-", "+")]
        else:
            text, low, high = bounds
            ranges = [
                (f"[{text}{_KEY_SEPARATOR}", f"({text}{chr(ord(_KEY_SEPARATOR) + 1)}"),
                (f"[{low}", f"({high}"),
            ]
        members: list[str] = []
        for start, end in ranges:
            found = await self._client.zrange(self._index_key, start, end, bylex=True)
            members += [m.decode() for m in found if isinstance(m, bytes)]
        return members

    async def _live_items(
        self, prefix: Namespace, now: float
    ) -> list[tuple[Item, dict[bytes, bytes]]]:
        members = await self._members(prefix)
        result = []
        for member, h in zip(members, await self._hashes(members), strict=True):
            item = _item(member, h, now)
            if item is not None:
                result.append((item, h))
        return result

    async def _scan(
        self, prefix: Namespace, now: float, after: tuple[Namespace, str] | None, limit: int
    ) -> list[Item]:
        # One lexical range from the cursor (exclusive) up to the end of the prefix's
        # descendants, read a page at a time: a page costs O(page), not O(namespace).
        bounds = prefix_bounds(prefix)
        end = "+" if bounds is None else f"({bounds[2]}"
        start = "-" if bounds is None else f"[{bounds[0]}{_KEY_SEPARATOR}"
        if after is not None:
            floor = _member(*after)
            if start == "-" or floor >= start[1:]:
                start = f"({floor}"
        items: list[Item] = []
        page = max(limit, 100)
        while len(items) < limit:
            found = await self._client.zrange(
                self._index_key, start, end, bylex=True, offset=0, num=page
            )
            members = [m.decode() for m in found if isinstance(m, bytes)]
            if not members:
                break
            start = f"({members[-1]}"
            inside = [m for m in members if _under_prefix(m, prefix)]
            for member, h in zip(inside, await self._hashes(inside), strict=True):
                item = _item(member, h, now)
                if item is not None:
                    items.append(item)
                    if len(items) == limit:
                        break
            if len(members) < page:
                break
        return items

    async def _namespaces(self, prefix: Namespace, now: float) -> list[Namespace]:
        seen: dict[Namespace, None] = {}
        for item, _ in await self._live_items(prefix, now):
            seen.setdefault(item.namespace, None)
        return list(seen)

    async def _candidates(
        self, prefix: Namespace, now: float
    ) -> list[tuple[Item, StoredVector | None]]:
        return [(item, _vector(h)) for item, h in await self._live_items(prefix, now)]

    async def _set_vectors(self, updates: Sequence[VectorUpdate]) -> int:
        keys = [self._item_key(_member(u.namespace, u.key)) for u in updates]
        args: list[Any] = []
        for u in updates:
            args += [str(u.rev), array.array("f", u.vector.values).tobytes(), u.vector.embedder]
        return int(await self._vectors_script(keys=keys, args=args))


def _under_prefix(member: str, prefix: Namespace) -> bool:
    """Whether an address's namespace is ``prefix`` or below it (a lexical range can also
    hold a sibling whose label merely starts with the prefix's last label)."""
    labels = tuple(member.partition(_KEY_SEPARATOR)[0].split("\x1f"))
    return labels[: len(prefix)] == prefix


def _member(namespace: Namespace, key: str) -> str:
    return f"{namespace_text(namespace)}{_KEY_SEPARATOR}{key}"


def _item(member: str, h: dict[bytes, bytes], now: float) -> Item | None:
    if not h:
        return None
    expires = h.get(b"expires_at", b"").decode()
    if expires and float(expires) <= now:
        return None
    ns_text, _, key = member.partition(_KEY_SEPARATOR)  # labels never hold it
    return Item(
        namespace=tuple(ns_text.split("\x1f")),
        key=key,
        value=json.loads(h[b"value"]),
        rev=int(h[b"rev"]),
        created_at=float(h[b"created_at"]),
        updated_at=float(h[b"updated_at"]),
        expires_at=float(expires) if expires else None,
    )


def _vector(h: dict[bytes, bytes]) -> StoredVector | None:
    blob, embedder = h.get(b"vector", b""), h.get(b"embedder", b"").decode()
    if not blob or not embedder:
        return None
    values = array.array("f")
    values.frombytes(blob)
    return StoredVector(values.tolist(), embedder)
