"""``Command(graph=Command.PARENT, ...)``: a node inside a subgraph hands the run back to the
graph running it (#44 item 2, "returning to the parent graph").

The child stops there; the update is written through the parent's reducers (any parent
field, not only those it shares with the child); the goto routes the parent from the
subgraph node, checked against the destinations declared with ``add(child,
destinations=...)``. Tests named ``test_langgraph_*`` port LangGraph's tests of it; the
comment on each names the test it mirrors.
"""

from __future__ import annotations

import operator
import pickle
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest

from tensorsketch import (
    END,
    START,
    Command,
    Context,
    Graph,
    InMemoryBackend,
    Node,
    Reducer,
    Schema,
    Send,
    run_info,
)
from tensorsketch.errors import GraphValidationError, RoutingError
from tensorsketch.executors import (
    Executor,
    Superstep,
    TaskOutcome,
    portable_error,
    run_calls,
)
from tensorsketch.interrupts import interrupt
from tensorsketch.patterns import run_subgraph
from tensorsketch.pregel.spec import GraphSpec
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.sqlite import SqliteBackend


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "memory":
        yield InMemoryBackend()
    else:
        yield SqliteBackend(tmp_path / "store.db")


# -- a desk: Alice's team (a subgraph) may hand the ticket to Bob in the parent -----------------


class Desk(Schema):
    ticket: str = ""
    log: Annotated[list[str], Reducer(operator.add)] = []
    owner: str = ""  # only the parent has it


class Team(Schema):
    ticket: str = ""
    log: Annotated[list[str], Reducer(operator.add)] = []


def _team(ran: list[str], goto: str | None = "Bob") -> Any:
    class Triage(Node):
        class In(Schema):
            ticket: str

        class Out(Schema):
            log: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            ran.append("triage")

            def lookup() -> str:
                ran.append("lookup")  # the effect: exactly once per thread
                return f"looked up {inp.ticket}"

            seen = await ctx.step("lookup", lookup)
            if inp.ticket.startswith("escalate"):
                return Command(
                    graph=Command.PARENT,
                    goto=goto,
                    update={"log": [seen], "owner": "bob"},
                )
            return self.Out(log=["alice solved it"])

    class Solve(Node):
        class Out(Schema):
            log: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            ran.append("solve")
            return self.Out(log=["alice wrote back"])

    team = Graph(Team, name="Alice").add(Triage).add(Solve)
    return team.edge(START, "Triage").edge("Triage", "Solve").edge("Solve", END).compile()


class Bob(Node):
    class In(Schema):
        owner: str

    class Out(Schema):
        log: list[str]

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(log=[f"bob took it as {inp.owner}"])


def _desk(
    ran: list[str], destinations: tuple[str, ...] = ("Bob",), goto: str | None = "Bob"
) -> Any:
    g = Graph(Desk).add(_team(ran, goto), destinations=destinations).add(Bob)
    return g.edge(START, "Alice").edge("Bob", END).compile()


async def test_a_child_hands_the_run_to_a_declared_parent_node() -> None:
    ran: list[str] = []
    out = await _desk(ran).invoke({"ticket": "escalate: printer", "log": ["seed"]})
    # The update went through the parent's reducer (appended once) and into a field only the
    # parent has; the child's later node never ran; the parent went on to Bob.
    assert out.log == ["seed", "looked up escalate: printer", "bob took it as bob"]
    assert out.owner == "bob"
    assert ran == ["triage", "lookup"]


async def test_without_a_hand_back_the_child_runs_to_its_end() -> None:
    ran: list[str] = []
    out = await _desk(ran).invoke({"ticket": "paper jam"})
    assert out.log == ["alice solved it", "alice wrote back"]
    assert ran == ["triage", "lookup", "solve"] and out.owner == ""


async def test_an_undeclared_parent_destination_is_refused_by_name() -> None:
    ran: list[str] = []
    app = _desk(ran, destinations=(), goto="Bob")
    with pytest.raises(RoutingError, match=r"goto='Bob'\), which is not one of 'Alice'") as err:
        await app.invoke({"ticket": "escalate: fax"})
    assert "destinations=('Bob',)" in str(err.value)


