"""The OpenAI wire: reading a Chat Completions request (every field checked, every error a
clear 400) and the shapes the Chat Completions and Responses endpoints share.

The parser accepts what the OpenAI API accepts for the parts a graph can use (the messages,
``stream``, ``stream_options``, ``metadata``, ``response_format``) and ignores sampling options
(``temperature``, ``max_tokens``, ``tools``, ...): the graph's own agents choose those. What it
cannot honour (``n`` > 1, audio or file parts) is refused with a message naming the field.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tensorsketch.interrupts import PendingInterrupt, parse_approval
from tensorsketch.messages import FileBlock, ImageBlock, Message, TextBlock, ToolCall
from tensorsketch.serve._http import ServeError, dumps
from tensorsketch.serve._openai_format import ResponseFormat, parse_format
from tensorsketch.serve.events import RunFailed, RunSuspended, TextDelta

if TYPE_CHECKING:
    from tensorsketch.provider import Usage

__all__ = [
    "CONVERSATION_HEADER",
    "ChatRequest",
    "TurnJoiner",
    "chat_usage",
    "conversation_id",
    "decision",
    "failure",
    "model_of",
    "parse_chat_request",
    "parse_message",
    "question",
    "text_of",
    "tool_calls",
]

_DATA_URL = re.compile(r"data:(?P<type>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)", re.DOTALL)
#: How long a conversation id may be, and what it may contain (it names a durable thread).
_CONVERSATION_ID = re.compile(r"[A-Za-z0-9._:@/-]{1,200}")


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str
    messages: list[Message]
    stream: bool
    include_usage: bool
    conversation_id: str | None
    #: ``response_format`` (``None``: plain text).
    response_format: ResponseFormat | None = None


def _bad(message: str, param: str | None = None, code: str | None = None) -> ServeError:
    return ServeError(400, message, param=param, code=code or "invalid_request_error")


def text_of(content: Any, param: str, *, images: bool) -> str | list[Any]:
    """Message content: a string, or a list of parts (text, and images where allowed)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        msg = f"`{param}` must be a string or a list of content parts, got {_kind(content)}."
        raise _bad(msg, param)
    parts: list[Any] = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        if not isinstance(part, Mapping):
            raise _bad(
                f"`{where}` must be an object like {{'type': 'text', 'text': '...'}}.", where
            )
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise _bad(f"`{where}.text` must be a string, got {_kind(text)}.", f"{where}.text")
            parts.append(TextBlock(text=text))
        elif kind == "image_url" and images:
            parts.append(_image(part.get("image_url"), f"{where}.image_url"))
        elif kind == "file" and images:
            parts.append(_file(part.get("file"), f"{where}.file"))
        elif kind == "input_audio" and images:
            parts.append(_audio(part.get("input_audio"), f"{where}.input_audio"))
        else:
            allowed = "'text', 'image_url', 'file' and 'input_audio'" if images else "'text'"
            msg = f"`{where}.type` is {kind!r}; this server accepts {allowed} parts here."
            raise _bad(msg, f"{where}.type")
    return parts


def _image(value: Any, param: str) -> ImageBlock:
    url = value.get("url") if isinstance(value, Mapping) else None
    if not isinstance(url, str) or not url:
        raise _bad(f"`{param}.url` must be an image URL or a base64 data URL.", f"{param}.url")
    found = _DATA_URL.fullmatch(url)
    if found is None:
        if not url.startswith(("http://", "https://")):
            msg = f"`{param}.url` must be an http(s) URL or a `data:<type>;base64,...` URL."
            raise _bad(msg, f"{param}.url")
        return ImageBlock(url=url)
    try:
        base64.b64decode(found["data"], validate=True)
    except (binascii.Error, ValueError):
        raise _bad(f"`{param}.url` has data that is not valid base64.", f"{param}.url") from None
    return ImageBlock(data=found["data"], media_type=found["type"])


