"""``Command(goto=..., update=...)`` from a node with declared ``destinations``.

Mirrors LangGraph's ``Command`` tests (a node returning ``Command(goto=..., update=...)``
routes and writes at once; ``goto`` with ``Send``; a ``Command`` combined with static edges),
with TensorSketch's rule on top: destinations are declared, so compile checks them.
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
