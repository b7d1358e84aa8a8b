"""``agui_app`` driven by the AG-UI TypeScript client (``@ag-ui/client``'s ``HttpAgent``) over
uvicorn on 127.0.0.1, every event checked against ``@ag-ui/core``'s zod schemas.

The client runs in Node (``tests/js/agui_run.mjs``, installed from the committed lockfile by
the ``npm_clients`` fixture); it keeps the conversation, the shared state and the pending
interrupts as a frontend does, and answers interrupts with ``resume``.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from tensorsketch import Context, FakeProvider, InMemoryBackend, create_agent, tool
from tensorsketch.messages import FileBlock, TextBlock, ToolCall, assistant
from tensorsketch.serve import agui_app

ran: list[str] = []


@tool
async def lookup(order: int, ctx: Context) -> str:
    """Look up an order (reporting progress as it goes)."""
    await ctx.emit("progress", {"order": order, "done": 0.5})
    ran.append(f"lookup {order}")
    return f"order {order}: shoes"


@tool(requires_approval=True)
def refund(order: int) -> str:
    """Refund an order (a person approves)."""
    ran.append(f"refund {order}")
    return f"refunded {order}"


def _drive(npm: Any, server: Any, thread: str, *runs: dict[str, Any]) -> list[dict[str, Any]]:
    report = npm.run_node("agui_run.mjs", {"url": server.url, "threadId": thread, "runs": runs})
    found: list[dict[str, Any]] = report["runs"]
    for run in found:
        assert run["schemaErrors"] == [], "every event matches @ag-ui/core's schema"
        assert run["error"] is None, run["error"]
    return found


def _types(run: dict[str, Any]) -> list[str]:
    return [e["type"] for e in run["events"]]


def _of(run: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [e for e in run["events"] if e["type"] == kind]


def _lookup_then_answer() -> FakeProvider:
    return FakeProvider(
        [
            assistant(
                "Let me look.", tool_calls=[ToolCall(id="c1", name="lookup", args={"order": 7})]
            ),
            "Order 7 is shoes.",
        ]
    )


def test_a_chat_with_a_tool_streams_text_calls_state_and_a_snapshot(
    live: Any, npm_clients: Any
) -> None:
    ran.clear()
    server = live(agui_app(create_agent(_lookup_then_answer(), tools=[lookup])))
    [run] = _drive(npm_clients, server, "ts-chat", {"user": "what is order 7?"})
    kinds = _types(run)
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    for kind in ("TEXT_MESSAGE_CONTENT", "TOOL_CALL_START", "TOOL_CALL_RESULT", "STATE_SNAPSHOT"):
        assert kind in kinds
    assert run["result"] == "Order 7 is shoes." and ran == ["lookup 7"]
    roles = [(m["role"], m.get("content")) for m in run["messages"]]
    assert roles[0] == ("user", "what is order 7?") and roles[-1] == (
        "assistant",
        "Order 7 is shoes.",
    )
    assert run["state"]["status"] == "completed"


def test_an_approval_resumes_and_each_tool_call_is_announced_once(
    live: Any, npm_clients: Any
) -> None:
    ran.clear()
    provider = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="c2", name="refund", args={"order": 7})]),
            "Order 7 is refunded.",
        ]
    )
    server = live(agui_app(create_agent(provider, tools=[refund]), backend=InMemoryBackend()))
    first, second = _drive(
        npm_clients,
        server,
        "ts-approval",
        {"user": "refund order 7"},
        {"answer": {"status": "resolved", "payload": {"approved": True}}},
    )
    [waiting] = first["interrupts"]
    assert (waiting["id"], waiting["reason"], waiting["toolCallId"]) == (
        "c2",
        "tool_approval",
        "c2",
    )
    assert second["result"] == "Order 7 is refunded." and ran == ["refund 7"]
    starts = [e["toolCallId"] for run in (first, second) for e in _of(run, "TOOL_CALL_START")]
    assert starts == ["c2"], "the resumed run does not announce the call again"
    assert [e["toolCallId"] for e in _of(second, "TOOL_CALL_RESULT")] == ["c2"]
    calls = [c["id"] for m in second["messages"] for c in m.get("toolCalls") or []]
    assert calls == ["c2"]


def test_ctx_emit_reaches_the_client_as_custom_events(live: Any, npm_clients: Any) -> None:
    server = live(agui_app(create_agent(_lookup_then_answer(), tools=[lookup])))
    [run] = _drive(npm_clients, server, "ts-custom", {"user": "what is order 7?"})
    [custom] = _of(run, "CUSTOM")
    assert (custom["name"], custom["value"]) == ("progress", {"order": 7, "done": 0.5})
    kinds = _types(run)
    assert kinds.index("TOOL_CALL_START") < kinds.index("CUSTOM") < kinds.index("TOOL_CALL_RESULT")


PICK_COLOR = {
    "name": "pick_color",
    "description": "Ask the person to pick a colour in the UI.",
    "parameters": {
        "type": "object",
        "properties": {"options": {"type": "array", "items": {"type": "string"}}},
        "required": ["options"],
    },
}


def test_a_frontend_tool_suspends_the_run_and_resume_carries_its_result(
    live: Any, npm_clients: Any
) -> None:
    provider = FakeProvider(
        [
            assistant(
                "Let me ask.",
                tool_calls=[
                    ToolCall(id="fc1", name="pick_color", args={"options": ["red", "blue"]})
                ],
            ),
            "You picked blue.",
        ]
    )
    server = live(agui_app(create_agent(provider), backend=InMemoryBackend()))
    first, second = _drive(
        npm_clients,
        server,
        "ts-frontend-tool",
        {"user": "choose a colour", "tools": [PICK_COLOR]},
        {"tools": [PICK_COLOR], "answer": {"status": "resolved", "payload": "blue"}},
    )
    offered = provider.calls[0].tools
    assert [t.definition() for t in offered] == [PICK_COLOR], "the agent can call the client's tool"
    [waiting] = first["interrupts"]
    assert (waiting["id"], waiting["reason"], waiting["toolCallId"]) == (
        "fc1",
        "tool_call",
        "fc1",
    )
    [args] = _of(first, "TOOL_CALL_ARGS")
    assert json.loads(args["delta"]) == {"options": ["red", "blue"]}
    assert _of(first, "TOOL_CALL_RESULT") == [], "the client runs the tool, not the server"
    seen = provider.calls[-1].messages[-1]
    assert (seen.role, seen.tool_call_id, seen.text) == ("tool", "fc1", "blue")
    assert second["result"] == "You picked blue."
    assert _of(second, "TOOL_CALL_START") == [], "the call was announced by the first run"
    [result] = _of(second, "TOOL_CALL_RESULT")
    assert (result["toolCallId"], result["content"]) == ("fc1", "blue")


def test_a_document_part_from_the_ts_client_reaches_the_model(live: Any, npm_clients: Any) -> None:
    provider = FakeProvider(["A one-page invoice."])
    server = live(agui_app(create_agent(provider)))
    pdf = base64.b64encode(b"%PDF-1.4 one page").decode()
    document = {
        "type": "document",
        "source": {"type": "data", "value": pdf, "mimeType": "application/pdf"},
        "metadata": {"filename": "invoice.pdf"},
    }
    content = [{"type": "text", "text": "What is this?"}, document]
    [run] = _drive(npm_clients, server, "ts-document", {"user": content})
    assert run["result"] == "A one-page invoice."
    (seen,) = provider.calls[-1].messages
    assert seen.content == [
        TextBlock(text="What is this?"),
        FileBlock(data=pdf, media_type="application/pdf", name="invoice.pdf"),
    ]
