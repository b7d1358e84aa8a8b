"""Effects in doubt on PostgreSQL and Redis: a child SIGKILLed between an effect's intent
and its result; the resume follows the effect's policy (see core's test_effects_in_doubt)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorsketch.testing.crash import BackendSpec
from tensorsketch.testing.in_doubt import run_in_doubt

CASES = [("retry", False), ("ask", False), ("fail", False), ("fail", True)]


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize(("policy", "keyed"), CASES)
async def test_in_doubt_policy_postgres(
    pg_dsn: str, pg_schema: str, tmp_path: Path, policy: str, keyed: bool
) -> None:
    spec = BackendSpec("postgres", {"dsn": pg_dsn, "schema": pg_schema})
    report = await run_in_doubt(spec, tmp_path, policy=policy, keyed=keyed)
    assert report.killed
    report.check()


@pytest.mark.redis
@pytest.mark.slow
@pytest.mark.parametrize(("policy", "keyed"), CASES)
async def test_in_doubt_policy_redis(
    redis_url: str, redis_prefix: str, tmp_path: Path, policy: str, keyed: bool
) -> None:
    spec = BackendSpec("redis", {"dsn": redis_url, "prefix": redis_prefix})
    report = await run_in_doubt(spec, tmp_path, policy=policy, keyed=keyed)
    assert report.killed
    report.check()
