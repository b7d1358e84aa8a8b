"""``Scheduler``: periodic (an interval, or cron) and one-off runs, kept in the run store so a
restart keeps them.

A schedule is a record of ``kind="schedule"`` that sits ``suspended`` on a timer: the same due
index that wakes durable timers wakes it. When it comes due, whichever runner sees it first
submits the run (with an idempotency key made of the schedule id and the firing number, so a
crash between submitting and moving the schedule on never submits twice) and moves its
``wake_at`` on with compare-and-set, so two runner processes never fire it twice either.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tensorsketch.errors import QueueFullError
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runs.cron import CronExpression
from tensorsketch.runtime.backends.runs import RunPage, RunRecord, RunStore, check_labels

__all__ = ["ScheduleHandle", "ScheduleHost", "Scheduler", "fire"]


class ScheduleHost(Protocol):
    """What schedules need of a runner (an ``AsyncRunner`` is one): its graph and store, to
    start it, to submit through it, and to wake its timer loop for a new schedule."""

    @property
    def graph(self) -> CompiledGraph[Any]: ...

    @property
    def store(self) -> RunStore: ...

    async def start(self) -> None: ...

    async def submit(
        self,
        input: Any = None,
        *,
        thread_id: str | None = None,
        idempotency_key: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> RunRecord: ...

    def _note_wake(self, wake_at: float | None) -> None: ...


@dataclass(frozen=True, slots=True)
class ScheduleHandle:
    """A stored schedule; ``await handle.cancel()`` stops it (runs it started go on)."""

    id: str
    runner: ScheduleHost

    async def cancel(self) -> None:
        """Stop the schedule for every runner sharing the store."""

        def stop(current: RunRecord) -> RunRecord | None:
            if current.terminal:
                return None
            return current.replace(status="cancelled", wake_at=None, waiting_for=None)

        await self.runner.store.transition(self.id, stop)

    async def history(self, *, limit: int = 50, cursor: str | None = None) -> RunPage:
        """The runs this schedule submitted, oldest first, a page at a time (they carry the
        label ``schedule=<id>``)."""
        return await self.runner.store.list(
            labels={"schedule": self.id}, limit=limit, cursor=cursor
        )


def _epoch(when: float | _dt.datetime) -> float:
    if isinstance(when, _dt.datetime):
        if when.tzinfo is None:
            msg = f"Scheduler.at() needs an aware datetime (with a timezone), got naive {when!r}."
            raise ValueError(msg)
        return when.timestamp()
    if isinstance(when, int | float) and not isinstance(when, bool) and math.isfinite(when):
        return float(when)
    msg = f"Scheduler.at() takes a Unix timestamp or an aware datetime, got {when!r}."
    raise TypeError(msg)


def _in_flight(max_in_flight: int | float) -> int | None:
    """``max_in_flight`` as stored (``None``: unbounded), or a ``ValueError``."""
    if isinstance(max_in_flight, bool) or not (
        (isinstance(max_in_flight, int) and max_in_flight >= 1) or max_in_flight == math.inf
    ):
        msg = (
            f"`max_in_flight` must be an int >= 1 or math.inf, got {max_in_flight!r} (0 "
            "would never let the schedule fire)."
        )
        raise ValueError(msg)
    return None if max_in_flight == math.inf else int(max_in_flight)


def _digest(*parts: Any) -> str:
    text = json.dumps(parts, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Scheduler:
    """Dispatch runs of ``runner`` on a schedule.

    Schedules are stored: calling ``every(...)`` again with the same arguments (as a restarted
    program does) returns the stored schedule instead of adding one; pass ``name=`` to tell
    two otherwise equal schedules apart (and to start afresh after cancelling one: a
    cancelled schedule stays cancelled).
    """

    def __init__(self, runner: ScheduleHost) -> None:
        self.runner = runner

    async def every(
        self,
        interval: float | _dt.timedelta,
        input: Any = None,
        *,
        max_in_flight: int | float = 1,
        name: str | None = None,
        labels: Mapping[str, str] | None = None,
        start_at: float | _dt.datetime | None = None,
    ) -> ScheduleHandle:
        """Submit ``input`` every ``interval`` seconds (first at ``start_at``, default one
        interval from now). A firing is skipped while ``max_in_flight`` runs it submitted
        are unfinished (``math.inf``: never skip)."""
        seconds = interval.total_seconds() if isinstance(interval, _dt.timedelta) else interval
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
            msg = f"Scheduler.every() needs a positive interval in seconds, got {interval!r}."
            raise ValueError(msg)
        first = time.time() + float(seconds) if start_at is None else _epoch(start_at)
        spec = {"every": float(seconds), "max_in_flight": _in_flight(max_in_flight)}
        return await self._store(spec, input, first, name, labels)

    async def cron(
        self,
        expression: str,
        input: Any = None,
        *,
        timezone: str = "UTC",
        max_in_flight: int | float = 1,
        name: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> ScheduleHandle:
        """Submit ``input`` at every time the five-field cron ``expression`` names, read in
        ``timezone`` (an IANA name; see :mod:`tensorsketch.runs.cron`). Like :meth:`every`,
        a firing is skipped while ``max_in_flight`` of its runs are unfinished, and missed
        firings (every runner was down) are not made up."""
        parsed = CronExpression.parse(expression, timezone)
        spec = {
            "cron": parsed.expression,
            "timezone": parsed.timezone,
            "max_in_flight": _in_flight(max_in_flight),
        }
        return await self._store(spec, input, parsed.next_after(time.time()), name, labels)

    async def at(
        self,
        when: float | _dt.datetime,
        input: Any = None,
        *,
        name: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> ScheduleHandle:
        """Submit ``input`` once, at ``when``."""
        at = _epoch(when)
        return await self._store({"at": at}, input, at, name, labels)

    async def _store(
        self,
        spec: dict[str, Any],
        input: Any,
        first: float,
        name: str | None,
        labels: Mapping[str, str] | None,
    ) -> ScheduleHandle:
        runner = self.runner
        runner.graph.check_run_input(input)  # a bad input fails here, not at every firing
        key = f"schedule:{runner.graph.name}:{name or _digest(spec, input, dict(labels or {}))}"
        record = RunRecord(
            run_id=f"schedule_{uuid.uuid4().hex}",
            thread_id=f"schedule_{_digest(key)}",
            graph=runner.graph.name,
            kind="schedule",
            status="suspended",
            waiting_for="timer",
            wake_at=first,
            input=input,
            idempotency_key=key,
            labels=check_labels(labels),
            schedule={**spec, "fired": 0, "children": []},
        )
        await runner.start()
        stored, _ = await runner.store.create(record)
        runner._note_wake(stored.wake_at)
        return ScheduleHandle(stored.run_id, runner)


async def fire(runner: ScheduleHost, schedule: RunRecord) -> None:
    """Submit the due schedule's run and move it on (the runner's timer loop calls this)."""
    spec = dict(schedule.schedule or {})
    now = time.time()
    if schedule.status != "suspended" or schedule.wake_at is None or schedule.wake_at > now:
        return  # read after another runner moved it on: that tick has fired already
    fired = int(spec.get("fired", 0)) + 1
    children: list[str] = list(spec.get("children", []))
    limit = spec.get("max_in_flight")
    unfinished = []
    for child in children:
        record = await runner.store.get(child)
        if record is not None and not record.terminal:
            unfinished.append(child)
    submitted: str | None = None
    if limit is None or len(unfinished) < int(limit):
        try:
            run = await runner.submit(
                schedule.input,
                idempotency_key=f"{schedule.run_id}:{fired}",
                labels={**schedule.labels, "schedule": schedule.run_id},
            )
            submitted = run.run_id
        except QueueFullError:
            submitted = None  # skipped like a gated firing; the next one tries again

    def advance(current: RunRecord) -> RunRecord | None:
        if current.status != "suspended" or current.version != schedule.version:
            return None  # another runner fired it first
        nxt: float | None
        if "every" in spec:
            step = float(spec["every"])
            nxt = (current.wake_at or now) + step
            if nxt <= now:  # missed firings (the process was down) are not made up
                nxt = now + step - ((now - nxt) % step)
        elif "cron" in spec:
            cron = CronExpression.parse(str(spec["cron"]), str(spec.get("timezone", "UTC")))
            nxt = cron.next_after(max(now, current.wake_at or now))
        else:
            nxt = None
        kept = [c for c in (*unfinished, submitted) if c][-64:]
        changes: dict[str, Any] = {
            "schedule": {**spec, "fired": fired, "children": kept},
            "wake_at": nxt,
        }
        if nxt is None:
            changes.update(status="succeeded", waiting_for=None, finished_at=now)
        return current.replace(**changes)

    await runner.store.transition(schedule.run_id, advance)
