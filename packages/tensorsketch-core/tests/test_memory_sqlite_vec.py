"""SqliteStore's vector index: sqlite-vec's ``vec0`` table when the connection can load the
extension (the ``sqlite-vec`` extra), an exact scan otherwise — the same answers either way,
and the store's repr says which."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tensorsketch.memory import HashingEmbedder
from tensorsketch.memory.sqlite import SqliteStore, sqlite_vec_unavailable

WHY_NOT = sqlite_vec_unavailable()
needs_vec = pytest.mark.skipif(WHY_NOT is not None, reason=f"sqlite-vec cannot load: {WHY_NOT}")

WORDS = [
    "tea",
    "coffee",
    "green",
    "dark",
    "mode",
    "editor",
    "dinner",
    "vegetarian",
    "meat",
    "train",
    "bike",
    "rain",
    "sun",
]


def _note(rng: random.Random) -> dict[str, str]:
    return {"text": " ".join(rng.choice(WORDS) for _ in range(5))}


async def _fill(store: SqliteStore, n: int = 300) -> None:
    rng = random.Random(7)
    for i in range(n):
        await store.put(("notes", f"u{i % 4}"), f"n{i}", _note(rng))
    await store.put(("notes", "u0"), "blank", {"text": ""})  # a zero vector
    await store.put(("notes", "u0"), "soon-gone", {"text": "green tea"}, ttl=60)


def _hits(items: list) -> list[tuple[tuple[str, ...], str, float]]:
    return [(i.namespace, i.key, round(i.score, 4)) for i in items]


@needs_vec
async def test_vec0_answers_as_the_exact_scan_does(tmp_path: Path) -> None:
    clock = [1000.0]
    options = {"embedder": HashingEmbedder(), "clock": lambda: clock[0]}
    indexed = SqliteStore(tmp_path / "vec.db", vector_index="vec0", **options)
    exact = SqliteStore(tmp_path / "exact.db", vector_index="exact", **options)
    assert "search='vec0'" in repr(indexed) and "search='exact'" in repr(exact)
    for store in (indexed, exact):
        await _fill(store)
        await store.put(("notes", "u1"), "n1", {"text": "rain rain bike"})  # overwritten
        await store.delete(("notes", "u2"), "n2")
    clock[0] += 120  # "soon-gone" expired
    for prefix, query, limit in [
        ((), "green tea", 10),
        (("notes",), "dark mode editor", 5),
        (("notes", "u0"), "green tea", 7),
        (("notes", "u1"), "rain bike", 3),
        (("notes", "u3"), "vegetarian dinner", 200),  # more than the namespace holds
        (("nobody",), "tea", 3),
    ]:
        want = await exact.search(prefix, query, limit=limit)
        got = await indexed.search(prefix, query, limit=limit)
        assert _hits(got) == _hits(want), (prefix, query)
    assert "soon-gone" not in {i.key for i in await indexed.search((), "green tea", limit=50)}
    filtered = await indexed.search(("notes",), "tea", filter={"text": "rain rain bike"})
    assert [i.key for i in filtered] == ["n1"]
    await indexed.aclose()
    await exact.aclose()


@needs_vec
async def test_a_file_written_without_the_index_is_indexed_when_opened_with_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "memory.db"
    plain = SqliteStore(path, embedder=HashingEmbedder(), vector_index="exact")
    await _fill(plain, 40)
    want = _hits(await plain.search(("notes",), "green tea", limit=5))
    await plain.aclose()
    indexed = SqliteStore(path, embedder=HashingEmbedder(), vector_index="vec0")
    assert indexed.search_mode == "vec0"
    assert _hits(await indexed.search(("notes",), "green tea", limit=5)) == want
    # a new embedder gets its own table, filled as reindex() re-embeds
    bigger = SqliteStore(path, embedder=HashingEmbedder(512), vector_index="vec0")
    assert await bigger.search(("notes",), "green tea") == []
    page = await bigger.reindex(("notes",), batch=100)
    assert page.next_cursor is None
    exact = SqliteStore(path, embedder=HashingEmbedder(512), vector_index="exact")
    assert _hits(await bigger.search((), "tea", limit=4)) == _hits(
        await exact.search((), "tea", limit=4)
    )
    for store in (indexed, bigger, exact):
        await store.aclose()


def test_the_exact_scan_is_the_fallback_and_asking_for_vec0_without_it_says_why() -> None:
    assert SqliteStore(embedder=HashingEmbedder(), vector_index="exact").search_mode == "exact"
    assert SqliteStore().search_mode == "exact"  # no embedder: nothing to index
    with pytest.raises(ValueError, match="embedder"):
        SqliteStore(vector_index="vec0")
    with pytest.raises(ValueError, match="'auto', 'vec0' or 'exact'"):
        SqliteStore(embedder=HashingEmbedder(), vector_index="hnsw")  # type: ignore[arg-type]
    auto = SqliteStore(embedder=HashingEmbedder())
    assert auto.search_mode == ("exact" if WHY_NOT else "vec0")
    if WHY_NOT is not None:
        with pytest.raises(RuntimeError, match="sqlite-vec"):
            SqliteStore(embedder=HashingEmbedder(), vector_index="vec0")