def test_a_declared_destination_that_is_no_node_is_a_compile_error() -> None:
    g = Graph(Desk).add(_team([]), destinations=("Bobb",)).add(Bob)
    with pytest.raises(GraphValidationError, match=r"names 'Bobb'.*did you mean 'Bob'"):
        g.edge(START, "Alice").compile()


def test_destinations_are_for_subgraph_nodes_only() -> None:
    with pytest.raises(TypeError, match=r"not a graph, so declare `destinations"):
        Graph(Desk).add(Bob, destinations=("Bob",))


async def test_an_update_naming_no_parent_field_is_refused() -> None:
    class Loose(Node):
        async def run(self, ctx: Context, inp: Any) -> Any:
            return Command(graph=Command.PARENT, update={"onwer": "x"})

    child = Graph(Team, name="Child").add(Loose).edge(START, "Loose").compile()
    app = Graph(Desk).add(child).edge(START, "Child").compile()
    with pytest.raises(RoutingError, match=r"'onwer' is not a field of Desk — did you mean"):
        await app.invoke({})


async def test_a_top_level_graph_has_no_parent_to_hand_to() -> None:
    # LangGraph raises InvalidUpdateError("There is no parent graph") for the same call.
    class Up(Node):
        async def run(self, ctx: Context, inp: Any) -> Any:
            return Command(graph=Command.PARENT, goto="Elsewhere")

    app = Graph(Team).add(Up).edge(START, "Up").compile()
    with pytest.raises(RoutingError, match=r"node 'Up' returned Command\(graph=Command.PARENT\)"):
        await app.invoke({})


async def test_graph_takes_only_parent() -> None:
    class Odd(Node):
        async def run(self, ctx: Context, inp: Any) -> Any:
            return Command(graph="Root", goto=END)

    app = Graph(Team).add(Odd).edge(START, "Odd").compile()
    with pytest.raises(RoutingError, match=r"graph= takes only Command.PARENT"):
        await app.invoke({})


async def test_the_subgraph_node_shows_the_goto_in_its_node_end_event() -> None:
    events = [e async for e in _desk([]).stream({"ticket": "escalate: x"})]
    alice = next(e for e in events if e.type == "node_end" and e.node == "Alice")
    assert alice.data["goto"] == [["Bob", None]]
    assert alice.data["writes"] == {"log": ["looked up escalate: x"], "owner": "bob"}


async def test_a_hand_back_two_levels_down_goes_one_level_up() -> None:
    """``Command.PARENT`` is the closest parent: from a grandchild it routes the child."""
    ran: list[str] = []
    inner = _team(ran)  # "Alice" hands back to "Bob" in the graph that runs it

    class Middle(Schema):
        ticket: str = ""
        log: Annotated[list[str], Reducer(operator.add)] = []
        owner: str = ""

    middle = Graph(Middle, name="Floor").add(inner, destinations=("Bob",)).add(Bob)
    floor = middle.edge(START, "Alice").edge("Bob", END).compile()
    outer = Graph(Desk).add(floor).edge(START, "Floor").edge("Floor", END).compile()
    out = await outer.invoke({"ticket": "escalate: two floors"})
    assert out.log == ["looked up escalate: two floors", "bob took it as bob"]
    assert out.owner == "bob"


# -- durable: checkpoints, resume, a crash between --------------------------------------------


async def test_resume_across_a_hand_back_runs_the_child_once(backend: Backend) -> None:
    """The parent journals the child's hand-back: resuming after it (here Bob's interrupt)
    neither enters the child again nor repeats its effect."""
    ran: list[str] = []

    class Approve(Node):
        class In(Schema):
            owner: str

        class Out(Schema):
            log: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            verdict = await interrupt(ctx, f"let {inp.owner} take it?")
            return self.Out(log=[f"approved: {verdict}"])

    g = Graph(Desk).add(_team(ran, goto="Approve"), destinations=("Approve",)).add(Approve)
    app = g.edge(START, "Alice").edge("Approve", END).compile()
    out = await app.invoke({"ticket": "escalate: VPN"}, thread_id="t", backend=backend)
    (pending,) = run_info(out).interrupts
    state = await app.aget_state("t", backend)
    assert run_info(state).status == "suspended" and pending.node == "Approve"
    assert state.owner == "bob" and state.log == ["looked up escalate: VPN"]
    out = await app.invoke(thread_id="t", backend=backend, resume={pending.id: "yes"})
    assert out.log == ["looked up escalate: VPN", "approved: yes"]
    assert ran == ["triage", "lookup"]  # the child ran once, its later node never
    assert run_info(await app.aget_state("t", backend)).status == "completed"


