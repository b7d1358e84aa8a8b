"""The crash harness against the real servers: a child process runs the scenario and is
SIGKILLed at every durable boundary in turn (including halfway through the Send fan-out);
each resume must run every side effect exactly once and end in the uninterrupted state.

The matrices check several points at once (``each_point``), which loads the machine: every
lease here is 1 s, not the harnesses' 0.5 s default, so a child keeps its own lease until
its point (the wait for a lease to lapse overlaps with the other points')."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorsketch.durable.lineage import ForkEffects
from tensorsketch.durable.modes import Durability
from tensorsketch.testing.crash import (
    NESTED_SCENARIO,
    BackendSpec,
    CrashReport,
    run_crash_matrix,
    run_fanout_crash,
)
from tensorsketch.testing.effect_stall import run_db_step_stall, run_in_doubt_stall
from tensorsketch.testing.fork_crash import run_fork_kill_matrix
from tensorsketch.testing.fork_stall import run_fork_stall_matrix


@pytest.mark.postgres
@pytest.mark.slow
async def test_crash_matrix_postgres(pg_dsn: str, pg_schema: str, tmp_path: Path) -> None:
    report = await run_crash_matrix(
        BackendSpec("postgres", {"dsn": pg_dsn, "schema": pg_schema}), tmp_path, lease_ttl=1.0
    )
    assert (
        len(report.kills) == len(report.boundaries) == 18
    )  # see EXPECTED_BOUNDARIES in core's test_durability_crash.py
    assert all(k.killed for k in report.kills)
    report.check()


@pytest.mark.redis
@pytest.mark.slow
async def test_crash_matrix_redis(redis_url: str, redis_prefix: str, tmp_path: Path) -> None:
    report = await run_crash_matrix(
        BackendSpec("redis", {"dsn": redis_url, "prefix": redis_prefix}), tmp_path, lease_ttl=1.0
    )
    assert (
        len(report.kills) == len(report.boundaries) == 18
    )  # see EXPECTED_BOUNDARIES in core's test_durability_crash.py
    assert all(k.killed for k in report.kills)
    report.check()


def _check_durability_promise(report: CrashReport) -> None:
    """Exactly-once on every resume, and the mode's promise at every kill point (see core's
    check_durability_promise in test_durability_crash.py)."""
    assert all(k.killed for k in report.kills)
    report.check()
    checkpoints = [b for b in report.boundaries if "checkpoint" in b]
    if report.durability == "exit":  # the input with the lease, the end with the release
        assert len(checkpoints) == 2 and checkpoints[-1].endswith("+ release")
    else:
        assert len(checkpoints) == 4 and report.most_behind <= 1


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("durability", ["async", "exit"])
async def test_crash_matrix_postgres_in_each_durability_mode(
    pg_dsn: str, pg_schema: str, tmp_path: Path, durability: Durability
) -> None:
    spec = BackendSpec("postgres", {"dsn": pg_dsn, "schema": pg_schema})
    report = await run_crash_matrix(spec, tmp_path, durability=durability, lease_ttl=1.0)
    _check_durability_promise(report)


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.parametrize("durability", ["async", "exit"])
async def test_crash_matrix_redis_in_each_durability_mode(
    redis_url: str, redis_prefix: str, tmp_path: Path, durability: Durability
) -> None:
    spec = BackendSpec("redis", {"dsn": redis_url, "prefix": redis_prefix})
    report = await run_crash_matrix(spec, tmp_path, durability=durability, lease_ttl=1.0)
    _check_durability_promise(report)


@pytest.mark.postgres
@pytest.mark.slow
async def test_crash_matrix_two_subgraph_levels_deep_postgres(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    spec = BackendSpec("postgres", {"dsn": pg_dsn, "schema": pg_schema})
    report = await run_crash_matrix(spec, tmp_path, scenario=NESTED_SCENARIO, lease_ttl=1.0)
    assert len(report.kills) == len(report.boundaries) == 24  # core's EXPECTED_NESTED_BOUNDARIES
    assert all(k.killed for k in report.kills)
    report.check()


@pytest.mark.redis
@pytest.mark.slow
async def test_crash_matrix_two_subgraph_levels_deep_redis(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    spec = BackendSpec("redis", {"dsn": redis_url, "prefix": redis_prefix})
    report = await run_crash_matrix(spec, tmp_path, scenario=NESTED_SCENARIO, lease_ttl=1.0)
    assert len(report.kills) == len(report.boundaries) == 24  # core's EXPECTED_NESTED_BOUNDARIES
    assert all(k.killed for k in report.kills)
    report.check()


@pytest.mark.postgres
@pytest.mark.slow
async def test_fanout_sigkilled_halfway_postgres(pg_dsn: str, pg_schema: str) -> None:
    spec = BackendSpec("postgres", {"dsn": pg_dsn, "schema": pg_schema})
    report = await run_fanout_crash(spec, tasks=1000, kill_after=500)
    assert report.killed and report.final_ok
    # not 1,000: the >= 500 finished workers journaled before the SIGKILL are kept (how many
    # more share the last batch depends on the load).
    assert 0 < report.rerun <= 500, report


@pytest.mark.redis
@pytest.mark.slow
async def test_fanout_sigkilled_halfway_redis(redis_url: str, redis_prefix: str) -> None:
    spec = BackendSpec("redis", {"dsn": redis_url, "prefix": redis_prefix})
    report = await run_fanout_crash(spec, tasks=1000, kill_after=500)
    assert report.killed and report.final_ok
    assert 0 < report.rerun <= 500, report


@pytest.mark.postgres
@pytest.mark.slow
async def test_stall_matrix_postgres(pg_dsn: str, pg_schema: str, tmp_path: Path) -> None:
    from tensorsketch.testing.stall import run_stall_matrix

    spec = BackendSpec("postgres", {"dsn": pg_dsn, "schema": pg_schema})
    report = await run_stall_matrix(spec, tmp_path, lease_ttl=1.0)
    assert len(report.points) == len(report.boundaries) - 1 >= 6
    report.check()  # 0 duplicate effects, 0 reverted writes, the stale owner: LeaseLostError


@pytest.mark.redis
@pytest.mark.slow
async def test_stall_matrix_redis(redis_url: str, redis_prefix: str, tmp_path: Path) -> None:
    from tensorsketch.testing.stall import run_stall_matrix

    spec = BackendSpec("redis", {"dsn": redis_url, "prefix": redis_prefix})
    report = await run_stall_matrix(spec, tmp_path, lease_ttl=1.0)
    assert len(report.points) == len(report.boundaries) - 1 >= 6
    report.check()


# -- a reusing fork under a real kill (#47) ---------------------------------------------------


@pytest.mark.postgres
@pytest.mark.slow
async def test_a_reusing_fork_killed_at_every_boundary_postgres(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    spec = BackendSpec("postgres", {"dsn": pg_dsn, "schema": pg_schema})
    report = await run_fork_kill_matrix(spec, tmp_path)
    assert len(report.kills) == len(report.boundaries) >= 5
    report.check()


@pytest.mark.redis
@pytest.mark.slow
async def test_a_reusing_fork_killed_at_every_boundary_redis(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    spec = BackendSpec("redis", {"dsn": redis_url, "prefix": redis_prefix})
    report = await run_fork_kill_matrix(spec, tmp_path)
    assert len(report.kills) == len(report.boundaries) >= 5
    report.check()


# -- a fork whose runner stalls past its lease (#47) ------------------------------------------

#: The clean fork's effects per choice (core's test_fork_stall.EXPECTED).
FORK_STALL_EXPECTED: dict[str, dict[str, int]] = {
    "reuse": {},
    "rerun": {"Note:notify": 1, "Ship#0:ship:book": 1, "Ship#1:ship:lamp": 1, "Ship#2:ship:mug": 1},
}


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("effects", ["reuse", "rerun"])
async def test_a_stalled_fork_on_postgres_is_fenced_and_repeats_nothing(
    effects: ForkEffects, pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    spec = BackendSpec("postgres", {"dsn": pg_dsn, "schema": pg_schema})
    report = await run_fork_stall_matrix(spec, tmp_path, effects=effects)
    assert report.clean_counts == FORK_STALL_EXPECTED[effects]
    assert len(report.points) == len(report.boundaries) - 1 >= 10
    report.check()


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.parametrize("effects", ["reuse", "rerun"])
async def test_a_stalled_fork_on_redis_is_fenced_and_repeats_nothing(
    effects: ForkEffects, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    spec = BackendSpec("redis", {"dsn": redis_url, "prefix": redis_prefix})
    report = await run_fork_stall_matrix(spec, tmp_path, effects=effects)
    assert report.clean_counts == FORK_STALL_EXPECTED[effects]
    assert len(report.points) == len(report.boundaries) - 1 >= 10
    report.check()


# -- a runner stalled inside an effect (#47 items 2 and 3) ------------------------------------

IN_DOUBT_POLICIES = [("retry", False), ("ask", False), ("fail", False), ("retry", True)]


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize(("policy", "keyed"), IN_DOUBT_POLICIES)
async def test_an_effect_in_doubt_after_a_stall_on_postgres_keeps_its_policy(
    policy: str, keyed: bool, pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    spec = BackendSpec("postgres", {"dsn": pg_dsn, "schema": pg_schema})
    stall = await run_in_doubt_stall(spec, tmp_path, policy=policy, keyed=keyed)
    stall.check()
    assert stall.report.payments == (2 if (policy, keyed) == ("retry", False) else 1)


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.parametrize(("policy", "keyed"), IN_DOUBT_POLICIES)
async def test_an_effect_in_doubt_after_a_stall_on_redis_keeps_its_policy(
    policy: str, keyed: bool, redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    spec = BackendSpec("redis", {"dsn": redis_url, "prefix": redis_prefix})
    stall = await run_in_doubt_stall(spec, tmp_path, policy=policy, keyed=keyed)
    stall.check()
    assert stall.report.payments == (2 if (policy, keyed) == ("retry", False) else 1)


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("point", ["before_write", "after_write"])
async def test_a_database_step_stalled_before_its_commit_on_postgres_writes_once(
    point: str, pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    spec = BackendSpec("postgres", {"dsn": pg_dsn, "schema": pg_schema})
    stall = await run_db_step_stall(spec, tmp_path, point=point)
    stall.check()  # one call, one row; the takeover waited; the stale runner fenced
