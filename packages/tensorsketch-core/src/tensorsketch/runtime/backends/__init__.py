"""Durable backends. Core ships :class:`InMemoryBackend` and :class:`SqliteBackend`.

Other distributions add more (``tensorsketch-backends`` adds ``PostgresBackend`` and
``RedisBackend``) through the ``tensorsketch_backends`` hook; their classes are importable from
here by attribute name, loaded on first use.
"""

__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from typing import Any

from tensorsketch._install_hints import HINTS as _INSTALL_HINTS
from tensorsketch.runtime.backends.base import (
    Backend,
    StoredCheckpoint,
    StoredEvent,
    ThreadOpening,
    backends,
)
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.serializers import (
    JsonSerializer,
    MsgpackSerializer,
    PickleSerializer,
    Serializer,
)

_HINTS = {  # class -> requirement, from the one install-hint table
    "PostgresBackend": _INSTALL_HINTS["tensorsketch.runtime.backends.postgres"],
    "RedisBackend": _INSTALL_HINTS["tensorsketch.runtime.backends.redis"],
}


def __getattr__(name: str) -> Any:
    if name in ("SqliteBackend", "SqlBackend"):
        # The SQL backends load on first use: sqlite3 and its thread pool cost ~10 ms.
        from tensorsketch.runtime.backends import sql, sqlite  # noqa: PLC0415 - sqlite3 and its thread pool load on first use

        return getattr(sqlite if name == "SqliteBackend" else sql, name)
    for backend_name in backends.names():
        path = backends.target_path(backend_name)
        if path is not None and path.rpartition(":")[2] == name:
            return backends.resolve(backend_name)
    if name in _HINTS:
        msg = (
            f"{name} comes with the 'tensorsketch-backends' distribution; install it with "
            f'`pip install "{_HINTS[name]}"`.'
        )
        raise ImportError(msg, name=f"{__name__}.{name}")
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


__all__ = [
    "Backend",
    "InMemoryBackend",
    "JsonSerializer",
    "MsgpackSerializer",
    "PickleSerializer",
    "Serializer",
    "StoredCheckpoint",
    "StoredEvent",
    "ThreadOpening",
]
