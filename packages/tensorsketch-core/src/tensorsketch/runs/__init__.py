"""Runs as durable records: ``AsyncRunner``, ``Scheduler`` and the run record.

::

    from tensorsketch.runs import AsyncRunner, Scheduler

    runner = AsyncRunner(app, backend=SqliteBackend("runs.db"), concurrency=8)
    record = await runner.submit({"query": "refund order 7"}, idempotency_key="req-41")
    done = await runner.await_run(record.run_id)

The record (:class:`RunRecord`) lives in the backend's run store beside the checkpoints, so
the HTTP task API (``tensorsketch.serve.tasks``), the Studio and other runner processes read
the same thing. See docs/runs.md for the lifecycle and what is exactly-once.
"""

from __future__ import annotations

from typing import Any

from tensorsketch.context import Context
from tensorsketch.errors import (
    AssistantNotFoundError,
    QueueFullError,
    RunConflictError,
    RunNotFoundError,
    RunStoreUnsupportedError,
)
from tensorsketch.interrupts import interrupt
from tensorsketch.runs.assistants import Assistant, Assistants
from tensorsketch.runs.multitask import MULTITASK_STRATEGIES, MultitaskStrategy
from tensorsketch.runs.retention import Retention
from tensorsketch.runs.runner import AsyncRunner, EventInput, Listener
from tensorsketch.runs.scheduler import ScheduleHandle, Scheduler
from tensorsketch.runs.signals import check_event
from tensorsketch.runtime.backends.runs import (
    RunPage,
    RunRecord,
    RunStatus,
    RunStore,
    WaitingFor,
    run_store,
)

__all__ = [
    "MULTITASK_STRATEGIES",
    "Assistant",
    "AssistantNotFoundError",
    "Assistants",
    "AsyncRunner",
    "EventInput",
    "Listener",
    "MultitaskStrategy",
    "QueueFullError",
    "Retention",
    "RunConflictError",
    "RunNotFoundError",
    "RunPage",
    "RunRecord",
    "RunStatus",
    "RunStore",
    "RunStoreUnsupportedError",
    "ScheduleHandle",
    "Scheduler",
    "WaitingFor",
    "check_event",
    "run_store",
    "wait_for_event",
]


async def wait_for_event(ctx: Context, *, id: str | None = None) -> dict[str, Any]:
    """Suspend the run until an event is signalled to it (``runner.signal`` /
    ``POST /tasks/{id}/events``); return that event ``{"type", "payload", "event_id"?}``.

    The run's record says it waits for ``event`` meanwhile.
    """
    answer = await interrupt(ctx, {"wait_for": "event"}, id=id)
    return dict(answer) if isinstance(answer, dict) else {"type": "event", "payload": answer}
