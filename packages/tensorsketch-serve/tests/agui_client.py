"""An AG-UI client for the tests: httpx streaming SSE, every event parsed by ``ag_ui.core``.

Each ``data:`` frame is validated with the package's own discriminated ``Event`` union, then
encoded again with its ``EventEncoder`` and compared with the frame the server sent, so a
field the models would drop or rename fails the test. :func:`check_order` applies the
ordering rules AG-UI clients verify (the TypeScript client's ``verifyEvents``).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from ag_ui.core import BaseEvent, Event, EventType
from ag_ui.encoder import EventEncoder
from pydantic import TypeAdapter

EVENTS: TypeAdapter[Any] = TypeAdapter(Event)
ENCODER = EventEncoder()


@dataclass
class Answer:
    """One response: its status, and the parsed events (or the JSON error body)."""

    status: int
    content_type: str
    events: list[BaseEvent] = field(default_factory=list)
    error: dict[str, Any] | None = None

    def of(self, kind: EventType) -> list[Any]:
        return [e for e in self.events if e.type == kind]

    @property
    def types(self) -> list[str]:
        return [e.type.value for e in self.events]

    def text(self) -> str:
        return "".join(e.delta for e in self.of(EventType.TEXT_MESSAGE_CONTENT))


def parse_frames(raw: str) -> list[BaseEvent]:
    """Split an SSE body into frames and parse each one (with the encoder round trip)."""
    events: list[BaseEvent] = []
    for frame in raw.split("\n\n"):
        if not frame.strip():
            continue
        lines = frame.split("\n")
        data = "\n".join(line[len("data: ") :] for line in lines if line.startswith("data: "))
        assert data, f"an SSE frame without data: {frame!r}"
        event = EVENTS.validate_json(data)
        assert ENCODER.encode(event) == f"data: {data}\n\n", "the encoder round trip differs"
        assert json.loads(event.model_dump_json(by_alias=True)) == json.loads(data)
        events.append(event)
    return events


def run(url: str, body: Any, *, headers: dict[str, str] | None = None) -> Answer:
    """POST ``body`` and read the whole answer (events as they stream, or the error)."""
    with (
        httpx.Client(timeout=60) as client,
        client.stream("POST", url, json=body, headers=headers) as response,
    ):
        content_type = response.headers.get("content-type", "")
        if response.status_code != 200:
            return Answer(response.status_code, content_type, error=json.loads(response.read()))
        assert content_type.startswith("text/event-stream")
        buffer = ""
        events: list[BaseEvent] = []
        for chunk in response.iter_text():
            buffer += chunk
            *frames, buffer = buffer.split("\n\n")
            for frame in frames:
                events += parse_frames(frame + "\n\n")
        assert not buffer.strip(), f"the stream ended inside a frame: {buffer!r}"
        return Answer(200, content_type, events)


def check_order(events: list[BaseEvent]) -> None:
    """The sequence rules of AG-UI's event verifier, for one run."""
    assert events and events[0].type == EventType.RUN_STARTED, "RUN_STARTED comes first"
    last = events[-1].type
    assert last in (EventType.RUN_FINISHED, EventType.RUN_ERROR), f"the run ends, not {last}"
    text: str | None = None
    call: str | None = None
    reasoning: str | None = None
    steps: list[str] = []
    for event in events[1:-1]:
        kind = event.type
        assert kind not in (EventType.RUN_STARTED, EventType.RUN_FINISHED, EventType.RUN_ERROR)
        if text is not None:
            assert kind in (EventType.TEXT_MESSAGE_CONTENT, EventType.TEXT_MESSAGE_END), (
                f"{kind} while text message {text} is open"
            )
        if call is not None:
            assert kind in (EventType.TOOL_CALL_ARGS, EventType.TOOL_CALL_END), (
                f"{kind} while tool call {call} is open"
            )
        if reasoning is not None:
            assert kind.value.startswith("REASONING_"), f"{kind} while reasoning is open"
            assert event.message_id == reasoning  # type: ignore[attr-defined]
        match kind:
            case EventType.TEXT_MESSAGE_START:
                text = event.message_id  # type: ignore[attr-defined]
            case EventType.TEXT_MESSAGE_CONTENT:
                assert event.message_id == text  # type: ignore[attr-defined]
            case EventType.TEXT_MESSAGE_END:
                assert event.message_id == text  # type: ignore[attr-defined]
                text = None
            case EventType.TOOL_CALL_START:
                call = event.tool_call_id  # type: ignore[attr-defined]
            case EventType.TOOL_CALL_ARGS:
                assert event.tool_call_id == call  # type: ignore[attr-defined]
            case EventType.TOOL_CALL_END:
                assert event.tool_call_id == call  # type: ignore[attr-defined]
                call = None
            case EventType.REASONING_START:
                assert reasoning is None, "reasoning started twice"
                reasoning = event.message_id  # type: ignore[attr-defined]
            case EventType.REASONING_END:
                reasoning = None
            case EventType.STEP_STARTED:
                name = event.step_name  # type: ignore[attr-defined]
                assert name not in steps, f"step {name} started twice"
                steps.append(name)
            case EventType.STEP_FINISHED:
                steps.remove(event.step_name)  # type: ignore[attr-defined]
    if last == EventType.RUN_FINISHED:
        assert text is None and call is None and reasoning is None and not steps, (
            "everything closes before the end"
        )


