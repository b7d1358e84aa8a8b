"""Subgraphs as nodes: ``Graph.add(compiled_graph)``.

Several tests mirror LangGraph's own subgraph tests (``libs/langgraph/tests/test_pregel*.py``),
ported to this API; each names the test it mirrors.
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any

import pytest

from tensorsketch import (
    END,
    START,
    Context,
    Graph,
    GraphValidationError,
    InMemoryBackend,
    Node,
    Reducer,
    Schema,
    Send,
    run_info,
)
from tensorsketch.errors import ForkEffectError
from tensorsketch.interrupts import interrupt
from tensorsketch.runtime.backends.sqlite import SqliteBackend

EFFECTS: list[str] = []


@pytest.fixture(autouse=True)
def _clear_effects() -> None:
    EFFECTS.clear()


# -- a research subgraph: shares `question` and `notes`, keeps `draft` to itself -------------


class Research(Schema):
    question: str
    notes: Annotated[list[str], Reducer(operator.add)] = []
    draft: str = ""


class Search(Node):
    class In(Schema):
        question: str

    class Out(Schema):
        notes: list[str]
        draft: str

    async def run(self, ctx: Context, inp: In) -> Out:
        hit = await ctx.step("search", lambda: _effect(f"searched {inp.question}"))
        return self.Out(notes=[hit], draft="private draft")


def _effect(text: str) -> str:
    EFFECTS.append(text)
    return text


def research_graph() -> Graph[Research]:
    return Graph(Research, name="Research").add(Search).edge(START, "Search").edge("Search", END)


class Main(Schema):
    question: str
    notes: Annotated[list[str], Reducer(operator.add)] = []
    answer: str = ""


class Write(Node):
    class In(Schema):
        notes: list[str]

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(answer=" | ".join(inp.notes))


def main_graph(child: Any) -> Graph[Main]:
    g = Graph(Main).add(child).add(Write)
    return g.edge(START, "Research").edge("Research", "Write").edge("Write", END)


async def test_shared_fields_flow_in_and_back_private_fields_stay_inside() -> None:
    """Mirrors ``test_nested_graph`` (state shared by name between parent and child)."""
    app = main_graph(research_graph().compile()).compile()
    out = await app.invoke({"question": "tides", "notes": ["seed"]})
    assert out.notes == ["seed", "searched tides"]  # the reducer got the child's append once
    assert out.answer == "seed | searched tides"
    assert "draft" not in Main.model_fields and not hasattr(out, "draft")
    builder = await main_graph(research_graph()).compile().invoke({"question": "q"})
    assert builder.notes == ["searched q"]  # a Graph builder is compiled when added


@pytest.mark.parametrize(("effects", "again"), [(None, None), ("reuse", 0), ("rerun", 1)])
async def test_a_fork_checks_a_subgraphs_effects_against_the_origins(
    tmp_path: Path, effects: Any, again: int | None
) -> None:
    """#47: the subgraph's own thread of a fork follows the fork's choice for the effects
    the origin's subgraph ran."""
    backend = SqliteBackend(tmp_path / "runs.db")
    app = main_graph(research_graph().compile()).compile()
    await app.invoke({"question": "q"}, thread_id="t", backend=backend)
    start = (await app.aget_history("t", backend))[0]
    EFFECTS.clear()
    if again is None:
        with pytest.raises(ForkEffectError, match=r"ctx\.step 'search'"):
            await app.fork(backend, "t", start.id, "f")
        assert EFFECTS == []
    else:
        out = await app.fork(backend, "t", start.id, "f", effects=effects)
        assert out.answer == "searched q" and len(EFFECTS) == again
    await backend.aclose()


async def test_a_durable_subgraph_checkpoints_on_a_child_thread_of_the_parent(
    tmp_path: Path,
) -> None:
    """Mirrors ``test_subgraph_checkpoint_true`` (the child keeps its own checkpoints)."""
    backend = SqliteBackend(tmp_path / "runs.db")
    app = main_graph(research_graph().compile()).compile()
    await app.invoke({"question": "q"}, thread_id="t", backend=backend)
    threads = sorted(await backend.list_threads())
    assert threads == ["t", "t/0:Research:0:subgraph"]
    child = research_graph().compile()
    history = child.get_history("t/0:Research:0:subgraph", backend)
    assert history and history[-1].values["draft"] == "private draft"


