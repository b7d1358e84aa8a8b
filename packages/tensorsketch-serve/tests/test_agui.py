"""``agui_app`` end to end: a real uvicorn server on 127.0.0.1, an httpx streaming client,
and every event parsed by the ``ag-ui-protocol`` package's own models (see agui_client)."""

from __future__ import annotations

import asyncio
import base64
import copy
import itertools
import json
import subprocess
import sys
from typing import Any

import agui_client as client  # type: ignore[import-not-found]
import httpx
import pytest
import vendor_plays  # type: ignore[import-not-found]
import wire_server  # type: ignore[import-not-found]
from ag_ui.core import DataSource, DocumentPart, EventType, TextPart, UserMessage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorsketch import (
    END,
    START,
    FakeProvider,
    Graph,
    InMemoryBackend,
    Node,
    Schema,
    create_agent,
    interrupt,
    tool,
)
from tensorsketch.messages import (
    FileBlock,
    Message,
    Reasoning,
    TextBlock,
    ToolCall,
    assistant,
)
from tensorsketch.serve import agui_app, serve

check_order = client.check_order


def body(thread: str, run: str, *messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"threadId": thread, "runId": run, "messages": list(messages), **extra}


def said(text: str, id: str = "u1") -> dict[str, Any]:
    return {"id": id, "role": "user", "content": text}


# -- an agent with tools and an approval ------------------------------------------------------

ran: list[str] = []


@tool
def lookup(order: int) -> str:
    """Look up an order."""
    ran.append(f"lookup {order}")
    return f"order {order}: shoes"


@tool(requires_approval=True)
def refund(order: int) -> str:
    """Refund an order."""
    ran.append(f"refund {order}")
    return f"refunded {order}"


def refund_script() -> FakeProvider:
    return FakeProvider(
        [
            assistant(
                "Let me check that order.",
                tool_calls=[ToolCall(id="c1", name="lookup", args={"order": 7})],
            ),
            assistant(tool_calls=[ToolCall(id="c2", name="refund", args={"order": 7})]),
            "Order 7 is refunded.",
        ]
    )


def test_approval_suspends_the_run_and_a_resume_completes_it(live: Any) -> None:
    ran.clear()
    provider = refund_script()
    server = live(
        agui_app(create_agent(provider, tools=[lookup, refund]), backend=InMemoryBackend())
    )

    first = client.run(server.url, body("t1", "r1", said("please refund order 7")))
    check_order(first.events)
    assert first.events[0].thread_id == "t1" and first.events[0].run_id == "r1"
    assert first.events[0].protocol_version == "1.0"
    # The first turn's words arrive as the provider streamed them (several deltas).
    contents = first.of(EventType.TEXT_MESSAGE_CONTENT)
    assert len(contents) > 1 and first.text() == "Let me check that order."
    # lookup ran live: start, args, end, result; refund waits, so it is shown but has no result.
    starts = {e.tool_call_id: e for e in first.of(EventType.TOOL_CALL_START)}
    assert set(starts) == {"c1", "c2"} and starts["c2"].tool_call_name == "refund"
    args = {e.tool_call_id: json.loads(e.delta) for e in first.of(EventType.TOOL_CALL_ARGS)}
    assert args == {"c1": {"order": 7}, "c2": {"order": 7}}
    results = first.of(EventType.TOOL_CALL_RESULT)
    assert [(r.tool_call_id, r.content) for r in results] == [("c1", "order 7: shoes")]
    assert starts["c1"].parent_message_id == contents[0].message_id
    assert ran == ["lookup 7"]
    finished = first.events[-1]
    assert finished.type == EventType.RUN_FINISHED and finished.outcome.type == "interrupt"
    [waiting] = finished.outcome.interrupts
    assert (waiting.id, waiting.reason, waiting.tool_call_id) == ("c2", "tool_approval", "c2")
    assert waiting.response_schema["required"] == ["approved"]
    state = first.of(EventType.STATE_SNAPSHOT)[-1].snapshot
    assert state["status"] == "suspended" and state["pending"][0]["id"] == "c2"

    # The client resends the conversation it built from the first run's events.
    kept = client.apply_messages([said("please refund order 7")], first.events)
    resumed = client.run(
        server.url,
        body(
            "t1",
            "r2",
            *kept,
            resume=[{"interruptId": "c2", "status": "resolved", "payload": {"approved": True}}],
        ),
    )
    check_order(resumed.events)
    assert ran == ["lookup 7", "refund 7"], "the approved call ran once; lookup was not redone"
    assert [(r.tool_call_id, r.content) for r in resumed.of(EventType.TOOL_CALL_RESULT)] == [
        ("c2", "refunded 7")
    ]
    assert resumed.text() == "Order 7 is refunded."
    [snapshot] = resumed.of(EventType.MESSAGES_SNAPSHOT)
    shape = [
        (
            m.role,
            m.content if m.role != "assistant" else (m.content, [c.id for c in m.tool_calls or []]),
        )
        for m in snapshot.messages
    ]
    assert shape == [
        ("user", "please refund order 7"),
        ("assistant", ("Let me check that order.", ["c1"])),
        ("tool", "order 7: shoes"),
        ("assistant", (None, ["c2"])),
        ("tool", "refunded 7"),
        ("assistant", ("Order 7 is refunded.", [])),
    ]
    assert snapshot.messages[0].id == "u1", "the client's own ids are kept"
    assert {m["id"] for m in kept} <= {m.id for m in snapshot.messages}, (
        "every message the client holds keeps its id in the snapshot (nothing duplicates)"
    )
    final = client.apply_messages(kept, resumed.events)
    assert [m["id"] for m in final] == [m.id for m in snapshot.messages]
    streamed = resumed.of(EventType.TEXT_MESSAGE_START)[-1].message_id
    assert snapshot.messages[-1].id == streamed, (
        "the snapshot names the streamed message as streamed"
    )
    assert {m.id for m in snapshot.messages if m.role == "tool"} == {
        r.message_id
        for r in first.of(EventType.TOOL_CALL_RESULT) + resumed.of(EventType.TOOL_CALL_RESULT)
    }
    done = resumed.events[-1]
    assert done.outcome.type == "success" and done.result == "Order 7 is refunded."
    assert resumed.of(EventType.STATE_SNAPSHOT)[-1].snapshot["status"] == "completed"


