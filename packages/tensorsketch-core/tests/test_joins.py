"""Wait-for-all joins (``edge(["A", "B"], "C")``, ``[a, b] >> c``): semantics, compile errors,
and durability (interrupt, crash, fork, ``update_state`` between the branches) on the in-memory
and SQLite stores.

Tests named ``test_langgraph_*`` are LangGraph's waiting-edge tests
(``libs/langgraph/tests/test_pregel.py``), ported: each comment names the test it mirrors,
reduced to the behaviour TensorSketch shares.
"""

from __future__ import annotations

import asyncio
import json
import operator
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest

from tensorsketch import END, START, Context, Graph, InMemoryBackend, Node, Reducer, Schema, Send
from tensorsketch.errors import CheckpointDecodeError, GraphValidationError
from tensorsketch.interrupts import run_info
from tensorsketch.joins import JoinState
from tensorsketch.runtime.backends.base import Backend, StoredCheckpoint
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.testing.crash import CrashingBackend, SimulatedCrash


class Log(Schema):
    log: Annotated[list[str], Reducer(operator.add)] = []
    rounds: int = 1
    skip: str = ""


def emit(name: str, ran: list[str] | None = None) -> type[Node]:
    """A node that appends its name to ``log`` (and to ``ran``, counting real executions)."""

    class Emit(Node):
        class Out(Schema):
            log: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            if ran is not None:
                ran.append(name)
            return self.Out(log=[name])

    Emit.__name__ = Emit.__qualname__ = name
    return Emit


def uneven(ran: list[str] | None = None, **options: Any) -> Any:
    """START -> A and START -> B -> B2 -> B3; join [A, B3] -> C -> END."""
    g = Graph(Log)
    for name in ("A", "B", "B2", "B3", "C"):
        g.add(emit(name, ran))
    g.edge(START, "A").edge(START, "B").edge("B", "B2").edge("B2", "B3")
    return g.edge(["A", "B3"], "C").edge("C", END).compile(**options)


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "memory":
        yield InMemoryBackend()
    else:
        yield SqliteBackend(tmp_path / "store.db")


# -- semantics ----------------------------------------------------------------------------------


async def test_a_join_waits_for_the_longer_branch_and_runs_once() -> None:
    out = await uneven().invoke({})
    assert out.log == ["A", "B", "B2", "B3", "C"]


async def test_plain_edges_into_one_node_run_it_per_superstep_a_join_once() -> None:
    """The behaviour a join replaces: two plain edges run C once per superstep reaching it."""
    g = Graph(Log)
    for name in ("A", "B", "B2", "C"):
        g.add(emit(name))
    g.edge(START, "A").edge(START, "B").edge("B", "B2")
    edges = g.edge("A", "C").edge("B2", "C").edge("C", END).compile()
    assert (await edges.invoke({})).log == ["A", "B", "C", "B2", "C"]


async def test_a_join_of_one_superstep_runs_once_like_plain_edges() -> None:
    def fan(join: bool) -> Any:
        g = Graph(Log).add(emit("R")).add(emit("A")).add(emit("B")).add(emit("C"))
        g.edge(START, "R").edge("R", "A").edge("R", "B").edge("C", END)
        if join:
            return g.edge(["A", "B"], "C").compile()
        return g.edge("A", "C").edge("B", "C").compile()

    assert (await fan(True).invoke({})).log == (await fan(False).invoke({})).log
    assert (await fan(True).invoke({})).log == ["R", "A", "B", "C"]


def _again(state: Log) -> Any:
    done = state.log.count("J") >= state.rounds
    return END if done else ["A", "B"]


def looped(ran: list[str] | None = None, **options: Any) -> Any:
    """A and B -> B2 in parallel, join [A, B2] -> J, and J loops back ``rounds`` times."""
    g = Graph(Log)
    for name in ("A", "B", "B2", "J"):
        g.add(emit(name, ran))
    g.edge(START, "A").edge(START, "B").edge("B", "B2").edge(["A", "B2"], "J")
    return g.conditional("J", _again).compile(**options)


