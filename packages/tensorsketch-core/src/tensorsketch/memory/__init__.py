"""Memory that outlives a thread: a :class:`MemoryStore` the application owns and points its
runs at (``invoke(..., memory=store)``, read in nodes as ``ctx.memory``).

Conversation history across threads lives in a :class:`SessionStore` (append-only, per
session id): :class:`InMemorySessionStore`, ``SqliteSessionStore``, and PostgreSQL and Redis
ones from ``tensorsketch-backends``.

Core ships :class:`InMemoryStore` and :class:`SqliteStore`; ``tensorsketch-backends`` adds
PostgreSQL and Redis stores through the ``tensorsketch_memory_stores`` hook. Build one by
name with :func:`create_memory_store`.
"""

__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from typing import Any

from tensorsketch.memory.embedder import Embedder, HashingEmbedder, cosine
from tensorsketch.memory.errors import MemoryConflictError
from tensorsketch.memory.inmemory import InMemoryStore
from tensorsketch.memory.item import Item, Namespace, Page
from tensorsketch.memory.journaled import JournaledMemory
from tensorsketch.memory.sessions import (
    InMemorySessionStore,
    SessionEntry,
    SessionStore,
    create_session_store,
    register_session_store,
    session_stores,
)
from tensorsketch.memory.store import MemoryStore, PutRequest, memory_stores


def __getattr__(name: str) -> Any:
    if name == "SqliteStore":
        from tensorsketch.memory.sqlite import SqliteStore  # noqa: PLC0415 - sqlite3 loads on first use

        return SqliteStore
    if name == "SqliteSessionStore":
        from tensorsketch.memory.sqlite_sessions import (  # noqa: PLC0415 - sqlite3 loads on first use
            SqliteSessionStore,
        )

        return SqliteSessionStore
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


def create_memory_store(name: str, /, **kwargs: Any) -> MemoryStore:
    """Build a memory store by name: ``create_memory_store("sqlite", path="memory.db")``."""
    return memory_stores.create(name, **kwargs)


def register_memory_store(name: str, store: Any) -> None:
    """Register a memory store class (or a zero-argument callable returning one) under ``name``."""
    memory_stores.register(name, store)


__all__ = [
    "Embedder",
    "HashingEmbedder",
    "InMemorySessionStore",
    "InMemoryStore",
    "Item",
    "JournaledMemory",
    "MemoryConflictError",
    "MemoryStore",
    "Namespace",
    "Page",
    "PutRequest",
    "SessionEntry",
    "SessionStore",
    "cosine",
    "create_memory_store",
    "create_session_store",
    "memory_stores",
    "register_memory_store",
    "register_session_store",
    "session_stores",
]
