"""The memory contract's parts outside the conformance kit: names, the local embedder, repr."""

from __future__ import annotations

import math

import pytest

from tensorsketch.errors import RegistryError
from tensorsketch.memory import (
    HashingEmbedder,
    InMemoryStore,
    cosine,
    create_memory_store,
    memory_stores,
)
from tensorsketch.memory.sqlite import SqliteStore


def test_core_stores_are_registered_through_the_plugin_hook() -> None:
    assert {"memory", "sqlite"} <= set(memory_stores.names())
    assert memory_stores.origin("sqlite") == "plugin 'core'"
    assert isinstance(create_memory_store("memory"), InMemoryStore)
    assert isinstance(create_memory_store("sqlite", path=":memory:"), SqliteStore)


def test_unknown_store_name_suggests_the_close_one() -> None:
    with pytest.raises(RegistryError, match="Did you mean 'sqlite'"):
        create_memory_store("sqlit")


async def test_hashing_embedder_is_deterministic_and_normalised() -> None:
    embedder = HashingEmbedder(64)
    first, again, other = await embedder.embed(["dark mode", "dark mode", "green tea"])
    assert first == again and len(first) == 64
    assert math.isclose(math.sqrt(sum(x * x for x in first)), 1.0)
    assert cosine(first, again) == pytest.approx(1.0)
    assert cosine(first, other) < 0.5
    assert (await embedder.embed([""]))[0] == [0.0] * 64
    with pytest.raises(ValueError, match="dimension"):
        HashingEmbedder(2)


def test_repr_says_how_search_runs() -> None:
    assert repr(InMemoryStore(embedder=HashingEmbedder())) == (
        "InMemoryStore(search='exact', embedder='hashing:256:3')"
    )
    assert "search='exact'" in repr(SqliteStore())


async def test_query_search_without_embedder_says_how_to_fix() -> None:
    with pytest.raises(ValueError, match="HashingEmbedder"):
        await InMemoryStore().search(("a",), "x")
    with pytest.raises(ValueError, match="embedder="):
        InMemoryStore(index={("a",): ["text"]})


def test_cosine_refuses_vectors_of_different_sizes() -> None:
    assert cosine([1.0, 0.0], [1.0, 0.0]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="2 and 3 numbers"):
        cosine([1.0, 0.0], [1.0, 0.0, 0.0])