async def test_a_join_in_a_loop_fires_once_per_round() -> None:
    out = await looped().invoke({"rounds": 3})
    assert out.log == ["A", "B", "B2", "J"] * 3


async def test_a_source_that_runs_twice_before_the_other_arrives_once() -> None:
    """Arrival is "has run since the join last fired": a source running again adds nothing."""

    def hop(state: Log) -> Any:
        return "A" if state.log.count("A") < 3 else END

    g = Graph(Log).add(emit("A")).add(emit("B")).add(emit("B2")).add(emit("B3")).add(emit("C"))
    g.edge(START, "A").edge(START, "B").edge("B", "B2").edge("B2", "B3")
    app = g.conditional("A", hop).edge(["A", "B3"], "C").compile()
    out = await app.invoke({})
    assert out.log == ["A", "B", "A", "B2", "A", "B3", "C"]


async def test_a_skipped_source_means_the_join_never_fires() -> None:
    def pick(state: Log) -> Any:
        return [n for n in ("A", "B") if n != state.skip]

    g = Graph(Log).add(emit("R")).add(emit("A")).add(emit("B")).add(emit("C"))
    app = g.edge(START, "R").conditional("R", pick).edge(["A", "B"], "C").compile()
    assert (await app.invoke({"skip": "B"})).log == ["R", "A"]
    assert (await app.invoke({})).log == ["R", "A", "B", "C"]


async def test_send_instances_of_a_source_arrive_once() -> None:
    class Item(Node):
        class In(Schema):
            skip: str

        class Out(Schema):
            log: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(log=[f"W{inp.skip}"])

    def sends(state: Log) -> Any:
        return [Send("W", {"skip": str(i)}) for i in range(3)]

    g = Graph(Log).add(emit("R")).add(Item, name="W").add(emit("A")).add(emit("C"))
    g.edge(START, "R").edge(START, "A").conditional("R", sends).edge("C", END)
    out = await g.edge(["W", "A"], "C").compile().invoke({})
    assert out.log == ["R", "A", "W0", "W1", "W2", "C"]


async def test_a_join_target_also_planned_by_a_plain_edge_runs_once() -> None:
    g = Graph(Log).add(emit("A")).add(emit("B")).add(emit("C"))
    g.edge(START, "A").edge(START, "B").edge("A", "C").edge(["A", "B"], "C")
    assert (await g.compile().invoke({})).log == ["A", "B", "C"]


async def test_two_joins_into_one_target_count_separately() -> None:
    g = Graph(Log)
    for name in ("A", "B", "B2", "C"):
        g.add(emit(name))
    g.edge(START, "A").edge(START, "B").edge("B", "B2")
    app = g.edge(["A", "B"], "C").edge(["A", "B2"], "C").compile()
    assert (await app.invoke({})).log == ["A", "B", "B2", "C", "C"]


async def test_the_rshift_join_is_the_edge_join() -> None:
    g = Graph(Log)
    a, b, b2, b3, c = g.nodes(emit("A"), emit("B"), emit("B2"), emit("B3"), emit("C"))
    START >> a
    START >> b >> b2 >> b3
    [a, b3] >> c >> END
    app = g.compile()
    assert app.structure == uneven().structure
    assert app.structure.joins == ((("A", "B3"), "C"),)
    assert (await app.invoke({})).log == ["A", "B", "B2", "B3", "C"]


async def test_a_fan_out_list_followed_by_rshift_joins_back() -> None:
    g = Graph(Log)
    a, b, b2, c = g.nodes(emit("A"), emit("B"), emit("B2"), emit("C"))
    START >> a >> [b2, b] >> c
    assert g.structure.edges == ((START, "A"), ("A", "B2"), ("A", "B"))
    assert g.structure.joins == ((("B2", "B"), "C"),)
    assert (await g.compile().invoke({})).log == ["A", "B2", "B", "C"]


def test_a_one_name_list_is_a_plain_edge_and_a_repeated_join_is_one() -> None:
    g = Graph(Log).add(emit("A")).add(emit("B")).add(emit("C"))
    g.edge(START, "A").edge(["A"], "B").edge(["A", "B"], "C").edge(("B", "A"), "C")
    assert g.structure.edges == ((START, "A"), ("A", "B"))
    assert g.structure.joins == ((("A", "B"), "C"), (("B", "A"), "C"))
    app = g.compile()
    assert [j.sources for j in app._spec.joins] == [("A", "B")]


