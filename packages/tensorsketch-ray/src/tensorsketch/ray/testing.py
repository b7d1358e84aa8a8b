"""A local Ray cluster inside a private network namespace, for tests and benchmarks.

Ray binds its GCS, raylets, object managers and workers to the node's address, and a driver
finds its own address by connecting out to a public resolver. A test must do neither on a real
interface, so this harness:

1. creates a network namespace holding only a loopback interface (``unshare -n``; as a
   non-root user ``unshare -r -n``, which adds a user namespace) and keeps it alive with a
   holder process (:class:`PrivateNetwork`);
2. starts every Ray process inside it with ``nsenter --net``: the head, each worker node and
   every driver (:class:`LocalRayCluster`). A driver outside could not reach the cluster —
   that is the point — so whatever talks to Ray (``tensorsketch worker``, a benchmark) is
   started through :meth:`PrivateNetwork.popen` too;
3. tells Ray its node address is ``127.0.0.1`` (``ray start --node-ip-address``; a driver
   passes ``ray.init(_node_ip_address="127.0.0.1")``), so even inside the namespace it
   listens on loopback only (:meth:`PrivateNetwork.listeners` reads the namespace's socket
   tables) and never probes a public address to find its own.

Filesystem Unix sockets cross network namespaces, so PostgreSQL is reached through its socket
directory (:func:`unix_socket_dsn`: ``postgresql://postgres@/db?host=/var/run/postgresql``);
its TCP port lives in the root namespace. The PID namespace is shared: the test process sees
every process of the cluster and can SIGKILL an actor, or every process of one node
(:meth:`LocalRayCluster.kill_node`), which is how the failure tests crash things.

Every process started here carries ``TS_RAY_NODE=<cluster id>/<node>`` in its environment
(Ray's workers inherit their raylet's), and each ``ray start`` runs in a new session whose
process group the node's daemons keep (the agents rename themselves over their environment
block, so the group is what finds those). That is how a node's processes are found again — by
marker and group, not by name, so nothing of another cluster on the machine is ever touched.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from tensorsketch.ray.exceptions import RayClusterError

__all__ = [
    "MARKER",
    "LocalRayCluster",
    "PrivateNetwork",
    "RayNode",
    "Socket",
    "unix_socket_dsn",
]

#: The environment variable naming the cluster and node a process belongs to.
MARKER = "TS_RAY_NODE"
#: Seconds ``ray start`` may take for one node on a busy 2-core machine.
START_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class Socket:
    """One bound socket of the namespace: ``tcp``/``tcp6`` listening or ``udp``/``udp6``."""

    protocol: str
    address: str
    port: int

    @property
    def loopback(self) -> bool:
        """Whether it is bound to a loopback address (127.0.0.0/8, ::1, ::ffff:127.x)."""
        ip = ipaddress.ip_address(self.address)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            return ip.ipv4_mapped.is_loopback
        return ip.is_loopback


def _decode_address(text: str) -> tuple[str, int]:
    """``0100007F:1F90`` (the kernel's little-endian words) -> ``("127.0.0.1", 8080)``."""
    host, port = text.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        address = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:
        words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
        address = socket.inet_ntop(socket.AF_INET6, words)
    return address, int(port, 16)


class PrivateNetwork:
    """A network namespace with only ``lo`` (up), kept alive by a holder process.

    Use as a context manager, or call :meth:`start` and :meth:`close`.
    """

    def __init__(self) -> None:
        self._holder: subprocess.Popen[bytes] | None = None
        self._rootless = os.geteuid() != 0

    @property
    def pid(self) -> int:
        """The holder's pid (its ``/proc/<pid>/ns/net`` is the namespace)."""
        if self._holder is None:
            msg = "the private network is not started; call start() first."
            raise RayClusterError(msg)
        return self._holder.pid

    def start(self) -> PrivateNetwork:
        """Create the namespace and bring its loopback up. Raises :class:`RayClusterError`
        (saying why) where namespaces are not allowed."""
        if self._holder is not None:
            return self
        for tool in ("unshare", "nsenter", "ip"):
            if shutil.which(tool) is None:
                msg = (
                    f"`{tool}` is not on PATH; the Ray test cluster needs util-linux "
                    "(unshare, nsenter) and iproute2 (ip) to keep Ray off every real interface."
                )
                raise RayClusterError(msg)
        unshare = ["unshare", "-r", "-n"] if self._rootless else ["unshare", "-n"]
        holder = subprocess.Popen(
            [*unshare, "--", "sh", "-c", "ip link set lo up && echo ready && exec sleep infinity"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert holder.stdout is not None
        line = holder.stdout.readline()
        if line.strip() != b"ready":
            holder.kill()
            _, err = holder.communicate(timeout=10)
            msg = (
                "cannot create a private network namespace for the Ray test cluster "
                f"({' '.join(unshare)}): {err.decode(errors='replace').strip() or 'no output'}. "
                "Run as root, or allow unprivileged user namespaces "
                "(sysctl kernel.unprivileged_userns_clone=1)."
            )
            raise RayClusterError(msg)
        self._holder = holder
        return self

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` prefixed so that it runs inside the namespace."""
        enter = ["nsenter", f"--target={self.pid}", "--net"]
        if self._rootless:
            enter += ["--user", "--preserve-credentials"]
        return [*enter, "--", *argv]

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside the namespace (``subprocess.Popen`` keyword arguments)."""
        return subprocess.Popen(self.command(argv), **kwargs)

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` inside the namespace to completion (``subprocess.run`` arguments)."""
        return subprocess.run(self.command(argv), check=False, **kwargs)

    def namespace(self) -> str:
        """The namespace's identity (``net:[inode]``), to compare with a process's."""
        return os.readlink(f"/proc/{self.pid}/ns/net")

    def interfaces(self) -> list[str]:
        """The namespace's network interfaces (only ``lo`` here)."""
        lines = Path(f"/proc/{self.pid}/net/dev").read_text().splitlines()[2:]
        return sorted(line.split(":", 1)[0].strip() for line in lines)

    def listeners(self) -> list[Socket]:
        """Every listening TCP socket and bound UDP socket in the namespace."""
        found: list[Socket] = []
        for protocol, state in (("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07")):
            path = Path(f"/proc/{self.pid}/net/{protocol}")
            if not path.exists():
                continue
            for line in path.read_text().splitlines()[1:]:
                parts = line.split()
                if len(parts) > 3 and parts[3] == state:
                    address, port = _decode_address(parts[1])
                    found.append(Socket(protocol, address, port))
        return found

    def close(self) -> None:
        """End the holder (the namespace goes once no process is left in it)."""
        holder, self._holder = self._holder, None
        if holder is not None:
            holder.kill()
            holder.wait(timeout=10)
            for stream in (holder.stdout, holder.stderr):
                if stream is not None:
                    stream.close()

    def __enter__(self) -> PrivateNetwork:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class RayNode:
    """One node of a :class:`LocalRayCluster`: its name, resources and temp dir."""

    name: str
    marker: str
    temp_dir: Path
    num_cpus: int
    resources: dict[str, float] = field(default_factory=dict)
    head: bool = False
    #: The process group of its ``ray start`` session (its daemons stay in it).
    group: int = 0


def _stat(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name: state, ppid, pgrp, ..."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None


def _processes_with(marker: str, groups: set[int]) -> list[int]:
    """Live pids whose ``TS_RAY_NODE`` is ``marker`` (or starts with it, when it ends in
    ``/``), or whose process group is one of ``groups``."""
    needle = f"{MARKER}={marker}".encode()
    whole = not marker.endswith("/")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        stat = _stat(int(entry.name))
        if stat is None or stat[0] == "Z":
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        marked = any(
            var == needle if whole else var.startswith(needle) for var in environ.split(b"\0")
        )
        if marked or int(stat[2]) in groups:
            found.append(int(entry.name))
    return found


class LocalRayCluster:
    """A Ray head and worker nodes on this machine, inside ``network``.

    :param network: a started :class:`PrivateNetwork`.
    :param port: the GCS port (any free port works: the namespace has its own port space).
    :param object_store_memory: bytes of shared memory per node (small: tests pass little).
    :param env: extra environment for every process of the cluster.
    """

    def __init__(
        self,
        network: PrivateNetwork,
        *,
        port: int = 6380,
        object_store_memory: int = 128 * 2**20,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.network = network
        self.port = port
        self.object_store_memory = object_store_memory
        self.id = f"tsray-{uuid.uuid4().hex[:8]}"
        # Short: Ray's Unix socket paths live below it (108-byte limit).
        self.root = Path(tempfile.mkdtemp(prefix="tsray-", dir="/tmp"))
        self.nodes: dict[str, RayNode] = {}
        self._env = dict(env or {})
        self._drivers: list[subprocess.Popen[Any]] = []

    @property
    def address(self) -> str:
        """The GCS address a driver passes to ``ray.init`` (``127.0.0.1:<port>``)."""
        return f"127.0.0.1:{self.port}"

    def environment(self, node: str) -> dict[str, str]:
        """The environment of a process of ``node`` (marker, no usage stats, no proxy, no
        ``uv run`` workers)."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("RAY_") and k.lower() not in ("http_proxy", "https_proxy")
        }
        env.update(
            {
                MARKER: f"{self.id}/{node}",
                "RAY_USAGE_STATS_ENABLED": "0",
                # A driver with a `uv run` ancestor (`uv run pytest`) would have Ray start
                # every worker through `uv run` in a copy of the working directory; inside
                # the namespace uv cannot reach an index, so those workers never register
                # and the driver waits forever. Every process here already runs this
                # interpreter's environment.
                "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self._env)
        return env

    def _ray(self) -> list[str]:
        script = Path(sys.executable).parent / "ray"
        if script.exists():
            return [str(script)]
        return [sys.executable, "-m", "ray.scripts.scripts"]

    def _start(self, node: RayNode, extra: Sequence[str], attempts: int = 3) -> RayNode:
        """``ray start`` the node; on a loaded machine a raylet can miss Ray's fixed 30 s to
        register, so a failed start is cleaned up (every process of it killed) and tried again."""
        node.temp_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            *self._ray(),
            "start",
            *extra,
            "--node-ip-address=127.0.0.1",
            f"--num-cpus={node.num_cpus}",
            f"--object-store-memory={self.object_store_memory}",
            f"--temp-dir={node.temp_dir}",
            "--disable-usage-stats",
        ]
        if node.resources:
            argv.append(f"--resources={json.dumps(node.resources)}")
        self.nodes[node.name] = node  # before waiting: stop() must find a half-started node
        for attempt in range(1, attempts + 1):
            log = self.root / f"{node.name}.{attempt}.log"
            with log.open("wb") as out:
                starter = self.network.popen(
                    argv,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self.environment(node.name),
                    start_new_session=True,
                )
                node.group = starter.pid
                try:
                    code = starter.wait(timeout=START_TIMEOUT)
                except subprocess.TimeoutExpired:
                    starter.kill()
                    code = starter.wait()
            if code == 0:
                return node
            self._kill(node.name)
        tail = log.read_text(errors="replace")[-3000:]
        msg = f"`ray start` for node {node.name!r} failed {attempts} times (exit {code}):\n{tail}"
        raise RayClusterError(msg)

    def start_head(
        self, *, num_cpus: int = 1, resources: Mapping[str, float] | None = None
    ) -> RayNode:
        """Start the head node (GCS, its raylet); returns it as node ``"head"``."""
        node = RayNode(
            "head", f"{self.id}/head", self.root / "head", num_cpus, dict(resources or {}), True
        )
        return self._start(node, ["--head", f"--port={self.port}", "--include-dashboard=false"])

    def add_node(
        self, name: str, *, num_cpus: int = 1, resources: Mapping[str, float] | None = None
    ) -> RayNode:
        """Start a worker node that joins the head (its own raylet, temp dir and marker)."""
        if name in self.nodes or "/" in name or not name:
            msg = f"node name {name!r} is taken or invalid; pick a new one without '/'."
            raise ValueError(msg)
        node = RayNode(name, f"{self.id}/{name}", self.root / name, num_cpus, dict(resources or {}))
        return self._start(node, [f"--address={self.address}"])

    def processes(self, node: str | None = None) -> list[int]:
        """Live pids of ``node`` (every node and driver of the cluster when ``None``)."""
        marker = f"{self.id}/" if node is None else f"{self.id}/{node}"
        nodes = self.nodes.values() if node is None else [self.nodes[node]]
        return _processes_with(marker, {n.group for n in nodes if n.group})

    def kill_node(self, name: str, *, timeout: float = 10.0) -> list[int]:
        """SIGKILL every process of node ``name`` (raylet, agents, workers, actors) and wait
        until they are gone; returns the pids killed."""
        if name not in self.nodes:
            msg = f"no node {name!r} in this cluster; nodes: {sorted(self.nodes)}."
            raise ValueError(msg)
        killed = self._kill(name, timeout=timeout)
        self.nodes.pop(name)
        return killed

    def _kill(self, name: str, *, timeout: float = 10.0) -> list[int]:
        killed: list[int] = []
        deadline = time.monotonic() + timeout
        while True:
            pids = self.processes(name)
            if not pids:
                return sorted(set(killed))
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                killed.append(pid)
            if time.monotonic() > deadline:
                msg = f"node {name!r} still has processes {pids} after SIGKILL."
                raise RayClusterError(msg)
            time.sleep(0.05)

    def driver(
        self, argv: Sequence[str], *, name: str = "driver", **kwargs: Any
    ) -> subprocess.Popen[Any]:
        """Start a driver (anything that calls ``ray.init(address=...)``) inside the network,
        marked as part of the cluster so :meth:`stop` ends it too. ``RAY_ADDRESS`` is set."""
        env = {**self.environment(name), "RAY_ADDRESS": self.address, **kwargs.pop("env", {})}
        process = self.network.popen(argv, env=env, **kwargs)
        self._drivers.append(process)
        return process

    def stop(self) -> None:
        """SIGKILL every process of the cluster (nodes and drivers) and remove its files."""
        for _ in range(50):
            pids = self.processes()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        for process in self._drivers:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)
        self._drivers.clear()
        self.nodes.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalRayCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def unix_socket_dsn(dsn: str, socket_dir: str) -> str:
    """``dsn`` rewritten to reach the same PostgreSQL server through its Unix socket in
    ``socket_dir`` (what a process inside the private network must use).

    :param dsn: a ``postgresql://user@host:port/db`` URL.
    :param socket_dir: the server's ``unix_socket_directories`` entry, e.g. ``/var/run/postgresql``.
    """
    parts = urlsplit(dsn)
    if parts.scheme not in ("postgres", "postgresql"):
        msg = f"expected a postgresql:// URL, got {dsn!r}."
        raise ValueError(msg)
    # urlsplit leaves them percent-encoded: decode, then encode exactly once.
    user = unquote(parts.username or "postgres")
    auth = quote(user, safe="") + (
        f":{quote(unquote(parts.password), safe='')}" if parts.password else ""
    )
    port = f"&port={parts.port}" if parts.port else ""
    return f"postgresql://{auth}@{parts.path}?host={quote(socket_dir, safe='/')}{port}"
