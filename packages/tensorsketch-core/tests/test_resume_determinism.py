"""A resumed run ends in exactly the state an uninterrupted run reaches, and every run starts
from fresh defaults (issue 12's determinism bugs, kept as regressions)."""

from __future__ import annotations

import operator
from typing import Annotated, Any

from tensorsketch import END, START, Context, Graph, Node, Reducer, Schema, Send
from tensorsketch.runtime.backends.memory import InMemoryBackend

# -- plan order survives a checkpoint -------------------------------------------------------


class Mixed(Schema):
    items: Annotated[list[str], Reducer(operator.add)] = []
    arg: str = ""
    crash: bool = False


class Fan(Node):
    class In(Schema):
        pass

    class Out(Schema):
        pass

    async def run(self, ctx: Context, inp: Any) -> Any:
        return None


class W(Node):
    class In(Schema):
        arg: str

    class Out(Schema):
        items: list[str]

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(items=["w" + inp.arg])


class P(Node):
    class In(Schema):
        crash: bool

    class Out(Schema):
        items: list[str]

    async def run(self, ctx: Context, inp: Any) -> Any:
        if inp.crash and not RECOVERED:
            msg = "P failed once"
            raise RuntimeError(msg)
        return self.Out(items=["p"])


RECOVERED: list[bool] = []


def _route(state: Mixed) -> list[Any]:
    # A Send *before* a plain node: the barrier folds in this order.
    return [Send("W", {"arg": "x"}), "P"]


MIXED = (
    Graph(Mixed)
    .add(Fan)
    .add(W)
    .add(P)
    .edge(START, "Fan")
    .conditional("Fan", _route)
    .edge("W", END)
    .edge("P", END)
    .compile()
)


async def test_resume_after_a_failure_folds_in_the_live_plan_order() -> None:
    RECOVERED.clear()
    live = await MIXED.invoke({})
    assert live.items == ["wx", "p"]
    backend = InMemoryBackend()
    try:
        await MIXED.invoke({"crash": True}, thread_id="t", backend=backend)
    except RuntimeError:
        pass
    else:  # pragma: no cover - the node raises
        raise AssertionError("P should have failed")
    RECOVERED.append(True)
    resumed = await MIXED.invoke(thread_id="t", backend=backend)
    assert resumed.items == ["wx", "p"]


async def test_checkpoint_keeps_sends_and_plain_nodes_in_plan_order() -> None:
    RECOVERED.clear()
    backend = InMemoryBackend()
    try:
        await MIXED.invoke({"crash": True}, thread_id="t", backend=backend)
    except RuntimeError:
        pass
    history = await MIXED.aget_history("t", backend)
    planned = [cp for cp in history if cp.tasks]
    assert [name for name, _ in planned[-1].tasks] == ["W", "P"]
    assert planned[-1].plan == [("W", {"arg": "x"}), ("P", None)]
    assert planned[-1].next == ("P",)
    assert planned[-1].sends == (("W", {"arg": "x"}),)


# -- defaults are deep-copied per run ---------------------------------------------------------


class Inner(Schema):
    tags: list[str] = []


class Nested(Schema):
    rows: list[list[int]] = [[0]]
    inner: Inner = Inner()
    table: dict[str, list[int]] = {"a": [1]}


class Mutate(Node):
    class In(Schema):
        rows: list[list[int]]
        inner: Inner
        table: dict[str, list[int]]

    class Out(Schema):
        rows: list[list[int]]
        inner: Inner
        table: dict[str, list[int]]

    async def run(self, ctx: Context, inp: Any) -> Any:
        inp.rows[0].append(1)  # mutates the nested default in place
        inp.inner.tags.append("seen")
        inp.table["a"].append(2)
        return self.Out(rows=inp.rows, inner=inp.inner, table=inp.table)


NESTED = Graph(Nested).add(Mutate).edge(START, "Mutate").edge("Mutate", END).compile()


async def test_each_run_gets_a_fresh_copy_of_nested_defaults() -> None:
    first = await NESTED.invoke({})
    second = await NESTED.invoke({})
    assert first.rows == [[0, 1]] and second.rows == [[0, 1]]
    assert second.inner.tags == ["seen"]
    assert second.table == {"a": [1, 2]}
    assert Nested().rows == [[0]] and Nested().inner.tags == [] and Nested().table == {"a": [1]}
