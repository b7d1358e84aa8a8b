"""``tensorsketch.testing.tally``: what a child process marks, a test counts and waits for."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tensorsketch.testing import tally


def test_a_missing_tally_counts_zero_and_each_mark_one(tmp_path: Path) -> None:
    path = tmp_path / "sweeps"
    assert tally.count(path) == 0
    tally.mark(path, 3)
    tally.mark(path)
    assert tally.count(path) == 2
    assert path.read_text(encoding="utf-8") == "3\n\n"


def test_wait_for_returns_once_the_count_is_reached(tmp_path: Path) -> None:
    path = tmp_path / "sweeps"
    later = threading.Timer(0.1, tally.mark, args=(path,))
    later.start()
    try:
        assert tally.wait_for(path, 1, timeout=30) == 1
    finally:
        later.join()


def test_wait_for_fails_naming_what_it_saw(tmp_path: Path) -> None:
    path = tmp_path / "sweeps"
    tally.mark(path)
    with pytest.raises(AssertionError, match="counted 1, not 2"):
        tally.wait_for(path, 2, timeout=0.1)