async def test_a_failure_after_the_hand_back_retries_without_the_child(backend: Backend) -> None:
    """A crash-like failure in the node the child handed to: invoking the thread again runs
    that node only (the child's Command came back from the parent's checkpoint)."""
    ran: list[str] = []
    fail = [True]

    class Flaky(Node):
        class In(Schema):
            owner: str

        class Out(Schema):
            log: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            if fail[0]:
                fail[0] = False
                raise ConnectionError("down once")
            return self.Out(log=[f"{inp.owner} done"])

    g = Graph(Desk).add(_team(ran, goto="Flaky"), destinations=("Flaky",)).add(Flaky)
    app = g.edge(START, "Alice").edge("Flaky", END).compile()
    with pytest.raises(ConnectionError):
        await app.invoke({"ticket": "escalate: disk"}, thread_id="t", backend=backend)
    out = await app.invoke(thread_id="t", backend=backend)
    assert out.log == ["looked up escalate: disk", "bob done"]
    assert ran == ["triage", "lookup"]


async def test_a_hand_back_beside_a_sibling_in_one_parent_superstep(backend: Backend) -> None:
    """A sibling fails in the superstep where the child hands back: the retry still routes
    to the handed-to node, and the child's effect ran once (if the failure cancelled the
    subgraph node, its child resumes and its node replays the journaled effect)."""
    ran: list[str] = []
    fail = [True]

    class Sibling(Node):
        class Out(Schema):
            log: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            if fail[0]:
                fail[0] = False
                raise ConnectionError("down once")
            return self.Out(log=["sibling"])

    g = Graph(Desk).add(_team(ran), destinations=("Bob",)).add(Bob).add(Sibling)
    app = g.edge(START, "Alice").edge(START, "Sibling").edge("Bob", END).compile()
    with pytest.raises(ConnectionError):
        await app.invoke({"ticket": "escalate: mail"}, thread_id="t", backend=backend)
    out = await app.invoke(thread_id="t", backend=backend)
    assert sorted(out.log) == ["bob took it as bob", "looked up escalate: mail", "sibling"]
    assert ran.count("lookup") == 1 and "solve" not in ran


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
async def test_a_hand_back_in_every_durability_mode(backend: Backend, durability: str) -> None:
    ran: list[str] = []
    out = await _desk(ran).invoke(
        {"ticket": "escalate: modes"}, thread_id="t", backend=backend, durability=durability
    )
    assert out.log == ["looked up escalate: modes", "bob took it as bob"]
    state = await _desk(ran).aget_state("t", backend)
    assert state.owner == "bob" and run_info(state).status == "completed"


# -- LangGraph's tests, ported -------------------------------------------------------------------


async def test_langgraph_parent_command(backend: Backend) -> None:
    # Mirrors LangGraph tests/test_pregel.py::test_parent_command: a node (a tool there) in a
    # subgraph returns Command(update={"user_name": "Meow"}, graph=Command.PARENT); the parent
    # gets the key the child does not have, the child's own input is not written back again,
    # and the parent's state after it shows nothing next (here: completed).
    class Messages(Schema):
        messages: Annotated[list[str], Reducer(operator.add)] = []

    class GetUserName(Node):
        async def run(self, ctx: Context, inp: Any) -> Any:
            return Command(update={"user_name": "Meow"}, graph=Command.PARENT)

    sub = Graph(Messages, name="alice").add(GetUserName, name="tool").edge(START, "tool")

    class CustomParentState(Schema):
        messages: Annotated[list[str], Reducer(operator.add)] = []
        user_name: str = ""  # not available to the child graph

    app = Graph(CustomParentState).add(sub.compile()).edge(START, "alice").compile()
    out = await app.invoke({"messages": ["get user name"]}, thread_id="1", backend=backend)
    assert out.model_dump() == {"messages": ["get user name"], "user_name": "Meow"}
    state = await app.aget_state("1", backend)
    assert state.model_dump() == {"messages": ["get user name"], "user_name": "Meow"}
    assert run_info(state).status == "completed"