def test_join_mistakes_are_compile_errors_that_name_the_fix() -> None:
    g = Graph(Log).add(emit("Alpha")).add(emit("Beta")).add(emit("C")).edge(START, "Alpha")
    g.edge([START, "Alpha"], "C")
    g.edge(["Alpha", END], "C")
    g.edge(["Alpha", "Betta"], "C")
    g.edge(["Alpha", "Beta"], "Cee")
    g.edge(["Alpha", "Beta"], END)
    g.edge(["Alpha", "Alpha", "Beta"], "C")
    g.edge([], "C")
    with pytest.raises(GraphValidationError) as caught:
        g.compile()
    text = str(caught.value)
    assert "waits for START" in text and "join their last nodes instead" in text
    assert "waits for END; END can only be a target" in text
    assert "source 'Betta' is not a node — did you mean 'Beta'?" in text
    assert "target 'Cee' is not a node" in text
    assert "joins into END, which does nothing" in text
    assert "lists 'Alpha' 2 times" in text and "list it once" in text
    assert "has no sources" in text
    assert len(caught.value.problems) == 7


def test_join_sources_must_be_names() -> None:
    g = Graph(Log).add(emit("A"))
    with pytest.raises(TypeError, match="a list of node names to wait for"):
        g.edge(["A", 3], "A")  # type: ignore[list-item]
    with pytest.raises(TypeError, match="a list of node names to wait for"):
        g.edge({"A"}, "A")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`>>` with a list needs node handles"):
        ["A", "B"] >> g["A"]  # type: ignore[operator]


# -- durable by construction --------------------------------------------------------------------


async def test_an_interrupt_between_the_branches_keeps_the_arrivals(backend: Backend) -> None:
    ran: list[str] = []
    app = uneven(ran, interrupt_after=["B2"])
    await app.invoke({}, thread_id="t", backend=backend)
    latest = (await app.aget_history("t", backend))[-1]
    assert latest.next == ("B3",)
    assert latest.joins == (JoinState("C", ("A", "B3"), ("A",)),)
    out = await app.invoke(thread_id="t", backend=backend)
    assert out.log == ["A", "B", "B2", "B3", "C"]
    assert ran == ["A", "B", "B2", "B3", "C"]
    done = (await app.aget_history("t", backend))[-1]
    assert done.joins == () and done.next == ()


async def test_a_crash_between_the_branches_resumes_to_the_same_state(tmp_path: Path) -> None:
    live = await uneven().invoke({})
    counting = CrashingBackend(InMemoryBackend())
    await uneven().invoke({}, thread_id="t", backend=counting)
    assert len(counting.boundaries) >= 5
    for crash_at in range(1, len(counting.boundaries) + 1):
        # A short lease, so the crashed owner's lapses soon; long enough that the resumed
        # run, renewing every third of it, keeps it on a loaded machine (50 ms did not).
        store = SqliteBackend(tmp_path / f"crash{crash_at}.db", lease_ttl=0.3)
        store_crash = CrashingBackend(store, crash_at=crash_at, mode="raise")
        with pytest.raises(SimulatedCrash):
            await uneven().invoke({}, thread_id="t", backend=store_crash)
        await asyncio.sleep(0.31)  # the crashed owner's lease lapses
        started = await store.latest_checkpoint("t") is not None
        out = await uneven().invoke(None if started else {}, thread_id="t", backend=store)
        assert out.log == live.log, crash_at
        await store.aclose()


async def test_fork_from_between_the_branches_keeps_the_join(backend: Backend) -> None:
    app = uneven()
    await app.invoke({}, thread_id="t", backend=backend)
    history = await app.aget_history("t", backend)
    mid = next(cp for cp in history if cp.joins)
    assert mid.joins[0].arrived == ("A",)
    out = await app.fork(backend, "t", mid.id, "t2")
    assert out.log == ["A", "B", "B2", "B3", "C"]
    forked = await app.aget_history("t2", backend)
    assert forked[0].source == "fork" and forked[0].joins == mid.joins


