"""The crash harness: prove a backend keeps effects exactly-once across ``SIGKILL``.

For one backend, :func:`run_crash_matrix`

1. runs the scenario graph once, uninterrupted, in a child process, counting its *durable
   boundaries* — every effect recorded, checkpoint saved and event batch appended, plus the
   first lease taken;
2. for each boundary ``n``: runs the scenario on a fresh thread in a child process that
   ``SIGKILL``\\ s itself the moment boundary ``n`` has been committed; then resumes the thread
   in this process (waiting for the dead child's lease to lapse, which also exercises lease
   takeover) and checks that every side effect ran exactly once, the final state equals the
   uninterrupted run's, and the event log's ``seq`` strictly increases.

The side effects are counted in an :class:`EffectLedger`, a SQLite file separate from the
store under test. Children are forked from a ``forkserver`` that has already imported
TensorSketch and the backend's driver, so each kill point costs milliseconds, not an
interpreter start.

The hook is the :class:`CrashingBackend` wrapper, so core needs no test-only code path: it
forwards every operation to the real backend and dies right after the n-th boundary write.
For a store that lives in process memory (``InMemoryBackend``) a kill would take the store
with it, so pass the backend *instance* instead of a :class:`BackendSpec`: the run is then
abandoned in-process (:class:`SimulatedCrash`, after which the wrapper refuses every call, as
a dead process would) and resumed on the same store.

One window is outside any journal's reach and the scenario avoids it on purpose: an effect
that completed but whose result was not yet recorded when the process died runs again on
resume. The scenario's fan-out workers therefore take turns on their effects (each records
before the next calls out), so every kill point falls on a clean boundary, including the
ones halfway through the fan-out. With ``durability="async"`` a checkpoint commits while the
next superstep's effects run, so a kill point at its commit that finds an effect calling
out (intent journaled, result not yet) moves to the next boundary where none is.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import multiprocessing
import operator
import os
import re
import signal
import sqlite3
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

from tensorsketch.channels import Reducer
from tensorsketch.command import Command
from tensorsketch.constants import END, START
from tensorsketch.context import Context
from tensorsketch.durable.event_rows import decode_row
from tensorsketch.durable.modes import Durability, check_durability
from tensorsketch.effect_keys import INTENT_PREFIX
from tensorsketch.errors import ThreadBusyError
from tensorsketch.graph import Graph
from tensorsketch.name_registry import resolve_target
from tensorsketch.node import Node
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.registry import backends
from tensorsketch.runtime.backends.base import (
    Backend,
    StoredCheckpoint,
    StoredEvent,
    ThreadOpening,
)
from tensorsketch.schema import Schema
from tensorsketch.send import Send
from tensorsketch.testing.order import ORDER_INPUT, OrderState, order_graph

__all__ = [
    "POINTS_AT_ONCE",
    "BackendSpec",
    "CrashReport",
    "CrashingBackend",
    "EffectLedger",
    "FanOutReport",
    "HandBackState",
    "KillResult",
    "SimulatedCrash",
    "each_point",
    "fanout_graph",
    "handback_scenario_graph",
    "nested_scenario_graph",
    "points_at_once",
    "run_crash_matrix",
    "run_fanout_crash",
    "scenario_graph",
]

SCENARIO = "tensorsketch.testing.crash:scenario_graph"
SCENARIO_INPUT: dict[str, Any] = ORDER_INPUT


# -- the counted side effects -----------------------------------------------------------------


class EffectLedger:
    """A SQLite file counting how often each side effect really ran, per thread."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        with self._connect() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS calls (thread TEXT NOT NULL, effect TEXT NOT NULL, "
                "n INTEGER NOT NULL, PRIMARY KEY (thread, effect))"
            )

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        return conn

    def hit(self, thread: str, effect: str) -> int:
        """Count one call of ``effect`` (committed before returning); return the new count."""
        conn = self._connect()
        try:
            row = conn.execute(
                "INSERT INTO calls (thread, effect, n) VALUES (?, ?, 1) ON CONFLICT "
                "(thread, effect) DO UPDATE SET n = n + 1 RETURNING n",
                (thread, effect),
            ).fetchone()
        finally:
            conn.close()
        return int(row[0])

    def total(self) -> int:
        """How many side effects ran, over every thread."""
        conn = self._connect()
        try:
            row = conn.execute("SELECT COALESCE(SUM(n), 0) FROM calls").fetchone()
        finally:
            conn.close()
        return int(row[0])

    def counts(self, thread: str) -> dict[str, int]:
        """Every effect of ``thread`` and how often it ran."""
        conn = self._connect()
        try:
            rows = conn.execute(
                "SELECT effect, n FROM calls WHERE thread = ? ORDER BY effect", (thread,)
            ).fetchall()
        finally:
            conn.close()
        return {str(effect): int(n) for effect, n in rows}


