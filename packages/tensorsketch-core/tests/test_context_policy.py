"""ContextPolicy: requests stay under a token budget, tool pairs are never split, the durable
transcript keeps everything, and a resumed run replays its summary instead of re-asking."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tensorsketch import (
    END,
    START,
    FakeProvider,
    Graph,
    InMemoryBackend,
    InMemoryTracer,
    Schema,
    create_agent,
    tool,
)
from tensorsketch.agents import (
    POLICY_FAILED,
    Agent,
    Compaction,
    ContextPolicy,
    estimate_tokens,
    trim_messages,
)
from tensorsketch.errors import GraphValidationError
from tensorsketch.messages import Message, ToolCall, assistant, system, tool_result, user

BUDGET = 1500


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}: " + "lorem ipsum dolor sit amet " * 8


def chatty(messages: list[Message], tools: list[Any]) -> Message:
    """Calls `lookup` once per user turn, then answers."""
    last = messages[-1]
    if last.role == "user":
        turn = sum(1 for m in messages if m.role == "user")
        return assistant(
            "", tool_calls=[ToolCall(id=f"t{turn}", name="lookup", args={"topic": f"q{turn}"})]
        )
    return assistant(f"answer after {last.text[:20]}")


def summarizer() -> FakeProvider:
    return FakeProvider(policy=lambda messages, tools: assistant("the user asked many things"))


def check_request(messages: Sequence[Message], query: str) -> None:
    """Well formed: system first, the latest query kept, every call next to its results."""
    assert messages[0].role == "system" and messages[0].text == "be brief"
    assert query in [m.text for m in messages if m.role == "user"]
    answered: dict[str, bool] = {}
    for m in messages:
        if m.role == "assistant":
            assert all(answered.values()), "a call lost its result"
            answered = {c.id: False for c in m.tool_calls}
        elif m.role == "tool":
            assert m.tool_call_id in answered, "a tool result without its call"
            answered[m.tool_call_id] = True
    assert all(answered.values())


@pytest.mark.parametrize("summarize", [False, True])
async def test_a_500_turn_conversation_stays_under_budget(summarize: bool) -> None:
    provider = FakeProvider(policy=chatty)
    writer = summarizer()
    policy = ContextPolicy(budget_tokens=BUDGET, summarize=summarize, summarizer=writer)
    agent = create_agent(provider, tools=[lookup], system="be brief", context_policy=policy)
    backend = InMemoryBackend()
    turns = 500
    for turn in range(1, turns + 1):
        before = len(provider.calls)
        out = await agent.invoke({"query": f"question {turn}"}, thread_id="long", backend=backend)
        assert out.status == "completed"
        for call in provider.calls[before:]:
            check_request(call.messages, f"question {turn}")
            assert estimate_tokens(call.messages) <= BUDGET
    state = agent.get_state("long", backend)
    assert state is not None
    # The durable transcript keeps every message: system + 4 per turn.
    assert len(state.messages) == 1 + 4 * turns
    assert estimate_tokens(state.messages) > 25 * BUDGET
    last = provider.calls[-1].messages
    if summarize:
        assert last[1].text.startswith("Summary of the earlier conversation:")
        assert writer.calls and all(c.max_tokens == policy.summary_tokens for c in writer.calls)
        # The summarizer saw the dropped prefix, rendered as text; later summaries extend
        # the previous one with what was dropped since.
        assert "question 1\n" in writer.calls[0].messages[-1].text + "\n"
        assert writer.calls[-1].messages[-1].text.startswith("Summary so far:\n")
        # A summary is reused until the request is over budget again, and each one cuts the
        # request to compact_to of the budget: 1,000 model calls take 49 summaries here
        # (summarizing every over-budget call took 971).
        assert len(provider.calls) == 2 * turns
        assert len(writer.calls) == 49
        assert state.compaction is not None
        assert state.compaction.summary == "the user asked many things"
        assert 0 < state.compaction.covers < len(state.messages)
    else:
        assert not writer.calls
        assert all(m.role != "system" for m in last[1:])


async def test_under_budget_the_request_is_the_transcript() -> None:
    provider = FakeProvider(policy=chatty)
    policy = ContextPolicy(budget_tokens=100_000, summarize=True, summarizer=summarizer())
    agent = create_agent(provider, tools=[lookup], system="be brief", context_policy=policy)
    out = await agent.invoke({"query": "hi"})
    assert provider.calls[-1].messages == out.messages[:-1]


async def test_a_resumed_run_replays_the_summary() -> None:
    history = [system("be brief")]
    for turn in range(60):
        history += [
            user(f"old {turn}"),
            assistant("", tool_calls=[ToolCall(id=f"o{turn}", name="lookup", args={})]),
            tool_result(f"o{turn}", "x" * 200, name="lookup"),
            assistant(f"ok {turn}"),
        ]
    writer = summarizer()
    provider = FakeProvider(policy=chatty)
    policy = ContextPolicy(budget_tokens=BUDGET, summarize=True, summarizer=writer)
    agent = create_agent(provider, tools=[lookup], context_policy=policy)
    node: Any = agent.spec.nodes["agent"].node
    original = node._tool_handler
    crashed = False

    async def crash_once(request: Any) -> Any:  # the process dies inside the first tool call
        nonlocal crashed
        if not crashed:
            crashed = True
            raise KeyboardInterrupt
        return await original(request)

    node._tool_handler = crash_once
    backend = InMemoryBackend()
    with pytest.raises(KeyboardInterrupt):
        await agent.invoke({"messages": history, "query": "new"}, thread_id="r", backend=backend)
    assert len(writer.calls) == 1 and len(provider.calls) == 1
    tracer = InMemoryTracer()
    out = await agent.invoke(thread_id="r", backend=backend, tracer=tracer)
    assert out.status == "completed"
    # Iteration 0's summary and model call came from the journal; iteration 1 reused that
    # summary (its request fits the budget), so only the new model call happened.
    assert len(writer.calls) == 1 and len(provider.calls) == 2
    assert tracer.trace.model_calls == 1
    assert out.usage.total_tokens > 0
    sent = provider.calls[1].messages
    assert sent[1].text == "Summary of the earlier conversation:\nthe user asked many things"
    assert out.compaction is not None and out.compaction.summary in sent[1].text


def test_trim_keeps_pairs_system_and_the_latest_user_turn() -> None:
    messages = [
        system("s"),
        user("u1" * 50),
        assistant("", tool_calls=[ToolCall(id="a", name="t"), ToolCall(id="b", name="t")]),
        tool_result("a", "r" * 400, name="t"),
        tool_result("b", "r" * 400, name="t"),
        assistant("done"),
        user("latest"),
    ]
    sent, dropped = trim_messages(messages, 30, estimate_tokens)
    assert [m.text for m in sent] == ["s", "done", "latest"]
    assert [m.role for m in dropped] == ["user", "assistant", "tool", "tool"]
    sent, dropped = trim_messages(messages, 1, estimate_tokens)  # too small: the floor stays
    assert [m.text for m in sent] == ["s", "latest"]


def test_bad_policies_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="budget_tokens"):
        ContextPolicy(budget_tokens=0)
    with pytest.raises(ValueError, match="summary_tokens"):
        ContextPolicy(budget_tokens=100, summary_tokens=100)
    with pytest.raises(TypeError, match="context_policy"):
        create_agent(FakeProvider(["x"]), context_policy={"budget_tokens": 10})  # type: ignore[typeddict-item]


def long_history(turns: int) -> list[Message]:
    history = [system("be brief")]
    for turn in range(turns):
        history += [
            user(f"old {turn}"),
            assistant("", tool_calls=[ToolCall(id=f"o{turn}", name="lookup", args={})]),
            tool_result(f"o{turn}", "x" * 200, name="lookup"),
            assistant(f"ok {turn}"),
        ]
    return history


async def test_the_compaction_point_is_durable_and_reused_by_a_new_process() -> None:
    backend = InMemoryBackend()

    def build(writer: FakeProvider) -> tuple[FakeProvider, Any]:
        provider = FakeProvider(policy=chatty)
        policy = ContextPolicy(budget_tokens=BUDGET, summarize=True, summarizer=writer)
        agent = create_agent(provider, tools=[lookup], context_policy=policy)
        return provider, agent

    first_writer = summarizer()
    _, agent = build(first_writer)
    history = long_history(60)
    await agent.invoke({"messages": history, "query": "q0"}, thread_id="d", backend=backend)
    assert len(first_writer.calls) == 1
    point = agent.get_state("d", backend).compaction
    assert point is not None
    # Another process (new agent objects) continues the thread: the checkpointed point is
    # reused, and nothing is summarized again while the request fits.
    second_writer = summarizer()
    provider, agent = build(second_writer)
    out = await agent.invoke({"query": "q1"}, thread_id="d", backend=backend)
    assert out.status == "completed"
    assert second_writer.calls == []
    for call in provider.calls:
        assert call.messages[1].text.endswith(point.summary)
        assert estimate_tokens(call.messages) <= BUDGET
    assert agent.get_state("d", backend).compaction == point


async def test_an_edited_transcript_is_summarized_afresh() -> None:
    backend = InMemoryBackend()
    writer = summarizer()
    policy = ContextPolicy(budget_tokens=BUDGET, summarize=True, summarizer=writer)
    agent = create_agent(FakeProvider(policy=chatty), tools=[lookup], context_policy=policy)
    await agent.invoke(
        {"messages": long_history(60), "query": "q0"}, thread_id="a", backend=backend
    )
    point = agent.get_state("a", backend).compaction
    assert point is not None
    # Thread "b" has a transcript that differs inside the prefix the point covers; given that
    # point, its digest does not match, so the next request is summarized from the start.
    edited = long_history(60)
    edited[1] = user("a different first question")
    await agent.invoke({"messages": edited, "query": "q1"}, thread_id="b", backend=backend)
    await agent.aupdate_state("b", backend, {"compaction": point})
    asked = len(writer.calls)
    await agent.invoke({"query": "q2"}, thread_id="b", backend=backend)
    assert len(writer.calls) == asked + 1
    text = writer.calls[-1].messages[-1].text
    assert "a different first question" in text
    assert not text.startswith("Summary so far")


async def test_a_failing_summarizer_sends_the_trimmed_request_and_says_so() -> None:
    def broken(messages: list[Message], tools: list[Any]) -> Message:
        raise ConnectionError("summarizer unreachable")

    writer = FakeProvider(policy=broken)
    provider = FakeProvider(policy=chatty)
    policy = ContextPolicy(budget_tokens=BUDGET, summarize=True, summarizer=writer)
    agent = create_agent(provider, tools=[lookup], context_policy=policy)
    tracer = InMemoryTracer()
    events = [
        event
        async for event in agent.stream(
            {"messages": long_history(60), "query": "new"}, tracer=tracer
        )
    ]
    failed = [e for e in events if e.type == POLICY_FAILED]
    assert failed, "the degraded request is visible in the stream"
    assert "summarizer unreachable" in failed[0].data["error"]
    assert failed[0].data["iteration"] == 0
    assert writer.calls  # it was asked
    # The turn completed on trimmed requests: no summary, under budget, pairs intact.
    assert len(provider.calls) == 2
    for call in provider.calls:
        check_request(call.messages, "new")
        assert all(m.role != "system" or m.text == "be brief" for m in call.messages)
        assert estimate_tokens(call.messages) <= BUDGET
    spans = [s for s in tracer.spans if POLICY_FAILED in s.attributes]
    assert spans and "summarizer unreachable" in spans[0].attributes[POLICY_FAILED]


async def test_an_agent_of_your_own_graph_keeps_its_compaction_point_in_your_state() -> None:
    class Chat(Schema):
        question: str = ""
        messages: list[Message] = []
        answer: str = ""

    policy = ContextPolicy(budget_tokens=BUDGET, summarize=True, summarizer=summarizer())

    def graph(state: type[Schema]) -> Any:
        agent = Agent(
            FakeProvider(policy=chatty),
            [lookup],
            name="support",
            input_key="question",
            output_key="answer",
            report=False,
            context_policy=policy,
        )
        return Graph(state).add(agent).edge(START, "support").edge("support", END).compile()

    # Without a field for the point, compiling says which one to add.
    with pytest.raises(GraphValidationError, match="writes `compaction`, but Chat has no field"):
        graph(Chat)

    class ChatWithPoint(Chat):
        compaction: Compaction | None = None

    app = graph(ChatWithPoint)
    out = await app.invoke({"question": "new", "messages": long_history(60)[1:]})
    assert out.compaction is not None and out.answer
