"""The stall harness: prove a runner that stalls past its lease can never write again.

For one backend, :func:`run_stall_matrix` runs the scenario in a child process that freezes
itself (``SIGSTOP``) right after its ``n``-th durable write, for every ``n`` in turn. While it
is frozen the lease lapses, a second runner (this process) takes the thread over and finishes
it, and a third run writes new input (``note="from-P3"``). Then the frozen child gets
``SIGCONT`` and carries on from where it stopped, exactly like an owner waking from a long GC
pause or a blocked event loop. The checks: it ends with :class:`LeaseLostError`; every side
effect ran exactly once; the final state is the third run's (nothing reverted) and the
event log's ``seq`` strictly increases.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import operator
import os
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from tensorsketch.channels import Reducer
from tensorsketch.constants import END, START
from tensorsketch.context import Context
from tensorsketch.errors import LeaseLostError
from tensorsketch.graph import Graph
from tensorsketch.node import Node
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.schema import Schema
from tensorsketch.testing.crash import (
    BackendSpec,
    CrashingBackend,
    EffectLedger,
    _drain,
    _mp_context,
    _preload,
    each_point,
)

__all__ = ["StallPoint", "StallReport", "run_stall_matrix", "stall_graph"]

SCENARIO = "tensorsketch.testing.stall:stall_graph"
P3_NOTE = "from-P3"

#: The lease of the runner that takes a stalled thread over. Only the stalled runner's lease
#: must be short (it has to lapse while the runner is frozen); the taker's must outlast its
#: whole run on a loaded machine, where a commit or a renewal can wait a second for the disk.
TAKEOVER_TTL = 30.0


class StallState(Schema):
    """Three effects in one node, one in the next; a run with ``note=from-P3`` only writes."""

    note: str = ""
    done: Annotated[list[str], Reducer(operator.add)] = []


def stall_graph(ledger: EffectLedger) -> CompiledGraph[StallState]:
    def effect(ctx: Context, name: str) -> Callable[[], str]:
        def call() -> str:
            return f"{name}-{ledger.hit(ctx.thread_id or '', name)}"

        return call

    class Work(Node):
        class In(Schema):
            note: str

        class Out(Schema):
            done: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            done = [await ctx.step(f"b{i}", effect(ctx, f"b{i}")) for i in range(3)]
            return self.Out(done=done)

    class Finish(Node):
        class In(Schema):
            done: list[str]

        class Out(Schema):
            done: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(done=[await ctx.step("notify", effect(ctx, "notify"))])

    def entry(state: StallState) -> str:
        return END if state.note == P3_NOTE else "Work"

    graph = (
        Graph(StallState, name="stall-scenario")
        .add(Work)
        .add(Finish)
        .router(START, entry)
        .edge("Work", "Finish")
        .edge("Finish", END)
    )
    return graph.compile()


def stall_child(config: dict[str, Any]) -> None:
    asyncio.run(_stall_child(config))


async def _stall_child(config: dict[str, Any]) -> None:
    spec = BackendSpec(config["backend"]["target"], config["backend"]["kwargs"])
    inner = spec.create()
    inner.lease_ttl = float(config["lease_ttl"])
    backend = CrashingBackend(inner, crash_at=int(config["stall_at"]), mode="stop")
    app = stall_graph(EffectLedger(config["ledger"]))
    outcome = "completed"
    try:
        await app.invoke({}, thread_id=config["thread"], backend=backend)
    except LeaseLostError:
        outcome = "LeaseLostError"
    except Exception as exc:  # reported, not hidden: the check names it
        outcome = f"{type(exc).__name__}: {exc}"
    result = {"outcome": outcome, "boundaries": backend.boundaries}
    await asyncio.to_thread(Path(config["result"]).write_text, json.dumps(result))
    await inner.aclose()


@dataclass(slots=True)
class StallPoint:
    """What happened when the owner stalled after boundary ``n``."""

    n: int
    boundary: str
    outcome: str
    counts: dict[str, int]
    note: str
    problems: list[str]


@dataclass(slots=True)
class StallReport:
    backend: str
    boundaries: list[str]
    points: list[StallPoint]

    @property
    def problems(self) -> list[str]:
        return [f"stall {p.n} ({p.boundary}): {x}" for p in self.points for x in p.problems]

    def check(self) -> None:
        if not self.points:
            msg = f"{self.backend}: the stall matrix ran no stall point."
            raise AssertionError(msg)
        if self.problems:
            raise AssertionError(f"{self.backend}: " + "\n".join(self.problems))


def _stopped(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] in ("T", "t")


async def run_stall_matrix(
    backend: BackendSpec, workdir: str | os.PathLike[str], *, lease_ttl: float = 0.5
) -> StallReport:
    """Stall the scenario's owner after each durable boundary in turn (see the module doc)."""
    work = Path(workdir)
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    ledger = EffectLedger(work / "stall-ledger.db")
    app = stall_graph(ledger)
    ctx = _mp_context(_preload(backend, SCENARIO))
    store = backend.create()
    store.lease_ttl = lease_ttl
    run_id = uuid.uuid4().hex[:8]

    def config(thread: str, stall_at: int) -> dict[str, Any]:
        return {
            "stall": True,
            "backend": {"target": backend.target, "kwargs": dict(backend.kwargs)},
            "ledger": ledger.path,
            "thread": thread,
            "stall_at": stall_at,
            "lease_ttl": lease_ttl,
            "result": str(work / f"{thread}.json"),
        }

    async def finish(process: Any) -> None:
        await asyncio.to_thread(process.join, 60)

    try:
        base = f"stall-{run_id}-baseline"
        process = ctx.Process(target=_stall_entry, args=(config(base, 0),), daemon=True)
        process.start()
        await finish(process)
        baseline = json.loads((work / f"{base}.json").read_text())
        boundaries: list[str] = baseline["boundaries"]
        expected = sorted(ledger.counts(base))

        async def stall_at(n: int) -> StallPoint:
            thread = f"stall-{run_id}-{n}"
            process = ctx.Process(target=_stall_entry, args=(config(thread, n),), daemon=True)
            process.start()
            problems: list[str] = []
            deadline = time.monotonic() + 30
            while not _stopped(process.pid) and process.is_alive():
                if time.monotonic() > deadline:
                    problems.append("the owner never reached this boundary")
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(lease_ttl * 1.5)  # the frozen owner's lease lapses
            store.lease_ttl = TAKEOVER_TTL  # only the frozen owner's lease is short
            await _drain(app, store, thread, {}, lease_ttl)  # P2 takes over and finishes
            await app.invoke({"note": P3_NOTE}, thread_id=thread, backend=store)  # P3
            # The stale owner wakes up. On a loaded machine it may already have ended (its
            # lease lapsed before it reached the boundary, so it stopped itself): what it
            # ended with is checked below all the same.
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
            await finish(process)
            result_file = work / f"{thread}.json"
            outcome = (
                json.loads(result_file.read_text())["outcome"]
                if result_file.exists()
                else f"no result (exit code {process.exitcode})"
            )
            if outcome != "LeaseLostError":
                problems.append(f"the stale owner ended with {outcome!r}, not LeaseLostError")
            counts = ledger.counts(thread)
            if sorted(counts) != expected:
                problems.append(f"effects {sorted(counts)} differ from {expected}")
            repeated = {k: v for k, v in counts.items() if v != 1}
            if repeated:
                problems.append(f"effects ran more than once: {repeated}")
            state = await app.aget_state(thread, store)
            note = state.note if state is not None else ""
            if note != P3_NOTE:
                problems.append(f"the newest write was reverted: note={note!r}")
            if state is None or sorted(state.done) != sorted(expected_done(expected)):
                problems.append(f"final done {getattr(state, 'done', None)} is not complete")
            seqs = [e.seq async for e in app.replay(thread, store)]
            if any(b <= a for a, b in itertools.pairwise(seqs)):
                problems.append(f"event seq not strictly increasing: {seqs}")
            return StallPoint(n, boundaries[n - 1], outcome, counts, note, problems)

        # After the last boundary the run has finished and let go of the lease: no stall.
        points = await each_point(range(1, len(boundaries)), stall_at)
        return StallReport(backend.target, boundaries, points)
    finally:
        await store.aclose()


def expected_done(effects: list[str]) -> list[str]:
    """Each effect's result as the scenario records it (every effect ran exactly once)."""
    return [f"{name}-1" for name in effects]


def _stall_entry(config: dict[str, Any]) -> None:
    stall_child(config)