def test_a_cancelled_approval_rejects_the_call(live: Any) -> None:
    ran.clear()
    provider = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="c9", name="refund", args={"order": 9})]),
            "Not refunded.",
        ]
    )
    server = live(agui_app(create_agent(provider, tools=[refund]), backend=InMemoryBackend()))
    first = client.run(server.url, body("t", "r1", said("refund 9")))
    assert first.events[-1].outcome.interrupts[0].id == "c9"
    second = client.run(
        server.url, body("t", "r2", resume=[{"interruptId": "c9", "status": "cancelled"}])
    )
    check_order(second.events)
    assert ran == [], "a cancelled approval does not run the tool"
    seen = provider.calls[-1].messages[-1]
    assert seen.role == "tool" and "rejected" in seen.text
    assert second.events[-1].outcome.type == "success"


def test_resume_requests_that_do_not_fit_the_thread_are_refused(live: Any) -> None:
    provider = FakeProvider(
        [assistant(tool_calls=[ToolCall(id="c3", name="refund", args={"order": 3})])]
    )
    agent = create_agent(provider, tools=[refund])
    server = live(agui_app(agent, backend=InMemoryBackend()))
    assert (
        client.run(server.url, body("t", "r1", said("refund 3"))).events[-1].outcome.type
        == "interrupt"
    )
    cases = [
        (
            server.url,
            body("t", "r2", resume=[{"interruptId": "nope", "status": "resolved"}]),
            422,
            "'c3'",
        ),
        (
            server.url,
            body("t", "r2", resume=[{"interruptId": "c3", "status": "resolved", "payload": 42}]),
            422,
            "approval",
        ),
        (  # given for other arguments than the pending call's (its value carries the digest)
            server.url,
            body(
                "t",
                "r2",
                resume=[
                    {
                        "interruptId": "c3",
                        "status": "resolved",
                        "payload": {"approved": True, "digest": "sha256:00"},
                    }
                ],
            ),
            422,
            "does not match the call",
        ),
        (server.url, body("t", "r2", said("something else", "u2")), 409, "resume"),
        (
            server.url,
            body("new", "r1", resume=[{"interruptId": "c3", "status": "resolved"}]),
            409,
            "not waiting",
        ),
    ]
    for url, request, status, fragment in cases:
        answer = client.run(url, request)
        assert answer.status == status, (request, answer.error)
        assert fragment in answer.error["error"]["message"]
        assert answer.error["error"]["param"] in ("resume", "messages")


def test_token_deltas_from_a_real_provider_sdk_arrive_as_they_stream(live: Any) -> None:
    """The OpenAI SDK (through TensorSketch's provider) reads an SSE stream from the
    providers' wire server; each chunk it streams is one TEXT_MESSAGE_CONTENT."""
    pytest.importorskip("openai")
    pytest.importorskip("tensorsketch.providers.openai")  # a sibling distribution
    wire = wire_server.WireServer().start()
    try:
        play = vendor_plays.PLAYS["openai"]()
        pieces = ["The order ", "ships ", "on Monday", "."]
        wire.queue(play.stream_text(pieces))
        provider = play.provider(wire.url)
        server = live(agui_app(create_agent(provider)))
        answer = client.run(server.url, body("t", "r", said("when does it ship?")))
        server.call(provider.aclose())
    finally:
        wire.stop()
    check_order(answer.events)
    assert [e.delta for e in answer.of(EventType.TEXT_MESSAGE_CONTENT)] == pieces
    assert wire.last.body["stream"] is True, "the provider was asked to stream"
    assert answer.events[-1].result == "The order ships on Monday."


