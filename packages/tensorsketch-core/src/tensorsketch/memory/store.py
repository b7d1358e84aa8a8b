"""``MemoryStore``: memory that outlives a thread — items addressed by a namespace tuple and a
key, with revisions for conditional writes, optional expiry, and semantic search.

A store implements a handful of primitives (read, write a batch atomically, scan, list
namespaces, search candidates); everything users call — validation, revisions, TTL, paging
cursors, embedding, cosine ranking — is done here once, so every store behaves alike and the
conformance kit (:mod:`tensorsketch.testing.memory_conformance`) checks the same contract on
all of them.
"""

from __future__ import annotations

import base64
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tensorsketch.context import Context
from tensorsketch.memory.embedder import Embedder, cosine
from tensorsketch.memory.item import (
    Item,
    Namespace,
    Page,
    check_namespace,
    encode_value,
    namespace_text,
)
from tensorsketch.memory.journaled import JournaledMemory
from tensorsketch.name_registry import Registry

__all__ = [
    "Fields",
    "MemoryStore",
    "PutRequest",
    "StoredVector",
    "VectorUpdate",
    "Write",
    "memory_stores",
    "validated",
]

M = TypeVar("M")

#: Which parts of a value to embed: top-level or dotted field names; ``"$"`` is the whole value.
Fields = Sequence[str]

# Spelt outside the class, whose ``list`` method hides the builtin in its annotations.
_Items = list[Item]
_Namespaces = list[Namespace]

#: The most items one ``list`` page or ``search`` may return.
MAX_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class PutRequest:
    """One item of :meth:`MemoryStore.put_many`.

    :ivar namespace: where the item goes.
    :ivar key: its key.
    :ivar value: a JSON-shaped value or a pydantic model.
    :ivar if_rev: write only if the stored revision is this one (``0``: only if absent).
    :ivar ttl: seconds until the item expires (``None``: the store's ``default_ttl``).
    :ivar index: the fields to embed for this item, ``False`` for none (``None``: the
        namespace's configured fields).
    """

    namespace: Namespace
    key: str
    value: Any
    if_rev: int | None = None
    ttl: float | None = None
    index: Fields | bool | None = None


@dataclass(frozen=True, slots=True)
class StoredVector:
    """An item's embedding and the embedder that made it."""

    values: list[float]
    embedder: str


@dataclass(frozen=True, slots=True)
class VectorUpdate:
    """A new vector for an item, applied only if it still has revision ``rev``."""

    namespace: Namespace
    key: str
    rev: int
    vector: StoredVector


@dataclass(frozen=True, slots=True)
class Write:
    """One change a store applies in :meth:`MemoryStore._write` (``value is None``: delete).

    :ivar namespace: the item's namespace.
    :ivar key: its key.
    :ivar value: the JSON data to store, or ``None`` to delete the item.
    :ivar if_rev: the revision the stored item must have (``0``: absent; ``None``: any).
    :ivar expires_at: when the written item expires.
    :ivar vector: its embedding, if it is indexed.
    """

    namespace: Namespace
    key: str
    value: Any
    if_rev: int | None
    expires_at: float | None = None
    vector: StoredVector | None = None

    @property
    def is_delete(self) -> bool:
        """Whether this write removes the item."""
        return self.value is None


