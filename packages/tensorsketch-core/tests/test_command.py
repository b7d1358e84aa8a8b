"""``Command(goto=..., update=...)`` from a node with declared ``destinations``.

Mirrors LangGraph's ``Command`` tests (a node returning ``Command(goto=..., update=...)``
routes and writes at once; ``goto`` with ``Send``; a ``Command`` combined with static edges),
with TensorSketch's rule on top: destinations are declared, so compile checks them. Tests
named ``test_langgraph_*`` port a LangGraph test each, named in their comment; the
hand-back to a parent graph (``Command.PARENT``) is in test_parent_command.py.
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any

import pytest

from tensorsketch import (
    END,
    START,
    Command,
    Context,
    Graph,
    GraphValidationError,
    InMemoryBackend,
    Node,
    Reducer,
    Schema,
    Send,
)
from tensorsketch.cache import CachePolicy
from tensorsketch.errors import RoutingError
from tensorsketch.runtime.backends.sqlite import SqliteBackend


class S(Schema):
    intent: str = ""
    log: Annotated[list[str], Reducer(operator.add)] = []


class Triage(Node):
    destinations = ("Billing", "Tech", END)

    class In(Schema):
        intent: str

    class Out(Schema):
        log: list[str]

    async def run(self, ctx: Context, inp: Any) -> Any:
        goto = {"billing": "Billing", "tech": "Tech", "": END}.get(inp.intent, inp.intent)
        return Command(goto=goto, update=self.Out(log=["triaged"]))


def _leaf(label: str) -> type[Node]:
    class Leaf(Node):
        class Out(Schema):
            log: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(log=[label])

    return Leaf


def _graph() -> Graph[S]:
    g = Graph(S).add(Triage).add(_leaf("billing"), name="Billing").add(_leaf("tech"), name="Tech")
    return g.edge(START, "Triage")


async def test_a_command_writes_and_routes_at_once() -> None:
    app = _graph().compile()
    assert (await app.invoke({"intent": "tech"})).log == ["triaged", "tech"]
    assert (await app.invoke({"intent": "billing"})).log == ["triaged", "billing"]
    assert (await app.invoke({"intent": ""})).log == ["triaged"]  # goto END
    events = [(e.type, e.data) async for e in app.stream({"intent": "tech"})]
    end = next(d for t, d in events if t == "node_end")
    assert end["goto"] == [["Tech", None]] and end["writes"] == {"log": ["triaged"]}


async def test_an_undeclared_destination_is_refused_by_name() -> None:
    with pytest.raises(RoutingError, match=r"Command\(goto='Sales'\), which is not one of its"):
        await _graph().compile().invoke({"intent": "Sales"})


def test_a_destination_that_is_not_a_node_is_a_compile_error() -> None:
    class Typo(Node):
        destinations = ("Biling",)

        async def run(self, ctx: Context, inp: Any) -> None:
            return None

    g = Graph(S).add(Typo).add(_leaf("b"), name="Billing").edge(START, "Typo")
    with pytest.raises(GraphValidationError, match=r"names 'Biling'.*did you mean 'Billing'"):
        g.compile()


async def test_goto_sends_and_static_edges_both_apply() -> None:
    class Fan(Schema):
        items: list[str] = []
        item: str = ""
        log: Annotated[list[str], Reducer(operator.add)] = []

    class Split(Node):
        destinations = ("Work",)

        class In(Schema):
            items: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            return Command(goto=[Send("Work", {"item": x}) for x in inp.items])

    class Work(Node):
        class In(Schema):
            item: str

        class Out(Schema):
            log: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(log=[f"work {inp.item}"])

    g = Graph(Fan).add(Split).add(Work).add(_leaf("audit"), name="Audit")
    g.edge(START, "Split").edge("Split", "Audit")  # a static edge beside the Command
    out = await g.compile().invoke({"items": ["a", "b"]})
    assert sorted(out.log) == ["audit", "work a", "work b"]


async def test_a_journaled_tasks_goto_survives_a_failed_sibling(tmp_path: Path) -> None:
    """A superstep where one task returned a Command and a sibling failed: the retry runs
    only the failed task, and the finished one's routing comes back from the journal."""
    ran: list[str] = []
    fail = [True]

    class Router_(Node):
        destinations = ("Billing",)

        class Out(Schema):
            log: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            ran.append("router")
            return Command(goto="Billing", update=self.Out(log=["routed"]))

    class Flaky(Node):
        class Out(Schema):
            log: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            ran.append("flaky")
            if fail[0]:
                fail[0] = False
                raise ConnectionError("down once")
            return self.Out(log=["flaky"])

    g = Graph(S).add(Router_, name="Router").add(Flaky).add(_leaf("billing"), name="Billing")
    g.edge(START, "Router").edge(START, "Flaky")
    app = g.compile()
    backend = SqliteBackend(tmp_path / "runs.db")
    with pytest.raises(ConnectionError):
        await app.invoke({}, thread_id="t", backend=backend)
    out = await app.invoke(thread_id="t", backend=backend)
    assert sorted(out.log) == ["billing", "flaky", "routed"]
    assert ran.count("router") == 1  # its writes and its goto came from the journal


