"""``Graph.map`` and ``Graph.parallel``: map/reduce and side-by-side branches as graph
constructs (issue 44, item 6), beside the in-body ``gather_map`` / ``parallel``."""

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
    GraphValidationError,
    InMemoryBackend,
    Node,
    Reducer,
    Schema,
)
from tensorsketch.runtime.backends.sqlite import SqliteBackend

RAN: list[str] = []


class Docs(Schema):
    docs: list[str] = []
    doc: str = ""
    summaries: Annotated[list[str], Reducer(operator.add)] = []
    report: str = ""


class Plan(Node):
    class In(Schema):
        report: str = ""

    class Out(Schema):
        docs: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(docs=["alpha", "beta", "gamma"])


class Summarize(Node):
    class In(Schema):
        doc: str

    class Out(Schema):
        summaries: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        summary = await ctx.step("summarize", lambda: _ran(f"summary of {inp.doc}"))
        return self.Out(summaries=[summary])


class Combine(Node):
    class In(Schema):
        summaries: list[str]

    class Out(Schema):
        report: str

    async def run(self, ctx: Context, inp: In) -> Out:
        RAN.append("combine")
        return self.Out(report=" | ".join(inp.summaries))


def _ran(text: str) -> str:
    RAN.append(text)
    return text


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def map_graph() -> Graph[Docs]:
    g = Graph(Docs).add(Plan).add(Summarize).add(Combine)
    return g.edge(START, "Plan").map("Plan", "Summarize", over="docs", item="doc", then="Combine")


async def test_map_runs_one_instance_per_element_then_collects_once() -> None:
    app = map_graph().edge("Combine", END).compile()
    events = [e async for e in app.stream({})]
    out = await app.invoke({})
    assert out.report == "summary of alpha | summary of beta | summary of gamma"
    starts = [e.node for e in events if e.type == "node_start"]
    assert starts.count("Summarize") == 3 and starts.count("Combine") == 1
    assert app.structure.branches["Plan"].kind == "map"


async def test_an_empty_list_goes_straight_to_then() -> None:
    class NoDocs(Plan):
        async def run(self, ctx: Context, inp: Plan.In) -> Plan.Out:
            return self.Out(docs=[])

    g = Graph(Docs).add(NoDocs, name="Plan").add(Summarize).add(Combine)
    g.edge(START, "Plan").map("Plan", "Summarize", over="docs", item="doc", then="Combine")
    out = await g.edge("Combine", END).compile().invoke({})
    assert out.report == "" and RAN == ["combine"]


async def test_a_map_from_start_over_the_input_and_to_the_end() -> None:
    g = Graph(Docs).add(Summarize).map(START, "Summarize", over="docs", item="doc")
    out = await g.compile().invoke({"docs": ["x", "y"]})
    assert out.summaries == ["summary of x", "summary of y"]


async def test_a_resumed_map_repeats_no_instances_effect(tmp_path: Path) -> None:
    class Flaky(Combine):
        failed = False

        async def run(self, ctx: Context, inp: Combine.In) -> Combine.Out:
            if not Flaky.failed:
                Flaky.failed = True
                raise RuntimeError("combine crashed")
            return await super().run(ctx, inp)

    g = Graph(Docs).add(Plan).add(Summarize).add(Flaky, name="Combine")
    g.edge(START, "Plan").map("Plan", "Summarize", over="docs", item="doc", then="Combine")
    app = g.edge("Combine", END).compile()
    backend = SqliteBackend(tmp_path / "map.db")
    with pytest.raises(RuntimeError, match="combine crashed"):
        await app.invoke({}, thread_id="t", backend=backend)
    out = await app.invoke(thread_id="t", backend=backend)
    assert out.report.count("summary") == 3
    assert sorted(t for t in RAN if t.startswith("summary")) == [
        "summary of alpha",
        "summary of beta",
        "summary of gamma",
    ]


def test_compile_checks_the_list_field_and_the_item_port() -> None:
    class Numbers(Schema):
        docs: list[int] = []
        doc: str = ""
        summaries: Annotated[list[str], Reducer(operator.add)] = []
        report: str = ""

    g = Graph(Numbers).add(Summarize).map(START, "Summarize", over="docs", item="doc")
    with pytest.raises(GraphValidationError, match=r"elements of Numbers.docs are `int`"):
        g.compile()
    g = Graph(Docs).add(Summarize).map(START, "Summarize", over="report", item="doc")
    with pytest.raises(GraphValidationError, match=r"Docs.report is `str`, not a list"):
        g.compile()
    g = Graph(Docs).add(Summarize).map(START, "Summarize", over="pages", item="doc")
    with pytest.raises(GraphValidationError, match="Docs has no field 'pages'"):
        g.compile()
    g = Graph(Docs).add(Summarize).map(START, "Summarize", over="docs", item="text")
    with pytest.raises(GraphValidationError, match=r"Summarize\.In has no port 'text'"):
        g.compile()
    with pytest.raises(TypeError, match="`over` as a non-empty name"):
        Graph(Docs).map(START, "Summarize", over="", item="doc")


class Trip(Schema):
    city: str
    parts: Annotated[list[str], Reducer(operator.add)] = []
    plan: str = ""


def _part(name: str) -> type[Node]:
    class Part(Node):
        class In(Schema):
            city: str

        class Out(Schema):
            parts: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(parts=[f"{name} in {inp.city}"])

    return Part


class Assemble(Node):
    class In(Schema):
        parts: list[str]

    class Out(Schema):
        plan: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(plan="; ".join(inp.parts))


async def test_parallel_runs_the_branches_side_by_side_then_joins_once() -> None:
    g = Graph(Trip)
    for name in ("Flights", "Hotels", "Weather"):
        g.add(_part(name), name=name)
    g.add(Assemble).parallel(START, ["Flights", "Hotels", "Weather"], then="Assemble")
    app = g.edge("Assemble", END).compile()
    events = [e async for e in app.stream({"city": "Lisbon"})]
    steps = {e.node: e.step for e in events if e.type == "node_start"}
    assert steps["Flights"] == steps["Hotels"] == steps["Weather"] < steps["Assemble"]
    out = await app.invoke({"city": "Lisbon"}, thread_id="p", backend=InMemoryBackend())
    assert out.plan == "Flights in Lisbon; Hotels in Lisbon; Weather in Lisbon"
    assert app.structure.joins == ((("Flights", "Hotels", "Weather"), "Assemble"),)


def test_parallel_needs_two_branches() -> None:
    with pytest.raises(TypeError, match="at least two node names"):
        Graph(Trip).parallel(START, ["Flights"])
    with pytest.raises(TypeError, match="at least two node names"):
        Graph(Trip).parallel(START, "Flights")  # type: ignore[arg-type]
