"""The tests' Redis server: is it there, and a key prefix private to one test.

Imports redis-py, so only tests that have it import this module (the same rule as
:mod:`tensorsketch.testing.postgres_server`). An unreachable server fails the test instead of
skipping it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tensorsketch.testing.services import REDIS_URL, private_name


def reachable(url: str = REDIS_URL) -> str:
    """``url`` once the server answers a PING; fails the test (5 s at most) otherwise."""
    client = redis.Redis.from_url(url, socket_connect_timeout=5)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is not reachable at {url!r} (TS_TEST_REDIS_URL): {exc}")
    finally:
        client.close()
    return url


def delete_prefix(url: str, prefix: str) -> None:
    """Delete every key under ``prefix:``."""
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def private_prefix(kind: str, url: str = REDIS_URL) -> Iterator[str]:
    """Yield a fresh key prefix and delete its keys afterwards; for ``yield from`` in a
    fixture."""
    name = private_name(kind)
    try:
        yield name
    finally:
        delete_prefix(url, name)
