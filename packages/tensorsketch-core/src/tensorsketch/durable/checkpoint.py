"""What a read of a thread gives back: a checkpoint with its values, or just its header."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tensorsketch.joins import JoinState

__all__ = ["Checkpoint", "CheckpointInfo"]


class _PlannedTasks:
    """``next`` and ``sends`` over a ``tasks`` plan (what :class:`Checkpoint` and
    :class:`CheckpointInfo` both carry)."""

    __slots__ = ()
    tasks: tuple[tuple[str, dict[str, Any] | None], ...]

    @property
    def next(self) -> tuple[str, ...]:
        """Names of the plain (non-``Send``) nodes planned next."""
        return tuple(name for name, payload in self.tasks if payload is None)

    @property
    def sends(self) -> tuple[tuple[str, dict[str, Any]], ...]:
        """Pending ``Send`` instances as ``(node, payload)`` pairs."""
        return tuple((name, payload) for name, payload in self.tasks if payload is not None)


@dataclass(frozen=True, slots=True)
class Checkpoint(_PlannedTasks):
    """The state of a thread at one barrier (what ``get_history`` returns).

    :param tasks: the next superstep's tasks in plan order, as ``(node, payload)`` pairs
        (``payload`` is ``None`` for a plain node, the ``Send`` payload for a fan-out
        instance); the order is the barrier's fold order, so it is kept exactly.
    :param parent_id: the checkpoint this one grew from (the checkpoints of a thread and its
        forks form a tree).
    :param schema_id: the fingerprint of the state schema that wrote every row these values
        were folded from (``None``: unknown, or rows of several schemas); see
        :func:`schema_fingerprint`.
    :param joins: the wait-for-all joins that are part-way at this barrier: which of their
        sources have run since they last fired (empty for a checkpoint written before joins
        existed, or with none waiting).
    """

    id: str
    thread_id: str
    parent_id: str | None
    step: int
    values: dict[str, Any]
    tasks: tuple[tuple[str, dict[str, Any] | None], ...]
    created_at: float
    source: str = "loop"
    metadata: dict[str, Any] = field(default_factory=dict)
    schema_id: str | None = field(default=None, compare=False, repr=False)
    joins: tuple[JoinState, ...] = ()

    @property
    def plan(self) -> list[tuple[str, dict[str, Any] | None]]:
        """The tasks to run next, in plan order (copies, safe to change)."""
        return [(n, None if p is None else dict(p)) for n, p in self.tasks]


@dataclass(frozen=True, slots=True)
class CheckpointInfo(_PlannedTasks):
    """A checkpoint without its values: where it sits in the tree and what it plans.

    What a timeline of a long thread needs (:func:`describe_checkpoints`): reading it decodes
    each row's small header and plan but folds no state.

    :param changed: the fields this row's stored changes name (for a delta, the fields
        written since its base; for a snapshot, every field).
    """

    id: str
    thread_id: str
    parent_id: str | None
    step: int
    tasks: tuple[tuple[str, dict[str, Any] | None], ...]
    created_at: float
    source: str = "loop"
    metadata: dict[str, Any] = field(default_factory=dict)
    changed: tuple[str, ...] = ()