# -- the scenario -----------------------------------------------------------------------------

#: The harness's standard state (the shared order scenario's).
CrashState = OrderState


class _Ledgered:
    """The scenario's side effects counted in an :class:`EffectLedger`, per node instance
    (so a worker's effect is told apart from its siblings'), each returning ``name-n``."""

    def __init__(self, ledger: EffectLedger) -> None:
        self.ledger = ledger

    def perform(self, ctx: Context, name: str) -> Callable[[], str]:
        def call() -> str:
            n = self.ledger.hit(ctx.thread_id or "", f"{ctx.node}{ctx.instance}:{name}")
            return f"{name}-{n}"

        return call

    def after(self, ctx: Context, where: str) -> None:
        return None  # the harness kills the process; it injects no failures


def scenario_graph(ledger: EffectLedger) -> CompiledGraph[OrderState]:
    """The harness's standard graph: the shared order scenario
    (:mod:`tensorsketch.testing.order`), every side effect a counted ledger call, the
    fan-out's workers taking turns so every kill point falls on a clean boundary."""
    return order_graph(_Ledgered(ledger), name="crash-scenario", take_turns=True)


#: The standard scenario two subgraph levels deep (``Graph.add(compiled_graph)``).
NESTED_SCENARIO = "tensorsketch.testing.crash:nested_scenario_graph"


def nested_scenario_graph(ledger: EffectLedger) -> CompiledGraph[OrderState]:
    """:func:`scenario_graph` as a subgraph node of a graph that is itself a subgraph node:
    every effect happens two levels down, on the child threads of the run's thread."""
    inner = scenario_graph(ledger)
    middle = Graph(OrderState, name="Middle").add(inner, name="Order")
    middle.edge(START, "Order").edge("Order", END)
    outer = Graph(OrderState, name="crash-nested").add(middle.compile(), name="Middle")
    return outer.edge(START, "Middle").edge("Middle", END).compile()


#: A child that hands the run back to its parent (``Command(graph=Command.PARENT)``).
HANDBACK_SCENARIO = "tensorsketch.testing.crash:handback_scenario_graph"
HANDBACK_INPUT: dict[str, Any] = {"item": "lamp"}


class HandBackState(Schema):
    """The hand-back scenario's parent state; ``owner`` is the parent's alone."""

    item: str = ""
    receipts: Annotated[list[str], Reducer(operator.add)] = []
    owner: str = ""


class _TeamState(Schema):
    item: str = ""
    receipts: Annotated[list[str], Reducer(operator.add)] = []


def handback_scenario_graph(ledger: EffectLedger) -> CompiledGraph[HandBackState]:
    """A subgraph node whose child makes two counted effects and then hands the run back
    (``Command(graph=Command.PARENT, goto="Refund")``); the parent's ``Refund`` makes a third.
    A kill anywhere must neither repeat an effect nor run the child past its hand-back."""
    effects = _Ledgered(ledger)

    class Inspect(Node):
        class In(Schema):
            item: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            seen = await ctx.step("inspect", effects.perform(ctx, "inspect"))
            note = await ctx.step("escalate", effects.perform(ctx, "escalate"))
            return Command(
                graph=Command.PARENT,
                goto="Refund",
                update={"receipts": [f"{seen}:{inp.item}", note], "owner": "refunds"},
            )

    class PastTheHandBack(Node):
        async def run(self, ctx: Context, inp: Any) -> Any:
            msg = "the child ran past its Command(graph=Command.PARENT)"
            raise AssertionError(msg)

    class Refund(Node):
        class In(Schema):
            owner: str

        class Out(Schema):
            receipts: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            done = await ctx.step("refund", effects.perform(ctx, "refund"))
            return self.Out(receipts=[f"{done} by {inp.owner}"])

    team = Graph(_TeamState, name="Team").add(Inspect).add(PastTheHandBack, name="Past")
    team.edge(START, "Inspect").edge("Inspect", "Past").edge("Past", END)
    desk = Graph(HandBackState, name="crash-handback")
    desk.add(team.compile(), destinations=("Refund",)).add(Refund)
    return desk.edge(START, "Team").edge("Refund", END).compile()


# -- a wide fan-out, killed halfway -------------------------------------------------------------

FANOUT = "tensorsketch.testing.crash:fanout_graph"


class FanOutState(Schema):
    """``jobs`` fan out to one worker each; ``done`` collects their results in plan order."""

    jobs: list[int] = []
    done: Annotated[list[int], Reducer(operator.add)] = []


