"""Steering: messages sent into a run while it executes, which its agent takes at its next
model call.

The runner keeps a run's steering messages in its record (``AsyncRunner.steer``) and, while it
executes the run, binds the run's :class:`SteeringInbox` here. An agent's loop asks the inbox
before each model call and journals what it took under that call's key, so a run resumed
after a crash sees the same messages at the same call, and never again at a later one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, Protocol

__all__ = ["INBOX", "SteeringInbox", "bound_inbox", "current_inbox"]


class SteeringInbox(Protocol):
    """Where the steering messages of the run executing here wait."""

    async def pending(self) -> list[dict[str, Any]]:
        """The messages not taken yet, oldest first (``{"seq", "content", ...}`` each)."""
        ...

    async def taken(self, messages: list[dict[str, Any]]) -> None:
        """Mark ``messages`` as taken (called once they are journaled; again on a replay)."""
        ...


#: The inbox bound here (:func:`bound_inbox`); the runner sets and resets it itself, once a
#: segment, with the run's other bindings (no context manager each).
INBOX: ContextVar[SteeringInbox | None] = ContextVar("tensorsketch_steering", default=None)


def current_inbox() -> SteeringInbox | None:
    """The inbox of the run executing in this task (``None`` outside a runner)."""
    return INBOX.get()


@contextlib.contextmanager
def bound_inbox(inbox: SteeringInbox | None) -> Iterator[None]:
    """Bind ``inbox`` for the code (and the tasks it starts) inside the block."""
    token = INBOX.set(inbox)
    try:
        yield
    finally:
        INBOX.reset(token)
