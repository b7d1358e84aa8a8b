"""Editing state at a checkpoint (``update_state``) and static breakpoints
(``interrupt_before`` / ``interrupt_after``), on the in-memory and SQLite stores.

Several tests are ports of LangGraph's own tests (``libs/langgraph/tests/test_pregel.py``);
each says which one it mirrors, reduced to the behaviour TensorSketch shares.
"""

from __future__ import annotations

import asyncio
import operator
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest

from tensorsketch import END, START, Context, Graph, InMemoryBackend, Node, Reducer, Schema
from tensorsketch.errors import GraphValidationError, ThreadBusyError
from tensorsketch.interrupts import interrupt, run_info
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.testing.crash import CrashingBackend, SimulatedCrash


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
    # every pass through the node stops again — the last one too, whose barrier plans
    # nothing — and each stop has its own id.
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
    assert out.log == ["loop", "loop", "loop"] and ran == ["loop", "loop", "loop"]
    assert ids == ["breakpoint:after:0", "breakpoint:after:1", "breakpoint:after:2"]


async def test_interrupt_after_the_last_node_suspends_with_nothing_next(backend: Backend) -> None:
    # Mirrors LangGraph's test_conditional_graph (the interrupt_after=["agent"] part, whose
    # last get_state shows the finished agent with next=()): LangGraph checks interrupt_after
    # in PregelLoop.after_tick once the superstep is checkpointed, whether or not anything
    # runs next, so the node that ends the run stops it too; invoke(None) then just ends it.
    ran: list[str] = []
    app = chain(ran, interrupt_after=["report"])
    events = [e async for e in app.stream({"topic": "x"}, thread_id="t", backend=backend)]
    kinds = [e.type for e in events]
    assert kinds[-1] == "interrupt" and "run_end" not in kinds
    assert events[-1].data["interrupts"][0]["value"] == {"when": "after", "nodes": ["report"]}
    stored = await app.aget_state("t", backend)
    assert stored is not None and stored.log == ["plan", "act", "report"]
    info = run_info(stored)
    assert info.suspended and info.awaiting == []
    assert info.breakpoint is not None and info.breakpoint.node == "report"
    history = await app.aget_history("t", backend)
    assert history[-1].next == ()

    # the stop can be edited like any other; the edit keeps it
    edited = await app.aupdate_state("t", backend, {"plan": "edited"})
    assert run_info(edited).suspended and edited.plan == "edited"

    rest = [e async for e in app.stream(thread_id="t", backend=backend)]
    assert [e.type for e in rest if e.type == "run_end"] == ["run_end"]
    assert not [e for e in rest if e.type in ("node_start", "node_end")]  # nothing re-ran
    assert ran == ["plan", "act", "report"]
    done = await app.aget_state("t", backend)
    assert done is not None and run_info(done).status == "completed"
    assert done.plan == "edited" and done.log == ["plan", "act", "report"]
    # the durable log has run_end once: at the resumed run's end, not at the stop
    logged = [e.type async for e in app.replay("t", backend)]
    assert logged.count("run_end") == 1 and logged[-1] == "run_end"

    # invoking the completed thread again without input runs nothing and stays completed
    again = await app.invoke(thread_id="t", backend=backend)
    assert run_info(again).status == "completed" and ran == ["plan", "act", "report"]


async def test_stepping_with_interrupt_after_every_node_ends_cleanly(backend: Backend) -> None:
    # What the Studio's "step" does: interrupt_after all nodes and one superstep per call.
    # Each step stops after its node; the step after the last node completes the thread.
    ran: list[str] = []
    app = chain(ran)
    stops: list[str | None] = []
    out = await app.invoke({"topic": "x"}, thread_id="t", backend=backend, interrupt_after="*")
    while run_info(out).suspended:
        stop = run_info(out).breakpoint
        stops.append(stop.node if stop is not None else None)
        out = await app.invoke(thread_id="t", backend=backend, max_steps=1, interrupt_after="*")
    assert stops == ["plan", "act", "report"]
    assert run_info(out).status == "completed" and ran == ["plan", "act", "report"]
    assert out.log == ["plan", "act", "report"]


