"""stream(): typed events, custom emits, backpressure, early exit, errors after delivery."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from tensorsketch import END, START, Context, Event, Graph, InMemoryBackend, Node, Schema


class S(Schema):
    n: int = 0
    hits: list[str] = []


class Step(Node):
    class In(Schema):
        n: int

    class Out(Schema):
        n: int

    async def run(self, ctx: Context, inp: In) -> Out:
        await ctx.emit("status", {"at": inp.n})
        return self.Out(n=inp.n + 1)


def counting(limit: int) -> Any:
    return (
        Graph(S).add(Step).edge(START, "Step").loop("Step", until=lambda s: s.n >= limit).compile()
    )


async def test_event_sequence_and_fields() -> None:
    lane = counting(2).stream({}, thread_id="lane-1", backend=InMemoryBackend())
    events = [e async for e in lane]
    assert [e.type for e in events] == [
        "run_start",
        "node_start", "status", "node_end", "values",
        "node_start", "status", "node_end", "values",
        "run_end",
    ]  # fmt: skip
    assert [e.seq for e in events] == list(range(len(events)))
    assert all(isinstance(e, Event) for e in events)
    assert {e.run_id for e in events} == {events[0].run_id}
    assert {e.thread_id for e in events} == {"lane-1"}
    status = [e for e in events if e.type == "status"]
    assert [(e.node, e.data) for e in status] == [("Step", {"at": 0}), ("Step", {"at": 1})]
    values = [e.data["n"] for e in events if e.type == "values"]
    assert values == [1, 2]
    assert events[3].data["writes"] == {"n": 1}
    assert events[-1].data["n"] == 2


async def test_emit_is_a_noop_without_a_consumer() -> None:
    assert (await counting(3).invoke({})).n == 3


async def test_backpressure_pauses_the_producer() -> None:
    produced: list[int] = []

    class Chatty(Node):
        async def run(self, ctx: Context, inp: object) -> None:
            for i in range(50):
                await ctx.emit("tick", i)
                produced.append(i)

    app = Graph(S).add(Chatty).edge(START, "Chatty").compile()
    stream = app.stream({}, buffer=4)
    first = await anext(stream)
    assert first.type == "run_start"
    await asyncio.sleep(0.05)  # give the producer every chance to run ahead
    assert len(produced) <= 6, f"producer ran {len(produced)} events ahead of a 4-slot buffer"
    rest = [e async for e in stream]
    assert len(produced) == 50
    assert [e.data for e in rest if e.type == "tick"] == list(range(50))


async def test_consumer_stopping_early_cancels_the_run() -> None:
    cancelled = asyncio.Event()
    finished = asyncio.Event()

    class Forever(Node):
        async def run(self, ctx: Context, inp: object) -> None:
            try:
                for i in range(10_000):
                    await ctx.emit("tick", i)
                    await asyncio.sleep(0)
                finished.set()
            except asyncio.CancelledError:
                cancelled.set()
                raise

    app = Graph(S).add(Forever).edge(START, "Forever").compile()
    async with contextlib.aclosing(app.stream({}, buffer=2)) as stream:
        async for event in stream:
            if event.type == "tick" and event.data == 3:
                break
    assert cancelled.is_set()
    assert not finished.is_set()


async def test_consumer_break_without_aclosing_still_cancels() -> None:
    cancelled = asyncio.Event()

    class Forever(Node):
        async def run(self, ctx: Context, inp: object) -> None:
            try:
                while True:
                    await ctx.emit("tick", None)
            except asyncio.CancelledError:
                cancelled.set()
                raise

    app = Graph(S).add(Forever).edge(START, "Forever").compile()
    async for event in app.stream({}, buffer=1):
        if event.type == "tick":
            break
    for _ in range(50):
        if cancelled.is_set():
            break
        await asyncio.sleep(0.01)
    assert cancelled.is_set()


async def test_error_delivers_events_then_raises_the_original() -> None:
    class Fails(Node):
        class In(Schema):
            n: int

        async def run(self, ctx: Context, inp: In) -> None:
            await ctx.emit("status", "about to fail")
            raise KeyError("missing invoice")

    app = Graph(S).add(Step).add(Fails).edge(START, "Step").edge("Step", "Fails").compile()
    seen: list[str] = []
    with pytest.raises(KeyError, match="missing invoice"):
        async for event in app.stream({}):
            seen.append(event.type)
    assert seen == [
        "run_start", "node_start", "status", "node_end", "values", "node_start", "status",
    ]  # fmt: skip
    assert "run_end" not in seen


async def test_stream_rejects_a_zero_buffer() -> None:
    with pytest.raises(ValueError, match="buffer"):
        async for _ in counting(1).stream({}, buffer=0):
            pass


async def test_parallel_lanes_carry_their_node() -> None:
    def lane(label: str) -> type[Node]:
        class L(Node):
            async def run(self, ctx: Context, inp: object) -> None:
                await ctx.emit("token", label)

        L.__name__ = label
        return L

    app = (
        Graph(S)
        .add(lane("Left"))
        .add(lane("Right"))
        .edge(START, "Left")
        .edge(START, "Right")
        .edge("Left", END)
        .compile()
    )
    tokens = [(e.node, e.data) async for e in app.stream({}) if e.type == "token"]
    assert sorted(tokens) == [("Left", "Left"), ("Right", "Right")]