#: What ``input_audio.format`` may be, and the media type it stands for.
_AUDIO = {"wav": "audio/wav", "mp3": "audio/mpeg"}


def _base64(data: Any, param: str) -> str:
    if not isinstance(data, str) or not data:
        raise _bad(f"`{param}` must be base64 data.", param)
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(f"`{param}` is not valid base64.", param) from None
    return data


def _block(param: str, **fields: Any) -> FileBlock:
    """A :class:`FileBlock`, a file over the size limit refused as the client's error."""
    try:
        return FileBlock(**fields)
    except ValueError as exc:  # pydantic's ValidationError: the size limit
        reason = exc.errors()[0]["msg"] if hasattr(exc, "errors") else str(exc)
        raise _bad(f"`{param}`: {reason.removeprefix('Value error, ')}", param) from None


def _file(value: Any, param: str) -> FileBlock:
    """A ``file`` part: inline ``file_data`` (a base64 data URL) and its ``filename``."""
    if not isinstance(value, Mapping):
        raise _bad(f"`{param}` must be an object with `file_data` (a data URL).", param)
    if "file_id" in value and "file_data" not in value:
        msg = f"`{param}.file_id`: this server keeps no uploaded files; send `file_data`."
        raise _bad(msg, f"{param}.file_id")
    raw = value.get("file_data")
    found = _DATA_URL.fullmatch(raw) if isinstance(raw, str) else None
    if found is None:
        msg = f"`{param}.file_data` must be a `data:<type>;base64,...` URL."
        raise _bad(msg, f"{param}.file_data")
    data = _base64(found["data"], f"{param}.file_data")
    name = value.get("filename")
    if name is not None and not isinstance(name, str):
        raise _bad(f"`{param}.filename` must be a string.", f"{param}.filename")
    return _block(param, data=data, media_type=found["type"], name=name)


def _audio(value: Any, param: str) -> FileBlock:
    """An ``input_audio`` part: base64 ``data`` in a ``format`` (wav, mp3)."""
    if not isinstance(value, Mapping):
        raise _bad(f"`{param}` must be an object with `data` and `format`.", param)
    kind = value.get("format")
    if not isinstance(kind, str) or kind not in _AUDIO:
        msg = f"`{param}.format` must be 'wav' or 'mp3', got {kind!r:.40}."
        raise _bad(msg, f"{param}.format")
    data = _base64(value.get("data"), f"{param}.data")
    return _block(param, data=data, media_type=_AUDIO[kind])


def _tool_calls(value: Any, param: str) -> list[ToolCall]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad(f"`{param}` must be a list of tool calls, got {_kind(value)}.", param)
    calls = []
    for j, call in enumerate(value):
        where = f"{param}[{j}]"
        function = call.get("function") if isinstance(call, Mapping) else None
        call_id = call.get("id") if isinstance(call, Mapping) else None
        if not isinstance(call_id, str) or not call_id or not isinstance(function, Mapping):
            msg = f"`{where}` must look like {{'id', 'type': 'function', 'function': {{...}}}}."
            raise _bad(msg, where)
        name, arguments = function.get("name"), function.get("arguments", "{}")
        if not isinstance(name, str) or not name:
            raise _bad(f"`{where}.function.name` must be a string.", f"{where}.function.name")
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else None
        except json.JSONDecodeError:
            args = None
        if not isinstance(args, dict):
            msg = f"`{where}.function.arguments` must be a JSON object encoded as a string."
            raise _bad(msg, f"{where}.function.arguments")
        calls.append(ToolCall(id=call_id, name=name, args=args))
    return calls


