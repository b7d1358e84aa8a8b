"""``CompiledGraph.areplay_node``: one node of a checkpoint re-run in isolation, its journaled
calls answered from the thread's journal (or live), and nothing ever written to the thread."""

from __future__ import annotations

from operator import add
from pathlib import Path
from typing import Annotated, Any

import pytest

from tensorsketch import END, START, Context, Graph, InMemoryBackend, Node, Reducer, Schema, Send
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.sqlite import SqliteBackend

CALLS: list[str] = []


class Counter(Schema):
    count: int = 0
    limit: int = 3
    log: Annotated[list[str], Reducer(add)] = []


class Increment(Node):
    class In(Schema):
        count: int

    class Out(Schema):
        count: int
        log: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        def effect() -> str:
            CALLS.append(f"called {inp.count}")
            return f"fetched {inp.count}"

        fetched = await ctx.step("fetch", effect)
        return self.Out(count=inp.count + 1, log=[fetched])


def keep_going(state: Counter) -> str:
    return END if state.count >= state.limit else "Increment"


LOOP = (
    Graph(Counter).add(Increment).edge(START, "Increment").conditional("Increment", keep_going)
).compile()


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return InMemoryBackend() if request.param == "memory" else SqliteBackend(tmp_path / "r.db")


async def _snapshot(backend: Backend, thread: str) -> tuple[Any, ...]:
    return (
        await backend.list_checkpoints(thread),
        await backend.list_effects(thread),
        await backend.read_events(thread),
    )


async def test_replay_answers_from_the_journal_and_writes_nothing(backend: Backend) -> None:
    await LOOP.invoke({"limit": 3}, thread_id="t", backend=backend)
    history = await LOOP.aget_history("t", backend)
    before = await _snapshot(backend, "t")
    CALLS.clear()
    replay = await LOOP.areplay_node("t", backend, history[1].id, "Increment")
    assert CALLS == []  # the effect was not called again
    assert replay.node == "Increment" and replay.checkpoint_id == history[1].id
    assert replay.step == history[1].step
    assert [(t.instance, t.writes, t.error) for t in replay.tasks] == [
        ("", {"count": 2, "log": ["fetched 1"]}, None)
    ]
    assert (replay.replayed, replay.live) == (1, 0)
    assert await _snapshot(backend, "t") == before
    # no lease left behind: a run of the thread can start at once
    assert await backend.acquire_lease("t", "someone-else", 5.0)


async def test_live_replay_calls_out_but_still_writes_nothing(backend: Backend) -> None:
    await LOOP.invoke({"limit": 2}, thread_id="t", backend=backend)
    history = await LOOP.aget_history("t", backend)
    before = await _snapshot(backend, "t")
    CALLS.clear()
    replay = await LOOP.areplay_node("t", backend, history[0].id, "Increment", live=True)
    assert CALLS == ["called 0"]
    assert (replay.replayed, replay.live) == (0, 1)
    assert replay.tasks[0].writes == {"count": 1, "log": ["fetched 0"]}
    assert await _snapshot(backend, "t") == before


async def test_a_call_the_journal_lacks_runs_live() -> None:
    backend = InMemoryBackend()
    await LOOP.invoke({"limit": 2}, thread_id="t", backend=backend, interrupt_before=["Increment"])
    head = (await LOOP.aget_history("t", backend))[-1]  # the superstep never ran
    CALLS.clear()
    replay = await LOOP.areplay_node("t", backend, head.id, "Increment")
    assert CALLS == ["called 0"]
    assert (replay.replayed, replay.live) == (0, 1)
    assert await backend.list_effects("t") == []


async def test_replay_reports_an_error_instead_of_raising() -> None:
    class Boom(Node):
        class In(Schema):
            count: int

        class Out(Schema):
            count: int

        async def run(self, ctx: Context, inp: In) -> Out:
            raise RuntimeError(f"bad count {inp.count}")

    graph = Graph(Counter).add(Boom).edge(START, "Boom").edge("Boom", END).compile()
    backend = InMemoryBackend()
    await graph.invoke({"count": 4}, thread_id="t", backend=backend, interrupt_before=["Boom"])
    head = (await graph.aget_history("t", backend))[-1]
    replay = await graph.areplay_node("t", backend, head.id, "Boom")
    assert replay.tasks[0].writes is None
    assert replay.tasks[0].error == "RuntimeError: bad count 4"


class Fan(Schema):
    items: list[int] = []
    item: int = 0  # the per-worker input slot
    done: Annotated[list[int], Reducer(add)] = []


class Split(Node):
    class In(Schema):
        items: list[int]

    class Out(Schema):
        pass

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out()


