"""A run's stream events are stored one row per commit (``durable.event_rows``): one encoder
call per commit, no mapping built or walked per event, and ``run_end`` without the state its
``values`` event just stored. Replays read back what the live stream sent, from any seq,
and rows written in the old form (an ``Event.to_dict()`` mapping each) read as they did."""

from __future__ import annotations

import operator
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import pytest

from tensorsketch.channels import Reducer
from tensorsketch.constants import END, START
from tensorsketch.context import Context
from tensorsketch.durable.event_rows import decode_row, encode_events, stored_run_id
from tensorsketch.errors import CheckpointDecodeError
from tensorsketch.events import Event
from tensorsketch.graph import Graph
from tensorsketch.messages import Message, user
from tensorsketch.node import Node
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runtime.backends.base import Backend, StoredEvent
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.schema import Schema
from tensorsketch.serializers import JsonSerializer, MsgpackSerializer, PickleSerializer

MARKER = "state-marker-7f3a"


class Chat(Schema):
    tag: str = ""
    messages: Annotated[list[Message], Reducer(operator.add)] = []


class _In(Schema):
    messages: list[Message]


class _Out(Schema):
    messages: list[Message]


class Echo(Node):
    In, Out = _In, _Out

    async def run(self, ctx: Context, inp: _In) -> _Out:
        await ctx.emit("note", {"seen": len(inp.messages)})
        return _Out(messages=[user(f"echo {inp.messages[-1].text}")])


def _app() -> CompiledGraph[Any]:
    return Graph(Chat).add(Echo).edge(START, "Echo").edge("Echo", END).compile()


async def _streamed(app: CompiledGraph[Any], backend: Backend, thread: str) -> list[Event]:
    return [
        e
        async for e in app.stream(
            {"tag": MARKER, "messages": [user("hi")]}, thread_id=thread, backend=backend
        )
    ]


def _full(events: list[Event]) -> list[dict[str, Any]]:
    return [e.to_dict() for e in events]


