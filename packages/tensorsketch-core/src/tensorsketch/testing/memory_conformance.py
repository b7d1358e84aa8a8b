"""The behaviour every ``MemoryStore`` must have, as one reusable pytest suite.

Subclass :class:`MemoryStoreConformance` in your store's tests and provide a ``store_factory``
fixture: ``store_factory(**options)`` returns a new handle on one storage private to the test
(a second handle stands in for a second process), built with ``options`` — ``embedder=``,
``index=``, ``clock=``, ``default_ttl=``, the :class:`~tensorsketch.memory.MemoryStore`
constructor's own::

    import pytest
    from tensorsketch.testing.memory_conformance import MemoryStoreConformance

    class TestAcmeStore(MemoryStoreConformance):
        @pytest.fixture
        def store_factory(self, tmp_path):
            return lambda **options: AcmeStore(tmp_path / "memory", **options)

It checks revisions and conditional writes (several writers racing with ``if_rev``: exactly
one wins), all-or-nothing batches, TTL expiry on a controlled clock, paging (through a
100,000-item namespace too), namespace prefixes, re-embedding after an embedder change,
schema validation on read, and search ranking with the deterministic
:class:`~tensorsketch.memory.HashingEmbedder` on a small labelled set. The tests are
``async`` and marked for pytest-asyncio explicitly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pydantic
import pytest

from tensorsketch.memory import (
    HashingEmbedder,
    Item,
    MemoryConflictError,
    MemoryStore,
    PutRequest,
)
from tensorsketch.schema import Schema

__all__ = ["LABELLED_NOTES", "FakeClock", "MemoryStoreConformance", "StoreFactory"]

StoreFactory = Callable[..., MemoryStore]


class FakeClock:
    """A clock the test moves by hand (``clock.now += 10``)."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


#: A small labelled set: (key, topic, text). Each query below must find its topic's notes first.
LABELLED_NOTES: list[tuple[str, str, str]] = [
    ("n1", "food", "prefers green tea in the morning, never coffee"),
    ("n2", "food", "vegetarian: no meat or fish at dinner"),
    ("n3", "food", "allergic to peanuts and tree nuts"),
    ("n4", "ui", "likes dark mode and a large font in the editor"),
    ("n5", "ui", "wants compact tables and keyboard shortcuts"),
    ("n6", "travel", "flies from Lisbon, prefers window seats on long flights"),
    ("n7", "travel", "books hotels near the train station"),
    ("n8", "work", "writes Python and reviews pull requests on Fridays"),
]
_QUERIES: list[tuple[str, str]] = [
    ("which tea or coffee does the user drink", "n1"),
    ("peanuts allergy", "n3"),
    ("dark mode editor font", "n4"),
    ("window seat on flights", "n6"),
    ("hotels near the station", "n7"),
    ("python pull requests", "n8"),
]


class Prefs(Schema):
    theme: str
    font_size: int


