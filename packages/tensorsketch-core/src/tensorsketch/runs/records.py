"""What a run record says about the run: what it waits for, whether it may move on, how long
it has executed. Pure functions of records, shared by every part of the runner."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from tensorsketch.runtime.backends.runs import RunRecord, WaitingFor

__all__ = ["active_seconds", "all_decided", "due", "now", "plain", "waiting_for"]

#: Waiting reasons a call resumes (approve, signal, resume), as opposed to a timer.
_DECIDED_BY_CALLS = frozenset({"approval", "input", "event", "breakpoint"})


#: The wall-clock time records are stamped with (Unix seconds): ``time.time`` itself, not a
#: function around it (a Python call per stamp, and a run is stamped about ten times).
now: Callable[[], float] = time.time


def active_seconds(current: RunRecord, at: float) -> float:
    """The run's executing time so far, counting its current segment up to ``at``."""
    started = current.segment_started_at
    return current.active_seconds + (max(0.0, at - started) if started is not None else 0.0)


def waiting_for(interrupts: Sequence[Mapping[str, Any]]) -> WaitingFor | None:
    """What a run suspended on ``interrupts`` waits for (an approval outranks the rest)."""
    kinds = {i.get("kind") for i in interrupts}
    if "approval" in kinds:
        return "approval"
    if "in_doubt" in kinds and "interrupt" not in kinds:
        return "input"  # a person says whether an effect in doubt happened
    if "interrupt" in kinds:
        waits_event = any(
            isinstance(i.get("value"), Mapping) and i["value"].get("wait_for") == "event"
            for i in interrupts
            if i.get("kind") == "interrupt"
        )
        return "event" if waits_event else "input"
    if "breakpoint" in kinds:
        return "breakpoint"
    if "timer" in kinds:
        return "timer"
    return None


def due(record: RunRecord, at: float) -> bool:
    """A run waiting for a timer that has come due by ``at``."""
    return record.waiting_for == "timer" and (record.wake_at or 0.0) <= at


def all_decided(record: RunRecord) -> bool:
    """A suspended run whose every awaited call (approval, answer, breakpoint) has its
    decision: it may resume."""
    if record.status != "suspended" or record.waiting_for not in _DECIDED_BY_CALLS:
        return False
    awaited = [i["id"] for i in record.interrupts if i.get("kind") != "timer"]
    return bool(awaited) and all(a in record.decisions for a in awaited)


def plain(value: Any) -> Any:
    """``value`` as a record stores it (a state model as its JSON dict). Through
    ``model_dump`` itself, not the class's serializer: before pydantic 2.11 the serializer's
    own default wrote fields by alias, where ``model_dump`` does not."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value
