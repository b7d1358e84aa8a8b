"""The worker pool: detached async Ray actors fed by one dispatcher.

The run table is the system of record; Ray's own task queue (in memory) is never trusted with
a run. The dispatcher reads the table — queued runs nobody owns, and runs whose owner is gone
(lease expired, or a dead process on this host) — and hands each to the least-loaded actor,
which claims it by compare-and-set and executes it. An actor holds at most ``concurrency +
prefetch`` runs, so the pool is bounded end to end.

When an actor's process dies Ray starts it again (``max_restarts=-1``: on another node if its
node is gone) and the dispatcher hands the dead owner's runs to whichever actors are up; they
resume from their checkpoints, and the effect journal replays every effect that completed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnschedulableError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from tensorsketch.ray._actor import RunWorker
from tensorsketch.ray._spec import WorkerSpec, backend_from_dsn
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.runs import RunRecord, RunStore, owner_is_dead, run_store

__all__ = ["PoolStats", "WorkerPool"]

log = logging.getLogger("tensorsketch.ray")


@dataclass
class PoolStats:
    """What the dispatcher did: runs handed out, takeovers, actors replaced."""

    dispatched: int = 0
    takeovers: int = 0
    replaced: int = 0
    rounds: int = 0
    actors: dict[str, dict[str, Any]] = field(default_factory=dict)


def _claimable(record: RunRecord, graph: str, now: float) -> bool:
    if record.kind != "run" or record.status not in ("queued", "running"):
        return False
    if record.graph and record.graph != graph:
        return False  # another pool's graph
    holder = record.owner
    return holder is None or (record.lease_expires_at or 0.0) <= now or owner_is_dead(holder)


def spread(run_ids: Sequence[str], free: dict[int, int]) -> dict[int, list[str]]:
    """Deal ``run_ids`` to actors by free capacity, the emptiest first, one at a time (so a
    small batch lands on different actors and a large one fills them evenly)."""
    room = dict(free)
    dealt: dict[int, list[str]] = {i: [] for i in room}
    for run_id in run_ids:
        target = max(room, key=lambda i: (room[i], -i), default=None)
        if target is None or room[target] <= 0:
            break
        dealt[target].append(run_id)
        room[target] -= 1
    return {i: batch for i, batch in dealt.items() if batch}


class WorkerPool:
    """``actors`` detached async Ray actors executing the run table's runs of one graph.

    :param spec: how each actor builds its graph, backend and runner.
    :param address: the Ray cluster (``ray.init(address=...)``), e.g. ``127.0.0.1:6379``.
    :param actors: how many worker actors (spread over the nodes).
    :param name: the pool's name: actors are ``tensorsketch-<name>-<i>`` in ``namespace``, so
        a restarted ``tensorsketch worker`` attaches to the actors still running.
    :param actor_cpus: CPUs each actor reserves (0 lets any node host any number).
    :param actor_resources: custom Ray resources each actor reserves, e.g.
        ``{"tensorsketch_worker": 1}`` to pin actors to the nodes (worker groups) that offer it.
    :param prefetch: runs an actor may hold beyond ``spec.concurrency`` (waiting for a slot).
    :param poll_interval: seconds between looks at the queue while there is nothing to do.
    :param sweep_interval: seconds between scans for running runs whose owner died (queued
        ones are looked at every round).
    :param node_ip_address: this driver's address as Ray should see it (``127.0.0.1`` keeps a
        one-machine cluster on loopback).
    :param place_timeout: seconds :meth:`start` waits for an actor pinned to a node (see
        :meth:`_placement`) before it gives up the pin and lets Ray place it anywhere.
    """

    def __init__(
        self,
        spec: WorkerSpec,
        *,
        address: str,
        actors: int = 2,
        name: str = "default",
        namespace: str = "tensorsketch",
        actor_cpus: float = 1.0,
        actor_resources: dict[str, float] | None = None,
        prefetch: int | None = None,
        poll_interval: float = 0.05,
        sweep_interval: float | None = None,
        node_ip_address: str | None = None,
        place_timeout: float = 60.0,
    ) -> None:
        if type(actors) is not int or actors < 1:
            msg = f"`actors` must be an int >= 1, got {actors!r}."
            raise ValueError(msg)
        if not place_timeout > 0:
            msg = f"`place_timeout` must be > 0 seconds, got {place_timeout!r}."
            raise ValueError(msg)
        if not actor_cpus >= 0:
            msg = f"`actor_cpus` must be >= 0, got {actor_cpus!r}."
            raise ValueError(msg)
        if not name or not all(c.isalnum() or c in "-_" for c in name):
            msg = f"pool name {name!r} must be letters, digits, '-' or '_'."
            raise ValueError(msg)
        self.spec = spec
        self.address = address
        self.size = actors
        self.name = name
        self.namespace = namespace
        self.actor_cpus = float(actor_cpus)
        self.actor_resources = dict(actor_resources or {})
        self.prefetch = spec.concurrency if prefetch is None else prefetch
        self.poll_interval = poll_interval
        self.sweep_interval = (
            min(1.0, spec.lease_ttl / 3) if sweep_interval is None else sweep_interval
        )
        self.node_ip_address = node_ip_address
        #: Seconds a round waits for an actor to answer ``take`` (or ``load``).
        self.take_timeout = 5.0
        self.place_timeout = place_timeout
        self.stats = PoolStats()
        self._actors: list[Any] = []
        self._graph = ""
        self._store: RunStore | None = None
        self._backend: Backend | None = None
        self._last_sweep = 0.0
        self._pins: dict[int, str] = {}  # actor index -> the node it was pinned to

    @property
    def capacity(self) -> int:
        """Runs one actor may hold (executing or waiting for a slot)."""
        return self.spec.concurrency + self.prefetch

    def actor_name(self, index: int) -> str:
        """The Ray name of actor ``index``."""
        return f"tensorsketch-{self.name}-{index}"

    # -- lifecycle --------------------------------------------------------------------------

    def connect(self) -> None:
        """Join the Ray cluster (once per process)."""
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {}
            if self.node_ip_address is not None:
                kwargs["_node_ip_address"] = self.node_ip_address
            ray.init(
                address=self.address,
                namespace=self.namespace,
                logging_level=logging.WARNING,
                log_to_driver=False,
                **kwargs,
            )

    def _fits(self, node: dict[str, Any]) -> bool:
        """Whether ``node`` has (in total) the CPUs and custom resources one actor reserves."""
        have = node.get("Resources", {})
        want = {"CPU": self.actor_cpus, **self.actor_resources}
        return all(have.get(key, 0.0) >= amount for key, amount in want.items() if amount > 0)

    def _placement(self, index: int) -> Any:
        """Pin actor ``index`` to the live node that fits it and hosts the fewest of this
        pool's actors (worker nodes before the head).

        The pin is hard: Ray's soft node affinity was seen to put both actors of a two-node
        pool on one node in 4 of 9 starts. A hard pin has two consequences the pool handles:
        an actor whose node dies cannot be restarted there, so Ray reports it unschedulable
        and :meth:`_loads` makes a new one (placed again, on a live node); and an actor pinned to
        a node without room waits for it, so :meth:`start` re-creates one that has not
        answered after ``place_timeout`` with no pin at all.
        """
        nodes: Callable[[], list[dict[str, Any]]] = ray.nodes  # unannotated in Ray
        alive = [n for n in nodes() if n.get("Alive") and self._fits(n)]
        if not alive:
            return "SPREAD"  # nothing fits (yet): let Ray wait for or pick a node
        hosting: dict[str, int] = {}
        for other, node_id in self._pins.items():
            if other != index:
                hosting[node_id] = hosting.get(node_id, 0) + 1
        alive.sort(
            key=lambda n: (
                hosting.get(n["NodeID"], 0),
                "node:__internal_head__" in n.get("Resources", {}),
                n["NodeID"],
            )
        )
        node_id = str(alive[0]["NodeID"])
        self._pins[index] = node_id
        return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)

    def _make(self, index: int, *, pinned: bool = True) -> Any:
        if not pinned:
            self._pins.pop(index, None)
        worker = ray.remote(RunWorker)
        return worker.options(
            name=self.actor_name(index),
            namespace=self.namespace,
            lifetime="detached",
            get_if_exists=True,
            max_restarts=-1,
            max_task_retries=0,
            num_cpus=self.actor_cpus,
            resources=self.actor_resources,
            scheduling_strategy=self._placement(index) if pinned else "SPREAD",
        ).remote(self.spec)

    async def start(self) -> list[dict[str, Any]]:
        """Connect, start (or attach to) the actors and wait until each answers; returns
        what each said (owner, pid, node)."""
        self.connect()
        if self._store is None:
            self._backend = backend_from_dsn(
                self.spec.backend,
                schema=self.spec.schema,
                lease_ttl=self.spec.lease_ttl,
                pool_size=2,
            )
            self._store = run_store(self._backend)
        if not self._actors:
            self._actors = [self._make(i) for i in range(self.size)]
        infos = list(await asyncio.gather(*(self._hello(i) for i in range(self.size))))
        # Where they really are (an attached actor may sit anywhere): what later pins balance.
        self._pins = {i: str(info["node"]) for i, info in enumerate(infos)}
        for index, info in enumerate(infos):
            self.stats.actors[self.actor_name(index)] = info
        self._graph = infos[0]["graph"]
        return infos

    async def _hello(self, index: int) -> dict[str, Any]:
        """Actor ``index``'s answer to ``hello``; one still waiting for room on the node it
        is pinned to after ``place_timeout`` is killed and made again without a pin."""
        try:
            info: dict[str, Any] = await asyncio.wait_for(
                self._actors[index].hello.remote(), self.place_timeout
            )
        except TimeoutError:
            log.warning(
                "actor %s did not start on its node within %.0f s; placing it anywhere",
                self.actor_name(index),
                self.place_timeout,
            )
            with contextlib.suppress(Exception):
                ray.kill(self._actors[index], no_restart=True)
            await self._name_released(index)
            self._actors[index] = self._make(index, pinned=False)
            info = await self._actors[index].hello.remote()
        return info

    async def _name_released(self, index: int, timeout: float = 30.0) -> None:
        """Wait until Ray forgot the killed actor ``index`` (``get_if_exists`` would hand
        back the dying one)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ray.get_actor(self.actor_name(index), namespace=self.namespace)
            except ValueError:
                return
            await asyncio.sleep(0.1)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Dispatch until ``stop`` is set."""
        await self.start()
        stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                moved = await self.dispatch_once()
            except Exception as exc:  # a store or cluster hiccup: the table still says it all
                log.warning("dispatching failed (%s); retrying", exc)
                moved = 0
            if not moved:
                with contextlib.suppress(TimeoutError):
                    # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel that
                    # lands as the event is set (the runner's close then hung 10 s)
                    async with asyncio.timeout(self.poll_interval):
                        await stop.wait()

    async def close(self, *, stop_actors: bool = True, timeout: float = 30.0) -> None:
        """Stop the pool. With ``stop_actors``, each actor drains (up to ``timeout``), hands
        back what is unfinished and is killed; without, the detached actors keep executing
        what they hold and a later pool of the same name attaches to them."""
        if stop_actors and self._actors:
            calls = [a.drain.remote(timeout) for a in self._actors]
            await asyncio.gather(*calls, return_exceptions=True)
            await asyncio.gather(*(a.close.remote() for a in self._actors), return_exceptions=True)
            for actor in self._actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)
            self._actors = []
        self._store = None
        if self._backend is not None:
            backend, self._backend = self._backend, None
            await backend.aclose()

    # -- dispatching --------------------------------------------------------------------------

    async def _loads(self) -> dict[int, int]:
        """Each reachable actor's load; one that died for good is started again."""

        async def ask(index: int) -> int | None:
            try:
                return int(
                    await asyncio.wait_for(self._actors[index].load.remote(), self.take_timeout / 5)
                )
            except (ActorDiedError, ActorUnschedulableError) as exc:
                # Died for good, or pinned to a node that is gone (Ray cannot restart it).
                log.warning(
                    "actor %s is gone (%s); starting a new one",
                    self.actor_name(index),
                    type(exc).__name__,
                )
                self._actors[index] = self._make(index)
                self.stats.replaced += 1
                return None
            except (RayError, TimeoutError):
                return None  # restarting (Ray brings it back) or busy: skip it this round

        answers = await asyncio.gather(*(ask(i) for i in range(len(self._actors))))
        return {i: load for i, load in enumerate(answers) if load is not None}

    async def _candidates(self, want: int, waiting: int) -> list[RunRecord]:
        assert self._store is not None
        now = time.time()
        # Queued runs come first in creation order, behind the ones actors hold for a slot.
        page = await self._store.list(status="queued", kind="run", limit=min(1000, want + waiting))
        found = [r for r in page.records if _claimable(r, self._graph, now)]
        if len(found) < want and now - self._last_sweep >= self.sweep_interval:
            self._last_sweep = now
            seen = {r.run_id for r in found}
            for record in await self._store.orphans(now, limit=want):
                if record.run_id not in seen and _claimable(record, self._graph, now):
                    found.append(record)
        return found[:want]

    async def dispatch_once(self) -> int:
        """One round: read the claimable runs and hand them to the actors with room; returns
        how many were taken."""
        if self._store is None:
            await self.start()
        self.stats.rounds += 1
        loads = await self._loads()
        free = {i: self.capacity - load for i, load in loads.items() if load < self.capacity}
        if not free:
            return 0
        # Runs an actor holds beyond its slots wait as `queued` (owned): the page must reach
        # past them to the unowned ones.
        waiting = sum(max(0, load - self.spec.concurrency) for load in loads.values())
        candidates = await self._candidates(sum(free.values()), waiting)
        if not candidates:
            return 0
        takeovers = {r.run_id for r in candidates if r.status == "running" or r.owner}
        batches = spread([r.run_id for r in candidates], free)

        async def hand(index: int, batch: list[str]) -> list[str]:
            # Bounded: an actor whose node just died answers only once Ray notices (seconds
            # to tens of them). Whatever it claims meanwhile it executes; what it did not
            # claim stays claimable for the next round.
            try:
                answer = await asyncio.wait_for(
                    self._actors[index].take.remote(batch), self.take_timeout
                )
            except (RayError, TimeoutError) as exc:
                log.warning("actor %s did not take runs: %r", self.actor_name(index), exc)
                return []
            return list(answer["taken"])

        taken = await asyncio.gather(*(hand(i, b) for i, b in batches.items()))
        moved = [run_id for batch in taken for run_id in batch]
        self.stats.dispatched += len(moved)
        self.stats.takeovers += sum(1 for run_id in moved if run_id in takeovers)
        return len(moved)
