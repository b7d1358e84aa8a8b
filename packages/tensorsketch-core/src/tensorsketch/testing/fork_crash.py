"""Forks under a real kill: a fork that reuses its origin's side effects, SIGKILLed at every
durable boundary of its own run and finished by another process, runs none of them again.

The origin runs the crash harness's order scenario to the end (:func:`scenario_graph`, every
side effect counted per thread in an :class:`EffectLedger`). Every kill point then forks it
from the checkpoint after the charge with ``effects="reuse"`` in a child process that dies by
``SIGKILL`` at that boundary; this process finishes the fork (forking again when the child
died before the fork's first checkpoint, resuming it otherwise) and checks that the fork
thread ran no effect and ended where a fork that was never killed ends.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tensorsketch.durable.lineage import ForkEffects
from tensorsketch.errors import ThreadBusyError
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.testing.crash import (
    SCENARIO_INPUT,
    BackendSpec,
    CrashingBackend,
    EffectLedger,
    _mp_context,
    _preload,
    _spawn,
    each_point,
    scenario_graph,
)

__all__ = ["FORK_VALUES", "ForkKillReport", "recover_fork", "run_fork_kill_matrix"]

#: What every fork of the matrix writes at its fork point: a field no node reads, so every
#: effect after the fork point is the same call as the origin's and is reused.
FORK_VALUES: dict[str, Any] = {"label": "forked"}


@dataclass
class ForkKillReport:
    """What the matrix saw: the boundaries of a clean reusing fork and each kill's outcome."""

    backend: str
    boundaries: list[str]
    #: per kill point: (killed by SIGKILL, effects the fork thread ran, final state as expected)
    kills: list[tuple[int, bool, dict[str, int], bool]] = field(default_factory=list)

    def check(self) -> None:
        """Raise ``AssertionError`` naming every kill point that broke the promise."""
        if not self.kills:
            msg = f"{self.backend}: the fork matrix ran no kill point."
            raise AssertionError(msg)
        broken = [k for k in self.kills if not k[1] or k[2] or not k[3]]
        if broken:
            msg = (
                f"{self.backend}: forks that broke exactly-once (point, killed by SIGKILL, "
                f"effects the fork ran, ended as a clean fork): {broken}"
            )
            raise AssertionError(msg)


async def recover_fork(
    app: CompiledGraph[Any],
    backend: Backend,
    origin: str,
    at: str,
    fork: str,
    values: dict[str, Any],
    *,
    attempts: int = 50,
    effects: ForkEffects = "reuse",
) -> Any:
    """Finish a fork whose process died: fork again (with ``effects``) if it died before the
    fork's first checkpoint, else resume it (with ``values`` if they were not applied yet),
    retrying while the dead process's lease has not lapsed."""
    for _ in range(attempts):
        await asyncio.sleep(0.25)
        try:
            if await backend.latest_checkpoint(fork) is None:
                return await app.fork(backend, origin, at, fork, values, effects=effects)
            latest = (await app.aget_history(fork, backend))[-1]
            again = values if latest.source == "fork" else None
            return await app.invoke(again, thread_id=fork, backend=backend)
        except ThreadBusyError:
            continue
    msg = f"fork {fork!r} could not be resumed"
    raise AssertionError(msg)


def _child(config: dict[str, Any]) -> None:
    """Child process body: fork through a backend that kills this process at a boundary."""
    asyncio.run(_child_async(config))


async def _child_async(config: dict[str, Any]) -> None:
    spec = BackendSpec(config["backend"]["target"], config["backend"]["kwargs"])
    inner = spec.create()
    inner.lease_ttl = float(config["lease_ttl"])
    dying = CrashingBackend(inner, crash_at=int(config["crash_at"]), mode="kill")
    app = scenario_graph(EffectLedger(config["ledger"]))
    await app.fork(
        dying, config["origin"], config["at"], config["fork"], FORK_VALUES, effects="reuse"
    )
    await inner.aclose()  # not reached when the kill point is inside the run


async def run_fork_kill_matrix(
    spec: BackendSpec, workdir: str | os.PathLike[str], *, lease_ttl: float = 1.0
) -> ForkKillReport:
    """Kill a reusing fork at every boundary of its run in a child process and check each."""
    work = Path(workdir)
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    ledger = EffectLedger(work / "ledger.db")
    app = scenario_graph(ledger)
    store = spec.create()
    store.lease_ttl = lease_ttl
    tag = uuid.uuid4().hex[:8]
    try:
        origin = f"fork-origin-{tag}"
        await app.invoke(dict(SCENARIO_INPUT), thread_id=origin, backend=store)
        at = (await app.aget_history(origin, store))[1].id  # after the charge
        counting = CrashingBackend(store, mode="raise")  # no crash point: it only counts
        clean_thread = f"fork-clean-{tag}"
        clean = await app.fork(counting, origin, at, clean_thread, FORK_VALUES, effects="reuse")
        report = ForkKillReport(spec.target, list(counting.boundaries))
        if ledger.counts(clean_thread):
            msg = f"a clean reusing fork ran effects: {ledger.counts(clean_thread)}"
            raise AssertionError(msg)
        ctx = _mp_context(_preload(spec, "tensorsketch.testing.fork_crash:run_fork_kill_matrix"))

        async def kill_at(point: int) -> tuple[int, bool, dict[str, int], bool]:
            fork = f"fork-{tag}-{point}"
            config = {
                "backend": {"target": spec.target, "kwargs": dict(spec.kwargs)},
                "ledger": ledger.path,
                "origin": origin,
                "at": at,
                "fork": fork,
                "crash_at": point,
                "lease_ttl": lease_ttl,
            }
            code = await _spawn_fork(ctx, config)
            out = await recover_fork(app, store, origin, at, fork, FORK_VALUES)
            same = (
                sorted(out.receipts) == sorted(clean.receipts)
                and out.note == clean.note
                and out.label == FORK_VALUES["label"]
            )
            return (point, code == -signal.SIGKILL, ledger.counts(fork), same)

        report.kills = await each_point(range(1, len(report.boundaries) + 1), kill_at)
        return report
    finally:
        await store.aclose()


async def _spawn_fork(ctx: Any, config: dict[str, Any]) -> int:
    """Run :func:`_child` in a child process; its exit code (``-SIGKILL`` when it was killed)."""
    return await _spawn(ctx, config, target=_child)