async def test_interrupt_after_the_last_node_survives_crashes_around_the_stop(
    backend: Backend,
) -> None:
    # The stop is recorded by the superstep's own checkpoint (no separate write to lose): a
    # process that dies right after it leaves a suspended thread, and one that dies in the
    # resumed run before its closing checkpoint leaves it suspended still. Each time the next
    # process ends the run without running a node again.
    ran: list[str] = []
    app = chain(ran, interrupt_after=["report"])
    counted = CrashingBackend(InMemoryBackend(), crash_at=0, mode="raise")
    await app.invoke({"topic": "x"}, thread_id="t", backend=counted)
    stop_at = len(counted.boundaries)  # the last boundary: the stop's checkpoint
    ran.clear()

    backend.lease_ttl = 0.2  # the dead process's lease lapses quickly
    first = CrashingBackend(backend, crash_at=stop_at, mode="raise")
    with pytest.raises(SimulatedCrash):
        await app.invoke({"topic": "x"}, thread_id="t", backend=first)
    stored = await app.aget_state("t", backend)
    assert stored is not None and run_info(stored).suspended
    assert ran == ["plan", "act", "report"]

    second = CrashingBackend(backend, crash_at=1, mode="raise")  # dies once it has the lease
    with pytest.raises(SimulatedCrash):
        await app.invoke(thread_id="t", backend=second)
    assert second.boundaries == ["lease"]
    stored = await app.aget_state("t", backend)
    assert stored is not None and run_info(stored).suspended

    for _ in range(200):  # until the dead process's lease lapses
        try:
            done = await app.invoke(thread_id="t", backend=backend)
            break
        except ThreadBusyError:
            await asyncio.sleep(0.05)
    else:
        pytest.fail("the crashed run's lease never lapsed")
    assert run_info(done).status == "completed"
    assert ran == ["plan", "act", "report"] and done.log == ["plan", "act", "report"]


async def test_interrupt_after_the_last_node_without_a_store_suspends_the_call() -> None:
    ran: list[str] = []
    out = await chain(ran, interrupt_after=["report"]).invoke({})
    assert run_info(out).suspended and ran == ["plan", "act", "report"]
    assert out.log == ["plan", "act", "report"]


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


# -- update_state ---------------------------------------------------------------------------------


async def test_update_state_goes_through_reducers_and_continues(backend: Backend) -> None:
    # Mirrors LangGraph's test_conditional_graph (update_state at the interrupt_before stop,
    # then invoke(None) continues with the edited state): a reducer field appends.
    ran: list[str] = []
    app = chain(ran, interrupt_before=["act"])
    await app.invoke({"topic": "x"}, thread_id="t", backend=backend)
    before = await app.aget_history("t", backend)
    edited = await app.aupdate_state("t", backend, {"plan": "fixed", "log": ["human"]})
    assert edited.plan == "fixed" and edited.log == ["plan", "human"]
    history = await app.aget_history("t", backend)
    assert len(history) == len(before) + 1
    assert history[-1].parent_id == before[-1].id
    assert history[-1].source == "update"
    assert history[-1].next == ("act",)  # the pending plan stays
    assert run_info(edited).suspended  # ... and so does the breakpoint
    assert run_info(edited).checkpoint_id == history[-1].id

    done = await app.invoke(thread_id="t", backend=backend)
    assert done.plan == "fixed"  # act read the edited plan
    assert done.log == ["plan", "human", "act", "report"]
    assert ran == ["plan", "act", "report"]


async def test_update_state_as_node_runs_its_successors_next(backend: Backend) -> None:
    # Mirrors LangGraph's test_conditional_graph (update_state(..., as_node="agent") at the
    # interrupt_after stop): the edit stands for the node's output; its successors run next.
    ran: list[str] = []
    app = chain(ran, interrupt_before=["act"])
    await app.invoke({"topic": "x"}, thread_id="t", backend=backend)
    edited = await app.aupdate_state("t", backend, {"log": ["act by hand"]}, as_node="act")
    assert run_info(edited).status == "pending"
    assert (await app.aget_history("t", backend))[-1].next == ("report",)
    done = await app.invoke(thread_id="t", backend=backend)
    assert done.log == ["plan", "act by hand", "report"]
    assert ran == ["plan", "report"]  # act itself never ran


