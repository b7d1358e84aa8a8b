"""``durability="exit"``: what a thread's history holds, exactly (#44 item 4).

LangGraph documents its ``"exit"`` mode as persisting "only when graph execution exits":
successfully, with an error, or at a human-in-the-loop interrupt. TensorSketch keeps that
promise and reads "exits" as every way a run stops that a process lives through: it ends,
suspends, fails, exceeds ``max_steps`` — or is stopped (cancelled, or a runner's stop
request between supersteps), where it commits its last barrier, as ``"sync"`` would have.
Each case below asserts the history checkpoint by checkpoint, on the in-memory store and
SQLite (every store: the conformance suite's durability-mode tests).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest

from tensorsketch import (
    END,
    START,
    Context,
    Graph,
    InMemoryBackend,
    Node,
    Reducer,
    Schema,
    run_info,
)
from tensorsketch.interrupts import interrupt
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.sqlite import SqliteBackend

CALLS: list[str] = []


class Trip(Schema):
    legs: Annotated[list[str], Reducer(operator.add)] = []
    ok: str = ""


class Book(Node):
    class Out(Schema):
        legs: list[str]

    async def run(self, ctx: Context, inp: Schema) -> Any:
        def book() -> str:
            CALLS.append(f"{ctx.thread_id}:{ctx.node}")
            return f"{ctx.node} booked"

        return self.Out(legs=[await ctx.step("book", book)])


class Confirm(Node):
    class Out(Schema):
        ok: str

    async def run(self, ctx: Context, inp: Schema) -> Any:
        return self.Out(ok=await interrupt(ctx, "book the car?"))


class Broken(Node):
    async def run(self, ctx: Context, inp: Schema) -> Any:
        raise RuntimeError("the car desk is down")


def _trip(*middle: tuple[str, type[Node]]) -> Any:
    """``Flight -> Hotel -> <middle...> -> Car``."""
    names = ["Flight", "Hotel", *(name for name, _ in middle), "Car"]
    g = Graph(Trip)
    for name in names:
        node = dict(middle).get(name, Book)
        g.add(node(), name=name)
    g.edge(START, names[0])
    for a, b in itertools.pairwise(names):
        g.edge(a, b)
    return g.edge(names[-1], END).compile()


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    CALLS.clear()
    if request.param == "memory":
        yield InMemoryBackend()
    else:
        yield SqliteBackend(tmp_path / "store.db")


async def _steps(app: Any, thread: str, backend: Backend) -> list[tuple[int, str]]:
    return [(c.step, c.source) for c in await app.aget_history(thread, backend)]


async def test_a_run_that_ends_keeps_its_input_and_its_end(backend: Backend) -> None:
    app = _trip()
    await app.invoke({}, thread_id="t", backend=backend, durability="exit")
    assert await _steps(app, "t", backend) == [(0, "input"), (3, "loop")]
    sync = _trip()
    await sync.invoke({}, thread_id="s", backend=backend, durability="sync")
    assert [s for s, _ in await _steps(sync, "s", backend)] == [0, 1, 2, 3]


async def test_a_suspension_is_committed_and_its_resume_adds_the_end(backend: Backend) -> None:
    app = _trip(("Confirm", Confirm))
    out = await app.invoke({}, thread_id="t", backend=backend, durability="exit")
    (asked,) = run_info(out).interrupts
    assert await _steps(app, "t", backend) == [(0, "input"), (2, "interrupt")]
    state = await app.aget_state("t", backend)
    assert state.legs == ["Flight booked", "Hotel booked"]  # the suspension holds the barriers
    done = await app.invoke(
        thread_id="t", backend=backend, resume={asked.id: "yes"}, durability="exit"
    )
    assert done.legs == ["Flight booked", "Hotel booked", "Car booked"] and done.ok == "yes"
    assert await _steps(app, "t", backend) == [(0, "input"), (2, "interrupt"), (4, "loop")]
    assert sorted(CALLS) == ["t:Car", "t:Flight", "t:Hotel"]


async def test_a_failure_is_committed_with_the_barriers_before_it(backend: Backend) -> None:
    app = _trip(("Broken", Broken))
    with pytest.raises(RuntimeError, match="the car desk is down"):
        await app.invoke({}, thread_id="t", backend=backend, durability="exit")
    assert await _steps(app, "t", backend) == [(0, "input"), (2, "error")]
    state = await app.aget_state("t", backend)
    assert state.legs == ["Flight booked", "Hotel booked"]
    assert run_info(state).status == "failed"


async def test_a_stopped_run_commits_where_it_stopped(backend: Backend) -> None:
    """A consumer that stops reading between supersteps (what a runner does for a stop
    request, or a cancel): the run stops, and "exit" commits its last barrier there — a
    resume goes on from it instead of the input."""
    app = _trip()
    barriers = 0
    stream = app.stream({}, thread_id="t", backend=backend, durability="exit")
    async for event in stream:
        barriers += event.type == "values"
        if barriers == 2 and event.type == "node_start":  # Car started: stop here
            break
    await stream.aclose()
    assert await _steps(app, "t", backend) == [(0, "input"), (2, "loop")]
    state = await app.aget_state("t", backend)
    assert state.legs == ["Flight booked", "Hotel booked"]
    assert run_info(state).status == "pending"
    done = await app.invoke(thread_id="t", backend=backend, durability="exit")
    assert done.legs == ["Flight booked", "Hotel booked", "Car booked"]
    assert await _steps(app, "t", backend) == [(0, "input"), (2, "loop"), (3, "loop")]
    assert CALLS.count("t:Flight") == CALLS.count("t:Hotel") == 1


class Attempts(Schema):
    steps: Annotated[list[str], Reducer(operator.add)] = []
    attempt: int = 0


class FailingNode(Node):
    class In(Schema):
        attempt: int

    class Out(Schema):
        steps: list[str]

    async def run(self, ctx: Context, inp: Any) -> Any:
        if inp.attempt == 1:  # fail on the first attempt, succeed on the retry
            raise RuntimeError("Simulated failure")
        return self.Out(steps=["node1"])


class SecondNode(Node):
    class Out(Schema):
        steps: list[str]

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(steps=["node2"])


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
async def test_langgraph_checkpoint_recovery(backend: Backend, durability: Any) -> None:
    # Mirrors LangGraph tests/test_pregel.py::test_checkpoint_recovery (parametrized over its
    # durability modes): the first attempt fails in node1, the thread keeps the input and
    # says node1 failed; invoking it again with new input retries node1 and goes on. LangGraph
    # counts 6 checkpoints, or 2 with "exit" (error + success); here, with "exit", the input
    # of each invoke and where each stopped: [input, error, input, end].
    g = Graph(Attempts).add(FailingNode, name="node1").add(SecondNode, name="node2")
    app = g.edge(START, "node1").edge("node1", "node2").edge("node2", END).compile()
    with pytest.raises(RuntimeError, match="Simulated failure"):
        await app.invoke(
            {"steps": ["start"], "attempt": 1},
            thread_id="1",
            backend=backend,
            durability=durability,
        )
    state = await app.aget_state("1", backend)
    assert state.model_dump() == {"steps": ["start"], "attempt": 1}  # the input, saved
    info = run_info(state)
    assert info.status == "failed" and info.error is not None
    assert info.error["node"] == "node1" and info.error["message"] == "Simulated failure"
    out = await app.invoke(
        {"steps": [], "attempt": 2}, thread_id="1", backend=backend, durability=durability
    )
    assert out.model_dump() == {"steps": ["start", "node1", "node2"], "attempt": 2}
    sources = [source for _, source in await _steps(app, "1", backend)]
    if durability == "exit":
        assert sources == ["input", "error", "input", "loop"]
    else:
        assert sources == ["input", "error", "input", "loop", "loop"]
    await app.adelete_thread("1", backend)
    assert await app.aget_history("1", backend) == []
