"""``JournaledMemory``: a store as a node sees it through ``ctx.memory`` — every read and write
goes through the run's effect journal, so a resumed durable run sees what the first attempt
saw and writes nothing twice.

Reads are recorded with their results. A write is recorded with the revision it produced; the
window a journal cannot close — the store wrote, the process died before the result was
recorded — is closed by making the write conditional on the revision journaled just before
it: a retry that finds exactly its own value one revision later knows the write happened and
returns that revision instead of writing again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from tensorsketch.context import Context
from tensorsketch.memory.errors import MemoryConflictError
from tensorsketch.memory.item import Item, Namespace, Page, encode_value

if TYPE_CHECKING:
    from tensorsketch.memory.store import Fields, MemoryStore

__all__ = ["JournaledMemory"]

M = TypeVar("M")
# Spelt outside the class, whose ``list`` method hides the builtin in its annotations.
_Namespaces = list[Namespace]


class JournaledMemory:
    """The run's memory store bound to one node's journal (what ``ctx.memory`` returns).

    The methods are the store's (``get``, ``get_many``, ``put``, ``delete``, ``list``,
    ``list_namespaces``, ``search``); :attr:`store` is the store itself, for calls that
    should not be journaled.
    """

    __slots__ = ("_ctx", "store")

    def __init__(self, store: MemoryStore, ctx: Context[Any]) -> None:
        #: The underlying store (calls on it are not journaled).
        self.store = store
        self._ctx = ctx

    def __repr__(self) -> str:
        return f"JournaledMemory({self.store!r}, node={self._ctx.node!r})"

    async def get(
        self, namespace: Namespace, key: str, *, schema: type[M] | None = None
    ) -> Item | None:
        """:meth:`MemoryStore.get`, journaled."""
        (item,) = await self.get_many([(namespace, key)], schema=schema)
        return item

    async def get_many(
        self, addresses: Sequence[tuple[Namespace, str]], *, schema: type[M] | None = None
    ) -> list[Item | None]:
        """:meth:`MemoryStore.get_many`, journaled."""

        async def read() -> list[dict[str, Any] | None]:
            items = await self.store.get_many(addresses)
            return [None if item is None else item.to_json() for item in items]

        args = {"addresses": [[list(ns), key] for ns, key in addresses]}
        rows = await self._ctx.step("memory.get", read, args=args)
        items = [None if row is None else Item.from_json(row) for row in rows]
        return [_as(item, schema) for item in items]

    async def search(
        self,
        namespace_prefix: Namespace = (),
        query: str | None = None,
        *,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        schema: type[M] | None = None,
    ) -> list[Item]:
        """:meth:`MemoryStore.search`, journaled."""

        async def read() -> list[dict[str, Any]]:
            hits = await self.store.search(namespace_prefix, query, filter=filter, limit=limit)
            return [hit.to_json() for hit in hits]

        args: dict[str, Any] = {
            "namespace_prefix": list(namespace_prefix),
            "query": query,
            "limit": limit,
        }
        if filter:
            args["filter"] = dict(filter)
        rows = await self._ctx.step("memory.search", read, args=args)
        return [item for item in (_as(Item.from_json(row), schema) for row in rows) if item]

    async def list(
        self, namespace_prefix: Namespace = (), *, limit: int = 50, cursor: str | None = None
    ) -> Page:
        """:meth:`MemoryStore.list`, journaled."""

        async def read() -> dict[str, Any]:
            page = await self.store.list(namespace_prefix, limit=limit, cursor=cursor)
            return {"items": [i.to_json() for i in page.items], "next_cursor": page.next_cursor}

        args = {"namespace_prefix": list(namespace_prefix), "limit": limit, "cursor": cursor}
        data = await self._ctx.step("memory.list", read, args=args)
        return Page([Item.from_json(row) for row in data["items"]], data["next_cursor"])

    async def list_namespaces(self, namespace_prefix: Namespace = ()) -> _Namespaces:
        """:meth:`MemoryStore.list_namespaces`, journaled."""

        async def read() -> list[list[str]]:
            return [list(ns) for ns in await self.store.list_namespaces(namespace_prefix)]

        args = {"namespace_prefix": list(namespace_prefix)}
        found = await self._ctx.step("memory.list_namespaces", read, args=args)
        return [tuple(ns) for ns in found]

    async def put(
        self,
        namespace: Namespace,
        key: str,
        value: Any,
        *,
        if_rev: int | None = None,
        ttl: float | None = None,
        index: Fields | bool | None = None,
    ) -> int:
        """:meth:`MemoryStore.put`, written once per run however often it is resumed."""
        data = encode_value(value, where=f"ctx.memory.put({namespace!r}, {key!r})")
        store = self.store
        if not self._ctx.effects.durable:
            return await store.put(namespace, key, data, if_rev=if_rev, ttl=ttl, index=index)
        address = {"namespace": list(namespace), "key": key}
        expected = if_rev
        if expected is None:
            expected = int(
                await self._ctx.step(
                    "memory.put.rev", lambda: self._rev(namespace, key), args=address
                )
            )

        async def write() -> int:
            try:
                return await store.put(namespace, key, data, if_rev=expected, ttl=ttl, index=index)
            except MemoryConflictError:
                current = await store.get(namespace, key)
                if current is not None and current.rev == expected + 1 and current.value == data:
                    return current.rev  # an attempt that died before recording it wrote this
                if if_rev is not None:
                    raise
                # An unconditional put: another writer came between; write over it, as asked.
                return await store.put(namespace, key, data, ttl=ttl, index=index)

        # The intent keeps what was written (the result is only its revision): the Studio's
        # debugger shows a thread's writes from it.
        args = {**address, "value": data, "if_rev": expected, "ttl": ttl}
        return int(await self._ctx.step("memory.put", write, args=args))

    async def delete(self, namespace: Namespace, key: str, *, if_rev: int | None = None) -> bool:
        """:meth:`MemoryStore.delete`, done once per run however often it is resumed."""
        store = self.store
        if not self._ctx.effects.durable:
            return await store.delete(namespace, key, if_rev=if_rev)
        address = {"namespace": list(namespace), "key": key}
        expected = if_rev
        if expected is None:
            expected = int(
                await self._ctx.step(
                    "memory.delete.rev", lambda: self._rev(namespace, key), args=address
                )
            )

        async def remove() -> bool:
            try:
                return await store.delete(namespace, key, if_rev=expected)
            except MemoryConflictError as exc:
                if exc.current is None and expected:
                    return True  # an attempt that died before recording it removed it
                if if_rev is not None:
                    raise
                return await store.delete(namespace, key)

        args = {**address, "if_rev": expected}
        return bool(await self._ctx.step("memory.delete", remove, args=args))

    async def _rev(self, namespace: Namespace, key: str) -> int:
        item = await self.store.get(namespace, key)
        return 0 if item is None else item.rev


def _as(item: Item | None, schema: type[Any] | None) -> Item | None:
    from tensorsketch.memory.store import validated  # noqa: PLC0415 - store imports this module

    return validated(item, schema)