#: Called by every fan-out worker as it finishes (the child kills itself from here).
_ON_FINISH: list[Callable[[int], None]] = []


def fanout_graph() -> CompiledGraph[FanOutState]:
    """``len(jobs)`` workers that finish one after another (worker ``k`` after ~``k`` ms)."""

    class Bulk(Node):
        class In(Schema):
            jobs: list[int]

        class Out(Schema):
            done: list[int]

        async def run(self, ctx: Context, inp: Any) -> Any:
            k = inp.jobs[0]
            await asyncio.sleep(0.001 * k)
            for hook in _ON_FINISH:
                hook(k)
            return self.Out(done=[k])

    def spread(state: FanOutState) -> list[Send]:
        return [Send("Bulk", {"jobs": [k]}) for k in state.jobs]

    graph = Graph(FanOutState, name="fan-out").add(Bulk).router(START, spread)
    return graph.edge("Bulk", END).compile()


@dataclass(frozen=True, slots=True)
class FanOutReport:
    """A fan-out of ``tasks`` workers killed once ``kill_after`` finished workers' writes
    were journaled."""

    backend: str
    tasks: int
    kill_after: int
    killed: bool
    #: Workers that ran again on resume: at most ``tasks - kill_after`` (fewer by the
    #: finished workers whose writes shared the last batch journaled before the kill).
    rerun: int
    final_ok: bool
    #: Finished workers' writes journaled before the kill, when the crash was in this process
    #: (``None`` for a killed child): then ``rerun == tasks - journaled`` exactly.
    journaled: int | None = None


def _fanout_child(config: dict[str, Any]) -> None:
    asyncio.run(_fanout_child_async(config))


async def _fanout_child_async(config: dict[str, Any]) -> None:
    spec = BackendSpec(config["backend"]["target"], config["backend"]["kwargs"])
    inner = spec.create()
    inner.lease_ttl = float(config["lease_ttl"])
    backend = CrashingBackend(inner, mode="kill", crash_after_writes=int(config["kill_after"]))
    jobs = list(range(int(config["tasks"])))
    await fanout_graph().invoke({"jobs": jobs}, thread_id=config["thread"], backend=backend)


async def run_fanout_crash(
    backend: BackendSpec | Backend,
    *,
    tasks: int = 1000,
    kill_after: int = 500,
    lease_ttl: float = 1.0,
) -> FanOutReport:
    """Kill a ``tasks``-way ``Send`` fan-out once ``kill_after`` finished workers' writes
    are journaled, resume it, and count the workers that run again (per-branch commit keeps
    the finished ones). The kill follows the journal, not the clock, so a slow disk cannot
    change what is being measured.

    With a :class:`BackendSpec` the run is a child process that kills itself (SIGKILL); with a
    backend instance the crash is simulated in-process (:class:`SimulatedCrash`).
    """
    thread = f"fanout-{uuid.uuid4().hex[:8]}"
    jobs = list(range(tasks))
    app = fanout_graph()
    journaled: int | None
    if isinstance(backend, BackendSpec):
        store = backend.create()
        label = backend.target
        ctx = _mp_context(_preload(backend, FANOUT))
        config = {
            "fanout": True,
            "backend": {"target": backend.target, "kwargs": dict(backend.kwargs)},
            "thread": thread,
            "tasks": tasks,
            "kill_after": kill_after,
            "lease_ttl": lease_ttl,
        }
        killed = await _spawn(ctx, config) == -signal.SIGKILL
        journaled = None
    else:
        store = backend
        label = type(backend).__name__
        store.lease_ttl = lease_ttl
        wrapper = CrashingBackend(store, mode="raise", crash_after_writes=kill_after)
        killed = False
        try:
            await app.invoke({"jobs": jobs}, thread_id=thread, backend=wrapper)
        except SimulatedCrash:
            killed = True
        journaled = wrapper.writes_journaled
    store.lease_ttl = lease_ttl
    rerun: list[int] = []
    _ON_FINISH[:] = [rerun.append]
    try:
        await _drain(app, store, thread, {"jobs": jobs}, lease_ttl)
        state = await app.aget_state(thread, store)
    finally:
        _ON_FINISH.clear()
        if isinstance(backend, BackendSpec):
            await store.aclose()
    final_ok = state is not None and state.done == jobs
    return FanOutReport(label, tasks, kill_after, killed, len(rerun), final_ok, journaled)


# -- the hook -----------------------------------------------------------------------------------


