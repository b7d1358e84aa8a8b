"""The tests' PostgreSQL server: is it there, and a schema or database private to one test.

Imports psycopg, so only tests that have it (the distributions whose test extra brings
``tensorsketch-backends[postgres]``) import this module; a test that should skip without the
driver imports it through ``pytest.importorskip``. An unreachable server fails the test
instead of skipping it: a skipped database test would look like a green one.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from tensorsketch.testing.services import POSTGRES_DSN, private_name


def reachable(dsn: str = POSTGRES_DSN) -> str:
    """``dsn`` once a connection to it succeeds; fails the test (5 s at most) otherwise."""
    try:
        psycopg.connect(dsn, connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL is not reachable at {dsn!r} (TS_TEST_POSTGRES_DSN): {exc}")
    return dsn


def drop_schema(dsn: str, name: str) -> None:
    """Drop schema ``name`` and everything in it, if it exists."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def private_schema(kind: str, dsn: str = POSTGRES_DSN) -> Iterator[str]:
    """Yield a fresh schema name (the code under test creates the schema) and drop the schema
    afterwards; for ``yield from`` in a fixture."""
    name = private_name(kind)
    try:
        yield name
    finally:
        drop_schema(dsn, name)


def private_database(kind: str, dsn: str = POSTGRES_DSN) -> Iterator[str]:
    """Create a fresh database on ``dsn``'s server, yield its DSN, and drop it afterwards even
    with sessions still open (``WITH (FORCE)``); for ``yield from`` in a fixture.

    For code that owns a whole database (a Studio listing every thread of its backend, say),
    where a schema is not enough. Fails the test when the server is unreachable.
    """
    name = private_name(kind)
    try:
        admin = psycopg.connect(dsn, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL is not reachable at {dsn!r} (TS_TEST_POSTGRES_DSN): {exc}")
    with admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"{dsn.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            admin.execute(drop.format(sql.Identifier(name)))
