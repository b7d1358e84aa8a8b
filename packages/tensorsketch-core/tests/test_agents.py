from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tensorsketch import (
    END,
    START,
    Agent,
    AgentState,
    Context,
    FakeProvider,
    Graph,
    InMemoryBackend,
    InMemoryTracer,
    Llm,
    Node,
    Schema,
    Usage,
    create_agent,
    tool,
)
from tensorsketch.messages import Message, ToolCall, assistant, user
from tensorsketch.testing.agents import AGENT_INPUT, agent_scenario
from tensorsketch.testing.crash import BackendSpec, EffectLedger, run_crash_matrix

SCENARIO = "tensorsketch.testing.agents:agent_scenario"


def calls(*pairs: tuple[str, dict[str, Any]], text: str = "") -> Message:
    return assistant(
        text,
        tool_calls=[ToolCall(id=f"c{i}", name=n, args=a) for i, (n, a) in enumerate(pairs)],
    )


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"boom: {reason}")


async def test_parallel_tool_calls_with_one_failing() -> None:
    provider = FakeProvider(
        [
            calls(
                ("add", {"a": 1, "b": 2}), ("explode", {"reason": "x"}), ("add", {"a": 3, "b": 4})
            ),
            assistant("3 and 7; one failed"),
        ]
    )
    result = await create_agent(provider, tools=[add, explode]).invoke({"query": "go"})
    assert result.status == "completed" and result.output == "3 and 7; one failed"
    seen = [m for m in provider.calls[1].messages if m.role == "tool"]
    assert [(m.tool_call_id, m.text, m.is_error) for m in seen] == [
        ("c0", "3", False),
        ("c1", "Error: ValueError: boom: x", True),
        ("c2", "7", False),
    ]


async def test_tool_concurrency_is_capped() -> None:
    inflight = 0
    peak = 0

    @tool
    async def slow(n: int) -> int:
        """Take a few scheduler turns."""
        nonlocal inflight, peak
        inflight += 1
        peak = max(peak, inflight)
        for _ in range(5):
            await asyncio.sleep(0)
        inflight -= 1
        return n

    four = calls(*[("slow", {"n": i}) for i in range(4)])
    capped = create_agent(FakeProvider([four, assistant("done")]), tools=[slow], tool_concurrency=2)
    await capped.invoke({"query": "q"})
    assert peak == 2
    peak = 0
    free = create_agent(FakeProvider([four, assistant("done")]), tools=[slow])
    await free.invoke({"query": "q"})
    assert peak == 4


async def test_slow_tool_becomes_an_error_result() -> None:
    never = asyncio.Event()

    @tool
    async def hang() -> str:
        """Never returns."""
        await never.wait()
        return "unreachable"

    provider = FakeProvider([calls(("hang", {})), assistant("gave up")])
    result = await create_agent(provider, tools=[hang], tool_timeout=0.05).invoke({"query": "q"})
    message = result.messages[-2]
    assert message.is_error and "did not finish within 0.05s" in message.text


async def test_unknown_tools_and_bad_arguments_are_shown_to_the_model() -> None:
    provider = FakeProvider([calls(("nope", {}), ("add", {"a": "x", "b": 1})), assistant("sorry")])
    result = await create_agent(provider, tools=[add, explode]).invoke({"query": "q"})
    unknown, invalid = result.messages[-3], result.messages[-2]
    assert (
        unknown.is_error and "no tool named 'nope'. Available tools: add, explode" in unknown.text
    )
    assert invalid.is_error and "invalid arguments for tool 'add': `a`" in invalid.text


async def test_max_iterations_returns_the_latest_text_without_an_extra_call() -> None:
    def policy(messages: list[Message], tools: list[Any]) -> Message:
        turn = sum(1 for m in messages if m.role == "assistant")
        return calls(("add", {"a": turn, "b": 0}), text=f"thinking {turn}")

    provider = FakeProvider(policy=policy)
    result = await create_agent(provider, tools=[add], max_iterations=3).invoke({"query": "q"})
    assert len(provider.calls) == 3
    assert result.status == "max_iterations" and result.iterations == 3
    assert result.output == "thinking 2"
    assert result.messages[-1].role == "tool"  # every tool call keeps its result
    assert "max_iterations=3" in result.stop_detail


async def test_an_answer_on_the_last_allowed_call_is_completed() -> None:
    provider = FakeProvider([calls(("add", {"a": 1, "b": 1})), assistant("2")])
    result = await create_agent(provider, tools=[add], max_iterations=2).invoke({"query": "q"})
    assert (result.status, result.output, result.iterations) == ("completed", "2", 2)