@pytest.mark.asyncio
class MemoryStoreConformance:
    """Subclass and provide ``store_factory`` (see the module docstring)."""

    #: Items written by :meth:`test_large_namespace_pages_through_every_item` (the issue's
    #: 100,000-item namespace; a subclass may lower it for a slow store).
    bulk_items: int = 100_000

    # -- basic reads and writes --------------------------------------------------------------

    async def test_put_get_and_revisions(self, store_factory: StoreFactory) -> None:
        clock = FakeClock()
        store = store_factory(clock=clock)
        assert await store.get(("users", "u1"), "prefs") is None
        assert await store.put(("users", "u1"), "prefs", {"theme": "dark"}) == 1
        clock.now += 5
        assert await store.put(("users", "u1"), "prefs", {"theme": "light"}) == 2
        item = await store.get(("users", "u1"), "prefs")
        assert item is not None
        assert (item.namespace, item.key, item.value, item.rev) == (
            ("users", "u1"),
            "prefs",
            {"theme": "light"},
            2,
        )
        assert item.created_at == clock.now - 5
        assert item.updated_at == clock.now
        other = store_factory(clock=clock)  # a second handle (another process) sees it
        again = await other.get(("users", "u1"), "prefs")
        assert again is not None and again.rev == 2

    async def test_values_round_trip_as_json(self, store_factory: StoreFactory) -> None:
        store = store_factory()
        value = {"s": "é ✓", "n": 1.5, "i": 3, "b": True, "none": None, "l": [1, {"x": []}]}
        await store.put(("v",), "k", value)
        await store.put(("v",), "list", [1, 2])
        await store.put(("v",), "text", "just a string")
        assert (await store.get(("v",), "k")).value == value  # type: ignore[union-attr]
        assert (await store.get(("v",), "list")).value == [1, 2]  # type: ignore[union-attr]
        assert (await store.get(("v",), "text")).value == "just a string"  # type: ignore[union-attr]
        with pytest.raises(TypeError, match="JSON-shaped"):
            await store.put(("v",), "bad", {"s": {1, 2}})
        with pytest.raises(ValueError, match="delete"):
            await store.put(("v",), "none", None)

    async def test_models_are_stored_as_json_and_validated_on_read(
        self, store_factory: StoreFactory
    ) -> None:
        store = store_factory()
        await store.put(("users", "u1"), "prefs", Prefs(theme="dark", font_size=14))
        item = await store.get(("users", "u1"), "prefs", schema=Prefs)
        assert item is not None and item.value == Prefs(theme="dark", font_size=14)
        await store.put(("users", "u1"), "prefs", {"theme": "dark", "font_size": "huge"})
        with pytest.raises(pydantic.ValidationError, match="font_size"):
            await store.get(("users", "u1"), "prefs", schema=Prefs)

    async def test_bad_addresses_are_refused_with_the_fix(
        self, store_factory: StoreFactory
    ) -> None:
        store = store_factory()
        with pytest.raises(TypeError, match=r"\('users',\)"):
            await store.put("users", "k", {})  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="at least one label"):
            await store.put((), "k", {})
        with pytest.raises(TypeError, match="non-empty string"):
            await store.get(("users",), "")
        with pytest.raises(ValueError, match="if_rev"):
            await store.put(("users",), "k", {}, if_rev=-1)
        with pytest.raises(ValueError, match="ttl"):
            await store.put(("users",), "k", {}, ttl=0)

    async def test_delete(self, store_factory: StoreFactory) -> None:
        store = store_factory()
        await store.put(("d",), "k", {"a": 1})
        assert await store.delete(("d",), "k") is True
        assert await store.get(("d",), "k") is None
        assert await store.delete(("d",), "k") is False
        assert await store.put(("d",), "k", {"a": 2}) == 1  # a new item starts again

    # -- conditional writes -------------------------------------------------------------------

    async def test_if_rev_conflict_writes_nothing_and_names_the_current_rev(
        self, store_factory: StoreFactory
    ) -> None:
        store = store_factory()
        await store.put(("c",), "k", {"v": 1})
        await store.put(("c",), "k", {"v": 2})
        with pytest.raises(MemoryConflictError, match="current revision is 2") as info:
            await store.put(("c",), "k", {"v": "stale"}, if_rev=1)
        assert (info.value.expected, info.value.current) == (1, 2)
        item = await store.get(("c",), "k")
        assert item is not None and (item.value, item.rev) == ({"v": 2}, 2)
        assert await store.put(("c",), "k", {"v": 3}, if_rev=2) == 3
        with pytest.raises(MemoryConflictError) as absent:
            await store.put(("c",), "missing", {"v": 1}, if_rev=4)
        assert absent.value.current is None
        assert await store.get(("c",), "missing") is None

    async def test_if_rev_zero_creates_only(self, store_factory: StoreFactory) -> None:
        store = store_factory()
        assert await store.put(("c",), "k", {"v": 1}, if_rev=0) == 1
        with pytest.raises(MemoryConflictError, match="does not exist yet"):
            await store.put(("c",), "k", {"v": 2}, if_rev=0)

    async def test_conditional_delete(self, store_factory: StoreFactory) -> None:
        store = store_factory()
        await store.put(("c",), "k", {"v": 1})
        await store.put(("c",), "k", {"v": 2})
        with pytest.raises(MemoryConflictError):
            await store.delete(("c",), "k", if_rev=1)
        assert await store.get(("c",), "k") is not None
        assert await store.delete(("c",), "k", if_rev=2) is True

    async def test_racing_writers_with_if_rev_exactly_one_wins(
        self, store_factory: StoreFactory
    ) -> None:
        first, second = store_factory(), store_factory()
        await first.put(("race",), "counter", {"n": 0})
        handles = [first, second] * 4

        async def writer(i: int, store: MemoryStore) -> int | MemoryConflictError:
            try:
                return await store.put(("race",), "counter", {"n": 1, "by": i}, if_rev=1)
            except MemoryConflictError as exc:
                return exc

        results = await asyncio.gather(*(writer(i, s) for i, s in enumerate(handles)))
        winners = [i for i, rev in enumerate(results) if rev == 2]
        assert len(winners) == 1, results
        losers = [r for r in results if isinstance(r, MemoryConflictError)]
        assert len(losers) == len(handles) - 1
        assert {r.current for r in losers} == {2}
        item = await second.get(("race",), "counter")
        assert item is not None and item.rev == 2 and item.value == {"n": 1, "by": winners[0]}

    # -- batches ---------------------------------------------------------------------------------

    async def test_batches_keep_order_and_are_all_or_nothing(
        self, store_factory: StoreFactory
    ) -> None:
        store = store_factory()
        revs = await store.put_many([PutRequest(("b",), f"k{i}", {"i": i}) for i in range(5)])
        assert revs == [1] * 5
        got = await store.get_many([(("b",), "k3"), (("b",), "nope"), (("b",), "k0")])
        assert [None if i is None else i.value for i in got] == [{"i": 3}, None, {"i": 0}]
        with pytest.raises(MemoryConflictError, match="k4"):
            await store.put_many(
                [PutRequest(("b",), "k0", {"i": "new"}), PutRequest(("b",), "k4", {}, if_rev=9)]
            )
        unchanged = await store.get(("b",), "k0")
        assert unchanged is not None and unchanged.value == {"i": 0} and unchanged.rev == 1
        assert await store.put_many(
            [PutRequest(("b",), "k0", {"i": 1}), PutRequest(("b",), "k0", {"i": 2})]
        ) == [2, 3]

    # -- expiry ----------------------------------------------------------------------------------

    async def test_ttl_expiry(self, store_factory: StoreFactory) -> None:
        clock = FakeClock()
        store = store_factory(clock=clock, embedder=HashingEmbedder())
        await store.put(("t", "a"), "short", {"text": "short lived note"}, ttl=10)
        await store.put(("t", "a"), "long", {"text": "long lived note"})
        clock.now += 9
        item = await store.get(("t", "a"), "short")
        assert item is not None and item.expires_at == clock.now + 1
        clock.now += 2
        assert await store.get(("t", "a"), "short") is None
        assert [i.key for i in (await store.list(("t",))).items] == ["long"]
        assert [i.key for i in await store.search(("t",), "short lived note")] == ["long"]
        with pytest.raises(MemoryConflictError):
            await store.put(("t", "a"), "short", {}, if_rev=1)  # expired counts as absent
        assert await store.put(("t", "a"), "short", {"text": "again"}, if_rev=0) == 1
        await store.put(("t", "b"), "gone", {}, ttl=1)
        clock.now += 2
        assert await store.list_namespaces(("t",)) == [("t", "a")]

    async def test_default_ttl(self, store_factory: StoreFactory) -> None:
        clock = FakeClock()
        store = store_factory(clock=clock, default_ttl=60)
        await store.put(("t",), "k", {})
        await store.put(("t",), "pinned", {}, ttl=3600)
        clock.now += 61
        assert await store.get(("t",), "k") is None
        assert await store.get(("t",), "pinned") is not None

    # -- listing ---------------------------------------------------------------------------------

    async def test_namespaces_and_prefix_listing(self, store_factory: StoreFactory) -> None:
        store = store_factory()
        for ns in [("a",), ("a", "b"), ("a", "b", "c"), ("ab",), ("b",)]:
            await store.put(ns, "k", {"ns": list(ns)})
        listed = (await store.list(("a",))).items
        assert [i.namespace for i in listed] == [("a",), ("a", "b"), ("a", "b", "c")]
        assert [i.namespace for i in (await store.list(("a", "b"))).items] == [
            ("a", "b"),
            ("a", "b", "c"),
        ]
        assert await store.list_namespaces() == [
            ("a",),
            ("a", "b"),
            ("a", "b", "c"),
            ("ab",),
            ("b",),
        ]
        assert await store.list_namespaces(("a", "b")) == [("a", "b"), ("a", "b", "c")]
        assert (await store.list(("zzz",))).items == []

    async def test_paging(self, store_factory: StoreFactory) -> None:
        store = store_factory()
        await store.put_many(
            [PutRequest(("p", f"n{i % 3}"), f"k{i:02d}", {"i": i}) for i in range(25)]
        )
        seen: list[Item] = []
        cursor: str | None = None
        pages = 0
        while True:
            page = await store.list(("p",), limit=10, cursor=cursor)
            seen.extend(page.items)
            pages += 1
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
            if pages == 1:  # a write before the cursor does not shift the next page
                await store.put(("p", "n0"), "a-first", {"i": -1})
        addresses = [(i.namespace, i.key) for i in seen]
        assert pages == 3
        assert len(addresses) == 25 and len(set(addresses)) == 25
        assert addresses == sorted(addresses)
        with pytest.raises(ValueError, match="next_cursor"):
            await store.list(("p",), cursor="not-a-cursor")
        with pytest.raises(ValueError, match="limit"):
            await store.list(("p",), limit=0)

    async def test_large_namespace_pages_through_every_item(
        self, store_factory: StoreFactory
    ) -> None:
        store = store_factory()
        n = self.bulk_items
        for start in range(0, n, 500):
            await store.put_many(
                [
                    PutRequest(("bulk",), f"{i:06d}", {"i": i})
                    for i in range(start, min(n, start + 500))
                ]
            )
        count, cursor = 0, None
        while True:
            page = await store.list(("bulk",), limit=1000, cursor=cursor)
            assert [int(i.key) for i in page.items] == list(range(count, count + len(page.items)))
            count += len(page.items)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert count == n

    # -- search ----------------------------------------------------------------------------------

    async def _labelled(self, store_factory: StoreFactory) -> MemoryStore:
        store = store_factory(embedder=HashingEmbedder(), index={("notes",): ["text"]})
        await store.put_many(
            [
                PutRequest(("notes", "u1"), key, {"text": text, "topic": topic})
                for key, topic, text in LABELLED_NOTES
            ]
        )
        return store

    async def test_search_ranks_the_labelled_set(self, store_factory: StoreFactory) -> None:
        store = await self._labelled(store_factory)
        for query, expected in _QUERIES:
            hits = await store.search(("notes",), query, limit=3)
            assert hits[0].key == expected, (query, [(h.key, h.score) for h in hits])
            scores = [h.score for h in hits]
            assert all(s is not None for s in scores)
            assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]

    async def test_search_filters_limits_and_scopes(self, store_factory: StoreFactory) -> None:
        store = await self._labelled(store_factory)
        await store.put(
            ("notes", "u2"), "other", {"text": "green tea every morning", "topic": "food"}
        )
        food = await store.search(("notes", "u1"), "tea", filter={"topic": "food"}, limit=10)
        assert {h.key for h in food} == {"n1", "n2", "n3"}
        assert food[0].key == "n1"
        assert len(await store.search(("notes",), "tea", limit=2)) == 2
        everywhere = await store.search(("notes",), "green tea every morning", limit=1)
        assert everywhere[0].namespace == ("notes", "u2")

    async def test_search_without_query_is_newest_first(self, store_factory: StoreFactory) -> None:
        clock = FakeClock()
        store = store_factory(clock=clock)
        for key in ("old", "mid", "new"):
            await store.put(("s",), key, {"topic": "x"})
            clock.now += 1
        await store.put(("s",), "other", {"topic": "y"})
        hits = await store.search(("s",), filter={"topic": "x"})
        assert [h.key for h in hits] == ["new", "mid", "old"]
        assert all(h.score is None for h in hits)
        with pytest.raises(ValueError, match="embedder"):
            await store.search(("s",), "anything")

    async def test_fields_to_embed_per_namespace(self, store_factory: StoreFactory) -> None:
        store = store_factory(
            embedder=HashingEmbedder(), index={("docs",): ["title"], ("raw",): ["$"]}
        )
        await store.put(("docs",), "a", {"title": "kayak trips", "body": "database tuning"})
        await store.put(("docs",), "b", {"title": "database tuning", "body": "kayak trips"})
        await store.put(("docs",), "hidden", {"title": "kayak trips"}, index=False)
        await store.put(("plain",), "c", {"title": "kayak trips"})  # not indexed: no vector
        hits = await store.search((), "kayak trips", limit=10)
        assert [h.key for h in hits][:1] == ["a"]
        assert {h.key for h in hits} == {"a", "b"}
        await store.put(("raw",), "r", {"anything": "kayak trips"})
        assert (await store.search(("raw",), "kayak trips"))[0].key == "r"

    # -- re-embedding ----------------------------------------------------------------------------

    async def test_reindex_after_an_embedder_change_is_explicit_and_resumable(
        self, store_factory: StoreFactory
    ) -> None:
        index = {("notes",): ["text"]}
        old = store_factory(embedder=HashingEmbedder(64), index=index)
        await old.put_many(
            [
                PutRequest(("notes", "u1"), key, {"text": text, "topic": topic})
                for key, topic, text in LABELLED_NOTES
            ]
        )
        await old.put(("plain",), "raw", {"text": "not indexed"})
        new = store_factory(embedder=HashingEmbedder(128), index=index)
        query, expected = _QUERIES[0]
        assert await new.search(("notes",), query) == []  # stale vectors are not compared
        done: list[str] = []
        page = await new.reindex(("notes",), batch=3)
        done += [i.key for i in page.items]
        assert len(done) == 3 and page.next_cursor is not None
        await new.put(("notes", "u1"), "n8", {"text": "rewritten meanwhile", "topic": "work"})
        while page.next_cursor is not None:  # resumes where the last batch stopped
            page = await new.reindex(("notes",), batch=3, cursor=page.next_cursor)
            done += [i.key for i in page.items]
        assert sorted(done) == [k for k, _, _ in LABELLED_NOTES if k != "n8"]
        assert (await new.search(("notes",), query))[0].key == expected
        assert (await new.search(("notes",), "rewritten meanwhile"))[0].key == "n8"
        n1 = await new.get(("notes", "u1"), "n1")
        assert n1 is not None and n1.rev == 1  # values and revisions untouched
        assert (await new.reindex(("notes",))).items == []  # nothing left to do
