"""The stall harness for forks: a fork whose runner freezes past its lease, is taken over,
and wakes up, performs every side effect exactly as its ``effects=`` choice promises and
writes nothing more.

The origin runs the crash harness's order scenario to the end (every effect counted per
thread in an :class:`~tensorsketch.testing.crash.EffectLedger`). :func:`run_fork_stall_matrix`
then forks it from the checkpoint after the charge with ``effects="reuse"`` or ``"rerun"``
and freezes the fork's runner right after each durable boundary of the fork in turn. While
it is frozen its lease lapses, this process finishes the fork
(:func:`~tensorsketch.testing.fork_crash.recover_fork`) and writes a newer value into it
(``label="from-P3"``, an ``update_state``); then the frozen runner wakes up. The checks: it
ends with :class:`~tensorsketch.errors.LeaseLostError`; the fork thread ran no effect
(``"reuse"``) or each of the origin's later effects exactly once (``"rerun"``); it ends where
a fork that never stalled ends, with the newest write kept.

With a :class:`~tensorsketch.testing.crash.BackendSpec` the runner is a child process frozen
by ``SIGSTOP`` (and woken by ``SIGCONT``); with a backend instance whose store lives in this
process (``InMemoryBackend``) it is a task of this process paused at the boundary, its lease
renewals held too (:class:`PausingBackend`), exactly what a frozen process would do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tensorsketch.durable.lineage import ForkEffects, check_fork_effects
from tensorsketch.errors import LeaseLostError
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runtime.backends.base import (
    Backend,
    StoredCheckpoint,
    StoredEvent,
    ThreadOpening,
)
from tensorsketch.testing.crash import (
    SCENARIO_INPUT,
    BackendSpec,
    CrashingBackend,
    EffectLedger,
    _mp_context,
    _preload,
    each_point,
    scenario_graph,
)
from tensorsketch.testing.fork_crash import FORK_VALUES, recover_fork
from tensorsketch.testing.stall import TAKEOVER_TTL

__all__ = [
    "P3_LABEL",
    "ForkStallPoint",
    "ForkStallReport",
    "PausingBackend",
    "run_fork_stall_matrix",
]

#: What the third writer puts into the fork while its first runner is frozen.
P3_LABEL = "from-P3"


class PausingBackend(CrashingBackend):
    """A :class:`~tensorsketch.testing.crash.CrashingBackend` that, instead of dying, pauses
    the calling task right after its ``pause_at``-th durable boundary until :attr:`wake` is
    set; while paused (:attr:`frozen`) its lease renewals wait too, as a frozen process's
    would. The in-process stand-in for ``SIGSTOP``."""

    def __init__(self, inner: Backend, *, pause_at: int) -> None:
        super().__init__(inner, mode="raise")
        self.pause_at = pause_at
        #: Set once the runner is paused (the harness waits for it).
        self.paused = asyncio.Event()
        #: Set by the harness to let the runner carry on.
        self.wake = asyncio.Event()
        self._pause_now = False

    @property
    def frozen(self) -> bool:
        return self.paused.is_set() and not self.wake.is_set()

    def freeze(self) -> None:
        """Pause from outside a boundary (a hook inside an effect): renewals stop now."""
        self.paused.set()

    def _passed(self, boundary: str, *, commit: bool = False) -> None:
        super()._passed(boundary, commit=commit)
        if len(self.boundaries) == self.pause_at:
            self._pause_now = True

    async def _hold(self) -> None:
        if self._pause_now:
            self._pause_now = False
            self.paused.set()
        if self.frozen:
            await self.wake.wait()

    async def save_checkpoint(self, checkpoint: StoredCheckpoint) -> None:
        await super().save_checkpoint(checkpoint)
        await self._hold()

    async def record_effect(self, thread_id: str, key: str, value: bytes) -> None:
        await super().record_effect(thread_id, key, value)
        await self._hold()

    async def record_effects(
        self, thread_id: str, effects: list[tuple[str, bytes]], *, fence: str | None = None
    ) -> None:
        await super().record_effects(thread_id, effects, fence=fence)
        await self._hold()

    async def append_events(self, thread_id: str, events: list[StoredEvent]) -> None:
        await super().append_events(thread_id, events)
        await self._hold()

    async def acquire_lease(self, thread_id: str, owner: str, ttl: float) -> bool:
        if self.frozen:
            await self.wake.wait()
        ok = await super().acquire_lease(thread_id, owner, ttl)
        await self._hold()
        return ok

    async def renew_lease(self, thread_id: str, owner: str, ttl: float) -> bool:
        if self.frozen:  # a frozen process renews nothing: its lease lapses
            await self.wake.wait()
        return await super().renew_lease(thread_id, owner, ttl)

    async def open_thread(
        self,
        thread_id: str,
        owner: str,
        ttl: float,
        initial: StoredCheckpoint | None = None,
    ) -> ThreadOpening:
        opening = await super().open_thread(thread_id, owner, ttl, initial)
        await self._hold()
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
        await super().commit_step(
            thread_id,
            checkpoint,
            events,
            durable=durable,
            release_owner=release_owner,
            fence=fence,
        )
        await self._hold()


@dataclass(slots=True)
class ForkStallPoint:
    """What happened when the fork's runner froze after boundary ``n``."""

    n: int
    boundary: str
    outcome: str
    counts: dict[str, int]
    label: str
    problems: list[str]


