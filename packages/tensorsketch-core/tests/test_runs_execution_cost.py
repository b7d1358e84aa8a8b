"""What executing a run costs the runner on top of the run itself (issue 49, item 1).

A run submitted to ``AsyncRunner`` executes the same graph an ``invoke`` does, plus what the
runner needs around it: a task, a record moved through its statuses, a stop check per event.
These tests count, with ``sys.setprofile``, the calls the runner's execution code makes around
one run on SQLite (where the record's writes ride the run's commits), so work added per run
for every runner fails here: bindings set without a context manager each, no timer armed
for a run without ``run_timeout``, no record read or copy by an inbox nothing was sent to.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

from tensorsketch.durable.event_rows import read_stored_events
from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.serializers import MsgpackSerializer
from tensorsketch.testing.runs import settle_agent

#: (callee's file, callee's name, caller's file), files as their last two path parts.
Calls = Counter[tuple[str, str, str]]


def _tail(path: str) -> str:
    return "/".join(Path(path).parts[-2:])


async def _one_run(tmp_path: Path, serializer: Any = None, **options: Any) -> Calls:
    """The Python calls made while one run is submitted and awaited (after a warm-up run)."""
    backend = SqliteBackend(str(tmp_path / "runs.db"), serializer=serializer)
    agent = settle_agent()
    calls: Calls = Counter()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_back is not None:
            code = frame.f_code
            calls[
                _tail(code.co_filename), code.co_name, _tail(frame.f_back.f_code.co_filename)
            ] += 1

    async with AsyncRunner(agent, backend=backend, **options) as runner:
        warm = await runner.submit({"query": "settle"}, thread_id="warm")
        assert (await runner.await_run(warm.run_id)).status == "succeeded"
        sys.setprofile(profile)
        try:
            record = await runner.submit({"query": "settle"}, thread_id="counted")
            done = await runner.await_run(record.run_id)
        finally:
            sys.setprofile(None)
    await backend.aclose()
    assert done.status == "succeeded" and done.output is not None
    return calls


def _from(calls: Calls, callee_file: str, caller_file: str, name: str | None = None) -> int:
    return sum(
        n
        for (file, callee, caller), n in calls.items()
        if file == callee_file and caller == caller_file and (name is None or callee == name)
    )


async def test_a_segment_binds_its_run_context_without_context_managers(tmp_path: Path) -> None:
    # The inbox, the pinned assistant and the rider are set and reset directly: no
    # contextlib generator (a handful of calls each) per segment.
    calls = await _one_run(tmp_path)
    assert _from(calls, "python3.11/contextlib.py", "runs/execution.py") == 0
    assert _from(calls, "tensorsketch/steering.py", "runs/execution.py", "bound_inbox") == 0


async def test_a_run_without_run_timeout_arms_no_timer(tmp_path: Path) -> None:
    calls = await _one_run(tmp_path)
    assert _from(calls, "asyncio/timeouts.py", "runs/execution.py", "timeout") == 0
    # With run_timeout, the run is still bounded by one.
    (tmp_path / "timed").mkdir()
    timed = await _one_run(tmp_path / "timed", run_timeout=60.0)
    assert _from(timed, "asyncio/timeouts.py", "runs/execution.py", "timeout") == 1


async def test_a_first_segment_computes_its_running_write_once(tmp_path: Path) -> None:
    # The change moving the run to `running` is planned as the segment begins; the thread's
    # opening carries that very record (the rider does not compute it again).
    calls = await _one_run(tmp_path)
    assert _begins(calls) == 1


async def test_an_inbox_nothing_was_sent_to_reads_nothing(tmp_path: Path) -> None:
    # Every model call asks the run's inbox; with nothing sent and nobody else writing the
    # record, it answers from what the rider knows: no coroutine asked, no list built.
    calls = await _one_run(tmp_path)
    assert _from(calls, "runs/riding.py", "runs/steering.py", "current") == 0
    assert _from(calls, "runs/steering.py", "runs/steering.py", "<listcomp>") == 0
    assert sum(n for (_, name, _), n in calls.items() if name == "pending") == 2


#: The change that moves a run to ``running`` (``Execution._beginning``: a ``_Begin``).
BEGIN = ("runs/execution.py", "__call__")


def _begins(calls: Calls) -> int:
    """Calls of :data:`BEGIN` (the run's event check, also a ``__call__`` there, is the
    engine's: called from ``pregel/loop.py``)."""
    return sum(
        n
        for (file, name, caller), n in calls.items()
        if (file, name) == BEGIN and caller != "pregel/loop.py"
    )


async def test_each_unit_hands_its_ride_to_the_rider_directly(tmp_path: Path) -> None:
    # The journal asks the rider what rides a unit and hands it what the unit saw: one call
    # each way, no journal helper in between (every unit of every run goes through here).
    calls = await _one_run(tmp_path)
    rides = _from(calls, "runs/riding.py", "durable/journal.py", "ride")
    assert rides >= 3  # the opening, the last checkpoint and the units in between
    assert _from(calls, "runs/riding.py", "durable/journal.py", "rode") == rides
    helpers = sum(n for (file, name, _), n in calls.items() if (file, name) in JOURNAL_HELPERS)
    assert helpers == 0


#: What the journal once called around each ride.
JOURNAL_HELPERS = {("durable/journal.py", "_ride"), ("durable/journal.py", "_rode")}


async def test_stamps_and_events_cost_no_python_call_of_their_own(tmp_path: Path) -> None:
    # A record's time stamp is time.time itself; an emitted event goes into the journal's
    # buffer without a journal method per event (a run emits about eight, every one stored).
    calls = await _one_run(tmp_path)
    assert sum(n for (file, name, _), n in calls.items() if (file, name) in PER_STAMP) == 0
    backend = SqliteBackend(str(tmp_path / "runs.db"))
    try:
        stored = await read_stored_events(backend, "counted", 0)
    finally:
        await backend.aclose()
    kinds = [event.type for event in stored]  # all of them still stored, as a stream's are
    assert kinds.count("token") == 1 and kinds[-1] == "run_end", kinds


#: What a stamp or an event once cost: a Python function each.
PER_STAMP = {("runs/records.py", "now"), ("durable/journal.py", "buffer_event")}


async def test_a_complete_only_model_streams_its_reply_without_a_stream_call(
    tmp_path: Path,
) -> None:
    # A runner run streams, so each reply of a model that only implements `complete` becomes
    # one token event: straight from the model call, no stream wrapper in between.
    calls = await _one_run(tmp_path)
    assert (
        _from(calls, "tensorsketch/_modelcall.py", "tensorsketch/_modelcall.py", "_stream_call")
        == 0
    )
    assert (
        _from(
            calls, "tensorsketch/_modelcall.py", "tensorsketch/_modelcall.py", "_complete_as_stream"
        )
        == 2
    )


#: The runner's coroutines between a run's task and the engine (``drive``): each one is
#: resumed at every wait of the run, so one that only passes the run on costs a call per wait.
RUNNER_FRAMES = {
    ("runs/execution.py", "_execute"),
    ("runs/execution.py", "_segment"),
    ("runs/execution.py", "_invoke"),
    ("runs/execution.py", "_invoke_folded"),  # a folded submit's first segment had a frame too
    ("runs/execution.py", "_run_graph"),
    ("pregel/compiled.py", "_invoke_sinking"),
}


async def test_a_runs_task_reaches_the_engine_through_two_frames_of_the_runner(
    tmp_path: Path,
) -> None:
    # The task's coroutine runs the segments' loop itself, and the segment drives the
    # engine from its own frame: every wait of the run resumes two runner frames, not five
    # (a folded submit's first segment included: its fold is checked in the task's frame).
    calls = await _one_run(tmp_path)
    resumes = _from(calls, "runs/execution.py", "asyncio/events.py", "_execute")
    resumes += _from(calls, "runs/execution.py", "runs/execution.py", "_execute")
    frames = sum(n for (file, name, _), n in calls.items() if (file, name) in RUNNER_FRAMES)
    assert resumes >= 3  # the run waits on its store a few times
    assert frames == 2 * resumes, (frames, resumes)
    assert _from(calls, "pregel/driver.py", "runs/execution.py", "drive") >= 1


async def test_a_runs_task_forgets_its_run_as_it_ends_without_a_callback_of_its_own(
    tmp_path: Path,
) -> None:
    # The task drops what the runner held for its run and wakes its awaiter in its own last
    # step: no done callback is scheduled for it (a loop iteration less before await_run
    # returns), and no current_task() is asked for the stop check's task.
    calls = await _one_run(tmp_path)
    assert _from(calls, "runs/execution.py", "asyncio/events.py", "_forget") == 0
    assert _from(calls, "runs/execution.py", "runs/execution.py", "_forget") == 1
    assert _from(calls, "asyncio/tasks.py", "runs/execution.py", "current_task") == 0


async def test_the_stop_check_is_handed_only_the_events_it_acts_on(tmp_path: Path) -> None:
    # It acts on barriers (`values`) and superstep starts (`node_start`); the run's other
    # events are still stored, just not handed to it (a coroutine call each).
    calls = await _one_run(tmp_path)
    checked = _from(calls, "runs/execution.py", "pregel/loop.py", "__call__")
    backend = SqliteBackend(str(tmp_path / "runs.db"))
    try:
        stored = await read_stored_events(backend, "counted", 0)
    finally:
        await backend.aclose()
    acted_on = [e for e in stored if e.type in ("values", "node_start")]
    assert len(stored) > len(acted_on) >= 2
    assert checked == len(acted_on), [e.type for e in stored]
    # Every emitted event is made in `emit` itself; `_event` only for the held `run_end`.
    assert _from(calls, "pregel/loop.py", "pregel/loop.py", "_event") == 1


async def test_a_ride_carries_the_runners_own_writes_without_a_copy(tmp_path: Path) -> None:
    # The running write (planned as the segment begins) and the outcome are built from the
    # record the rider knows and stamped as they are built: they ride as they are.
    calls = await _one_run(tmp_path)
    assert _from(calls, "backends/runs.py", "runs/riding.py", "replace") == 0
    assert _begins(calls) == 1


async def test_a_runs_outcome_is_built_once_for_the_last_commit(tmp_path: Path) -> None:
    # The last commit's ride asks the runner once for the finished record (no change
    # function made only to be called at once).
    calls = await _one_run(tmp_path)
    asked = {
        name: n
        for (file, name, caller), n in calls.items()
        if file == "runs/execution.py" and caller == "runs/riding.py"
    }
    assert asked == {"_end_write": 1}, asked


async def test_a_commits_event_row_is_encoded_without_helper_calls(tmp_path: Path) -> None:
    # Inside the checkpoint's shared encoding already: no null context entered, and the
    # row's checks (one run's consecutive events, a run_end sharing the values' state)
    # inline; what event_rows calls is the serializer (and the row's dataclass).
    calls = await _one_run(tmp_path)
    helpers = {
        (file, name): n
        for (file, name, caller), n in calls.items()
        if caller == "durable/event_rows.py"
        and file not in ("tensorsketch/serializers.py", "<string>")  # <string>: StoredEvent
    }
    assert helpers == {}


class _CountingEmpties(MsgpackSerializer):
    """Counts the encodings of an empty result's journal entry."""

    empties = 0

    def dumps(self, obj: Any) -> bytes:
        if obj == [[]]:
            self.empties += 1
        return super().dumps(obj)


async def test_an_empty_steering_take_is_neither_encoded_nor_journaled(tmp_path: Path) -> None:
    # Each of the run's two model calls asks the inbox, which holds nothing: the take is
    # not journaled (a replay tells it from the model call's entry), so nothing is encoded
    # for it and the thread's journal holds no steering entry.
    serializer = _CountingEmpties()
    calls = await _one_run(tmp_path, serializer)
    assert sum(n for (_, name, _), n in calls.items() if name == "_steered") == 2
    assert serializer.empties == 0
    backend = SqliteBackend(str(tmp_path / "runs.db"))
    try:
        keys = [key for key, _ in await backend.list_effects("counted")]
    finally:
        await backend.aclose()
    assert [key for key in keys if key.endswith(":model")], keys  # the journal is there
    assert not [key for key in keys if key.endswith(":steer")], keys


async def test_the_rider_does_nothing_per_run_beyond_ride_and_rode(tmp_path: Path) -> None:
    # What a plain run asks of its rider: what rides each unit, what the unit saw, and the
    # record at a barrier. The opening's guess was right, the outcome rode, nothing else
    # wrote the record: no helper, no property, no notice of the rider's own write.
    calls = await _one_run(tmp_path)
    asked = {
        name: n
        for (file, name, caller), n in calls.items()
        if file == "runs/riding.py" and caller != "runs/riding.py"
    }
    assert set(asked) <= {"ride", "rode", "current", "__init__"}, asked
    assert not [k for k in calls if k[0] == "runs/riding.py" and k[2] == "runs/riding.py"]


async def test_whether_the_backend_carries_rides_is_asked_until_it_does(tmp_path: Path) -> None:
    # Once the runner saw its backend carry rides (the warm-up run), no run asks again.
    calls = await _one_run(tmp_path)
    assert _from(calls, "runs/execution.py", "runs/execution.py", "_rides") == 0


async def test_an_outcome_filters_no_signals_when_none_are_pending(tmp_path: Path) -> None:
    # The delivered signals are taken out of the record's pending ones: with none pending
    # (most runs) there is nothing to filter, and no generator is run for it.
    calls = await _one_run(tmp_path)
    assert _from(calls, "runs/execution.py", "runs/execution.py", "<genexpr>") == 0


async def test_a_barrier_nobody_else_wrote_at_reads_the_riders_record(tmp_path: Path) -> None:
    # The stop check at a barrier: with the record unchanged since the rider knew it, the
    # known record is it (no coroutine asked for it).
    calls = await _one_run(tmp_path)
    assert _from(calls, "runs/riding.py", "runs/execution.py", "current") == 0


async def test_a_submit_makes_its_record_without_a_copy_or_the_frozen_init(
    tmp_path: Path,
) -> None:
    # The new record is built stamped (as the store stamps it) by RunRecord.new: no copy to
    # stamp it, no frozen __init__ (forty object.__setattr__ calls).
    calls = await _one_run(tmp_path)
    assert _from(calls, "backends/runs.py", "runs/submission.py", "replace") == 0
    assert _from(calls, "<string>", "runs/submission.py", "__init__") == 0


async def test_a_submit_on_a_thread_nobody_else_submits_to_takes_no_lock(
    tmp_path: Path,
) -> None:
    # The per-thread turn of a submit is a dict entry: no asyncio.Lock made, entered, left.
    calls = await _one_run(tmp_path)
    entered = {"__aenter__", "__aexit__", "acquire", "release"}
    locks = [k for k in calls if k[0] == "asyncio/locks.py" and k[2] == "runs/submission.py"]
    assert not [k for k in locks if k[1] in entered]


async def test_whether_the_backend_folds_submits_is_asked_until_it_does(tmp_path: Path) -> None:
    calls = await _one_run(tmp_path)
    assert _from(calls, "runs/submission.py", "runs/submission.py", "_asks_backend") == 0
    assert not [k for k in calls if k[1] == "folds_submits"]
