"""Node result caching: ``add(Node, cache=CachePolicy(ttl=...))`` and ``compile(cache=...)``.

A node whose cache key (by default its validated input) was seen within the policy's TTL is
not run: its writes come from the cache, and a ``cached`` event and span attribute say so.
The store is a :class:`NodeCache`: :class:`InMemoryCache`; :class:`SqlCache` in the database
of a SQL backend (``SqlCache(PostgresBackend(...))``, or :class:`SqliteCache` on a file of its
own); ``RedisCache`` in ``tensorsketch-backends``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tensorsketch.cache.policy import CachePolicy
from tensorsketch.cache.store import InMemoryCache, NodeCache

if TYPE_CHECKING:
    from tensorsketch.cache.sql import SqlCache, SqliteCache

__all__ = ["CachePolicy", "InMemoryCache", "NodeCache", "SqlCache", "SqliteCache"]


def __getattr__(name: str) -> Any:
    if name in ("SqlCache", "SqliteCache"):
        from tensorsketch.cache import sql  # noqa: PLC0415 - the SQL layer on first use

        return getattr(sql, name)
    raise AttributeError(name)
