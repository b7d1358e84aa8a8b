"""Fixtures shared by the core's test modules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def canary(tmp_path: Path) -> Iterator[Path]:
    """A file a hostile payload would create if it ran code; the test fails if it exists."""
    path = tmp_path / "canary"
    yield path
    assert not path.exists(), "a hostile payload ran code"