class Cheap(Node):
    async def run(self, ctx: Context, inp: Schema) -> None:
        return None


def test_the_structure_lists_destinations_deferred_and_cached_nodes() -> None:
    """What the canvas draws from the class and the add() call, read back from the graph."""
    g = (
        Graph(S)
        .add(Triage)
        .add(Cheap, cache=CachePolicy(ttl=5))
        .add(Cheap, name="Later", defer=True)
    )
    structure = g.structure
    assert structure.destinations == {"Triage": Triage.destinations}
    assert structure.cached == ("Cheap",)
    assert structure.deferred == ("Later",)


# -- LangGraph's Command tests, ported ----------------------------------------------------------


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_langgraph_multistep_plan(store: str, tmp_path: Path) -> None:
    # Mirrors LangGraph tests/test_pregel.py::test_multistep_plan: a planner routes with
    # Command(goto=...) to each step of its plan in turn (one step a list: both run in one
    # superstep), every step routes back with Command(goto="planner"), and the plan left in
    # the state empties; on a durable thread here (memory and SQLite).
    class Plan(Schema):
        plan: list[str | list[str]] | None = None
        messages: Annotated[list[str], Reducer(operator.add)] = []

    class Planner(Node):
        destinations = ("step1", "step2", "step3", "step4")

        class In(Schema):
            plan: list[str | list[str]] | None = None

        class Out(Schema):
            plan: list[str | list[str]]

        async def run(self, ctx: Context, inp: Any) -> Any:
            todo = ["step1", ["step2", "step3"], "step4"] if inp.plan is None else inp.plan
            if not todo:
                return None  # the end of the plan
            first, *rest = todo
            return Command(goto=first, update={"plan": rest})

    def step(label: str) -> type[Node]:
        class Step(Node):
            destinations = ("planner",)

            class Out(Schema):
                messages: list[str]

            async def run(self, ctx: Context, inp: Any) -> Any:
                return Command(goto="planner", update={"messages": [label]})

        return Step

    g = Graph(Plan).add(Planner, name="planner")
    for label in ("step1", "step2", "step3", "step4"):
        g.add(step(label), name=label)
    app = g.edge(START, "planner").compile()
    backend = InMemoryBackend() if store == "memory" else SqliteBackend(tmp_path / "runs.db")
    out = await app.invoke({"messages": ["start"]}, thread_id="1", backend=backend)
    assert out.model_dump() == {
        "plan": [],
        "messages": ["start", "step1", "step2", "step3", "step4"],
    }


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_langgraph_command_goto_with_static_breakpoints(store: str, tmp_path: Path) -> None:
    # Mirrors LangGraph tests/test_pregel.py::test_command_goto_with_static_breakpoints: a
    # graph stopped by interrupt_before=["node1"]; LangGraph resumes it with
    # invoke(Command(goto=["node2"])), which runs node2 beside the planned node1. Here a
    # resume is a plain invoke, and the extra goto comes from a node that returns it (a Command
    # is a node's return value, not an input): node1 routes to node2 both by its edge and by
    # its goto, which plans node2 once; the breakpoint stops and resumes the same way.
    class Foo(Schema):
        foo: Annotated[str, Reducer(operator.add)] = ""

    class Node1(Node):
        destinations = ("node2",)

        class Out(Schema):
            foo: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            return Command(goto=["node2"], update={"foo": "|node-1"})

    class Node2(Node):
        class Out(Schema):
            foo: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(foo="|node-2")

    g = Graph(Foo).add(Node1, name="node1").add(Node2, name="node2")
    app = g.edge(START, "node1").edge("node1", "node2").compile(interrupt_before=["node1"])
    backend = InMemoryBackend() if store == "memory" else SqliteBackend(tmp_path / "runs.db")
    stopped = await app.invoke({"foo": "abc"}, thread_id="t", backend=backend)
    assert stopped.foo == "abc"  # stopped before node1
    out = await app.invoke(thread_id="t", backend=backend)
    assert out.foo == "abc|node-1|node-2"
