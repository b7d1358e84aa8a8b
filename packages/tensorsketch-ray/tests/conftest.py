"""Fixtures: a two-node Ray cluster inside a private network namespace, and PostgreSQL.

How the isolation works (``tensorsketch.ray.testing`` has the details): a holder process owns
a network namespace with only ``lo``; the Ray head, the second node and every driver are
started inside it with ``nsenter --net`` and told their address is 127.0.0.1. Nothing of the
cluster can bind a real interface, because the namespace has none, and it does not even bind
the root namespace's loopback (``test_cluster.py`` checks both). PostgreSQL listens on
127.0.0.1:5432 of the *root* namespace, which the cluster cannot reach: processes inside use
the server's Unix socket (a filesystem path, visible across network namespaces) — the
``pg_socket_dsn`` fixture — while the test process itself keeps using TCP. Both name the same
database, so a test submits and checks runs directly in the store.

The cluster is started once per session (two ``ray start`` calls, ~20 s on 2 cores) and
stopped by SIGKILLing every process carrying its marker, never by ``ray stop`` (which would
end every Ray process on the machine, including other test sessions').
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tensorsketch.ray.exceptions import RayClusterError
from tensorsketch.ray.testing import LocalRayCluster, PrivateNetwork, unix_socket_dsn
from tensorsketch.testing import postgres_server
from tensorsketch.testing.services import private_name

HERE = Path(__file__).parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """The test database over TCP (for this process, in the root network namespace)."""
    return postgres_server.reachable()


@pytest.fixture(scope="session")
def pg_socket_dsn(pg_dsn: str) -> str:
    """The same database through the server's Unix socket (for processes in the namespace)."""
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SHOW unix_socket_directories").fetchone()
    directories = [d.strip() for d in str(row[0] if row else "").split(",") if d.strip()]
    if not directories:
        pytest.fail(
            "PostgreSQL has no unix_socket_directories; the Ray cluster (in a private network "
            "namespace) can reach it only through a Unix socket."
        )
    return unix_socket_dsn(pg_dsn, directories[0])


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A schema private to this test (the backend creates it; it is dropped after)."""
    yield from postgres_server.private_schema("ray", pg_dsn)


@pytest.fixture(scope="session")
def private_network() -> Iterator[PrivateNetwork]:
    network = PrivateNetwork()
    try:
        network.start()
    except RayClusterError as exc:
        pytest.fail(str(exc))
    yield network
    network.close()


@pytest.fixture(scope="session")
def effects_schema(pg_dsn: str) -> Iterator[str]:
    """The schema of the fleet app's effect counters (``fleet_app.py``), for the session;
    each test counts only its own threads."""
    from fleet_app import SCHEMA_SQL

    name = private_name("rayfx")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
        conn.execute(SCHEMA_SQL.format(schema=name))
    yield name
    postgres_server.drop_schema(pg_dsn, name)


@pytest.fixture(scope="session")
def ray_cluster(
    private_network: PrivateNetwork, pg_socket_dsn: str, effects_schema: str
) -> Iterator[LocalRayCluster]:
    """A head and a second node ``b`` (custom resources ``node_head`` / ``node_b``), 2
    logical CPUs each.

    Every process of it imports the tests' modules (``PYTHONPATH``: the graph a worker pool
    runs is ``fleet_app:agent``) and finds the effect counters' database in its environment.
    """
    env = {
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        ),
        "TS_FLEET_EFFECTS_DSN": pg_socket_dsn,
        "TS_FLEET_EFFECTS_SCHEMA": effects_schema,
    }
    cluster = LocalRayCluster(private_network, env=env)
    try:
        cluster.start_head(num_cpus=2, resources={"node_head": 1})
        cluster.add_node("b", num_cpus=2, resources={"node_b": 1})
    except BaseException:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()
