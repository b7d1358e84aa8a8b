"""The engine's fast paths behave exactly like the slow ones they replace.

``fast_constructor`` stands in for ``model_construct`` on every task, and parallel supersteps
wake the barrier with one shared countdown instead of ``asyncio.wait``: these tests pin down that
neither changes what a node sees, which error wins, or how cancellation ends.
"""

from __future__ import annotations

import asyncio
import operator
import random
from typing import Annotated, Any

import pytest
from pydantic import ConfigDict, PrivateAttr

from tensorsketch import END, START, Context, Graph, Node, Reducer, Schema, Send
from tensorsketch._fastmodel import fast_constructor


class Plain(Schema):
    a: int
    b: list[int] = []
    c: str = "x"


class WithPrivate(Schema):
    a: int
    _cache: dict[str, int] = PrivateAttr(default_factory=dict)


class WithPostInit(Schema):
    a: int
    seen: int = 0

    def model_post_init(self, context: Any) -> None:
        object.__setattr__(self, "seen", 1)


class Open(Schema):
    model_config = ConfigDict(extra="allow")
    a: int


def _slots(obj: Schema) -> tuple[Any, ...]:
    return (
        list(obj.__dict__.items()),
        obj.__pydantic_fields_set__,
        obj.__pydantic_extra__,
        obj.__pydantic_private__,
    )


@pytest.mark.parametrize(
    ("schema", "values"),
    [
        (Plain, {"a": 1, "b": [2], "c": "y"}),
        (Plain, {"a": 1}),  # missing fields: defaults come from model_construct
        (Plain, {}),
        (WithPrivate, {"a": 1}),
        (WithPostInit, {"a": 1, "seen": 0}),
        (Open, {"a": 1}),
    ],
)
def test_fast_constructor_matches_model_construct(
    schema: type[Schema], values: dict[str, Any]
) -> None:
    made = fast_constructor(schema)(dict(values))
    expected = schema.model_construct(**values)
    assert type(made) is schema
    assert _slots(made) == _slots(expected)
    assert made == expected
    assert made.model_dump() == expected.model_dump()
    assert repr(made) == repr(expected)


def test_fast_constructor_keeps_values_by_identity() -> None:
    items = [1, 2]
    made = fast_constructor(Plain)({"a": 1, "b": items, "c": "z"})
    assert made.b is items
    assert made.model_fields_set == {"a", "b", "c"}
    made.c = "changed"  # still a normal, mutable pydantic model
    assert made.c == "changed"


async def test_node_input_and_routing_view_are_complete_and_detached() -> None:
    seen: dict[str, Any] = {}

    class S(Schema):
        x: int = 1
        y: str = "a"
        log: Annotated[list[str], Reducer(operator.add)] = []

    class Step(Node):
        class In(Schema):
            x: int
            y: str

        class Out(Schema):
            x: int
            log: list[str]

        async def run(self, ctx: Context, inp: In) -> Out:
            seen["inp"] = inp
            return self.Out(x=inp.x + 1, log=[inp.y])

    def route(state: S) -> str:
        seen["view"] = state
        state.x = 1_000  # a routing function scribbling on its view must not reach the state
        return END

    app = Graph(S).add(Step).edge(START, "Step").conditional("Step", route).compile()
    out = await app.invoke({"y": "b"})
    inp = seen["inp"]
    assert type(inp) is Step.In
    assert inp == Step.In(x=1, y="b")
    assert inp.model_fields_set == {"x", "y"}
    assert out.x == 2
    assert out.log == ["b"]
    assert type(seen["view"]) is S


class Fan(Schema):
    items: list[int] = []
    n: int = 0
    got: Annotated[list[int], Reducer(operator.add)] = []


def _fan_graph(worker: type[Node]) -> Any:
    return (
        Graph(Fan)
        .add(worker, name="Work")
        .router(START, lambda s: [Send("Work", {"n": i}) for i in s.items])
        .edge("Work", END)
        .compile()
    )


async def test_wide_fan_out_folds_in_task_order_whatever_finishes_first() -> None:
    rng = random.Random(7)
    delays = [rng.choice([0.0, 0.0, 0.001, 0.003]) for _ in range(300)]

    class Work(Node):
        class In(Schema):
            n: int

        class Out(Schema):
            got: list[int]

        async def run(self, ctx: Context, inp: In) -> Out:
            if delays[inp.n]:
                await asyncio.sleep(delays[inp.n])
            return self.Out(got=[inp.n])

    out = await _fan_graph(Work).invoke({"items": list(range(300))})
    assert out.got == list(range(300))


async def test_the_first_failure_in_task_order_wins_and_siblings_finish_cleanup() -> None:
    cleaned: list[int] = []

    class Work(Node):
        class In(Schema):
            n: int

        async def run(self, ctx: Context, inp: In) -> None:
            if inp.n in (3, 5):
                raise KeyError(f"worker {inp.n}")  # both fail within the same loop tick
            try:
                await asyncio.sleep(10)
            finally:
                await asyncio.sleep(0)  # cleanup that itself awaits must still complete
                cleaned.append(inp.n)

    with pytest.raises(KeyError, match="worker 3") as info:
        await _fan_graph(Work).invoke({"items": list(range(8))})
    assert type(info.value) is KeyError
    assert any("'Work'#3" in note for note in info.value.__notes__)
    assert sorted(cleaned) == [0, 1, 2, 4, 6, 7]


async def test_cancelling_the_run_cancels_every_worker_and_waits_for_them() -> None:
    started = asyncio.Event()
    running: set[int] = set()
    finished: list[int] = []

    class Work(Node):
        class In(Schema):
            n: int

        async def run(self, ctx: Context, inp: In) -> None:
            running.add(inp.n)
            if len(running) == 4:
                started.set()
            try:
                await asyncio.sleep(10)
            finally:
                await asyncio.sleep(0)
                finished.append(inp.n)

    run = asyncio.get_running_loop().create_task(_fan_graph(Work).invoke({"items": [0, 1, 2, 3]}))
    await asyncio.wait_for(started.wait(), 5)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert sorted(finished) == [0, 1, 2, 3]


async def test_a_worker_that_is_cancelled_by_itself_does_not_hang_the_barrier() -> None:
    class Work(Node):
        class In(Schema):
            n: int

        class Out(Schema):
            got: list[int]

        async def run(self, ctx: Context, inp: In) -> Out:
            if inp.n == 1:
                current = asyncio.current_task()
                assert current is not None
                current.cancel()
                await asyncio.sleep(0)
            return self.Out(got=[inp.n])

    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(_fan_graph(Work).invoke({"items": [0, 1, 2]}), 5)
