"""Channel rules: LastValue, Reducer (BinaryOperatorAggregate), Topic, defaults, empty reads."""

from __future__ import annotations

import operator
import re
from typing import Annotated, Any

import pytest

from tensorsketch import (
    END,
    START,
    ChannelMarker,
    EmptyChannelError,
    Graph,
    GraphValidationError,
    InMemoryBackend,
    InvalidUpdateError,
    Node,
    Reducer,
    Schema,
    Send,
    Topic,
)
from tensorsketch.channels import (
    MISSING,
    BinaryOperatorAggregate,
    Channel,
    LastValue,
    TopicChannel,
    channel_for,
)
from tensorsketch.errors import MissingInputError


def test_last_value_keeps_single_write_and_rejects_two() -> None:
    ch = LastValue("answer")
    assert ch.apply("old", ["new"], ["A"]) == ("new", None)
    assert ch.apply("old", [], []) == ("old", None)
    with pytest.raises(InvalidUpdateError, match="received 2 writes in one superstep") as info:
        ch.apply(MISSING, ["a", "b"], ["NodeA", "NodeB"])
    assert "give this field a reducer" in str(info.value)
    assert "'NodeA', 'NodeB'" in str(info.value)


def test_reducer_seeds_then_folds() -> None:
    ch = BinaryOperatorAggregate("total", operator.add)
    assert ch.apply(MISSING, [2, 3], ["a", "b"]) == (5, None)
    assert ch.apply(10, [1], ["a"]) == (11, None)


def test_reducer_list_concat_reports_the_appended_suffix() -> None:
    ch = BinaryOperatorAggregate("items", operator.add)
    current = [1, 2]
    new, appended = ch.apply(current, [[3], [4, 5]], ["a", "b"])
    assert new == [1, 2, 3, 4, 5]
    assert appended == [3, 4, 5]
    assert current == [1, 2], "the previous value must not be mutated (snapshots share it)"


def test_reducer_with_fold_delta_protocol() -> None:
    class Dedup:
        def __call__(self, a: list[int], b: list[int]) -> list[int]:
            return a + [x for x in b if x not in a]

        def fold_delta(self, current: object, writes: list[list[int]]) -> tuple[list[int], None]:
            value = list(current) if isinstance(current, list) else []
            for w in writes:
                value = self(value, w)
            return value, None

    ch = BinaryOperatorAggregate("ids", Dedup())
    assert ch.apply([1], [[1, 2], [2, 3]], ["a", "b"]) == ([1, 2, 3], None)


def test_topic_accumulates_lists_and_items() -> None:
    ch = TopicChannel("events")
    assert ch.initial(MISSING) == []
    new, appended = ch.apply(["x"], [["a", "b"], "c"], ["n1", "n2"])
    assert new == ["x", "a", "b", "c"]
    assert appended == ["a", "b", "c"]


def test_topic_without_accumulate_keeps_only_this_step() -> None:
    ch = TopicChannel("batch", accumulate=False)
    assert ch.clears_each_step
    assert ch.apply(["old"], [["a"]], ["n"]) == (["a"], None)
    assert ch.apply(["old"], [], []) == ([], None)


def test_channel_for_picks_by_marker_and_rejects_two_markers() -> None:
    assert isinstance(channel_for("a", ()), LastValue)
    assert isinstance(channel_for("a", (Reducer(operator.add),)), BinaryOperatorAggregate)
    assert isinstance(channel_for("a", (Topic(),)), TopicChannel)
    with pytest.raises(TypeError, match="2 channel markers"):
        channel_for("a", (Topic(), Reducer(operator.add)))
    with pytest.raises(TypeError, match="needs a callable"):
        Reducer(42)  # type: ignore[arg-type]


class CountState(Schema):
    count: int = 0
    total: Annotated[int, Reducer(operator.add)] = 0
    scratch: Annotated[list[str], Reducer(operator.add)] = []
    events: Annotated[list[str], Topic()] = []
    batch: Annotated[list[str], Topic(accumulate=False)] = []
    answer: str


