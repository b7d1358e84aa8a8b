"""``POST /v1/responses``: the OpenAI Responses API over the same runs as Chat Completions.

``input`` (a string, or message / ``function_call`` / ``function_call_output`` items) becomes
the same messages a chat request carries, so conversations, approvals and errors behave the
same: a run waiting on approvals answers with ``function_call`` output items, and a
``function_call_output`` item carrying the decision continues it. Streaming sends typed events
(``response.created`` ... ``response.completed``), each with a ``sequence_number``, and no
``[DONE]``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tensorsketch.messages import Message
from tensorsketch.serve._http import EventStream, ServeError, read_json, sse
from tensorsketch.serve._openai_format import (
    ResponseFormat,
    formatted_graph,
    formatted_reply,
    parse_text_format,
)
from tensorsketch.serve._openai_wire import (
    CONVERSATION_HEADER,
    TurnJoiner,
    conversation_id,
    failure,
    model_of,
    parse_message,
    question,
    text_of,
    tool_calls,
)
from tensorsketch.serve.events import (
    RunFailed,
    RunFinished,
    RunSuspended,
    ServeEvent,
    TextDelta,
    with_first,
)

if TYPE_CHECKING:
    from tensorsketch.provider import Usage
    from tensorsketch.serve._openai import _Chat

__all__ = ["responses_endpoint"]


def _bad(message: str, param: str) -> ServeError:
    return ServeError(400, message, param=param, code="invalid_request_error")


def _item(raw: Any, i: int) -> Message:
    param = f"input[{i}]"
    if not isinstance(raw, Mapping):
        raise _bad(f"`{param}` must be an input item object.", param)
    kind = raw.get("type", "message")
    if kind == "message":
        content = raw.get("content")
        if isinstance(content, list):  # input_text / output_text / input_image parts
            content = [_part(p, f"{param}.content[{j}]") for j, p in enumerate(content)]
        return parse_message({"role": raw.get("role"), "content": content}, i)
    if kind == "function_call":
        call_id, name, arguments = raw.get("call_id"), raw.get("name"), raw.get("arguments")
        if not all(isinstance(v, str) and v for v in (call_id, name)) or not isinstance(
            arguments, str
        ):
            raise _bad(f"`{param}` needs `call_id`, `name` and `arguments` strings.", param)
        wire = {"id": call_id, "function": {"name": name, "arguments": arguments}}
        return parse_message({"role": "assistant", "content": None, "tool_calls": [wire]}, i)
    if kind == "function_call_output":
        call_id, output = raw.get("call_id"), raw.get("output")
        if not isinstance(call_id, str) or not call_id:
            raise _bad(f"`{param}.call_id` must name the function call it answers.", param)
        text = text_of(output, f"{param}.output", images=False)
        return Message(role="tool", content=text, tool_call_id=call_id)
    raise _bad(
        f"`{param}.type` is {kind!r}; use 'message', 'function_call' or 'function_call_output'.",
        f"{param}.type",
    )


def _part(part: Any, param: str) -> Any:
    if not isinstance(part, Mapping):
        raise _bad(f"`{param}` must be a content part object.", param)
    kind = part.get("type")
    if kind in ("input_text", "output_text"):
        return {"type": "text", "text": part.get("text")}
    if kind == "input_image":
        return {"type": "image_url", "image_url": {"url": part.get("image_url")}}
    raise _bad(f"`{param}.type` is {kind!r}; use 'input_text' or 'input_image'.", f"{param}.type")


def _messages(body: Mapping[str, Any]) -> list[Message]:
    raw = body.get("input")
    messages: list[Message] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _bad("`instructions` must be a string.", "instructions")
        messages.append(Message(role="system", content=instructions))
    if isinstance(raw, str) and raw:
        return [*messages, Message(role="user", content=raw)]
    if not isinstance(raw, list) or not raw:
        raise _bad("`input` must be a non-empty string or a non-empty list of items.", "input")
    return [*messages, *(_item(item, i) for i, item in enumerate(raw))]


def _usage(usage: Usage | None) -> dict[str, Any]:
    cached = usage.cache_read_tokens if usage else 0
    prompt = (usage.input_tokens + cached + usage.cache_write_tokens) if usage else 0
    output = usage.output_tokens if usage else 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + output,
    }


class _Reply:
    """One response object as it is built up (the stream and the JSON answer share it)."""

    def __init__(self, model: str, text: Any = None) -> None:
        self.id = f"resp_{uuid.uuid4().hex}"
        self.message_id = f"msg_{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model
        self.output: list[dict[str, Any]] = []
        self.status = "in_progress"
        self.usage: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        #: The request's ``text`` (its format), echoed as the API does.
        self.text = text if text is not None else {"format": {"type": "text"}}

    def message(self, text: str) -> dict[str, Any]:
        part = {"type": "output_text", "text": text, "annotations": []}
        return {
            "type": "message",
            "id": self.message_id,
            "status": "completed",
            "role": "assistant",
            "content": [part],
        }

    def calls(self, last: RunSuspended) -> list[dict[str, Any]]:
        return [
            {
                "type": "function_call",
                "id": f"fc_{call['id']}",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
                "status": "completed",
            }
            for call in tool_calls(last)
        ]

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": self.status,
            "model": self.model,
            "output": self.output,
            "usage": self.usage,
            "error": self.error,
            "incomplete_details": None,
            "instructions": None,
            "metadata": {},
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "temperature": None,
            "top_p": None,
            "text": self.text,
            "truncation": "disabled",
        }

    def finish(self, last: ServeEvent, text: str) -> None:
        if isinstance(last, RunFinished):
            self.output = [self.message(text)]
            self.usage = _usage(last.usage)
            self.status = "completed"
        elif isinstance(last, RunSuspended):
            self.output = self.calls(last)
            if not self.output:
                self.output = [self.message(question(last))]
            self.usage = _usage(None)
            self.status = "completed"


def _answer(last: ServeEvent, fmt: ResponseFormat | None) -> str:
    """The reply's text: the validated JSON when a format was asked for."""
    if not isinstance(last, RunFinished):
        return ""
    return last.reply if fmt is None else formatted_reply(last.reply, fmt)


