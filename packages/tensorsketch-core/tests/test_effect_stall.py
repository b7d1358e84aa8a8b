"""The stall harness inside an effect (#47 items 2 and 3): a runner frozen between calling
out and recording (the effect is in doubt), or inside a database step's transaction, is
taken over and wakes up. The resume keeps the effect's policy, the stale runner is fenced
and nothing it still tries to write lands. In memory and on SQLite here; PostgreSQL and
Redis in tensorsketch-backends' test_crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.testing.crash import BackendSpec
from tensorsketch.testing.effect_stall import run_db_step_stall, run_in_doubt_stall

#: (policy, keyed): the three policies, and a keyed effect (retried: the key dedupes it).
POLICIES = [("retry", False), ("ask", False), ("fail", False), ("retry", True)]


@pytest.mark.slow
@pytest.mark.parametrize(("policy", "keyed"), POLICIES)
async def test_an_effect_in_doubt_after_a_stall_in_memory_keeps_its_policy(
    policy: str, keyed: bool, tmp_path: Path
) -> None:
    stall = await run_in_doubt_stall(InMemoryBackend(), tmp_path, policy=policy, keyed=keyed)
    stall.check()
    # retry without a key: the stale runner's payment and the retry (the policy's price)
    assert stall.report.payments == (2 if (policy, keyed) == ("retry", False) else 1)


@pytest.mark.slow
@pytest.mark.parametrize(("policy", "keyed"), POLICIES)
async def test_an_effect_in_doubt_after_a_stall_on_sqlite_keeps_its_policy(
    policy: str, keyed: bool, tmp_path: Path
) -> None:
    spec = BackendSpec("sqlite", {"dsn": str(tmp_path / "store.db")})
    stall = await run_in_doubt_stall(spec, tmp_path / "work", policy=policy, keyed=keyed)
    stall.check()
    assert stall.report.payments == (2 if (policy, keyed) == ("retry", False) else 1)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["before_write", "after_write"])
async def test_a_database_step_stalled_before_its_commit_on_sqlite_writes_once(
    point: str, tmp_path: Path
) -> None:
    spec = BackendSpec("sqlite", {"dsn": str(tmp_path / "store.db")})
    stall = await run_db_step_stall(spec, tmp_path / "work", point=point)
    stall.check()  # one call, one row; the stale runner fenced after its commit