def parse_message(raw: Any, i: int) -> Message:
    param = f"messages[{i}]"
    if not isinstance(raw, Mapping):
        raise _bad(f"`{param}` must be an object with `role` and `content`.", param)
    role = raw.get("role")
    content = raw.get("content")
    if role in ("system", "developer"):
        return Message(role="system", content=text_of(content, f"{param}.content", images=False))
    if role == "user":
        return Message(role="user", content=text_of(content, f"{param}.content", images=True))
    if role == "assistant":
        calls = _tool_calls(raw.get("tool_calls"), f"{param}.tool_calls")
        text = "" if content is None else text_of(content, f"{param}.content", images=False)
        return Message(role="assistant", content=text, tool_calls=calls)
    if role == "tool":
        call_id = raw.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            msg = f"`{param}.tool_call_id` must name the tool call this message answers."
            raise _bad(msg, f"{param}.tool_call_id")
        text = text_of(content, f"{param}.content", images=False)
        return Message(role="tool", content=text, tool_call_id=call_id)
    msg = (
        f"`{param}.role` is {role!r}; use one of 'system', 'developer', 'user', 'assistant' "
        "or 'tool'."
    )
    raise _bad(msg, f"{param}.role")


def conversation_id(body: Mapping[str, Any], header: str | None) -> str | None:
    """The conversation a request names (header first, then ``metadata.conversation_id``)."""
    metadata = body.get("metadata")
    if metadata is not None and (
        not isinstance(metadata, Mapping) or not all(isinstance(v, str) for v in metadata.values())
    ):
        raise _bad("`metadata` must be an object of string values.", "metadata")
    found = header if header is not None else (metadata or {}).get("conversation_id")
    if found is not None and not _CONVERSATION_ID.fullmatch(found):
        msg = (
            f"the conversation id {found[:60]!r} is not valid: use 1-200 letters, digits and "
            "`._:@/-`."
        )
        raise _bad(msg, "metadata.conversation_id")
    return found


def model_of(body: Mapping[str, Any]) -> str:
    """The request's ``model``: a non-empty string (the id ``GET /v1/models`` lists)."""
    if "model" not in body or body["model"] is None:
        raise _bad("`model` is required: the model id from GET /v1/models.", "model")
    model = body["model"]
    if not isinstance(model, str):
        msg = f"`model` must be a string, the model id from GET /v1/models; got {_kind(model)}."
        raise _bad(msg, "model")
    if not model:
        raise _bad("`model` must not be empty: use the model id from GET /v1/models.", "model")
    return model