@dataclass(slots=True)
class ForkStallReport:
    """A clean fork's boundaries and effects, and every stall point."""

    backend: str
    effects: ForkEffects
    boundaries: list[str]
    #: What the clean fork ran (``{}`` for ``"reuse"``; each later effect once for ``"rerun"``).
    clean_counts: dict[str, int]
    points: list[ForkStallPoint] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return [f"stall {p.n} ({p.boundary}): {x}" for p in self.points for x in p.problems]

    def check(self) -> None:
        """Raise ``AssertionError`` naming every stall point that broke the promise."""
        if not self.points:
            msg = f"{self.backend} {self.effects}: the fork stall matrix ran no stall point."
            raise AssertionError(msg)
        if self.problems:
            raise AssertionError(f"{self.backend} {self.effects}: " + "\n".join(self.problems))


def _child(config: dict[str, Any]) -> None:
    asyncio.run(_child_async(config))


async def _child_async(config: dict[str, Any]) -> None:
    spec = BackendSpec(config["backend"]["target"], config["backend"]["kwargs"])
    inner = spec.create()
    inner.lease_ttl = float(config["lease_ttl"])
    frozen = CrashingBackend(inner, crash_at=int(config["stall_at"]), mode="stop")
    app = scenario_graph(EffectLedger(config["ledger"]))
    outcome = await _fork_outcome(app, frozen, config)
    result = {"outcome": outcome, "boundaries": frozen.boundaries}
    await asyncio.to_thread(Path(config["result"]).write_text, json.dumps(result))
    await inner.aclose()


async def _fork_outcome(app: CompiledGraph[Any], backend: Backend, config: dict[str, Any]) -> str:
    """Run the fork; how it ended (``"completed"``, ``"LeaseLostError"`` or the error)."""
    try:
        await app.fork(
            backend,
            config["origin"],
            config["at"],
            config["fork"],
            FORK_VALUES,
            effects=config["effects"],
        )
    except LeaseLostError:
        return "LeaseLostError"
    except Exception as exc:  # reported, not hidden: the check names it
        return f"{type(exc).__name__}: {exc}"
    return "completed"


def _read_outcome(result: Path, exitcode: int | None) -> str:
    if not result.exists():
        return f"no result (exit code {exitcode})"
    return str(json.loads(result.read_text())["outcome"])


def _stopped(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] in ("T", "t")