# -- conversations on a durable thread ----------------------------------------------------------


def test_a_second_turn_continues_the_thread_without_repeating_it(live: Any) -> None:
    provider = FakeProvider(["Hello!", "You said hi before."])
    server = live(agui_app(create_agent(provider), backend=InMemoryBackend()))
    first = client.run(server.url, body("chat", "r1", said("hi")))
    history = [
        m.model_dump(by_alias=True, exclude_none=True)
        for m in first.of(EventType.MESSAGES_SNAPSHOT)[0].messages
    ]
    second = client.run(server.url, body("chat", "r2", *history, said("what did I say?", "u2")))
    check_order(second.events)
    sent = [(m.role, m.text) for m in provider.calls[-1].messages]
    assert sent == [("user", "hi"), ("assistant", "Hello!"), ("user", "what did I say?")]
    ids = [m.id for m in second.of(EventType.MESSAGES_SNAPSHOT)[0].messages]
    assert ids[:2] == [h["id"] for h in history], "ids stay put from one snapshot to the next"


def test_a_new_thread_starts_from_the_whole_conversation_the_client_sends(live: Any) -> None:
    provider = FakeProvider(["Second answer."])
    server = live(agui_app(create_agent(provider)))  # its own in-memory backend
    history = [
        said("first"),
        {"id": "a1", "role": "assistant", "content": "First answer."},
        said("second", "u2"),
    ]
    answer = client.run(server.url, body("any", "r1", *history))
    check_order(answer.events)
    assert [(m.role, m.text) for m in provider.calls[-1].messages] == [
        ("user", "first"),
        ("assistant", "First answer."),
        ("user", "second"),
    ]


# -- state: snapshots, JSON Patch deltas, the client's state ---------------------------------------


class Counter(Schema):
    topic: str = ""
    count: int = 0
    notes: list[str] = []
    answer: str = ""


class Bump(Node):
    class In(Schema):
        count: int
        notes: list[str]

    class Out(Schema):
        count: int
        notes: list[str]

    async def run(self, ctx: Any, inp: In) -> Out:
        return self.Out(count=inp.count + 1, notes=[*inp.notes, f"bumped to {inp.count + 1}"])


class Bump2(Bump):
    pass


class Reply(Node):
    class In(Schema):
        topic: str
        count: int

    class Out(Schema):
        answer: str

    async def run(self, ctx: Any, inp: In) -> Out:
        await ctx.emit("progress", {"count": inp.count})
        return self.Out(answer=f"{inp.topic}: {inp.count}")


def counter_graph() -> Any:
    graph = Graph(Counter).add(Bump()).add(Bump2()).add(Reply())
    return (
        graph.edge(START, "Bump")
        .edge("Bump", "Bump2")
        .edge("Bump2", "Reply")
        .edge("Reply", END)
        .compile()
    )


def apply_patch(doc: Any, patch: list[Any]) -> Any:
    return client.apply_rfc6902(doc, [op.model_dump(by_alias=True) for op in patch])


def test_state_travels_as_a_snapshot_then_json_patch_deltas(live: Any) -> None:
    app = agui_app(
        counter_graph(),
        to_input=lambda messages: {"topic": messages[-1].text},
        to_reply=lambda state: state.answer,
        messages_key=None,
    )
    server = live(app)
    answer = client.run(server.url, body("s", "r1", said("apples"), state={"count": 40}))
    check_order(answer.events)
    steps = [
        (e.type.value, e.step_name)
        for e in answer.events
        if e.type in (EventType.STEP_STARTED, EventType.STEP_FINISHED)
    ]
    assert steps == [
        ("STEP_STARTED", "Bump"),
        ("STEP_FINISHED", "Bump"),
        ("STEP_STARTED", "Bump2"),
        ("STEP_FINISHED", "Bump2"),
        ("STEP_STARTED", "Reply"),
        ("STEP_FINISHED", "Reply"),
    ]
    [snapshot] = answer.of(EventType.STATE_SNAPSHOT)
    deltas = answer.of(EventType.STATE_DELTA)
    assert snapshot.snapshot == {
        "topic": "apples",
        "count": 41,
        "notes": ["bumped to 41"],
        "answer": "",
    }
    assert len(deltas) == 2
    state = snapshot.snapshot
    for delta in deltas:
        state = apply_patch(state, delta.delta)
    assert state == {
        "topic": "apples",
        "count": 42,
        "notes": ["bumped to 41", "bumped to 42"],
        "answer": "apples: 42",
    }
    assert answer.events[-1].result == "apples: 42"
    # The graph streamed no tokens, so its reply arrives as one text message.
    assert answer.text() == "apples: 42"


