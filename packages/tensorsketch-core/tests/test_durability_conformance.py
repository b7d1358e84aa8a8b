"""The shared backend conformance suite, run against the two stores core ships."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.sql import SqlBackend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
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


class TestSqliteBackendOnCallingThread(BackendConformance):
    """``threaded=False``: every statement runs on the event loop's thread."""

    @pytest.fixture
    def backend_factory(self, tmp_path: Path) -> BackendFactory:
        def make(**kwargs: Any) -> Backend:
            name = "pickled.db" if kwargs else "store.db"
            return SqliteBackend(tmp_path / name, threaded=False, **kwargs)

        return make


class TestSqliteBackendInMemoryDatabase(BackendConformance):
    """``SqliteBackend(":memory:")``: one private database per backend object."""

    @pytest.fixture
    def backend_factory(self) -> BackendFactory:
        shared = SqliteBackend(":memory:")

        def make(**kwargs: Any) -> Backend:
            return SqliteBackend(":memory:", **kwargs) if kwargs else shared

        return make


class PlainDbApiSqlite(SqlBackend):
    """The smallest dialect: a DB-API driver with implicit transactions, nothing else.

    It shows what a new SQL store costs (``connect()`` plus the dialect attributes) and that
    the shared base does not rely on anything ``SqliteBackend`` adds.
    """

    name = "plain-sqlite"
    float_type = "REAL"
    now_sql = "((julianday('now') - 2440587.5) * 86400.0)"

    def __init__(self, path: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path

    def connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, check_same_thread=False, timeout=30)


class TestPlainDbApiDialect(BackendConformance):
    @pytest.fixture
    def backend_factory(self, tmp_path: Path) -> BackendFactory:
        def make(**kwargs: Any) -> Backend:
            return PlainDbApiSqlite(tmp_path / ("p.db" if kwargs else "s.db"), **kwargs)

        return make


class ComposedForks(InMemoryBackend):
    """The in-memory store answering ``list_forks`` with :class:`Backend`'s composed default
    (what a third-party store that lists threads but has no fork query gets)."""

    list_forks = Backend.list_forks


@pytest.mark.asyncio
async def test_the_composed_list_forks_default() -> None:
    store = ComposedForks()
    await BackendConformance().test_list_forks_links_a_thread_to_its_forks(store)
