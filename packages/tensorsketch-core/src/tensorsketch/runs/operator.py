"""``Operator``: what a person or a client does to a run that exists — approve it, signal it,
steer it, resume it from a breakpoint, cancel it.

Each is one compare-and-set on the record, stored before anything runs; a run that has what it
waits for is then executed here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from tensorsketch.errors import DecisionConflictError, RunConflictError
from tensorsketch.interrupts import PendingInterrupt, bind_approval, parse_approval
from tensorsketch.runs.execution import Execution
from tensorsketch.runs.records import all_decided, now
from tensorsketch.runs.signals import (
    MAX_DELIVERED_IDS,
    MAX_PENDING_EVENTS,
    check_event,
    segment_input,
)
from tensorsketch.runs.state import RunnerState
from tensorsketch.runs.steering import add_steering, check_steering
from tensorsketch.runtime.backends.runs import RunRecord

__all__ = ["Operator"]


class Operator:
    """The runner's ``approve``, ``signal``, ``steer``, ``resume`` and ``cancel``.

    :param read: reads a run's record (``AsyncRunner.get``: it exists, and an expired
        approval is rejected first).
    :param start: starts the runner's background loops (``AsyncRunner.start``).
    """

    def __init__(
        self,
        state: RunnerState,
        execution: Execution,
        read: Callable[[str], Awaitable[RunRecord]],
        start: Callable[[], Awaitable[None]],
    ) -> None:
        self.state = state
        self.execution = execution
        self.read = read
        self.start = start

    async def _not_superseded(self, record: RunRecord) -> None:
        """Refuse to let a suspended run go on whose thread a later run went on with (new
        input resumed the thread: that run holds what this one waited on). The run ends
        ``cancelled`` (``Superseded``) and the caller is told which run to decide instead."""
        if record.status != "suspended":
            return
        later = await self.execution.superseded_by(record)
        if later is None:
            return
        if await self.execution.end_superseded(record, later) is None:
            return  # it moved on meanwhile: the caller's own change says how it stands
        self.execution.wake_waiters(record.run_id)
        msg = (
            f"run {record.run_id!r} was superseded: run {later!r} went on with its thread "
            f"{record.thread_id!r} with new input while it waited, and now holds what it "
            f"waited on. Decide {later!r} instead; {record.run_id!r} is cancelled."
        )
        raise RunConflictError(msg)

    async def _ready(self) -> None:
        """The run an approval, a signal or a resume lets go on executes here: a runner never
        started starts now (as ``submit`` does); a closed one refuses before anything is
        stored (nothing here would ever run it)."""
        if self.state.closed:
            msg = (
                "this AsyncRunner was closed, so it cannot run what this would resume; "
                "create a new one."
            )
            raise RuntimeError(msg)
        await self.start()

    async def approve(self, run_id: str, decisions: Mapping[str, Any]) -> RunRecord:
        if not isinstance(decisions, Mapping) or not decisions:
            msg = "approve() needs a non-empty dict of decisions keyed by the ids the run awaits."
            raise ValueError(msg)
        for key, decision in decisions.items():
            if not isinstance(key, str):
                msg = f"decision ids are strings, got {key!r}."
                raise ValueError(msg)
            parse_approval(decision)
        await self._ready()
        record = await self.read(run_id)
        await self._not_superseded(record)

        def decide(current: RunRecord) -> RunRecord:
            if current.status != "suspended" or current.waiting_for != "approval":
                msg = (
                    f"run {run_id!r} is {current.status}"
                    + (f", waiting for {current.waiting_for}" if current.waiting_for else "")
                    + "; only a run waiting for approval takes decisions."
                )
                raise RunConflictError(msg)
            awaited = {i["id"] for i in current.interrupts if i.get("kind") == "approval"}
            unknown = sorted(set(decisions) - awaited)
            if unknown:
                msg = (
                    f"run {run_id!r} does not wait on {unknown}; it waits on "
                    f"{sorted(awaited)}. Nothing was recorded."
                )
                raise ValueError(msg)
            asked = {i["id"]: i for i in current.interrupts if i.get("kind") == "approval"}
            for key, decision in decisions.items():
                # Refused (nothing recorded) if it names another call or other arguments.
                bind_approval(PendingInterrupt.from_dict(asked[key]), decision)
            merged = dict(current.decisions)
            for key, decision in decisions.items():
                if key in merged and parse_approval(merged[key]) != parse_approval(decision):
                    msg = (
                        f"{key!r} of run {run_id!r} was already decided: {merged[key]!r} is "
                        f"recorded and is what the run uses; {decision!r} conflicts with it. "
                        "Nothing was recorded."
                    )
                    raise DecisionConflictError(msg, interrupt_id=key, first=merged[key])
                merged.setdefault(key, decision)  # the same decision again changes nothing
            return current.replace(decisions=merged)

        stored = await self.state.store.transition(record.run_id, decide)
        assert stored is not None
        self.state.notify(stored)
        if all_decided(stored):
            self.execution.spawn(stored.run_id)
        return stored

    async def signal(self, run_id: str, event: Mapping[str, Any]) -> RunRecord:
        state = self.state
        checked = check_event(event)
        await self._ready()
        record = await self.read(run_id)
        await self._not_superseded(record)
        if state.event_input is None and record.waiting_for in ("timer", "approval", "breakpoint"):
            segment_input(state.graph, None, [checked])  # fail now if the graph cannot take events

        def accept(current: RunRecord) -> RunRecord:
            if current.status != "suspended":
                msg = f"run {run_id!r} is {current.status}; only a suspended run takes events."
                raise RunConflictError(msg)
            event_id = checked.get("event_id")
            if event_id is not None and (
                event_id in current.delivered_event_ids
                or any(e.get("event_id") == event_id for e in current.events)
            ):
                msg = f"event {event_id!r} was already delivered to run {run_id!r}."
                raise RunConflictError(msg)
            delivered = current.delivered_event_ids
            if event_id is not None:
                delivered = (*delivered, event_id)[-MAX_DELIVERED_IDS:]
            if current.waiting_for in ("event", "input"):
                answers = {
                    i["id"]: dict(checked)
                    for i in current.interrupts
                    if i.get("kind") == "interrupt"
                }
                return current.replace(
                    decisions={**answers, **current.decisions}, delivered_event_ids=delivered
                )
            if len(current.events) >= MAX_PENDING_EVENTS:
                msg = (
                    f"run {run_id!r} already holds {MAX_PENDING_EVENTS} undelivered events; "
                    "this one was not accepted. Get the run moving (approve it, or let its "
                    "timer fire) first."
                )
                raise RunConflictError(msg)
            return current.replace(events=(*current.events, checked), delivered_event_ids=delivered)

        stored = await state.store.transition(record.run_id, accept)
        assert stored is not None
        state.notify(stored)
        if stored.waiting_for in ("event", "input"):
            self.execution.spawn(stored.run_id)
        return stored

    async def steer(self, run_id: str, message: str | Mapping[str, Any]) -> RunRecord:
        content = check_steering(message)
        record = await self.read(run_id)
        stored = await self.state.store.transition(
            record.run_id, lambda current: add_steering(current, content)
        )
        assert stored is not None
        self.state.notify(stored)
        return stored

    async def resume(self, run_id: str) -> RunRecord:
        record = await self.read(run_id)

        def go_on(current: RunRecord) -> RunRecord:
            if current.status != "suspended" or current.waiting_for != "breakpoint":
                how = {
                    "approval": "approve() it",
                    "input": "signal() it with the answer",
                    "event": "signal() it",
                    "timer": "wait for its timer",
                }.get(current.waiting_for or "", "")
                msg = (
                    f"run {run_id!r} is {current.status}"
                    + (f", waiting for {current.waiting_for}" if current.waiting_for else "")
                    + "; resume() continues only a run stopped at a breakpoint"
                    + (f" ({how} instead)." if how else ".")
                )
                raise RunConflictError(msg)
            passed = {i["id"]: True for i in current.interrupts if i.get("kind") == "breakpoint"}
            return current.replace(decisions={**current.decisions, **passed})

        await self._ready()
        await self._not_superseded(record)
        stored = await self.state.store.transition(record.run_id, go_on)
        assert stored is not None
        self.state.notify(stored)
        if all_decided(stored):
            self.execution.spawn(stored.run_id)
        return stored

    async def cancel(self, run_id: str) -> RunRecord:
        state = self.state
        await self.read(run_id)

        def stop(current: RunRecord) -> RunRecord:
            if current.terminal:
                msg = f"run {run_id!r} already {current.status}; there is nothing to cancel."
                raise RunConflictError(msg)
            return current.replace(
                status="cancelled",
                finished_at=now(),
                waiting_for=None,
                wake_at=None,
                owner=None,
                lease_expires_at=None,
            )

        stored = await state.store.transition(run_id, stop)
        assert stored is not None
        task = state.tasks.get(run_id)
        if task is not None and not task.done():
            state.stop_reasons[run_id] = "cancelled"
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([task])
        state.notify(stored)
        self.execution.wake_waiters(run_id)
        return stored
