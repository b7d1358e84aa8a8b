"""The in-doubt harness: kill a run between an effect's intent and its result, on any store,
and check that the resume does what the effect's ``in_doubt`` policy says.

:func:`run_in_doubt` runs a one-effect graph (a payment, ``ctx.step("pay", ...)``) whose
effect is counted in an :class:`~tensorsketch.testing.crash.EffectLedger` and then kills the
process before the result can be recorded: the journal holds the intent and nothing else.
With a :class:`~tensorsketch.testing.crash.BackendSpec` the run is a child process that
``SIGKILL``\\ s itself; with a backend instance (``InMemoryBackend``) the crash is simulated
in-process (:class:`~tensorsketch.testing.crash.SimulatedCrash`). The thread is then resumed
here and :meth:`InDoubtReport.problems` lists every way the resume broke the policy:

- ``retry``: the effect runs a second time (the policy accepts the duplicate), the run
  completes, one ``effect_in_doubt`` event says ``retry``;
- an idempotency key: retried as well, and the outside system (the ledger) sees the key
  again, so there is still one payment;
- ``ask``: the run suspends on an ``in_doubt`` interrupt that shows the call and its
  arguments, nothing runs again; resumed with ``{"result": ...}`` it completes with that
  result, still one payment;
- ``fail``: the run fails with ``EffectInDoubtError`` (``get_state`` shows it), nothing
  runs again.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tensorsketch.constants import END, START
from tensorsketch.context import Context
from tensorsketch.errors import ThreadBusyError
from tensorsketch.graph import Graph
from tensorsketch.interrupts import run_info
from tensorsketch.node import Node
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.schema import Schema
from tensorsketch.testing.crash import (
    BackendSpec,
    CrashingBackend,
    EffectLedger,
    SimulatedCrash,
    _mp_context,
)

__all__ = ["InDoubtReport", "PaymentState", "payment_graph", "run_in_doubt"]

#: The amount the scenario's payment charges (shown in the intent's arguments).
AMOUNT = 17


class PaymentState(Schema):
    """One order, paid once: ``receipt`` is what the payment returned."""

    order: str = ""
    receipt: str = ""


#: Called by the payment right after the ledger counted it (the crash happens there); a hook
#: that returns an awaitable pauses the call until it is done (an in-process stall).
_AFTER_CALL: list[Any] = []


def payment_graph(ledger: EffectLedger, policy: str, keyed: bool) -> CompiledGraph[PaymentState]:
    """``Pay`` charges the order through ``ctx.step("pay", ...)`` with ``in_doubt=policy``
    (and an idempotency key when ``keyed``); the ledger is the payment provider, which
    honours an idempotency key it has seen by returning the first receipt."""

    class Pay(Node):
        class In(Schema):
            order: str

        class Out(Schema):
            receipt: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            thread = ctx.thread_id or ""

            def charge() -> str:
                if keyed and ledger.counts(thread).get("pay"):
                    return "pay-1"  # the provider dedupes by the key: no second charge
                n = ledger.hit(thread, "pay")
                waits = [w for hook in _AFTER_CALL if inspect.isawaitable(w := hook())]
                if waits:  # an in-process stall (the stall harness): pause the call here

                    async def paused() -> str:
                        for wait in waits:
                            await wait
                        return f"pay-{n}"

                    return paused()  # type: ignore[return-value]  # ctx.step awaits it
                return f"pay-{n}"

            receipt = await ctx.step(
                "pay",
                charge,
                idempotency_key=f"pay-{inp.order}" if keyed else None,
                in_doubt=policy,  # type: ignore[arg-type]  # checked by EffectCall
                args={"order": inp.order, "amount": AMOUNT},
            )
            return self.Out(receipt=str(receipt))

    graph = Graph(PaymentState, name="in-doubt").add(Pay)
    return graph.edge(START, "Pay").edge("Pay", END).compile()


@dataclass(slots=True)
class InDoubtReport:
    """One kill between intent and result, and what the resume did."""

    backend: str
    policy: str
    keyed: bool
    killed: bool
    #: Payments the provider counted.
    payments: int = 0
    #: The ``effect_in_doubt`` events the resume streamed (their ``data``).
    events: list[dict[str, Any]] = field(default_factory=list)
    #: ``get_state`` after the resume: status, interrupts, error type.
    status: str = ""
    interrupts: list[dict[str, Any]] = field(default_factory=list)
    error_type: str | None = None
    #: The receipt in the final state (after answering an ``ask``).
    receipt: str = ""

    def problems(self) -> list[str]:
        """Every way the resume broke the policy (empty: it kept it)."""
        found: list[str] = []
        if not self.killed:
            found.append("the run was not killed between intent and result")
        action = "retry" if self.keyed else self.policy
        actions = [e.get("action") for e in self.events]
        if actions[:1] != [action]:
            found.append(f"effect_in_doubt events {actions}, expected {action!r} first")
        for event in self.events:
            if event.get("args") != {"order": "A-17", "amount": AMOUNT}:
                found.append(f"the event does not show the call's arguments: {event}")
        expected_payments = 2 if action == "retry" and not self.keyed else 1
        if self.payments != expected_payments:
            found.append(f"{self.payments} payments, expected {expected_payments}")
        if action == "ask":
            shown = [i for i in self.interrupts if i.get("kind") == "in_doubt"]
            if not shown or shown[0].get("value", {}).get("args") != {
                "order": "A-17",
                "amount": AMOUNT,
            }:
                found.append(f"get_state shows no in_doubt interrupt with the call: {self}")
            if self.receipt != "pay-1":
                found.append(f"answering the question ended with receipt {self.receipt!r}")
        elif action == "fail":
            if self.status != "failed" or not (self.error_type or "").endswith(
                "EffectInDoubtError"
            ):
                found.append(f"expected a failed run (EffectInDoubtError), got {self.status}")
        else:
            want = "pay-1" if self.keyed else "pay-2"
            if self.status != "completed" or self.receipt != want:
                got = f"{self.status} {self.receipt!r}"
                found.append(f"expected completed with {want!r}, got {got}")
        return found

    def check(self) -> None:
        """Raise ``AssertionError`` listing the problems."""
        if self.problems():
            raise AssertionError(f"{self.backend} {self.policy}: " + "; ".join(self.problems()))


def _child(config: dict[str, Any]) -> None:
    asyncio.run(_child_async(config))


async def _child_async(config: dict[str, Any]) -> None:
    spec = BackendSpec(config["backend"]["target"], config["backend"]["kwargs"])
    backend = spec.create()
    backend.lease_ttl = float(config["lease_ttl"])
    ledger = EffectLedger(config["ledger"])
    _AFTER_CALL[:] = [lambda: os.kill(os.getpid(), signal.SIGKILL)]
    app = payment_graph(ledger, config["policy"], bool(config["keyed"]))
    await app.invoke({"order": "A-17"}, thread_id=config["thread"], backend=backend)


async def _spawn(config: dict[str, Any], preload: list[str]) -> int:
    ctx = _mp_context(preload)
    process = ctx.Process(target=_child, args=(config,), daemon=True)
    process.start()
    await asyncio.to_thread(process.join)
    code: int = process.exitcode
    return code


async def _resume(
    app: CompiledGraph[PaymentState],
    backend: Backend,
    thread: str,
    ttl: float,
    resume: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Resume ``thread`` (waiting out a dead owner's lease); the ``effect_in_doubt`` events."""
    deadline = time.monotonic() + max(20 * ttl, 10.0)
    while True:
        events: list[dict[str, Any]] = []
        try:
            async for event in app.stream(None, thread_id=thread, backend=backend, resume=resume):
                if event.type == "effect_in_doubt":
                    events.append(dict(event.data))
            return events
        except ThreadBusyError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(ttl / 5)
        except Exception:  # the `fail` policy: the run fails, get_state says why
            return events