async def test_token_deltas_stream_as_token_events() -> None:
    provider = FakeProvider(
        [calls(("add", {"a": 1, "b": 1}), text="Let me add."), assistant("It is 2.")]
    )
    agent = create_agent(provider, tools=[add])
    events = [e async for e in agent.stream({"query": "1+1?"})]
    tokens = [e for e in events if e.type == "token"]
    assert "".join(e.data["text"] for e in tokens) == "Let me add.It is 2."
    assert {e.node for e in tokens} == {"agent"}
    assert events[-1].type == "run_end" and events[-1].data["output"] == "It is 2."


async def test_tool_calls_stream_as_tool_events_between_the_turns() -> None:
    provider = FakeProvider(
        [calls(("add", {"a": 1, "b": 1}), ("explode", {"reason": "r"})), assistant("2")]
    )
    events = [e async for e in create_agent(provider, tools=[add, explode]).stream({"query": "q"})]
    tools = [(e.data["phase"], e.data["id"], e.data["name"]) for e in events if e.type == "tool"]
    assert sorted(tools[:2]) == [("start", "c0", "add"), ("start", "c1", "explode")]
    assert sorted(tools[2:]) == [("end", "c0", "add"), ("end", "c1", "explode")]
    ends = {e.data["id"]: e.data for e in events if e.type == "tool" and e.data["phase"] == "end"}
    assert (ends["c0"]["result"], ends["c0"]["is_error"]) == ("2", False)
    assert ends["c1"]["is_error"] is True and "r" in ends["c1"]["result"]
    start = next(e for e in events if e.type == "tool")
    assert start.data["args"] == {"a": 1, "b": 1}
    last_tool = max(i for i, e in enumerate(events) if e.type == "tool")
    assert [e.type for e in events[last_tool:]].count("token") == 1, "the answer comes after"


async def test_a_replayed_tool_call_emits_no_tool_event() -> None:
    @tool(requires_approval=True)
    def refund(order: int) -> str:
        """Refund an order."""
        return f"refunded {order}"

    backend = InMemoryBackend()
    provider = FakeProvider([calls(("refund", {"order": 7})), assistant("done")])
    agent = create_agent(provider, tools=[refund])
    first = [e async for e in agent.stream({"query": "q"}, thread_id="t", backend=backend)]
    assert not [e for e in first if e.type == "tool"], "nothing ran before the approval"
    resumed = [e async for e in agent.stream(thread_id="t", backend=backend, resume={"c0": True})]
    assert [e.data["phase"] for e in resumed if e.type == "tool"] == ["start", "end"]


async def test_spans_for_model_and_tool_calls() -> None:
    provider = FakeProvider([calls(("add", {"a": 2, "b": 3})), assistant("5")], model="gpt-4o")
    tracer = InMemoryTracer()
    await create_agent(provider, tools=[add]).invoke({"query": "2+3"}, tracer=tracer)
    trace = tracer.trace
    assert trace.model_calls == 2 and trace.tool_calls == 1
    model = trace.model_spans[0].attributes
    assert model["gen_ai.request.model"] == "gpt-4o"
    assert model["gen_ai.response.model"] == "gpt-4o"
    assert model["gen_ai.usage.output_tokens"] > 0
    assert model["gen_ai.usage.cost_usd"] > 0
    span = trace.tool_spans[0]
    assert span.attributes["gen_ai.tool.name"] == "add"
    assert span.attributes["gen_ai.tool.call.arguments"] == '{"a": 2, "b": 3}'
    assert span.attributes["gen_ai.tool.call.result"] == "5"
    assert trace.parent(span) is not None and trace.parent(span).kind == "node"


async def test_failed_tool_span_records_the_error_class() -> None:
    provider = FakeProvider([calls(("explode", {"reason": "r"})), assistant("ok")])
    tracer = InMemoryTracer()
    await create_agent(provider, tools=[explode]).invoke({"query": "q"}, tracer=tracer)
    span = tracer.trace.tool_spans[0]
    assert span.status == "error" and span.attributes["error.type"] == "ValueError"


class Verdict(Schema):
    ok: bool
    reason: str


