"""Replaying one node of a checkpoint in isolation: the quickest loop for fixing a node.

:meth:`CompiledGraph.areplay_node` runs a node that a checkpoint plans next, on that
checkpoint's state (its recorded input), and returns what the node writes *now*, with the
current code. The node's journaled calls (``ctx.step``, model and tool calls of an agent)
answer from the thread's journal under the keys the original run used, so a replay costs no
model call and repeats no side effect; ``live=True`` makes them run for real instead. A call
the journal has no entry for (new code, a superstep that never ran) runs live either way,
and the result says how many of each there were.

A replay never writes to the thread: no checkpoint, no journal entry, no event, no lease.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tensorsketch.durable.journal import RunJournal
from tensorsketch.durable.reads import read_checkpoint
from tensorsketch.effects import EffectLog
from tensorsketch.pregel.loop import Run
from tensorsketch.pregel.restore import SpecCodec, validated_values
from tensorsketch.pregel.spec import GraphSpec
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.suspension import Interrupt

__all__ = ["NodeReplay", "ReplayedTask", "replay_node"]

#: Journal keys that hold a person's decision (approvals, answers), not an effect's result:
#: a live replay still reads them, since they are the node's input rather than its calls.
_DECISION_PREFIX = "resume:"
_INTENT_PREFIX = "intent:"


@dataclass(frozen=True, slots=True)
class ReplayedTask:
    """One instance of the replayed node (a plain node has one; a ``Send`` fan-out one per
    payload).

    :param instance: ``""`` for a plain node, ``"#k"`` for the ``k``-th ``Send`` instance.
    :param writes: what the node returned, as the state updates it would apply (``None``
        when it raised or suspended).
    :param error: ``"Type: message"`` when the node raised.
    :param interrupts: what it would wait for, when it suspended (``PendingInterrupt``
        dicts).
    """

    instance: str
    writes: dict[str, Any] | None
    error: str | None = None
    interrupts: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class NodeReplay:
    """The result of :meth:`CompiledGraph.areplay_node`.

    :param replayed: journaled calls answered from the thread's journal.
    :param live: calls that ran for real (all of them with ``live=True``; otherwise the ones
        the journal had no entry for).
    """

    node: str
    checkpoint_id: str
    step: int
    tasks: tuple[ReplayedTask, ...]
    replayed: int
    live: int
    duration_ms: float


class _ReadOnlyJournal(RunJournal):
    """The thread's journal for reading; every write stays in this object."""

    def __init__(self, backend: Backend, thread_id: str, spec: GraphSpec, *, live: bool) -> None:
        super().__init__(backend, thread_id, SpecCodec(spec, backend.serializer))
        self._live = live
        self._local: dict[str, Any] = {}
        self.replayed = 0
        self.ran = 0

    def ensure_lease(self) -> None:
        """No lease is taken: nothing is written to the thread."""

    async def lookup(self, key: str) -> tuple[bool, Any]:
        if key in self._local:
            return True, self._local[key]
        if self._live and not key.startswith(_DECISION_PREFIX):
            return False, None
        found, value = await super().lookup(key)
        if found and not key.startswith((_DECISION_PREFIX, _INTENT_PREFIX)):
            self.replayed += 1
        return found, value

    async def lookup_many(self, keys: list[str]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for key in keys:
            hit, value = await self.lookup(key)
            if hit:
                found[key] = value
        return found

    async def _write(self, items: list[tuple[str, Any]], what: str) -> None:
        del what
        for key, value in items:
            if key not in self._local:
                self._local[key] = value
                self.ran += not key.startswith(_INTENT_PREFIX)

    def record_later(self, key: str, value: Any) -> None:
        self._later = []  # nothing is written: the value is kept here
        if key not in self._local:
            self._local[key] = value
            self.ran += 1


async def replay_node(
    spec: GraphSpec,
    thread_id: str,
    backend: Backend,
    checkpoint_id: str,
    node: str,
    *,
    live: bool = False,
    resume: Mapping[str, Any] | None = None,
    deps: Any = None,
) -> NodeReplay:
    """Run ``node`` as planned at ``checkpoint_id`` of ``thread_id``; see
    :meth:`CompiledGraph.areplay_node`."""
    found = await read_checkpoint(backend, thread_id, checkpoint_id)
    if found is None:
        msg = (
            f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}; take a checkpoint id "
            "from get_history() of the same thread and backend."
        )
        raise KeyError(msg)
    if node not in spec.nodes:
        msg = f"{node!r} is not a node of {spec.name}; its nodes are {sorted(spec.nodes)}."
        raise ValueError(msg)
    planned = [name for name, _ in found.tasks]
    if node not in planned:
        msg = (
            f"checkpoint {checkpoint_id!r} does not plan {node!r} (it plans "
            f"{sorted(set(planned)) or 'nothing: the run ended there'}); replay a node from "
            "the checkpoint before the superstep it ran in (its parent)."
        )
        raise ValueError(msg)
    journal = _ReadOnlyJournal(backend, thread_id, spec, live=live)
    run = Run(spec, thread_id=thread_id)
    if deps is not None:
        run.deps = deps
    run.values = validated_values(spec, found)
    run.step = found.step
    run.checkpoint_id = run.plan_id = found.id
    run.resume.update(resume or {})
    run.effects = EffectLog(journal, run.resume)
    tasks = [task for task in run.tasks_from_plan(found.plan) if task.spec.name == node]
    started = time.perf_counter()
    results: list[ReplayedTask] = []
    for task in tasks:
        try:
            writes = await run.run_task(task, found.step)
        except Interrupt as exc:
            pending = tuple(p.to_dict() for p in exc.pending)
            results.append(ReplayedTask(task.instance, None, interrupts=pending))
        except Exception as exc:
            results.append(ReplayedTask(task.instance, None, f"{type(exc).__name__}: {exc}"))
        else:
            results.append(ReplayedTask(task.instance, dict(writes)))
    return NodeReplay(
        node=node,
        checkpoint_id=found.id,
        step=found.step,
        tasks=tuple(results),
        replayed=journal.replayed,
        live=journal.ran,
        duration_ms=round((time.perf_counter() - started) * 1000, 3),
    )
