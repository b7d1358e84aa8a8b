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
from tensorsketch.pregel.spec import GraphSpec

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


def instance_of(step: int, call: SendCall) -> str:
    """The ledger's name of one ``Send`` instance in one superstep (its effect keys' start)."""
    return f"{step}:{call.node}{call.instance}"


class Ledger:
    """Effects shipped instances reported the moment they completed and the caller has not
    journaled yet, by thread and instance: what a batch run again (Ray retried it, or the
    thread was resumed after the superstep failed) replays instead of repeating."""

    def __init__(self) -> None:
        self.threads: dict[str, dict[str, list[tuple[str, Any]]]] = {}

    def lookup(self, thread: str, instances: list[str]) -> dict[str, list[tuple[str, Any]]]:
        known = self.threads.get(thread, {})
        return {name: list(known[name]) for name in instances if name in known}

    def record(self, thread: str, instance: str, key: str, value: Any) -> None:
        self.threads.setdefault(thread, {}).setdefault(instance, []).append((key, value))

    def forget(self, thread: str, instances: list[str]) -> None:
        known = self.threads.get(thread)
        if known is None:
            return
        for name in instances:
            known.pop(name, None)
        if not known:
            del self.threads[thread]


def run_batch(
    graph_box: list[ray.ObjectRef[bytes]],
    state_box: list[ray.ObjectRef[Superstep]],
    calls: list[SendCall],
    ledger: Any,
) -> tuple[str, list[TaskOutcome]]:
    """One Ray task: a batch of calls on this worker's event loop. The graph and the state
    come boxed (a list), so Ray does not fetch them per task: the worker keeps them."""
    graph: GraphSpec = _graphs.get(graph_box[0], load=True)
    work: Superstep = _states.get(state_box[0])
    on_effect = None
    earlier: dict[int, list[tuple[str, Any]]] = {}
    if ledger is not None and work.thread_id is not None:
        thread = work.thread_id
        names = {call.index: instance_of(work.step, call) for call in calls}
        # What an earlier attempt did and the journal does not have yet: it replays, and
        # goes back with this attempt's effects, for the caller to journal.
        found = ray.get(ledger.lookup.remote(thread, list(names.values())))
        for call in calls:
            for key, value in found.get(names[call.index], ()):
                if key not in call.replay:
                    call.replay[key] = value
                    earlier.setdefault(call.index, []).append((key, value))

        async def on_effect(index: int, key: str, value: Any) -> None:
            await ledger.record.remote(thread, names[index], key, value)

    outcomes = asyncio.run(run_calls(graph, work, calls, on_effect=on_effect))
    for outcome in outcomes:
        if outcome.index in earlier:
            outcome.effects[:0] = earlier[outcome.index]
        if outcome.error is not None:
            outcome.error = portable_error(outcome.error)
    return ray.get_runtime_context().get_node_id(), outcomes
