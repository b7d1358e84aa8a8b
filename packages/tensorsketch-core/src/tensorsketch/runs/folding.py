"""``Folding``: a submit whose insert rides its run's opening (issue 49).

A run that can start at once (a free slot, its thread idle as far as this runner knows, no
idempotency key nor labels, a backend whose ``folds_submits`` says it can; see
:class:`~tensorsketch.runtime.backends.base.Backend`) is not inserted by ``submit``: its task
starts, and the unit that opens its thread stores the record, takes the thread's lease only
if the run heads its thread's queue, and moves it to ``running`` there (one durable
transaction instead of two; the SQL stores insert it ``running`` at once where the lease is
taken, and ``queued`` in a unit of their own where it is not). ``submit`` waits for that
unit and returns the record as inserted, so what it returns is stored, as before:

- committed with the lease: the run runs; listeners hear ``queued`` then ``running``;
- committed without it (a run queued or running before it, or another holder of the
  lease): the record stays ``queued``; the run leaves its slot and waits its turn;
- failed or cancelled before it answered: nothing is known to be stored. ``submit`` waits
  for the run's task to end and reads the record: found, it is returned (and runs as
  stored); not found, ``submit`` stores it the usual way — never a second run.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from tensorsketch.runtime.backends.rides import RecordRide
from tensorsketch.runtime.backends.runs import RunRecord

if TYPE_CHECKING:
    from tensorsketch.runs.state import RunnerState

__all__ = ["Folding"]


class Folding:
    """One folded submit, from its task's start until its opening answered.

    :param record: the run's record as ``submit`` would have inserted it (``queued``,
        version 1, owned by this runner).
    """

    __slots__ = ("answered", "opened", "record", "ride")

    def __init__(self, record: RunRecord) -> None:
        self.record = record
        #: The record as inserted once the opening committed; ``None`` if the run's task
        #: ended before the opening answered (``submit`` then reads the store).
        self.answered: asyncio.Future[RunRecord | None] = asyncio.get_running_loop().create_future()
        #: The opening's ride, as the run's rider built it (its ``result`` says the unit
        #: committed, whether or not it took the lease).
        self.ride: RecordRide | None = None
        #: The opening took the thread's lease (its rider was handed what it stored).
        self.opened = False

    def settle(self, state: RunnerState) -> bool:
        """Whether the record is known to be stored (the opening committed); the first time
        it is, listeners hear ``queued`` and ``submit`` is answered. Called once the opening
        returned or raised."""
        ride = self.ride
        if ride is None or ride.result is None or ride.result.version is None:
            return False  # (no version: the unit did not store the record it carried)
        if state.folds.pop(self.record.run_id, None) is not None:
            state.notify(self.record)
            if not self.answered.done():  # its submit may have been cancelled
                self.answered.set_result(self.record)
        return True

    def ended(self) -> None:
        """The run's task ended: a submit still waiting reads the store."""
        if not self.answered.done():
            self.answered.set_result(None)