def _writer(name: str, **writes: object) -> type[Node]:
    fields = {k: (type(v), ...) for k, v in writes.items()}
    from pydantic import create_model

    out = create_model(f"{name}Out", __base__=Schema, **fields)  # type: ignore[call-overload]

    class W(Node):
        Out = out

        async def run(self, ctx: object, inp: object) -> object:
            return self.Out(**writes)

    W.__name__ = name
    return W


async def test_concurrent_writes_to_last_value_fail_loudly() -> None:
    g = Graph(CountState)
    g.add(_writer("NodeA", answer="a")).add(_writer("NodeB", answer="b"))
    g.edge(START, "NodeA").edge(START, "NodeB")
    with pytest.raises(InvalidUpdateError, match="'answer' received 2 writes"):
        await g.compile().invoke({})


async def test_reducers_and_topics_fold_parallel_and_successive_writes() -> None:
    g = Graph(CountState)
    g.add(_writer("A", total=2, scratch=["a"], events=["ea"], batch=["ba"], answer="x"))
    g.add(_writer("B", total=3, scratch=["b"], events=["eb"], batch=["bb"]))
    g.add(_writer("C", total=10, scratch=["c"]))
    g.edge(START, "A").edge(START, "B").edge("A", "C").edge("B", "C").edge("C", END)
    out = await g.compile().invoke({"total": 1})
    assert out.total == 16  # default 0, input 1, then 2+3, then 10
    assert out.scratch == ["a", "b", "c"]  # task order, not completion order
    assert out.events == ["ea", "eb"]
    assert out.batch == []  # one-shot topic: cleared at the barrier C ran in
    assert out.answer == "x"


async def test_reading_an_unset_field_raises_empty_channel() -> None:
    class S(Schema):
        missing: str
        out: str = ""

    class Reader(Node):
        class In(Schema):
            missing: str

        class Out(Schema):
            out: str

        async def run(self, ctx: object, inp: In) -> Out:
            return self.Out(out=inp.missing)

    class Writer(Node):  # writes it, but only after Reader
        class Out(Schema):
            missing: str

        async def run(self, ctx: object, inp: object) -> Out:
            return self.Out(missing="late")

    # A route without a mapping hides what runs when, so the input check lets it through.
    g = Graph(S).add(Reader).add(Writer).router(START, lambda s: "Reader")
    app = g.edge("Reader", "Writer").compile()
    with pytest.raises(EmptyChannelError, match="reads state field 'missing'"):
        await app.invoke({})


class Charge(Schema):
    a: str
    b: str
    charged: list[str] = []


class First(Node):
    class In(Schema):
        a: str

    class Out(Schema):
        charged: list[str]

    async def run(self, ctx: object, inp: In) -> Out:
        CHARGES.append(inp.a)  # the side effect that must not happen on a doomed input
        return self.Out(charged=[inp.a])


class Second(Node):
    class In(Schema):
        b: str

    async def run(self, ctx: object, inp: In) -> None:
        return None


CHARGES: list[str] = []


def charge_graph() -> Any:
    return Graph(Charge).add(First).add(Second).edge(START, "First").edge("First", "Second")


async def test_a_required_field_no_node_writes_is_refused_before_any_node_runs() -> None:
    CHARGES.clear()
    app = charge_graph().compile()
    with pytest.raises(MissingInputError, match=r"lacks required field\(s\) 'b' of Charge") as info:
        await app.invoke({"a": "x"})
    assert "'Second' reads it" in str(info.value) and "Pass 'b'" in str(info.value)
    assert isinstance(info.value, EmptyChannelError)
    assert CHARGES == []  # nothing ran
    out = await app.invoke({"a": "x", "b": "y"})
    assert out.charged == ["x"] and CHARGES == ["x"]


class WritesB(Node):
    class Out(Schema):
        b: str

    async def run(self, ctx: object, inp: object) -> Out:
        return self.Out(b="late")


