"""A fork whose runner stalls past its lease (#47 item 1 under the stall harness): another
runner finishes it, a third writes into it, and the stale one wakes up. It is fenced
(LeaseLostError), the fork runs each effect as its ``effects=`` promises (none again with
"reuse", each of the origin's later ones once with "rerun") and the newest write stays.
In memory (the stall is a paused task) and on SQLite (a SIGSTOPped process); PostgreSQL and
Redis in tensorsketch-backends' test_crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorsketch.durable.lineage import ForkEffects
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.testing.crash import BackendSpec
from tensorsketch.testing.fork_stall import run_fork_stall_matrix

#: The clean fork's effects per choice: the origin's three shipments and the notice after
#: the fork point run again only when asked to ("rerun"); the charge came before it.
RERUN = {"Note:notify": 1, "Ship#0:ship:book": 1, "Ship#1:ship:lamp": 1, "Ship#2:ship:mug": 1}
EXPECTED: dict[str, dict[str, int]] = {"reuse": {}, "rerun": RERUN}


@pytest.mark.slow
@pytest.mark.parametrize("effects", ["reuse", "rerun"])
async def test_a_stalled_fork_in_memory_is_fenced_and_repeats_nothing(
    effects: ForkEffects, tmp_path: Path
) -> None:
    report = await run_fork_stall_matrix(InMemoryBackend(), tmp_path, effects=effects)
    assert report.clean_counts == EXPECTED[effects]
    # every boundary but the last (the run has let go of its lease there): 11 or 15
    assert len(report.points) == len(report.boundaries) - 1 >= 10
    report.check()


@pytest.mark.slow
@pytest.mark.parametrize("effects", ["reuse", "rerun"])
async def test_a_stalled_fork_on_sqlite_is_fenced_and_repeats_nothing(
    effects: ForkEffects, tmp_path: Path
) -> None:
    spec = BackendSpec("sqlite", {"dsn": str(tmp_path / "store.db")})
    report = await run_fork_stall_matrix(spec, tmp_path / "work", effects=effects)
    assert report.clean_counts == EXPECTED[effects]
    assert len(report.points) == len(report.boundaries) - 1 >= 10
    report.check()