async def test_update_state_as_a_source_arrives_at_its_join(backend: Backend) -> None:
    ran: list[str] = []
    app = uneven(ran, interrupt_before=["B3"])
    await app.invoke({}, thread_id="t", backend=backend)
    assert (await app.aget_history("t", backend))[-1].joins[0].arrived == ("A",)
    # B3 done by hand: the join now has both sources, so C runs next.
    await app.aupdate_state("t", backend, {"log": ["B3 by hand"]}, as_node="B3")
    latest = (await app.aget_history("t", backend))[-1]
    assert latest.next == ("C",) and latest.joins == ()
    out = await app.invoke(thread_id="t", backend=backend)
    assert out.log == ["A", "B", "B2", "B3 by hand", "C"]
    assert "B3" not in ran


async def test_update_state_without_as_node_keeps_the_arrivals(backend: Backend) -> None:
    app = uneven(interrupt_before=["B3"])
    await app.invoke({}, thread_id="t", backend=backend)
    edited = await app.aupdate_state("t", backend, {"log": ["note"]})
    assert run_info(edited).suspended
    assert (await app.aget_history("t", backend))[-1].joins[0].arrived == ("A",)
    out = await app.invoke(thread_id="t", backend=backend)
    assert out.log == ["A", "B", "B2", "note", "B3", "C"]


async def test_arrivals_carry_over_to_the_next_invoke_of_a_thread(backend: Backend) -> None:
    """Like LangGraph's barrier channel: what arrived stays until the join fires."""

    def pick(state: Log) -> Any:
        return [n for n in ("A", "B") if n != state.skip]

    g = Graph(Log).add(emit("R")).add(emit("A")).add(emit("B")).add(emit("C"))
    app = g.edge(START, "R").conditional("R", pick).edge(["A", "B"], "C").compile()
    first = await app.invoke({"skip": "B"}, thread_id="t", backend=backend)
    assert first.log == ["R", "A"]
    assert (await app.aget_history("t", backend))[-1].joins[0].arrived == ("A",)
    second = await app.invoke({"skip": "A"}, thread_id="t", backend=backend)
    assert second.log == ["R", "A", "R", "B", "C"]


async def test_a_checkpoint_without_join_state_still_loads(backend: Backend) -> None:
    """A thread written by a graph (or release) without joins resumes under one with them."""
    plain = Graph(Log)
    for name in ("A", "B", "B2", "B3", "C"):
        plain.add(emit(name))
    plain.edge(START, "A").edge(START, "B").edge("B", "B2").edge("B2", "B3")
    old = plain.edge("B3", "C").edge("C", END).compile(interrupt_after=["B"])
    await old.invoke({}, thread_id="t", backend=backend)
    latest = await backend.latest_checkpoint("t")
    assert latest is not None and b'"joins"' not in latest.payload
    out = await uneven().invoke(thread_id="t", backend=backend)
    # A ran before the join existed: it never arrived, so the join does not fire.
    assert out.log == ["A", "B", "B2", "B3"]


async def test_a_malformed_join_record_is_a_decode_error() -> None:
    store = InMemoryBackend()
    app = uneven(interrupt_after=["B2"])
    await app.invoke({}, thread_id="t", backend=store)
    latest = await store.latest_checkpoint("t")
    assert latest is not None
    payload = store.serializer.loads(latest.payload)
    payload["joins"] = [["C", "A"]]
    bad = StoredCheckpoint(
        thread_id="t",
        checkpoint_id="bad",
        parent_id=latest.checkpoint_id,
        step=latest.step + 1,
        created_at=latest.created_at + 1,
        payload=json.dumps({**payload, "base": True, "n": 0}).encode(),
    )
    await store.commit_step("t", bad, [])
    with pytest.raises(CheckpointDecodeError, match="malformed"):
        await app.invoke(thread_id="t", backend=store)


# -- LangGraph's waiting-edge tests, ported ----------------------------------------------------


class Docs(Schema):
    query: str = ""
    answer: str = ""
    docs: Annotated[list[str], Reducer(lambda a, b: sorted(a + b))] = []


