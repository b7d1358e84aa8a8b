"""The BSP engine: authoring-style equivalence, determinism, fan-out, errors, cancellation."""

from __future__ import annotations

import asyncio
import operator
import random
from typing import Annotated, Any

import pydantic
import pytest

from tensorsketch import (
    END,
    START,
    Context,
    Graph,
    GraphRecursionError,
    Hole,
    Node,
    NodeError,
    Reducer,
    Router,
    RoutingError,
    Schema,
    Send,
)


class Support(Schema):
    query: str
    intent: str = "other"
    answer: str = ""


class Classify(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        intent: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(intent="billing" if "refund" in inp.query else "tech")


def _answer(label: str) -> type[Node]:
    class Answer(Node):
        class In(Schema):
            query: str

        class Out(Schema):
            answer: str

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(answer=f"[{label}] {inp.query}")

    Answer.__name__ = label
    return Answer


Billing, Tech = _answer("Billing"), _answer("Tech")


def route(state: Support) -> str:
    return state.intent


def fluent() -> Graph[Support]:
    return (
        Graph(Support)
        .add(Classify)
        .add(Billing)
        .add(Tech)
        .edge(START, "Classify")
        .conditional("Classify", route, {"billing": "Billing", "tech": "Tech"})
        .edge("Billing", END)
        .edge("Tech", END)
    )


def statements() -> Graph[Support]:
    g: Graph[Support] = Graph(Support)
    g.add(Classify)
    g.add(Billing)
    g.add(Tech)
    g.edge(START, "Classify")
    g.conditional("Classify", route, {"billing": "Billing", "tech": "Tech"})
    g.edge("Billing", END)
    g.edge("Tech", END)
    return g


def arrows() -> Graph[Support]:
    g = Graph(Support)
    classify, billing, tech = g.nodes(Classify, Billing, Tech)
    START >> classify
    classify >> Router(route, billing=billing, tech=tech)
    billing >> END
    tech >> END
    return g


def test_a_nodes_entry_can_name_its_node() -> None:
    """``("Payments", Billing)`` in ``nodes()`` is ``add(Billing, name="Payments")``: a
    renamed node keeps its place in the tuple (the canvas writes a rename so)."""
    g = Graph(Support)
    classify, payments, tech = g.nodes(Classify, ("Payments", Billing), Tech)
    assert payments.name == "Payments"
    START >> classify
    classify >> Router(route, billing=payments, tech=tech)
    payments >> END
    tech >> END
    assert set(g.structure.nodes) == {"Classify", "Payments", "Tech"}
    for bad in (("Payments",), (Billing, "Payments"), ("a", Billing, "b")):
        with pytest.raises(TypeError, match=r"\(name, node\) pairs.*\('Payments', Billing\)"):
            Graph(Support).nodes(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("build", [statements, arrows])
async def test_three_styles_compile_to_the_same_graph(build: Any) -> None:
    reference = fluent().compile()
    other = build().compile()
    assert other.structure == reference.structure
    for query in ("refund please", "it crashed"):
        assert await other.invoke({"query": query}) == await reference.invoke({"query": query})


def test_arrow_fan_out_fan_in_and_getitem() -> None:
    class S(Schema):
        xs: Annotated[list[str], Reducer(operator.add)] = []

    def emit(label: str) -> type[Node]:
        class E(Node):
            class Out(Schema):
                xs: list[str]

            async def run(self, ctx: Context, inp: object) -> Any:
                return self.Out(xs=[label])

        E.__name__ = label
        return E

    g = Graph(S)
    a, b, c = g.nodes(emit("A"), emit("B"), emit("C"))
    g.add(emit("D"))
    START >> a >> [b, c]
    [b, c] >> g["D"]  # a wait-for-all join
    g["D"] >> END
    assert g.structure.edges == (
        (START, "A"),
        ("A", "B"),
        ("A", "C"),
        ("D", END),
    )
    assert g.structure.joins == ((("B", "C"), "D"),)
    with pytest.raises(KeyError, match="did you mean 'D'"):
        g["DD"]
    with pytest.raises(TypeError, match="START can only be a source"):
        a >> START


async def test_invoke_accepts_state_instance_and_rejects_bad_input() -> None:
    app = fluent().compile()
    out = await app.invoke(Support(query="refund"))
    assert out.answer == "[Billing] refund"
    assert isinstance(out, Support)
    with pytest.raises(
        ValueError, match="'qeury' is not a field of Support — did you mean 'query'"
    ):
        await app.invoke({"qeury": "x"})
    with pytest.raises(ValueError, match="'query': Input should be a valid string"):
        await app.invoke({"query": 42})
    with pytest.raises(TypeError, match=r"invoke\(\) takes a dict of Support fields"):
        await app.invoke(["query"])  # type: ignore[arg-type]


class Fan(Schema):
    items: list[int] = []
    item: int = 0
    seen: Annotated[list[int], Reducer(operator.add)] = []
    order: Annotated[list[str], Reducer(operator.add)] = []


async def test_barrier_order_is_deterministic_under_random_delays() -> None:
    rng = random.Random(1234)

    def worker(label: str) -> type[Node]:
        class W(Node):
            class Out(Schema):
                order: list[str]

            async def run(self, ctx: Context, inp: object) -> Any:
                await asyncio.sleep(rng.random() / 200)
                return self.Out(order=[label])

        W.__name__ = label
        return W

    class Square(Node):
        class In(Schema):
            item: int

        class Out(Schema):
            seen: list[int]

        async def run(self, ctx: Context, inp: In) -> Out:
            await asyncio.sleep(rng.random() / 200)
            return self.Out(seen=[inp.item])

    g = Graph(Fan)
    labels = [f"W{i}" for i in range(8)]
    for label in labels:
        g.add(worker(label))
        g.edge(START, label)
    g.add(Square)
    g.router(labels[0], lambda s: [Send("Square", {"item": i}) for i in s.items])
    for label in labels[1:]:
        g.edge(label, END)
    app = g.compile()
    for _ in range(5):
        out = await app.invoke({"items": list(range(30))})
        assert out.order == labels
        assert out.seen == list(range(30))


async def test_send_payload_schema_instance_and_shared_fields() -> None:
    class S(Schema):
        base: int = 100
        item: int = 0
        out: Annotated[list[int], Reducer(operator.add)] = []

    class Add(Node):
        class In(Schema):
            base: int
            item: int

        class Out(Schema):
            out: list[int]

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(out=[inp.base + inp.item])

    class Start(Node):
        async def run(self, ctx: Context, inp: object) -> None:
            return None

    g = Graph(S).add(Start).add(Add).edge(START, "Start")
    g.router("Start", lambda s: [Send("Add", Add.In(base=1, item=2)), Send("Add", {"item": 5})])
    assert (await g.compile().invoke({})).out == [3, 105]


async def test_send_errors_are_clear() -> None:
    class S(Schema):
        item: int = 0

    class Start(Node):
        async def run(self, ctx: Context, inp: object) -> None:
            return None

    class Use(Node):
        class In(Schema):
            item: int

        async def run(self, ctx: Context, inp: In) -> None:
            return None

    def build(path: Any) -> Any:
        return Graph(S).add(Start).add(Use).edge(START, "Start").router("Start", path).compile()

    with pytest.raises(RoutingError, match="unknown node 'Nope'"):
        await build(lambda s: [Send("Nope", {})]).invoke({})
    with pytest.raises(RoutingError, match=r"\['bogus'\], which are not fields"):
        await build(lambda s: [Send("Use", {"bogus": 1})]).invoke({})
    with pytest.raises(RoutingError, match="does not fit its In"):
        await build(lambda s: [Send("Use", {"item": "NaN"})]).invoke({})


async def test_routing_errors_name_the_valid_targets() -> None:
    g = fluent()
    g._branches["Classify"].mapping = {"billing": "Billing"}  # narrow the mapping
    with pytest.raises(RoutingError, match="not one of its keys \\('billing'\\)"):
        await g.compile().invoke({"query": "crash"})

    def to_none(state: Support) -> None:
        return None

    g2 = Graph(Support).add(Classify).add(Billing).edge(START, "Classify")
    g2.conditional("Classify", to_none)
    with pytest.raises(RoutingError, match="returned None"):
        await g2.compile().invoke({"query": "x"})
    g3 = Graph(Support).add(Classify).add(Billing).edge(START, "Classify")
    g3.conditional("Classify", lambda s: "Biling")
    with pytest.raises(RoutingError, match="did you mean 'Billing'"):
        await g3.compile().invoke({"query": "x"})


async def test_conditional_can_fan_out_to_a_list_and_end() -> None:
    class S(Schema):
        hits: Annotated[list[str], Reducer(operator.add)] = []

    def hit(label: str) -> type[Node]:
        class H(Node):
            class Out(Schema):
                hits: list[str]

            async def run(self, ctx: Context, inp: object) -> Any:
                return self.Out(hits=[label])

        H.__name__ = label
        return H

    g = Graph(S).add(hit("A")).add(hit("B")).add(hit("C")).edge(START, "A")
    g.conditional("A", lambda s: ["B", "C", END])
    assert (await g.compile().invoke({})).hits == ["A", "B", "C"]


async def test_recursion_limit_names_the_active_nodes() -> None:
    class S(Schema):
        n: int = 0

    class Spin(Node):
        class In(Schema):
            n: int

        class Out(Schema):
            n: int

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(n=inp.n + 1)

    app = Graph(S).add(Spin).edge(START, "Spin").loop("Spin", until=lambda s: False).compile()
    with pytest.raises(GraphRecursionError, match=r"exceeded 25 supersteps .*\['Spin'\]"):
        await app.invoke({})
    out = await (
        Graph(S).add(Spin).edge(START, "Spin").loop("Spin", until=lambda s: s.n >= 40).compile()
    ).invoke({}, max_steps=50)
    assert out.n == 40


async def test_node_exception_propagates_unwrapped_with_a_note_and_cancels_siblings() -> None:
    cancelled = asyncio.Event()

    class S(Schema):
        x: int = 0

    class Slow(Node):
        async def run(self, ctx: Context, inp: object) -> None:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.set()
                raise

    class Boom(Node):
        async def run(self, ctx: Context, inp: object) -> None:
            await asyncio.sleep(0.01)
            raise ValueError("payment API said no")

    app = Graph(S).add(Slow).add(Boom).edge(START, "Slow").edge(START, "Boom").compile()
    with pytest.raises(ValueError, match="payment API said no") as info:
        await app.invoke({})
    assert type(info.value) is ValueError
    assert any("node 'Boom'" in note for note in info.value.__notes__)
    assert cancelled.is_set()


async def test_hole_raises_hole() -> None:
    class S(Schema):
        query: str
        answer: str = ""

    class BillingAgent(Node):
        class In(Schema):
            query: str

        class Out(Schema):
            answer: str

        async def run(self, ctx: Context, inp: In) -> Out:
            raise Hole("Answer billing questions using the KB tool")

    app = Graph(S).add(BillingAgent).edge(START, "BillingAgent").compile()
    with pytest.raises(Hole, match="KB tool") as info:
        await app.invoke({"query": "x"})
    assert info.value.spec == "Answer billing questions using the KB tool"


async def test_wrong_return_types_raise_node_error() -> None:
    class S(Schema):
        answer: str = ""

    def returning(value: Any) -> Any:
        class R(Node):
            class Out(Schema):
                answer: str

            async def run(self, ctx: Context, inp: object) -> Any:
                return value

        return Graph(S).add(R).edge(START, "R").compile()

    with pytest.raises(NodeError, match="returned int"):
        await returning(42).invoke({})
    with pytest.raises(NodeError, match="does not fit its Out"):
        await returning({"answer": 1.5j}).invoke({})
    assert (await returning({"answer": "dict ok"}).invoke({})).answer == "dict ok"
    assert (await returning(None).invoke({})).answer == ""


async def test_an_out_that_does_not_validate_names_the_node_in_the_message() -> None:
    """``self.Out(answer=1.5j)`` raised pydantic's bare ``1 validation error for Out``; the
    node was named only in a note."""

    class S(Schema):
        answer: str = ""

    class Writer(Node):
        class Out(Schema):
            answer: str

        async def run(self, ctx: Context, inp: object) -> Any:
            return self.Out(answer=1.5j)  # type: ignore[arg-type]

    class Validates(Node):
        class Out(Schema):
            answer: str

        async def run(self, ctx: Context, inp: object) -> Any:
            # Another class named Out: its error is the body's own, left as it is.
            other = Writer.Out(answer=1.5j)  # type: ignore[arg-type]
            return self.Out(answer=other.answer)

    app = Graph(S).add(Writer).edge(START, "Writer").compile()
    with pytest.raises(NodeError) as info:
        await app.invoke({})
    message = str(info.value)
    assert message.startswith("node 'Writer' in superstep 0 returned an invalid ")
    assert "Writer.Out" in message and "answer" in message
    assert isinstance(info.value.__cause__, pydantic.ValidationError)
    other = Graph(S).add(Validates).edge(START, "Validates").compile()
    with pytest.raises(pydantic.ValidationError) as raised:
        await other.invoke({})
    assert "raised by node 'Validates'" in " ".join(raised.value.__notes__)


async def test_only_fields_set_are_written() -> None:
    class S(Schema):
        a: str = "keep"
        b: str = ""

    class Partial(Node):
        class Out(Schema):
            a: str = "default"
            b: str = ""

        async def run(self, ctx: Context, inp: object) -> Any:
            return self.Out(b="set")

    out = await Graph(S).add(Partial).edge(START, "Partial").compile().invoke({})
    assert (out.a, out.b) == ("keep", "set")


async def test_concurrent_invocations_of_one_compiled_graph() -> None:
    app = fluent().compile()
    queries = [f"refund {i}" if i % 2 else f"crash {i}" for i in range(50)]
    outs = await asyncio.gather(*(app.invoke({"query": q}) for q in queries))
    for q, out in zip(queries, outs):
        assert out.answer.endswith(q)


async def test_ctx_step_without_backend_dedupes_idempotency_keys() -> None:
    calls: list[str] = []

    class S(Schema):
        n: Annotated[int, Reducer(operator.add)] = 0

    class Charge(Node):
        class Out(Schema):
            n: int

        async def run(self, ctx: Context, inp: object) -> Any:
            async def charge() -> int:
                calls.append("charge")
                return 1

            a = await ctx.step("charge", charge, idempotency_key="pay-1")
            b = await ctx.step("charge", charge, idempotency_key="pay-1")
            c = await ctx.step("plain", lambda: 5)
            return self.Out(n=a + b + c)

    out = await Graph(S).add(Charge).edge(START, "Charge").compile().invoke({})
    assert out.n == 7
    assert calls == ["charge"]