def test_state_keys_the_graph_does_not_have_are_refused(live: Any) -> None:
    server = live(
        agui_app(
            counter_graph(),
            to_input=lambda m: {"topic": m[-1].text},
            to_reply=lambda s: s.answer,
            messages_key=None,
        )
    )
    answer = client.run(server.url, body("s", "r1", said("x"), state={"cuont": 1}))
    assert answer.status == 422 and "'cuont'" in answer.error["error"]["message"]
    assert "count" in answer.error["error"]["message"], "the message lists the fields"
    bad_value = client.run(server.url, body("s", "r1", said("x"), state={"count": "many"}))
    assert bad_value.status == 400 and "count" in bad_value.error["error"]["message"]


# -- failures, limits, the HTTP surface ------------------------------------------------------------


def test_a_failing_run_ends_with_run_error(live: Any) -> None:
    provider = FakeProvider([RuntimeError("the model fell over")])
    server = live(agui_app(create_agent(provider)))
    answer = client.run(server.url, body("t", "r", said("hi")))
    check_order(answer.events)
    error = answer.events[-1]
    assert error.type == EventType.RUN_ERROR and error.code == "internal_error"
    assert "RuntimeError" in error.message


def test_the_http_surface_answers_4xx_with_a_clear_body(live: Any) -> None:
    agent = create_agent(FakeProvider())
    server = live(
        agui_app(
            agent,
            authenticate=lambda r: r.headers.get("authorization") == "Bearer k",
            max_body_bytes=2000,
        )
    )
    auth = {"Authorization": "Bearer k"}
    assert client.run(server.url, body("t", "r", said("hi"))).status == 401
    ok = client.run(server.url, body("t", "r", said("hi")), headers=auth)
    assert ok.status == 200 and ok.text() == "hi"
    big = client.run(server.url, body("t", "r", said("x" * 5000)), headers=auth)
    assert big.status == 413 and "2000" in big.error["error"]["message"]
    got = httpx.get(server.url + "/", headers=auth)
    assert got.status_code == 405 and "POST" in got.json()["error"]["message"]
    raw = httpx.post(server.url + "/", content=b"{nope", headers=auth)
    assert raw.status_code == 400 and "JSON" in raw.json()["error"]["message"]
    empty = client.run(server.url, body("t", "r"), headers=auth)
    assert empty.status == 422 and empty.error["error"]["param"] == "messages"
    long_thread = client.run(server.url, body("t" * 300, "r", said("hi")), headers=auth)
    assert long_thread.status == 422 and long_thread.error["error"]["param"] == "threadId"


def test_a_document_part_reaches_the_model_and_bad_files_are_4xx(live: Any) -> None:
    provider = FakeProvider(["Read it."])
    server = live(agui_app(create_agent(provider), max_body_bytes=4000))
    pdf = base64.b64encode(b"%PDF-1.4 tiny").decode()
    sent = UserMessage(
        id="u1",
        content=[
            TextPart(text="Summarize"),
            DocumentPart(
                source=DataSource(value=pdf, mime_type="application/pdf"),
                metadata={"filename": "r.pdf"},
            ),
        ],
    ).model_dump(by_alias=True, exclude_none=True)
    answer = client.run(server.url, body("docs", "r1", sent))
    check_order(answer.events)
    assert answer.text() == "Read it."
    (seen,) = provider.calls[-1].messages
    assert seen.content == [
        TextBlock(text="Summarize"),
        FileBlock(data=pdf, media_type="application/pdf", name="r.pdf"),
    ]
    broken = copy.deepcopy(sent)
    broken["content"][1]["source"]["value"] = "not base64!"
    bad = client.run(server.url, body("docs2", "r1", broken))
    assert bad.status == 422 and bad.error["error"]["param"] == "messages"
    assert "content[1]" in bad.error["error"]["message"]
    assert "base64" in bad.error["error"]["message"]
    large = copy.deepcopy(sent)
    large["content"][1]["source"]["value"] = base64.b64encode(b"x" * 6000).decode()
    too_big = client.run(server.url, body("docs3", "r1", large))
    assert too_big.status == 413 and "4000" in too_big.error["error"]["message"]


def test_a_busy_thread_is_a_409_and_a_disconnect_cancels_the_run(live: Any) -> None:
    started = asyncio.Event()
    cancelled: list[bool] = []

    async def slow(messages: list[Message], tools: Any) -> Message:
        started.set()
        try:
            await asyncio.sleep(120)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return assistant("too late")

    calls = 0

    async def policy(messages: list[Message], tools: Any) -> Message:
        nonlocal calls
        calls += 1
        return await slow(messages, tools) if calls == 1 else assistant("second try")

    backend = InMemoryBackend()
    server = live(agui_app(create_agent(FakeProvider(policy=policy)), backend=backend))
    with (
        httpx.Client(timeout=60) as http,
        http.stream("POST", server.url, json=body("d", "r1", said("hi"))) as response,
    ):
        lines = response.iter_lines()
        assert '"RUN_STARTED"' in next(lines)
        server.call(asyncio.wait_for(started.wait(), 30))
        busy = client.run(server.url, body("d", "r1b", said("me too", "u2")))
        assert busy.status == 409, "a second run on a thread that is running is refused"
        assert busy.error["error"]["type"] == "conflict_error"
    for _ in range(300):
        if cancelled:
            break
        server.call(asyncio.sleep(0.05))
    assert cancelled == [True], "the provider call was cancelled with the request"
    again = client.run(server.url, body("d", "r2", said("hi")))
    check_order(again.events)
    assert again.text() == "second try", "the thread is free and continues"


