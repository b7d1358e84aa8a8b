"""``ctx.transaction`` on PostgreSQL: the step's writes commit with its journal record;
killed before the user's write, after it (before the commit) and at every durable boundary
(its commit included), the table holds one row and the step's function ran once after the
last kill; on Redis it is refused, naming the alternative."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorsketch.errors import TransactionUnsupportedError
from tensorsketch.testing.crash import BackendSpec, run_crash_matrix
from tensorsketch.testing.db_steps import DB_STEP_SCENARIO, db_step_graph, run_db_step_kill


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("point", ["before_write", "after_write"])
async def test_killed_inside_the_transaction_postgres(
    pg_dsn: str, pg_schema: str, tmp_path: Path, point: str
) -> None:
    spec = BackendSpec("postgres", {"dsn": pg_dsn, "schema": pg_schema})
    report = await run_db_step_kill(spec, tmp_path, point=point)
    report.check()
    assert report.attempts == 2


@pytest.mark.postgres
@pytest.mark.slow
async def test_killed_at_every_boundary_postgres(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    spec = BackendSpec("postgres", {"dsn": pg_dsn, "schema": pg_schema})
    report = await run_crash_matrix(
        spec, tmp_path, scenario=DB_STEP_SCENARIO, input={}, lease_ttl=1.0
    )  # 1 s: its points run at once (each_point), and a loaded child keeps its lease
    assert "transaction 0:Debit:0:debit" in report.boundaries
    assert all(k.killed for k in report.kills)
    report.check()
    assert report.baseline_values["rows"] == 1


@pytest.mark.redis
async def test_redis_refuses_with_the_alternative(redis_url: str, redis_prefix: str) -> None:
    from tensorsketch.runtime.backends.redis import RedisBackend

    backend = RedisBackend(redis_url, prefix=redis_prefix)
    with pytest.raises(TransactionUnsupportedError, match=r"RedisBackend.*idempotency_key"):
        await db_step_graph().invoke({}, thread_id="t", backend=backend)
    await backend.aclose()
