"""``InMemoryStore``: a memory store in this process's memory, for tests, notebooks and
single-process apps (gone when the process is)."""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Mapping, Sequence

from tensorsketch.memory.embedder import Embedder
from tensorsketch.memory.errors import MemoryConflictError
from tensorsketch.memory.item import Item, Namespace, namespace_text
from tensorsketch.memory.store import Fields, MemoryStore, StoredVector, VectorUpdate, Write

__all__ = ["InMemoryStore"]

_Address = tuple[str, str]  # (namespace text, key): sorts as the store's list order


class InMemoryStore(MemoryStore):
    """Items in a dict, with a sorted index for paging; exact cosine search.

    Every object is its own store: share the object between the runs that should share
    memory, or pass ``share=other`` for a second handle on ``other``'s items with options of
    its own (another embedder, clock or default TTL), as a second process would have.
    """

    name = "memory"

    def __init__(
        self,
        *,
        embedder: Embedder | None = None,
        index: Mapping[Namespace, Fields] | None = None,
        default_ttl: float | None = None,
        clock: Callable[[], float] | None = None,
        share: InMemoryStore | None = None,
    ) -> None:
        kwargs = {} if clock is None else {"clock": clock}
        super().__init__(embedder=embedder, index=index, default_ttl=default_ttl, **kwargs)
        if share is not None and not isinstance(share, InMemoryStore):
            msg = f"InMemoryStore(share=...) takes another InMemoryStore, got {share!r}."
            raise TypeError(msg)
        self._items: dict[_Address, tuple[Item, StoredVector | None]] = (
            {} if share is None else share._items
        )
        self._order: list[_Address] = [] if share is None else share._order
        self._lock: asyncio.Lock = asyncio.Lock() if share is None else share._lock

    def _live(self, address: _Address, now: float) -> tuple[Item, StoredVector | None] | None:
        found = self._items.get(address)
        if found is None:
            return None
        expires = found[0].expires_at
        if expires is not None and expires <= now:
            del self._items[address]
            self._order.pop(bisect.bisect_left(self._order, address))
            return None
        return found

    async def _read(
        self, addresses: Sequence[tuple[Namespace, str]], now: float
    ) -> list[Item | None]:
        result: list[Item | None] = []
        for ns, key in addresses:
            found = self._live((namespace_text(ns), key), now)
            result.append(None if found is None else found[0])
        return result

    async def _write(self, writes: Sequence[Write], now: float) -> list[int]:
        async with self._lock:
            current = [self._live((namespace_text(w.namespace), w.key), now) for w in writes]
            for write, found in zip(writes, current, strict=True):
                rev = None if found is None else found[0].rev
                if write.if_rev is not None and write.if_rev != (rev or 0):
                    raise MemoryConflictError(write.namespace, write.key, write.if_rev, rev)
            results: list[int] = []
            for write in writes:
                address = (namespace_text(write.namespace), write.key)
                found = self._live(address, now)
                if write.is_delete:
                    if found is not None:
                        del self._items[address]
                        self._order.pop(bisect.bisect_left(self._order, address))
                    results.append(int(found is not None))
                    continue
                old = None if found is None else found[0]
                item = Item(
                    write.namespace,
                    write.key,
                    write.value,
                    1 if old is None else old.rev + 1,
                    now if old is None else old.created_at,
                    now,
                    write.expires_at,
                )
                if old is None:
                    bisect.insort(self._order, address)
                self._items[address] = (item, write.vector)
                results.append(item.rev)
            return results

    def _under(self, prefix: Namespace) -> list[_Address]:
        if not prefix:
            return list(self._order)
        text = namespace_text(prefix)
        sep = text + "\x1f"
        start = bisect.bisect_left(self._order, (text, ""))
        end = bisect.bisect_left(self._order, (text + "\x20", ""))
        return [a for a in self._order[start:end] if a[0] == text or a[0].startswith(sep)]

    async def _scan(
        self, prefix: Namespace, now: float, after: tuple[Namespace, str] | None, limit: int
    ) -> list[Item]:
        items: list[Item] = []
        floor = None if after is None else (namespace_text(after[0]), after[1])
        for address in self._under(prefix):
            if floor is not None and address <= floor:
                continue
            found = self._live(address, now)
            if found is not None:
                items.append(found[0])
                if len(items) == limit:
                    break
        return items

    async def _namespaces(self, prefix: Namespace, now: float) -> list[Namespace]:
        seen: dict[Namespace, None] = {}
        for address in self._under(prefix):
            found = self._live(address, now)
            if found is not None:
                seen.setdefault(found[0].namespace, None)
        return list(seen)

    async def _candidates(
        self, prefix: Namespace, now: float
    ) -> list[tuple[Item, StoredVector | None]]:
        return [
            found
            for address in self._under(prefix)
            if (found := self._live(address, now)) is not None
        ]

    async def _set_vectors(self, updates: Sequence[VectorUpdate]) -> int:
        async with self._lock:
            done = 0
            for update in updates:
                address = (namespace_text(update.namespace), update.key)
                found = self._items.get(address)
                if found is not None and found[0].rev == update.rev:
                    self._items[address] = (found[0], update.vector)
                    done += 1
            return done
