"""Where the tests find PostgreSQL and Redis, and names no other test run can collide with.

Every distribution whose tests touch a real server reads the addresses from
``TS_TEST_POSTGRES_DSN`` / ``TS_TEST_REDIS_URL`` (the 127.0.0.1 servers ``tools/services.sh``
starts, by default). Many runs share those servers — two nox sessions, two engineers, two
pytest-xdist workers of one run — so each test writes into a schema, database or key prefix of
its own, named by :func:`private_name` after the run (``TS_TEST_RUN_ID``, which nox sets) and
the xdist worker, and removed afterwards.

A server that does not answer fails the test (:mod:`~tensorsketch.testing.postgres_server`,
:mod:`~tensorsketch.testing.redis_server`): a skipped database test would look like a green
one. This module needs no driver, so any test may import it.
"""

from __future__ import annotations

import os
import uuid
from typing import Final

#: The PostgreSQL server the tests use, as a ``postgresql://`` DSN naming an existing database.
POSTGRES_DSN: Final = os.environ.get(
    "TS_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
)
#: The Redis server the tests use.
REDIS_URL: Final = os.environ.get("TS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _run_id() -> str:
    """``TS_TEST_RUN_ID`` (a random one when unset) plus the pytest-xdist worker (``gw0``):
    the workers of one run share the run id, and must not share names."""
    run = os.environ.get("TS_TEST_RUN_ID") or uuid.uuid4().hex[:6]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    # Only letters and digits: the id goes into quoted SQL identifiers and Redis key patterns.
    return "".join(c for c in run + worker if c.isalnum()).lower()


#: This test process's share of the names on the shared servers.
RUN_ID: Final = _run_id()


def private_name(kind: str) -> str:
    """A fresh schema / database / key-prefix name, ``ts_<run>_<kind>_<random>``, lower case
    (PostgreSQL folds unquoted names), unique to this process and call."""
    return f"ts_{RUN_ID}_{kind}_{uuid.uuid4().hex[:8]}".lower()
