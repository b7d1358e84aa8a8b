"""The worker side of :mod:`tensorsketch.ray.executor`: what runs inside a batch's Ray task.

Ray pickles a remote function with its globals, so the task itself is a thin wrapper over
:func:`run_batch` here, found by module: the per-process caches below are then the worker's
own, not copies of the caller's.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from typing import Any

import ray
from ray import cloudpickle
from tensorsketch.executors import SendCall, Superstep, TaskOutcome, portable_error, run_calls
from tensorsketch.pregel import GraphSpec

__all__ = ["Ledger", "run_batch"]

#: Compiled graphs a worker process keeps deserialized (by object id).
_GRAPHS_KEPT = 8
#: Supersteps' shared state a worker process keeps deserialized (by object id).
_STATES_KEPT = 4


class _Kept:
    """A small per-process LRU of objects fetched from the object store."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self.lock = threading.Lock()

    def get(self, ref: ray.ObjectRef[Any], load: bool = False) -> Any:
        key = ref.hex()
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
        value = ray.get(ref)
        if load:
            value = cloudpickle.loads(value)
        with self.lock:
            self.items[key] = value
            while len(self.items) > self.size:
                self.items.popitem(last=False)
        return value


_graphs = _Kept(_GRAPHS_KEPT)
_states = _Kept(_STATES_KEPT)


class Ledger:
    """Effects of batches still in flight, reported as they complete: what a retried batch
    replays. Entries go once the caller has journaled the batch."""

    def __init__(self) -> None:
        self.batches: dict[str, list[tuple[int, str, Any]]] = {}

    def begin(self, batch: str) -> list[tuple[int, str, Any]]:
        return list(self.batches.setdefault(batch, []))

    def record(self, batch: str, index: int, key: str, value: Any) -> None:
        self.batches.setdefault(batch, []).append((index, key, value))

    def forget(self, batches: list[str]) -> None:
        for batch in batches:
            self.batches.pop(batch, None)


def run_batch(
    graph_box: list[ray.ObjectRef[bytes]],
    state_box: list[ray.ObjectRef[Superstep]],
    calls: list[SendCall],
    batch: str,
    ledger: Any,
) -> tuple[str, str, list[TaskOutcome]]:
    """One Ray task: a batch of calls on this worker's event loop. The graph and the state
    come boxed (a list), so Ray does not fetch them per task: the worker keeps them."""
    graph: GraphSpec = _graphs.get(graph_box[0], load=True)
    work: Superstep = _states.get(state_box[0])
    on_effect = None
    earlier: dict[int, list[tuple[str, Any]]] = {}
    if ledger is not None:
        # A retry finds what the dead attempt did: it replays, and goes back with this
        # attempt's effects (the caller has not journaled it yet).
        by_index = {call.index: call for call in calls}
        for index, key, value in ray.get(ledger.begin.remote(batch)):
            if key not in by_index[index].replay:
                by_index[index].replay[key] = value
                earlier.setdefault(index, []).append((key, value))

        async def on_effect(index: int, key: str, value: Any) -> None:
            await ledger.record.remote(batch, index, key, value)

    outcomes = asyncio.run(run_calls(graph, work, calls, on_effect=on_effect))
    for outcome in outcomes:
        if outcome.index in earlier:
            outcome.effects[:0] = earlier[outcome.index]
        if outcome.error is not None:
            outcome.error = portable_error(outcome.error)
    return ray.get_runtime_context().get_node_id(), batch, outcomes
