"""The shared backend conformance suite, run against the two stores core ships."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tensorsketch.runtime.backends import InMemoryBackend, SqliteBackend
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.testing.backend_conformance import BackendConformance, BackendFactory


class TestInMemoryBackend(BackendConformance):
    @pytest.fixture
    def backend_factory(self) -> BackendFactory:
        shared = InMemoryBackend()

        def make(**kwargs: Any) -> Backend:
            return InMemoryBackend(**kwargs) if kwargs else shared

        return make


class TestSqliteBackend(BackendConformance):
    @pytest.fixture
    def backend_factory(self, tmp_path: Path) -> BackendFactory:
        def make(**kwargs: Any) -> Backend:
            name = "pickled.db" if kwargs else "store.db"
            return SqliteBackend(tmp_path / name, **kwargs)

        return make


class TestSqliteBackendInMemoryDatabase(BackendConformance):
    """``SqliteBackend(":memory:")``: one private database per backend object."""

    @pytest.fixture
    def backend_factory(self) -> BackendFactory:
        shared = SqliteBackend(":memory:")

        def make(**kwargs: Any) -> Backend:
            return SqliteBackend(":memory:", **kwargs) if kwargs else shared

        return make