async def run_in_doubt(
    backend: BackendSpec | Backend,
    workdir: str | os.PathLike[str],
    *,
    policy: str = "retry",
    keyed: bool = False,
    lease_ttl: float = 0.5,
) -> InDoubtReport:
    """Kill the payment scenario between its effect's intent and result, resume, report."""
    work = Path(workdir)
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    ledger = EffectLedger(work / "ledger.db")
    thread = f"doubt-{uuid.uuid4().hex[:8]}"
    app = payment_graph(ledger, policy, keyed)
    if isinstance(backend, BackendSpec):
        store = backend.create()
        label = backend.target
        config = {
            "backend": {"target": backend.target, "kwargs": dict(backend.kwargs)},
            "ledger": ledger.path,
            "thread": thread,
            "policy": policy,
            "keyed": keyed,
            "lease_ttl": lease_ttl,
        }
        modules = ["tensorsketch.testing.in_doubt"]
        if backend.module():
            modules.append(str(backend.module()))
        killed = await _spawn(config, modules) == -signal.SIGKILL
    else:
        store = backend
        label = type(backend).__name__
        store.lease_ttl = lease_ttl
        wrapper = CrashingBackend(store, mode="raise")

        def die() -> None:
            wrapper.dead = True  # the process is gone: nothing more reaches the store
            raise SimulatedCrash("killed between the effect and its record")

        _AFTER_CALL[:] = [die]
        killed = False
        try:
            await app.invoke({"order": "A-17"}, thread_id=thread, backend=wrapper)
        except Exception:  # the crash, or the run failing on the dead store after it
            killed = wrapper.dead
        finally:
            _AFTER_CALL.clear()
    store.lease_ttl = lease_ttl
    report = InDoubtReport(label, policy, keyed, killed)
    try:
        report.events = await _resume(app, store, thread, lease_ttl)
        state = await app.aget_state(thread, store)
        if state is not None:
            info = run_info(state)
            report.status = info.status
            report.interrupts = [p.to_dict() for p in info.interrupts]
            report.error_type = (info.error or {}).get("type")
            report.receipt = state.receipt
        if report.status == "suspended" and report.interrupts:
            # A person checked the provider: the payment went through, with this receipt.
            key = report.interrupts[0]["id"]
            await _resume(app, store, thread, lease_ttl, resume={key: {"result": "pay-1"}})
            state = await app.aget_state(thread, store)
            if state is not None:
                report.receipt = state.receipt
        report.payments = ledger.counts(thread).get("pay", 0)
    finally:
        if isinstance(backend, BackendSpec):
            await store.aclose()
    return report