async def test_output_schema_validates_the_answer_and_repairs() -> None:
    provider = FakeProvider(['{"ok": "maybe"}', '{"ok": true, "reason": "fine"}'])
    agent = create_agent(provider, output_schema=Verdict)
    result = await agent.invoke({"query": "judge"})
    assert result.parsed == Verdict(ok=True, reason="fine")
    assert result.status == "completed" and result.iterations == 2
    repair = provider.calls[1].messages[-1]
    assert repair.role == "user" and "`ok`" in repair.text and "Verdict" in repair.text


async def test_agent_node_in_a_custom_graph() -> None:
    class Ticket(Schema):
        question: str
        messages: list[Message] = []
        answer: str = ""
        reviewed: bool = False

    class MarkReviewed(Node):
        class In(Schema):
            answer: str

        class Out(Schema):
            reviewed: bool

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(reviewed=bool(inp.answer))

    support = Agent(
        FakeProvider([assistant("Restart it.")]),
        name="support",
        input_key="question",
        output_key="answer",
        report=False,
    )
    app = (
        Graph(Ticket)
        .add(support)
        .add(MarkReviewed)
        .edge(START, "support")
        .edge("support", "MarkReviewed")
        .edge("MarkReviewed", END)
        .compile()
    )
    out = await app.invoke({"question": "wifi broken"})
    assert (out.answer, out.reviewed) == ("Restart it.", True)
    assert [m.role for m in out.messages] == ["user", "assistant"]


async def test_llm_node_plain_and_structured() -> None:
    class State(Schema):
        query: str
        output: str = ""
        verdict: Verdict | None = None

    provider = FakeProvider(["a summary", "oops", '{"ok": false, "reason": "r"}'])
    app = (
        Graph(State)
        .add(Llm(provider, system="Summarize the input."))
        .add(Llm(provider, output_key="verdict", output_schema=Verdict, name="Judge"))
        .edge(START, "Llm")
        .edge("Llm", "Judge")
        .edge("Judge", END)
        .compile()
    )
    out = await app.invoke({"query": "long text"})
    assert out.output == "a summary"
    assert out.verdict == Verdict(ok=False, reason="r")
    assert provider.calls[0].messages[0].text == "Summarize the input."


async def test_a_follow_up_turn_on_the_same_thread_keeps_the_transcript() -> None:
    backend = InMemoryBackend()
    provider = FakeProvider(["first answer", "second answer"])
    agent = create_agent(provider, system="Be brief.")
    await agent.invoke({"query": "one"}, thread_id="t", backend=backend)
    result = await agent.invoke({"query": "two"}, thread_id="t", backend=backend)
    assert [m.text for m in result.messages] == [
        "Be brief.",
        "one",
        "first answer",
        "two",
        "second answer",
    ]
    assert [m.text for m in provider.calls[1].messages] == [m.text for m in result.messages[:-1]]


async def test_missing_call_ids_get_deterministic_ones() -> None:
    provider = FakeProvider(
        [assistant(tool_calls=[ToolCall(id="", name="add", args={"a": 1, "b": 1})]), "2"]
    )
    result = await create_agent(provider, tools=[add]).invoke({"query": "q"})
    assert result.messages[1].tool_calls[0].id == "call_0_0"
    assert result.messages[2].tool_call_id == "call_0_0"


def test_construction_errors_name_the_fix() -> None:
    with pytest.raises(TypeError, match="needs a ChatProvider"):
        create_agent("gpt-4o")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="two tools are named 'add'"):
        create_agent(FakeProvider(), tools=[add, add])
    with pytest.raises(ValueError, match="max_iterations"):
        create_agent(FakeProvider(), max_iterations=0)
    with pytest.raises(TypeError, match="Middleware instances"):
        create_agent(FakeProvider(), middleware=[object()])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="max_total_tokens"):
        create_agent(FakeProvider(), max_total_tokens=-5)


# -- durability: crash at iteration k, resume, nothing repeats --------------------------------


class Crash(BaseException):
    """Stands in for the process dying: not an Exception, so no layer turns it into a result."""


