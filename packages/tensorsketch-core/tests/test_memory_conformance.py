"""The memory store conformance kit on the stores core ships."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tensorsketch.memory import InMemoryStore, MemoryStore
from tensorsketch.memory.sqlite import SqliteStore
from tensorsketch.testing.memory_conformance import MemoryStoreConformance, StoreFactory


class TestInMemoryStore(MemoryStoreConformance):
    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        first: list[InMemoryStore] = []

        def make(**options: Any) -> MemoryStore:
            store = InMemoryStore(share=first[0] if first else None, **options)
            first.append(store)
            return store

        return make


class TestSqliteStore(MemoryStoreConformance):
    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        return lambda **options: SqliteStore(tmp_path / "memory.db", **options)


class TestSqliteStoreExactScan(MemoryStoreConformance):
    """The same file store with its vector index turned off (the fallback where sqlite-vec
    cannot load): ``TestSqliteStore`` runs on vec0 wherever it can. Paging never touches the
    index, so the 100,000-item namespace runs once, there (a thousand here)."""

    bulk_items = 1_000

    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> StoreFactory:
        return lambda **options: SqliteStore(
            tmp_path / "memory.db", vector_index="exact", **options
        )