# -- different schemas: a mapping ------------------------------------------------------------


class Ticket(Schema):
    subject: str
    findings: Annotated[list[str], Reducer(operator.add)] = []
    summary: str = ""


class Summarize(Node):
    class In(Schema):
        notes: list[str]

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(answer=f"{len(inp.notes)} note(s)")


async def test_fields_of_other_names_are_mapped() -> None:
    """Mirrors ``test_nested_graph_state_with_different_schemas`` (parent and child schemas
    differ; the mapping names which field feeds which)."""
    research = (
        Graph(Research, name="Research")
        .add(Search)
        .edge(START, "Search")
        .edge("Search", END)
        .compile()
    )
    g = Graph(Ticket).add(
        research,
        inputs={"question": "subject"},
        outputs={"notes": "findings", "draft": "summary"},
    )
    out = await g.edge(START, "Research").edge("Research", END).compile().invoke({"subject": "s"})
    assert out.findings == ["searched s"] and out.summary == "private draft"


def test_a_mapping_that_names_no_field_or_a_wrong_type_is_a_compile_error() -> None:
    research = research_graph().compile()
    g = Graph(Ticket).add(research, inputs={"questoin": "subject"}, outputs={"notes": "find"})
    with pytest.raises(GraphValidationError) as info:
        g.edge(START, "Research").edge("Research", END).compile()
    text = str(info.value)
    assert "maps 'questoin', which is not a field of Research — did you mean 'question'?" in text
    assert "maps 'notes' to 'find', which is not a field of Ticket" in text

    class Numbers(Schema):
        question: int  # the child reads a str

    with pytest.raises(GraphValidationError, match=r"reads `question: str`, but Numbers"):
        Graph(Numbers).add(research).edge(START, "Research").compile()
    with pytest.raises(TypeError, match="maps the fields of a subgraph"):
        Graph(Main).add(Write, inputs={"a": "b"})


# -- interrupts, approvals and breakpoints inside -------------------------------------------


class Draft(Schema):
    foo: str = ""


class SetFoo(Node):
    class Out(Schema):
        foo: str

    async def run(self, ctx: Context, inp: Any) -> Out:
        await ctx.step("set", lambda: _effect("set"))
        return self.Out(foo="Initial.")


class AskFoo(Node):
    class In(Schema):
        foo: str

    class Out(Schema):
        foo: str

    async def run(self, ctx: Context, inp: In) -> Out:
        value = await interrupt(ctx, "Provide value:")
        return self.Out(foo=inp.foo + value)


def asking() -> Any:
    g = Graph(Draft, name="Inner").add(SetFoo).add(AskFoo)
    return g.edge(START, "SetFoo").edge("SetFoo", "AskFoo").edge("AskFoo", END).compile()


class Outer(Schema):
    foo: str = ""
    seen: str = ""


class Look(Node):
    class In(Schema):
        foo: str

    class Out(Schema):
        seen: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(seen=f"saw {inp.foo}")


def outer(child: Any) -> Any:
    g = Graph(Outer).add(child).add(Look)
    return g.edge(START, child.name).edge(child.name, "Look").edge("Look", END)


async def test_an_interrupt_inside_a_subgraph_suspends_the_parent_and_resume_reaches_it() -> None:
    """Mirrors ``test_nested_graph_interrupts``."""
    backend = InMemoryBackend()
    app = outer(asking()).compile()
    out = await app.invoke({"foo": "x"}, thread_id="t", backend=backend)
    (pending,) = run_info(out).interrupts
    assert pending.id == "Inner/1:AskFoo:0:interrupt" and pending.path == ("Inner",)
    assert pending.node == "AskFoo" and out.seen == ""
    done = await app.invoke(thread_id="t", backend=backend, resume={pending.id: " yes"})
    assert done.foo == "Initial. yes" and done.seen == "saw Initial. yes"
    assert EFFECTS == ["set"]  # the child's effect before the interrupt ran once