class MemoryStore(ABC):
    """Long-term memory an application owns and points its runs at (``invoke(memory=...)``).

    :param embedder: turns text into vectors for :meth:`search`; without one, ``search``
        filters but cannot rank by a query.
    :param index: which fields to embed, per namespace prefix (the longest matching prefix
        wins): ``{("users",): ["text"], ("docs",): ["title", "body"]}``. Default with an
        embedder: the whole value (``{(): ["$"]}``).
    :param default_ttl: seconds every item lives unless its ``put`` says otherwise
        (``None``: forever).
    :param clock: the time source (Unix seconds), replaceable in tests.
    """

    #: Registry name, set by subclasses (``"memory"``, ``"sqlite"``, ...).
    name: str = ""
    #: How ``search`` ranks: ``"exact"`` (a cosine over every candidate) or an index's name.
    search_mode: str = "exact"

    def __init__(
        self,
        *,
        embedder: Embedder | None = None,
        index: Mapping[Namespace, Fields] | None = None,
        default_ttl: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if embedder is not None and not isinstance(embedder, Embedder):
            msg = (
                f"embedder= must be a tensorsketch.memory.Embedder (e.g. HashingEmbedder()), "
                f"got {type(embedder).__name__}."
            )
            raise TypeError(msg)
        if index is not None and embedder is None:
            msg = "index= names fields to embed, which needs an embedder=; pass both."
            raise ValueError(msg)
        self.embedder = embedder
        fields = dict(index) if index is not None else ({(): ["$"]} if embedder else {})
        self._index: dict[Namespace, tuple[str, ...]] = {}
        for prefix, names in fields.items():
            ns = check_namespace(prefix, what="an index= prefix", allow_empty=True)
            if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
                msg = (
                    f"index[{ns!r}] must be a list of field names such as ['text'], got {names!r}."
                )
                raise TypeError(msg)
            self._index[ns] = tuple(names)
        _check_ttl(default_ttl, "default_ttl=")
        self.default_ttl = default_ttl
        self.clock = clock

    def __repr__(self) -> str:
        embedder = self.embedder.name if self.embedder else None
        return f"{type(self).__name__}(search={self.search_mode!r}, embedder={embedder!r})"

    # -- the primitives a store implements ---------------------------------------------------

    @abstractmethod
    async def _read(
        self, addresses: Sequence[tuple[Namespace, str]], now: float
    ) -> list[Item | None]:
        """The live items at ``addresses``, in order (``None``: absent or expired)."""

    @abstractmethod
    async def _write(self, writes: Sequence[Write], now: float) -> list[int]:
        """Apply every write atomically, or none.

        Check each ``if_rev`` against the live item (an expired item counts as absent) and
        raise :class:`MemoryConflictError` for the first mismatch before changing anything.
        A put gets the live revision plus one (``1`` for a new item); return its revision, or
        for a delete ``1`` if a live item was removed and ``0`` if there was none.
        """

    @abstractmethod
    async def _scan(
        self, prefix: Namespace, now: float, after: tuple[Namespace, str] | None, limit: int
    ) -> list[Item]:
        """Up to ``limit`` live items under ``prefix`` ordered by (namespace, key), strictly
        after ``after``."""

    @abstractmethod
    async def _namespaces(self, prefix: Namespace, now: float) -> list[Namespace]:
        """Every namespace under ``prefix`` that holds a live item, sorted."""

    @abstractmethod
    async def _candidates(
        self, prefix: Namespace, now: float
    ) -> list[tuple[Item, StoredVector | None]]:
        """Every live item under ``prefix`` with its vector (what an exact search ranks)."""

    @abstractmethod
    async def _set_vectors(self, updates: Sequence[VectorUpdate]) -> int:
        """Replace the vectors of items whose revision is still ``update.rev`` (leave the
        value, revision and times alone); return how many were replaced."""

    async def _nearest(
        self, prefix: Namespace, query: Sequence[float], limit: int, now: float
    ) -> list[Item] | None:
        """The ``limit`` live items under ``prefix`` nearest to ``query`` among the current
        embedder's vectors, best first, each with its ``score`` — from a vector index, for a
        store that has one. ``None`` (the default): rank every candidate exactly instead."""
        return None

    def for_context(self, ctx: Context[Any]) -> JournaledMemory:
        """This store as ``ctx.memory`` hands it to a node: journaled in a durable run."""
        return JournaledMemory(self, ctx)

    async def aclose(self) -> None:  # noqa: B027 - optional: stores with connections close them
        """Release connections (a store without any has nothing to do)."""

    # -- the API ---------------------------------------------------------------------------------

    async def get(
        self, namespace: Namespace, key: str, *, schema: type[M] | None = None
    ) -> Item | None:
        """The live item, or ``None``. With ``schema`` (a pydantic model), its value is
        validated into that model (a ``pydantic.ValidationError`` says which field is wrong)."""
        (item,) = await self.get_many([(namespace, key)], schema=schema)
        return item

    async def get_many(
        self, addresses: Sequence[tuple[Namespace, str]], *, schema: type[M] | None = None
    ) -> list[Item | None]:
        """Several items in one round trip, in the order asked."""
        checked = [(check_namespace(ns), _check_key(key)) for ns, key in addresses]
        items = await self._read(checked, self.clock()) if checked else []
        return [validated(item, schema) for item in items]

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
        """Store ``value`` and return its new revision.

        :param if_rev: write only if the stored revision is this one (``0``: only if the
            item does not exist); otherwise nothing is written and
            :class:`MemoryConflictError` names the current revision.
        :param ttl: seconds until the item expires (default: the store's ``default_ttl``).
        :param index: fields to embed for this item instead of the namespace's, or
            ``False`` to keep it out of semantic search.
        """
        (rev,) = await self.put_many(
            [PutRequest(namespace, key, value, if_rev=if_rev, ttl=ttl, index=index)]
        )
        return rev

    async def put_many(self, requests: Sequence[PutRequest]) -> list[int]:
        """Store several items at once, all or nothing (one conflict writes none of them);
        the embeddings are computed in one batch. Returns the new revisions, in order."""
        now = self.clock()
        prepared: list[tuple[Write, str | None]] = []
        for request in requests:
            if not isinstance(request, PutRequest):
                msg = f"put_many() takes PutRequest(namespace, key, value) items, got {request!r}."
                raise TypeError(msg)
            ns = check_namespace(request.namespace)
            key = _check_key(request.key)
            data = encode_value(request.value, where=f"put({ns!r}, {key!r})")
            if data is None:
                msg = f"put({ns!r}, {key!r}, None): to remove an item call delete(), not put(None)."
                raise ValueError(msg)
            _check_rev(request.if_rev)
            ttl = self.default_ttl if request.ttl is None else request.ttl
            _check_ttl(ttl, "ttl=")
            write = Write(ns, key, data, request.if_rev, None if ttl is None else now + ttl)
            prepared.append((write, self._text_to_embed(ns, data, request.index)))
        texts = [text for _, text in prepared if text is not None]
        vectors = iter(await self.embedder.embed(texts)) if texts and self.embedder else iter(())
        writes = []
        for write, text in prepared:
            if text is not None and self.embedder is not None:
                vector = StoredVector([float(x) for x in next(vectors)], self.embedder.name)
                write = Write(
                    write.namespace, write.key, write.value, write.if_rev, write.expires_at, vector
                )
            writes.append(write)
        return await self._write(writes, now) if writes else []

    async def delete(self, namespace: Namespace, key: str, *, if_rev: int | None = None) -> bool:
        """Remove the item; ``True`` if there was a live one. With ``if_rev``, only if the
        stored revision is that one (else :class:`MemoryConflictError`, nothing removed)."""
        _check_rev(if_rev)
        write = Write(check_namespace(namespace), _check_key(key), None, if_rev)
        (removed,) = await self._write([write], self.clock())
        return bool(removed)

    async def list(
        self, namespace_prefix: Namespace = (), *, limit: int = 50, cursor: str | None = None
    ) -> Page:
        """The items under a namespace prefix, ordered by namespace then key, a page at a
        time: pass the returned ``next_cursor`` to get the next page."""
        prefix = check_namespace(namespace_prefix, what="namespace_prefix", allow_empty=True)
        _check_limit(limit)
        after = _decode_cursor(cursor) if cursor is not None else None
        items = await self._scan(prefix, self.clock(), after, limit + 1)
        more = len(items) > limit
        items = items[:limit]
        next_cursor = _encode_cursor(items[-1].namespace, items[-1].key) if more and items else None
        return Page(items, next_cursor)

    async def list_namespaces(self, namespace_prefix: Namespace = ()) -> _Namespaces:
        """Every namespace under the prefix that holds at least one live item."""
        prefix = check_namespace(namespace_prefix, what="namespace_prefix", allow_empty=True)
        return await self._namespaces(prefix, self.clock())

    async def search(
        self,
        namespace_prefix: Namespace = (),
        query: str | None = None,
        *,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        schema: type[M] | None = None,
    ) -> _Items:
        """Items under a namespace prefix, best first.

        With ``query``, the indexed items ranked by cosine similarity to it (each with its
        ``score``); without, the newest first. ``filter`` keeps items whose value has these
        top-level (or dotted) fields equal to the given values.
        """
        prefix = check_namespace(namespace_prefix, what="namespace_prefix", allow_empty=True)
        _check_limit(limit)
        if filter is not None and not isinstance(filter, Mapping):
            msg = f"search(filter=...) must be a mapping of field -> value, got {filter!r}."
            raise TypeError(msg)
        if query is not None and self.embedder is None:
            msg = (
                f"search(query=...) ranks by meaning, which needs an embedder: build "
                f"{type(self).__name__}(embedder=HashingEmbedder(), ...) (or OpenAI's, Google's)."
            )
            raise ValueError(msg)
        target: Sequence[float] | None = None
        if query is not None and self.embedder is not None:
            (target,) = await self.embedder.embed([query])
            if filter is None:  # an index ranks all vectors; a filter needs the exact scan
                near = await self._nearest(prefix, target, limit, self.clock())
                if near is not None:
                    return [item for item in (validated(i, schema) for i in near) if item]
        candidates = [
            (item, vector)
            for item, vector in await self._candidates(prefix, self.clock())
            if filter is None or _matches(item.value, filter)
        ]
        if target is None or self.embedder is None:
            ranked = sorted(
                (item for item, _ in candidates), key=lambda i: (-i.updated_at, i.namespace, i.key)
            )
        else:
            name = self.embedder.name
            scored = [
                _with_score(item, cosine(target, vector.values))
                for item, vector in candidates
                if vector is not None and vector.embedder == name
            ]
            ranked = sorted(scored, key=lambda i: (-(i.score or 0.0), i.namespace, i.key))
        return [item for item in (validated(i, schema) for i in ranked[:limit]) if item]

    async def reindex(
        self, namespace_prefix: Namespace = (), *, batch: int = 100, cursor: str | None = None
    ) -> Page:
        """Re-embed, with this store's embedder, one batch of the items under the prefix whose
        vectors another embedder made (or that have none though their namespace is indexed).

        Search ignores such stale vectors, so after changing embedders call this until the
        returned page's ``next_cursor`` is ``None`` (pass it back to continue — after a crash
        too). Values and revisions are left alone; an item written meanwhile keeps the
        vector its own write made. Returns the items re-embedded in this batch.
        """
        prefix = check_namespace(namespace_prefix, what="namespace_prefix", allow_empty=True)
        _check_limit(batch)
        embedder = self.embedder
        if embedder is None:
            msg = (
                "reindex() re-embeds with the store's embedder; build "
                f"{type(self).__name__}(embedder=...)."
            )
            raise ValueError(msg)
        after = _decode_cursor(cursor) if cursor is not None else None
        floor = None if after is None else (namespace_text(after[0]), after[1])
        todo: list[tuple[Item, str]] = []
        more = False
        for item, vector in await self._candidates(prefix, self.clock()):
            if floor is not None and (namespace_text(item.namespace), item.key) <= floor:
                continue
            if vector is not None and vector.embedder == embedder.name:
                continue
            text = self._text_to_embed(item.namespace, item.value, None)
            if text is None:
                continue
            if len(todo) == batch:
                more = True
                break
            todo.append((item, text))
        if todo:
            vectors = await embedder.embed([text for _, text in todo])
            await self._set_vectors(
                [
                    VectorUpdate(
                        item.namespace,
                        item.key,
                        item.rev,
                        StoredVector([float(x) for x in v], embedder.name),
                    )
                    for (item, _), v in zip(todo, vectors, strict=True)
                ]
            )
        last = todo[-1][0] if todo else None
        next_cursor = _encode_cursor(last.namespace, last.key) if more and last else None
        return Page([item for item, _ in todo], next_cursor)

    # -- helpers ---------------------------------------------------------------------------------

    def fields_for(self, namespace: Namespace) -> tuple[str, ...] | None:
        """The fields embedded for items of ``namespace`` (``None``: not indexed)."""
        best: Namespace | None = None
        for prefix in self._index:
            if namespace[: len(prefix)] == prefix and (best is None or len(prefix) > len(best)):
                best = prefix
        return None if best is None else self._index[best]

    def _text_to_embed(
        self, namespace: Namespace, value: Any, index: Fields | bool | None
    ) -> str | None:
        if index is False or self.embedder is None:
            return None
        if index is None or index is True:
            fields = self.fields_for(namespace) or (("$",) if index is True else None)
        else:
            if isinstance(index, str):
                msg = f"put(index=...) takes a list of field names, got the string {index!r}."
                raise TypeError(msg)
            fields = tuple(index)
        if not fields:
            return None
        parts = [_field_text(value, field) for field in fields]
        text = "\n".join(part for part in parts if part)
        return text or None


def _field_text(value: Any, field: str) -> str:
    found = value if field == "$" else _lookup(value, field)
    if found is None:
        return ""
    return found if isinstance(found, str) else json.dumps(found, sort_keys=True)


def _lookup(value: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _matches(value: Any, wanted: Mapping[str, Any]) -> bool:
    return all(_lookup(value, field) == expected for field, expected in wanted.items())


def _with_score(item: Item, score: float) -> Item:
    return Item(
        item.namespace,
        item.key,
        item.value,
        item.rev,
        item.created_at,
        item.updated_at,
        item.expires_at,
        score,
    )


def validated(item: Item | None, schema: type[Any] | None) -> Item | None:
    """``item`` with its value validated into ``schema`` (a pydantic model), if one is given."""
    if item is None or schema is None:
        return item
    validate = getattr(schema, "model_validate", None)
    if not callable(validate):
        msg = f"schema= must be a pydantic model class (a tensorsketch.Schema), got {schema!r}."
        raise TypeError(msg)
    return Item(
        item.namespace,
        item.key,
        validate(item.value),
        item.rev,
        item.created_at,
        item.updated_at,
        item.expires_at,
        item.score,
    )


def _check_key(key: Any) -> str:
    if not isinstance(key, str) or not key:
        msg = f"a memory key must be a non-empty string, got {key!r}."
        raise TypeError(msg)
    return key


def _check_rev(rev: Any) -> None:
    if rev is not None and (not isinstance(rev, int) or isinstance(rev, bool) or rev < 0):
        msg = (
            f"if_rev= must be an item's rev (a non-negative int, 0 for 'must not exist'), "
            f"got {rev!r}."
        )
        raise ValueError(msg)


def _check_ttl(ttl: Any, what: str) -> None:
    if ttl is not None and (
        isinstance(ttl, bool) or not isinstance(ttl, int | float) or not ttl > 0
    ):
        msg = f"{what} must be a positive number of seconds (or None for no expiry), got {ttl!r}."
        raise ValueError(msg)


def _check_limit(limit: Any) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        msg = f"limit= must be an int from 1 to {MAX_LIMIT}, got {limit!r}."
        raise ValueError(msg)


def _encode_cursor(namespace: Namespace, key: str) -> str:
    raw = json.dumps([list(namespace), key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_cursor(cursor: Any) -> tuple[Namespace, str]:
    try:
        ns, key = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        return check_namespace(ns), _check_key(key)
    except (ValueError, TypeError, AttributeError):
        msg = f"cursor={cursor!r} is not a cursor list() returned; pass its next_cursor unchanged."
        raise ValueError(msg) from None


#: Memory stores by name (``create_memory_store("sqlite", path=...)``), fed by the
#: ``tensorsketch_memory_stores`` hook and the ``tensorsketch.memory`` entry-point group.
memory_stores: Registry[MemoryStore] = Registry(
    "memory_store", "tensorsketch_memory_stores", "tensorsketch.memory"
)
