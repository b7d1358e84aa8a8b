"""How ``tensorsketch-backends`` registers its stores: names only, so listing imports no driver."""

from __future__ import annotations

from collections.abc import Mapping

from tensorsketch.hookspecs import hookimpl


@hookimpl
def tensorsketch_backends() -> Mapping[str, str]:
    return {
        "postgres": "tensorsketch.runtime.backends.postgres:PostgresBackend",
        "redis": "tensorsketch.runtime.backends.redis:RedisBackend",
    }


@hookimpl
def tensorsketch_memory_stores() -> Mapping[str, str]:
    return {
        "postgres": "tensorsketch.memory.postgres:PostgresStore",
        "redis": "tensorsketch.memory.redis:RedisStore",
    }


@hookimpl
def tensorsketch_session_stores() -> Mapping[str, str]:
    return {
        "postgres": "tensorsketch.memory.postgres_sessions:PostgresSessionStore",
        "redis": "tensorsketch.memory.redis_sessions:RedisSessionStore",
    }