async def test_a_field_written_only_after_its_reader_is_refused_before_any_node_runs() -> None:
    CHARGES.clear()
    g = charge_graph().add(WritesB).edge("Second", "WritesB")
    with pytest.raises(MissingInputError, match=r"lacks required field\(s\) 'b'") as info:
        await g.compile().invoke({"a": "x"})
    assert "'Second' reads it, and only 'WritesB' writes it" in str(info.value)
    assert CHARGES == []  # First's charge never ran


async def test_a_writer_in_the_same_superstep_as_the_reader_does_not_count() -> None:
    CHARGES.clear()  # both start together: Second reads the state before WritesB's write lands
    g = Graph(Charge).add(First).add(Second).add(WritesB)
    g.edge(START, "First").edge(START, "WritesB").edge("First", "Second")
    g.edge(START, "Second")
    with pytest.raises(MissingInputError, match="'b'"):
        await g.compile().invoke({"a": "x"})
    assert CHARGES == []


async def test_a_writer_upstream_of_the_reader_satisfies_the_check() -> None:
    CHARGES.clear()
    g = Graph(Charge).add(First).add(WritesB).add(Second)
    g.edge(START, "First").edge("First", "WritesB").edge("WritesB", "Second")
    out = await g.compile().invoke({"a": "x"})
    assert out.b == "late" and CHARGES == ["x"]


async def test_mapped_routes_and_joins_count_as_running_before() -> None:
    CHARGES.clear()  # WritesB reaches Second only through a mapped route: not refused
    g = Graph(Charge).add(First).add(WritesB).add(Second)
    g.edge(START, "First").edge("First", "WritesB")
    g.conditional("WritesB", lambda s: "go", {"go": "Second", "stop": END})
    assert (await g.compile().invoke({"a": "x"})).b == "late"
    joined = Graph(Charge).add(First).add(WritesB).add(Second)  # a join: WritesB before Second
    joined.edge(START, "First").edge(START, "WritesB").edge(["First", "WritesB"], "Second")
    assert (await joined.compile().invoke({"a": "x"})).b == "late"
    mapped_after = Graph(Charge).add(First).add(Second).add(WritesB)  # mapped, but after
    mapped_after.edge(START, "First").conditional("First", lambda s: "go", {"go": "Second"})
    mapped_after.edge("Second", "WritesB")
    with pytest.raises(MissingInputError, match="'b'"):
        await mapped_after.compile().invoke({"a": "x"})


async def test_a_send_payload_may_supply_the_field_so_open_routes_are_not_refused() -> None:
    class Job(Schema):
        item: str
        done: Annotated[list[str], Reducer(operator.add)] = []

    class Worker(Node):
        class In(Schema):
            item: str

        class Out(Schema):
            done: list[str]

        async def run(self, ctx: object, inp: In) -> Out:
            return self.Out(done=[inp.item])

    class Finish(Node):
        class Out(Schema):
            item: str

        async def run(self, ctx: object, inp: object) -> Out:
            return self.Out(item="all")

    g = Graph(Job).add(Worker).add(Finish)
    g.router(START, lambda s: [Send("Worker", {"item": x}) for x in ("p", "q")])
    out = await g.edge("Worker", "Finish").compile().invoke({})
    assert out.done == ["p", "q"] and out.item == "all"


async def test_a_required_field_nothing_writes_or_reads_is_refused_up_front() -> None:
    class S(Schema):
        result: str

    class Noop(Node):
        async def run(self, ctx: object, inp: object) -> None:
            CHARGES.append("ran")

    CHARGES.clear()
    app = Graph(S).add(Noop).edge(START, "Noop").compile()
    with pytest.raises(MissingInputError, match="the run cannot finish without it"):
        await app.invoke({})
    assert CHARGES == []


async def test_a_resumed_thread_is_not_refused_for_a_field_its_state_holds() -> None:
    CHARGES.clear()
    backend = InMemoryBackend()
    app = charge_graph().compile(interrupt_before=["Second"])
    await app.invoke({"a": "x", "b": "y"}, thread_id="t", backend=backend)
    out = await app.invoke({"a": "z"}, thread_id="t", backend=backend)  # new input, no `b`
    assert out.b == "y" and CHARGES == ["x"]
    with pytest.raises(MissingInputError, match="'b'"):  # a new thread needs it
        await app.invoke({"a": "x"}, thread_id="fresh", backend=backend)
    assert await backend.latest_checkpoint("fresh") is None