def apply_messages(messages: list[dict[str, Any]], events: list[BaseEvent]) -> list[dict[str, Any]]:
    """The conversation a client keeps, built from the events as AG-UI clients build it: a
    streamed text is a message, a tool call joins its parent message (or starts its own),
    a result is a tool message, and a MESSAGES_SNAPSHOT replaces the lot."""
    out = copy.deepcopy(messages)
    by_id = {m["id"]: m for m in out}

    def add(message: dict[str, Any]) -> dict[str, Any]:
        out.append(message)
        by_id[message["id"]] = message
        return message

    calls: dict[str, dict[str, Any]] = {}
    for event in events:
        data = event.model_dump(by_alias=True)
        match event.type:
            case EventType.TEXT_MESSAGE_START:
                add({"id": data["messageId"], "role": "assistant", "content": ""})
            case EventType.TEXT_MESSAGE_CONTENT:
                by_id[data["messageId"]]["content"] += data["delta"]
            case EventType.TOOL_CALL_START:
                parent = by_id.get(data.get("parentMessageId") or "")
                if parent is None:
                    parent = add({"id": data["toolCallId"], "role": "assistant"})
                call = {"id": data["toolCallId"], "type": "function"}
                call["function"] = {"name": data["toolCallName"], "arguments": ""}
                parent.setdefault("toolCalls", []).append(call)
                calls[call["id"]] = call
            case EventType.TOOL_CALL_ARGS:
                calls[data["toolCallId"]]["function"]["arguments"] += data["delta"]
            case EventType.TOOL_CALL_RESULT:
                add(
                    {
                        "id": data["messageId"],
                        "role": "tool",
                        "toolCallId": data["toolCallId"],
                        "content": data["content"],
                    }
                )
            case EventType.MESSAGES_SNAPSHOT:
                out = data["messages"]
                by_id = {m["id"]: m for m in out}
    return out


# -- RFC 6902, applied independently of the library that makes the patches ------------------


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _walk(doc: Any, path: str) -> tuple[Any, str]:
    tokens = [_unescape(t) for t in path.split("/")[1:]]
    parent = doc
    for token in tokens[:-1]:
        parent = parent[int(token)] if isinstance(parent, list) else parent[token]
    return parent, tokens[-1]


def _get(doc: Any, path: str) -> Any:
    if path == "":
        return doc
    parent, key = _walk(doc, path)
    return parent[int(key)] if isinstance(parent, list) else parent[key]


def _remove(doc: Any, path: str) -> Any:
    parent, key = _walk(doc, path)
    return parent.pop(int(key)) if isinstance(parent, list) else parent.pop(key)


def _add(doc: Any, path: str, value: Any) -> Any:
    if path == "":
        return value
    parent, key = _walk(doc, path)
    if isinstance(parent, list):
        parent.insert(len(parent) if key == "-" else int(key), value)
    else:
        parent[key] = value
    return doc


def apply_rfc6902(doc: Any, patch: list[dict[str, Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for op in patch:
        kind, path = op["op"], op["path"]
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            if path == "":
                doc = copy.deepcopy(op["value"])
            else:
                _remove(doc, path)
                doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "move":
            doc = _add(doc, path, _remove(doc, op["from"]))
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op["from"])))
        elif kind == "test":
            assert _get(doc, path) == op["value"]
        else:  # pragma: no cover - the RFC has no other operation
            raise AssertionError(kind)
    return doc
