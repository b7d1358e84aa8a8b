"""``tensorsketch worker``: start a pool of Ray worker actors and dispatch runs to them.

The command is the pool's dispatcher: it stays in the foreground, prints one JSON line
``{"ready": true, "actors": [...]}`` once every actor answers, and on SIGTERM / Ctrl-C drains
the actors (their unfinished runs go back to the table) and stops them — or, with
``--keep-actors``, leaves them running for the next ``tensorsketch worker`` of that name.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from tensorsketch.cli import load_graph
from tensorsketch.ray._pool import WorkerPool
from tensorsketch.ray._spec import WorkerSpec
from tensorsketch.ray.exceptions import RayFleetError

__all__ = ["configure", "run"]

#: Seconds the command waits for the head's GCS port to accept a TCP connection before it
#: says the cluster cannot be reached (``ray.init`` itself retries for minutes).
PROBE_TIMEOUT = 5.0


def _positive(kind: type[int] | type[float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = kind(text)
        if not value > 0:
            msg = f"must be > 0, got {text}"
            raise argparse.ArgumentTypeError(msg)
        return value

    return parse


def _resources(text: str) -> dict[str, float]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"not JSON ({exc}); e.g. '{{\"tensorsketch_worker\": 1}}'"
        raise argparse.ArgumentTypeError(msg) from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, int | float) and v >= 0 for k, v in value.items()
    ):
        msg = f"must be a JSON object of resource names to amounts >= 0, got {text}"
        raise argparse.ArgumentTypeError(msg)
    return {k: float(v) for k, v in value.items()}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "graph",
        metavar="MODULE:ATTR",
        help="the compiled graph: `module:attr` or `path/to/file.py:attr`, e.g. app:agent "
        "(importable on every node)",
    )
    parser.add_argument(
        "--ray",
        required=True,
        metavar="ADDRESS",
        help="the Ray cluster: the head's GCS host:port, auto, or ray://host:port",
    )
    parser.add_argument(
        "--backend",
        required=True,
        metavar="DSN",
        help="the shared run table: postgresql://user@host/db or redis://host:6379/0",
    )
    parser.add_argument("--schema", help="PostgreSQL schema / Redis key prefix of the store")
    parser.add_argument("--actors", type=_positive(int), default=2, help="worker actors (2)")
    parser.add_argument(
        "--concurrency", type=_positive(int), default=100, help="runs at once per actor (100)"
    )
    parser.add_argument(
        "--prefetch", type=int, help="runs an actor holds beyond --concurrency (= concurrency)"
    )
    parser.add_argument(
        "--lease-ttl",
        type=_positive(float),
        default=30.0,
        help="seconds a dead actor's runs wait before another takes them over (30)",
    )
    parser.add_argument("--actor-cpus", type=float, default=1.0, help="CPUs per actor (1)")
    parser.add_argument(
        "--actor-resources",
        type=_resources,
        default=None,
        metavar="JSON",
        help="custom Ray resources per actor, e.g. '{\"tensorsketch_worker\": 1}'",
    )
    parser.add_argument(
        "--pool-size", type=_positive(int), default=8, help="store connections per actor (8)"
    )
    parser.add_argument(
        "--place-timeout",
        type=_positive(float),
        default=60.0,
        help="seconds an actor waits for room on the node it is pinned to before it is "
        "placed anywhere (60)",
    )
    parser.add_argument("--name", default="default", help="pool name (actors attach by it)")
    parser.add_argument("--node-ip-address", help="this process's address as Ray sees it")
    parser.add_argument(
        "--keep-actors",
        action="store_true",
        help="on exit leave the detached actors running (a later pool of this name attaches)",
    )


async def _serve(pool: WorkerPool, keep: bool) -> None:
    stop = asyncio.Event()
    # Join Ray first: ray.init installs its own SIGTERM handler (it logs a stack trace and
    # can end the process mid-drain); ours, installed after, replaces it.
    pool.connect()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        infos = await pool.start()
        print(json.dumps({"ready": True, "actors": infos}), flush=True)
        await pool.run(stop)
    finally:
        with contextlib.suppress(Exception):
            await pool.close(stop_actors=not keep)
        print(json.dumps({"stopped": True, "stats": asdict(pool.stats)}), flush=True)


def _gcs_endpoint(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``host:port`` (or ``[v6]:port``) address; ``None`` for the forms
    Ray resolves itself (``auto``, ``local``, ``ray://...``)."""
    if "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.removeprefix("[").removesuffix("]"), int(port)


def _unreachable(address: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """Why the GCS at ``address`` does not accept a TCP connection (``None``: it does, or the
    address is not a ``host:port`` to probe)."""
    endpoint = _gcs_endpoint(address)
    if endpoint is None:
        return None
    try:
        with socket.create_connection(endpoint, timeout=timeout):
            return None
    except TimeoutError:
        return f"nothing answered on {endpoint[0]}:{endpoint[1]} within {timeout:g}s"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"


def _actor_target(graph: str) -> str:
    """The spec the actors import: a ``file.py`` path made absolute (an actor's working
    directory is not this one's)."""
    where, _, attr = graph.rpartition(":")
    if where.endswith(".py"):
        return f"{Path(where).resolve()}:{attr}"
    return graph


def _cannot_reach(address: str, why: object) -> None:
    print(
        f"tensorsketch worker: cannot reach the Ray cluster at {address!r} ({why}); "
        "check --ray (the head's GCS address, host:port).",
        file=sys.stderr,
    )


def run(args: argparse.Namespace) -> int:
    try:
        spec = WorkerSpec(
            graph=_actor_target(args.graph),
            backend=args.backend,
            schema=args.schema,
            concurrency=args.concurrency,
            lease_ttl=args.lease_ttl,
            pool_size=args.pool_size,
        )
        pool = WorkerPool(
            spec,
            address=args.ray,
            actors=args.actors,
            name=args.name,
            actor_cpus=args.actor_cpus,
            actor_resources=args.actor_resources,
            prefetch=args.prefetch,
            node_ip_address=args.node_ip_address,
            place_timeout=args.place_timeout,
        )
        # Here first: a wrong name is this command's error, not every actor's on the cluster.
        load_graph(args.graph)
    except (ValueError, RayFleetError) as exc:
        print(f"tensorsketch worker: {exc}", file=sys.stderr)
        return 2
    why = _unreachable(args.ray)
    if why is not None:
        _cannot_reach(args.ray, why)
        return 1
    try:
        asyncio.run(_serve(pool, args.keep_actors))
    except ConnectionError as exc:
        _cannot_reach(args.ray, exc)
        return 1
    return 0
