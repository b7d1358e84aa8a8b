"""``add(Node, defer=True)``: a node held back until nothing else is left to run, so a reduce
after branches of uneven length runs once, with every branch's writes.

Mirrors LangGraph's deferred-node tests (``add_node(..., defer=True)``: a node fed by a short
and a long branch runs once, after the long one; ``test_defer``-style map-reduce).
"""

from __future__ import annotations

import operator
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
    Send,
    run_info,
)
from tensorsketch.interrupts import interrupt
from tensorsketch.runtime.backends.sqlite import SqliteBackend


class Uneven(Schema):
    parts: Annotated[list[str], Reducer(operator.add)] = []
    summaries: Annotated[list[str], Reducer(operator.add)] = []


def _part(label: str) -> type[Node]:
    class Part(Node):
        class Out(Schema):
            parts: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(parts=[label])

    return Part


class Summarize(Node):
    class In(Schema):
        parts: list[str]

    class Out(Schema):
        summaries: list[str]

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(summaries=["+".join(inp.parts)])


def uneven(defer: bool) -> Graph[Uneven]:
    g = Graph(Uneven).add(_part("a"), name="A").add(_part("b1"), name="B1")
    g.add(_part("b2"), name="B2").add(Summarize, defer=defer)
    g.edge(START, "A").edge(START, "B1").edge("B1", "B2")
    return g.edge("A", "Summarize").edge("B2", "Summarize").edge("Summarize", END)


async def test_a_deferred_node_runs_once_after_the_longest_branch() -> None:
    eager = await uneven(defer=False).compile().invoke({})
    assert eager.summaries == ["a+b1", "a+b1+b2"]  # without defer: once per arrival
    deferred = await uneven(defer=True).compile().invoke({})
    assert deferred.summaries == ["a+b1+b2"]
    steps = [
        e.step async for e in uneven(defer=True).compile().stream({}) if e.type == "node_start"
    ]
    assert steps == [0, 0, 1, 2]  # A and B1, then B2 (Summarize held), then Summarize


class Fan(Schema):
    items: list[str] = []
    item: str = ""
    done: Annotated[list[str], Reducer(operator.add)] = []
    report: str = ""


async def test_a_deferred_reduce_after_a_fan_out_with_a_slow_worker() -> None:
    class Split(Node):
        async def run(self, ctx: Context, inp: Any) -> None:
            return None

    class Work(Node):
        class In(Schema):
            item: str

        class Out(Schema):
            done: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(done=[inp.item])

    class Slow(Node):
        class Out(Schema):
            done: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(done=["slow"])

    class Report(Node):
        class In(Schema):
            done: list[str]

        class Out(Schema):
            report: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(report=",".join(sorted(inp.done)))

    g = Graph(Fan).add(Split).add(Work).add(Slow).add(Report, defer=True)
    g.edge(START, "Split").edge(START, "Slow")
    g.router("Split", lambda s: [Send("Work", {"item": x}) for x in s.items])
    g.edge("Work", "Report")
    out = await g.compile().invoke({"items": ["x", "y"]})
    assert out.report == "slow,x,y"


@pytest.mark.parametrize("store", ["memory", "sqlite"])
@pytest.mark.parametrize("durability", ["sync", "exit"])
async def test_a_held_node_survives_a_suspension_and_runs_after_the_resume(
    store: str, durability: Any, tmp_path: Path
) -> None:
    """The held node is in the suspension's checkpoint (in every mode, on every store: the
    resume is another process's view of the thread) and runs once after the resume."""

    class Ask(Node):
        class Out(Schema):
            parts: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(parts=[await interrupt(ctx, "b2?")])

    g = Graph(Uneven).add(_part("a"), name="A").add(_part("b1"), name="B1")
    g.add(Ask, name="B2").add(Summarize, defer=True)
    g.edge(START, "A").edge(START, "B1").edge("B1", "B2")
    g.edge("A", "Summarize").edge("B2", "Summarize").edge("Summarize", END)
    app = g.compile()
    backend = InMemoryBackend() if store == "memory" else SqliteBackend(tmp_path / "runs.db")
    out = await app.invoke({}, thread_id="t", backend=backend, durability=durability)
    (pending,) = run_info(out).interrupts
    assert out.summaries == []  # Summarize is held, not run, while B2 waits
    out = await app.invoke(
        thread_id="t", backend=backend, resume={pending.id: "late"}, durability=durability
    )
    assert out.summaries == ["a+b1+late"]