async def test_interrupts_two_levels_deep_resume_twice() -> None:
    """Mirrors ``test_doubly_nested_graph_interrupts``; the inner child suspends twice."""

    class AskTwice(Node):
        class In(Schema):
            foo: str

        class Out(Schema):
            foo: str

        async def run(self, ctx: Context, inp: In) -> Out:
            first = await interrupt(ctx, "first?")
            second = await interrupt(ctx, "second?")
            return self.Out(foo=f"{inp.foo}{first}{second}")

    inner = Graph(Draft, name="Inner").add(SetFoo).add(AskTwice)
    inner.edge(START, "SetFoo").edge("SetFoo", "AskTwice").edge("AskTwice", END)
    middle = Graph(Draft, name="Middle").add(inner.compile())
    middle.edge(START, "Inner").edge("Inner", END)
    app = outer(middle.compile()).compile()
    backend = InMemoryBackend()
    out = await app.invoke({}, thread_id="t", backend=backend)
    (first,) = run_info(out).interrupts
    assert first.path == ("Middle", "Inner") and first.value == "first?"
    out = await app.invoke(thread_id="t", backend=backend, resume={first.id: " a"})
    (second,) = run_info(out).interrupts
    assert second.value == "second?" and second.id != first.id
    out = await app.invoke(thread_id="t", backend=backend, resume={second.id: " b"})
    assert run_info(out).status == "completed" and out.seen == "saw Initial. a b"
    assert EFFECTS == ["set"]


async def test_get_state_with_subgraphs_nests_each_started_childs_state() -> None:
    """Mirrors ``test_nested_graph_state`` (``get_state(subgraphs=True)``)."""
    middle = Graph(Draft, name="Middle").add(asking())
    app = outer(middle.edge(START, "Inner").edge("Inner", END).compile()).compile()
    backend = InMemoryBackend()
    await app.invoke({"foo": "x"}, thread_id="t", backend=backend)
    flat = await app.aget_state("t", backend)
    assert flat is not None and run_info(flat).subgraphs == {}
    state = await app.aget_state("t", backend, subgraphs=True)
    assert state is not None and run_info(state).status == "suspended"
    mid = run_info(state).subgraphs["Middle"]
    inner = run_info(mid).subgraphs["Inner"]
    assert inner.foo == "Initial." and run_info(inner).interrupts[0].value == "Provide value:"
    assert run_info(inner).thread_id == "t/0:Middle:0:subgraph/0:Inner:0:subgraph"
    assert app.get_state("t", backend, subgraphs=True) is not None  # the sync form too


async def test_update_state_inside_a_subgraph_through_its_thread() -> None:
    """Mirrors the ``update_state`` part of ``test_nested_graph_state``: the child's thread
    (from ``get_state(subgraphs=True)``) takes an edit like any thread."""
    inner_app = asking()
    app = outer(inner_app).compile()
    backend = InMemoryBackend()
    out = await app.invoke({}, thread_id="t", backend=backend)
    state = await app.aget_state("t", backend, subgraphs=True)
    assert state is not None
    child_thread = run_info(run_info(state).subgraphs["Inner"]).thread_id
    assert child_thread is not None
    await inner_app.aupdate_state(child_thread, backend, {"foo": "Edited."})
    pending = run_info(out).interrupts[0].id
    done = await app.invoke(thread_id="t", backend=backend, resume={pending: "!"})
    assert done.foo == "Edited.!" and done.seen == "saw Edited.!"


