"""The worker actor: one event loop, one runner, many runs at once.

A pool starts these as detached async Ray actors (:mod:`tensorsketch.ray._pool`). Each hosts
an :class:`~tensorsketch.runs.AsyncRunner` over the shared store and executes the runs the
dispatcher hands it; it never goes looking for work itself, so the dispatcher alone decides
how work spreads. Its owner id (``host:pid:random``) is what the run table records, so when
the actor's process dies its runs are visibly orphaned — at once to a dispatcher on the same
host (the pid is gone), elsewhere when their lease lapses — and are taken over by another
actor, resuming from their checkpoints.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from typing import Any

import ray

from tensorsketch.ray._spec import WorkerSpec, backend_from_dsn, load_graph
from tensorsketch.runs import AsyncRunner

__all__ = ["FleetRunner", "RunWorker"]


class FleetRunner(AsyncRunner):
    """An :class:`AsyncRunner` that takes runs only when handed them (:meth:`take`).

    The plain runner scans the store for orphans once a lease and claims every one; in a
    fleet that would let one actor hoard a dead peer's runs. Timers still wake here (a due
    timer is claimed by compare-and-set, so exactly one actor resumes it).
    """

    async def resume_pending(self) -> list[str]:
        """Fire due timers only: the dispatcher hands out orphans."""
        await self.start()
        self._wake.set()
        return []

    async def take(self, run_ids: list[str]) -> list[str]:
        """Claim each run (queued without an owner, or orphaned) and execute it here;
        return the ids claimed (one another actor won is skipped)."""
        await self.start()
        expires = time.time() + self.lease_ttl

        async def claim(run_id: str) -> str | None:
            if run_id in self._tasks or self.draining:
                return None
            claimed = await self.store.claim(run_id, self.owner, expires)
            if claimed is None:
                return None
            self._notify(claimed)
            self._known[run_id] = claimed  # the run starts from it (see AsyncRunner._begin)
            self._spawn(run_id, takeover=True)
            return run_id

        got = await asyncio.gather(*(claim(r) for r in run_ids))
        return [r for r in got if r is not None]


class RunWorker:
    """The body of one worker actor (wrapped by ``ray.remote`` in the pool).

    :param spec: what to build: graph, backend, concurrency, lease.
    """

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        backend = backend_from_dsn(
            spec.backend, schema=spec.schema, lease_ttl=spec.lease_ttl, pool_size=spec.pool_size
        )
        self.runner = FleetRunner(
            load_graph(spec.graph),
            backend=backend,
            concurrency=spec.concurrency,
            lease_ttl=spec.lease_ttl,
            max_steps=spec.max_steps,
        )
        self.started_at = time.time()

    async def hello(self) -> dict[str, Any]:
        """Who this actor is: its owner id, pid, host, node and graph."""
        await self.runner.start()
        return {
            "owner": self.runner.owner,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "node": ray.get_runtime_context().get_node_id(),
            "graph": self.runner.graph.name,
            "concurrency": self.spec.concurrency,
            "started_at": self.started_at,
        }

    async def take(self, run_ids: list[str]) -> dict[str, Any]:
        """Claim and start ``run_ids``; returns what was taken and the load after."""
        taken = await self.runner.take(run_ids)
        return {"taken": taken, "in_flight": self.runner.in_flight}

    async def load(self) -> int:
        """Runs executing here or waiting for a slot."""
        return self.runner.in_flight

    async def drain(self, timeout: float | None = None) -> bool:
        """Stop taking runs and wait for those here to finish or suspend (``False`` if some
        were still going at ``timeout``; they stay in the store for another actor)."""
        return await self.runner.drain(timeout)

    async def close(self) -> None:
        """Hand unfinished runs back (owner cleared) and release the store's connections."""
        await self.runner.aclose()
        await self.runner.backend.aclose()
