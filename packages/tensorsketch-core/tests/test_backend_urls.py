"""``tensorsketch.backend_urls``: a ``--backend`` value, read the same by every command."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorsketch.backend_urls import backend_label, open_backend, parse_backend_options
from tensorsketch.errors import RegistryError
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.sqlite import SqliteBackend


async def test_a_url_or_a_name_opens_the_backend_it_names(tmp_path: Path) -> None:
    store = open_backend(f"sqlite:///{tmp_path / 'runs.db'}")
    assert isinstance(store, SqliteBackend)
    assert backend_label(f"sqlite:///{tmp_path / 'runs.db'}", store) == "runs.db"
    await store.aclose()
    assert isinstance(open_backend("memory"), InMemoryBackend)
    with pytest.raises(ValueError, match="--backend needs a URL such as sqlite:///runs"):
        open_backend(" ")
    with pytest.raises(RegistryError, match="unknown backend 'mongodb'"):
        open_backend("mongodb://db/x")


def test_options_and_labels_say_what_is_wrong_and_hide_credentials() -> None:
    assert parse_backend_options(["schema=t1", "prefix=a=b"]) == {"schema": "t1", "prefix": "a=b"}
    with pytest.raises(ValueError, match="--backend-option takes KEY=VALUE"):
        parse_backend_options(["schema"])
    memory = InMemoryBackend()
    label = backend_label("postgresql://ada:pw@db.local:5433/shop?sslmode=require", memory)
    assert label == "db.local:5433/shop"
    assert backend_label("memory", memory) == "memory"
