"""How each vendor answers on the wire, and how to read what its SDK sent.

A ``Play`` knows one vendor's public wire protocol (as the vendor documents it):

* reply builders (``text``, ``tool_calls``, ``structured``, ``stream_text``,
  ``stream_tool_calls``, ``error``) render a vendor-neutral scenario into the exact JSON body or
  SSE event sequence that vendor sends;
* ``sent(request)`` decodes a recorded request body back into a vendor-neutral :class:`Sent`,
  so one conformance suite can assert the same facts about all three SDKs;
* ``check_endpoint`` asserts the vendor-specific HTTP surface (path, auth header).

Every reply reports the same usage — 11 fresh input tokens, 5 read from the prompt cache,
3 written to it (Anthropic only: the others do not bill cache writes separately), 7 output —
and a model id that differs from the one requested, so the tests can tell that ``usage`` and
``model`` come from the reply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from wire_server import Recorded, Reply  # type: ignore[import-not-found]

from tensorsketch.messages import ToolCall
from tensorsketch.provider import ChatProvider, Usage

FRESH, CACHED, WRITTEN, OUTPUT = 11, 5, 3, 7


@dataclass
class Item:
    """One piece of a sent turn, vendor-neutral.

    kind: ``text`` (value), ``image`` (media type, data or url), ``call`` (id, name, args),
    ``result`` (id, name, text, is_error).
    """

    kind: str
    value: Any = None
    id: str | None = None
    name: str | None = None
    args: dict[str, Any] | None = None
    is_error: bool = False
    media_type: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Sent:
    """What the SDK put on the wire, vendor-neutral."""

    model: str | None
    system: str
    turns: list[tuple[str, list[Item]]]
    tools: dict[str, dict[str, Any]]
    tool_descriptions: dict[str, str]
    output_schema: dict[str, Any] | None
    max_tokens: int | None
    stream: bool


class Play:
    name: str
    model: str
    reply_model: str
    expected_usage: Usage
    #: Whether the protocol has a field saying a tool result is an error (Chat Completions
    #: does not: the error text is all the model sees).
    carries_tool_errors = True

    def __init__(self) -> None:
        self.created: list[ChatProvider] = []

    def provider(self, url: str, *, timeout: float = 10.0, retries: int = 0) -> ChatProvider:
        provider = self._provider(url, timeout=timeout, retries=retries)
        self.created.append(provider)
        return provider

    def _provider(self, url: str, *, timeout: float, retries: int) -> ChatProvider:
        raise NotImplementedError

    def check_endpoint(self, request: Recorded, *, stream: bool) -> None:
        raise NotImplementedError

    def sent(self, request: Recorded) -> Sent:
        raise NotImplementedError

    def text(self, text: str) -> Reply:
        raise NotImplementedError

    def tool_calls(self, calls: list[ToolCall], *, text: str = "") -> Reply:
        raise NotImplementedError

    def structured(self, data: dict[str, Any]) -> Reply:
        raise NotImplementedError

    def stream_text(self, pieces: list[str]) -> Reply:
        raise NotImplementedError

    def stream_tool_calls(self, calls: list[ToolCall], *, text: str = "") -> Reply:
        raise NotImplementedError

    def stream_structured(self, data: dict[str, Any]) -> Reply:
        raise NotImplementedError

    def error(self, status: int, *, retry_after: str | None = None) -> Reply:
        raise NotImplementedError

    def wire_call_id(self, call: ToolCall) -> str | None:
        """The id a call carries on the wire when the reply gave ``call.id``."""
        return call.id


def _field(obj: dict[str, Any], camel: str) -> Any:
    """A field by its documented camelCase name, or the snake_case spelling.

    Gemini's REST API (proto3 JSON) accepts both, and google-genai writes nested fields
    (``inlineData.mime_type``, ``parameters_json_schema``) in snake_case.
    """
    if camel in obj:
        return obj[camel]
    snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)
    return obj.get(snake)


def _pieces(text: str, n: int = 3) -> list[str]:
    size = max(len(text) // n, 1)
    return [text[i : i + size] for i in range(0, len(text), size)]


# -- Anthropic: Messages API -------------------------------------------------------------------


class AnthropicPlay(Play):
    name = "anthropic"
    model = "claude-sonnet-4-6"
    reply_model = "claude-sonnet-4-6-20260101"
    expected_usage = Usage(
        input_tokens=FRESH,
        output_tokens=OUTPUT,
        cache_read_tokens=CACHED,
        cache_write_tokens=WRITTEN,
    )

    def _provider(self, url: str, *, timeout: float, retries: int) -> ChatProvider:
        from tensorsketch.providers.anthropic import AnthropicProvider

        return AnthropicProvider(
            model=self.model,
            api_key="sk-ant-test",
            base_url=url,
            timeout=timeout,
            max_retries=retries,
        )

    def check_endpoint(self, request: Recorded, *, stream: bool) -> None:
        assert request.method == "POST"
        assert request.path == "/v1/messages"
        assert request.header("anthropic-version")
        # The SDK authenticates with x-api-key or (newer releases) a bearer token.
        assert "sk-ant-test" in (
            (request.header("x-api-key") or "") + (request.header("authorization") or "")
        )
        assert bool(request.body.get("stream")) is stream

    def sent(self, request: Recorded) -> Sent:
        body = request.body
        system_blocks = body.get("system") or []
        if isinstance(system_blocks, str):
            system = system_blocks
        else:
            system = "\n\n".join(b["text"] for b in system_blocks)
        turns: list[tuple[str, list[Item]]] = []
        for message in body["messages"]:
            content = message["content"]
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            items = []
            for block in content:
                kind = block["type"]
                if kind == "text":
                    items.append(Item("text", block["text"]))
                elif kind == "image":
                    source = block["source"]
                    value = source.get("data") if source["type"] == "base64" else source["url"]
                    items.append(Item("image", value, media_type=source.get("media_type")))
                elif kind == "tool_use":
                    items.append(
                        Item("call", id=block["id"], name=block["name"], args=block["input"])
                    )
                elif kind == "tool_result":
                    inner = block["content"]
                    text = (
                        inner
                        if isinstance(inner, str)
                        else "".join(b.get("text", "") for b in inner if b["type"] == "text")
                    )
                    items.append(
                        Item(
                            "result",
                            text,
                            id=block["tool_use_id"],
                            is_error=bool(block.get("is_error")),
                        )
                    )
                else:
                    raise AssertionError(f"unexpected block {block!r}")
            turns.append((message["role"], items))
        tools = {t["name"]: t["input_schema"] for t in body.get("tools") or []}
        descriptions = {t["name"]: t.get("description", "") for t in body.get("tools") or []}
        output_schema = tools.pop("respond", None)
        descriptions.pop("respond", None)
        return Sent(
            model=body.get("model"),
            system=system,
            turns=turns,
            tools=tools,
            tool_descriptions=descriptions,
            output_schema=output_schema,
            max_tokens=body.get("max_tokens"),
            stream=bool(body.get("stream")),
        )

    def _usage(self) -> dict[str, Any]:
        return {
            "input_tokens": FRESH,
            "cache_creation_input_tokens": WRITTEN,
            "cache_read_input_tokens": CACHED,
            "output_tokens": OUTPUT,
        }

    def _message(self, content: list[dict[str, Any]], stop: str) -> Reply:
        return Reply(
            body={
                "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
                "type": "message",
                "role": "assistant",
                "model": self.reply_model,
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": self._usage(),
            },
            headers={"request-id": "req_test"},
        )

    def text(self, text: str) -> Reply:
        return self._message([{"type": "text", "text": text}], "end_turn")

    def tool_calls(self, calls: list[ToolCall], *, text: str = "") -> Reply:
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        content += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": c.args} for c in calls
        ]
        return self._message(content, "tool_use")

    def structured(self, data: dict[str, Any]) -> Reply:
        return self._message(
            [{"type": "tool_use", "id": "toolu_respond", "name": "respond", "input": data}],
            "tool_use",
        )

    def _stream(
        self, blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]], stop: str
    ) -> Reply:
        start_usage = dict(self._usage(), output_tokens=1)
        events: list[tuple[str | None, Any] | str] = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_stream",
                        "type": "message",
                        "role": "assistant",
                        "model": self.reply_model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": start_usage,
                    },
                },
            ),
            ("ping", {"type": "ping"}),
        ]
        for index, (start, deltas) in enumerate(blocks):
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": start},
                )
            )
            for delta in deltas:
                events.append(
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": delta},
                    )
                )
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": OUTPUT},
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        return Reply(events=events)

    def _json_deltas(self, value: dict[str, Any]) -> list[dict[str, Any]]:
        text = json.dumps(value)
        return [{"type": "input_json_delta", "partial_json": ""}] + [
            {"type": "input_json_delta", "partial_json": p} for p in _pieces(text, 4)
        ]

    def stream_text(self, pieces: list[str]) -> Reply:
        deltas = [{"type": "text_delta", "text": p} for p in pieces]
        return self._stream([({"type": "text", "text": ""}, deltas)], "end_turn")

    def stream_tool_calls(self, calls: list[ToolCall], *, text: str = "") -> Reply:
        blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
        if text:
            blocks.append(({"type": "text", "text": ""}, [{"type": "text_delta", "text": text}]))
        for c in calls:
            start = {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}
            blocks.append((start, self._json_deltas(c.args)))
        return self._stream(blocks, "tool_use")

    def stream_structured(self, data: dict[str, Any]) -> Reply:
        start = {"type": "tool_use", "id": "toolu_respond", "name": "respond", "input": {}}
        return self._stream([(start, self._json_deltas(data))], "tool_use")

    def error(self, status: int, *, retry_after: str | None = None) -> Reply:
        kind = {
            400: "invalid_request_error",
            401: "authentication_error",
            403: "permission_error",
            429: "rate_limit_error",
            529: "overloaded_error",
        }.get(status, "api_error")
        headers = {"retry-after": retry_after} if retry_after is not None else {}
        return Reply(
            status=status,
            body={"type": "error", "error": {"type": kind, "message": f"test {kind}"}},
            headers=headers,
        )


# -- OpenAI: Chat Completions ------------------------------------------------------------------


class OpenAIPlay(Play):
    name = "openai"
    model = "gpt-4o"
    reply_model = "gpt-4o-2024-11-20"
    expected_usage = Usage(input_tokens=FRESH, output_tokens=OUTPUT, cache_read_tokens=CACHED)
    carries_tool_errors = False

    def _provider(self, url: str, *, timeout: float, retries: int) -> ChatProvider:
        from tensorsketch.providers.openai import OpenAIProvider

        return OpenAIProvider(
            model=self.model,
            api_key="sk-test",
            base_url=f"{url}/v1",
            timeout=timeout,
            max_retries=retries,
        )

    def check_endpoint(self, request: Recorded, *, stream: bool) -> None:
        assert request.method == "POST"
        assert request.path == "/v1/chat/completions"
        assert request.header("authorization") == "Bearer sk-test"
        assert bool(request.body.get("stream")) is stream
        if stream:
            assert request.body["stream_options"] == {"include_usage": True}

    def sent(self, request: Recorded) -> Sent:
        body = request.body
        system: list[str] = []
        turns: list[tuple[str, list[Item]]] = []

        def add(role: str, items: list[Item]) -> None:
            if turns and turns[-1][0] == role:
                turns[-1][1].extend(items)
            else:
                turns.append((role, items))

        for message in body["messages"]:
            role = message["role"]
            content = message.get("content")
            if role in ("system", "developer"):
                system.append(
                    content if isinstance(content, str) else "".join(p["text"] for p in content)
                )
                continue
            items: list[Item] = []
            if isinstance(content, str) and role != "tool":
                items.append(Item("text", content))
            elif isinstance(content, list):
                for part in content:
                    if part["type"] == "text":
                        items.append(Item("text", part["text"]))
                    elif part["type"] == "image_url":
                        url = part["image_url"]["url"]
                        if url.startswith("data:"):
                            head, _, data = url.partition(",")
                            items.append(Item("image", data, media_type=head[5:].split(";")[0]))
                        else:
                            items.append(Item("image", url))
            if role == "tool":
                text = content if isinstance(content, str) else "".join(p["text"] for p in content)
                add("user", [Item("result", text, id=message["tool_call_id"])])
                continue
            for call in message.get("tool_calls") or []:
                items.append(
                    Item(
                        "call",
                        id=call["id"],
                        name=call["function"]["name"],
                        args=json.loads(call["function"]["arguments"]),
                    )
                )
            add(role, items)
        tools = {
            t["function"]["name"]: t["function"]["parameters"] for t in body.get("tools") or []
        }
        descriptions = {
            t["function"]["name"]: t["function"].get("description", "")
            for t in body.get("tools") or []
        }
        output_schema = None
        response_format = body.get("response_format")
        if response_format:
            assert response_format["type"] == "json_schema"
            output_schema = response_format["json_schema"]["schema"]
        return Sent(
            model=body.get("model"),
            system="\n\n".join(system),
            turns=turns,
            tools=tools,
            tool_descriptions=descriptions,
            output_schema=output_schema,
            max_tokens=body.get("max_completion_tokens", body.get("max_tokens")),
            stream=bool(body.get("stream")),
        )

    def _usage(self) -> dict[str, Any]:
        return {
            "prompt_tokens": FRESH + CACHED,
            "completion_tokens": OUTPUT,
            "total_tokens": FRESH + CACHED + OUTPUT,
            "prompt_tokens_details": {"cached_tokens": CACHED, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        }

    def _completion(self, message: dict[str, Any], finish: str) -> Reply:
        return Reply(
            body={
                "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
                "object": "chat.completion",
                "created": 1741570283,
                "model": self.reply_model,
                "choices": [
                    {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
                ],
                "usage": self._usage(),
                "service_tier": "default",
                "system_fingerprint": "fp_test",
            },
            headers={"x-request-id": "req_test"},
        )

    def text(self, text: str) -> Reply:
        return self._completion(
            {"role": "assistant", "content": text, "refusal": None, "annotations": []}, "stop"
        )

    def tool_calls(self, calls: list[ToolCall], *, text: str = "") -> Reply:
        return self._completion(
            {
                "role": "assistant",
                "content": text or None,
                "refusal": None,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": json.dumps(c.args)},
                    }
                    for c in calls
                ],
            },
            "tool_calls",
        )

    def structured(self, data: dict[str, Any]) -> Reply:
        return self.text(json.dumps(data))

    def _chunk(self, delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
        choices = (
            []
            if delta is None
            else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        )
        return {
            "id": "chatcmpl-stream",
            "object": "chat.completion.chunk",
            "created": 1741570283,
            "model": self.reply_model,
            "system_fingerprint": "fp_test",
            "choices": choices,
            "usage": None,
        }

    def _close(self, events: list[tuple[str | None, Any] | str], finish: str) -> Reply:
        events.append((None, self._chunk({}, finish)))
        final = self._chunk(None)
        final["usage"] = self._usage()
        events.append((None, final))
        events.append("[DONE]")
        return Reply(events=events)

    def stream_text(self, pieces: list[str]) -> Reply:
        events: list[tuple[str | None, Any] | str] = [
            (None, self._chunk({"role": "assistant", "content": "", "refusal": None}))
        ]
        events += [(None, self._chunk({"content": p})) for p in pieces]
        return self._close(events, "stop")

    def stream_tool_calls(self, calls: list[ToolCall], *, text: str = "") -> Reply:
        events: list[tuple[str | None, Any] | str] = [
            (None, self._chunk({"role": "assistant", "content": text or None, "refusal": None}))
        ]
        for index, c in enumerate(calls):
            head = {
                "index": index,
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": ""},
            }
            events.append((None, self._chunk({"tool_calls": [head]})))
            for piece in _pieces(json.dumps(c.args), 4):
                events.append(
                    (
                        None,
                        self._chunk(
                            {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                        ),
                    )
                )
        return self._close(events, "tool_calls")

    def stream_structured(self, data: dict[str, Any]) -> Reply:
        return self.stream_text(_pieces(json.dumps(data), 4))

    def error(self, status: int, *, retry_after: str | None = None) -> Reply:
        code = {429: "rate_limit_exceeded", 401: "invalid_api_key"}.get(status)
        headers = {"retry-after": retry_after} if retry_after is not None else {}
        return Reply(
            status=status,
            body={
                "error": {
                    "message": f"test error {status}",
                    "type": "requests" if status == 429 else "server_error",
                    "param": None,
                    "code": code,
                }
            },
            headers=headers,
        )


# -- OpenAI: Responses API ----------------------------------------------------------------------


class OpenAIResponsesPlay(OpenAIPlay):
    """The Responses API (``POST /v1/responses``): input items in, output items out."""

    name = "openai-responses"
    model = "gpt-4o"

    def _provider(self, url: str, *, timeout: float, retries: int) -> ChatProvider:
        from tensorsketch.providers.openai_responses import OpenAIResponsesProvider

        return OpenAIResponsesProvider(
            model=self.model,
            api_key="sk-test",
            base_url=f"{url}/v1",
            timeout=timeout,
            max_retries=retries,
        )

    def check_endpoint(self, request: Recorded, *, stream: bool) -> None:
        assert request.method == "POST"
        assert request.path == "/v1/responses"
        assert request.header("authorization") == "Bearer sk-test"
        assert bool(request.body.get("stream")) is stream
        assert request.body["store"] is False

    def sent(self, request: Recorded) -> Sent:
        body = request.body
        turns: list[tuple[str, list[Item]]] = []

        def add(role: str, items: list[Item]) -> None:
            if turns and turns[-1][0] == role:
                turns[-1][1].extend(items)
            else:
                turns.append((role, items))

        for entry in body["input"]:
            kind = entry.get("type", "message")
            if kind == "function_call":
                args = json.loads(entry["arguments"])
                add("assistant", [Item("call", id=entry["call_id"], name=entry["name"], args=args)])
            elif kind == "function_call_output":
                output = entry["output"]
                text = (
                    output
                    if isinstance(output, str)
                    else "".join(p.get("text", "") for p in output)
                )
                add("user", [Item("result", text, id=entry["call_id"])])
            elif kind == "message":
                content = entry["content"]
                items: list[Item] = []
                if isinstance(content, str):
                    items.append(Item("text", content))
                else:
                    for part in content:
                        if part["type"] in ("input_text", "output_text"):
                            items.append(Item("text", part["text"]))
                        elif part["type"] == "input_image":
                            url = part["image_url"]
                            if url.startswith("data:"):
                                head, _, data = url.partition(",")
                                media = head[5:].split(";")[0]
                                items.append(Item("image", data, media_type=media))
                            else:
                                items.append(Item("image", url))
                add(entry["role"], items)
        tools = {t["name"]: t["parameters"] for t in body.get("tools") or []}
        descriptions = {t["name"]: t.get("description", "") for t in body.get("tools") or []}
        text_format = (body.get("text") or {}).get("format")
        return Sent(
            model=body.get("model"),
            system=body.get("instructions") or "",
            turns=turns,
            tools=tools,
            tool_descriptions=descriptions,
            output_schema=text_format["schema"] if text_format else None,
            max_tokens=body.get("max_output_tokens"),
            stream=bool(body.get("stream")),
        )

    def _usage(self) -> dict[str, Any]:
        return {
            "input_tokens": FRESH + CACHED,
            "input_tokens_details": {"cached_tokens": CACHED},
            "output_tokens": OUTPUT,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": FRESH + CACHED + OUTPUT,
        }

    def response(
        self, output: list[dict[str, Any]], *, status: str = "completed"
    ) -> dict[str, Any]:
        return {
            "id": "resp_test",
            "object": "response",
            "created_at": 1741570283,
            "status": status,
            "model": self.reply_model,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": (
                {"reason": "max_output_tokens"} if status == "incomplete" else None
            ),
            "usage": self._usage() if status != "in_progress" else None,
        }

    @staticmethod
    def message_item(text: str) -> dict[str, Any]:
        return {
            "type": "message",
            "id": "msg_1",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }

    @staticmethod
    def call_item(call: ToolCall, n: int) -> dict[str, Any]:
        return {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": call.id,
            "name": call.name,
            "arguments": json.dumps(call.args),
            "status": "completed",
        }

    @staticmethod
    def reasoning_item(summary: str, encrypted: str | None, n: int = 1) -> dict[str, Any]:
        return {
            "type": "reasoning",
            "id": f"rs_{n}",
            "summary": [{"type": "summary_text", "text": summary}] if summary else [],
            "encrypted_content": encrypted,
        }

    def reply(self, output: list[dict[str, Any]]) -> Reply:
        return Reply(body=self.response(output), headers={"x-request-id": "req_test"})

    def text(self, text: str) -> Reply:
        return self.reply([self.message_item(text)])

    def tool_calls(self, calls: list[ToolCall], *, text: str = "") -> Reply:
        output = [self.message_item(text)] if text else []
        output += [self.call_item(c, n) for n, c in enumerate(calls)]
        return self.reply(output)

    def structured(self, data: dict[str, Any]) -> Reply:
        return self.text(json.dumps(data))

    def stream(
        self,
        output: list[dict[str, Any]],
        *,
        pieces: int = 3,
        text_pieces: list[str] | None = None,
        status: str = "completed",
    ) -> Reply:
        """The event sequence the API streams for ``output``: each item added, its text,
        summary or arguments in deltas, done; then the whole response."""
        events: list[tuple[str | None, Any] | str] = []

        def emit(kind: str, **data: Any) -> None:
            payload = {"type": kind, "sequence_number": len(events), **data}
            events.append((kind, payload))

        emit("response.created", response=self.response([], status="in_progress"))
        for index, item in enumerate(output):
            where = {"item_id": item["id"], "output_index": index}
            if item["type"] == "message":
                text = item["content"][0]["text"]
                emit("response.output_item.added", output_index=index, item={**item, "content": []})
                for piece in text_pieces or (_pieces(text, pieces) if text else []):
                    emit(
                        "response.output_text.delta",
                        **where,
                        content_index=0,
                        delta=piece,
                        logprobs=[],
                    )
                emit("response.output_text.done", **where, content_index=0, text=text, logprobs=[])
            elif item["type"] == "function_call":
                emit(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "arguments": "", "status": "in_progress"},
                )
                for piece in _pieces(item["arguments"], 4):
                    emit("response.function_call_arguments.delta", **where, delta=piece)
                emit(
                    "response.function_call_arguments.done",
                    **where,
                    arguments=item["arguments"],
                    name=item["name"],
                )
            elif item["type"] == "reasoning":
                emit(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "summary": [], "encrypted_content": None},
                )
                for n, summary in enumerate(item["summary"]):
                    for piece in _pieces(summary["text"], pieces):
                        emit(
                            "response.reasoning_summary_text.delta",
                            **where,
                            summary_index=n,
                            delta=piece,
                        )
            emit("response.output_item.done", output_index=index, item=item)
        final = "response.incomplete" if status == "incomplete" else "response.completed"
        emit(final, response=self.response(output, status=status))
        return Reply(events=events)

    def stream_text(self, pieces: list[str]) -> Reply:
        return self.stream([self.message_item("".join(pieces))], text_pieces=pieces)

    def stream_tool_calls(self, calls: list[ToolCall], *, text: str = "") -> Reply:
        output = [self.message_item(text)] if text else []
        output += [self.call_item(c, n) for n, c in enumerate(calls)]
        return self.stream(output)

    def stream_structured(self, data: dict[str, Any]) -> Reply:
        return self.stream([self.message_item(json.dumps(data))], pieces=4)


# -- Google: Gemini generateContent --------------------------------------------------------------


class GooglePlay(Play):
    name = "google"
    model = "gemini-2.5-flash"
    reply_model = "gemini-2.5-flash-001"
    expected_usage = Usage(input_tokens=FRESH, output_tokens=OUTPUT, cache_read_tokens=CACHED)

    def _provider(self, url: str, *, timeout: float, retries: int) -> ChatProvider:
        from tensorsketch.providers.google import GoogleProvider

        http_options: dict[str, Any] = {}
        if retries:  # quick retries, so the test does not sleep for the default backoff
            http_options["retry_options"] = {
                "attempts": retries + 1,
                "initial_delay": 0.01,
                "max_delay": 0.05,
                "jitter": 0.0,
            }
        return GoogleProvider(
            model=self.model,
            api_key="AIza-test",
            base_url=url,
            timeout=timeout,
            max_retries=retries,
            http_options=http_options or None,
        )

    def check_endpoint(self, request: Recorded, *, stream: bool) -> None:
        assert request.method == "POST"
        method = "streamGenerateContent" if stream else "generateContent"
        assert request.path.endswith(f"/models/{self.model}:{method}"), request.path
        assert request.header("x-goog-api-key") == "AIza-test"
        if stream:
            assert request.query.get("alt") == ["sse"]

    def sent(self, request: Recorded) -> Sent:
        body = request.body
        system = ""
        if body.get("systemInstruction"):
            system = "".join(p.get("text", "") for p in body["systemInstruction"]["parts"])
        turns: list[tuple[str, list[Item]]] = []
        for content in body["contents"]:
            items: list[Item] = []
            for part in content["parts"]:
                signature = _field(part, "thoughtSignature")
                extra = {"thoughtSignature": signature} if signature is not None else {}
                if "text" in part:
                    items.append(Item("text", part["text"]))
                elif (blob := _field(part, "inlineData")) is not None:
                    items.append(Item("image", blob["data"], media_type=_field(blob, "mimeType")))
                elif (ref := _field(part, "fileData")) is not None:
                    items.append(
                        Item("image", _field(ref, "fileUri"), media_type=_field(ref, "mimeType"))
                    )
                elif (fc := _field(part, "functionCall")) is not None:
                    items.append(
                        Item(
                            "call",
                            id=fc.get("id"),
                            name=fc["name"],
                            args=fc.get("args", {}),
                            extra=extra,
                        )
                    )
                elif (fr := _field(part, "functionResponse")) is not None:
                    response = fr["response"]
                    is_error = "error" in response
                    items.append(
                        Item(
                            "result",
                            response["error"] if is_error else response["output"],
                            id=fr.get("id"),
                            name=fr["name"],
                            is_error=is_error,
                        )
                    )
                else:
                    raise AssertionError(f"unexpected part {part!r}")
            role = "assistant" if content["role"] == "model" else "user"
            turns.append((role, items))
        tools: dict[str, dict[str, Any]] = {}
        descriptions: dict[str, str] = {}
        for group in body.get("tools") or []:
            for decl in _field(group, "functionDeclarations") or []:
                tools[decl["name"]] = _field(decl, "parametersJsonSchema")
                descriptions[decl["name"]] = decl.get("description", "")
        config = body.get("generationConfig") or {}
        output_schema = _field(config, "responseJsonSchema")
        if output_schema is not None:
            assert _field(config, "responseMimeType") == "application/json"
        return Sent(
            model=self.model,
            system=system,
            turns=turns,
            tools=tools,
            tool_descriptions=descriptions,
            output_schema=output_schema,
            max_tokens=_field(config, "maxOutputTokens"),
            stream=request.path.endswith(":streamGenerateContent"),
        )

    def wire_call_id(self, call: ToolCall) -> str | None:
        return None  # the plays below send function calls without ids, as Gemini does

    def _usage(self) -> dict[str, Any]:
        return {
            "promptTokenCount": FRESH + CACHED,
            "cachedContentTokenCount": CACHED,
            "candidatesTokenCount": OUTPUT,
            "totalTokenCount": FRESH + CACHED + OUTPUT,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": FRESH + CACHED}],
        }

    def _response(self, parts: list[dict[str, Any]], finish: str | None = "STOP") -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if finish:
            candidate["finishReason"] = finish
        return {
            "candidates": [candidate],
            "usageMetadata": self._usage(),
            "modelVersion": self.reply_model,
            "responseId": "resp-test",
        }

    def _call_part(self, c: ToolCall, first: bool) -> dict[str, Any]:
        part: dict[str, Any] = {"functionCall": {"name": c.name, "args": c.args}}
        if first:  # Gemini signs the first function call of a turn
            part["thoughtSignature"] = "c2lnbmF0dXJlLW9uZQ=="
        return part

    def text(self, text: str) -> Reply:
        return Reply(body=self._response([{"text": text}]))

    def tool_calls(self, calls: list[ToolCall], *, text: str = "") -> Reply:
        parts = [{"text": text}] if text else []
        parts += [self._call_part(c, i == 0) for i, c in enumerate(calls)]
        return Reply(body=self._response(parts))

    def structured(self, data: dict[str, Any]) -> Reply:
        return self.text(json.dumps(data))

    def stream_text(self, pieces: list[str]) -> Reply:
        events: list[tuple[str | None, Any] | str] = []
        for i, piece in enumerate(pieces):
            finish = "STOP" if i == len(pieces) - 1 else None
            events.append((None, self._response([{"text": piece}], finish)))
        return Reply(events=events)

    def stream_tool_calls(self, calls: list[ToolCall], *, text: str = "") -> Reply:
        events: list[tuple[str | None, Any] | str] = []
        if text:
            events.append((None, self._response([{"text": text}], None)))
        parts = [self._call_part(c, i == 0) for i, c in enumerate(calls)]
        events.append((None, self._response(parts, "STOP")))
        return Reply(events=events)

    def stream_structured(self, data: dict[str, Any]) -> Reply:
        return self.stream_text(_pieces(json.dumps(data), 4))

    def error(self, status: int, *, retry_after: str | None = None) -> Reply:
        status_name = {
            400: "INVALID_ARGUMENT",
            401: "UNAUTHENTICATED",
            403: "PERMISSION_DENIED",
            429: "RESOURCE_EXHAUSTED",
            500: "INTERNAL",
            503: "UNAVAILABLE",
        }.get(status, "UNKNOWN")
        error: dict[str, Any] = {
            "code": status,
            "message": f"test {status_name}",
            "status": status_name,
        }
        if retry_after is not None:
            # Gemini says when to come back in a RetryInfo detail rather than a header.
            error["details"] = [
                {
                    "@type": "type.googleapis.com/google.rpc.RetryInfo",
                    "retryDelay": f"{retry_after}s",
                }
            ]
        return Reply(status=status, body={"error": error})


PLAYS: dict[str, type[Play]] = {
    p.name: p for p in (AnthropicPlay, OpenAIPlay, OpenAIResponsesPlay, GooglePlay)
}