async def test_update_state_as_node_routes_on_the_edited_state(backend: Backend) -> None:
    # Mirrors LangGraph's test_start_branch_then (update_state as_node before a conditional
    # edge decides the branch).
    ran: list[str] = []

    def where(state: Work) -> str:
        return "report" if state.plan == "skip" else "act"

    app = (
        Graph(Work)
        .add(step("plan", ran))
        .add(step("act", ran))
        .add(step("report", ran))
        .edge(START, "plan")
        .conditional("plan", where, ["act", "report"])
        .edge("act", "report")
        .edge("report", END)
        .compile(interrupt_before=["plan"])
    )
    await app.invoke({}, thread_id="t", backend=backend)
    await app.aupdate_state("t", backend, {"plan": "skip"}, as_node="plan")
    done = await app.invoke(thread_id="t", backend=backend)
    assert ran == ["report"] and done.log == ["report"]


async def test_update_state_on_a_new_thread_starts_it(backend: Backend) -> None:
    # Mirrors LangGraph's test_update_as_input (update_state on an empty thread, then invoke).
    ran: list[str] = []
    app = chain(ran)
    edited = await app.aupdate_state("new", backend, {"topic": "seeded"})
    assert edited.topic == "seeded" and run_info(edited).status == "pending"
    done = await app.invoke(thread_id="new", backend=backend)
    assert done.topic == "seeded" and ran == ["plan", "act", "report"]


def test_update_state_sync_form(backend: Backend) -> None:
    app = chain([], interrupt_after=["plan"])
    import asyncio

    asyncio.run(app.invoke({}, thread_id="t", backend=backend))
    state = app.update_state("t", backend, {"plan": "edited"})
    assert state.plan == "edited"
    got = app.get_state("t", backend)
    assert got is not None and got.plan == "edited"


