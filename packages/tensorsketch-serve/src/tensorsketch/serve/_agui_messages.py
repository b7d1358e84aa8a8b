"""AG-UI messages to and from TensorSketch's own :class:`~tensorsketch.messages.Message`.

The two shapes are close (both follow the chat-completions roles); the differences are
handled here: a developer message is a system message, a tool call's arguments travel as a
JSON string, media parts name their source, and activity/reasoning messages (UI-only) are
not part of what the model sees.

A user's document and audio parts become :class:`~tensorsketch.messages.FileBlock` objects from any
of AG-UI's three sources: inline base64 ``data`` (checked, and within
:data:`~tensorsketch.messages.MAX_FILE_BYTES`), a ``url``, or a ``file`` handle the vendor
issued (``file_id``). A part's ``metadata.filename`` is the file's name. Video is refused:
no provider here takes it.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any

from ag_ui import core as agui
from pydantic import ValidationError

from tensorsketch.messages import ContentBlock, FileBlock, ImageBlock, Message, TextBlock, ToolCall

__all__ = ["args_json", "from_agui", "to_agui"]


def from_agui(messages: Sequence[Any]) -> list[Message]:
    """The conversation a client sent, as TensorSketch messages (ids kept).

    Raises ``ValueError`` naming the message and what to change for a part or a tool call
    TensorSketch cannot carry.
    """
    converted: list[Message] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}] (id {message.id!r})"
        if isinstance(message, agui.SystemMessage | agui.DeveloperMessage):
            converted.append(Message(role="system", content=message.content, id=message.id))
        elif isinstance(message, agui.UserMessage):
            content = _content_in(message.content, where)
            converted.append(Message(role="user", content=content, id=message.id))
        elif isinstance(message, agui.AssistantMessage):
            calls = [_call_in(call, where) for call in message.tool_calls or ()]
            converted.append(
                Message(
                    role="assistant",
                    content=message.content or "",
                    tool_calls=calls,
                    id=message.id,
                )
            )
        elif isinstance(message, agui.ToolMessage):
            text = _text_in(message.content, where)
            converted.append(
                Message(
                    role="tool",
                    content=text or (message.error or ""),
                    tool_call_id=message.tool_call_id,
                    is_error=message.error is not None,
                    id=message.id,
                )
            )
        # Activity and reasoning messages are the UI's record, not model input.
    return converted


def to_agui(messages: Sequence[Message], ids: Sequence[str]) -> list[Any]:
    """``messages`` as AG-UI messages, the i-th with id ``ids[i]``."""
    out: list[Any] = []
    for message, message_id in zip(messages, ids):
        if message.role == "system":
            out.append(agui.SystemMessage(id=message_id, content=message.text))
        elif message.role == "user":
            out.append(agui.UserMessage(id=message_id, content=_content_out(message)))
        elif message.role == "assistant":
            calls = [
                agui.ToolCall(
                    id=call.id,
                    function=agui.FunctionCall(name=call.name, arguments=args_json(call.args)),
                )
                for call in message.tool_calls
            ]
            out.append(
                agui.AssistantMessage(
                    id=message_id, content=message.text or None, tool_calls=calls or None
                )
            )
        else:
            out.append(
                agui.ToolMessage(
                    id=message_id,
                    content=message.text,
                    tool_call_id=message.tool_call_id or "",
                    error=message.text if message.is_error else None,
                )
            )
    return out


def args_json(args: Any) -> str:
    """Tool-call arguments as the JSON text AG-UI (and chat APIs) carry."""
    return json.dumps(args if args is not None else {}, sort_keys=True, default=str)


def _call_in(call: Any, where: str) -> ToolCall:
    raw = call.function.arguments or "{}"
    try:
        args = json.loads(raw)
    except ValueError:
        msg = (
            f"{where}: tool call {call.id!r} has arguments that are not JSON ({raw!r:.60}); "
            "send `function.arguments` as a JSON object string such as '{\"x\": 1}'."
        )
        raise ValueError(msg) from None
    if not isinstance(args, dict):
        msg = (
            f"{where}: tool call {call.id!r} has arguments {raw!r:.60}, which is not a JSON "
            "object; send the arguments as an object of named values."
        )
        raise ValueError(msg)
    return ToolCall(id=call.id, name=call.function.name, args=args)


def _content_in(content: str | list[Any], where: str) -> str | list[ContentBlock]:
    if isinstance(content, str):
        return content
    blocks: list[ContentBlock] = []
    for i, part in enumerate(content):
        if isinstance(part, agui.TextPart):
            blocks.append(TextBlock(text=part.text))
        elif isinstance(part, agui.ImagePart) and isinstance(part.source, agui.UrlSource):
            blocks.append(ImageBlock(url=part.source.value))
        elif isinstance(part, agui.ImagePart) and isinstance(part.source, agui.DataSource):
            blocks.append(ImageBlock(data=part.source.value, media_type=part.source.mime_type))
        elif isinstance(part, agui.DocumentPart | agui.AudioPart):
            blocks.append(_file_in(part, f"{where} content[{i}]"))
        else:
            kind = getattr(part, "type", type(part).__name__)
            source = getattr(getattr(part, "source", None), "type", None)
            what = f"a {kind!r} part" + (f" with a {source!r} source" if source else "")
            msg = (
                f"{where} content[{i}] is {what}, which TensorSketch does not pass to a model; "
                "send text "
                "parts, images, documents and audio."
            )
            raise ValueError(msg)
    return blocks


def _file_in(part: Any, where: str) -> FileBlock:
    """A document or audio part as a :class:`FileBlock`, refused with what to change."""
    source, kind = part.source, part.type
    media = source.mime_type
    if not media:
        msg = (
            f"{where}: the {kind} part's source needs a `mime_type` (such as "
            "'application/pdf' or 'audio/wav') so the model's vendor knows how to read it."
        )
        raise ValueError(msg)
    metadata = part.metadata if isinstance(part.metadata, dict) else {}
    name = metadata.get("filename")
    fields: dict[str, Any] = {"media_type": media, "name": name if isinstance(name, str) else None}
    if isinstance(source, agui.DataSource):
        try:
            base64.b64decode(source.value, validate=True)
        except (binascii.Error, ValueError):
            msg = f"{where}: the {kind} part's `data` source is not valid base64; encode the bytes."
            raise ValueError(msg) from None
        fields["data"] = source.value
    elif isinstance(source, agui.UrlSource):
        fields["url"] = source.value
    else:
        fields["file_id"] = source.value
    try:
        return FileBlock(**fields)
    except ValidationError as exc:  # the size limit
        reason = exc.errors()[0].get("msg", str(exc)).removeprefix("Value error, ")
        raise ValueError(f"{where}: {reason}") from None


def _text_in(content: str | list[Any], where: str) -> str:
    if isinstance(content, str):
        return content
    texts = [part.text for part in content if isinstance(part, agui.TextPart)]
    if len(texts) != len(content):
        msg = f"{where}: a tool result can carry only text parts here; send its text."
        raise ValueError(msg)
    return "".join(texts)


def _content_out(message: Message) -> str | list[Any]:
    if isinstance(message.content, str):
        return message.content
    parts: list[Any] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            parts.append(agui.TextPart(text=block.text))
        elif isinstance(block, FileBlock):
            parts.append(_file_out(block))
        elif block.url is not None:
            parts.append(agui.ImagePart(source=agui.UrlSource(value=block.url)))
        else:
            source = agui.DataSource(value=block.data or "", mime_type=block.media_type or "")
            parts.append(agui.ImagePart(source=source))
    return parts


def _file_out(block: FileBlock) -> Any:
    source: Any
    if block.data is not None:
        source = agui.DataSource(value=block.data, mime_type=block.media_type)
    elif block.url is not None:
        source = agui.UrlSource(value=block.url, mime_type=block.media_type)
    else:
        source = agui.FileSource(value=block.file_id or "", mime_type=block.media_type)
    metadata = {"filename": block.name} if block.name else None
    if block.is_audio:
        return agui.AudioPart(source=source, metadata=metadata)
    return agui.DocumentPart(source=source, metadata=metadata)
