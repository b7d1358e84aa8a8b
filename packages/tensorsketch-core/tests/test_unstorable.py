"""A value the serializer cannot store is named where it sits: the state field and the node
that wrote it, the input field, or the ``ctx.step`` whose result it was (the serializer alone
said ``cannot store a lock``, naming neither)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tensorsketch import END, START, Context, Graph, Node, Schema
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.serializers import (
    JsonSerializer,
    MsgpackSerializer,
    PickleSerializer,
    UnstorableValueError,
)


class Job(Schema):
    order: str = ""
    guard: Any = None
    note: str = ""


class Grab(Node):
    class In(Schema):
        order: str

    class Out(Schema):
        guard: Any

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(guard=threading.Lock())


class Slow(Node):
    class In(Schema):
        order: str

    class Out(Schema):
        note: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        await asyncio.sleep(0.05)  # finishes after Grab: Grab's writes are journaled alone
        return self.Out(note="slow")


class Step(Node):
    class In(Schema):
        order: str

    class Out(Schema):
        note: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        await ctx.step("take_lock", threading.Lock)
        return self.Out(note="stepped")


ONE = Graph(Job).add(Grab).edge(START, "Grab").edge("Grab", END).compile()
TWO = (
    Graph(Job)
    .add(Grab)
    .add(Slow)
    .edge(START, "Grab")
    .edge(START, "Slow")
    .edge("Grab", END)
    .edge("Slow", END)
    .compile()
)
STEP = Graph(Job).add(Step).edge(START, "Step").edge("Step", END).compile()


@pytest.mark.parametrize("serializer", [JsonSerializer(), MsgpackSerializer()])
def test_the_serializer_names_the_type_in_plain_words(serializer: Any) -> None:
    with pytest.raises(UnstorableValueError, match="cannot store a value of type 'object'"):
        serializer.dumps({"x": object()})  # was "cannot store a object"
    with pytest.raises(TypeError, match="cannot store a value of type 'lock'"):
        serializer.dumps([threading.Lock()])


def test_pickle_says_it_cannot_store_the_value() -> None:
    with pytest.raises(UnstorableValueError, match="PickleSerializer cannot store this value"):
        PickleSerializer().dumps(threading.Lock())


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        (ONE, "state field Job.guard (written by node 'Grab') cannot be checkpointed: "),
        (TWO, "state field Job.guard (written by node 'Grab') cannot be checkpointed: "),
        (STEP, "the result of durable step 'take_lock' of node 'Step' (superstep 0) cannot be "),
    ],
    ids=["checkpoint", "parallel-branch-journal", "ctx-step"],
)
async def test_the_field_and_the_node_are_named(graph: Any, expected: str) -> None:
    with pytest.raises(UnstorableValueError) as info:
        await graph.invoke({"order": "o"}, thread_id="t", backend=InMemoryBackend())
    message = str(info.value)
    assert message.startswith(expected)
    assert "cannot store a value of type 'lock'" in message


async def test_an_input_field_is_named() -> None:
    with pytest.raises(UnstorableValueError) as info:
        await STEP.invoke(
            {"order": "o", "guard": threading.Lock()}, thread_id="t", backend=InMemoryBackend()
        )
    assert str(info.value).startswith(
        "state field 'guard' (from the run's input) cannot be checkpointed: "
    )