def test_serve_mounts_agui_beside_other_protocols(live: Any) -> None:
    server = live(serve(create_agent(FakeProvider()), protocols=["openai", "agui"]))
    answer = client.run(server.url + "/agui/", body("t", "r", said("echo me")))
    check_order(answer.events)
    assert answer.text() == "echo me"
    bare = client.run(server.url + "/agui", body("t2", "r", said("no slash")))
    assert bare.text() == "no slash", "the mount path itself reaches the AG-UI app"
    models = httpx.get(server.url + "/v1/models").json()
    assert models["object"] == "list", "the OpenAI routes answer on the same app"


def test_importing_serve_does_not_load_ag_ui() -> None:
    code = "import sys, tensorsketch.serve; print('ag_ui' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    code = "import sys; from tensorsketch.serve import agui_app; print('ag_ui' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_an_app_for_a_graph_without_a_transcript_says_which_option_to_pass() -> None:
    with pytest.raises(TypeError, match="messages_key"):
        agui_app(counter_graph(), to_input=lambda m: {}, to_reply=lambda s: "")


# -- fuzzing the request: never a 5xx, every error body well-formed -------------------------------

json_leaf = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
json_any = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
ids = st.one_of(st.text(max_size=6), st.integers(), st.none())
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(
            ["user", "assistant", "system", "developer", "tool", "activity", "x"]
        )
    },
    optional={
        "id": ids,
        "content": st.one_of(
            st.text(max_size=12),
            st.lists(
                st.fixed_dictionaries(
                    {"type": st.sampled_from(["text", "image", "audio"])},
                    optional={"text": st.text(max_size=5), "source": json_any},
                ),
                max_size=2,
            ),
            json_any,
        ),
        "toolCalls": st.lists(
            st.fixed_dictionaries(
                {"id": ids, "type": st.just("function")},
                optional={
                    "function": st.fixed_dictionaries(
                        {
                            "name": st.text(max_size=5),
                            "arguments": st.one_of(
                                st.text(max_size=8), st.just('{"order": 1}'), json_any
                            ),
                        }
                    )
                },
            ),
            max_size=2,
        ),
        "toolCallId": ids,
        "error": st.text(max_size=4),
    },
)
good_message = st.one_of(
    st.builds(
        lambda i, t: {"id": i, "role": "user", "content": t},
        st.sampled_from(["u1", "u2"]),
        st.sampled_from(["hi", "refund it", ""]),
    ),
    st.builds(
        lambda i: {"id": i, "role": "assistant", "content": "ok"}, st.sampled_from(["a1", "a2"])
    ),
    st.just(
        {
            "id": "a3",
            "role": "assistant",
            "toolCalls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "refund", "arguments": '{"order": 1}'},
                }
            ],
        }
    ),
    st.just({"id": "t1", "role": "tool", "toolCallId": "c1", "content": "done"}),
    st.just({"id": "s1", "role": "system", "content": "be brief"}),
)
resume_entry = st.fixed_dictionaries(
    {
        "interruptId": st.one_of(st.sampled_from(["c1", "zz"]), ids),
        "status": st.sampled_from(["resolved", "cancelled", "maybe"]),
    },
    optional={
        "payload": st.one_of(
            st.sampled_from([True, False, "approve", {"approved": True}]), json_any
        )
    },
)
optional_fields = {
    "state": st.one_of(
        st.dictionaries(
            st.sampled_from(["query", "status", "nope", "iterations"]), json_any, max_size=2
        ),
        json_any,
    ),
    "resume": st.one_of(st.lists(resume_entry, max_size=2), json_any),
    "tools": json_any,
    "context": json_any,
    "forwardedProps": json_any,
}
#: Mostly well-formed requests (so runs, resumes and conflicts happen), some fields fuzzed.
near_valid = st.fixed_dictionaries(
    {
        "threadId": st.sampled_from(["t", "u", "v"]),
        "runId": st.sampled_from(["r1", "r2"]),
        "messages": st.lists(st.one_of(good_message, good_message, message), max_size=4),
    },
    optional={
        "state": st.dictionaries(
            st.sampled_from(["query", "status", "nope", "iterations"]), json_leaf, max_size=2
        ),
        "resume": st.lists(resume_entry, max_size=2),
    },
)
#: Anything shaped like a request at all.
run_input = st.fixed_dictionaries(
    {},
    optional={
        "threadId": st.one_of(st.sampled_from(["t", "t" * 300, "", "a\x00b"]), ids),
        "runId": ids,
        "messages": st.one_of(st.lists(message, max_size=3), json_any),
        **optional_fields,
    },
)


