"""The crash harness on the stores core ships: SIGKILL at every durable boundary, resume,
and check exactly-once effects and an identical final state.

SQLite runs in child processes that really die (``SIGKILL``); ``InMemoryBackend`` cannot
outlive its process, so its crashes are simulated in-process (the run is abandoned and its
store handle refuses every further call, like a dead process).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tensorsketch.durable.modes import Durability
from tensorsketch.runtime.backends import InMemoryBackend
from tensorsketch.testing.crash import (
    HANDBACK_INPUT,
    HANDBACK_SCENARIO,
    NESTED_SCENARIO,
    POINTS_AT_ONCE,
    SCENARIO_INPUT,
    BackendSpec,
    CrashingBackend,
    CrashReport,
    EffectLedger,
    SimulatedCrash,
    each_point,
    run_crash_matrix,
    run_fanout_crash,
    scenario_graph,
)

EXPECTED_BOUNDARIES = [
    "lease + checkpoint step=0",  # the lease and the input checkpoint, in one transaction
    "effect intent:0:Charge:0:reserve",  # each effect's intent is written before it calls out
    "effect 0:Charge:0:reserve",
    "effect intent:idem:charge-A-17",
    "effect idem:charge-A-17",
    "events 0..3 + checkpoint step=1",  # a superstep's events and checkpoint commit together
    "effect intent:1:Ship#0:0:ship",  # the fan-out, killed after each worker in turn
    "effect 1:Ship#0:0:ship",
    "writes Ship#0",  # a finished worker's writes, kept if a sibling fails or we crash
    "effect intent:1:Ship#1:0:ship",
    "effect 1:Ship#1:0:ship",
    "writes Ship#1",
    "effect intent:1:Ship#2:0:ship",
    "effect 1:Ship#2:0:ship",  # the last worker's writes go with the barrier's checkpoint
    "events 4..10 + checkpoint step=2",
    "effect intent:2:Note:0:notify",
    "effect 2:Note:0:notify",
    "events 11..14 + checkpoint step=3 + release",  # the last write gives the lease back
]


async def test_crash_matrix_in_memory(tmp_path: Path) -> None:
    report = await run_crash_matrix(InMemoryBackend(), tmp_path, lease_ttl=1.0)
    assert report.boundaries == EXPECTED_BOUNDARIES
    assert all(k.killed for k in report.kills)
    report.check()
    assert report.baseline_values["receipts"] == ["ship:book-1", "ship:lamp-1", "ship:mug-1"]


@pytest.mark.slow
async def test_crash_matrix_sqlite_sigkill(tmp_path: Path) -> None:
    spec = BackendSpec("sqlite", {"dsn": str(tmp_path / "store.db")})
    report = await run_crash_matrix(spec, tmp_path / "work", lease_ttl=1.0)
    assert report.boundaries == EXPECTED_BOUNDARIES
    assert [k.n for k in report.kills] == list(range(1, len(EXPECTED_BOUNDARIES) + 1))
    assert all(k.killed for k in report.kills)  # every child really died by SIGKILL
    report.check()
    halfway = report.kills[EXPECTED_BOUNDARIES.index("effect 1:Ship#0:0:ship")]
    assert halfway.counts == report.baseline_counts  # the other two workers ran once, later


#: ``"exit"`` commits the input (with the lease) and the end (with the release), nothing else.
EXIT_CHECKPOINTS = ["lease + checkpoint step=0", "events 0..14 + checkpoint step=3 + release"]


def check_durability_promise(report: CrashReport) -> None:
    """Every kill point resumed exactly-once (``check``), and what the mode promises about
    the checkpoints committed when the process died held (``check`` asserts it per kill
    point; here, that the run really went through the mode)."""
    assert all(k.killed for k in report.kills)
    report.check()
    checkpoints = [b for b in report.boundaries if "checkpoint" in b]
    if report.durability == "exit":
        assert checkpoints == EXIT_CHECKPOINTS
    else:
        assert len(checkpoints) == 4 and report.most_behind <= (report.durability == "async")


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
async def test_crash_matrix_in_memory_in_each_durability_mode(
    tmp_path: Path, durability: Durability
) -> None:
    report = await run_crash_matrix(
        InMemoryBackend(), tmp_path, lease_ttl=1.0, durability=durability
    )
    check_durability_promise(report)


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["async", "exit"])
async def test_crash_matrix_sqlite_sigkill_in_each_durability_mode(
    tmp_path: Path, durability: Durability
) -> None:
    spec = BackendSpec("sqlite", {"dsn": str(tmp_path / "store.db")})
    report = await run_crash_matrix(spec, tmp_path / "work", durability=durability, lease_ttl=1.0)
    check_durability_promise(report)


async def test_the_harness_catches_a_repeated_effect(tmp_path: Path) -> None:
    """A store that forgets recorded effects must fail the check (the harness can fail)."""

    class Forgetful(InMemoryBackend):
        async def lookup_effect(self, thread_id: str, key: str) -> bytes | None:
            return None

        async def lookup_effects(self, thread_id: str, keys: list[str]) -> dict[str, bytes]:
            return {}

    # A generous lease: a ledger hit is a synced SQLite commit, slow on a loaded machine.
    # Kill points: after the first checkpoint, and after the second fan-out worker's effect.
    report = await run_crash_matrix(Forgetful(), tmp_path, lease_ttl=1.0, kill_points=[6, 11])
    with pytest.raises(AssertionError, match="did not run exactly once"):
        report.check()


async def test_crashing_backend_stops_at_its_boundary(tmp_path: Path) -> None:
    store = InMemoryBackend()
    wrapper = CrashingBackend(store, crash_at=5, mode="raise")
    app = scenario_graph(EffectLedger(tmp_path / "ledger.db"))
    with pytest.raises(SimulatedCrash, match="boundary 5"):
        await app.invoke({"order": "o", "items": ["x"]}, thread_id="t", backend=wrapper)
    assert wrapper.boundaries == [
        "lease + checkpoint step=0",
        "effect intent:0:Charge:0:reserve",
        "effect 0:Charge:0:reserve",
        "effect intent:idem:charge-o",
        "effect idem:charge-o",
    ]
    with pytest.raises(SimulatedCrash):  # a dead process writes nothing more
        await wrapper.release_lease("t", "anyone")
    with pytest.raises(ValueError, match="mode"):
        CrashingBackend(store, mode="explode")


async def test_matrix_points_are_checked_a_few_at_a_time_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TS_MATRIX_AT_ONCE", raising=False)  # a developer's own setting
    running: list[int] = []
    most = 0

    async def check(n: int) -> int:
        nonlocal most
        running.append(n)
        most = max(most, len(running))
        for _ in range(3):  # every point that holds a place runs while this one waits
            await asyncio.sleep(0)
        running.remove(n)
        return n * 10

    assert await each_point(range(1, 11), check) == [n * 10 for n in range(1, 11)]
    assert most == POINTS_AT_ONCE > 1
    monkeypatch.setenv("TS_MATRIX_AT_ONCE", "1")
    most = 0
    assert await each_point([3, 1, 2], check) == [30, 10, 20]
    assert most == 1
    monkeypatch.setenv("TS_MATRIX_AT_ONCE", "all")
    with pytest.raises(ValueError, match="TS_MATRIX_AT_ONCE must be a whole number"):
        await each_point([1], check)


async def test_a_failing_matrix_point_stops_the_others_and_raises_its_own_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TS_MATRIX_AT_ONCE", "3")  # point 2 starts while point 1 waits
    started: list[int] = []
    gone: list[int] = []

    async def check(n: int) -> int:
        started.append(n)
        if n == 2:
            raise RuntimeError("point 2 broke")
        try:
            await asyncio.Event().wait()  # never set: only a cancel ends it
        finally:
            gone.append(n)
        return n

    with pytest.raises(RuntimeError, match="point 2 broke"):
        await each_point(range(1, 9), check)
    assert sorted(gone) == sorted(n for n in started if n != 2)  # none left running
    assert len(started) <= 4  # three places, and one freed by the failure: the rest never ran


# -- per-branch commit under a real kill ----------------------------------------------------


async def test_fanout_killed_halfway_resumes_only_unfinished_workers_in_memory() -> None:
    # A 3 s lease: a thousand workers on a loaded 2-core machine can hold the loop past 1 s,
    # and a lapsed lease (not the crash) would then stop the run.
    report = await run_fanout_crash(InMemoryBackend(), tasks=1000, kill_after=500, lease_ttl=3.0)
    assert report.killed and report.final_ok
    # At least 500 finished workers' writes were journaled before the crash (the last batch
    # may hold more: how many finish while a write is in flight depends on the machine's
    # load); none of them runs again, every other worker does.
    assert report.journaled is not None and report.journaled >= 500, report
    assert report.rerun == 1000 - report.journaled, report


@pytest.mark.slow
async def test_fanout_sigkilled_halfway_resumes_only_unfinished_workers_sqlite(
    tmp_path: Path,
) -> None:
    spec = BackendSpec("sqlite", {"dsn": str(tmp_path / "store.db")})
    report = await run_fanout_crash(spec, tasks=1000, kill_after=500)
    assert report.killed and report.final_ok
    # The finished workers journaled before the SIGKILL (>= 500; the last batch's size depends
    # on the load) never run again; the child's count dies with it, so only the bound holds.
    assert 0 < report.rerun <= 500, report


# -- the stall harness: a frozen owner wakes up after another took over --------------------


@pytest.mark.slow
async def test_stall_matrix_sqlite(tmp_path: Path) -> None:
    from tensorsketch.testing.stall import run_stall_matrix

    spec = BackendSpec("sqlite", {"dsn": str(tmp_path / "store.db")})
    report = await run_stall_matrix(spec, tmp_path / "work", lease_ttl=1.0)  # as the others here
    assert len(report.points) == len(report.boundaries) - 1 >= 6
    report.check()


EXPECTED_NESTED_BOUNDARIES = [
    "lease + checkpoint step=0",  # the outer thread, then each child thread as it starts
    "lease + checkpoint step=0",
    "lease + checkpoint step=0",
    *EXPECTED_BOUNDARIES[1:-1],  # the scenario's own boundaries, two levels down
    "events 11..14 + checkpoint step=3 + release",
    "effect 0:Order:0:subgraph",  # the inner child's result, journaled by its parent
    "events 0..19 + checkpoint step=1 + release",
    "effect 0:Middle:0:subgraph",
    "events 0..24 + checkpoint step=1 + release",
]


async def test_crash_matrix_two_subgraph_levels_deep_in_memory(tmp_path: Path) -> None:
    """Every durable boundary of the order scenario run as a subgraph of a subgraph: each
    kill resumes inside the children, every effect runs once, the end state is the same."""
    report = await run_crash_matrix(
        InMemoryBackend(), tmp_path, lease_ttl=1.0, scenario=NESTED_SCENARIO
    )
    assert report.boundaries == EXPECTED_NESTED_BOUNDARIES
    assert all(k.killed for k in report.kills)
    report.check()
    assert report.baseline_values["receipts"] == ["ship:book-1", "ship:lamp-1", "ship:mug-1"]


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["async", "exit"])
async def test_crash_matrix_two_subgraph_levels_deep_in_each_durability_mode(
    tmp_path: Path, durability: Durability
) -> None:
    """The child threads run in their parent's mode: each kill point resumes them without
    repeating an effect, and the mode's promise holds on the run's own thread."""
    report = await run_crash_matrix(
        InMemoryBackend(),
        tmp_path,
        lease_ttl=1.0,
        scenario=NESTED_SCENARIO,
        durability=durability,
    )
    assert all(k.killed for k in report.kills)
    report.check()
    assert report.baseline_values["receipts"] == ["ship:book-1", "ship:lamp-1", "ship:mug-1"]


@pytest.mark.slow
async def test_crash_matrix_two_subgraph_levels_deep_sqlite_sigkill(tmp_path: Path) -> None:
    spec = BackendSpec("sqlite", {"dsn": str(tmp_path / "store.db")})
    # A 1 s lease: opening two nested threads on a loaded machine outlasted 0.5 s at one
    # boundary (a living child lost its lease, twice in CI runs beside other sessions).
    report = await run_crash_matrix(
        spec, tmp_path / "work", scenario=NESTED_SCENARIO, lease_ttl=1.0
    )
    assert report.boundaries == EXPECTED_NESTED_BOUNDARIES
    assert all(k.killed for k in report.kills)  # every child really died by SIGKILL
    report.check()


# -- a child that hands the run back to its parent (Command(graph=Command.PARENT)) ------------


def _check_handback(report: CrashReport) -> None:
    assert all(k.killed for k in report.kills)
    report.check()  # every effect once, the end state the uninterrupted run's
    assert report.baseline_values["receipts"] == [
        "inspect-1:lamp",
        "escalate-1",
        "refund-1 by refunds",
    ]
    assert report.baseline_values["owner"] == "refunds"


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
async def test_crash_matrix_across_a_hand_back_to_the_parent_in_memory(
    tmp_path: Path, durability: Durability
) -> None:
    """Killed at every boundary around a child's Command(graph=Command.PARENT): the resume
    takes the journaled hand-back (or re-derives it from the child's journaled effects) and
    never runs the child past it (its next node would raise)."""
    report = await run_crash_matrix(
        InMemoryBackend(),
        tmp_path,
        lease_ttl=1.0,
        scenario=HANDBACK_SCENARIO,
        input=HANDBACK_INPUT,
        durability=durability,
    )
    # The hand-back, journaled in the parent as the child's result (with async, in the same
    # commit as the next superstep's first intent).
    assert any(b.startswith("effect 0:Team:0:subgraph") for b in report.boundaries)
    _check_handback(report)


@pytest.mark.slow
async def test_crash_matrix_across_a_hand_back_to_the_parent_sqlite_sigkill(
    tmp_path: Path,
) -> None:
    spec = BackendSpec("sqlite", {"dsn": str(tmp_path / "store.db")})
    report = await run_crash_matrix(
        spec, tmp_path / "work", scenario=HANDBACK_SCENARIO, input=HANDBACK_INPUT, lease_ttl=1.0
    )
    _check_handback(report)


async def test_a_resume_after_a_crash_mid_superstep_never_reuses_a_seq(tmp_path: Path) -> None:
    """A superstep's events are stored with its barrier's commit, so a process that dies
    mid-superstep loses those it already streamed live. The resumed run starts past any seq
    they could have taken: a follower that saw them and replays since its last one misses
    none of the resumed run's events, and no number means two events."""
    store = InMemoryBackend()
    store.lease_ttl = 0.3
    # Killed after the fan-out's first worker's effect: superstep 2 had streamed its
    # node_start events live, and only superstep 1's events (0..3) were committed.
    at = EXPECTED_BOUNDARIES.index("effect 1:Ship#0:0:ship")
    dying = CrashingBackend(store, crash_at=at, mode="raise")
    app = scenario_graph(EffectLedger(tmp_path / "ledger.db"))
    seen: list[int] = []
    with pytest.raises(SimulatedCrash):
        async for event in app.stream(SCENARIO_INPUT, thread_id="t", backend=dying):
            seen.append(event.seq)
    stored = [e.seq async for e in app.replay("t", store)]
    assert stored == [0, 1, 2, 3] and max(seen) > 3  # live past the last commit, then lost
    await asyncio.sleep(0.4)  # the dead run's lease lapses
    resumed = [e async for e in app.stream(None, thread_id="t", backend=store)]
    assert resumed[-1].type == "run_end"
    assert min(e.seq for e in resumed) > max(seen)
    later = [e.seq async for e in app.replay("t", store, since=max(seen) + 1)]
    assert later == [e.seq for e in resumed]
    # a thread left cleanly (finished) goes on with the very next seq: no gap
    again = [e async for e in app.stream(SCENARIO_INPUT, thread_id="t", backend=store)]
    assert again[0].seq == resumed[-1].seq + 1