def _rewrite(prefix: str) -> type[Node]:
    class Rewrite(Node):
        class In(Schema):
            query: str

        class Out(Schema):
            query: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(query=f"{prefix}: {inp.query}")

    return Rewrite


def _retriever(*docs: str) -> type[Node]:
    class Retrieve(Node):
        class Out(Schema):
            docs: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(docs=list(docs))

    return Retrieve


class QA(Node):
    class In(Schema):
        docs: list[str]

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(answer=",".join(inp.docs))


class Decider(Node):
    async def run(self, ctx: Context, inp: Any) -> Any:
        return None


def _docs_graph() -> Graph[Docs]:
    return (
        Graph(Docs)
        .add(_rewrite("query"), name="rewrite_query")
        .add(_rewrite("analyzed"), name="analyzer_one")
        .add(_retriever("doc1", "doc2"), name="retriever_one")
        .add(_retriever("doc3", "doc4"), name="retriever_two")
    )


def waiting_edge_graph() -> Graph[Docs]:
    return (
        _docs_graph()
        .add(QA, name="qa")
        .edge(START, "rewrite_query")
        .edge("rewrite_query", "analyzer_one")
        .edge("analyzer_one", "retriever_one")
        .edge("rewrite_query", "retriever_two")
        .edge(["retriever_one", "retriever_two"], "qa")
        .edge("qa", END)
    )


async def test_langgraph_in_one_fan_out_state_graph_waiting_edge(backend: Backend) -> None:
    # Mirrors LangGraph tests/test_pregel.py::test_in_one_fan_out_state_graph_waiting_edge:
    # retriever_two finishes a superstep before retriever_one, qa runs once with all docs;
    # then the same with interrupt_after=["retriever_one"] and with interrupt_before=["qa"]
    # plus update_state at the stop.
    app = waiting_edge_graph().compile()
    out = await app.invoke({"query": "what is weather in sf"})
    assert out.query == "analyzed: query: what is weather in sf"
    assert out.docs == ["doc1", "doc2", "doc3", "doc4"]
    assert out.answer == "doc1,doc2,doc3,doc4"
    ends = [e.node async for e in app.stream({"query": "q"}) if e.type == "node_end"]
    assert ends == ["rewrite_query", "analyzer_one", "retriever_two", "retriever_one", "qa"]

    after = waiting_edge_graph().compile(interrupt_after=["retriever_one"])
    stopped = await after.invoke({"query": "what is weather in sf"}, thread_id="1", backend=backend)
    assert run_info(stopped).suspended and stopped.answer == ""
    resumed = await after.invoke(thread_id="1", backend=backend)
    assert resumed.answer == "doc1,doc2,doc3,doc4"

    before = waiting_edge_graph().compile(interrupt_before=["qa"])
    await before.invoke({"query": "what is weather in sf"}, thread_id="2", backend=backend)
    edited = await before.aupdate_state("2", backend, {"docs": ["doc5"]})
    assert edited.docs == ["doc1", "doc2", "doc3", "doc4", "doc5"]
    latest = (await before.aget_history("2", backend))[-1]
    assert latest.next == ("qa",) and latest.source == "update"
    done = await before.invoke(thread_id="2", backend=backend)
    assert done.answer == "doc1,doc2,doc3,doc4,doc5"


async def test_langgraph_in_one_fan_out_state_graph_waiting_edge_via_branch(
    backend: Backend,
) -> None:
    # Mirrors LangGraph tests/test_pregel.py::test_in_one_fan_out_state_graph_waiting_edge_via_
    # branch: one join source is reached through a conditional edge. TensorSketch keeps a
    # node's successors in one place, so the plain edge to analyzer_one is part of the route.
    def then(state: Docs) -> list[str]:
        return ["analyzer_one", "retriever_two"]

    def build() -> Graph[Docs]:
        return (
            _docs_graph()
            .add(QA, name="qa")
            .edge(START, "rewrite_query")
            .conditional("rewrite_query", then)
            .edge("analyzer_one", "retriever_one")
            .edge(["retriever_one", "retriever_two"], "qa")
            .edge("qa", END)
        )

    out = await build().compile().invoke({"query": "what is weather in sf"})
    assert out.answer == "doc1,doc2,doc3,doc4"
    app = build().compile(interrupt_after=["retriever_one"])
    await app.invoke({"query": "what is weather in sf"}, thread_id="1", backend=backend)
    assert (await app.aget_history("1", backend))[-1].next == ("qa",)
    assert (await app.invoke(thread_id="1", backend=backend)).answer == "doc1,doc2,doc3,doc4"