def _approve_refunds(messages: list[Message], tools: Any) -> Message:
    """Ask to refund when the user says so (an approval), else echo. A run may send no
    messages at all (fuzzed: `messages: []` on a new thread); a model answers that too."""
    if not messages:
        return assistant("nothing to answer yet.")
    last = messages[-1]
    if last.role == "user" and "refund" in last.text:
        return assistant(tool_calls=[ToolCall(id="c1", name="refund", args={"order": 1})])
    return assistant(f"echo: {last.text}")


def test_fuzzed_requests_get_a_4xx_or_a_run_never_a_5xx(live: Any) -> None:
    agent = create_agent(FakeProvider(policy=_approve_refunds), tools=[refund])
    server = live(agui_app(agent, backend=InMemoryBackend()))

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.one_of(near_valid, near_valid, run_input, json_any))
    def check(request: Any) -> None:
        answer = client.run(server.url, request)
        print(
            "STATUS",
            answer.status,
            (answer.error or {}).get("error", {}).get("message", "")[:70],
            answer.types[-1:],
        )
        assert answer.status in (200, 400, 409, 413, 422), (request, answer.status, answer.error)
        if answer.status != 200:
            error = answer.error["error"]
            assert isinstance(error["message"], str) and error["message"].endswith((".", ")"))
            assert isinstance(error["type"], str)
            return
        check_order(answer.events)
        last = answer.events[-1]
        assert last.type == EventType.RUN_FINISHED or last.code != "internal_error", last

    check()


# -- a node that asks a question ------------------------------------------------------------------


class Named(Schema):
    greeting: str = ""
    messages: list[Message] = []


class AskName(Node):
    class In(Schema):
        greeting: str

    class Out(Schema):
        greeting: str

    async def run(self, ctx: Any, inp: In) -> Out:
        name = await interrupt(ctx, "What is your name?")
        return self.Out(greeting=f"Hello, {name}!")


def test_a_question_from_interrupt_is_answered_through_resume(live: Any) -> None:
    graph = Graph(Named).add(AskName()).edge(START, "AskName").edge("AskName", END).compile()
    app = agui_app(
        graph, backend=InMemoryBackend(), to_input=lambda m: {}, to_reply=lambda s: s.greeting
    )
    server = live(app)
    first = client.run(server.url, body("q", "r1", said("hi")))
    check_order(first.events)
    [question] = first.events[-1].outcome.interrupts
    assert (question.reason, question.message) == ("input", "What is your name?")
    assert question.tool_call_id is None and question.metadata["kind"] == "interrupt"
    answer = {"interruptId": question.id, "status": "resolved", "payload": "Ada"}
    second = client.run(server.url, body("q", "r2", resume=[answer]))
    check_order(second.events)
    assert second.events[-1].result == "Hello, Ada!"
    assert second.text() == "Hello, Ada!"


def test_a_timer_interrupt_says_when_the_run_continues() -> None:
    from tensorsketch.interrupts import PendingInterrupt
    from tensorsketch.serve._agui_events import to_interrupt

    timer = to_interrupt(PendingInterrupt(id="sleep:1", kind="timer", wake_at=0.0))
    assert timer.reason == "timer" and "1970-01-01T00:00:00+00:00" in timer.message
    assert timer.metadata == {"kind": "timer", "wakeAt": "1970-01-01T00:00:00+00:00"}


# -- item: a resume announces no call twice; ctx.emit is CUSTOM; frontend tools -----------------


def test_a_resumed_run_does_not_announce_the_approved_call_again(live: Any) -> None:
    ran.clear()
    provider = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="c5", name="refund", args={"order": 5})]),
            "Order 5 is refunded.",
        ]
    )
    server = live(agui_app(create_agent(provider, tools=[refund]), backend=InMemoryBackend()))
    first = client.run(server.url, body("once", "r1", said("refund order 5")))
    assert [e.tool_call_id for e in first.of(EventType.TOOL_CALL_START)] == ["c5"]
    # A client that resumes without sending its messages back still is not told twice.
    answer = {"interruptId": "c5", "status": "resolved", "payload": True}
    second = client.run(server.url, body("once", "r2", resume=[answer]))
    check_order(second.events)
    assert second.of(EventType.TOOL_CALL_START) == []
    assert second.of(EventType.TOOL_CALL_ARGS) == second.of(EventType.TOOL_CALL_END) == []
    [result] = second.of(EventType.TOOL_CALL_RESULT)
    assert (result.tool_call_id, result.content) == ("c5", "refunded 5")
    assert ran == ["refund 5"]


class Progress(Schema):
    step: int
    of: int


