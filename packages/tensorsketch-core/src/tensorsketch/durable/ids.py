"""Ids the durable layer mints: checkpoint ids and lease owners."""

from __future__ import annotations

import uuid

# The runtime's fast, fork-safe 128-bit random ids (the ones spans use).
from tensorsketch.observability.tracing import new_trace_id

__all__ = ["new_checkpoint_id", "new_owner_id"]


def new_checkpoint_id() -> str:
    """A fresh checkpoint id (random: ids from forked processes never collide)."""
    return new_trace_id()


def new_owner_id() -> str:
    """A fresh lease owner: one per run, so two runs of a thread never share a lease."""
    return uuid.uuid4().hex
