"""Static breakpoints (``interrupt_before`` / ``interrupt_after``), on the in-memory and
SQLite stores.

Several tests are ports of LangGraph's own tests (``libs/langgraph/tests/test_pregel.py``);
each says which one it mirrors, reduced to the behaviour TensorSketch shares.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest

from tensorsketch import END, START, Context, Graph, InMemoryBackend, Node, Reducer, Schema
from tensorsketch.errors import GraphValidationError
from tensorsketch.interrupts import run_info
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.sqlite import SqliteBackend


class Work(Schema):
    topic: str = ""
    plan: str = ""
    log: Annotated[list[str], Reducer(operator.add)] = []


def step(name: str, ran: list[str]) -> type[Node]:
    """A node that appends its name to ``log`` (and to ``ran``, to count real executions)."""

    class Step(Node):
        class In(Schema):
            plan: str = ""

        class Out(Schema):
            log: list[str]
            plan: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            ran.append(name)
            return self.Out(log=[name], plan=inp.plan or f"{name}-plan")

    Step.__name__ = Step.__qualname__ = name
    return Step


def chain(ran: list[str], **options: Any) -> Any:
    """plan -> act -> report, compiled with ``options``."""
    return (
        Graph(Work)
        .add(step("plan", ran))
        .add(step("act", ran))
        .add(step("report", ran))
        .edge(START, "plan")
        .edge("plan", "act")
        .edge("act", "report")
        .edge("report", END)
        .compile(**options)
    )


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "memory":
        yield InMemoryBackend()
    else:
        yield SqliteBackend(tmp_path / "store.db")


# -- static breakpoints -------------------------------------------------------------------------


async def test_interrupt_before_suspends_at_the_barrier_and_resume_continues(
    backend: Backend,
) -> None:
    # Mirrors LangGraph's test_conditional_graph (the interrupt_before=["tools"] part):
    # the run stops before the node, get_state shows where, invoke(None) continues.
    ran: list[str] = []
    app = chain(ran, interrupt_before=["act"])
    out = await app.invoke({"topic": "x"}, thread_id="t", backend=backend)
    info = run_info(out)
    assert info.suspended and info.awaiting == []
    stop = info.breakpoint
    assert stop is not None
    assert (stop.kind, stop.node, stop.value) == (
        "breakpoint",
        "act",
        {"when": "before", "nodes": ["act"]},
    )
    assert ran == ["plan"] and out.log == ["plan"]
    stored = await app.aget_state("t", backend)
    assert stored is not None and run_info(stored).suspended
    assert run_info(stored).breakpoint == stop
    assert (await app.aget_history("t", backend))[-1].next == ("act",)

    done = await app.invoke(thread_id="t", backend=backend)
    assert run_info(done).status == "completed"
    assert ran == ["plan", "act", "report"]
    assert done.log == ["plan", "act", "report"]


async def test_interrupt_after_stops_after_the_nodes_barrier(backend: Backend) -> None:
    # Mirrors LangGraph's test_invoke_two_processes_in_out_interrupt (interrupt_after_nodes=
    # ["one"]): the node's writes are checkpointed, the next node waits, resuming runs it.
    ran: list[str] = []
    app = chain(ran, interrupt_after=["plan"])
    out = await app.invoke({"topic": "x"}, thread_id="t", backend=backend)
    stop = run_info(out).breakpoint
    assert stop is not None and stop.value == {"when": "after", "nodes": ["plan"]}
    assert out.plan == "plan-plan" and ran == ["plan"]
    assert (await app.aget_history("t", backend))[-1].next == ("act",)
    done = await app.invoke(thread_id="t", backend=backend)
    assert done.log == ["plan", "act", "report"] and ran == ["plan", "act", "report"]


async def test_a_breakpoint_stops_each_time_the_node_is_reached(backend: Backend) -> None:
    # Mirrors LangGraph's test_conditional_state_graph (interrupt_after=["agent"] in a loop):
    # every pass through the node stops again, and each stop has its own id.
    ran: list[str] = []

    def again(state: Work) -> str:
        return "loop" if len(state.log) < 3 else END

    app = (
        Graph(Work)
        .add(step("loop", ran))
        .edge(START, "loop")
        .conditional("loop", again)
        .compile(interrupt_after=["loop"])
    )
    out = await app.invoke({}, thread_id="t", backend=backend)
    ids = [run_info(out).interrupts[0].id]
    while run_info(out).suspended:
        out = await app.invoke(thread_id="t", backend=backend)
        if run_info(out).suspended:
            ids.append(run_info(out).interrupts[0].id)
    assert out.log == ["loop", "loop", "loop"]
    assert ids == ["breakpoint:after:0", "breakpoint:after:1"]  # the last pass ends the run


async def test_breakpoints_given_per_invoke_replace_the_compiled_ones(backend: Backend) -> None:
    # Mirrors LangGraph's test_invoke_two_processes_in_out_interrupt (interrupt_before passed
    # to invoke instead of compile).
    ran: list[str] = []
    app = chain(ran, interrupt_before=["act"])
    out = await app.invoke(
        {"topic": "x"}, thread_id="t", backend=backend, interrupt_before=["report"]
    )
    assert run_info(out).breakpoint is not None
    assert run_info(out).breakpoint.node == "report"  # type: ignore[union-attr]
    assert ran == ["plan", "act"]
    # [] turns the compiled breakpoints off for one call
    again = await app.invoke({"topic": "y"}, thread_id="u", backend=backend, interrupt_before=[])
    assert run_info(again).status == "completed" and again.log == ["plan", "act", "report"]


async def test_breakpoints_stream_an_interrupt_event(backend: Backend) -> None:
    ran: list[str] = []
    app = chain(ran, interrupt_before=["report"])
    events = [e async for e in app.stream({"topic": "x"}, thread_id="t", backend=backend)]
    kinds = [e.type for e in events]
    assert kinds[-1] == "interrupt" and "run_end" not in kinds
    assert events[-1].data["interrupts"][0]["value"] == {"when": "before", "nodes": ["report"]}
    rest = [e.type async for e in app.stream(thread_id="t", backend=backend)]
    assert rest[-1] == "run_end" and ran == ["plan", "act", "report"]


async def test_resume_with_a_decision_for_a_breakpoint_says_to_just_invoke() -> None:
    backend = InMemoryBackend()
    app = chain([], interrupt_before=["act"])
    out = await app.invoke({}, thread_id="t", backend=backend)
    key = run_info(out).interrupts[0].id
    with pytest.raises(ValueError, match="needs no decision: invoke the thread again"):
        await app.invoke(thread_id="t", backend=backend, resume={key: True})


def test_breakpoint_names_are_checked_at_compile_time() -> None:
    with pytest.raises(GraphValidationError) as caught:
        chain([], interrupt_before=["akt"], interrupt_after=["nope"])
    text = str(caught.value)
    assert "interrupt_before= names 'akt', which is not a node — did you mean 'act'?" in text
    assert "interrupt_after= names 'nope'" in text and "2 problems" in text
    with pytest.raises(GraphValidationError, match="takes a list of node names"):
        chain([], interrupt_before=3)
    assert chain([], interrupt_after="*").spec.interrupt_after == {"plan", "act", "report"}


async def test_breakpoint_names_are_checked_per_invoke() -> None:
    app = chain([])
    with pytest.raises(ValueError, match=r"interrupt_after= names 'reprot'.*did you mean 'report'"):
        await app.invoke({}, interrupt_after=["reprot"])


async def test_a_breakpoint_without_a_store_suspends_the_call() -> None:
    ran: list[str] = []
    out = await chain(ran, interrupt_before=["act"]).invoke({})
    assert run_info(out).suspended and ran == ["plan"]
