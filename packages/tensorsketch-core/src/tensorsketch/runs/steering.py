"""Steering a run that executes: what a steering message may hold, how many a run buffers,
and the inbox the runner binds for the run's agent (:mod:`tensorsketch.steering`).

A message is stored in the run's record (``steering``) by compare-and-set, so it reaches the
run in whichever runner process executes it. The agent takes what waits before each model call,
journals it, then marks it taken (``steering_taken``): a crash in between replays the journal
entry, and the mark only ever moves forward.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tensorsketch.errors import RunConflictError
from tensorsketch.runs.records import now
from tensorsketch.runs.riding import RunRider
from tensorsketch.runtime.backends.runs import RunRecord, RunStore

__all__ = [
    "MAX_PENDING_STEERING",
    "MAX_STEERING_CHARS",
    "RecordInbox",
    "add_steering",
    "check_steering",
]

#: Steering messages a run holds untaken before refusing more.
MAX_PENDING_STEERING = 64
#: The longest steering message (characters).
MAX_STEERING_CHARS = 65536
#: The statuses a run takes steering in: it executes, or is about to.
_STEERABLE = frozenset({"queued", "running"})


def check_steering(message: str | Mapping[str, Any]) -> str:
    """The text of a steering message: a string, or ``{"content": str}``."""
    if isinstance(message, Mapping):
        extra = sorted(set(message) - {"content"})
        if extra:
            msg = f'a steering message is {{"content": "..."}}; remove {extra}.'
            raise ValueError(msg)
        message = message.get("content")  # type: ignore[assignment]
    if not isinstance(message, str) or not message.strip():
        msg = (
            "a steering message needs `content`: a non-empty string (what the agent reads "
            f"as a user message at its next model call), got {message!r:.60}."
        )
        raise ValueError(msg)
    if len(message) > MAX_STEERING_CHARS:
        msg = f"a steering message is at most {MAX_STEERING_CHARS} characters, got {len(message)}."
        raise ValueError(msg)
    return message


def add_steering(current: RunRecord, content: str) -> RunRecord:
    """``current`` with ``content`` waiting for its agent's next model call, or a
    :class:`RunConflictError` saying why this run takes no steering."""
    if current.status not in _STEERABLE:
        if current.status == "suspended":
            msg = (
                f"run {current.run_id!r} is suspended (waiting for {current.waiting_for}); it "
                "makes no model call until it resumes. Send it an event instead "
                "(signal(), POST /tasks/{id}/events), or approve/resume it first."
            )
        else:
            msg = (
                f"run {current.run_id!r} already {current.status}; steering reaches only a "
                "queued or running run. Submit a new run on its thread instead."
            )
        raise RunConflictError(msg)
    if len(current.steering) >= MAX_PENDING_STEERING:
        msg = (
            f"run {current.run_id!r} already holds {MAX_PENDING_STEERING} steering messages "
            "its agent has not taken; this one was not accepted. Wait for its next model call."
        )
        raise RunConflictError(msg)
    last = current.steering[-1]["seq"] if current.steering else current.steering_taken
    message = {"seq": int(last) + 1, "content": content, "at": now()}
    return current.replace(steering=(*current.steering, message))


class RecordInbox:
    """The steering inbox of one run, read from and marked in its record; with the run's
    rider, the record is read only when somebody wrote it since the rider last saw it."""

    def __init__(self, store: RunStore, run_id: str, rider: RunRider | None = None) -> None:
        self.store = store
        self.run_id = run_id
        self.rider = rider

    async def pending(self) -> list[dict[str, Any]]:
        rider = self.rider
        if rider is None:
            record = await self.store.get(self.run_id)
        elif rider.changed:
            record = await rider.current()
        else:  # what the rider knows is current: no read, and no coroutine to ask it
            record = rider.known
        if record is None or not record.steering:  # nothing sent (every model call asks)
            return []
        return [dict(m) for m in record.steering if int(m["seq"]) > record.steering_taken]

    async def taken(self, messages: list[dict[str, Any]]) -> None:
        upto = max(int(m["seq"]) for m in messages)

        def mark(current: RunRecord) -> RunRecord | None:
            if current.steering_taken >= upto:
                return None  # a replay: already marked
            return current.replace(
                steering=tuple(m for m in current.steering if int(m["seq"]) > upto),
                steering_taken=upto,
            )

        rider = self.rider
        known = None if rider is None or rider.changed else rider.known
        stored = await self.store.transition(self.run_id, mark, known=known)
        if rider is not None and stored is not None:
            rider.known, rider.changed = stored, False
