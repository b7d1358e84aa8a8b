"""Checks on the documentation's core examples beyond running them (tests/test_docs_examples.py
runs the blocks themselves, Hello graph and Getting started whole): the typed hole, State &
channels, Nodes & graphs, Execution model, Streaming."""

from __future__ import annotations

import asyncio
from operator import add
from typing import Annotated, Literal

import pytest

from tensorsketch import (
    END,
    START,
    Context,
    Graph,
    GraphRecursionError,
    Hole,
    Node,
    Reducer,
    Router,
    Schema,
    Send,
    Topic,
)

Intent = Literal["billing", "tech", "other"]


class Support(Schema):
    query: str
    intent: Intent = "other"
    answer: str = ""


class Classify(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        intent: Intent

    async def run(self, ctx: Context, inp: In) -> Out:
        q = inp.query.lower()
        if any(w in q for w in ("refund", "charge", "invoice")):
            return self.Out(intent="billing")
        if any(w in q for w in ("error", "crash", "bug")):
            return self.Out(intent="tech")
        return self.Out(intent="other")


def specialist(label: str, prefix: str) -> type[Node]:
    class Specialist(Node):
        class In(Schema):
            query: str

        class Out(Schema):
            answer: str

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(answer=f"{prefix} {inp.query}")

    Specialist.__name__ = label
    return Specialist


Billing = specialist("Billing", "[Billing] Looking into your billing question:")
Tech = specialist("Tech", "[Tech]")
Fallback = specialist("Fallback", "[General]")


def route(state: Support) -> str:
    return {"billing": "Billing", "tech": "Tech"}.get(state.intent, "Fallback")


def test_getting_started_typed_hole_compiles_and_stops_at_run() -> None:
    class HoleBilling(Node):
        class In(Schema):
            query: str

        class Out(Schema):
            answer: str

        async def run(self, ctx: Context, inp: In) -> Out:
            raise Hole("Answer billing questions using the KB tool")

    app = (
        Graph(Support)
        .add(Classify)
        .add(HoleBilling, name="Billing")
        .add(Tech)
        .add(Fallback)
        .edge(START, "Classify")
        .conditional("Classify", route)
        .edge("Billing", END)
        .edge("Tech", END)
        .edge("Fallback", END)
    ).compile()
    assert asyncio.run(app.invoke({"query": "it crashed"})).answer.startswith("[Tech]")
    with pytest.raises(Hole, match="KB tool"):
        asyncio.run(app.invoke({"query": "refund"}))


def test_state_and_channels_declaration() -> None:
    class State(Schema):
        answer: str  # LastValue (the default)
        scratch: Annotated[list[str], Reducer(add)]  # accumulate concurrent + successive writes
        events: Annotated[list[str], Topic()]  # pub/sub append
        count: int = 0  # default → the channel starts at 0

    class Work(Node):
        class In(Schema):
            count: int

        class Out(Schema):
            answer: str
            scratch: list[str]
            events: list[str]

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(answer="done", scratch=["s"], events=["e"])

    app = Graph(State).add(Work).edge(START, "Work").compile()
    out = asyncio.run(app.invoke({"scratch": ["seed"]}))
    assert (out.answer, out.scratch, out.events, out.count) == ("done", ["seed", "s"], ["e"], 0)
    with pytest.raises(ValueError, match="answer"):
        State(scratch=[], events=[])  # `answer` has no default: the schema still says so


def test_nodes_and_graphs_mapping_router_loop_and_arrows() -> None:
    class State(Schema):
        query: str = ""
        intent: str = ""
        answer: str = ""
        score: float = 0.0

    class Classify2(Node):
        class In(Schema):  # input ports  = state fields this node READS
            query: str

        class Out(Schema):  # output ports = state fields this node WRITES
            intent: str

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(intent="billing")

    g = Graph(State).add(Classify2, name="Classify").add(Billing).add(Tech)
    g.edge(START, "Classify")
    g.conditional("Classify", lambda s: s.intent, {"billing": "Billing", "tech": "Tech"})
    g.edge("Billing", END).edge("Tech", END)
    assert asyncio.run(g.compile().invoke({"query": "q"})).answer.startswith("[Billing]")

    class Refine(Node):
        class In(Schema):
            score: float

        class Out(Schema):
            score: float

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(score=inp.score + 0.25)

    looped = Graph(State).add(Refine)
    looped.edge(START, "Refine").loop("Refine", until=lambda s: s.score >= 0.9)
    assert asyncio.run(looped.compile().invoke({})).score == 1.0

    def route2(state: Support) -> str:
        return state.intent

    g2 = Graph(Support)
    classify, billing, tech = g2.nodes(Classify, Billing, Tech)

    START >> classify  # entry
    classify >> Router(route2, billing=billing, tech=tech)  # conditional fan-out
    billing >> END  # terminate a branch
    tech >> END

    app = g2.compile()
    assert asyncio.run(app.invoke({"query": "bug report"})).answer.startswith("[Tech]")


def test_nodes_and_graphs_send_map_reduce() -> None:
    class State(Schema):
        numbers: list[int] = []
        n: int = 0  # per-worker input slot
        squares: Annotated[list[int], Reducer(add)] = []  # workers merge here
        total: int = 0

    class Split(Node):
        class In(Schema):
            numbers: list[int]

        async def run(self, ctx: Context, inp: In) -> None:
            return None

    class Square(Node):
        class In(Schema):
            n: int

        class Out(Schema):
            squares: list[int]

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(squares=[inp.n**2])

    class Total(Node):
        class In(Schema):
            squares: list[int]

        class Out(Schema):
            total: int

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(total=sum(inp.squares))

    g = Graph(State).add(Split).add(Square).add(Total).edge(START, "Split")
    g.router("Split", lambda s: [Send("Square", {"n": x}) for x in s.numbers])
    g.edge("Square", "Total")  # every worker converges on one Total (deduped)
    out = asyncio.run(g.compile().invoke({"numbers": [1, 2, 3]}))
    assert (out.squares, out.total) == ([1, 4, 9], 14)


def test_execution_model_recursion_limit() -> None:
    class State(Schema):
        n: int = 0

    class Spin(Node):
        class In(Schema):
            n: int

        class Out(Schema):
            n: int

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(n=inp.n + 1)

    app = Graph(State).add(Spin).edge(START, "Spin").conditional("Spin", lambda s: "Spin").compile()
    with pytest.raises(GraphRecursionError, match=r"exceeded 25 supersteps without halting"):
        asyncio.run(app.invoke({}, max_steps=25))  # default 25


def test_streaming_search_emits_status() -> None:
    async def do_search(query: str) -> list[str]:
        await asyncio.sleep(0)
        return [f"{query}-1", f"{query}-2"]

    class State(Schema):
        query: str
        hits: list[str] = []

    class Search(Node):
        class In(Schema):
            query: str

        class Out(Schema):
            hits: list[str]

        async def run(self, ctx: Context, inp: In) -> Out:
            await ctx.emit("status", {"stage": "searching"})
            results = await do_search(inp.query)
            await ctx.emit("status", {"stage": "done", "count": len(results)})
            return self.Out(hits=results)

    app = Graph(State).add(Search).edge(START, "Search").compile()

    async def main() -> list[tuple[int, str, str | None, object]]:
        seen = []
        async for event in app.stream({"query": "..."}):
            seen.append((event.seq, event.type, event.node, event.data))
        return seen

    seen = asyncio.run(main())
    statuses = [data for _, kind, _, data in seen if kind == "status"]
    assert statuses == [{"stage": "searching"}, {"stage": "done", "count": 2}]
    assert [seq for seq, *_ in seen] == sorted(seq for seq, *_ in seen)
