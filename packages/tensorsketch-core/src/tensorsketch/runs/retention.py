"""Thread retention: what a runner deletes or prunes of the threads in its backend, swept in
the background (``AsyncRunner(retention=Retention(...))``, or :func:`sweep` by hand).

A thread idle longer than ``idle_days`` (its newest checkpoint older than that) is deleted
whole — checkpoints, effect journal, events, lease and its run records — with the same
operation as ``app.delete_thread``; otherwise one with more than ``keep_checkpoints``
checkpoints is pruned to the newest ones (``app.prune_thread``). A thread with a run queued,
running or suspended is never touched, and one another process holds the lease of is
skipped until the next sweep.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from tensorsketch.errors import ThreadBusyError
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.threads import delete_thread, prune_thread

__all__ = ["Retention", "SweepReport", "sweep"]

log = logging.getLogger("tensorsketch.runs")

_DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class Retention:
    """A retention policy for a runner's threads.

    :param idle_days: delete a thread whose newest checkpoint is older than this many days.
    :param keep_checkpoints: prune a thread to its newest this many checkpoints.
    :param sweep_every: seconds between the runner's sweeps.
    """

    idle_days: float | None = None
    keep_checkpoints: int | None = None
    sweep_every: float = 3600.0

    def __post_init__(self) -> None:
        if self.idle_days is None and self.keep_checkpoints is None:
            msg = "Retention needs idle_days=, keep_checkpoints= or both (it would keep all)."
            raise ValueError(msg)
        if self.idle_days is not None and not (
            isinstance(self.idle_days, int | float)
            and not isinstance(self.idle_days, bool)
            and self.idle_days > 0
        ):
            msg = f"Retention(idle_days=...) must be a positive number, got {self.idle_days!r}."
            raise ValueError(msg)
        if self.keep_checkpoints is not None and (
            type(self.keep_checkpoints) is not int or self.keep_checkpoints < 1
        ):
            msg = (
                "Retention(keep_checkpoints=...) must be an int >= 1, got "
                f"{self.keep_checkpoints!r}."
            )
            raise ValueError(msg)
        if not self.sweep_every > 0:
            msg = f"Retention(sweep_every=...) must be positive seconds, got {self.sweep_every!r}."
            raise ValueError(msg)


@dataclass
class SweepReport:
    """What one sweep did: the threads deleted, and checkpoints removed per pruned thread."""

    deleted: list[str] = field(default_factory=list)
    pruned: dict[str, int] = field(default_factory=dict)


async def sweep(backend: Backend, retention: Retention, *, at: float | None = None) -> SweepReport:
    """Apply ``retention`` to every thread of ``backend`` once (``at``: the time it is)."""
    report = SweepReport()
    at = time.time() if at is None else at
    store = backend.run_store()
    for summary in await backend.summarize_threads():
        thread_id = summary.thread_id
        if store is not None:
            busy = await store.list(
                status=("queued", "running", "suspended"), thread_id=thread_id, limit=1
            )
            if busy.records:
                continue
        idle = retention.idle_days is not None and summary.updated_at < at - (
            retention.idle_days * _DAY
        )
        keep = retention.keep_checkpoints
        try:
            if idle:
                await delete_thread(backend, thread_id)
                report.deleted.append(thread_id)
            elif keep is not None and summary.checkpoints > keep:
                removed = await prune_thread(backend, thread_id, keep)
                if removed:
                    report.pruned[thread_id] = removed
        except ThreadBusyError:
            continue  # a run started meanwhile: the next sweep looks again
    return report
