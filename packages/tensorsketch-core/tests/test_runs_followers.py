"""A follower of a run executing in its own process (``AsyncRunner.events``) is woken by each
commit of the run's events: it reads right after the commit and not at all in between, and
sees the same events, in the same order, to the same end as a reader of the stored log."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tensorsketch.constants import END, START
from tensorsketch.context import Context
from tensorsketch.events import Event
from tensorsketch.graph import Graph
from tensorsketch.node import Node
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runs import AsyncRunner, RunRecord
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.schema import Schema


class Laps(Schema):
    n: int = 0


#: Set by the test's follower as it sees the barrier (``values``) of superstep ``k`` (from 0);
#: the node of superstep ``k + 1`` waits for it, so the follower must get each superstep's events
#: while the run is held right after that superstep's commit.
SEEN: dict[int, asyncio.Event] = {}
#: The first node waits on it while the test watches the follower's reads.
HOLD: dict[str, asyncio.Event] = {}


def _lap(name: str) -> type[Node]:
    class Lap(Node):
        In = Out = Laps

        async def run(self, ctx: Context, inp: Laps) -> Laps:
            if inp.n == 0:
                HOLD["entered"].set()
                await HOLD["open"].wait()
            else:
                await SEEN[inp.n - 1].wait()  # the follower saw the barrier before this one
            return Laps(n=inp.n + 1)

    Lap.__name__ = Lap.__qualname__ = name
    return Lap


def laps_graph() -> CompiledGraph[Laps]:
    """Three supersteps in a row: ``a -> b -> c``."""
    g = Graph(Laps, name="laps")
    names = ("a", "b", "c")
    for name in names:
        g.add(_lap(name))
    g.edge(START, "a")
    for one, two in itertools.pairwise(names):
        g.edge(one, two)
    g.edge("c", END)
    return g.compile()


@pytest.fixture(params=["memory", "sqlite"])
async def runner(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncRunner]:
    backend: Backend = (
        InMemoryBackend() if request.param == "memory" else SqliteBackend(tmp_path / "f.db")
    )
    # A poll interval no test outlives: a follower that polled would hang the test.
    async with AsyncRunner(laps_graph(), backend=backend, poll_interval=60.0) as made:
        yield made


def _count_reads(runner: AsyncRunner, reads: list[str], looked: asyncio.Event) -> None:
    """Note every read of the events (``events``, setting ``looked``) and of a record
    (``record``)."""
    read_events, store_get = runner.backend.read_events, runner.store.get

    async def counted_events(thread_id: str, since: int = 0) -> Any:
        reads.append("events")
        looked.set()
        return await read_events(thread_id, since)

    async def counted_get(run_id: str) -> RunRecord | None:
        reads.append("record")
        return await store_get(run_id)

    runner.backend.read_events = counted_events  # type: ignore[method-assign]
    runner.store.get = counted_get  # type: ignore[method-assign]


async def _follow(runner: AsyncRunner, run_id: str, seen: list[Event]) -> None:
    async for event in runner.events(run_id):
        seen.append(event)
        if event.type == "values" and not event.namespace and event.step in SEEN:
            SEEN[event.step].set()


async def test_a_follower_reads_right_after_each_commit_and_not_in_between(
    runner: AsyncRunner,
) -> None:
    """Each superstep waits for the follower to have seen the one before: with a poll
    interval of a minute, only the commit's own wake gets it there. While the run is held
    (its first superstep running), the follower reads nothing at all."""
    SEEN.clear()
    SEEN.update({0: asyncio.Event(), 1: asyncio.Event()})
    HOLD.update(entered=asyncio.Event(), open=asyncio.Event())
    reads: list[str] = []
    seen: list[Event] = []
    try:
        record = await runner.submit({"n": 0})
        await asyncio.wait_for(HOLD["entered"].wait(), 30)
        looked = asyncio.Event()
        _count_reads(runner, reads, looked)
        follower = asyncio.create_task(_follow(runner, record.run_id, seen))
        await asyncio.wait_for(looked.wait(), 30)  # attached: its first read of the log
        await asyncio.sleep(0.3)  # polling from 10 ms, doubling, would read 5 times or more
        held = list(reads)
        HOLD["open"].set()
        await asyncio.wait_for(follower, 30)
    finally:
        HOLD["open"].set()
        for event in SEEN.values():
            event.set()
    assert held == ["record", "events"]  # as it attached; then nothing
    followed = list(reads)
    stored = [e async for e in runner.events(record.run_id, follow=False)]
    assert [(e.seq, e.type) for e in seen] == [(e.seq, e.type) for e in stored]
    assert seen[-1].type == "run_end"
    # Its looks at the log: one as it attached, one per commit of the run's events (three
    # supersteps), and at most three as the run ends (again after the last commit when the
    # run gave its slot back meanwhile, at its task's end, one last look); its record only
    # as it attached (the run's task hands over the record it ended with). No polls.
    assert followed.count("events") <= 1 + 3 + 3
    assert followed.count("record") == 1


async def test_a_follower_of_a_run_executed_elsewhere_is_polled(tmp_path: Path) -> None:
    """Nothing in the follower's process commits that run's events: it polls, and each
    superstep's events still reach it while the run is held after that superstep."""
    SEEN.clear()
    SEEN.update({0: asyncio.Event(), 1: asyncio.Event()})
    HOLD.update(entered=asyncio.Event(), open=asyncio.Event())
    HOLD["open"].set()
    seen: list[Event] = []
    db = tmp_path / "two.db"
    try:
        async with (
            AsyncRunner(laps_graph(), backend=SqliteBackend(db)) as executing,
            AsyncRunner(laps_graph(), backend=SqliteBackend(db), poll_interval=0.05) as other,
        ):
            record = await executing.submit({"n": 0})
            await asyncio.wait_for(_follow(other, record.run_id, seen), 30)
            stored = [e async for e in other.events(record.run_id, follow=False)]
    finally:
        for event in SEEN.values():
            event.set()
    assert [(e.seq, e.type) for e in seen] == [(e.seq, e.type) for e in stored]
    assert seen[-1].type == "run_end"
