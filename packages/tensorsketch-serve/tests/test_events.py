"""``run_events``: a real graph run (agent on the fake model, plain graphs) as neutral events."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

import pytest

from tensorsketch import (
    END,
    START,
    Context,
    FakeProvider,
    Graph,
    InMemoryBackend,
    Node,
    Schema,
    create_agent,
    tool,
)
from tensorsketch.messages import ToolCall, assistant, user
from tensorsketch.patterns import run_subgraph
from tensorsketch.serve import ChatAdapter, run_events, thread_info
from tensorsketch.serve import events as ev
from tensorsketch.serve.events import run_once


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@tool(requires_approval=True)
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded order {order}"


def _kinds(items: list[Any]) -> list[str]:
    return [type(e).__name__ for e in items]


async def _collect(**kwargs: Any) -> list[Any]:
    return [e async for e in run_events(**kwargs)]


async def test_an_agent_run_streams_text_tools_steps_and_usage() -> None:
    provider = FakeProvider(
        [
            assistant(
                "Let me add.", tool_calls=[ToolCall(id="c1", name="add", args={"a": 2, "b": 3})]
            ),
            assistant("The sum is 5."),
        ]
    )
    graph = create_agent(provider, tools=[add])
    adapter = ChatAdapter.for_graph(graph)
    items = await _collect(graph=graph, adapter=adapter, input=adapter.input_for([user("2 + 3?")]))

    kinds = _kinds(items)
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunFinished"
    deltas = [e.text for e in items if isinstance(e, ev.TextDelta)]
    assert deltas == ["Let", " me", " add.", "The", " sum", " is", " 5."], "the model's own chunks"
    started = [e for e in items if isinstance(e, ev.TextStarted)]
    assert len(started) == 2, "one text run per model turn, split by the tool call"
    tool_part = kinds[kinds.index("ToolCallStarted") : kinds.index("ToolCallResult") + 1]
    assert tool_part == ["ToolCallStarted", "ToolCallArgs", "ToolCallEnded", "ToolCallResult"]
    args = next(e for e in items if isinstance(e, ev.ToolCallArgs))
    assert (args.id, args.delta) == ("c1", '{"a": 2, "b": 3}'), "the JSON as the model streamed it"
    result = next(e for e in items if isinstance(e, ev.ToolCallResult))
    assert (result.name, result.content, result.is_error) == ("add", "5", False)
    assert kinds.index("TextEnded") < kinds.index("ToolCallStarted")
    steps = [
        (type(e).__name__, e.node) for e in items if isinstance(e, ev.StepStarted | ev.StepFinished)
    ]
    assert steps == [("StepStarted", "agent"), ("StepFinished", "agent")]
    state = [e for e in items if isinstance(e, ev.StateUpdated)][-1]
    assert state.to_json()["output"] == "The sum is 5."
    assert state.to_json()["messages"][0] == {**state.to_json()["messages"][0], "role": "user"}
    finished = items[-1]
    assert finished.reply == "The sum is 5."
    assert finished.usage is not None and finished.usage.output_tokens > 0
    assert finished.usage == finished.state.usage


async def test_history_is_passed_whole_and_the_last_user_turn_is_the_query() -> None:
    provider = FakeProvider(["Paris is lovely."])
    graph = create_agent(provider)
    adapter = ChatAdapter.for_graph(graph)
    history = [user("I'm going to Paris."), assistant("Nice!"), user("Any tips?")]
    items = await _collect(graph=graph, adapter=adapter, input=adapter.input_for(history))
    assert isinstance(items[-1], ev.RunFinished)
    sent = [(m.role, m.text) for m in provider.calls[0].messages]
    assert sent == [("user", "I'm going to Paris."), ("assistant", "Nice!"), ("user", "Any tips?")]


async def test_an_approval_suspends_and_a_decision_resumes_the_thread() -> None:
    provider = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="call_9", name="refund", args={"order": 7})]),
            assistant("Refunded."),
        ]
    )
    graph = create_agent(provider, tools=[refund])
    adapter = ChatAdapter.for_graph(graph)
    backend = InMemoryBackend()
    first = await _collect(
        graph=graph,
        adapter=adapter,
        input=adapter.input_for([user("refund order 7")]),
        thread_id="t1",
        backend=backend,
    )
    suspended = first[-1]
    assert isinstance(suspended, ev.RunSuspended)
    [approval] = suspended.approvals
    assert approval.id == "call_9"
    assert approval.value["tool"] == "refund" and approval.value["args"] == {"order": 7}
    # The call is shown as the model asked for it (its streamed arguments), but nothing ran.
    assert [e.id for e in first if isinstance(e, ev.ToolCallStarted)] == ["call_9"]
    assert not [e for e in first if isinstance(e, ev.ToolCallResult)], "nothing ran yet"
    found = await thread_info(graph, "t1", backend)
    assert found is not None and found[1].suspended

    second = await _collect(
        graph=graph, adapter=adapter, resume={"call_9": True}, thread_id="t1", backend=backend
    )
    assert isinstance(second[-1], ev.RunFinished) and second[-1].reply == "Refunded."
    result = next(e for e in second if isinstance(e, ev.ToolCallResult))
    assert result.content == "refunded order 7"


class Question(Schema):
    prompt: str = ""
    answer: str = ""


class Shout(Node):
    class In(Schema):
        prompt: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(answer=inp.prompt.upper())


def _shout_graph() -> Any:
    return Graph(Question).add(Shout).edge(START, "Shout").edge("Shout", END).compile()


async def test_a_non_agent_graph_answers_through_its_adapter_as_one_text_run() -> None:
    graph = _shout_graph()
    adapter = ChatAdapter.for_graph(
        graph,
        to_input=lambda messages: {"prompt": messages[-1].text},
        to_reply=lambda state: state.answer,
    )
    items = await _collect(graph=graph, adapter=adapter, input=adapter.input_for([user("hi")]))
    assert _kinds(items)[-4:] == ["TextStarted", "TextDelta", "TextEnded", "RunFinished"]
    assert items[-2 - 1].text == "HI" and items[-1].reply == "HI"
    assert items[-1].usage is None


def test_a_non_agent_graph_without_an_adapter_is_refused_naming_the_fix() -> None:
    with pytest.raises(TypeError, match=r"no messages, query field\); pass `to_input=`"):
        ChatAdapter.for_graph(_shout_graph(), to_reply=lambda s: s.answer)
    with pytest.raises(TypeError, match=r"no output field\); pass `to_reply=`"):
        ChatAdapter.for_graph(_shout_graph(), to_input=lambda m: {"prompt": m[-1].text})
    with pytest.raises(TypeError, match="must be a function"):
        ChatAdapter.for_graph(_shout_graph(), to_input="prompt", to_reply=str)  # type: ignore[arg-type]


class Boom(Node):
    class In(Schema):
        prompt: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        raise RuntimeError("secret internals")


async def test_a_fault_ends_the_stream_with_a_500_that_hides_internals() -> None:
    graph = Graph(Question).add(Boom).edge(START, "Boom").edge("Boom", END).compile()
    adapter = ChatAdapter.for_graph(graph, to_input=lambda m: {"prompt": "x"}, to_reply=str)
    items = await _collect(graph=graph, adapter=adapter, input={"prompt": "x"})
    failed = items[-1]
    assert isinstance(failed, ev.RunFailed) and failed.status == 500
    assert "secret" not in failed.message and "RuntimeError" in failed.message


async def test_input_that_does_not_fit_the_state_is_a_400_naming_the_field() -> None:
    graph = _shout_graph()
    adapter = ChatAdapter.for_graph(graph, to_input=lambda m: {"prompt": 3}, to_reply=str)
    items = await _collect(graph=graph, adapter=adapter, input={"prompt": ["not", "text"]})
    failed = items[-1]
    assert isinstance(failed, ev.RunFailed) and failed.status == 400
    assert "prompt" in failed.message


async def test_a_decision_for_an_unknown_id_is_a_400() -> None:
    graph = create_agent(FakeProvider(["hi"]))
    adapter = ChatAdapter.for_graph(graph)
    backend = InMemoryBackend()
    await _collect(
        graph=graph, adapter=adapter, input={"query": "q"}, thread_id="t", backend=backend
    )
    items = await _collect(
        graph=graph, adapter=adapter, resume={"nope": True}, thread_id="t", backend=backend
    )
    assert isinstance(items[-1], ev.RunFailed) and items[-1].status == 400
    assert "not suspended" in items[-1].message


class Slow(Node):
    class In(Schema):
        prompt: str

    class Out(Schema):
        answer: str

    cancelled: asyncio.Event | None = None

    async def run(self, ctx: Context, inp: In) -> Out:
        await ctx.emit("progress", {"n": 1})
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            assert Slow.cancelled is not None
            Slow.cancelled.set()
            raise
        return self.Out(answer="late")


async def test_closing_the_stream_cancels_the_run_and_the_thread_stays_resumable() -> None:
    Slow.cancelled = asyncio.Event()
    graph = Graph(Question).add(Slow).edge(START, "Slow").edge("Slow", END).compile()
    adapter = ChatAdapter.for_graph(graph, to_input=lambda m: {}, to_reply=lambda s: s.answer)
    backend = InMemoryBackend()
    stream = run_events(graph, adapter, input={"prompt": "p"}, thread_id="slow", backend=backend)
    async with aclosing(stream) as items:
        async for item in items:
            if isinstance(item, ev.StepStarted):
                break
    await asyncio.wait_for(Slow.cancelled.wait(), 10)
    found = await thread_info(graph, "slow", backend)
    assert found is not None
    state, info = found
    assert state.prompt == "p" and info.status == "pending", "the input checkpoint is kept"


async def test_run_once_ends_as_the_stream_would_without_token_events() -> None:
    provider = FakeProvider(
        [
            "Hello.",
            assistant(tool_calls=[ToolCall(id="call_1", name="refund", args={"order": 1})]),
        ]
    )
    graph = create_agent(provider, tools=[refund])
    adapter = ChatAdapter.for_graph(graph)
    done = await run_once(graph, adapter, input=adapter.input_for([user("hi")]))
    assert isinstance(done, ev.RunFinished) and done.reply == "Hello."
    assert done.usage is not None and done.usage == done.state.usage
    backend = InMemoryBackend()
    waiting = await run_once(
        graph, adapter, input={"query": "refund 1"}, thread_id="once", backend=backend
    )
    assert isinstance(waiting, ev.RunSuspended) and waiting.approvals[0].id == "call_1"
    assert waiting.thread_id == "once"


async def test_run_once_tells_a_bad_input_400_from_a_node_fault_500() -> None:
    shout = _shout_graph()
    adapter = ChatAdapter.for_graph(shout, to_input=lambda m: {}, to_reply=lambda s: s.answer)
    bad = await run_once(shout, adapter, input={"prompt": ["x"]})
    assert isinstance(bad, ev.RunFailed) and bad.status == 400

    class Picky(Node):
        class In(Schema):
            prompt: str

        class Out(Schema):
            answer: str

        async def run(self, ctx: Context, inp: In) -> Out:
            raise ValueError("internal invariant broken")

    graph = Graph(Question).add(Picky).edge(START, "Picky").edge("Picky", END).compile()
    fault = await run_once(graph, adapter, input={"prompt": "x"})
    assert isinstance(fault, ev.RunFailed) and fault.status == 500, "a node's ValueError is ours"
    assert "internal invariant" not in fault.message


class Topic(Schema):
    topic: str = ""
    answer: str = ""


class Inner(Node):
    class In(Schema):
        topic: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        await ctx.emit("inner.progress", {"topic": inp.topic})
        return self.Out(answer=inp.topic.upper())


class Outer(Node):
    class In(Schema):
        topic: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        await ctx.emit("outer.progress", 0.5)
        inner = Graph(Topic).add(Inner()).edge(START, "Inner").edge("Inner", END).compile()
        state = await run_subgraph(inner, {"topic": inp.topic}, ctx)
        return self.Out(answer=state.answer)


async def test_ctx_emit_events_are_custom_events_nested_ones_under_their_namespace() -> None:
    graph = Graph(Topic).add(Outer()).edge(START, "Outer").edge("Outer", END).compile()
    adapter = ChatAdapter(to_input=lambda m: {"topic": m[-1].text}, to_reply=lambda s: s.answer)
    items = await _collect(graph=graph, adapter=adapter, input={"topic": "shoes"})
    custom = [e for e in items if isinstance(e, ev.Custom)]
    assert [(e.name, e.value, e.node) for e in custom] == [
        ("outer.progress", 0.5, "Outer"),
        ("inner.progress", {"topic": "shoes"}, "Inner"),
    ]
    assert custom[0].namespace == () and custom[1].namespace != ()
    assert isinstance(items[-1], ev.RunFinished) and items[-1].reply == "SHOES"


def test_an_effect_in_doubt_reaches_every_protocol_as_a_custom_event() -> None:
    from tensorsketch.events import Event

    found = {"key": "0:Pay:0:pay", "effect": "pay", "args": {"order": "A-17"}, "action": "ask"}
    event = Event(1, "effect_in_doubt", "Pay", "r", "t", data=found, step=0)
    (out,) = ev._Translator("t").feed(event)
    assert isinstance(out, ev.Custom)
    assert out.name == "effect_in_doubt" and out.value["args"] == {"order": "A-17"}
