"""Handoffs: an agent passes the conversation to another, durably, through the transcript."""

from __future__ import annotations

from typing import Any

import pytest

from tensorsketch import (
    Agent,
    FakeProvider,
    InMemoryBackend,
    InMemoryTracer,
    Schema,
    create_agent,
    handoff,
    tool,
)
from tensorsketch.agents import keep_last, without_tools
from tensorsketch.guardrails import deny_tools
from tensorsketch.messages import Message, ToolCall, assistant

ran: list[str] = []


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    ran.append(f"lookup:{order}")
    return f"{order} paid $40"


@tool(requires_approval=True)
def refund(order: str) -> str:
    """Refund an order."""
    ran.append(f"refund:{order}")
    return f"refunded {order}"


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def calls(*pairs: tuple[str, dict[str, Any]], turn: int = 0) -> Message:
    return assistant(
        tool_calls=[ToolCall(id=f"c{turn}_{i}", name=n, args=a) for i, (n, a) in enumerate(pairs)]
    )


def transfer(name: str, turn: int = 0) -> Message:
    return calls((f"transfer_to_{name}", {}), turn=turn)


def team(
    triage_script: list[Any], billing_script: list[Any], **billing_options: Any
) -> tuple[FakeProvider, FakeProvider, Agent, Any]:
    front = FakeProvider(triage_script)
    back = FakeProvider(billing_script)
    billing = Agent(
        back,
        tools=[lookup, refund],
        name="billing",
        system="You handle billing.",
        **billing_options,
    )
    graph = create_agent(
        front, tools=[lookup], name="triage", system="Route requests.", handoffs=[billing]
    )
    return front, back, billing, graph


async def test_the_receiver_carries_on_with_the_transcript_and_its_own_setup() -> None:
    front, back, _, graph = team(
        [transfer("billing")],
        [calls(("lookup", {"order": "A-1"}), turn=1), assistant("A-1 is paid.")],
    )
    events = [e async for e in graph.stream({"query": "was A-1 paid?"})]
    handoffs = [e.data for e in events if e.type == "agent.handoff"]
    assert handoffs == [
        {"from": "triage", "to": "billing", "iteration": 0, "tool": "transfer_to_billing"}
    ]
    assert len(front.calls) == 1 and front.calls[0].tool_names == [
        "lookup",
        "transfer_to_billing",
    ]
    assert len(back.calls) == 2
    first = back.calls[0]
    assert first.tool_names == ["lookup", "refund"]
    assert first.messages[0].role == "system" and first.messages[0].text == "You handle billing."
    assert not any(m.text == "Route requests." for m in first.messages)
    assert [m.role for m in first.messages] == ["system", "user", "assistant", "tool"]
    assert first.messages[-1].text == "Transferred to billing; billing continues from here."
    assert ran == ["lookup:A-1"]


async def test_state_names_the_active_agent_and_the_next_turn_stays_with_it() -> None:
    front, back, _, graph = team(
        [transfer("billing")], [assistant("Hi, billing here."), assistant("Still billing.")]
    )
    backend = InMemoryBackend()
    result = await graph.invoke({"query": "billing please"}, thread_id="t", backend=backend)
    assert (result.output, result.active_agent, result.status) == (
        "Hi, billing here.",
        "billing",
        "completed",
    )
    state = graph.get_state("t", backend)
    assert state is not None and state.active_agent == "billing"
    # The transcript keeps the triage's system prompt and the handoff call and answer.
    assert [m.role for m in state.messages] == ["system", "user", "assistant", "tool", "assistant"]
    again = await graph.invoke({"query": "and now?"}, thread_id="t", backend=backend)
    assert again.output == "Still billing." and again.active_agent == "billing"
    assert len(front.calls) == 1, "the triage agent is not asked again"
    sent = back.calls[1].messages
    assert sent[0].text == "You handle billing." and sent[-1].text == "and now?"
    assert sum(m.role == "system" for m in sent) == 1


async def test_an_input_filter_decides_what_the_receiver_sees() -> None:
    front = FakeProvider([calls(("lookup", {"order": "A-1"})), transfer("billing", turn=1)])
    back = FakeProvider(["ok"])
    billing = Agent(back, name="billing", system="Billing.")
    graph = create_agent(
        front,
        tools=[lookup],
        name="triage",
        handoffs=[handoff(billing, input_filter=without_tools)],
    )
    result = await graph.invoke({"query": "refund A-1"})
    assert result.output == "ok"
    assert [(m.role, m.text) for m in back.calls[0].messages] == [
        ("system", "Billing."),
        ("user", "refund A-1"),
    ]
    # The transcript keeps everything the filter hid.
    assert [m.role for m in result.messages].count("tool") == 2


def test_keep_last_never_starts_with_a_tool_result() -> None:
    msgs = [
        Message(role="user", content="q"),
        calls(("lookup", {"order": "A"})),
        Message(role="tool", content="r", tool_call_id="c0_0", name="lookup"),
        assistant("a"),
    ]
    assert keep_last(2)(msgs) == [msgs[3]]
    assert keep_last(3)(msgs) == msgs[1:]
    with pytest.raises(ValueError, match="keep_last"):
        keep_last(0)


async def test_an_approval_in_the_receiver_suspends_and_resumes_with_it() -> None:
    front, _back, _, graph = team(
        [transfer("billing")],
        [calls(("refund", {"order": "A-1"}), turn=1), assistant("Refunded.")],
    )
    backend = InMemoryBackend()
    first = await graph.invoke({"query": "refund A-1"}, thread_id="t", backend=backend)
    assert first.status == "suspended" and first.active_agent == "billing"
    assert first.pending[0].value["agent"] == "billing"
    assert first.pending[0].value["tool"] == "refund" and ran == []
    done = await graph.invoke(thread_id="t", backend=backend, resume={"c1_0": True})
    assert (done.status, done.output, done.active_agent) == ("completed", "Refunded.", "billing")
    assert ran == ["refund:A-1"]
    assert len(front.calls) == 1, "the triage turn is replayed from the journal"


