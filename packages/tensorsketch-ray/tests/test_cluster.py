"""The test cluster stays off every real interface, and reaches PostgreSQL by its socket.

Why these tests exist: Ray listens on many ports and, left alone, on every interface. The
harness keeps the cluster in a private network namespace (see conftest.py); these tests fail
if a process of the cluster lives outside it, if anything in it binds a non-loopback address,
or if the namespace could reach the root namespace's TCP services.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tensorsketch.ray.testing import LocalRayCluster, PrivateNetwork, Socket, _decode_address

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent


def test_kernel_addresses_decode() -> None:
    assert _decode_address("0100007F:1F90") == ("127.0.0.1", 8080)
    assert _decode_address("00000000000000000000000001000000:0016") == ("::1", 22)
    mapped = _decode_address("0000000000000000FFFF00000100007F:2711")
    assert mapped == ("::ffff:127.0.0.1", 10001)
    assert Socket("tcp6", mapped[0], mapped[1]).loopback
    assert not Socket("tcp", "0.0.0.0", 80).loopback
    assert not Socket("tcp", "10.1.2.3", 80).loopback


def test_every_cluster_process_is_inside_the_private_network(
    ray_cluster: LocalRayCluster, private_network: PrivateNetwork
) -> None:
    probe = ray_cluster.driver(
        [sys.executable, str(HERE / "probe.py")], stdout=subprocess.PIPE, text=True
    )
    out, _ = probe.communicate(timeout=180)
    assert probe.returncode == 0
    report = json.loads(out.strip().splitlines()[-1])
    assert report["nodes"] == 2
    assert len({a["node"] for a in report["actors"]}) == 2, "one actor per node"

    inside = private_network.namespace()
    assert inside != os.readlink("/proc/self/ns/net")
    pids = ray_cluster.processes()
    assert {a["pid"] for a in report["actors"]} <= set(pids)
    for node in ("head", "b"):
        assert ray_cluster.processes(node), f"node {node} has processes"
    for pid in pids:
        assert os.readlink(f"/proc/{pid}/ns/net") == inside, pid


def test_nothing_binds_outside_loopback(
    ray_cluster: LocalRayCluster, private_network: PrivateNetwork
) -> None:
    assert private_network.interfaces() == ["lo"]
    sockets = private_network.listeners()
    ports = {s.port for s in sockets}
    assert ray_cluster.port in ports, "the GCS listens inside the namespace"
    wide = [s for s in sockets if not s.loopback]
    assert wide == [], f"bound outside loopback: {wide}"


def test_postgres_is_reached_by_its_socket_not_tcp(
    private_network: PrivateNetwork, pg_dsn: str, pg_socket_dsn: str
) -> None:
    code = (
        "import sys, psycopg\n"
        "print(psycopg.connect(sys.argv[1]).execute('select 41 + 1').fetchone()[0])\n"
        "try:\n"
        "    psycopg.connect(sys.argv[2], connect_timeout=3)\n"
        "except psycopg.OperationalError:\n"
        "    print('tcp unreachable')\n"
    )
    done = private_network.run(
        [sys.executable, "-c", code, pg_socket_dsn, pg_dsn],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["42", "tcp", "unreachable"]


def test_a_driver_started_by_uv_run_still_gets_workers(
    ray_cluster: LocalRayCluster, tmp_path: Path
) -> None:
    """Ray starts the workers of a driver that has a `uv run` ancestor through that `uv run`
    (its uv runtime-env hook reads the ancestors' command lines). The harness turns that off:
    under `uv run pytest` such workers never registered inside the namespace, and the driver
    waited forever. The ancestor here is a stand-in named `uv` run as `uv run ...`, which is
    all the hook looks for; a worker started through it could not run."""
    (tmp_path / "uv").symlink_to(sys.executable)
    (tmp_path / "run").write_text(
        "import subprocess, sys\nsys.exit(subprocess.call(sys.argv[1:]))\n"
    )
    code = (
        "import os, ray\n"
        "ray.init(address=os.environ['RAY_ADDRESS'], logging_level='ERROR',"
        " _node_ip_address='127.0.0.1')\n"
        "print(ray.get(ray.remote(lambda: 6 * 7).remote(), timeout=60))\n"
    )
    driver = ray_cluster.driver(
        [str(tmp_path / "uv"), "run", sys.executable, "-c", code],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = driver.communicate(timeout=180)
    assert driver.returncode == 0, err[-3000:]
    assert out.split()[-1] == "42"