@pytest.fixture(params=["memory-msgpack", "memory-json", "memory-pickle", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return SqliteBackend(tmp_path / "events.db")
    serializer = {"msgpack": MsgpackSerializer, "json": JsonSerializer, "pickle": PickleSerializer}
    return InMemoryBackend(serializer=serializer[request.param.split("-")[1]]())


async def test_a_replay_reads_back_what_the_live_stream_sent(backend: Backend) -> None:
    app = _app()
    live = await _streamed(app, backend, "t")
    again = await _streamed(app, backend, "t")  # a second run on the thread: seqs go on
    assert [e.type for e in live][-2:] == ["values", "run_end"]
    replayed = [e async for e in app.replay("t", backend)]
    assert _full(replayed) == _full(live + again)
    assert replayed[-1].data is not replayed[-2].data  # distinct mappings, as streamed


async def test_a_replay_from_any_seq_reads_the_events_from_there(backend: Backend) -> None:
    """``since`` inside a commit's row (an SSE follower resuming after the ``values``
    event, say): the events before it are left out, ``run_end`` still has its state."""
    app = _app()
    live = await _streamed(app, backend, "t") + await _streamed(app, backend, "t")
    for since in range(len(live) + 1):
        replayed = [e async for e in app.replay("t", backend, since=since)]
        assert _full(replayed) == _full(live[since:])


async def test_a_commit_is_one_row_under_its_last_seq() -> None:
    """Six events, one barrier: one row, keyed so that the thread's last event seq (where
    the next run numbers from) and a read from any seq of it still find it."""
    backend = InMemoryBackend()
    live = await _streamed(_app(), backend, "t")
    assert len(live) == 6
    rows = await backend.read_events("t")
    assert [r.seq for r in rows] == [live[-1].seq]
    assert await backend.last_event_seq("t") == live[-1].seq
    assert await backend.read_events("t", since=1) == rows


async def test_run_end_is_stored_without_the_state_of_its_values_event() -> None:
    """The marker is in the run's input (``run_start``) and its state (``values``): the
    ``run_end`` that repeats the state stores it no third time."""
    backend = InMemoryBackend()
    await _streamed(_app(), backend, "t")
    rows = await backend.read_events("t")
    assert sum(r.payload.count(MARKER.encode()) for r in rows) == 2


class _Counting(MsgpackSerializer):
    """Records what each ``dumps`` call was handed."""

    def __init__(self) -> None:
        super().__init__()
        self.handed: list[Any] = []

    def dumps(self, obj: Any) -> bytes:
        self.handed.append(obj)
        return super().dumps(obj)


def _states(obj: Any) -> int:
    """How many copies of the whole state ``obj`` (handed to the encoder) holds at its top."""
    items = obj if isinstance(obj, list) else [obj.get("data")] if isinstance(obj, dict) else []
    return sum(isinstance(v, dict) and set(v) == {"tag", "messages"} for v in items)


async def test_the_encoder_is_called_once_per_commit_with_the_state_once() -> None:
    """The run's six events go to the encoder in one call (six before, each a
    ``to_dict()`` mapping built for it to walk), holding the state once for ``values``
    and ``run_end`` together (twice before)."""
    serializer = _Counting()
    backend = InMemoryBackend(serializer=serializer)
    live = await _streamed(_app(), backend, "t")
    run_id = live[0].run_id
    handed = [
        o
        for o in serializer.handed
        if (isinstance(o, dict) and o.get("run_id") == run_id)
        or (isinstance(o, list) and run_id in o[:2])
    ]
    assert len(handed) == 1
    assert sum(_states(o) for o in handed) == 1


#: Rows 6 to 9 of a thread, written in the old form (``Event.to_dict()`` encoded by the
#: release before the compact form): msgpack, and JSON (a store can switch between them).
_OLD_ROWS = [
    b"\xc1\x89\xa3seq\x06\xa4type\xa9run_start\xa4node\xc0\xa6run_id\xa5r-old\xa9thread_id"
    b"\xa5t-old\xa9namespace\x90\xa4step\x00\xa2ts\xcb?\xf8\x00\x00\x00\x00\x00\x00\xa4data"
    b"\x81\xa5input\x81\xa1q\xa1x",
    b"\xc1\x89\xa3seq\x07\xa4type\xa6values\xa4node\xc0\xa6run_id\xa5r-old\xa9thread_id"
    b"\xa5t-old\xa9namespace\x90\xa4step\x00\xa2ts\xcb@\x04\x00\x00\x00\x00\x00\x00\xa4data"
    b"\x82\xa1q\xa1x\xa8messages\x91\xc7{\x01\x83\xa2$t\xa5model\xa1c\xbdtensorsketch.messages"
    b":Message\xa1v\x88\xa4role\xa4user\xa7content\xa2hi\xaatool_calls\x90\xactool_call_id"
    b"\xc0\xa4name\xc0\xa8is_error\xc2\xa2id\xc0\xa9reasoning\x90",
    b"\xc1\x89\xa3seq\x08\xa4type\xa7run_end\xa4node\xc0\xa6run_id\xa5r-old\xa9thread_id"
    b"\xa5t-old\xa9namespace\x90\xa4step\x01\xa2ts\xcb@\x0c\x00\x00\x00\x00\x00\x00\xa4data"
    b"\x82\xa1q\xa1x\xa8messages\x91\xc7{\x01\x83\xa2$t\xa5model\xa1c\xbdtensorsketch.messages"
    b":Message\xa1v\x88\xa4role\xa4user\xa7content\xa2hi\xaatool_calls\x90\xactool_call_id"
    b"\xc0\xa4name\xc0\xa8is_error\xc2\xa2id\xc0\xa9reasoning\x90",
    b'{"seq":9,"type":"run_start","node":null,"run_id":"r-old2","thread_id":"t-old",'
    b'"namespace":["sub"],"step":0,"ts":4.5,"data":{"input":{"q":"y"}}}',
]
_OLD_EVENTS = [
    Event(6, "run_start", None, "r-old", "t-old", {"input": {"q": "x"}}, (), 0, 1.5),
    Event(7, "values", None, "r-old", "t-old", {"q": "x", "messages": [user("hi")]}, (), 0, 2.5),
    Event(8, "run_end", None, "r-old", "t-old", {"q": "x", "messages": [user("hi")]}, (), 1, 3.5),
    Event(9, "run_start", None, "r-old2", "t-old", {"input": {"q": "y"}}, ("sub",), 0, 4.5),
]


async def test_rows_of_the_old_form_read_back_as_before(backend: Backend) -> None:
    """A run of this version, old rows after it, another run: all of them replay, from
    every seq, and each row names its run."""
    app = _app()
    first = await _streamed(app, backend, "t-old")
    assert [e.seq for e in first] == [0, 1, 2, 3, 4, 5]
    old = _OLD_ROWS
    if isinstance(backend.serializer, PickleSerializer):  # what the old form pickled
        old = [backend.serializer.dumps(e.to_dict()) for e in _OLD_EVENTS]
    await backend.append_events("t-old", [StoredEvent(6 + i, p) for i, p in enumerate(old)])
    then = await _streamed(app, backend, "t-old")
    replayed = [e async for e in app.replay("t-old", backend)]
    assert _full(replayed) == _full(first) + _full(_OLD_EVENTS) + _full(then)
    assert [e.ts for e in replayed[6:10]] == [1.5, 2.5, 3.5, 4.5]
    for seq in range(len(replayed) + 1):
        tail = [e async for e in app.replay("t-old", backend, since=seq)]
        assert _full(tail) == _full(replayed[seq:])
    rows = await backend.read_events("t-old")
    loads = backend.serializer.loads
    named = [stored_run_id(loads(r.payload)) for r in rows]
    assert named[0] == first[0].run_id and named[-1] == then[0].run_id
    assert named[-5:-1] == ["r-old"] * 3 + ["r-old2"]


def test_events_that_are_not_one_runs_are_stored_a_row_each() -> None:
    """Two runs' events in one commit (the engine writes none) fall back to the old form,
    one mapping per event under its own seq; a row of neither form is refused by name."""
    serializer = MsgpackSerializer()
    events = [
        Event(3, "custom", "A", "r1", "t", {"n": 1}, ("sub",), 2, 1.0),
        Event(4, "custom", "A", "r2", "t", {"n": 2}, (), 2, 2.0),
    ]
    rows = encode_events(serializer, "t", events)
    assert [r.seq for r in rows] == [3, 4]
    decoded = [decode_row(serializer.loads(r.payload), r.seq, "t") for r in rows]
    assert decoded == [[events[0]], [events[1]]]
    (one,) = encode_events(serializer, "t", [events[0], replace(events[1], run_id="r1")])
    assert one.seq == 4
    assert decode_row(serializer.loads(one.payload), 4, "t") == [
        events[0],
        replace(events[1], run_id="r1"),
    ]
    with pytest.raises(CheckpointDecodeError, match="event 5 of thread 't'"):
        decode_row(serializer.loads(one.payload), 5, "t")  # its events end at 4
    with pytest.raises(CheckpointDecodeError, match="not a stored event"):
        decode_row([9, "x"], 1, "t")


class Kept(Schema):
    messages: list[Message] = []  # no reducer: what the node writes is the state's list


class Whole(Node):
    """Writes back the whole transcript, as an agent does."""

    In, Out = _In, _Out

    async def run(self, ctx: Context, inp: _In) -> _Out:
        return _Out(messages=[*inp.messages, user(f"echo {inp.messages[-1].text}")])


def _whole_app() -> CompiledGraph[Any]:
    return Graph(Kept).add(Whole).edge(START, "Whole").edge("Whole", END).compile()


async def test_writes_a_node_hands_back_to_the_state_are_stored_once(backend: Backend) -> None:
    """``node_end``'s writes are the next ``values`` event's fields (the same list): the row
    holds them once, and every replay, from any seq, reads them back as streamed."""
    app = _whole_app()
    live = [
        e async for e in app.stream({"messages": [user(MARKER)]}, thread_id="t", backend=backend)
    ]
    ended = next(e for e in live if e.type == "node_end")
    assert ended.data["writes"]["messages"][0].text == MARKER
    for since in range(len(live) + 1):
        replayed = [e async for e in app.replay("t", backend, since=since)]
        assert _full(replayed) == _full(live[since:])
    rows = await backend.read_events("t")
    if not isinstance(backend.serializer, PickleSerializer):  # pickle shares the objects
        # The input (run_start), the state's two messages (values): not node_end's writes
        # (two more before), not run_end.
        assert sum(r.payload.count(MARKER.encode()) for r in rows) == 3


async def test_an_agents_transcript_is_stored_once_per_commit() -> None:
    """An agent writes back its whole transcript (a new list of the same messages)."""
    from tensorsketch import ChatProvider, Completion, create_agent
    from tensorsketch.messages import assistant

    class Scripted(ChatProvider):
        model = provider_name = "scripted"

        async def complete(self, messages: Any, **_: Any) -> Completion:
            return Completion(message=assistant(MARKER), model="scripted")

    backend = InMemoryBackend()
    agent = create_agent(Scripted())
    live = [e async for e in agent.stream({"query": "hi"}, thread_id="t", backend=backend)]
    writes = next(e for e in live if e.type == "node_end").data["writes"]
    state = next(e for e in live if e.type == "values").data
    assert writes["messages"] is not state["messages"] and writes["messages"] == state["messages"]
    replayed = [e async for e in agent.replay("t", backend)]
    assert _full(replayed) == _full(live)
    (row,) = await backend.read_events("t")
    # The token event and the state's reply (values): not node_end's copy, not run_end's.
    assert row.payload.count(MARKER.encode()) == 3  # token, the reply, the agent's output


#: A commit's row as the release before ``lent`` wrote it (form 2: a four-item head).
_FORM_2 = (
    b"\xc1\xdc\x00\x16\x02\xa4r-v2\x03\x02\xa8node_end\xa1A\x90\x00\xcb?\xf8\x00\x00\x00\x00"
    b"\x00\x00\x82\xa8instance\xa0\xa6writes\x81\xa8messages\x91\xc7{\x01\x83\xa2$t\xa5model"
    b"\xa1c\xbdtensorsketch.messages:Message\xa1v\x88\xa4role\xa4user\xa7content\xa2hi\xaa"
    b"tool_calls\x90\xactool_call_id\xc0\xa4name\xc0\xa8is_error\xc2\xa2id\xc0\xa9reasoning"
    b"\x90\xa6values\xc0\x90\x00\xcb@\x04\x00\x00\x00\x00\x00\x00\x81\xa8messages\x91\xc7{"
    b"\x01\x83\xa2$t\xa5model\xa1c\xbdtensorsketch.messages:Message\xa1v\x88\xa4role\xa4user"
    b"\xa7content\xa2hi\xaatool_calls\x90\xactool_call_id\xc0\xa4name\xc0\xa8is_error\xc2\xa2"
    b"id\xc0\xa9reasoning\x90\xa7run_end\xc0\x90\x01\xcb@\x0c\x00\x00\x00\x00\x00\x00\xc0"
)


def test_rows_of_form_2_read_back_as_before() -> None:
    serializer = MsgpackSerializer()
    state = {"messages": [user("hi")]}
    assert decode_row(serializer.loads(_FORM_2), 5, "t-v2") == [
        Event(3, "node_end", "A", "r-v2", "t-v2", {"instance": "", "writes": state}, (), 0, 1.5),
        Event(4, "values", None, "r-v2", "t-v2", state, (), 0, 2.5),
        Event(5, "run_end", None, "r-v2", "t-v2", state, (), 1, 3.5),
    ]
    assert stored_run_id(serializer.loads(_FORM_2)) == "r-v2"


def test_a_row_lending_writes_to_no_values_event_is_refused() -> None:
    serializer = MsgpackSerializer()
    events = [
        Event(0, "node_end", "A", "r", "t", {"instance": "", "writes": {"n": [1]}}, (), 0, 1.0),
        Event(1, "values", None, "r", "t", {"n": [1]}, (), 0, 2.0),
    ]
    events[1] = replace(events[1], data={"n": events[0].data["writes"]["n"]})
    (row,) = encode_events(serializer, "t", events)
    raw = serializer.loads(row.payload)
    assert raw[4] == [0]  # lent: node_end's writes are the values' list
    assert decode_row(raw, 1, "t") == events
    raw[6 + 5] = "values-gone"  # the values event's kind, changed
    raw[5 + 6] = "custom"
    with pytest.raises(CheckpointDecodeError, match="event 1 of thread 't'"):
        decode_row(raw, 1, "t")
