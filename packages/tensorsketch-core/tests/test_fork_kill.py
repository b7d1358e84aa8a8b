"""A reusing fork SIGKILLed at every boundary of its run (#47 item 1 under a real kill): the
process that finishes it runs no effect its origin already ran. SQLite here; PostgreSQL and
Redis in tensorsketch-backends' test_crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorsketch.testing.crash import BackendSpec
from tensorsketch.testing.fork_crash import run_fork_kill_matrix


@pytest.mark.slow
async def test_a_reusing_fork_killed_at_every_boundary_never_repeats_an_effect(
    tmp_path: Path,
) -> None:
    spec = BackendSpec("sqlite", {"dsn": str(tmp_path / "store.db")})
    report = await run_fork_kill_matrix(spec, tmp_path / "work")
    assert len(report.kills) == len(report.boundaries) >= 5
    report.check()
