"""The crash harness against the real servers: a child process runs the scenario and is
SIGKILLed at every durable boundary in turn (including halfway through the Send fan-out);
each resume must run every side effect exactly once and end in the uninterrupted state."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorsketch.durable.modes import Durability
from tensorsketch.testing.crash import (
    NESTED_SCENARIO,
    BackendSpec,
    CrashReport,
    run_crash_matrix,
    run_fanout_crash,
)
from tensorsketch.testing.fork_crash import run_fork_kill_matrix


@pytest.mark.postgres
@pytest.mark.slow
async def test_crash_matrix_postgres(pg_dsn: str, pg_schema: str, tmp_path: Path) -> None:
    report = await run_crash_matrix(
        BackendSpec("postgres", {"dsn": pg_dsn, "schema": pg_schema}), tmp_path
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
        BackendSpec("redis", {"dsn": redis_url, "prefix": redis_prefix}), tmp_path
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
    report = await run_crash_matrix(spec, tmp_path, scenario=NESTED_SCENARIO)
    assert len(report.kills) == len(report.boundaries) == 24  # core's EXPECTED_NESTED_BOUNDARIES
    assert all(k.killed for k in report.kills)
    report.check()


@pytest.mark.redis
@pytest.mark.slow
async def test_crash_matrix_two_subgraph_levels_deep_redis(
    redis_url: str, redis_prefix: str, tmp_path: Path
) -> None:
    spec = BackendSpec("redis", {"dsn": redis_url, "prefix": redis_prefix})
    report = await run_crash_matrix(spec, tmp_path, scenario=NESTED_SCENARIO)
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
    report = await run_stall_matrix(spec, tmp_path)
    assert len(report.points) == len(report.boundaries) - 1 >= 6
    report.check()  # 0 duplicate effects, 0 reverted writes, the stale owner: LeaseLostError


@pytest.mark.redis
@pytest.mark.slow
async def test_stall_matrix_redis(redis_url: str, redis_prefix: str, tmp_path: Path) -> None:
    from tensorsketch.testing.stall import run_stall_matrix

    spec = BackendSpec("redis", {"dsn": redis_url, "prefix": redis_prefix})
    report = await run_stall_matrix(spec, tmp_path)
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