async def run_fork_stall_matrix(
    backend: BackendSpec | Backend,
    workdir: str | os.PathLike[str],
    *,
    effects: ForkEffects = "reuse",
    lease_ttl: float = 1.0,
) -> ForkStallReport:
    """Freeze a fork's runner after each durable boundary of its run in turn (module doc)."""
    choice = check_fork_effects(effects)
    if choice is None:
        msg = "run_fork_stall_matrix needs effects='reuse' or 'rerun' (the default stops)."
        raise ValueError(msg)
    work = Path(workdir)
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    ledger = EffectLedger(work / f"fork-stall-{choice}.db")
    app = scenario_graph(ledger)
    in_process = not isinstance(backend, BackendSpec)
    store = backend if isinstance(backend, Backend) else backend.create()
    label = type(store).__name__ if in_process else str(getattr(backend, "target", ""))
    store.lease_ttl = lease_ttl
    tag = uuid.uuid4().hex[:8]
    try:
        origin = f"fstall-origin-{tag}"
        await app.invoke(dict(SCENARIO_INPUT), thread_id=origin, backend=store)
        at = (await app.aget_history(origin, store))[1].id  # after the charge
        counting = CrashingBackend(store, mode="raise")  # no crash point: it only counts
        clean_thread = f"fstall-clean-{tag}"
        clean = await app.fork(counting, origin, at, clean_thread, FORK_VALUES, effects=choice)
        report = ForkStallReport(
            label, choice, list(counting.boundaries), ledger.counts(clean_thread)
        )

        async def stall_at(n: int) -> ForkStallPoint:
            fork = f"fstall-{tag}-{n}"
            config = {
                "backend": (
                    {} if in_process else {"target": backend.target, "kwargs": dict(backend.kwargs)}  # type: ignore[union-attr]
                ),
                "ledger": ledger.path,
                "origin": origin,
                "at": at,
                "fork": fork,
                "effects": choice,
                "stall_at": n,
                "lease_ttl": lease_ttl,
                "result": str(work / f"{fork}.json"),
            }
            if in_process:
                outcome, problems = await _stall_in_process(app, store, config, lease_ttl)
            else:
                assert isinstance(backend, BackendSpec)
                outcome, problems = await _stall_child(app, store, backend, config, lease_ttl)
            counts = ledger.counts(fork)
            if outcome != "LeaseLostError":
                problems.append(f"the stale runner ended with {outcome!r}, not LeaseLostError")
            if counts != report.clean_counts:
                problems.append(
                    f"the fork ran effects {counts}; a fork that never stalled ran "
                    f"{report.clean_counts} (effects={choice!r})"
                )
            state = await app.aget_state(fork, store)
            got = getattr(state, "label", None)
            if got != P3_LABEL:
                problems.append(f"the newest write was reverted: label={got!r}")
            if state is None or (
                sorted(state.receipts) != sorted(clean.receipts) or state.note != clean.note
            ):
                problems.append(f"the fork ended as {state!r}, a clean fork as {clean!r}")
            boundary = report.boundaries[n - 1]
            return ForkStallPoint(n, boundary, outcome, counts, str(got), problems)

        # After the last boundary the fork has finished and let go of its lease: no stall.
        report.points = await each_point(range(1, len(report.boundaries)), stall_at)
        return report
    finally:
        if not in_process:
            await store.aclose()


async def _take_over(
    app: CompiledGraph[Any], store: Backend, config: dict[str, Any], lease_ttl: float
) -> None:
    """P2 finishes the fork once the frozen runner's lease lapsed; P3 writes a newer value."""
    await asyncio.sleep(lease_ttl * 1.5)
    await recover_fork(
        app,
        store,
        config["origin"],
        config["at"],
        config["fork"],
        FORK_VALUES,
        effects=config["effects"],
    )
    await app.aupdate_state(config["fork"], store, {"label": P3_LABEL})


async def _stall_child(
    app: CompiledGraph[Any],
    store: Backend,
    spec: BackendSpec,
    config: dict[str, Any],
    lease_ttl: float,
) -> tuple[str, list[str]]:
    ctx = _mp_context(_preload(spec, "tensorsketch.testing.fork_stall:run_fork_stall_matrix"))
    process = ctx.Process(target=_child, args=(config,), daemon=True)
    process.start()
    problems: list[str] = []
    deadline = time.monotonic() + 30
    while not _stopped(process.pid) and process.is_alive():
        if time.monotonic() > deadline:
            problems.append("the fork's runner never reached this boundary")
            break
        await asyncio.sleep(0.01)
    store.lease_ttl = TAKEOVER_TTL  # only the frozen child's lease has to be short
    await _take_over(app, store, config, lease_ttl)
    # The stale runner wakes up (on a loaded machine it may have ended already: its lease
    # lapsed before the boundary, so it stopped itself; what it ended with is checked all
    # the same).
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGCONT)
    await asyncio.to_thread(process.join, 60)
    outcome = await asyncio.to_thread(_read_outcome, Path(config["result"]), process.exitcode)
    return outcome, problems


async def _stall_in_process(
    app: CompiledGraph[Any], store: Backend, config: dict[str, Any], lease_ttl: float
) -> tuple[str, list[str]]:
    pausing = PausingBackend(store, pause_at=int(config["stall_at"]))
    stale = asyncio.create_task(_fork_outcome(app, pausing, config))
    problems: list[str] = []
    paused = asyncio.create_task(pausing.paused.wait())
    await asyncio.wait({stale, paused}, return_when=asyncio.FIRST_COMPLETED)
    if not pausing.paused.is_set():
        problems.append("the fork's runner never reached this boundary")
    paused.cancel()
    await _take_over(app, store, config, lease_ttl)
    pausing.wake.set()
    return await stale, problems
