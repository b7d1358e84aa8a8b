"""A fork never re-fires a side effect silently (#47), with LangGraph's time-travel and
human-in-the-loop fork tests ported where they apply: nodes before the fork point are not run
again, nodes after it are, and a decision taken down one branch is not taken down another."""

from __future__ import annotations

import operator
from typing import Annotated, Any

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
from tensorsketch.channels import Reducer
from tensorsketch.errors import ForkEffectError
from tensorsketch.interrupts import run_info
from tensorsketch.messages import Message, ToolCall, assistant

RAN: list[str] = []


class Steps(Schema):
    topic: str = ""
    first: str = ""
    second: str = ""


class First(Node):
    class In(Schema):
        topic: str

    class Out(Schema):
        first: str

    async def run(self, ctx: Context, inp: In) -> Out:
        RAN.append("first")
        return self.Out(first=await ctx.step("fetch", lambda: f"facts on {inp.topic}"))


class Second(Node):
    class In(Schema):
        first: str

    class Out(Schema):
        second: str

    async def run(self, ctx: Context, inp: In) -> Out:
        RAN.append("second")

        def post() -> str:
            RAN.append("posted")
            return f"posted {inp.first}"

        return self.Out(second=await ctx.step("post", post))


STEPS = (
    Graph(Steps)
    .add(First)
    .add(Second)
    .edge(START, "First")
    .edge("First", "Second")
    .edge("Second", END)
    .compile()
)


async def test_nodes_before_the_fork_point_are_not_run_again_and_after_it_are() -> None:
    """Ported from LangGraph's time travel: re-running from a checkpoint replays what came
    before it and re-executes what comes after — here with the effect decided explicitly."""
    # Mirrors LangGraph tests/test_pregel.py::test_invoke_two_processes_in_out_interrupt, its
    # "forking from any previous checkpoint should re-run nodes" part (two nodes; a fork
    # before the second runs only the second), with the second node's effect journaled.
    backend = InMemoryBackend()
    await STEPS.invoke({"topic": "tides"}, thread_id="t", backend=backend)
    before_second = next(c for c in await STEPS.aget_history("t", backend) if c.next == ("Second",))
    RAN.clear()
    with pytest.raises(ForkEffectError, match=r"ctx\.step 'post' of node 'Second'") as caught:
        await STEPS.fork(backend, "t", before_second.id, "stopped")
    assert caught.value.origin == "t" and caught.value.key.endswith(":Second:0:post")
    assert RAN == ["second"]  # the node started, and stopped before the post
    RAN.clear()
    rerun = await STEPS.fork(backend, "t", before_second.id, "rerun", effects="rerun")
    assert RAN == ["second", "posted"] and rerun.second == "posted facts on tides"
    RAN.clear()
    reused = await STEPS.fork(backend, "t", before_second.id, "reuse", effects="reuse")
    assert RAN == ["second"] and reused.second == rerun.second  # replayed, not posted


async def test_a_new_branch_of_the_fork_runs_effects_the_origin_never_ran() -> None:
    backend = InMemoryBackend()
    await STEPS.invoke({"topic": "tides"}, thread_id="t", backend=backend)
    start = (await STEPS.aget_history("t", backend))[0]
    RAN.clear()
    # From before First: its "fetch" ran in the origin after the fork point; "reuse" replays
    # it, and Second's "post" too — the calls are the same ones.
    out = await STEPS.fork(backend, "t", start.id, "same", effects="reuse")
    assert RAN == ["first", "second"] and out.second == "posted facts on tides"


def refund_agent(log: list[int], replies: list[Message]) -> Any:
    @tool(requires_approval=True)
    def refund(order: int) -> str:
        """Refund an order."""
        log.append(order)
        return f"refunded #{order}"

    return create_agent(FakeProvider(replies), tools=[refund])


def refund_call(order: int) -> Message:
    return assistant("", tool_calls=[ToolCall(id="r", name="refund", args={"order": order})])