class Reporting(Node):
    class In(Schema):
        topic: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Any, inp: In) -> Out:
        for step in (1, 2):
            await ctx.emit("progress", Progress(step=step, of=2))
        await ctx.emit("note", None)
        return self.Out(answer=f"done with {inp.topic}")


def test_ctx_emit_events_are_sent_as_custom_events(live: Any) -> None:
    graph = Graph(Counter).add(Reporting()).edge(START, "Reporting").edge("Reporting", END)
    app = agui_app(
        graph.compile(),
        messages_key=None,
        to_input=lambda messages: {"topic": messages[-1].text},
        to_reply=lambda state: state.answer,
    )
    answer = client.run(live(app).url, body("emits", "r1", said("shoes")))
    check_order(answer.events)
    custom = [(e.name, e.value) for e in answer.of(EventType.CUSTOM)]
    assert custom == [
        ("progress", {"step": 1, "of": 2}),
        ("progress", {"step": 2, "of": 2}),
        ("note", None),
    ]
    assert answer.events[-1].result == "done with shoes"


PICK = {
    "name": "pick_size",
    "description": "Ask the person for a shoe size in the UI.",
    "parameters": {
        "type": "object",
        "properties": {"sizes": {"type": "array", "items": {"type": "integer"}}},
        "required": ["sizes"],
    },
}


def _size_agent() -> tuple[Any, FakeProvider]:
    provider = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="f1", name="pick_size", args={"sizes": [41, 42]})]),
            "Size noted.",
        ]
    )
    return create_agent(provider, tools=[lookup]), provider


def test_a_frontend_tool_call_is_an_interrupt_and_resume_carries_its_result(live: Any) -> None:
    agent, provider = _size_agent()
    server = live(agui_app(agent, backend=InMemoryBackend()))
    first = client.run(server.url, body("size", "r1", said("my size?"), tools=[PICK]))
    check_order(first.events)
    assert [t.name for t in provider.calls[0].tools] == ["lookup", "pick_size"]
    [start] = first.of(EventType.TOOL_CALL_START)
    assert (start.tool_call_id, start.tool_call_name) == ("f1", "pick_size")
    assert first.of(EventType.TOOL_CALL_RESULT) == []
    [waiting] = first.events[-1].outcome.interrupts
    assert (waiting.id, waiting.reason, waiting.tool_call_id) == ("f1", "tool_call", "f1")
    assert waiting.metadata == {
        "kind": "interrupt",
        "node": "agent",
        "tool": "pick_size",
        "args": {"sizes": [41, 42]},
    }
    # The resume need not declare the tools again: the interrupt remembers the one it waits on.
    answer = {"interruptId": "f1", "status": "resolved", "payload": {"size": 42}}
    second = client.run(server.url, body("size", "r2", resume=[answer]))
    check_order(second.events)
    seen = provider.calls[-1].messages[-1]
    assert (seen.role, seen.tool_call_id, json.loads(seen.text)) == ("tool", "f1", {"size": 42})
    assert second.of(EventType.TOOL_CALL_START) == []
    [result] = second.of(EventType.TOOL_CALL_RESULT)
    assert json.loads(result.content) == {"size": 42}
    assert second.events[-1].result == "Size noted."


def test_a_cancelled_frontend_tool_call_is_an_error_result(live: Any) -> None:
    agent, provider = _size_agent()
    server = live(agui_app(agent, backend=InMemoryBackend()))
    client.run(server.url, body("nosize", "r1", said("my size?"), tools=[PICK]))
    answer = {"interruptId": "f1", "status": "cancelled"}
    second = client.run(server.url, body("nosize", "r2", resume=[answer], tools=[PICK]))
    check_order(second.events)
    seen = provider.calls[-1].messages[-1]
    assert seen.is_error and "the user cancelled the call to 'pick_size'" in seen.text


def test_a_tool_message_for_the_waiting_frontend_call_resumes_the_run(live: Any) -> None:
    agent, provider = _size_agent()
    server = live(agui_app(agent, backend=InMemoryBackend()))
    first = client.run(server.url, body("classic", "r1", said("my size?"), tools=[PICK]))
    kept = client.apply_messages([said("my size?")], first.events)
    result = {"id": "t1", "role": "tool", "toolCallId": "f1", "content": "42"}
    second = client.run(server.url, body("classic", "r2", *kept, result, tools=[PICK]))
    check_order(second.events)
    seen = provider.calls[-1].messages[-1]
    assert (seen.role, seen.tool_call_id, seen.text) == ("tool", "f1", "42")
    assert second.of(EventType.TOOL_CALL_START) == []
    assert second.events[-1].result == "Size noted."


