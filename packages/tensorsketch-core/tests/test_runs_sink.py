"""The runner drives a run through a sink, not a stream: the run's events reach its stop check
as they are emitted (no queue between them), are stored as a streamed run's are, and a stop
asked for during a superstep takes effect before any node of the next one starts (two nodes
run in it here, in parallel tasks)."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import pytest

from tensorsketch.channels import Reducer
from tensorsketch.constants import END, START
from tensorsketch.context import Context
from tensorsketch.graph import Graph
from tensorsketch.node import Node
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.schema import Schema


class Steps(Schema):
    tag: str = ""
    done: Annotated[list[str], Reducer(operator.add)] = []


#: Held by the test: the first node waits on it (the stop is asked for meanwhile).
GATE: dict[str, asyncio.Event] = {}
#: The runs whose second or third node started, in order.
STARTED_SECOND: list[str] = []


class _Tag(Schema):
    tag: str


class _Done(Schema):
    done: list[str]


class First(Node):
    """Waits for the test's gate (when there is one), then ends its superstep."""

    In, Out = _Tag, _Done

    async def run(self, ctx: Context, inp: _Tag) -> _Done:
        gate = GATE.get(inp.tag)
        if gate is not None:
            GATE[inp.tag + ":entered"].set()
            await gate.wait()
        return _Done(done=[f"{inp.tag}:first"])


class Second(Node):
    """Notes that it started before anything else (before its first await)."""

    In, Out = _Tag, _Done

    async def run(self, ctx: Context, inp: _Tag) -> _Done:
        STARTED_SECOND.append(ctx.run_id or "")
        await asyncio.sleep(0)
        return _Done(done=[f"{inp.tag}:{ctx.node.lower()}"])


class Third(Second):
    """Runs beside :class:`Second` (a parallel superstep)."""


def _graph() -> CompiledGraph[Steps]:
    g = Graph(Steps, name="two_steps")
    g.add(First)
    g.add(Second)
    g.add(Third)
    g.edge(START, "First")
    g.edge("First", "Second")
    g.edge("First", "Third")
    g.edge("Second", END)
    g.edge("Third", END)
    return g.compile()


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "memory":
        return InMemoryBackend()
    return SqliteBackend(tmp_path / "runs.db")


@pytest.fixture
async def runner(backend: Backend) -> AsyncIterator[AsyncRunner]:
    made = AsyncRunner(_graph(), backend=backend, poll_interval=0.05)
    yield made
    await made.aclose()


def _comparable(event: Any) -> dict[str, Any]:
    shown = event.to_dict()
    for key in ("run_id", "thread_id", "ts"):
        shown.pop(key, None)
    return shown


async def test_a_runner_run_stores_the_events_a_streamed_run_does(
    runner: AsyncRunner, backend: Backend
) -> None:
    graph = runner.graph
    streamed = [
        _comparable(e)
        async for e in graph.stream({"tag": "x"}, thread_id="t-stream", backend=backend)
    ]
    record = await runner.submit({"tag": "x"}, thread_id="t-runner")
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded"
    stored_stream = [_comparable(e) async for e in graph.replay("t-stream", backend)]
    stored_runner = [_comparable(e) async for e in graph.replay("t-runner", backend)]
    assert stored_runner == stored_stream == streamed
    assert [e["seq"] for e in stored_runner] == list(range(len(stored_runner)))
    # and what a follower of the run reads is those rows
    followed = [_comparable(e) async for e in runner.events(record.run_id, follow=False)]
    assert followed == stored_runner


async def test_a_runner_run_hands_its_events_over_no_queue(
    runner: AsyncRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    gets: list[object] = []
    original = asyncio.Queue.get

    async def counted(self: asyncio.Queue[Any]) -> Any:
        gets.append(self)
        return await original(self)

    monkeypatch.setattr(asyncio.Queue, "get", counted)
    record = await runner.submit({"tag": "q"}, thread_id="t-queue")
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded"
    events = [e async for e in runner.events(record.run_id, follow=False)]
    assert [e.type for e in events].count("node_start") == 3
    assert gets == []  # a streamed run takes every one of its events off a queue


async def test_a_stopped_run_starts_no_node_of_the_next_superstep(runner: AsyncRunner) -> None:
    STARTED_SECOND.clear()
    GATE["a"], GATE["a:entered"] = asyncio.Event(), asyncio.Event()
    try:
        first = await runner.submit({"tag": "a"}, thread_id="t-stop")
        await asyncio.wait_for(GATE["a:entered"].wait(), 30)
        later = await runner.submit(
            {"tag": "b"}, thread_id="t-stop", multitask_strategy="interrupt"
        )
        GATE["a"].set()
        stopped = await runner.await_run(first.run_id, timeout=30)
        assert stopped.status == "cancelled"
        assert stopped.error is not None and stopped.error["type"] == "Interrupted"
        done = await runner.await_run(later.run_id, timeout=30)
        assert done.status == "succeeded"
    finally:
        GATE.clear()
    # The stopped run's first superstep was checkpointed (interrupt keeps it); its second
    # never began: the stop check ran as the run emitted the node's start, before its body.
    assert first.run_id not in STARTED_SECOND
    assert [later.run_id] * 2 == STARTED_SECOND
    state = await runner.graph.aget_state("t-stop", runner.backend)
    assert state is not None
    # (the later input continues the thread from that checkpoint, whose plan is the two)
    assert sorted(state.done) == ["a:first", "b:second", "b:third"]
    events = [e async for e in runner.events(first.run_id, follow=False)]
    mine = [(e.type, e.node) for e in events if e.run_id == first.run_id]
    assert ("node_start", "Second") in mine  # emitted (and stored), then stopped
    assert ("node_end", "Second") not in mine
    assert ("node_end", "Third") not in mine