async def test_a_breakpoint_named_inside_a_subgraph_stops_there() -> None:
    middle = Graph(Draft, name="Middle").add(asking())
    app = outer(middle.edge(START, "Inner").edge("Inner", END).compile())
    compiled = app.compile(interrupt_before=["Middle.Inner.AskFoo"])
    backend = InMemoryBackend()
    out = await compiled.invoke({}, thread_id="t", backend=backend)
    stop = run_info(out).breakpoint
    assert stop is not None and stop.path == ("Middle", "Inner") and stop.node == "AskFoo"
    out = await compiled.invoke(thread_id="t", backend=backend)  # past the breakpoint
    assert run_info(out).interrupts[0].kind == "interrupt"
    with pytest.raises(GraphValidationError, match=r"'Middle\.Nope', which is not a node inside"):
        app.compile(interrupt_before=["Middle.Nope"])
    per_call = (
        await outer(asking())
        .compile()
        .invoke({}, thread_id="u", backend=backend, interrupt_after=["Inner.SetFoo"])
    )
    assert run_info(per_call).breakpoint is not None


# -- streaming -------------------------------------------------------------------------------


async def test_stream_with_subgraphs_yields_the_childs_events_under_its_namespace() -> None:
    """Mirrors ``test_stream_subgraphs_during_execution``."""
    app = main_graph(research_graph().compile()).compile()
    plain = [(e.type, e.node, e.namespace) async for e in app.stream({"question": "q"})]
    assert all(ns == () for _, _, ns in plain)
    assert ("node_end", "Research", ()) in plain
    nested = [
        (e.type, e.node, e.namespace) async for e in app.stream({"question": "q"}, subgraphs=True)
    ]
    assert ("node_end", "Search", ("Research:subgraph",)) in nested
    assert [x for x in nested if x[2] == ()] == plain  # the parent's own events are the same


# -- Send to a subgraph node -----------------------------------------------------------------


class Batch(Schema):
    questions: list[str] = []
    question: str = ""
    notes: Annotated[list[str], Reducer(operator.add)] = []


async def test_send_targets_a_subgraph_node_each_instance_in_its_own_namespace() -> None:
    """Mirrors ``test_send_to_nested_graphs``."""

    class Split(Node):
        async def run(self, ctx: Context, inp: Any) -> None:
            return None

    g = Graph(Batch).add(Split).add(research_graph().compile())
    g.edge(START, "Split")
    g.router("Split", lambda s: [Send("Research", {"question": q}) for q in s.questions])
    g.edge("Research", END)
    backend = InMemoryBackend()
    out = await g.compile().invoke({"questions": ["a", "b"]}, thread_id="t", backend=backend)
    assert sorted(out.notes) == ["searched a", "searched b"]
    threads = sorted(await backend.list_threads())
    assert threads == ["t", "t/1:Research#0:0:subgraph", "t/1:Research#1:0:subgraph"]


async def test_two_send_instances_suspended_in_one_subgraph_are_decided_apart() -> None:
    class Split(Node):
        async def run(self, ctx: Context, inp: Any) -> None:
            return None

    class Record(Node):
        class In(Schema):
            foo: str

        async def run(self, ctx: Context, inp: In) -> None:
            await ctx.step("record", lambda: _effect(inp.foo))

    class Many(Schema):
        items: list[str] = []
        item: str = ""

    inner = Graph(Draft, name="Inner").add(AskFoo).add(Record)
    inner.edge(START, "AskFoo").edge("AskFoo", "Record").edge("Record", END)
    g = Graph(Many).add(Split).add(inner.compile(), inputs={"foo": "item"})
    g.edge(START, "Split")
    g.router("Split", lambda s: [Send("Inner", {"item": x}) for x in s.items])
    g.edge("Inner", END)
    app = g.compile()
    backend = InMemoryBackend()
    out = await app.invoke({"items": ["1", "2"]}, thread_id="t", backend=backend)
    ids = sorted(p.id for p in run_info(out).interrupts)
    assert ids == ["Inner#0/0:AskFoo:0:interrupt", "Inner#1/0:AskFoo:0:interrupt"]
    out = await app.invoke(thread_id="t", backend=backend, resume={ids[0]: "A", ids[1]: "B"})
    assert run_info(out).status == "completed"
    assert sorted(EFFECTS) == ["1A", "2B"]
