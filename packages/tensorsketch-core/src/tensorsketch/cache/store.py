"""``NodeCache``: the small contract a node result cache keeps, and the in-memory one."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable

from tensorsketch.serializers import MsgpackSerializer, Serializer

__all__ = ["InMemoryCache", "NodeCache"]


class NodeCache(ABC):
    """Entries of bytes by ``(namespace, key)``, each with an optional expiry. A graph keeps
    one namespace per node (``"<graph>:<node>"``); ``serializer`` turns writes into bytes.
    """

    serializer: Serializer = MsgpackSerializer()

    @abstractmethod
    async def get(self, namespace: str, key: str) -> bytes | None:
        """The entry, or ``None`` when there is none or it expired."""

    @abstractmethod
    async def set(self, namespace: str, key: str, value: bytes, ttl: float | None) -> None:
        """Store (or replace) an entry that expires after ``ttl`` seconds (``None``: never)."""

    @abstractmethod
    async def clear(self, namespace: str | None = None, keys: Iterable[str] | None = None) -> int:
        """Drop entries: every one (no arguments), a namespace's, or some keys of one; return
        how many were dropped."""


class InMemoryCache(NodeCache):
    """Entries in this process's memory (gone with it)."""

    def __init__(self, *, serializer: Serializer | None = None) -> None:
        self._entries: dict[tuple[str, str], tuple[bytes, float | None]] = {}
        if serializer is not None:
            self.serializer = serializer

    async def get(self, namespace: str, key: str) -> bytes | None:
        found = self._entries.get((namespace, key))
        if found is None:
            return None
        value, expires = found
        if expires is not None and expires <= time.time():
            del self._entries[(namespace, key)]
            return None
        return value

    async def set(self, namespace: str, key: str, value: bytes, ttl: float | None) -> None:
        self._entries[(namespace, key)] = (value, time.time() + ttl if ttl is not None else None)

    async def clear(self, namespace: str | None = None, keys: Iterable[str] | None = None) -> int:
        if keys is not None and namespace is None:
            msg = "clear(keys=...) needs the namespace the keys are in."
            raise ValueError(msg)
        wanted = set(keys) if keys is not None else None
        doomed = [
            k
            for k in self._entries
            if (namespace is None or k[0] == namespace) and (wanted is None or k[1] in wanted)
        ]
        for k in doomed:
            del self._entries[k]
        return len(doomed)