class Crash(BaseException):
    """The process dying: not an Exception, so no layer turns it into a result."""


async def test_a_crash_after_the_handoff_resumes_with_the_receiver() -> None:
    front, back, billing, graph = team(
        [transfer("billing")],
        [calls(("lookup", {"order": "A-1"}), turn=1), assistant("paid")],
    )
    original = billing._tool_handler
    crashed = False

    async def crash_once(request: Any) -> Any:
        nonlocal crashed
        if request.tool.name == "lookup" and not crashed:
            crashed = True
            raise Crash
        return await original(request)

    billing._tool_handler = crash_once
    backend = InMemoryBackend()
    with pytest.raises(Crash):
        await graph.invoke({"query": "was A-1 paid?"}, thread_id="t", backend=backend)
    assert (len(front.calls), len(back.calls)) == (1, 1)
    tracer = InMemoryTracer()
    result = await graph.invoke(thread_id="t", backend=backend, tracer=tracer)
    assert (result.output, result.active_agent) == ("paid", "billing")
    assert (len(front.calls), len(back.calls)) == (1, 2), "no model call is repeated"
    assert ran == ["lookup:A-1"]
    assert tracer.trace.model_calls == 1


async def test_a_handoff_that_requires_approval_can_be_refused() -> None:
    front = FakeProvider([transfer("billing"), assistant("I will help myself.")])
    back = FakeProvider(["billing"])
    billing = Agent(back, name="billing")
    graph = create_agent(front, name="triage", handoffs=[handoff(billing, requires_approval=True)])
    backend = InMemoryBackend()
    first = await graph.invoke({"query": "q"}, thread_id="t", backend=backend)
    assert first.status == "suspended" and first.pending[0].value["tool"] == "transfer_to_billing"
    done = await graph.invoke(
        thread_id="t", backend=backend, resume={"c0_0": {"approved": False, "reason": "no"}}
    )
    assert (done.output, done.active_agent) == ("I will help myself.", "triage")
    assert back.calls == []


async def test_a_tool_call_guardrail_can_forbid_a_handoff() -> None:
    front = FakeProvider([transfer("billing")])
    billing = Agent(FakeProvider(["x"]), name="billing")
    graph = create_agent(
        front,
        name="triage",
        handoffs=[billing],
        guardrails=[deny_tools(["transfer_to_billing"])],
    )
    result = await graph.invoke({"query": "q"})
    assert result.status == "tripped" and result.active_agent == "triage"
    assert result.tripwire is not None and result.tripwire.tool_call is not None


async def test_one_handoff_per_turn_and_a_handoff_back_by_name() -> None:
    front = FakeProvider(
        [
            calls(("transfer_to_billing", {}), ("transfer_to_billing_too", {})),
            assistant("triage again"),
        ]
    )
    back = FakeProvider([transfer("triage", turn=1)])
    billing = Agent(back, name="billing", handoffs=["triage"])
    graph = create_agent(
        front,
        name="triage",
        handoffs=[billing, handoff(billing, tool_name="transfer_to_billing_too")],
    )
    result = await graph.invoke({"query": "q"})
    assert (result.output, result.active_agent) == ("triage again", "triage")
    refused = [m for m in result.messages if m.role == "tool" and m.is_error]
    assert len(refused) == 1 and "already hands off" in refused[0].text
    # Back with the triage agent: its own system prompt (none) and no billing prompt.
    assert front.calls[1].tool_names == ["transfer_to_billing", "transfer_to_billing_too"]


class Refund(Schema):
    order: str
    amount: int


async def test_the_receivers_output_schema_parses_the_answer() -> None:
    billing = Agent(
        FakeProvider(['{"order": "A-1", "amount": 40}']), name="billing", output_schema=Refund
    )
    graph = create_agent(FakeProvider([transfer("billing")]), name="triage", handoffs=[billing])
    result = await graph.invoke({"query": "q"})
    assert result.parsed == Refund(order="A-1", amount=40)


def test_bad_handoffs_are_refused_with_what_to_fix() -> None:
    provider = FakeProvider(["x"])
    twin = Agent(provider)  # named "agent", like the default of the one below
    with pytest.raises(ValueError, match="give each its own `name=`"):
        create_agent(provider, handoffs=[twin])
    with pytest.raises(ValueError, match="tool and a handoff both named"):
        create_agent(
            provider, name="a", tools=[lookup], handoffs=[handoff(twin, tool_name="lookup")]
        )
    with pytest.raises(TypeError, match="a handoff goes to an Agent"):
        handoff(42)
    with pytest.raises(TypeError, match="list of agents"):
        create_agent(provider, name="a", handoffs="b")


async def test_an_unknown_target_name_fails_the_run_naming_it() -> None:
    graph = create_agent(FakeProvider(["x"]), name="a", handoffs=["nobody"])
    with pytest.raises(Exception, match="'nobody'"):
        await graph.invoke({"query": "q"})


async def test_a_receivers_per_run_toolset_is_offered_on_its_runs() -> None:
    from tensorsketch.toolsets import Toolset

    back = FakeProvider(["ok"])
    extra = Toolset([lookup], name="extra").when(lambda ctx: True)
    billing = Agent(back, tools=[extra], name="billing")
    graph = create_agent(FakeProvider([transfer("billing")]), name="triage", handoffs=[billing])
    await graph.invoke({"query": "q"})
    assert back.calls[0].tool_names == ["lookup"]
