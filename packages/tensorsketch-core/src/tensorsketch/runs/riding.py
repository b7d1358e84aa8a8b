"""``RunRider``: a run record's writes carried in the run's own checkpoint commits.

A segment of a run executed here binds one (see :mod:`tensorsketch.runtime.backends.rides`):
its ``running`` status rides the unit that opens the thread, every later unit reads the
record's version (so a stop request or a steering message written by anybody is noticed
without a read of its own), and the outcome — finished or suspended — rides the unit that
commits the last checkpoint and gives the thread's lease back. Whatever does not ride (a lost
compare-and-set, a failure) is written the usual way by ``Execution``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tensorsketch.errors import LeaseLostError
from tensorsketch.runs.records import now
from tensorsketch.runtime.backends.rides import RecordRide, RideResult, RideUnit
from tensorsketch.runtime.backends.runs import RunRecord, ThreadHead

if TYPE_CHECKING:
    from tensorsketch.runs.folding import Folding
    from tensorsketch.runs.state import RunnerState

__all__ = ["Change", "RunRider"]

#: A compare-and-set change of a record (``None``: leave it as it is).
Change = Callable[[RunRecord], RunRecord | None]


class RunRider:
    """The rider of one segment of one run.

    :param known: the record as this runner last stored or read it (the compare-and-set
        base of every write that rides).
    :param start: the change that moves the run to ``running``, to ride the thread's opening
        (``None``: the segment already stored it).
    :param guess: where the thread stood when ``start`` was computed; the opening reads where
        it really stood, and a difference is corrected before anything runs.
    :param outcome: the record that stores the run's outcome, from its final state and the
        known record (``None``: none rides, the record having moved on).
    :param started: what ``start`` made of ``known`` already (the caller checked that it
        applies): the opening rides it as long as ``known`` is still that record.
    :param folding: a folded submit (:mod:`tensorsketch.runs.folding`): ``known`` is not
        stored yet, and the opening inserts it.
    """

    def __init__(
        self,
        state: RunnerState,
        known: RunRecord,
        *,
        start: Change | None = None,
        guess: ThreadHead | None = None,
        outcome: Callable[[Any, RunRecord], RunRecord | None] | None = None,
        started: RunRecord | None = None,
        folding: Folding | None = None,
    ) -> None:
        self.state = state
        self.run_id = known.run_id
        #: The thread whose commits the rides travel in (an attribute: the journal asks).
        self.thread_id = known.thread_id
        self.known = known
        self.start = start
        self.guess = guess
        self.outcome = outcome
        self._started_from = known if started is not None else None
        self._started_write = started
        self._folding = folding
        #: Somebody else wrote the record since :attr:`known` (read it before trusting it).
        self.changed = False
        #: The outcome as it rode the last commit (``None``: it did not ride).
        self.ended: RunRecord | None = None

    # -- the engine's side --------------------------------------------------------------------

    def ride(self, unit: RideUnit, ending: Callable[[], Any] | None = None) -> RecordRide:
        write = None
        if unit == "open" and self.start is not None:
            known = self.known
            write = self._started_write if known is self._started_from else self.start(known)
        # A changed record's outcome is read and written the usual way.
        elif unit == "final" and ending is not None and self.outcome and not self.changed:
            try:
                final_state = ending()
            except Exception:  # the run's end raises it again, where it belongs
                pass
            else:
                write = self.outcome(final_state, self.known)
        if write is not None:
            known = self.known
            # The runner's own changes build their write from the known record and stamp
            # it as they build it (the running write as the segment begins, the outcome
            # right here): such a write rides as it is, not copied once more to stamp it.
            if write.version != known.version or write.updated_at <= known.updated_at:
                write = write.replace(version=known.version, updated_at=now())
        if unit == "open" and self._folding is not None:
            ride = self._folding.ride = RecordRide(self.run_id, write, insert=self.known)
            self._folding = None  # a second opening (a retry) finds the record stored
            return ride
        return RecordRide(self.run_id, write)

    async def rode(
        self, ride: RecordRide, result: RideResult, head: ThreadHead | None = None
    ) -> None:
        if ride.insert is not None:  # a folded submit's: stored, answer it first
            folding = self.state.folds.get(self.run_id)
            if folding is not None:
                folding.opened = True
            if folding is not None and not folding.settle(self.state):
                backend = type(self.state.backend).__name__
                msg = (
                    f"{backend}.open_thread did not store the run its ride inserts "
                    "(`ride.insert`): implement it, or set `folds_submits = False` on the "
                    "backend's class."
                )
                raise RuntimeError(msg)
        stored = result.stored
        if stored is not None:
            self.known = stored
            self.changed = False
            if stored.status != "running":
                self.ended = stored
            else:
                self.state.notify(stored)
        elif result.version != self.known.version:
            self.changed = True
        if head is not None and self.start is not None:
            last = head[1]
            if stored is not None and (stored.base_checkpoint, stored.first_seq) == (
                head[0] or "",
                0 if last is None else last + 1,
            ):
                self.start = None  # it rode, and the thread stood where it was guessed to
            else:
                await self._started(stored, head)

    async def _started(self, stored: RunRecord | None, head: ThreadHead) -> None:
        """After the opening: the ``running`` write the slow way if it lost, and the
        thread's head corrected if the guess was wrong."""
        start, self.start = self.start, None
        assert start is not None
        store = self.state.store
        if stored is None:
            stored = await store.transition(self.run_id, start, durable=False)
            if stored is None:
                msg = f"run {self.run_id!r} was stopped or taken over before it started."
                raise LeaseLostError(msg)
            self.known, self.changed = stored, False
            self.state.notify(stored)
        last = head[1]
        actual = (head[0] or "", 0 if last is None else last + 1)
        if (stored.base_checkpoint, stored.first_seq) != actual:

            def correct(current: RunRecord) -> RunRecord | None:
                if current.status != "running":
                    return None
                return current.replace(base_checkpoint=actual[0], first_seq=actual[1])

            fixed = await store.transition(
                self.run_id, correct, owner=self.state.owner, known=self.known, durable=False
            )
            if fixed is not None:
                self.known, self.changed = fixed, False

    # -- the runner's side --------------------------------------------------------------------

    async def current(self) -> RunRecord | None:
        """The record: :attr:`known` unless somebody else wrote it since, else read."""
        if not self.changed:
            return self.known
        record = await self.state.store.get(self.run_id)
        if record is not None:
            self.known, self.changed = record, False
        return record

    def renewed(self, lease_expires_at: float) -> None:
        """This runner renewed the run's lease (a write that bumps the version by one): the
        known record follows, so the renewal is not taken for somebody else's write. Were
        somebody else's write in between too, the next unit's version read still tells."""
        known = self.known
        self.known = known.replace(version=known.version + 1, lease_expires_at=lease_expires_at)

    def noticed(self, record: RunRecord) -> None:
        """A record of this run stored in this process (steering, a stop request, a
        cancel): a version other than the known one means the known one is stale."""
        if record.version != self.known.version:
            self.changed = True