def _decide(state: Docs) -> str:
    return "qa" if state.query.count("analyzed") > 1 else "rewrite_query"


async def test_langgraph_in_one_fan_out_state_graph_waiting_edge_multiple() -> None:
    # Mirrors LangGraph tests/test_pregel.py::test_in_one_fan_out_state_graph_waiting_edge_
    # multiple: the join sits in a loop and fires once per round (twice in all).
    app = (
        _docs_graph()
        .add(Decider, name="decider")
        .add(QA, name="qa")
        .edge(START, "rewrite_query")
        .edge("rewrite_query", "analyzer_one")
        .edge("analyzer_one", "retriever_one")
        .edge("rewrite_query", "retriever_two")
        .edge(["retriever_one", "retriever_two"], "decider")
        .conditional("decider", _decide)
        .edge("qa", END)
        .compile()
    )
    out = await app.invoke({"query": "what is weather in sf"})
    assert out.query == "analyzed: query: analyzed: query: what is weather in sf"
    assert out.docs == ["doc1", "doc1", "doc2", "doc2", "doc3", "doc3", "doc4", "doc4"]
    assert out.answer == "doc1,doc1,doc2,doc2,doc3,doc3,doc4,doc4"
    ends = [e.node async for e in app.stream({"query": "q"}) if e.type == "node_end"]
    one_round = ["rewrite_query", "analyzer_one", "retriever_two", "retriever_one", "decider"]
    assert ends == [*one_round, *one_round, "qa"]


async def test_langgraph_in_one_fan_out_state_graph_waiting_edge_multiple_cond_edge() -> None:
    # Mirrors LangGraph tests/test_pregel.py::test_in_one_fan_out_state_graph_waiting_edge_
    # multiple_cond_edge: as above, with the fan-out done by a path function.
    def picker(state: Docs) -> list[str]:
        return ["analyzer_one", "retriever_two"]

    app = (
        _docs_graph()
        .add(Decider, name="decider")
        .add(QA, name="qa")
        .edge(START, "rewrite_query")
        .conditional("rewrite_query", picker)
        .edge("analyzer_one", "retriever_one")
        .edge(["retriever_one", "retriever_two"], "decider")
        .conditional("decider", _decide)
        .edge("qa", END)
        .compile()
    )
    out = await app.invoke({"query": "what is weather in sf"})
    assert out.answer == "doc1,doc1,doc2,doc2,doc3,doc3,doc4,doc4"


async def test_langgraph_simple_multi_edge() -> None:
    # Mirrors LangGraph tests/test_pregel.py::test_simple_multi_edge: a join whose sources are
    # a node and its own successor (up -> side, join [up, side] -> down).
    class Text(Schema):
        my_key: Annotated[str, Reducer(operator.add)] = ""

    class Quiet(Node):
        async def run(self, ctx: Context, inp: Any) -> Any:
            return None

    class Other(Node):
        class Out(Schema):
            my_key: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(my_key="_more")

    app = (
        Graph(Text)
        .add(Quiet, name="up")
        .add(Quiet, name="side")
        .add(Other, name="other")
        .add(Quiet, name="down")
        .edge(START, "up")
        .edge("up", "side")
        .edge("up", "other")
        .edge(["up", "side"], "down")
        .edge("down", END)
        .compile()
    )
    assert (await app.invoke({"my_key": "my_value"})).my_key == "my_value_more"
    ends = [e.node async for e in app.stream({"my_key": "x"}) if e.type == "node_end"]
    assert ends[0] == "up" and sorted(ends[1:3]) == ["other", "side"] and ends[3:] == ["down"]