async def test_a_decision_down_one_branch_is_not_taken_down_another() -> None:
    """Ported from LangGraph's human-in-the-loop forks: fork from the checkpoint waiting on a
    decision and decide differently there. The approval the origin recorded is not inherited
    (it came after the fork point), and the refund it ran is not run again by the fork."""
    # From LangGraph's human-in-the-loop time-travel guide (fork the checkpoint waiting on an
    # interrupt with update_state, resume it differently), not from a test of theirs: none
    # asserts what happens to the side effect, which is what this one checks.
    log: list[int] = []
    agent = refund_agent(log, [refund_call(7), assistant("Refunded."), assistant("Not done.")])
    backend = InMemoryBackend()
    await agent.invoke({"query": "refund 7"}, thread_id="t", backend=backend)
    waiting = (await agent.aget_history("t", backend))[-1]
    await agent.invoke(thread_id="t", backend=backend, resume={"r": True})
    assert log == [7]

    fork = await agent.fork(backend, "t", waiting.id, "no")
    assert run_info(fork).awaiting == ["r"]  # asked again down the fork
    out = await agent.invoke(thread_id="no", backend=backend, resume={"r": False})
    assert run_info(out).status == "completed" and log == [7]  # rejected: nothing ran

    await agent.fork(backend, "t", waiting.id, "yes")
    with pytest.raises(ForkEffectError, match=r'tool call refund\(\{"order": 7\}\)'):
        await agent.invoke(thread_id="yes", backend=backend, resume={"r": True})
    assert log == [7]


async def test_a_reusing_fork_replays_an_identical_tool_call_and_refuses_another() -> None:
    log: list[int] = []
    replies = [refund_call(7), assistant("Refunded."), refund_call(7), assistant("Again.")]
    agent = refund_agent(log, [*replies, refund_call(8), assistant("Eight.")])
    backend = InMemoryBackend()
    await agent.invoke({"query": "refund 7"}, thread_id="t", backend=backend)
    await agent.invoke(thread_id="t", backend=backend, resume={"r": True})
    start = (await agent.aget_history("t", backend))[0]  # before the model was asked
    # The fork asks the model again (model calls are not side effects): the same call comes
    # back, is approved again, and its result is the origin's.
    await agent.fork(backend, "t", start.id, "same", effects="reuse")
    out = await agent.invoke(thread_id="same", backend=backend, resume={"r": True})
    assert run_info(out).status == "completed" and log == [7]
    assert any(m.role == "tool" and m.text == "refunded #7" for m in out.messages)
    # A model that now asks for refund(8) at the same place: not the origin's call.
    await agent.fork(backend, "t", start.id, "other", effects="reuse")
    with pytest.raises(ForkEffectError, match="other arguments"):
        await agent.invoke(thread_id="other", backend=backend, resume={"r": True})
    assert log == [7]


# -- LangGraph's fork tests, ported --------------------------------------------------------------

ADDED: list[int] = []


class Count(Schema):
    total: Annotated[int, Reducer(operator.add)] = 0


class AddOne(Node):
    """A plain node (no journaled side effect): a fork runs it again whatever ``effects=``."""

    class Out(Schema):
        total: int

    async def run(self, ctx: Context, inp: Schema) -> Out:
        ADDED.append(1)
        return self.Out(total=1)


ADD_LOOP = (
    Graph(Count)
    .add(AddOne)
    .edge(START, "AddOne")
    .router("AddOne", lambda s: "AddOne" if s.total < 6 else END)
    .compile()
)


async def test_langgraph_fork_always_re_runs_nodes() -> None:
    # Mirrors LangGraph tests/test_pregel.py::test_fork_always_re_runs_nodes: a node adding 1
    # loops until the total reaches 6; forking from any earlier checkpoint runs the node
    # again once for every step the fork point was short of 6 (none from the last one).
    backend = InMemoryBackend()
    ADDED.clear()
    out = await ADD_LOOP.invoke({"total": 1}, thread_id="t", backend=backend)
    assert out.total == 6 and len(ADDED) == 5
    history = await ADD_LOOP.aget_history("t", backend)
    for n, checkpoint in enumerate(history):
        at = await ADD_LOOP.aget_state_at("t", backend, checkpoint.id)
        assert at is not None
        ADDED.clear()
        forked = await ADD_LOOP.fork(backend, "t", checkpoint.id, f"fork-{n}")
        assert forked.total == 6
        assert len(ADDED) == (6 - at.total if checkpoint.next else 0), checkpoint