def _flag(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _bad(f"`{name}` must be true or false, got {_kind(value)}.", name)
    return value


def parse_chat_request(body: Any, *, conversation_header: str | None) -> ChatRequest:
    """A validated :class:`ChatRequest`; a :class:`ServeError` (400) naming what is wrong."""
    if not isinstance(body, Mapping):
        raise _bad(f"the request body must be a JSON object, got {_kind(body)}.")
    model = model_of(body)
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise _bad("`messages` must be a non-empty list of messages.", "messages")
    messages = [parse_message(raw, i) for i, raw in enumerate(raw_messages)]
    n = body.get("n", 1)
    if n is not None and (n != 1 or isinstance(n, bool)):
        raise _bad(f"`n` must be 1 (one answer per request), got {n!r}.", "n")
    stream = _flag(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, Mapping):
        raise _bad("`stream_options` must be an object.", "stream_options")
    include_usage = options.get("include_usage", False) if options else False
    if not isinstance(include_usage, bool):
        msg = "`stream_options.include_usage` must be true or false."
        raise _bad(msg, "stream_options.include_usage")
    conversation = conversation_id(body, conversation_header)
    fmt = parse_format(body.get("response_format"))
    return ChatRequest(model, messages, stream, include_usage, conversation, fmt)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


#: The request / response header naming the conversation's durable thread.
CONVERSATION_HEADER = "X-Conversation-Id"


def chat_usage(usage: Usage | None) -> dict[str, Any]:
    prompt = completion = cached = 0
    if usage is not None:
        cached = usage.cache_read_tokens
        prompt = usage.input_tokens + cached + usage.cache_write_tokens
        completion = usage.output_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def tool_calls(suspended: RunSuspended) -> list[dict[str, Any]]:
    calls = []
    for pending in suspended.approvals:
        value = pending.value if isinstance(pending.value, Mapping) else {}
        calls.append(
            {
                "id": pending.id,
                "type": "function",
                "function": {
                    "name": str(value.get("tool", pending.id)),
                    "arguments": dumps(value.get("args", {})),
                },
            }
        )
    return calls


#: What separates two model turns in one streamed answer (a blank line, as between the
#: questions of :func:`question`): "Let me check." then, after the tool, "Result: 5.".
TURN_BREAK = "\n\n"


class TurnJoiner:
    """The text of one streamed answer, turn by turn.

    An OpenAI client adds the deltas of a choice up into one message. An agent's answer may
    span several model turns (text before a tool call, then the answer after it), each a run
    of deltas with its own message id; between two of them this puts :data:`TURN_BREAK`, so
    the turns read as paragraphs instead of running together ("Let me check.Result: 5."),
    and the stream ends with the final answer the non-streaming reply carries.
    """

    def __init__(self) -> None:
        self.message_id: str | None = None
        self.sent = ""  # the end of what was sent (enough to see a trailing break)

    def _gap(self) -> str:
        if not self.sent or self.sent.endswith(TURN_BREAK):
            return ""
        return "\n" if self.sent.endswith("\n") else TURN_BREAK

    def _sent(self, piece: str) -> str:
        if piece:
            self.sent = (self.sent + piece)[-len(TURN_BREAK) :]
        return piece

    def delta(self, event: TextDelta) -> str:
        """The text to send for a top-level delta (a break first when a new turn begins)."""
        if not event.text:
            return ""
        gap = self._gap() if event.message_id != self.message_id else ""
        self.message_id = event.message_id
        return self._sent(gap + event.text)

    def then(self, text: str) -> str:
        """``text`` that follows the turns (a question the run asks), after a break."""
        if not text:
            return ""
        self.message_id = None
        return self._sent(self._gap() + text)


def question(suspended: RunSuspended) -> str:
    """What a run waiting on questions (not approvals) says: the questions, as text."""
    asked = [p.value for p in suspended.interrupts if p.kind == "interrupt"]
    return "\n\n".join(v if isinstance(v, str) else dumps(v) for v in asked)


def decision(pending: PendingInterrupt, message: Message) -> Any:
    """The decision a ``tool`` message carries for ``pending`` (checked now: a bad one is a
    400 that names the call, not a failure deep in the resumed run)."""
    text = message.text.strip()
    if pending.kind != "approval":
        return text
    value: Any
    try:
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            word, _, reason = text.partition(":")
            value = word.strip()
            if reason.strip():  # `<word>: <reason>`: the word decides
                value = {"approved": parse_approval(value)[0], "reason": reason.strip()}
        parse_approval(value)
    except ValueError as exc:
        msg = (
            f"the tool message for call {pending.id!r} must decide it: 'approve', 'reject', "
            f'\'reject: <reason>\' or {{"approved": true|false, "reason": "..."}}; got '
            f"{text[:60]!r} ({exc})"
        )
        raise ServeError(400, msg, param="messages", code="invalid_decision") from None
    return value


def failure(failed: RunFailed) -> ServeError:
    """The client-facing error for a failed run (a :class:`ServeError` passes through)."""
    if isinstance(failed.error, ServeError):
        return failed.error
    headers = {}
    retry_after = getattr(failed.error, "retry_after", None)
    if failed.status == 429 and retry_after:
        headers["Retry-After"] = str(int(retry_after + 0.999))
    return ServeError(
        failed.status, failed.message, headers=headers, code=_CODES.get(failed.status)
    )


_CODES = {
    409: "conversation_busy",
    429: "rate_limit_exceeded",
    502: "upstream_error",
    500: "server_error",
}