class Work(Node):
    class In(Schema):
        item: int

    class Out(Schema):
        done: list[int]

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(done=[inp.item * 10])


fan = Graph(Fan).add(Split).add(Work).edge(START, "Split").edge("Work", END)
fan.router("Split", lambda s: [Send("Work", {"item": i}) for i in s.items])
FAN = fan.compile(interrupt_before=["Work"])


async def test_a_fan_out_replays_every_instance() -> None:
    backend = InMemoryBackend()
    await FAN.invoke({"items": [1, 2]}, thread_id="f", backend=backend)
    head = (await FAN.aget_history("f", backend))[-1]
    replay = await FAN.areplay_node("f", backend, head.id, "Work")
    assert [(t.instance, t.writes) for t in replay.tasks] == [
        ("#0", {"done": [10]}),
        ("#1", {"done": [20]}),
    ]


async def test_bad_arguments_say_what_to_pass() -> None:
    backend = InMemoryBackend()
    await LOOP.invoke({"limit": 1}, thread_id="t", backend=backend)
    history = await LOOP.aget_history("t", backend)
    with pytest.raises(KeyError, match="no checkpoint 'nope'"):
        await LOOP.areplay_node("t", backend, "nope", "Increment")
    with pytest.raises(ValueError, match="not a node"):
        await LOOP.areplay_node("t", backend, history[0].id, "Decrement")
    with pytest.raises(ValueError, match=r"does not plan 'Increment'.*its parent"):
        await LOOP.areplay_node("t", backend, history[-1].id, "Increment")
    with pytest.raises(TypeError, match="thread_id must be a str"):
        await LOOP.areplay_node(7, backend, history[0].id, "Increment")  # type: ignore[arg-type]


async def test_fork_without_running_applies_the_values_as_an_edit() -> None:
    backend = InMemoryBackend()
    await LOOP.invoke({"limit": 3}, thread_id="t", backend=backend)
    at = (await LOOP.aget_history("t", backend))[1]
    branched = await LOOP.fork(backend, "t", at.id, "t2", {"limit": 9}, run=False, effects="reuse")
    assert branched.limit == 9 and branched.count == at.values["count"]
    history = await LOOP.aget_history("t2", backend)
    assert [c.source for c in history] == ["fork", "update"]
    assert history[-1].next == ("Increment",)  # the fork point's plan stays
    plain = await LOOP.fork(backend, "t", at.id, "t3", run=False)
    assert plain.count == at.values["count"]
    assert [c.source for c in await LOOP.aget_history("t3", backend)] == ["fork"]
    CALLS.clear()
    done = await LOOP.invoke(thread_id="t2", backend=backend, max_steps=20)
    assert done.count == 9
    # The fork chose "reuse" when it was made: the fetches the origin made after the fork
    # point are replayed, only the ones past the origin's limit run.
    assert [f"called {n}" for n in range(3, 9)] == CALLS


async def test_an_agents_model_and_tool_calls_replay_from_the_journal() -> None:
    from tensorsketch import FakeProvider, create_agent, tool
    from tensorsketch.messages import ToolCall, assistant

    used: list[int] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        used.append(a + b)
        return a + b

    provider = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="c1", name="add", args={"a": 2, "b": 3})]),
            assistant("5"),
        ]
    )
    agent = create_agent(provider, tools=[add])
    backend = InMemoryBackend()
    await agent.invoke({"query": "2 + 3?"}, thread_id="a", backend=backend)
    history = await agent.aget_history("a", backend)
    start = next(c for c in history if c.next)
    calls, tools = len(provider.calls), list(used)
    replay = await agent.areplay_node("a", backend, start.id, start.next[0])
    assert len(provider.calls) == calls and used == tools  # nothing called again
    assert replay.replayed >= 3 and replay.live == 0
    writes = replay.tasks[0].writes
    assert writes is not None and writes["output"] == "5"


async def test_describe_checkpoints_reads_headers_without_state() -> None:
    from tensorsketch.durable import describe_checkpoints

    backend = InMemoryBackend()
    await LOOP.invoke({"limit": 2}, thread_id="t", backend=backend)
    history = await LOOP.aget_history("t", backend)
    heads = describe_checkpoints(backend, await backend.list_checkpoints("t"))
    assert [(h.id, h.parent_id, h.step, h.next, h.source) for h in heads] == [
        (c.id, c.parent_id, c.step, c.next, c.source) for c in history
    ]
    assert set(heads[0].changed) == {"count", "limit", "log"}  # a snapshot names every field
    assert set(heads[1].changed) <= {"count", "log"}  # a delta names what it wrote