async def test_resume_after_a_crash_replays_earlier_iterations(tmp_path: Path) -> None:
    ledger = EffectLedger(tmp_path / "ledger.db")
    agent = agent_scenario(ledger)
    backend = InMemoryBackend()
    node = agent.spec.nodes["agent"].node
    assert isinstance(node, Agent)
    original = node._tool_handler
    crashed = False

    async def crash_once(request: Any) -> Any:  # dies as iteration 1's tool call starts
        nonlocal crashed
        if request.tool.name == "notify" and not crashed:
            crashed = True
            raise Crash
        return await original(request)

    node._tool_handler = crash_once
    with pytest.raises(Crash):
        await agent.invoke(AGENT_INPUT, thread_id="t", backend=backend)
    assert ledger.counts("t") == {
        "model:0": 1,
        "lookup:A-17": 1,
        "refund:A-17": 1,
        "model:1": 1,
    }
    tracer = InMemoryTracer()
    result = await agent.invoke(thread_id="t", backend=backend, tracer=tracer)
    assert ledger.counts("t") == {
        "model:0": 1,
        "lookup:A-17": 1,
        "refund:A-17": 1,
        "model:1": 1,
        "notify:ann": 1,
        "model:2": 1,
    }
    assert result.output == "Done: A-17 paid $40; refunded $40; notified ann"
    # Replayed calls open no span: only the notify call and the final model call ran.
    assert tracer.trace.model_calls == 1 and tracer.trace.tool_calls == 1
    # Usage covers the whole run, replayed calls included.
    fresh = await agent_scenario(EffectLedger(tmp_path / "l2.db")).invoke(AGENT_INPUT)
    assert result.usage == fresh.usage and result.usage != Usage()


async def test_crash_matrix_in_process(tmp_path: Path) -> None:
    report = await run_crash_matrix(
        InMemoryBackend(), tmp_path, scenario=SCENARIO, input=AGENT_INPUT, lease_ttl=1.0
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
    assert sum(1 for b in report.boundaries if b.startswith("effect")) >= 6


@pytest.mark.slow
async def test_crash_matrix_sigkill_on_sqlite(tmp_path: Path) -> None:
    """Each kill point is a child process SIGKILLed right after a durable write to SQLite."""
    report = await run_crash_matrix(
        BackendSpec("sqlite", {"dsn": str(tmp_path / "runs.db"), "synchronous": "NORMAL"}),
        tmp_path,
        scenario=SCENARIO,
        input=AGENT_INPUT,
        lease_ttl=1.0,  # its points run at once (each_point): a loaded child keeps its lease
    )
    report.check()
    assert all(k.killed for k in report.kills)
    assert report.baseline_values["output"] == "Done: A-17 paid $40; refunded $40; notified ann"
    assert len(report.kills) >= 8


def test_agent_state_defaults() -> None:
    state = AgentState()
    assert (state.status, state.output, state.messages, state.pending) == ("idle", "", [], [])
    assert user("x").role == "user"


async def test_tools_can_read_their_call_id_for_idempotency() -> None:
    from tensorsketch.tools import current_tool_call

    seen: list[str] = []

    @tool
    def charge(amount: int) -> str:
        """Charge a card (sync: runs in a worker thread)."""
        call = current_tool_call()
        assert call is not None
        seen.append(f"{call.id}:{amount}")
        return "charged"

    provider = FakeProvider([calls(("charge", {"amount": 5}), ("charge", {"amount": 6})), "ok"])
    await create_agent(provider, tools=[charge]).invoke({"query": "q"})
    assert sorted(seen) == ["c0:5", "c1:6"]
    assert current_tool_call() is None


class Colour(Schema):
    colour: str


async def test_a_variant_answers_in_another_schema_with_more_tools_and_leaves_the_agent_as_is() -> (
    None
):
    @tool
    def shade(name: str) -> str:
        """The shade of a colour."""
        return f"dark {name}"

    provider = FakeProvider(
        [calls(("shade", {"name": "red"})), "It is red.", '{"colour": "dark red"}']
    )
    agent = Agent(provider, name="painter", report=["parsed"])
    variant = agent.variant(output_schema=Colour, extra_tools=[shade])
    assert (variant.name, variant.In, variant.Out) == (agent.name, agent.In, agent.Out)
    assert (agent.output_schema, [t.name for t in agent.tools]) == (None, [])
    graph = Graph(AgentState).add(variant).edge(START, "painter").edge("painter", END).compile()
    state = await graph.invoke({"query": "which colour?"})
    assert state.parsed == Colour(colour="dark red")
    assert provider.calls[0].output_schema is Colour
    assert [t.name for t in provider.calls[0].tools] == ["shade"]
    assert provider.calls[-1].messages[-1].text.startswith("the reply is not valid JSON")
    with pytest.raises(ValueError, match="already has tool\\(s\\) named shade"):
        variant.variant(extra_tools=[shade])
    with pytest.raises(TypeError, match="must be a Schema class"):
        agent.variant(output_schema=dict)  # type: ignore[arg-type]
