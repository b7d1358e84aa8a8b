"""How a run's end is recorded on the state ``invoke`` returns or ``get_state`` reads back
(what :func:`tensorsketch.interrupts.run_info` finds there)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tensorsketch.durable.checkpoint import Checkpoint
from tensorsketch.interrupts import RunInfo, RunStatus, run_info
from tensorsketch.schema import Schema
from tensorsketch.suspension import PendingInterrupt

__all__ = ["attach_checkpoint_info", "attach_run_info", "attach_subgraphs"]


def attach_run_info(
    state: Schema,
    *,
    interrupts: tuple[PendingInterrupt, ...],
    thread_id: str | None,
    checkpoint_id: str | None,
) -> None:
    """Record how a run ended on the state it returns: suspended on ``interrupts``, or
    completed."""
    info = RunInfo(
        status="suspended" if interrupts else "completed",
        interrupts=interrupts,
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
    )
    object.__setattr__(state, "__tensorsketch_run__", info)


def attach_checkpoint_info(
    state: Schema, checkpoint: Checkpoint, decisions: dict[str, Any] | None = None
) -> None:
    """Record on a state read back from a checkpoint how the thread stood there
    (``decisions``: those already recorded for its interrupts, see ``RunInfo``)."""
    meta = checkpoint.metadata
    error = meta.get("error")
    pending = tuple(PendingInterrupt.from_dict(p) for p in meta.get("interrupts") or ())
    decided = decisions or {}
    status: RunStatus = (
        "failed"
        if error
        else "suspended"
        if pending and not all(p.id in decided for p in pending)
        else "pending"
        if checkpoint.tasks
        else "completed"
    )
    info = RunInfo(
        status=status,
        interrupts=pending,
        thread_id=checkpoint.thread_id,
        checkpoint_id=checkpoint.id,
        error=dict(error) if error else None,
        decisions=decided,
    )
    object.__setattr__(state, "__tensorsketch_run__", info)


def attach_subgraphs(state: Schema, nested: dict[str, Any]) -> None:
    """Add the states of the thread's started subgraph nodes to its run info."""
    info = replace(run_info(state), subgraphs=nested)
    object.__setattr__(state, "__tensorsketch_run__", info)
