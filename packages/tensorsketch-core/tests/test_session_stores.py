"""The session store contract on the stores core ships, and their registry."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tensorsketch.memory import SessionStore, create_session_store, session_stores
from tensorsketch.memory.sessions import InMemorySessionStore
from tensorsketch.memory.sqlite_sessions import SqliteSessionStore
from tensorsketch.messages import user
from tensorsketch.testing.session_conformance import SessionFactory, SessionStoreConformance


class TestInMemorySessionStore(SessionStoreConformance):
    @pytest.fixture
    def session_factory(self) -> SessionFactory:
        shared = InMemorySessionStore()
        return lambda: shared


class TestSqliteSessionStore(SessionStoreConformance):
    @pytest.fixture
    async def session_factory(self, tmp_path: Path) -> AsyncIterator[SessionFactory]:
        made: list[SessionStore] = []

        def make() -> SessionStore:
            made.append(SqliteSessionStore(tmp_path / "sessions.db"))
            return made[-1]

        yield make
        for store in made:
            await store.aclose()


def test_core_stores_register_through_the_plugin_hook() -> None:
    assert {"memory", "sqlite"} <= set(session_stores.names())
    assert session_stores.origin("sqlite") == "plugin 'core'"


async def test_create_session_store_by_name(tmp_path: Path) -> None:
    store = create_session_store("sqlite", path=f"sqlite:///{tmp_path / 's.db'}")
    assert repr(store) == f"SqliteSessionStore({str(tmp_path / 's.db')!r})"
    assert await store.append("s", [user("hi")]) == 1
    await store.aclose()


def test_a_bad_table_prefix_is_refused() -> None:
    with pytest.raises(ValueError, match="table_prefix must be letters"):
        SqliteSessionStore(table_prefix="x; DROP")
