"""The pool's pieces that need no cluster: dealing runs, what is claimable, the spec and DSN
checks, the ``tensorsketch worker`` command's refusals, which node an actor is pinned to."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import Any

import pytest

from tensorsketch.ray import RayFleetError, WorkerPool, WorkerSpec, _pool, backend_from_dsn
from tensorsketch.ray._pool import _claimable, spread
from tensorsketch.ray.testing import unix_socket_dsn
from tensorsketch.runtime.backends.runs import RunRecord


def test_spread_fills_the_emptiest_actor_first_and_never_past_its_room() -> None:
    runs = [f"r{i}" for i in range(7)]
    dealt = spread(runs, {0: 2, 1: 5})
    # The roomier actor takes runs until the rooms are level, then they alternate.
    assert dealt == {0: ["r3", "r5"], 1: ["r0", "r1", "r2", "r4", "r6"]}
    assert spread(runs, {0: 1, 1: 1}) == {0: ["r0"], 1: ["r1"]}
    assert spread(runs, {}) == {}
    assert spread([], {0: 3}) == {}


def test_claimable_means_unowned_expired_or_a_dead_pid_of_this_graph() -> None:
    now = time.time()
    live = f"{socket.gethostname()}:{os.getpid()}:abcd"
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = f"{socket.gethostname()}:{child.pid}:abcd"
    base = RunRecord(run_id="r", thread_id="t", graph="agent")
    assert _claimable(base, "agent", now)
    assert not _claimable(base, "other", now), "another pool's graph"
    assert not _claimable(base.replace(owner=live, lease_expires_at=now + 30), "agent", now)
    assert _claimable(base.replace(owner=live, lease_expires_at=now - 1), "agent", now)
    assert _claimable(base.replace(owner=dead, lease_expires_at=now + 30), "agent", now)
    assert not _claimable(base.replace(status="suspended"), "agent", now)
    assert not _claimable(base.replace(status="succeeded"), "agent", now)
    assert not _claimable(base.replace(kind="schedule"), "agent", now)


def test_a_fleet_refuses_a_store_its_nodes_cannot_share() -> None:
    for dsn in ("sqlite:///runs.db", "memory://", "runs.db"):
        with pytest.raises(RayFleetError, match="PostgreSQL"):
            backend_from_dsn(dsn)
        with pytest.raises(RayFleetError, match="every node"):
            WorkerSpec(graph="app:agent", backend=dsn)
    with pytest.raises(ValueError, match="MODULE:ATTR"):
        WorkerSpec(graph="app", backend="postgresql://postgres@/db")
    with pytest.raises(ValueError, match="concurrency"):
        WorkerSpec(graph="app:agent", backend="postgresql://postgres@/db", concurrency=0)


def test_unix_socket_dsn_keeps_user_database_and_port() -> None:
    assert (
        unix_socket_dsn("postgresql://postgres@127.0.0.1:5432/test", "/var/run/postgresql")
        == "postgresql://postgres@/test?host=/var/run/postgresql&port=5432"
    )
    assert unix_socket_dsn("postgres://u:p%40ss@db/app", "/tmp") == (
        "postgresql://u:p%40ss@/app?host=/tmp"
    )
    with pytest.raises(ValueError, match="postgresql://"):
        unix_socket_dsn("redis://127.0.0.1/0", "/tmp")


def test_the_worker_command_is_registered_and_refuses_bad_input() -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        code = "import sys; from tensorsketch.cli import main; sys.exit(main(sys.argv[1:]))"
        return subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    shown = cli("worker", "--help")
    assert shown.returncode == 0 and "--ray ADDRESS" in shown.stdout
    refused = cli("worker", "app:agent", "--ray", "127.0.0.1:6379", "--backend", "sqlite:///x")
    assert refused.returncode == 2
    assert "PostgreSQL" in refused.stderr and "Traceback" not in refused.stderr
    missing = cli("worker", "app:agent", "--backend", "postgresql://postgres@/db")
    assert missing.returncode == 2 and "--ray" in missing.stderr
    never = cli(
        "worker",
        "app:agent",
        "--ray=auto",
        "--backend=postgresql://postgres@/db",
        "--place-timeout=0",
    )
    assert never.returncode == 2 and "--place-timeout" in never.stderr


def test_a_graph_a_node_cannot_import_says_where_the_code_must_be() -> None:
    from tensorsketch.ray import RayFleetError, load_graph

    with pytest.raises(RayFleetError, match="every node needs the graph's code"):
        load_graph("no_such_module_on_this_node:agent")
    with pytest.raises(RayFleetError, match="not MODULE:ATTR"):
        load_graph("just_a_module")


def test_actors_are_pinned_to_the_fitting_node_that_hosts_fewest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The choice alone, over a node list standing in for ``ray.nodes()`` (the pinning
    itself, on a real two-node cluster, is what test_fleet.py checks)."""
    ids = {"h": "1" * 56, "b": "2" * 56, "small": "3" * 56, "dead": "4" * 56}  # Ray checks hex
    name = {v: k for k, v in ids.items()}

    def node(node_id: str, head: bool = False, **resources: float) -> dict[str, Any]:
        extra = {"node:__internal_head__": 1.0} if head else {}
        return {"NodeID": node_id, "Alive": True, "Resources": {**resources, **extra}}

    nodes = [
        node(ids["h"], head=True, CPU=2.0),
        node(ids["b"], CPU=2.0, workers=1.0),
        node(ids["small"], CPU=0.5, workers=1.0),
        {**node(ids["dead"], CPU=8.0), "Alive": False},
    ]
    monkeypatch.setattr(_pool.ray, "nodes", lambda: nodes)
    spec = WorkerSpec(graph="app:agent", backend="postgresql://postgres@/db")

    pool = WorkerPool(spec, address="auto", actors=3, actor_cpus=1)
    pins = [name[pool._placement(i).node_id] for i in range(3)]
    assert pins == ["b", "h", "b"]  # worker nodes first, then whoever hosts fewest
    assert name[pool._placement(1).node_id] == "h"  # placing again ignores its own old pin
    assert pool._placement(0).soft is False

    grouped = WorkerPool(
        spec, address="auto", actors=2, actor_cpus=0, actor_resources={"workers": 1}
    )
    assert [name[grouped._placement(i).node_id] for i in range(2)] == ["b", "small"]
    with pytest.raises(ValueError, match="place_timeout"):
        WorkerPool(spec, address="auto", place_timeout=0)
    huge = WorkerPool(spec, address="auto", actors=1, actor_cpus=4)
    assert huge._placement(0) == "SPREAD"  # nothing fits: Ray decides (and may wait)
