"""The stall harness inside an effect: a runner that freezes between calling out and
journaling the result (the effect is *in doubt*), or between a database step's write and its
commit, is taken over and then wakes up.

:func:`run_in_doubt_stall` freezes the in-doubt harness's payment
(:func:`~tensorsketch.testing.in_doubt.payment_graph`) right after the provider counted it.
While the runner is frozen its lease lapses and this process resumes the thread: the payment
is in doubt and the resume does what its policy says (retry, ask, fail; an idempotency key
retries). Then the stale runner wakes with the payment's result in hand. The checks: the
policy was kept (:meth:`~tensorsketch.testing.in_doubt.InDoubtReport.problems`); the stale
runner ends with :class:`~tensorsketch.errors.LeaseLostError`; nothing it still tried to
write landed (the thread's state, run status and journal are as the resume left them).

:func:`run_db_step_stall` freezes a ``ctx.transaction`` step (SQLite, PostgreSQL) after the
user's write and before the commit, or before the write. The step's transaction took the
fence first, so it holds the lease row (PostgreSQL) or the write lock (SQLite) while frozen:
the runner that takes over waits until it commits. The checks: one row in the user's table,
the step's function called once, the stale runner fenced at its next write.

With a :class:`~tensorsketch.testing.crash.BackendSpec` the runner is a child process frozen
by ``SIGSTOP``; the in-doubt stall also runs on a backend instance (``InMemoryBackend``),
paused in this process (:class:`~tensorsketch.testing.fork_stall.PausingBackend`).
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

from tensorsketch.errors import LeaseLostError
from tensorsketch.interrupts import run_info
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.testing import db_steps, in_doubt
from tensorsketch.testing.crash import BackendSpec, EffectLedger, _drain, _mp_context
from tensorsketch.testing.fork_stall import PausingBackend
from tensorsketch.testing.stall import TAKEOVER_TTL

__all__ = ["DbStepStall", "InDoubtStall", "run_db_step_stall", "run_in_doubt_stall"]


def _stopped(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] in ("T", "t")


async def _until_stopped(process: Any, seconds: float = 120) -> bool:
    """Wait for ``process`` to freeze itself; ``False`` if it ended or never did."""
    deadline = time.monotonic() + seconds
    while not _stopped(process.pid):
        if not process.is_alive() or time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def _wake(process: Any) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGCONT)


def _read_outcome(result: Path, exitcode: int | None) -> str:
    if not result.exists():
        return f"no result (exit code {exitcode})"
    return str(json.loads(result.read_text())["outcome"])


async def _outcome(run: Any) -> str:
    """How a stale runner's call ended: ``"completed"``, ``"LeaseLostError"`` or the error."""
    try:
        await run
    except LeaseLostError:
        return "LeaseLostError"
    except Exception as exc:  # reported, not hidden: the check names it
        return f"{type(exc).__name__}: {exc}"
    return "completed"


def _modules(spec: BackendSpec, own: str) -> list[str]:
    return [own, *([str(spec.module())] if spec.module() else [])]


# -- an effect in doubt -----------------------------------------------------------------------


@dataclass(slots=True)
class InDoubtStall:
    """The in-doubt harness's report for a stall, and what the stale runner did after."""

    report: in_doubt.InDoubtReport
    #: How the stale runner's run ended once woken.
    outcome: str = ""
    #: What changed in the thread after the stale runner woke (nothing may).
    changed: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        found = [p.replace("not killed", "not stalled") for p in self.report.problems()]
        if self.outcome != "LeaseLostError":
            found.append(f"the stale runner ended with {self.outcome!r}, not LeaseLostError")
        return found + self.changed

    def check(self) -> None:
        if self.problems():
            where = f"{self.report.backend} {self.report.policy} keyed={self.report.keyed}"
            raise AssertionError(f"{where}: " + "; ".join(self.problems()))


def _stall_child(config: dict[str, Any]) -> None:
    asyncio.run(_stall_child_async(config))


async def _stall_child_async(config: dict[str, Any]) -> None:
    spec = BackendSpec(config["backend"]["target"], config["backend"]["kwargs"])
    backend = spec.create()
    backend.lease_ttl = float(config["lease_ttl"])
    in_doubt._AFTER_CALL[:] = [lambda: os.kill(os.getpid(), signal.SIGSTOP)]
    app = in_doubt.payment_graph(
        EffectLedger(config["ledger"]), config["policy"], bool(config["keyed"])
    )
    outcome = await _outcome(
        app.invoke({"order": "A-17"}, thread_id=config["thread"], backend=backend)
    )
    await asyncio.to_thread(Path(config["result"]).write_text, json.dumps({"outcome": outcome}))
    await backend.aclose()


