"""Property tests for subgraph nodes (issue 42): random parent/child graphs — plain chains,
``Send`` fan-outs inside a child, ``Send`` to a subgraph node, two levels of nesting — with a
failure injected at a random task resume to the uninterrupted run's result, and every effect
runs exactly once.

A failure here is a task that raises after its effect was journaled: the run stops with a
failure checkpoint and is resumed from it. (Process kills at every durable boundary of a
nested graph are the crash harness's job: ``nested_scenario_graph`` on all four stores.)
"""

from __future__ import annotations

import asyncio
import operator
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorsketch import END, START, Context, Graph, InMemoryBackend, Node, Reducer, Schema, Send
from tensorsketch.runtime.backends.sqlite import SqliteBackend


class Flow(Schema):
    log: Annotated[list[str], Reducer(operator.add)] = []
    item: str = ""


class Injected(Exception):
    """The failure a test injects."""


@dataclass
class Harness:
    """What the nodes of one example share: the effects they ran and where to fail."""

    effects: Counter[str]
    fail_at: int | None = None
    seen: int = 0

    def effect(self, key: str) -> str:
        self.effects[key] += 1
        return key

    def maybe_fail(self) -> None:
        self.seen += 1
        if self.fail_at is not None and self.seen == self.fail_at:
            self.fail_at = None  # once
            raise Injected(f"injected failure at task {self.seen}")


def _node(name: str, harness: Harness) -> type[Node]:
    class Step(Node):
        class In(Schema):
            item: str = ""

        class Out(Schema):
            log: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            tag = f"{name}({inp.item})" if inp.item else name
            await ctx.step("effect", lambda: harness.effect(f"{ctx.thread_id}|{tag}"))
            harness.maybe_fail()
            return self.Out(log=[tag])

    Step.__name__ = Step.__qualname__ = name
    return Step


@dataclass(frozen=True)
class Shape:
    """One random graph: the child's chain (and whether it fans out first), whether the
    child nests a grandchild, the parent's chain around the child, and how many ``Send``
    instances of the child the parent starts (0: one plain subgraph node)."""

    child_nodes: int
    child_fanout: int
    grandchild: bool
    parent_before: int
    parent_after: int
    sends: int


shapes = st.builds(
    Shape,
    child_nodes=st.integers(1, 3),
    child_fanout=st.integers(0, 3),
    grandchild=st.booleans(),
    parent_before=st.integers(0, 2),
    parent_after=st.integers(0, 2),
    sends=st.integers(0, 3),
)


def _chain(graph: Graph[Flow], names: list[str], start: str) -> str:
    at = start
    for name in names:
        graph.edge(at, name)
        at = name
    return at


def build(shape: Shape, harness: Harness) -> Any:
    grandchild = None
    if shape.grandchild:
        g = Graph(Flow, name="G").add(_node("G1", harness), name="G1")
        grandchild = g.edge(START, "G1").edge("G1", END).compile()

    child = Graph(Flow, name="Child")
    names = [f"C{i}" for i in range(shape.child_nodes)]
    for name in names:
        child.add(_node(name, harness), name=name)
    if grandchild is not None:
        child.add(grandchild, name="Grand")
        names.append("Grand")
    if shape.child_fanout:
        child.add(_node("W", harness), name="W")
        width = shape.child_fanout

        def spread(state: Flow) -> list[Send]:
            return [Send("W", {"item": f"{state.item}w{k}"}) for k in range(width)]

        child.router(START, spread)
        child.edge("W", names[0])
    else:
        child.edge(START, names[0])
    child.edge(_chain(child, names[1:], names[0]), END)
    compiled_child = child.compile()

    parent = Graph(Flow, name="Parent")
    before = [f"P{i}" for i in range(shape.parent_before)]
    after = [f"Q{i}" for i in range(shape.parent_after)]
    for name in [*before, *after]:
        parent.add(_node(name, harness), name=name)
    parent.add(compiled_child, name="Sub")
    last = _chain(parent, before, START)
    if shape.sends:
        count = shape.sends

        def fan(state: Flow) -> list[Send]:
            return [Send("Sub", {"item": f"s{k}"}) for k in range(count)]

        parent.router(last, fan)
    else:
        parent.edge(last, "Sub")
    parent.edge(_chain(parent, after, "Sub"), END)
    return parent.compile()


async def _resume_until_done(app: Any, thread: str, backend: Any) -> Any:
    try:
        return await app.invoke({"item": ""}, thread_id=thread, backend=backend)
    except Injected:
        return await app.invoke(thread_id=thread, backend=backend)


def _tasks(shape: Shape) -> int:
    """How many tasks run in an uninterrupted run (where a failure can be injected)."""
    child = shape.child_nodes + shape.child_fanout + (1 if shape.grandchild else 0)
    return shape.parent_before + shape.parent_after + child * max(1, shape.sends)


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(shape=shapes, data=st.data(), sqlite=st.booleans())
def test_a_failure_anywhere_resumes_to_the_uninterrupted_result(
    shape: Shape, data: st.DataObject, sqlite: bool, tmp_path: Path
) -> None:
    fail_at = data.draw(st.integers(1, _tasks(shape)), label="fail_at")

    async def scenario() -> None:
        backend: Any = (
            SqliteBackend(tmp_path / f"p{abs(hash((shape, fail_at)))}.db")
            if sqlite
            else InMemoryBackend()
        )
        clean = Harness(Counter())
        expected = await build(shape, clean).invoke(
            {"item": ""}, thread_id="clean", backend=backend
        )
        assert clean.seen == _tasks(shape)

        failing = Harness(Counter(), fail_at=fail_at)
        out = await _resume_until_done(build(shape, failing), "failing", backend)
        assert out.log == expected.log
        runs = Counter({k.split("|", 1)[1]: v for k, v in failing.effects.items()})
        assert runs == Counter({k.split("|", 1)[1]: 1 for k in clean.effects}), runs
        assert all(v == 1 for v in failing.effects.values()), failing.effects

    asyncio.run(scenario())