async def test_final_state_requires_required_fields() -> None:
    class S(Schema):
        required_result: str

    class MayWrite(Node):  # declares the field, so the input check lets it through
        class Out(Schema):
            required_result: str

        async def run(self, ctx: object, inp: object) -> Out | None:
            return None

    app = Graph(S).add(MayWrite).edge(START, "MayWrite").compile()
    with pytest.raises(EmptyChannelError, match="'required_result' of S were never set"):
        await app.invoke({})


async def test_defaults_are_not_shared_between_runs() -> None:
    class S(Schema):
        items: list[str] = []

    class Append(Node):
        class In(Schema):
            items: list[str]

        class Out(Schema):
            items: list[str]

        async def run(self, ctx: object, inp: In) -> Out:
            inp.items.append("x")  # a careless in-place mutation
            return self.Out(items=inp.items)

    app = Graph(S).add(Append).edge(START, "Append").compile()
    assert (await app.invoke({})).items == ["x"]
    assert (await app.invoke({})).items == ["x"]


async def test_custom_channel_marker() -> None:
    class MaxChannel(Channel):
        kind = "max"

        def apply(self, current: object, writes: object, writers: object) -> tuple[object, None]:
            values = [v for v in [current, *writes] if v is not MISSING]  # type: ignore[misc]
            return max(values), None  # type: ignore[type-var]

    class Max(ChannelMarker):
        def create(self, field: str) -> Channel:
            return MaxChannel(field)

    class S(Schema):
        best: Annotated[int, Max()] = 0

    g = Graph(S).add(_writer("A", best=3)).add(_writer("B", best=7)).add(_writer("C", best=5))
    g.edge(START, "A").edge(START, "B").edge(START, "C")
    assert (await g.compile().invoke({})).best == 7


# -- typed reducer and Topic ports ------------------------------------------------------------


def _concat_strs(current: list[str], update: list[str]) -> list[str]:
    return [*current, *update]


def _bump(current: int, update: int) -> int:
    return current + update


class Typed(Schema):
    tags: Annotated[list[str], Reducer(operator.add)] = []
    total: Annotated[int, Reducer(_bump)] = 0
    seen: Annotated[list[str], Topic()] = []
    loose: Annotated[list[str], Reducer(lambda a, b: a + b)] = []


def _writer_of(**ports: Any) -> type[Node]:
    out = type("Out", (Schema,), {"__annotations__": ports})

    class W(Node):
        Out = out

        async def run(self, ctx: object, inp: object) -> None:
            return None

    return W


@pytest.mark.parametrize(
    ("port", "annotation", "wanted"),
    [
        ("tags", str, "list[str]"),  # list concatenation takes a list, not one item
        ("tags", list[int], "list[str]"),
        ("total", str, "int"),  # the reducer's second parameter says what an update is
        ("seen", int, "str | list[str]"),  # a topic takes an item or a list of them
    ],
)
def test_a_write_a_reducer_or_topic_cannot_take_is_a_compile_error(
    port: str, annotation: Any, wanted: str
) -> None:
    g = Graph(Typed).add(_writer_of(**{port: annotation}), name="W").edge(START, "W")
    with pytest.raises(
        GraphValidationError, match=f"whose update is `{re.escape(wanted)}`"
    ) as info:
        g.compile()
    assert f"change the Out port to `{port}: {wanted}`" in str(info.value)


def test_writes_the_reducer_takes_compile() -> None:
    for ports in (
        {"tags": list[str]},
        {"total": int},
        {"seen": str},
        {"seen": list[str]},
        {"loose": int},  # an unannotated reducer cannot say, so nothing is checked
    ):
        Graph(Typed).add(_writer_of(**ports), name="W").edge(START, "W").compile()