async def _snapshot(app: CompiledGraph[Any], store: Backend, thread: str) -> dict[str, Any]:
    """What a stale write could change: the state, the run's status and the journal."""
    state = await app.aget_state(thread, store)
    info = run_info(state) if state is not None else None
    return {
        "values": state.model_dump(mode="json") if state is not None else None,
        "status": info.status if info is not None else None,
        "checkpoints": [c.id for c in await app.aget_history(thread, store)],
        "journal": await store.list_effects(thread),
    }


async def run_in_doubt_stall(
    backend: BackendSpec | Backend,
    workdir: str | os.PathLike[str],
    *,
    policy: str = "retry",
    keyed: bool = False,
    lease_ttl: float = 1.0,
) -> InDoubtStall:
    """Freeze the payment between its call and its record, resume, wake the stale runner.

    ``lease_ttl`` is the frozen runner's lease; with a :class:`BackendSpec`, the runs here
    that resume the thread hold :data:`TAKEOVER_TTL`'s."""
    work = Path(workdir)
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    ledger = EffectLedger(work / "ledger.db")
    thread = f"doubt-stall-{uuid.uuid4().hex[:8]}"
    app = in_doubt.payment_graph(ledger, policy, keyed)
    in_process = isinstance(backend, Backend)
    store = backend if isinstance(backend, Backend) else backend.create()
    store.lease_ttl = lease_ttl
    label = type(store).__name__ if in_process else str(getattr(backend, "target", ""))
    report = in_doubt.InDoubtReport(label, policy, keyed, killed=False)
    result = work / f"{thread}.json"
    process: Any = None
    stale: asyncio.Task[str] | None = None
    pausing: PausingBackend | None = None
    try:
        if isinstance(backend, BackendSpec):
            config = {
                "backend": {"target": backend.target, "kwargs": dict(backend.kwargs)},
                "ledger": ledger.path,
                "thread": thread,
                "policy": policy,
                "keyed": keyed,
                "lease_ttl": lease_ttl,
                "result": str(result),
            }
            ctx = _mp_context(_modules(backend, "tensorsketch.testing.effect_stall"))
            process = ctx.Process(target=_stall_child, args=(config,), daemon=True)
            process.start()
            report.killed = await _until_stopped(process)
            store.lease_ttl = TAKEOVER_TTL  # this process's runs resume the thread
        else:
            pausing = PausingBackend(store, pause_at=0)

            async def freeze() -> None:
                assert pausing is not None
                pausing.freeze()
                await pausing.wake.wait()

            in_doubt._AFTER_CALL[:] = [freeze]
            stale = asyncio.create_task(
                _outcome(app.invoke({"order": "A-17"}, thread_id=thread, backend=pausing))
            )
            waiting = asyncio.create_task(pausing.paused.wait())
            await asyncio.wait({stale, waiting}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            report.killed = pausing.paused.is_set()
        await asyncio.sleep(lease_ttl * 1.5)  # the frozen runner's lease lapses
        in_doubt._AFTER_CALL.clear()  # P2's own payment (a retry) runs through
        report.events = await in_doubt._resume(app, store, thread, lease_ttl)
        state = await app.aget_state(thread, store)
        if state is not None:
            info = run_info(state)
            report.status = info.status
            report.interrupts = [p.to_dict() for p in info.interrupts]
            report.error_type = (info.error or {}).get("type")
            report.receipt = state.receipt
        if report.status == "suspended" and report.interrupts:
            key = report.interrupts[0]["id"]  # a person checked: it went through, pay-1
            await in_doubt._resume(app, store, thread, lease_ttl, resume={key: {"result": "pay-1"}})
            state = await app.aget_state(thread, store)
            if state is not None:
                report.receipt = state.receipt
        before = await _snapshot(app, store, thread)
        if process is not None:
            _wake(process)
            await asyncio.to_thread(process.join, 60)
            outcome = await asyncio.to_thread(_read_outcome, result, process.exitcode)
        else:
            assert pausing is not None and stale is not None
            pausing.wake.set()
            outcome = await stale
        after = await _snapshot(app, store, thread)
        changed = [
            f"the stale runner changed the thread's {what}: {before[what]!r} -> {after[what]!r}"
            for what in before
            if before[what] != after[what]
        ]
        report.payments = ledger.counts(thread).get("pay", 0)
        return InDoubtStall(report, outcome, changed)
    finally:
        in_doubt._AFTER_CALL.clear()
        if process is not None and process.is_alive():
            _wake(process)
            process.kill()
        if not in_process:
            await store.aclose()


# -- a database step --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DbStepStall:
    """A stall inside ``Debit``'s transaction and what the runs left."""

    point: str
    stalled: bool
    outcome: str
    #: Calls of ``Debit``'s function (the stale one's transaction committed: 1).
    attempts: int
    debited: int
    rows: int
    #: The runner taking over was still waiting (on the frozen transaction's lock) when the
    #: stale one was woken, a lease length after its lease lapsed.
    held_off: bool

    def check(self) -> None:
        problems = []
        if not self.held_off:
            problems.append("the runner taking over did not wait for the frozen transaction")
        if not self.stalled:
            problems.append("the runner never froze inside the transaction")
        if self.outcome != "LeaseLostError":
            problems.append(f"the stale runner ended with {self.outcome!r}, not LeaseLostError")
        if (self.attempts, self.debited, self.rows) != (1, 1, 1):
            problems.append(
                f"{self.attempts} calls of the step, debited={self.debited}, {self.rows} rows "
                "(expected 1, 1, 1)"
            )
        if problems:
            raise AssertionError(f"a stall {self.point}: " + "; ".join(problems))


def _db_child(config: dict[str, Any]) -> None:
    asyncio.run(_db_child_async(config))


async def _db_child_async(config: dict[str, Any]) -> None:
    spec = BackendSpec(config["backend"]["target"], config["backend"]["kwargs"])
    backend = spec.create()
    backend.lease_ttl = float(config["lease_ttl"])
    db_steps._KILL[:] = [config["point"]]
    db_steps._SIGNAL[:] = [signal.SIGSTOP]
    app = db_steps.db_step_graph(EffectLedger(config["ledger"]))
    outcome = await _outcome(
        app.invoke({"order": "o-1"}, thread_id=config["thread"], backend=backend)
    )
    await asyncio.to_thread(Path(config["result"]).write_text, json.dumps({"outcome": outcome}))
    await backend.aclose()


async def run_db_step_stall(
    backend: BackendSpec,
    workdir: str | os.PathLike[str],
    *,
    point: str = "after_write",
    lease_ttl: float = 1.0,
) -> DbStepStall:
    """Freeze ``Debit``'s transaction at ``point`` (``"before_write"`` or ``"after_write"``,
    both before the commit); resume the thread here meanwhile; wake the frozen runner.

    ``lease_ttl`` is the frozen runner's lease; the runner taking over holds
    :data:`TAKEOVER_TTL`'s."""
    if point not in ("before_write", "after_write"):
        msg = f"`point` must be 'before_write' or 'after_write', got {point!r}."
        raise ValueError(msg)
    work = Path(workdir)
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    ledger = EffectLedger(work / "ledger.db")
    thread = f"dbstall-{uuid.uuid4().hex[:8]}"
    result = work / f"{thread}.json"
    config = {
        "backend": {"target": backend.target, "kwargs": dict(backend.kwargs)},
        "ledger": ledger.path,
        "thread": thread,
        "point": point,
        "lease_ttl": lease_ttl,
        "result": str(result),
    }
    ctx = _mp_context(_modules(backend, "tensorsketch.testing.effect_stall"))
    process = ctx.Process(target=_db_child, args=(config,), daemon=True)
    process.start()
    store = backend.create()
    store.lease_ttl = TAKEOVER_TTL
    app = db_steps.db_step_graph(ledger)
    try:
        stalled = await _until_stopped(process)
        await asyncio.sleep(lease_ttl * 1.5)  # the frozen runner's lease lapses
        # The runner taking over waits on the frozen transaction's lock (it took the fence
        # before the user's write), so it runs while the stale one is woken.
        taking_over = asyncio.create_task(_drain(app, store, thread, {"order": "o-1"}, lease_ttl))
        await asyncio.wait({taking_over}, timeout=lease_ttl)
        held_off = not taking_over.done()
        _wake(process)
        await taking_over
        await asyncio.to_thread(process.join, 60)
        outcome = await asyncio.to_thread(_read_outcome, result, process.exitcode)
        state = await app.aget_state(thread, store)
    finally:
        if process.is_alive():
            _wake(process)
            process.kill()
        await store.aclose()
    assert state is not None
    attempts = ledger.counts(thread).get("debit", 0)
    return DbStepStall(point, stalled, outcome, attempts, state.debited, state.rows, held_off)
