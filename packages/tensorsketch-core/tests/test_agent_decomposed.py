"""The agent loop as a graph (``tensorsketch.agents.decompose``): a ``model`` node and a
``tools`` node give ``create_agent``'s transcript and report on scripted models, keep its
approvals, guardrails, limits and journaling, and show each turn as nodes, spans and events.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tensorsketch import (
    END,
    START,
    AgentState,
    FakeProvider,
    Graph,
    InMemoryBackend,
    InMemoryTracer,
    Schema,
    create_agent,
    run_info,
    tool,
)
from tensorsketch.agents import Agent, LoopState, decompose, decomposed_agent
from tensorsketch.guardrails import deny_tools, pii
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.testing.agents import AGENT_INPUT
from tensorsketch.testing.crash import run_crash_matrix

REPORT = ("messages", "output", "status", "iterations", "usage", "cost_usd", "stop_detail")


def calls(*pairs: tuple[str, dict[str, Any]], text: str = "") -> Message:
    return assistant(
        text,
        tool_calls=[ToolCall(id=f"c{i}", name=n, args=a) for i, (n, a) in enumerate(pairs)],
    )


RAN: list[str] = []


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    RAN.append(f"add {a} {b}")
    return a + b


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"boom: {reason}")


@tool(requires_approval=True)
def refund(order: int) -> str:
    """Refund an order."""
    RAN.append(f"refund {order}")
    return f"refunded {order}"


async def both(
    script: list[Any], tools: list[Any], query: str = "go", **options: Any
) -> tuple[Any, Any]:
    """The one-node loop's and the decomposed loop's end states on the same script."""
    one = await create_agent(FakeProvider(list(script)), tools=tools, **options).invoke(
        {"query": query}
    )
    two = await decomposed_agent(FakeProvider(list(script)), tools=tools, **options).invoke(
        {"query": query}
    )
    return one, two


def same(one: Any, two: Any, fields: tuple[str, ...] = REPORT) -> None:
    assert {f: getattr(two, f) for f in fields} == {f: getattr(one, f) for f in fields}


@pytest.mark.parametrize(
    ("script", "options"),
    [
        pytest.param(["hi"], {}, id="answer"),
        pytest.param(
            [calls(("add", {"a": 1, "b": 2}), ("explode", {"reason": "x"})), "3; one failed"],
            {"system": "be brief"},
            id="parallel-calls-one-failing",
        ),
        pytest.param(
            [calls(("add", {"a": k, "b": 1})) for k in range(5)],
            {"max_iterations": 3},
            id="max-iterations-after-tools",
        ),
        pytest.param(
            [calls(("add", {"a": 1, "b": 1}))] * 4,
            {"stuck_after": 3},
            id="stuck",
        ),
        pytest.param(
            [calls(("add", {"a": k, "b": 1})) for k in range(9)],
            {"max_total_tokens": 60},
            id="budget",
        ),
    ],
)
async def test_the_decomposed_loop_gives_create_agents_transcript_and_report(
    script: list[Any], options: dict[str, Any]
) -> None:
    one, two = await both(script, [add, explode], **options)
    same(one, two)
    assert isinstance(two, LoopState) and isinstance(two, AgentState)


async def test_structured_output_and_its_repair_are_the_same() -> None:
    class Answer(Schema):
        n: int

    one, two = await both(["not json", '{"n": 4}'], [], output_schema=Answer)
    same(one, two, (*REPORT, "parsed"))
    assert two.parsed == Answer(n=4) and two.iterations == 2


async def test_guardrails_trip_the_same_way() -> None:
    one, two = await both(["never sent"], [], "mail me at a@b.io", guardrails=[pii()])
    same(one, two, (*REPORT, "tripwire"))
    assert two.status == "tripped" and two.iterations == 0
    script = [calls(("add", {"a": 1, "b": 2})), "ok"]
    one, two = await both(script, [add], guardrails=[deny_tools(["add"])])
    same(one, two, (*REPORT, "tripwire"))
    assert two.status == "tripped" and two.messages[-1].is_error


async def test_an_approval_suspends_in_the_tools_node_and_resumes_once() -> None:
    RAN.clear()
    script = [calls(("refund", {"order": 7})), "done"]
    results = []
    for build in (create_agent, decomposed_agent):
        backend = InMemoryBackend()
        app = build(FakeProvider(list(script)), tools=[refund])
        first = await app.invoke({"query": "refund 7"}, thread_id="t", backend=backend)
        assert first.status == "suspended"
        (pending,) = run_info(first).interrupts
        assert pending.id == "c0"
        results.append(await app.invoke(thread_id="t", backend=backend, resume={"c0": True}))
    one, two = results
    same(one, two)
    assert two.output == "done" and RAN == ["refund 7", "refund 7"]  # once per form
    # The decomposed thread's history has a checkpoint per turn: model, tools, model.
    history = decomposed_agent(FakeProvider(), tools=[refund]).get_history("t", backend)
    assert len(history) > 3


async def test_each_turn_is_a_node_span_and_event() -> None:
    tracer = InMemoryTracer()
    script = [calls(("add", {"a": 2, "b": 3})), calls(("add", {"a": 5, "b": 1})), "6"]
    app = decomposed_agent(FakeProvider(script), tools=[add])
    events = [e async for e in app.stream({"query": "q"}, tracer=tracer)]
    order = [e.node for e in events if e.type == "node_start"]
    assert order == ["model", "tools", "model", "tools", "model"]
    trace = tracer.trace
    assert trace.model_calls == 3 and trace.tool_calls == 2
    nodes = [s.name for s in trace.spans if s.kind == "node"]
    assert nodes == order
    tool_span = trace.tool_spans[0]
    parent = trace.parent(tool_span)
    assert parent is not None and parent.name == "tools"
    assert parent.attributes["gen_ai.agent.name"] == app.name


async def test_a_decomposed_agent_is_a_subgraph_node_of_another_graph() -> None:
    agent = Agent(FakeProvider([calls(("add", {"a": 1, "b": 1})), "2"]), tools=[add], name="Math")
    g = Graph(AgentState).add(decompose(agent)).edge(START, "Math").edge("Math", END)
    backend = InMemoryBackend()
    out = await g.compile().invoke({"query": "1+1"}, thread_id="p", backend=backend)
    assert out.output == "2" and out.status == "completed" and out.iterations == 2
    assert "turn" not in type(out).model_fields  # the loop's own fields stay inside it
    assert "p/0:Math:0:subgraph" in await backend.list_threads()


def test_decompose_refuses_what_it_cannot_draw() -> None:
    with pytest.raises(TypeError, match="takes an Agent"):
        decompose(object())  # type: ignore[arg-type]
    keyed = Agent(FakeProvider(), input_key="question")
    with pytest.raises(ValueError, match="input_key='question'"):
        decompose(keyed)


async def test_a_crash_at_every_boundary_of_the_decomposed_loop_repeats_no_effect(
    tmp_path: Path,
) -> None:
    """The crash harness kills the decomposed refund agent at every durable boundary (each
    model and tool call, each turn's checkpoint) and resumes: every effect ran once and the
    end state is the uninterrupted run's — which is the one-node agent's."""
    report = await run_crash_matrix(
        InMemoryBackend(),
        tmp_path,
        scenario="tensorsketch.testing.agents:decomposed_agent_scenario",
        input=AGENT_INPUT,
        lease_ttl=1.0,  # its points run at once (each_point), on one event loop
    )
    report.check()
    assert report.baseline_counts == {
        "model:0": 1,
        "lookup:A-17": 1,
        "refund:A-17": 1,
        "model:1": 1,
        "notify:ann": 1,
        "model:2": 1,
    }
    assert report.baseline_values["output"] == "Done: A-17 paid $40; refunded $40; notified ann"
    # A checkpoint after every turn (5 supersteps), each a boundary the harness killed at.
    assert sum(1 for b in report.boundaries if "checkpoint step=" in b) == 6
    # ...and each tool call's intent, written before it calls out (three tool calls).
    assert sum(1 for b in report.boundaries if "intent:" in b) == 3
    assert len(report.kills) == len(report.boundaries) == 15


async def test_max_iterations_bounds_the_loop_not_the_engines_default_step_limit() -> None:
    """Two supersteps a turn: 20 turns take 40, past the engine's default of 25, on invoke,
    on stream and as a subgraph node."""
    script = [calls(("add", {"a": k, "b": 1})) for k in range(20)] + ["done"]
    one, two = await both(script, [add], max_iterations=30)
    same(one, two)
    assert two.iterations == 21 and two.output == "done"
    app = decomposed_agent(FakeProvider(list(script)), tools=[add], max_iterations=30)
    ends = [e async for e in app.stream({"query": "go"}) if e.type == "node_end"]
    assert len(ends) == 41
    agent = Agent(FakeProvider(list(script)), tools=[add], max_iterations=30, name="Long")
    g = Graph(AgentState).add(decompose(agent)).edge(START, "Long").edge("Long", END)
    assert (await g.compile().invoke({"query": "go"})).iterations == 21
