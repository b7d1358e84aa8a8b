"""What every actor of a pool is built from: one small, picklable description.

An actor rebuilds everything from it — the graph by import path, the backend from its DSN —
so a restarted actor (Ray runs ``__init__`` again on a new process, possibly on another node)
comes back identical without anything being shipped but this record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tensorsketch import cli
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.ray.exceptions import RayFleetError
from tensorsketch.runtime.backends.base import Backend

__all__ = ["WorkerSpec", "backend_from_dsn", "load_graph"]

#: Schemes whose store every node of a cluster can reach (a fleet needs one it shares).
SHARED_SCHEMES = ("postgresql", "postgres", "redis", "rediss", "unix")


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """How to build one worker actor.

    :param graph: the compiled graph as ``module:attr`` (or ``/path/to/file.py:attr``),
        importable on every node.
    :param backend: the store's DSN (``postgresql://...`` or ``redis://...``).
    :param schema: the PostgreSQL schema (or Redis key prefix) of the store.
    :param concurrency: runs one actor executes at once on its event loop.
    :param lease_ttl: seconds a run's (and its thread's) lease lasts without renewal: how long
        a run of a crashed actor on another host waits before it is taken over.
    :param pool_size: store connections per actor.
    :param max_steps: the graph's superstep limit per run segment.
    """

    graph: str
    backend: str
    schema: str | None = None
    concurrency: int = 100
    lease_ttl: float = 30.0
    pool_size: int = 8
    max_steps: int = 25

    def __post_init__(self) -> None:
        if type(self.concurrency) is not int or self.concurrency < 1:
            msg = f"`concurrency` must be an int >= 1, got {self.concurrency!r}."
            raise ValueError(msg)
        if type(self.pool_size) is not int or self.pool_size < 1:
            msg = f"`pool_size` must be an int >= 1, got {self.pool_size!r}."
            raise ValueError(msg)
        if not self.lease_ttl > 0:
            msg = f"`lease_ttl` must be a positive number of seconds, got {self.lease_ttl!r}."
            raise ValueError(msg)
        check_dsn(self.backend)
        module, _, attr = self.graph.rpartition(":")
        if not module or not attr:
            msg = f"graph {self.graph!r} is not MODULE:ATTR (or FILE.py:ATTR), e.g. `app:agent`."
            raise ValueError(msg)


def check_dsn(dsn: str) -> str:
    """The DSN's scheme, if it names a store a whole cluster can share."""
    scheme = urlsplit(dsn).scheme if isinstance(dsn, str) else ""
    if scheme not in SHARED_SCHEMES:
        msg = (
            f"backend {dsn!r} is not one every node can reach: a fleet's run table must be "
            "PostgreSQL (postgresql://user@host/db) or Redis (redis://host:6379/0). SQLite and "
            "memory stores are private to one process."
        )
        raise RayFleetError(msg)
    return scheme


def backend_from_dsn(
    dsn: str, *, schema: str | None = None, lease_ttl: float = 30.0, pool_size: int = 8
) -> Backend:
    """The backend a DSN names (PostgreSQL or Redis, from ``tensorsketch-backends``).

    :param schema: the PostgreSQL schema, or the Redis key prefix.
    :param pool_size: PostgreSQL connections at most (Redis multiplexes one client).
    """
    scheme = check_dsn(dsn)
    try:
        if scheme in ("postgresql", "postgres"):
            from tensorsketch.runtime.backends.postgres import PostgresBackend  # noqa: PLC0415 - only the driver the DSN names

            return PostgresBackend(
                dsn,
                schema=schema or "public",
                lease_ttl=lease_ttl,
                pool_kwargs={"min_size": 1, "max_size": pool_size},
            )
        from tensorsketch.runtime.backends.redis import RedisBackend  # noqa: PLC0415 - only the driver the DSN names

        return RedisBackend(dsn, prefix=schema or "tensorsketch", lease_ttl=lease_ttl)
    except ImportError as exc:
        msg = (
            f"the {scheme} backend needs its driver: pip install 'tensorsketch-backends[all]' "
            f"({exc})."
        )
        raise RayFleetError(msg) from exc


def load_graph(target: str) -> CompiledGraph[Any]:
    """Import ``module:attr`` (or ``file.py:attr``) on this node (the working directory is
    importable) and check it is a compiled graph (:func:`tensorsketch.cli.load_graph`, with a
    worker node's hint)."""
    try:
        return cli.load_graph(
            target,
            unimportable="every node needs the graph's code: install it in the image or set "
            "PYTHONPATH.",
        )
    except ValueError as exc:
        raise RayFleetError(str(exc)) from None
