"""``RedisCache``: node results as Redis strings with a native expiry, beside a
:class:`~tensorsketch.runtime.backends.redis.RedisBackend`'s threads (same client, same prefix).

Keys: ``{prefix}:cache:{namespace}:{key}`` (``namespace`` is ``"<graph>:<node>"``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tensorsketch.cache.store import NodeCache

if TYPE_CHECKING:
    from tensorsketch.runtime.backends.redis import RedisBackend

__all__ = ["RedisCache"]

_GLOB = re.compile(r"([*?\[\]\\])")


class RedisCache(NodeCache):
    """Entries in ``backend``'s Redis database; a TTL is Redis's own (``PX``), so expired
    entries are gone without a sweep."""

    def __init__(self, backend: RedisBackend) -> None:
        self.backend = backend
        self.serializer = backend.serializer

    def _key(self, namespace: str, key: str) -> str:
        return f"{self.backend.prefix}:cache:{namespace}:{key}"

    async def get(self, namespace: str, key: str) -> bytes | None:
        async with self.backend._use("reading the node cache") as client:
            found = await client.get(self._key(namespace, key))
        return found if isinstance(found, bytes) else None

    async def set(self, namespace: str, key: str, value: bytes, ttl: float | None) -> None:
        px = max(1, round(ttl * 1000)) if ttl is not None else None
        async with self.backend._use("writing the node cache") as client:
            await client.set(self._key(namespace, key), value, px=px)

    async def clear(self, namespace: str | None = None, keys: Iterable[str] | None = None) -> int:
        if keys is not None and namespace is None:
            msg = "clear(keys=...) needs the namespace the keys are in."
            raise ValueError(msg)
        async with self.backend._use("clearing the node cache") as client:
            if keys is not None:
                assert namespace is not None
                names = [self._key(namespace, k) for k in keys]
                return int(await client.delete(*names)) if names else 0
            base = _GLOB.sub(r"\\\1", f"{self.backend.prefix}:cache:")
            pattern = base + (_GLOB.sub(r"\\\1", f"{namespace}:") if namespace else "") + "*"
            dropped = 0
            batch: list[bytes] = []
            async for name in client.scan_iter(match=pattern, count=500):
                batch.append(name)
                if len(batch) >= 500:
                    dropped += int(await client.delete(*batch))
                    batch = []
            if batch:
                dropped += int(await client.delete(*batch))
            return dropped

    def __repr__(self) -> str:
        return f"RedisCache(prefix={self.backend.prefix!r})"