async def test_update_state_teaches_on_bad_values() -> None:
    backend = InMemoryBackend()
    app = chain([])
    await app.invoke({}, thread_id="t", backend=backend)
    with pytest.raises(ValueError, match=r"'plna' is not a field of Work — did you mean 'plan'"):
        await app.aupdate_state("t", backend, {"plna": "x"})
    with pytest.raises(ValueError, match=r"'log': Input should be a valid list"):
        await app.aupdate_state("t", backend, {"log": 5})
    with pytest.raises(ValueError, match=r"as_node='akt'.*did you mean 'act'"):
        await app.aupdate_state("t", backend, {"plan": "x"}, as_node="akt")
    with pytest.raises(TypeError, match="update_state\\(\\) takes a dict of Work fields"):
        await app.aupdate_state("t", backend, ["plan"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="thread_id must be a str"):
        await app.aupdate_state(7, backend, {})  # type: ignore[arg-type]
    # nothing was written by the refused edits, and the lease was given back
    assert len(await app.aget_history("t", backend)) == 4
    assert await backend.acquire_lease("t", "someone", 5)


async def test_update_state_respects_the_thread_lease(backend: Backend) -> None:
    app = chain([])
    await app.invoke({}, thread_id="t", backend=backend)
    assert await backend.acquire_lease("t", "another-process", 30)
    with pytest.raises(ThreadBusyError, match="thread 't' is being run by another process"):
        await app.aupdate_state("t", backend, {"plan": "x"})
    assert len(await app.aget_history("t", backend)) == 4


async def test_update_state_keeps_a_question_pending(backend: Backend) -> None:
    # Mirrors LangGraph's test_dynamic_interrupt (update_state while a node's interrupt()
    # waits, then resume with the answer): the edit does not drop what the run waits on.
    class Ask(Node):
        class In(Schema):
            plan: str = ""

        class Out(Schema):
            log: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            answer = await interrupt(ctx, "ok?")
            return self.Out(log=[f"{inp.plan}: {answer}"])

    app = Graph(Work).add(Ask).edge(START, "Ask").edge("Ask", END).compile()
    out = await app.invoke({}, thread_id="t", backend=backend)
    [key] = run_info(out).awaiting
    edited = await app.aupdate_state("t", backend, {"plan": "edited"})
    assert run_info(edited).awaiting == [key]
    done = await app.invoke(thread_id="t", backend=backend, resume={key: "yes"})
    assert done.log == ["edited: yes"]


class Fix(Work):
    fixed: bool = False


class Other(Schema):
    topic: str = ""


def flaky_fanout(ran: list[str]) -> Any:
    """START -> (steady, flaky) in one superstep; flaky fails until ``fixed`` is set."""

    class Steady(Node):
        class In(Schema):
            topic: str = ""

        class Out(Schema):
            log: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            ran.append("steady")
            return self.Out(log=["steady"])

    class Flaky(Node):
        class In(Schema):
            fixed: bool = False

        class Out(Schema):
            log: list[str]

        async def run(self, ctx: Context, inp: Any) -> Any:
            ran.append("flaky")
            if not inp.fixed:
                raise RuntimeError("needs fixing")
            return self.Out(log=["flaky"])

    return (
        Graph(Fix)
        .add(Steady)
        .add(Flaky)
        .edge(START, "Steady")
        .edge(START, "Flaky")
        .edge("Steady", END)
        .edge("Flaky", END)
        .compile()
    )


async def test_update_state_on_a_failed_superstep_keeps_its_error(backend: Backend) -> None:
    # Mirrors LangGraph's test_update_state on a thread whose task errored: the edit is the
    # fix, the retry afterwards runs only the task that failed.
    ran: list[str] = []
    app = flaky_fanout(ran)
    with pytest.raises(RuntimeError, match="needs fixing"):
        await app.invoke({}, thread_id="t", backend=backend)
    failed = await app.aget_state("t", backend)
    assert failed is not None and run_info(failed).failed
    error = run_info(failed).error
    assert error is not None and error["node"] == "Flaky" and "needs fixing" in error["message"]
    edited = await app.aupdate_state("t", backend, {"fixed": True})
    # Not retried yet: still failed, with the same error, and the plan is the same superstep.
    assert run_info(edited).failed and run_info(edited).error == error
    assert (await app.aget_history("t", backend))[-1].next == ("Steady", "Flaky")
    done = await app.invoke(thread_id="t", backend=backend)
    assert run_info(done).status == "completed"
    assert sorted(done.log) == ["flaky", "steady"]
    assert ran == ["steady", "flaky", "flaky"]  # steady had finished: its write was kept


async def test_update_state_as_node_moves_past_a_failed_superstep(backend: Backend) -> None:
    ran: list[str] = []
    app = flaky_fanout(ran)
    with pytest.raises(RuntimeError):
        await app.invoke({}, thread_id="t", backend=backend)
    edited = await app.aupdate_state("t", backend, {"log": ["by hand"]}, as_node="Flaky")
    assert run_info(edited).error is None and not run_info(edited).failed


async def test_invoke_and_update_state_refuse_the_same_mistakes_alike() -> None:
    backend = InMemoryBackend()
    app = chain([])
    await app.invoke({}, thread_id="t", backend=backend)
    for call, where in (
        (lambda v: app.invoke(v, thread_id="t", backend=backend), "invoke()"),
        (lambda v: app.aupdate_state("t", backend, v), "update_state()"),
    ):
        with pytest.raises(ValueError) as unknown:
            await call({"plna": "x", "log": 5})
        assert str(unknown.value) == (
            f"{where} got invalid values: 'plna' is not a field of Work — did you mean "
            "'plan'?; 'log': Input should be a valid list (got 5)"
        )
        with pytest.raises(TypeError, match=rf"{re.escape(where)} takes a dict of Work fields"):
            await call(["plan"])
        with pytest.raises(
            TypeError, match=r"got a Other instance, but this graph's state is Work"
        ):
            await call(Other())