class SimulatedCrash(Exception):
    """An in-process stand-in for ``SIGKILL``: the run is abandoned where it stands.

    After it, the :class:`CrashingBackend` refuses every call, so the abandoned run can write
    nothing more (not even its lease release), exactly like a killed process.
    """


class CrashingBackend(Backend):
    """Forwards to ``inner`` and dies right after the ``crash_at``-th durable boundary.

    Boundaries are the writes a resume depends on: the first lease taken, every effect
    recorded, every checkpoint saved and every event batch appended (lease renewals are timing
    dependent and not counted). The batched units (``open_thread``, ``commit_step``) go to the
    inner backend's own implementation and count as one boundary each, as they commit as one.
    ``crash_at=0`` never crashes; :attr:`boundaries` names each boundary passed.
    ``mode="kill"`` sends ``SIGKILL`` to this process; ``mode="raise"`` raises
    :class:`SimulatedCrash` and then refuses every further call; ``mode="stop"`` freezes the
    process with ``SIGSTOP`` (it carries on where it was when it gets ``SIGCONT``).
    """

    def __init__(
        self, inner: Backend, *, crash_at: int = 0, mode: str = "kill", crash_after_writes: int = 0
    ) -> None:
        if mode not in ("kill", "raise", "stop"):
            msg = f"`mode` must be 'kill', 'raise' or 'stop', got {mode!r}."
            raise ValueError(msg)
        self.inner = inner
        self.serializer = inner.serializer
        self.name = inner.name
        self.lease_ttl = inner.lease_ttl
        self.fences_writes = inner.fences_writes
        self.crash_at = crash_at
        self.mode = mode
        self.boundaries: list[str] = []
        self.dead = False
        #: Die once this many finished tasks' writes are journaled (0: never).
        self.crash_after_writes = crash_after_writes
        self.writes_journaled = 0
        self._leased = False
        #: Effects whose intent is journaled and result not yet: they may be calling out.
        self._calling: set[str] = set()
        self._deferred = False

    def _check(self) -> None:
        if self.dead:
            raise SimulatedCrash("the process is gone")

    def _passed(self, boundary: str, *, commit: bool = False) -> None:
        self.boundaries.append(boundary)
        if len(self.boundaries) == self.crash_at and self._calling and (commit or self._deferred):
            # A checkpoint committing behind the run (durability="async") finished while an
            # effect was calling out: dying now could land after the call and before its
            # result is journaled, the window no journal reaches (see the module docstring).
            # Die at the next boundary with no effect calling out instead.
            self._deferred = True
            self.crash_at += 1
            return
        if len(self.boundaries) == self.crash_at:
            if self.mode == "stop":  # a stall: frozen until someone sends SIGCONT
                os.kill(os.getpid(), signal.SIGSTOP)
                return
            if self.mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            self.dead = True
            raise SimulatedCrash(f"crashed after boundary {self.crash_at}: {boundary}")

    async def save_checkpoint(self, checkpoint: StoredCheckpoint) -> None:
        self._check()
        await self.inner.save_checkpoint(checkpoint)
        self._passed(f"checkpoint step={checkpoint.step}")

    async def latest_checkpoint(self, thread_id: str) -> StoredCheckpoint | None:
        self._check()
        return await self.inner.latest_checkpoint(thread_id)

    async def get_checkpoint(self, thread_id: str, checkpoint_id: str) -> StoredCheckpoint | None:
        self._check()
        return await self.inner.get_checkpoint(thread_id, checkpoint_id)

    async def list_checkpoints(self, thread_id: str) -> list[StoredCheckpoint]:
        self._check()
        return await self.inner.list_checkpoints(thread_id)

    async def read_chain(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> list[StoredCheckpoint]:
        self._check()
        return await self.inner.read_chain(thread_id, checkpoint_id)

    async def record_effect(self, thread_id: str, key: str, value: bytes) -> None:
        self._check()
        await self.inner.record_effect(thread_id, key, value)
        self._calling_out([key])
        self._passed(f"effect {key}")

    async def lookup_effect(self, thread_id: str, key: str) -> bytes | None:
        self._check()
        return await self.inner.lookup_effect(thread_id, key)

    async def record_effects(
        self, thread_id: str, effects: list[tuple[str, bytes]], *, fence: str | None = None
    ) -> None:
        self._check()
        await self.inner.record_effects(thread_id, effects, fence=fence)
        self._calling_out([key for key, _ in effects])
        self.writes_journaled += sum(key.startswith("writes:") for key, _ in effects)
        if self.crash_after_writes and self.writes_journaled >= self.crash_after_writes:
            self.crash_at = len(self.boundaries) + 1  # this very boundary
        if effects:
            # "writes <task>" for a finished task's writes (the planning checkpoint's id in
            # the key is random, so it is left out of the label), "effect <key>" otherwise.
            self._passed(" + ".join(_entry_label(key) for key, _ in effects))

    async def lookup_effects(self, thread_id: str, keys: list[str]) -> dict[str, bytes]:
        self._check()
        return await self.inner.lookup_effects(thread_id, keys)

    async def list_effects(self, thread_id: str, prefix: str = "") -> list[tuple[str, bytes]]:
        """A read (a fork copies its origin's journal with it): no boundary."""
        self._check()
        return await self.inner.list_effects(thread_id, prefix)

    async def forget_effects(self, thread_id: str, keys: list[str]) -> None:
        """An outbox's removal (never a run's journal): no boundary."""
        self._check()
        await self.inner.forget_effects(thread_id, keys)

    async def transact_effect(
        self,
        thread_id: str,
        key: str,
        fn: Callable[[Any], Any],
        encode: Callable[[Any], bytes],
        *,
        fence: str | None = None,
    ) -> tuple[bytes | None, Any]:
        self._check()
        found = await self.inner.transact_effect(thread_id, key, fn, encode, fence=fence)
        if found[0] is None:
            self._passed(f"transaction {key}")
        return found

    async def append_events(self, thread_id: str, events: list[StoredEvent]) -> None:
        self._check()
        await self.inner.append_events(thread_id, events)
        self._passed(self._events_label(thread_id, events))

    async def read_events(self, thread_id: str, since: int = 0) -> list[StoredEvent]:
        self._check()
        return await self.inner.read_events(thread_id, since)

    async def last_event_seq(self, thread_id: str) -> int | None:
        self._check()
        return await self.inner.last_event_seq(thread_id)

    async def acquire_lease(self, thread_id: str, owner: str, ttl: float) -> bool:
        self._check()
        ok = await self.inner.acquire_lease(thread_id, owner, ttl)
        if ok and not self._leased:
            self._leased = True
            self._passed("lease")
        return ok

    async def release_lease(self, thread_id: str, owner: str) -> None:
        self._check()
        await self.inner.release_lease(thread_id, owner)

    async def renew_lease(self, thread_id: str, owner: str, ttl: float) -> bool:
        self._check()
        return await self.inner.renew_lease(thread_id, owner, ttl)

    async def open_thread(
        self,
        thread_id: str,
        owner: str,
        ttl: float,
        initial: StoredCheckpoint | None = None,
    ) -> ThreadOpening:
        self._check()
        opening = await self.inner.open_thread(thread_id, owner, ttl, initial)
        if opening.created:
            assert initial is not None
            self._leased = True
            self._passed(f"lease + checkpoint step={initial.step}")
        elif opening.acquired and not self._leased:
            self._leased = True
            self._passed("lease")
        return opening

    async def commit_step(
        self,
        thread_id: str,
        checkpoint: StoredCheckpoint | None,
        events: list[StoredEvent],
        *,
        durable: bool = True,
        release_owner: str | None = None,
        fence: str | None = None,
    ) -> None:
        self._check()
        await self.inner.commit_step(
            thread_id,
            checkpoint,
            events,
            durable=durable,
            release_owner=release_owner,
            fence=fence,
        )
        parts = []
        if events:
            parts.append(self._events_label(thread_id, events))
        if checkpoint is not None:
            parts.append(f"checkpoint step={checkpoint.step}")
        if parts:
            if release_owner is not None:
                parts.append("release")
            self._passed(" + ".join(parts), commit=checkpoint is not None)

    def _events_label(self, thread_id: str, events: list[StoredEvent]) -> str:
        """``events <first>..<last>``: the seqs of the events the rows hold (a row holds a
        commit's events, stored under its last one's seq)."""
        first = events[0].seq
        try:
            raw = self.inner.serializer.loads(events[0].payload)
            first = decode_row(raw, first, thread_id)[0].seq
        except Exception:  # a row of no event form: label it by its seq
            pass
        return f"events {first}..{events[-1].seq}"

    def _calling_out(self, keys: list[str]) -> None:
        """Follow which effects may be calling out: from their intent to their result."""
        for key in keys:
            if key.startswith(INTENT_PREFIX):
                self._calling.add(key.removeprefix(INTENT_PREFIX))
            else:
                self._calling.discard(key)


def _entry_label(key: str) -> str:
    if key.startswith("writes:"):
        return f"writes {key.rsplit(':', 1)[-1]}"
    return f"effect {key}"


# -- running it -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """How a child process builds the backend: a registry name or ``"module:Class"``, and
    keyword arguments (plain JSON data)."""

    target: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def create(self) -> Backend:
        factory = (
            resolve_target(self.target, what="crash harness backend")
            if ":" in self.target
            else backends.resolve(self.target)
        )
        backend = factory(**dict(self.kwargs))
        if not isinstance(backend, Backend):
            msg = f"{self.target!r} built {backend!r}, which is not a tensorsketch Backend."
            raise TypeError(msg)
        return backend

    def module(self) -> str | None:
        """The module that defines the backend (its driver import is the slow part)."""
        if ":" in self.target:
            return self.target.partition(":")[0]
        path = backends.target_path(self.target)
        return path.partition(":")[0] if path else None


def _preload(spec: BackendSpec, scenario: str) -> list[str]:
    """Modules the fork server imports once. One server serves the whole test session, so it
    preloads every registered backend (a missing driver is skipped by the server)."""
    modules = ["tensorsketch.testing.crash", scenario.partition(":")[0]]
    for name in backends.names():
        path = backends.target_path(name)
        if path:
            modules.append(path.partition(":")[0])
    own = spec.module()
    if own:
        modules.append(own)
    return list(dict.fromkeys(modules))


@dataclass(slots=True)
class KillResult:
    """What happened at one kill point."""

    n: int
    boundary: str
    thread_id: str
    killed: bool
    counts: dict[str, int]
    values: dict[str, Any]
    seqs: list[int]
    problems: list[str]
    #: How many supersteps the latest committed checkpoint trailed the journal when the
    #: process died (``None``: no effect journaled yet): ``0`` at most for ``"sync"``, ``1``
    #: at most for ``"async"``.
    behind: int | None = None


@dataclass(slots=True)
class CrashReport:
    """The uninterrupted run and every kill point; :meth:`check` raises on any problem."""

    backend: str
    boundaries: list[str]
    baseline_values: dict[str, Any]
    baseline_counts: dict[str, int]
    kills: list[KillResult]
    #: The durability mode every run used.
    durability: Durability = "sync"

    @property
    def most_behind(self) -> int:
        """The most supersteps a kill point's checkpoints trailed its journal."""
        return max((k.behind for k in self.kills if k.behind is not None), default=0)

    @property
    def problems(self) -> list[str]:
        return [f"kill point {k.n} ({k.boundary}): {p}" for k in self.kills for p in k.problems]

    def check(self) -> None:
        """Raise ``AssertionError`` listing every kill point that broke a guarantee."""
        if not self.kills:
            msg = f"{self.backend}: the crash matrix ran no kill point."
            raise AssertionError(msg)
        if self.problems:
            msg = f"{self.backend}: " + "\n".join(self.problems)
            raise AssertionError(msg)


def _child(config: dict[str, Any]) -> None:
    """Child process body: run the scenario with the crashing wrapper, write the result."""
    if config.get("fanout"):
        _fanout_child(config)
        return
    asyncio.run(_child_async(config))


async def _child_async(config: dict[str, Any]) -> None:
    spec = BackendSpec(config["backend"]["target"], config["backend"]["kwargs"])
    inner = spec.create()
    inner.lease_ttl = float(config["lease_ttl"])
    backend = CrashingBackend(inner, crash_at=int(config["crash_at"]), mode="kill")
    app: CompiledGraph[Any] = resolve_target(config["scenario"], what="crash scenario")(
        EffectLedger(config["ledger"])
    )
    thread = config["thread"]
    durability = check_durability(config.get("durability", "sync"))
    async for _ in app.stream(
        config["input"], thread_id=thread, backend=backend, durability=durability
    ):
        pass
    state = await app.aget_state(thread, inner)
    assert state is not None
    result = {"boundaries": backend.boundaries, "values": state.model_dump(mode="json")}
    await asyncio.to_thread(Path(config["result"]).write_text, json.dumps(result))
    await inner.aclose()


def _mp_context(preload: list[str]) -> Any:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(preload)
    return ctx


async def _spawn(
    ctx: Any, config: dict[str, Any], target: Callable[[dict[str, Any]], None] | None = None
) -> int:
    process = ctx.Process(target=target or _child, args=(config,), daemon=True)
    process.start()
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def on_exit() -> None:  # the sentinel becomes readable when the child is gone
        loop.remove_reader(process.sentinel)
        if not ended.done():
            ended.set_result(None)

    loop.add_reader(process.sentinel, on_exit)
    try:
        await ended
    finally:
        loop.remove_reader(process.sentinel)
    process.join()
    code: int = process.exitcode
    return code


async def _drain(
    app: CompiledGraph[Any],
    backend: Backend,
    thread: str,
    input: Any,
    ttl: float,
    durability: Durability = "sync",
) -> None:
    """Resume ``thread``, waiting out a dead owner's lease; re-send the input only if the
    crash came before the first checkpoint (the run had not durably started)."""
    deadline = time.monotonic() + max(20 * ttl, 10.0)
    while True:
        started = await backend.latest_checkpoint(thread) is not None
        try:
            async for _ in app.stream(
                None if started else input,
                thread_id=thread,
                backend=backend,
                durability=durability,
            ):
                pass
            return
        except ThreadBusyError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(ttl / 5)


_T = TypeVar("_T")

#: How many points of a matrix are checked at once (``TS_MATRIX_AT_ONCE``; ``1``: one after
#: another, for reading one point's logs). A point mostly waits — for a killed or frozen
#: owner's lease to lapse, for a child to reach its boundary — so a few overlap well; more
#: would only load the machine, and a loaded child can lose its own lease before its point.
POINTS_AT_ONCE = 4


def points_at_once() -> int:
    """:data:`POINTS_AT_ONCE`, or the ``TS_MATRIX_AT_ONCE`` environment variable's number."""
    raw = os.environ.get("TS_MATRIX_AT_ONCE", "")
    if not raw:
        return POINTS_AT_ONCE
    if not raw.isdigit() or int(raw) < 1:
        msg = f"TS_MATRIX_AT_ONCE must be a whole number of points, 1 or more; got {raw!r}."
        raise ValueError(msg)
    return int(raw)


async def each_point(points: Iterable[int], check: Callable[[int], Awaitable[_T]]) -> list[_T]:
    """``check(n)`` for every point ``n``, :func:`points_at_once` at a time, in the points'
    order. Every point has its own thread (and child process), so none sees another's. The
    first point that raises stops the rest, and its error is raised as it is."""
    gate = asyncio.Semaphore(points_at_once())

    async def one(n: int) -> _T:
        async with gate:
            return await check(n)

    tasks = [asyncio.ensure_future(one(n)) for n in points]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def run_crash_matrix(
    backend: BackendSpec | Backend,
    workdir: str | os.PathLike[str],
    *,
    scenario: str = SCENARIO,
    input: Mapping[str, Any] | None = None,
    lease_ttl: float = 0.5,
    kill_points: list[int] | None = None,
    durability: Durability = "sync",
) -> CrashReport:
    """Kill a run of ``scenario`` at every durable boundary in turn and check each resume.

    :param backend: a :class:`BackendSpec` (runs in child processes that are SIGKILLed), or a
        backend instance whose store lives in this process (crashes are simulated).
    :param workdir: where the ledger and the children's result files go.
    :param scenario: ``"module:factory"``; ``factory(ledger)`` returns the compiled graph.
    :param lease_ttl: the lease length used, short so a dead child's lease lapses quickly.
    :param kill_points: only these boundary numbers (1-based); default every boundary.
    :param durability: the mode every run (and resume) uses; each kill point also checks
        what the mode promises about the checkpoints committed when the process died (see
        :attr:`KillResult.behind`): ``"sync"`` none behind, ``"async"`` at most one,
        ``"exit"`` nothing but the input and the run's end.
    """
    durability = check_durability(durability, "run_crash_matrix(durability=...)")
    work = Path(workdir)
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    ledger = EffectLedger(work / "ledger.db")
    app: CompiledGraph[Any] = resolve_target(scenario, what="crash scenario")(ledger)
    data = dict(SCENARIO_INPUT if input is None else input)
    run_id = uuid.uuid4().hex[:8]

    if isinstance(backend, BackendSpec):
        store = backend.create()
        label = backend.target
        ctx = _mp_context(_preload(backend, scenario))

        async def attempt(thread: str, crash_at: int) -> tuple[bool, list[str], dict[str, Any]]:
            result = work / f"{thread}.json"
            config = {
                "backend": {"target": backend.target, "kwargs": dict(backend.kwargs)},
                "scenario": scenario,
                "ledger": ledger.path,
                "thread": thread,
                "input": data,
                "crash_at": crash_at,
                "lease_ttl": lease_ttl,
                "result": str(result),
                "durability": durability,
            }
            code = await _spawn(ctx, config)
            if code == -signal.SIGKILL:
                return True, [], {}
            if code != 0:
                msg = f"the scenario child for {thread!r} failed with exit code {code}."
                raise RuntimeError(msg)
            out = json.loads(result.read_text())
            return False, list(out["boundaries"]), dict(out["values"])

    else:
        store = backend
        label = type(backend).__name__
        store.lease_ttl = lease_ttl

        async def attempt(thread: str, crash_at: int) -> tuple[bool, list[str], dict[str, Any]]:
            wrapper = CrashingBackend(store, crash_at=crash_at, mode="raise")
            try:
                async for _ in app.stream(
                    data, thread_id=thread, backend=wrapper, durability=durability
                ):
                    pass
            except SimulatedCrash:
                return True, [], {}
            state = await app.aget_state(thread, store)
            assert state is not None
            return False, wrapper.boundaries, state.model_dump(mode="json")

    store.lease_ttl = lease_ttl
    try:
        base_thread = f"crash-{run_id}-baseline"
        killed, boundaries, baseline = await attempt(base_thread, 0)
        if killed or not boundaries:
            msg = f"{label}: the uninterrupted scenario run did not complete."
            raise RuntimeError(msg)
        baseline_counts = ledger.counts(base_thread)
        points = kill_points or list(range(1, len(boundaries) + 1))
        last_step = (await app.aget_history(base_thread, store))[-1].step

        async def kill_at(n: int) -> KillResult:
            thread = f"crash-{run_id}-{n}"
            died, _, _ = await attempt(thread, n)
            committed, behind = await _left_behind(store, thread)
            await _drain(app, store, thread, data, lease_ttl, durability)
            state = await app.aget_state(thread, store)
            values = state.model_dump(mode="json") if state is not None else {}
            counts = ledger.counts(thread)
            seqs = [e.seq async for e in app.replay(thread, store)]
            problems = _kill_problems(died, counts, baseline_counts, values, baseline, seqs)
            problems += _broken_promise(durability, committed, behind, last_step)
            return KillResult(
                n, boundaries[n - 1], thread, died, counts, values, seqs, problems, behind
            )

        kills = await each_point(points, kill_at)
        return CrashReport(label, boundaries, baseline, baseline_counts, kills, durability)
    finally:
        if isinstance(backend, BackendSpec):
            await store.aclose()


#: The superstep a journal key belongs to (an effect, or the intent written before it).
_STEP_OF_KEY = re.compile(r"(?:intent:)?(\d+):")


async def _left_behind(store: Backend, thread: str) -> tuple[list[int], int | None]:
    """What a killed run left committed: its checkpoints' steps, and how many supersteps
    the latest one trails the furthest superstep whose effects are journaled (``None``: no
    effect journaled yet)."""
    committed = [c.step for c in await store.list_checkpoints(thread)]
    journaled = [
        int(found.group(1))
        for key, _ in await store.list_effects(thread)
        if (found := _STEP_OF_KEY.match(key)) is not None
    ]
    if not journaled:
        return committed, None
    return committed, max(journaled) - (max(committed) if committed else -1)


def _broken_promise(
    durability: Durability, committed: list[int], behind: int | None, last_step: int
) -> list[str]:
    """What the killed run's committed checkpoints broke of ``durability``'s promise."""
    if durability == "exit":
        between = [step for step in committed if step not in (0, last_step)]
        if between:
            return [f"'exit' committed checkpoints between the input and the end: {between}"]
        return []
    most = 1 if durability == "async" else 0
    if behind is not None and behind > most:
        return [f"the checkpoints were {behind} supersteps behind the journal ({durability!r})"]
    return []


def _kill_problems(
    died: bool,
    counts: dict[str, int],
    baseline_counts: dict[str, int],
    values: dict[str, Any],
    baseline: dict[str, Any],
    seqs: list[int],
) -> list[str]:
    """What a resume after one kill point got wrong, compared with the uninterrupted run."""
    problems: list[str] = []
    if not died:
        problems.append("the run finished without reaching this boundary")
    if set(counts) != set(baseline_counts):
        problems.append(
            f"effects {sorted(counts)} differ from the uninterrupted run's "
            f"{sorted(baseline_counts)}"
        )
    repeated = {k: v for k, v in counts.items() if v != 1}
    if repeated:
        problems.append(f"effects did not run exactly once: {repeated}")
    if values != baseline:
        problems.append(f"final state {values} != uninterrupted {baseline}")
    if any(b <= a for a, b in itertools.pairwise(seqs)):
        problems.append(f"event seq not strictly increasing: {seqs}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """``python -m tensorsketch.testing.crash CONFIG.json``: one child run by hand.

    The kill point comes from the ``TS_CRASH_AT`` environment variable (unset or 0: none).
    """
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tensorsketch.testing.crash CONFIG.json", file=sys.stderr)
        return 2
    config = json.loads(Path(args[0]).read_text())
    config["crash_at"] = int(os.environ.get("TS_CRASH_AT") or 0)
    _child(config)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
