"""``Loops``: what a runner does in the background while it is started.

- **Leases**: every third of ``lease_ttl`` it renews the leases of the runs it executes, and
  stops one whose lease it lost (another runner took it over, or it was cancelled elsewhere).
  Once a lease it also takes over the runs a crashed runner sharing the store left
  (``resume_pending``).
- **Timers**: it sleeps until the earliest ``wake_at`` of the store's due index (re-read every
  ``timer_refresh`` seconds, to see timers another process set), then resumes the runs that
  came due and fires the schedules that did — never by scanning every run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from tensorsketch.runs.execution import Execution
from tensorsketch.runs.records import now
from tensorsketch.runs.retention import sweep
from tensorsketch.runs.scheduler import ScheduleHost, fire
from tensorsketch.runs.state import RunnerState
from tensorsketch.runtime.backends.runs import ACTIVE, RunRecord

__all__ = ["Loops"]

log = logging.getLogger("tensorsketch.runs")


class Loops:
    """The lease and timer loops, and taking over orphaned runs.

    :param host: the runner, as the schedules it fires submit through it.
    :param take_over: what the lease loop calls to take over orphans (the runner's
        ``resume_pending``, so a runner that narrows it — a fleet worker — is obeyed).
    """

    def __init__(
        self,
        state: RunnerState,
        execution: Execution,
        host: ScheduleHost,
        take_over: Callable[[], Awaitable[list[str]]],
    ) -> None:
        self.state = state
        self.execution = execution
        self.host = host
        self.take_over = take_over
        self.tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Start both loops on the running event loop."""
        loop = asyncio.get_running_loop()
        self.tasks = [
            loop.create_task(self._renew_forever(), name="tensorsketch-runs-renew"),
            loop.create_task(self._timers_forever(), name="tensorsketch-runs-timers"),
        ]
        if self.state.retention is not None:
            self.tasks.append(
                loop.create_task(self._sweep_forever(), name="tensorsketch-runs-retention")
            )

    async def _sweep_forever(self) -> None:
        """Apply the runner's retention policy every ``sweep_every`` seconds (first at once)."""
        retention = self.state.retention
        assert retention is not None
        while True:
            try:
                report = await sweep(self.state.backend, retention)
                if report.deleted or report.pruned:
                    log.info(
                        "retention: deleted %d thread(s), pruned %d",
                        len(report.deleted),
                        len(report.pruned),
                    )
            except Exception as exc:  # the store may be away: the next sweep tries again
                log.warning("retention sweep failed: %s", exc)
            await asyncio.sleep(retention.sweep_every)

    async def resume_pending(self) -> list[str]:
        """Claim the store's orphaned runs and execute them here; wake the timer loop.
        Returns the ids claimed."""
        state = self.state
        taken: list[str] = []
        at = now()
        for record in await state.store.orphans(at, limit=10_000):
            if record.run_id in state.tasks:
                continue  # being worked on here
            claimed = await state.store.claim(record.run_id, state.owner, at + state.lease_ttl)
            if claimed is not None:
                log.info("took over run %s (was %s)", claimed.run_id, record.owner)
                state.notify(claimed)
                self.execution.spawn(claimed.run_id, takeover=True)
                taken.append(claimed.run_id)
        state.wake.set()
        return taken

    async def _renew_forever(self) -> None:
        state = self.state
        ticks = 0
        while True:
            await asyncio.sleep(state.lease_ttl / 3)
            ticks += 1
            if ticks % 3 == 0 and not state.draining:
                # Once a lease: take over what a crashed runner sharing the store left (read
                # from the status index of queued/running runs, not a scan of every run).
                try:
                    await self.take_over()
                except Exception as exc:
                    log.warning("looking for orphaned runs failed: %s", exc)
            mine = list(state.tasks)
            if not mine:
                continue
            expires = now() + state.lease_ttl
            try:
                kept = await state.store.renew(state.owner, mine, expires)
            except Exception as exc:
                log.warning("renewing run leases failed: %s", exc)
                continue
            for run_id in kept:  # a renewal is no news to a run's rider
                rider = state.riders.get(run_id)
                if rider is not None:
                    rider.renewed(expires)
            for run_id in mine:
                task = state.tasks.get(run_id)
                if run_id in kept or task is None or task.done() or run_id in state.folds:
                    continue  # (a folded submit's record is stored as its opening answers)
                current = await state.store.get(run_id)
                if (
                    current is not None
                    and current.owner == state.owner
                    and current.status in ACTIVE
                ):
                    continue  # written by us in between: the next renewal covers it
                if current is not None and current.status == "suspended":
                    continue  # it just suspended; the task is finishing
                state.stop_reasons[run_id] = "lost"
                task.cancel()

    async def _timers_forever(self) -> None:
        state = self.state
        while True:
            try:
                soonest = await state.store.next_wake()
            except Exception as exc:
                log.warning("reading the due-timer index failed: %s", exc)
                soonest = None
            state.next_wake = soonest
            delay = state.timer_refresh if soonest is None else soonest - now()
            delay = max(0.0, min(delay, state.timer_refresh))
            state.wake.clear()
            with contextlib.suppress(TimeoutError):
                # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel that
                # lands as the event is set (the runner's close then hung 10 s)
                async with asyncio.timeout(delay):
                    await state.wake.wait()
            try:
                due = await state.store.due(now(), limit=500)
            except Exception as exc:
                log.warning("reading due timers failed: %s", exc)
                continue
            for record in due:
                if record.kind == "schedule":
                    await self._fire_schedule(record)
                elif record.run_id not in state.tasks and not state.closed:
                    self.execution.spawn(record.run_id)
            if due and all(r.run_id in state.tasks or r.kind == "schedule" for r in due):
                # Claimed (or being claimed) here: let them leave the index before re-reading.
                await asyncio.sleep(min(0.05, state.timer_refresh))

    async def _fire_schedule(self, record: RunRecord) -> None:
        try:
            await fire(self.host, record)
        except Exception as exc:
            log.warning("schedule %s did not fire: %s", record.run_id, exc)
