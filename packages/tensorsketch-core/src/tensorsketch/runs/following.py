"""``Follower``: how ``AsyncRunner.events`` waits between two looks at a run's stored events.

A run this process executes tells its followers when it moves: it commits events (the
journal's ``on_events`` hook, see ``RunnerState.events_committed``; a segment's last commit
as the segment ends), it goes back to wait its turn, or its task ends. Its followers wait for
that signal instead of polling the store, and read right after each commit. Any other run
(executed elsewhere, or waiting here for its turn on its thread) is polled, as
``CompiledGraph.replay`` does.
"""

from __future__ import annotations

import asyncio
import contextlib

from tensorsketch.runs.state import RunnerState, Settled
from tensorsketch.runtime.backends.runs import TERMINAL, RunRecord

__all__ = ["Follower"]


class Follower:
    """One follower of one run: the ``until``, ``wait`` and ``quiet`` of its replay."""

    __slots__ = ("armed", "ended", "run_id", "state", "watched")

    def __init__(self, state: RunnerState, run_id: str) -> None:
        self.state = state
        self.run_id = run_id
        #: The signal it waits on, armed before each look at the events: a commit that
        #: lands while a look is under way is not missed.
        self.armed: Settled | None = None
        #: The run's commits woke its followers as it was armed (it held a slot here).
        self.watched = False
        #: The record the run's task ended with here, as it woke the follower.
        self.ended: RunRecord | None = None

    def arm(self) -> None:
        """Arm the signal for the next look (none for a run without a task here)."""
        state, run_id = self.state, self.run_id
        if run_id in state.tasks:
            self.armed = state.moved.setdefault(run_id, Settled())
            self.watched = run_id in state.committing
        else:
            self.armed, self.watched = None, False

    def quiet(self) -> bool:
        """Nothing was committed since the last look began: it was armed while every
        commit of the run's events wakes it, and nothing has woken it since."""
        armed = self.armed
        return self.watched and armed is not None and not armed.is_set()

    async def settled(self) -> bool:
        """Whether the run stopped moving. One executing here has not until its task ends
        (as for ``await_run``): its followers' looks read nothing but the events. One whose
        task just ended here in a final status is not read back either."""
        state, run_id = self.state, self.run_id
        if run_id in state.tasks:
            return False
        armed = self.armed  # set as the task ended, maybe during the look just made
        ended = armed.record if armed is not None and armed.record is not None else self.ended
        if ended is not None and ended.status in TERMINAL:
            return True
        current = await state.store.get(run_id)
        return current is None or state.settled(current)

    async def wait(self, delay: float) -> bool:
        """Wait before the next look; return whether the run moved. A run waiting here for
        a slot writes nothing until it takes one, and one holding a slot wakes its
        followers at each commit of its events: either way the wait is for the signal (or
        the task's end), with nothing read in between. Any other run is polled (one between
        its turns here, with the signal cutting the wait short)."""
        state, run_id = self.state, self.run_id
        if run_id not in state.tasks:
            await asyncio.sleep(delay)
            self.arm()
            return False
        if self.armed is None:
            self.arm()
        moved = self.armed
        assert moved is not None
        if not moved.is_set():
            if run_id in state.for_slot or run_id in state.committing:
                await moved.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    # asyncio.timeout, not wait_for (see Loops._timers_forever)
                    async with asyncio.timeout(delay):
                        await moved.wait()
        if moved.record is not None:
            self.ended = moved.record
        self.arm()  # for the next look
        return moved.is_set()