async def test_langgraph_parent_command_from_nested_subgraph() -> None:
    # Mirrors LangGraph's test_parent_command_from_nested_subgraph: a parent node invokes
    # two child graphs in turn (run_subgraph here); the one whose input says "jump" hands the
    # run to the parent's second node, so the parent node's code after it never runs.
    class ParentState(Schema):
        jump_from_idx: int

    class ChildState(Schema):
        jump: bool

    class ChildNode(Node):
        class In(Schema):
            jump: bool

        async def run(self, ctx: Context, inp: Any) -> Any:
            if inp.jump:
                return Command(graph=Command.PARENT, goto="parent_second")
            return None

    child_0 = Graph(ChildState, name="child_0").add(ChildNode, name="node")
    child_0 = child_0.edge(START, "node").compile()
    child_1 = Graph(ChildState, name="child_1").add(ChildNode, name="node")
    child_1 = child_1.edge(START, "node").compile()

    class ParentFirst(Node):
        destinations = ("parent_second",)

        class In(Schema):
            jump_from_idx: int

        async def run(self, ctx: Context, inp: Any) -> Any:
            await run_subgraph(child_0, {"jump": inp.jump_from_idx == 1}, ctx, name="c0")
            if inp.jump_from_idx == 1:
                raise AssertionError("Shouldn't be here")
            await run_subgraph(child_1, {"jump": inp.jump_from_idx == 2}, ctx, name="c1")
            if inp.jump_from_idx == 2:
                raise AssertionError("Shouldn't be here")
            return None

    second: list[int] = []

    class ParentSecond(Node):
        class In(Schema):
            jump_from_idx: int

        async def run(self, ctx: Context, inp: Any) -> Any:
            second.append(inp.jump_from_idx)
            return None

    g = Graph(ParentState).add(ParentFirst, name="parent_first")
    g = g.add(ParentSecond, name="parent_second")
    graph = g.edge(START, "parent_first").edge("parent_second", END).compile()
    assert (await graph.invoke({"jump_from_idx": 1})).model_dump() == {"jump_from_idx": 1}
    assert (await graph.invoke({"jump_from_idx": 2})).model_dump() == {"jump_from_idx": 2}
    assert second == [1, 2]


# -- on an executor ------------------------------------------------------------------------------


class _Pickling(Executor):
    """Every call in one batch, through the seam and a pickle round trip each way (what
    crosses to a worker process)."""

    name = "pickling"

    async def run(self, graph: GraphSpec, work: Superstep) -> AsyncIterator[list[TaskOutcome]]:
        outcomes = await run_calls(graph, pickle.loads(pickle.dumps(work)))
        for outcome in outcomes:
            if outcome.error is not None:
                outcome.error = portable_error(outcome.error)
        yield pickle.loads(pickle.dumps(outcomes))


async def test_a_hand_back_from_a_child_whose_nodes_ran_on_the_workers(backend: Backend) -> None:
    """A subgraph node sent with ``Send`` on an executor: every node of its child runs on the
    workers, and the hand-back crosses back like an outcome, then routes the parent."""
    ran: list[str] = []

    class Tickets(Schema):
        tickets: list[str] = []
        ticket: str = ""
        log: Annotated[list[str], Reducer(operator.add)] = []
        owner: str = ""

    g = Graph(Tickets).add(_team(ran), destinations=("Bob",)).add(Bob)
    g.router(START, lambda s: [Send("Alice", {"ticket": t}) for t in s.tickets])
    app = g.edge("Bob", END).compile(executor=_Pickling())
    out = await app.invoke({"tickets": ["escalate: one"]}, thread_id="t", backend=backend)
    assert out.log == ["looked up escalate: one", "bob took it as bob"]
    assert out.owner == "bob"