def test_frontend_tools_that_cannot_be_tools_are_a_422(live: Any) -> None:
    agent, _ = _size_agent()
    server = live(agui_app(agent))
    clash = {**PICK, "name": "lookup"}
    bad_name = {**PICK, "name": "pick size"}
    not_object = {**PICK, "parameters": {"type": "string"}}
    for tool_, why in (
        (clash, "already has tool(s) named lookup"),
        (bad_name, "`tools[0]` ('pick size'): tool name 'pick size' is not usable"),
        (not_object, "the argument schema must describe an object"),
    ):
        answer = client.run(server.url, body("bad", "r1", said("hi"), tools=[tool_]))
        assert answer.status == 422 and answer.error is not None
        assert why in answer.error["error"]["message"] and answer.error["error"]["param"] == "tools"


def test_frontend_tools_are_ignored_by_a_graph_without_an_agent(live: Any) -> None:
    app = agui_app(
        counter_graph(),
        messages_key=None,
        to_input=lambda m: {"topic": m[-1].text},
        to_reply=lambda s: s.answer,
    )
    answer = client.run(live(app).url, body("plain", "r1", said("shoes"), tools=[PICK]))
    check_order(answer.events)
    assert answer.events[-1].result == "shoes: 2"


def test_a_failed_frontend_tool_message_is_an_error_result_for_the_model(live: Any) -> None:
    agent, provider = _size_agent()
    server = live(agui_app(agent, backend=InMemoryBackend()))
    client.run(server.url, body("failed", "r1", said("my size?"), tools=[PICK]))
    failed = {"id": "t1", "role": "tool", "toolCallId": "f1", "content": "", "error": "no sizes"}
    second = client.run(server.url, body("failed", "r2", failed, tools=[PICK]))
    check_order(second.events)
    seen = provider.calls[-1].messages[-1]
    assert seen.is_error and "'pick_size' failed in the frontend: no sizes" in seen.text


# -- item: tool-call arguments stream as TOOL_CALL_ARGS chunks, in order -----------------------


class _Fragmenting(FakeProvider):
    """Streams each tool call's JSON arguments in three fragments, as real providers do."""

    async def stream(self, messages: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        from tensorsketch.provider import ToolCallDelta

        async for item in super().stream(messages, **kwargs):
            if isinstance(item, ToolCallDelta):
                text = item.arguments
                cuts = [0, len(text) // 3, 2 * len(text) // 3, len(text)]
                yield ToolCallDelta(item.index, item.id, item.name, "")
                for a, b in itertools.pairwise(cuts):
                    yield ToolCallDelta(item.index, arguments=text[a:b])
            else:
                yield item


def test_tool_call_arguments_stream_as_tool_call_args_chunks(live: Any) -> None:
    ran.clear()
    provider = _Fragmenting(
        [
            assistant(
                "Checking.",
                tool_calls=[ToolCall(id="c1", name="lookup", args={"order": 12345})],
            ),
            "Shoes.",
        ]
    )
    server = live(agui_app(create_agent(provider, tools=[lookup])))
    run = client.run(server.url, body("ta", "r1", said("what is order 12345?")))
    check_order(run.events)
    chunks = run.of(EventType.TOOL_CALL_ARGS)
    assert len(chunks) == 3 and {c.tool_call_id for c in chunks} == {"c1"}
    assert json.loads("".join(c.delta for c in chunks)) == {"order": 12345}
    assert [e.tool_call_id for e in run.of(EventType.TOOL_CALL_START)] == ["c1"]
    assert [e.tool_call_id for e in run.of(EventType.TOOL_CALL_END)] == ["c1"]
    types = [e.type for e in run.events]
    start, end = types.index(EventType.TOOL_CALL_START), types.index(EventType.TOOL_CALL_END)
    assert types[start + 1 : end] == [EventType.TOOL_CALL_ARGS] * 3
    assert end < types.index(EventType.TOOL_CALL_RESULT)
    assert ran == ["lookup 12345"] and run.text().endswith("Shoes.")


def test_reasoning_streams_as_an_agui_reasoning_message_before_the_text(live: Any) -> None:
    thought = Reasoning(provider="fake", text="The order number is there: look it up.")
    provider = FakeProvider(
        [
            Message(
                role="assistant",
                tool_calls=[ToolCall(id="c1", name="lookup", args={"order": 7})],
                reasoning=[thought],
            ),
            "Shoes.",
        ]
    )
    server = live(agui_app(create_agent(provider, tools=[lookup])))
    run = client.run(server.url, body("tr", "r1", said("what is order 7?")))
    check_order(run.events)
    types = [e.type for e in run.events]
    first = types.index(EventType.REASONING_START)
    assert types[first : first + 5] == [
        EventType.REASONING_START,
        EventType.REASONING_MESSAGE_START,
        EventType.REASONING_MESSAGE_CONTENT,
        EventType.REASONING_MESSAGE_END,
        EventType.REASONING_END,
    ]
    assert first < types.index(EventType.TOOL_CALL_START)
    [content] = run.of(EventType.REASONING_MESSAGE_CONTENT)
    assert content.delta == thought.text
    assert content.message_id == run.of(EventType.REASONING_START)[0].message_id
    assert run.text().endswith("Shoes.")
