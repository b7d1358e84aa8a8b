"""``RayExecutor``: a superstep's ``Send`` instances as Ray tasks, in batches across the cluster.

``compile(executor="ray")`` (or ``RayExecutor(...)``) ships each superstep's ``Send`` instances
to the cluster through the engine's executor seam (:mod:`tensorsketch.executors`):

- **the graph** is cloudpickled once per compiled graph into Ray's object store; each worker
  process fetches it once and keeps it (a small LRU). Node classes, schemas and routing
  functions defined in an importable module are pickled by reference — that module must
  import on every node, at the same version; ones defined in ``__main__`` or a function travel
  by value;
- **the state** the instances read is put into the object store once per superstep and
  fetched once per worker process, never copied into each task;
- **the calls** go out ``batch_size`` per Ray task, in plan order; each batch runs on one
  worker's event loop (:func:`tensorsketch.executors.run_calls`), and its outcomes come back
  to the barrier as it finishes, which folds them in plan order — the result is the
  in-process run's, bit for bit.

Effects (``ctx.step``) are journaled by the caller when a batch returns. For a durable run a
batch also reports each effect, the moment it completes, to a ledger actor owned by this
executor (by thread and ``Send`` instance); a batch that runs again — Ray retried it after its
worker died, or the superstep failed and the thread is invoked again through this executor —
reads the ledger first and replays what the earlier attempt did instead of doing it again.
Entries of the batches that came back are dropped at the end of the superstep (the caller has
journaled them). A durable superstep never cancels a running batch — a cancel could land
between an effect and its report — so it keeps at most two waves of batches in flight and,
when it fails, waits for them. What is at-least-once: an effect in flight at the moment of a
kill (started, not yet reported), and the ledger's entries if the calling process dies.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import threading
from collections.abc import AsyncIterator, Mapping
from typing import Any

import ray
from ray import cloudpickle
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from tensorsketch.executors import (
    Executor,
    SendCall,
    Superstep,
    TaskOutcome,
)
from tensorsketch.pregel.spec import GraphSpec
from tensorsketch.ray import _batch
from tensorsketch.ray.exceptions import RayFleetError

__all__ = ["RayExecutor"]

#: Compiled graphs an executor keeps in the object store (by identity), newest last.
_GRAPHS_PUT = 8

#: The ledger as a Ray actor class (zero CPUs: it only keeps a dict).
_LedgerActor = ray.remote(num_cpus=0)(_batch.Ledger)


@ray.remote
def _run_batch(
    graph_box: list[ray.ObjectRef[bytes]],
    state_box: list[ray.ObjectRef[Superstep]],
    calls: list[SendCall],
    ledger: Any,
) -> tuple[str, list[TaskOutcome]]:
    """One batch of calls (see :func:`tensorsketch.ray._batch.run_batch`)."""
    return _batch.run_batch(graph_box, state_box, calls, ledger)


class RayExecutor(Executor):
    """Runs a superstep's ``Send`` instances as Ray tasks, ``batch_size`` per task.

    :param address: the cluster to join when Ray is not initialized yet (``"auto"``, or
        ``"127.0.0.1:6379"``); with Ray already initialized in this process it is not used.
    :param batch_size: ``Send`` instances per Ray task (100: one task costs about as much as
        a hundred small node bodies).
    :param max_retries: how often Ray runs a batch again whose worker died.
    :param num_cpus: CPUs a batch task reserves (fractions let more batches share a core).
    :param init: further ``ray.init`` keyword arguments (``namespace``,
        ``_node_ip_address``, ...), used with ``address``.
    :param task_options: further ``.options(...)`` of each batch task (``resources``,
        ``runtime_env``, or a ``scheduling_strategy`` instead of the default: the cluster's
        nodes in turn, with a soft affinity).
    """

    name = "ray"

    def __init__(
        self,
        *,
        address: str | None = None,
        batch_size: int = 100,
        max_retries: int = 3,
        num_cpus: float = 1.0,
        init: Mapping[str, Any] | None = None,
        task_options: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            msg = f"RayExecutor(batch_size=...) takes an int >= 1, got {batch_size!r}."
            raise ValueError(msg)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            msg = f"RayExecutor(max_retries=...) takes an int >= 0, got {max_retries!r}."
            raise ValueError(msg)
        self._options: dict[str, Any] = {
            "address": address,
            "batch_size": batch_size,
            "max_retries": max_retries,
            "num_cpus": num_cpus,
            "init": dict(init or {}),
            "task_options": dict(task_options or {}),
        }
        self.address = address
        self.batch_size = batch_size
        self.max_retries = max_retries
        self.num_cpus = num_cpus
        self.init_options = dict(init or {})
        self.task_options = dict(task_options or {})
        #: Batches run per cluster node id, over this executor's life (for reports).
        self.nodes: collections.Counter[str] = collections.Counter()
        self._graphs: collections.OrderedDict[int, tuple[GraphSpec, ray.ObjectRef[bytes]]] = (
            collections.OrderedDict()
        )
        self._ledger: Any = None
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        # A graph compiled with this executor pickles (a worker pool ships it): the copy is
        # a fresh executor with the same options, not this one's refs and ledger.
        return (_rebuild, (self._options,))

    def _connect(self) -> None:
        if ray.is_initialized():
            return
        if self.address is None:
            msg = (
                "RayExecutor needs a Ray cluster: call ray.init(address=...) in this process "
                "first, or pass RayExecutor(address='auto' or 'HOST:PORT')."
            )
            raise RayFleetError(msg)
        ray.init(address=self.address, **self.init_options)

    def _graph_ref(self, graph: GraphSpec) -> ray.ObjectRef[bytes]:
        """The graph in the object store, put once (cloudpickle: by value where needed)."""
        with self._lock:
            found = self._graphs.get(id(graph))
            if found is not None and found[0] is graph:
                self._graphs.move_to_end(id(graph))
                return found[1]
        # The workers' copy runs its instances itself: it does not carry this executor.
        shipped = dataclasses.replace(graph, executor=None)
        try:
            blob: bytes = cloudpickle.dumps(shipped)  # type: ignore[no-untyped-call]
        except Exception as exc:
            msg = (
                f"graph {graph.name!r} cannot be pickled for the Ray workers ({exc}); its "
                "nodes, schemas and routing functions must pickle (define them in a module "
                "the workers can import, and keep open clients out of node attributes)."
            )
            raise RayFleetError(msg) from exc
        ref = ray.put(blob)
        with self._lock:
            self._graphs[id(graph)] = (graph, ref)
            while len(self._graphs) > _GRAPHS_PUT:
                self._graphs.popitem(last=False)
        return ref

    def _ledger_actor(self) -> Any:
        with self._lock:
            if self._ledger is None:
                self._ledger = _LedgerActor.remote()
            return self._ledger

    async def run(self, graph: GraphSpec, work: Superstep) -> AsyncIterator[list[TaskOutcome]]:
        self._connect()
        graph_box = [self._graph_ref(graph)]
        state_box = [ray.put(dataclasses.replace(work, calls=[]))]
        thread = work.thread_id
        ledger = self._ledger_actor() if work.durable and thread is not None else None
        size = self.batch_size
        limit = work.max_concurrency
        in_flight = None
        if limit is not None:
            size = min(size, limit)
            in_flight = max(1, limit // size)
        if ledger is not None:
            # A durable superstep never cancels a running batch (a cancel could land between
            # an effect and its ledger record; see the end): it submits a few waves at a
            # time, so a failure leaves little to finish.
            resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
            waves = 2 * max(1, int(resources.get("CPU", 1.0) / max(self.num_cpus, 0.01)))
            in_flight = waves if in_flight is None else min(in_flight, waves)
        options: dict[str, Any] = {"max_retries": self.max_retries, "num_cpus": self.num_cpus}
        options.update(self.task_options)
        task = _run_batch.options(**options)
        # Batches go to the nodes in turn (soft: Ray places one elsewhere when its node is
        # full or gone): Ray's own placement — even "SPREAD" — packs short tasks onto the
        # caller's node while it has room, and a fan-out is meant to use the cluster.
        placed = [] if "scheduling_strategy" in options else _placements()
        calls = work.calls
        starts = iter(range(0, len(calls), size))
        running: dict[asyncio.Future[Any], tuple[ray.ObjectRef[Any], list[SendCall]]] = {}

        def submit(start: int) -> None:
            batch = calls[start : start + size]
            chosen = task
            if placed:
                where = placed[(start // size) % len(placed)]
                chosen = _run_batch.options(**options, scheduling_strategy=where)
            ref = chosen.remote(graph_box, state_box, batch, ledger)
            running[asyncio.wrap_future(ref.future())] = (ref, batch)

        for start in starts:
            submit(start)
            if in_flight is not None and len(running) >= in_flight:
                break
        returned: list[str] = []
        try:
            while running:
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for future in done:
                    _, batch = running.pop(future)
                    node, outcomes = future.result()
                    self.nodes[node] += 1
                    returned.extend(_batch.instance_of(work.step, call) for call in batch)
                    yield outcomes
                for start in starts:
                    submit(start)
                    if in_flight is not None and len(running) >= in_flight:
                        break
        finally:
            if ledger is None:
                for ref, _ in running.values():
                    ray.cancel(ref)
            elif running:
                # Let the batches still running finish (their effects reach the ledger), so
                # that the superstep's next attempt cannot run an instance beside its old one.
                await asyncio.wait(running)
            # The caller journals what came back; what did not (a batch out of retries, or
            # cancelled because a sibling failed) stays, for the superstep's next attempt.
            if ledger is not None and returned:
                ledger.forget.remote(thread, returned)


def _rebuild(options: dict[str, Any]) -> RayExecutor:
    return RayExecutor(**options)


def _placements() -> list[NodeAffinitySchedulingStrategy]:
    """A soft affinity to each alive node with CPUs, for placing batches in turn."""
    nodes = ray.nodes()  # type: ignore[no-untyped-call]
    return [
        NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=True)
        for node in nodes
        if node.get("Alive") and node.get("Resources", {}).get("CPU", 0) > 0
    ]
