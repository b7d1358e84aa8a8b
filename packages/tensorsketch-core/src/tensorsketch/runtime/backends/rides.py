"""Record rides: a run record's write that travels in a checkpoint commit's own unit of work.

A run executed by ``AsyncRunner`` keeps a record beside its thread. Writing that record in
transactions of its own doubled what a run cost, so a backend whose run store shares the
checkpoints' database offers to *carry* a small record change in the units the engine commits
anyway (:meth:`Backend.open_thread`, :meth:`Backend.record_effects`,
:meth:`Backend.commit_step`): a compare-and-set write of the record, and a read of the
record's version (what tells the runner that someone else wrote it — a stop request, a
steering message, a cancel).

The engine does not know run records: it asks the :class:`CommitRider` bound to the run (by
the runner, with :func:`bound_rider`) what rides each unit, and hands it what the unit saw.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from tensorsketch.runtime.backends.runs import RunRecord, ThreadHead

__all__ = [
    "RIDER",
    "CommitRider",
    "RecordRide",
    "RideResult",
    "RideUnit",
    "bound_rider",
    "current_rider",
]

#: Which unit a ride travels in: the thread's opening, a journal write, a checkpoint, or the
#: run's last checkpoint (the one that gives the lease back).
RideUnit = Literal["open", "effects", "commit", "final"]


@dataclass(slots=True)
class RecordRide:
    """What rides one unit: always a read of the record's version; with ``write``, that
    record is stored first if the stored version is still ``write.version`` (its version is
    then bumped by one). A lost compare-and-set leaves the record alone and never fails the
    unit: the checkpoint commits either way and the runner writes the record the slow way.

    The backend that carried it sets ``result`` (a unit's own return value stays as it is).

    ``insert`` (the ``open`` unit only, on a backend that :attr:`~.base.Backend.folds_submits`):
    a new run's record, ``queued`` at version 1, stored in the opening's own unit — the
    submit's insert folded into it. The opening is then durable, takes the thread's lease
    only if that run heads its thread's queue (the oldest queued or running run), and sets
    ``result`` whether or not it took the lease (its ``write`` rides only if it did; a
    backend may store the write directly in place of the insert then, and store the insert
    in a unit of its own where it did not: the SQL backends do).
    """

    run_id: str
    write: RunRecord | None = None
    result: RideResult | None = None
    insert: RunRecord | None = None


@dataclass(frozen=True, slots=True)
class RideResult:
    """What a unit saw of the record as it committed.

    :param version: the record's version after the unit (``None``: there is no record).
    :param stored: the ride's ``write`` as stored (version bumped), or ``None`` when there
        was none or it lost the compare-and-set.
    """

    version: int | None
    stored: RunRecord | None = None


class CommitRider(Protocol):
    """The runner's side of a ride, bound to one run on one thread."""

    @property
    def thread_id(self) -> str:
        """The thread whose commits the rides travel in (a subgraph's thread carries none)."""
        ...

    def ride(self, unit: RideUnit, ending: Callable[[], Any] | None = None) -> RecordRide | None:
        """What rides ``unit``; for ``final``, ``ending`` builds the run's final state (what
        ``invoke`` would return) — given only when the run ends cleanly or suspends."""
        ...

    async def rode(
        self, ride: RecordRide, result: RideResult, head: ThreadHead | None = None
    ) -> None:
        """Take what the unit saw; ``head`` (the ``open`` unit only) is where the thread
        stood before it. May raise to stop the run (its record says it must not go on)."""
        ...


#: The rider bound here (:func:`bound_rider`); the runner sets and resets it itself, once
#: a segment, with the run's other bindings.
RIDER: ContextVar[CommitRider | None] = ContextVar("tensorsketch_rider", default=None)


def current_rider() -> CommitRider | None:
    """The rider bound to the run executing in this context, if any."""
    return RIDER.get()


@contextlib.contextmanager
def bound_rider(rider: CommitRider | None) -> Iterator[None]:
    """Bind ``rider`` for the run started inside the block (its engine task copies it)."""
    token = RIDER.set(rider)
    try:
        yield
    finally:
        RIDER.reset(token)