def responses_endpoint(chat: _Chat) -> Callable[[Request], Awaitable[Response]]:
    """The ``POST /v1/responses`` handler of one :class:`~._openai._Chat`."""

    async def respond(request: Request) -> Response:
        body = await read_json(request)
        if not isinstance(body, Mapping):
            raise _bad("the request body must be a JSON object.", "input")
        model = chat.check_model(model_of(body))
        stream = body.get("stream", False)
        if not isinstance(stream, bool | None):
            raise _bad("`stream` must be true or false.", "stream")
        messages = _messages(body)
        conversation = conversation_id(body, request.headers.get(CONVERSATION_HEADER))
        fmt = parse_text_format(body.get("text"))
        graph = None if fmt is None else formatted_graph(chat.graph, chat.adapter, fmt, "text")
        thread, plan = await chat.plan(messages, conversation)
        headers = {CONVERSATION_HEADER: thread} if thread else {}
        reply = _Reply(model, body.get("text") if fmt is not None else None)
        if not stream:
            last = await chat.finish(thread, plan, graph)
            if isinstance(last, RunFailed):
                raise failure(last)
            reply.finish(last, _answer(last, fmt))
            return JSONResponse(reply.body(), headers=headers)
        events = chat.run(thread, plan, graph)
        first = await anext(events)
        if isinstance(first, RunFailed):
            raise failure(first)
        return EventStream(_stream(reply, first, events, fmt), headers=headers)

    return respond


async def _stream(
    reply: _Reply,
    first: ServeEvent,
    events: AsyncIterator[ServeEvent],
    fmt: ResponseFormat | None = None,
) -> AsyncIterator[bytes]:
    seq = 0

    def emit(kind: str, **data: Any) -> bytes:
        nonlocal seq
        frame = sse({"type": kind, "sequence_number": seq, **data}, event=kind)
        seq += 1
        return frame

    yield emit("response.created", response=reply.body())
    yield emit("response.in_progress", response=reply.body())
    texts: list[str] = []
    joiner = TurnJoiner()  # a blank line between model turns, as in Chat Completions
    opened = False
    where = {"item_id": reply.message_id, "output_index": 0, "content_index": 0}
    last = first

    def opening() -> list[bytes]:
        item = {**reply.message(""), "status": "in_progress", "content": []}
        part = {"type": "output_text", "text": "", "annotations": []}
        return [
            emit("response.output_item.added", output_index=0, item=item),
            emit("response.content_part.added", part=part, **where),
        ]

    async for event in with_first(first, events):
        last = event
        if fmt is not None or not isinstance(event, TextDelta) or event.namespace:
            continue  # with a format, only the validated answer is sent (below)
        piece = joiner.delta(event)
        if not piece:
            continue
        if not opened:
            opened = True
            for frame in opening():
                yield frame
        texts.append(piece)
        yield emit("response.output_text.delta", delta=piece, logprobs=[], **where)
    if fmt is not None and (answer := _answer(last, fmt)):
        opened = True
        for frame in opening():
            yield frame
        texts.append(answer)
        yield emit("response.output_text.delta", delta=answer, logprobs=[], **where)
    if isinstance(last, RunFailed):
        error = failure(last)
        reply.status = "failed"
        reply.error = {"code": error.code or "server_error", "message": error.message}
        yield emit("response.failed", response=reply.body())
        return
    asked = ""
    if opened and isinstance(last, RunSuspended) and not tool_calls(last):
        asked = joiner.then(question(last))  # asked after the text: it ends the same message
    if asked:
        texts.append(asked)
        yield emit("response.output_text.delta", delta=asked, logprobs=[], **where)
    text = "".join(texts)
    if opened:
        done = reply.message(text)
        yield emit("response.output_text.done", text=text, logprobs=[], **where)
        yield emit("response.content_part.done", part=done["content"][0], **where)
        yield emit("response.output_item.done", output_index=0, item=done)
    reply.finish(last, text)
    for frame in _other_items(reply, last, text, opened, emit):
        yield frame
    yield emit("response.completed", response=reply.body())


def _other_items(
    reply: _Reply, last: ServeEvent, text: str, opened: bool, emit: Callable[..., bytes]
) -> list[bytes]:
    """The output items after the streamed message: every item when no text was streamed
    (function calls with their argument events), else the calls a suspended run waits on."""
    frames: list[bytes] = []
    if not opened:
        for index, item in enumerate(reply.output):
            frames.append(emit("response.output_item.added", output_index=index, item=item))
            if item["type"] == "function_call":
                common = {"item_id": item["id"], "output_index": index}
                frames.append(
                    emit(
                        "response.function_call_arguments.delta",
                        delta=item["arguments"],
                        **common,
                    )
                )
                frames.append(
                    emit(
                        "response.function_call_arguments.done",
                        arguments=item["arguments"],
                        name=item["name"],
                        **common,
                    )
                )
            frames.append(emit("response.output_item.done", output_index=index, item=item))
    elif isinstance(last, RunSuspended):
        reply.output = [reply.message(text), *reply.calls(last)]
        for index, item in enumerate(reply.output[1:], start=1):
            frames.append(emit("response.output_item.added", output_index=index, item=item))
            frames.append(emit("response.output_item.done", output_index=index, item=item))
    return frames
