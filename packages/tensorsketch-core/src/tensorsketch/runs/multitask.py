"""Double-texting: what a new input for a thread that already has a run in flight does.

The policy (``multitask_strategy``) is chosen per submit, or by the runner's default:

- ``reject``: the submit is refused with :class:`RunConflictError` (HTTP 409);
- ``enqueue``: the new run waits until every earlier run of the thread has stopped, in order;
- ``interrupt``: the runs in flight are stopped at their next superstep barrier (what they
  checkpointed stays) and the new run starts on top of that state;
- ``rollback``: likewise, and their checkpoints are discarded back to where they started.

A stop request travels in the stopped run's record (``stop_requested``), so it reaches the
runner executing it in any process: that runner reads it at each barrier.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

from tensorsketch.runtime.backends.base import Backend

__all__ = [
    "MULTITASK_STRATEGIES",
    "MultitaskStrategy",
    "check_strategy",
    "roll_back",
    "stopped_error",
]

MultitaskStrategy = Literal["reject", "enqueue", "interrupt", "rollback"]
#: Every policy, in the order the docs list them.
MULTITASK_STRATEGIES: Final[tuple[str, ...]] = get_args(MultitaskStrategy)


def check_strategy(value: object, where: str = "multitask_strategy") -> MultitaskStrategy:
    """``value`` as a policy, or a ``ValueError`` naming the ones there are."""
    if value not in MULTITASK_STRATEGIES:
        msg = f"`{where}` must be one of {', '.join(MULTITASK_STRATEGIES)}; got {value!r:.40}."
        raise ValueError(msg)
    return value  # type: ignore[return-value]


async def roll_back(backend: Backend, thread_id: str, base_checkpoint: str | None) -> int:
    """Discard the thread's checkpoints written after ``base_checkpoint``; return how many
    were removed.

    A run that started on an empty thread (``""``) is rolled back to that: the thread is
    deleted — its events too, so the next run's event numbers start afresh rather than
    under events no checkpoint accounts for.
    """
    checkpoints = await backend.list_checkpoints(thread_id)
    if not base_checkpoint:
        if checkpoints:
            await backend.delete_thread(thread_id)
        return len(checkpoints)
    kept = []
    for checkpoint in checkpoints:
        kept.append(checkpoint)
        if checkpoint.checkpoint_id == base_checkpoint:
            break
    else:
        return 0  # the base is gone (pruned): nothing is known to be this run's alone
    removed = len(checkpoints) - len(kept)
    if removed:
        await backend.replace_checkpoints(thread_id, kept)
    return removed


def stopped_error(strategy: str, by: str) -> dict[str, str]:
    """The ``error`` of a run a later submit stopped (its status is ``cancelled``)."""
    if strategy == "rollback":
        return {
            "type": "RolledBack",
            "message": f"stopped by run {by!r} (multitask_strategy 'rollback'); its "
            "checkpoints were discarded back to where it started",
        }
    return {
        "type": "Interrupted",
        "message": f"stopped by run {by!r} (multitask_strategy 'interrupt') at a superstep "
        "barrier; what it checkpointed stays on the thread",
    }
