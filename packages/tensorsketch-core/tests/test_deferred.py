"""``add(Node, defer=True)``: a node held back until nothing else is left to run, so a reduce
after branches of uneven length runs once, with every branch's writes.

Mirrors LangGraph's deferred-node test ``test_in_one_fan_out_state_graph_defer_node``
(libs/langgraph/tests/test_pregel.py, and its async twin in test_pregel_async.py): ported
below under that name; the tests before it check the same idea on smaller graphs.
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


# -- LangGraph's test_in_one_fan_out_state_graph_defer_node, ported -----------------------------


def _sorted_add(old: list[str], new: list[str]) -> list[str]:
    return sorted(old + new)


class Docs(Schema):
    query: str = ""
    answer: str = ""
    docs: Annotated[list[str], Reducer(_sorted_add)] = []


class RewriteQuery(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        query: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(query=f"query: {inp.query}")


class AnalyzerOne(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        query: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(query=f"analyzed: {inp.query}")


def _retriever(found: list[str]) -> type[Node]:
    class Retriever(Node):
        class Out(Schema):
            docs: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(docs=found)

    return Retriever


class Qa(Node):
    class In(Schema):
        docs: list[str]

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(answer=",".join(inp.docs))


def _fan_out(use_waiting_edge: bool, **compile_options: Any) -> Any:
    g = Graph(Docs).add(RewriteQuery, name="rewrite_query").add(AnalyzerOne, name="analyzer_one")
    g.add(_retriever(["doc1", "doc2"]), name="retriever_one")
    g.add(_retriever(["doc3", "doc4"]), name="retriever_two")
    g.add(Qa, name="qa", defer=True)
    g.edge(START, "rewrite_query").edge("rewrite_query", "retriever_one")
    g.edge("retriever_one", "analyzer_one").edge("rewrite_query", "retriever_two")
    if use_waiting_edge:
        g.edge(["retriever_one", "retriever_two"], "qa")
    else:
        g.edge("retriever_one", "qa").edge("retriever_two", "qa")
    return g.edge("qa", END).compile(**compile_options)


@pytest.mark.parametrize("use_waiting_edge", [True, False])
async def test_in_one_fan_out_state_graph_defer_node(use_waiting_edge: bool) -> None:
    """LangGraph's ``test_in_one_fan_out_state_graph_defer_node`` (test_pregel.py): ``qa`` is
    deferred, so it waits for ``analyzer_one`` (one step longer than the retrievers) and runs
    once with every doc; with a breakpoint after ``analyzer_one`` it runs on the resume; with
    one before ``qa``, a state update (``doc5``) made there is in its answer."""
    question = {"query": "what is weather in sf"}
    out = await _fan_out(use_waiting_edge).invoke(question)
    assert out.model_dump() == {
        "query": "analyzed: query: what is weather in sf",
        "docs": ["doc1", "doc2", "doc3", "doc4"],
        "answer": "doc1,doc2,doc3,doc4",
    }
    steps = [
        (e.step, e.node)
        async for e in _fan_out(use_waiting_edge).stream(question)
        if e.type == "node_start"
    ]
    assert steps == [
        (0, "rewrite_query"),
        (1, "retriever_one"),
        (1, "retriever_two"),
        (2, "analyzer_one"),
        (3, "qa"),  # held one step past the retrievers that feed it
    ]

    backend = InMemoryBackend()
    after = _fan_out(use_waiting_edge, interrupt_after=["analyzer_one"])
    stopped = await after.invoke(question, thread_id="1", backend=backend)
    assert stopped.answer == ""  # stopped after analyzer_one: qa has not run
    resumed = await after.invoke(thread_id="1", backend=backend)
    assert resumed.answer == "doc1,doc2,doc3,doc4"

    before = _fan_out(use_waiting_edge, interrupt_before=["qa"])
    stopped = await before.invoke(question, thread_id="2", backend=backend)
    assert stopped.query == "analyzed: query: what is weather in sf" and stopped.answer == ""
    await before.aupdate_state("2", backend, {"docs": ["doc5"]})
    resumed = await before.invoke(thread_id="2", backend=backend)
    assert resumed.docs == ["doc1", "doc2", "doc3", "doc4", "doc5"]
    assert resumed.answer == "doc1,doc2,doc3,doc4,doc5"
