"""Chat messages: roles, tool calls and results, content blocks, and the ``add_messages`` reducer.

These are TensorSketch's own, vendor-neutral types; each provider maps them to and from its
API. They are pydantic models, so they validate, journal and checkpoint like any state value.

A message's ``content`` is a string, or a list of content blocks when it carries more than text
(an image next to a question)::

    user("What is in this picture?", ImageBlock(url="https://example.com/cat.png"))
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tensorsketch.channels import MISSING

__all__ = [
    "MAX_FILE_BYTES",
    "ContentBlock",
    "FileBlock",
    "ImageBlock",
    "Message",
    "Reasoning",
    "Role",
    "TextBlock",
    "ToolCall",
    "add_messages",
    "assistant",
    "system",
    "tool_result",
    "user",
]

Role = Literal["system", "user", "assistant", "tool"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextBlock(_Model):
    """A piece of text inside a multi-part message."""

    type: Literal["text"] = "text"
    text: str


class ImageBlock(_Model):
    """An image: either a ``url`` or base64 ``data`` with its ``media_type`` (``image/png``)."""

    type: Literal["image"] = "image"
    url: str | None = None
    data: str | None = None
    media_type: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ImageBlock:
        if (self.url is None) == (self.data is None):
            msg = (
                "an ImageBlock needs exactly one source: `url=...` or base64 `data=...` "
                f"(got url={self.url!r:.40}, data={'set' if self.data else None})."
            )
            raise ValueError(msg)
        if self.data is not None and not self.media_type:
            msg = "an ImageBlock with base64 `data` needs its `media_type`, e.g. 'image/png'."
            raise ValueError(msg)
        return self


#: The most a :class:`FileBlock`'s inline data may decode to (Anthropic's request limit).
MAX_FILE_BYTES = 32 * 1024 * 1024


class FileBlock(_Model):
    """A file the model reads — a PDF or other document, or audio — with its ``media_type``
    (``application/pdf``, ``text/plain``, ``audio/wav``, ``audio/mpeg``), from one source:
    base64 ``data`` (inline), a ``url`` the vendor fetches, or the ``file_id`` of a file
    already uploaded to the vendor's files API (so a large file is not resent every turn).

    Each provider sends it in its vendor's own form (an Anthropic ``document``, an OpenAI
    ``file``/``input_file`` or ``input_audio`` part, Gemini inline or file data) and refuses,
    naming the vendor and what to pass instead, what its API cannot take (audio to Anthropic,
    a file URL to OpenAI Chat Completions, a file id to Gemini).
    """

    type: Literal["file"] = "file"
    media_type: str
    url: str | None = None
    data: str | None = None
    file_id: str | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> FileBlock:
        given = [n for n in ("url", "data", "file_id") if getattr(self, n) is not None]
        if len(given) != 1:
            msg = (
                "a FileBlock needs exactly one source: `url=...`, base64 `data=...` or an "
                f"uploaded file's `file_id=...` (got {', '.join(given) or 'none'})."
            )
            raise ValueError(msg)
        if self.data is not None and len(self.data) * 3 // 4 > MAX_FILE_BYTES:
            size = len(self.data) * 3 // 4 / 1024 / 1024
            msg = (
                f"the file {self.name or self.media_type!r} is {size:.1f} MiB; inline files may "
                f"be at most {MAX_FILE_BYTES // 1024 // 1024} MiB — upload it and pass "
                "`file_id=`, pass a `url=` instead, or split it."
            )
            raise ValueError(msg)
        return self

    @property
    def is_audio(self) -> bool:
        return self.media_type.startswith("audio/")


ContentBlock = Annotated[TextBlock | ImageBlock | FileBlock, Field(discriminator="type")]


class Reasoning(_Model):
    """A model's reasoning before its reply, kept so it can be sent back as the vendor
    requires (Anthropic rejects a tool-use turn replayed without its signed thinking).

    :ivar provider: the vendor that produced it (``provider_name``); other vendors' providers
        leave it out of their requests.
    :ivar text: the reasoning as the vendor showed it (a summary for some).
    :ivar signature: the vendor's signature over it, sent back unchanged (Gemini's thought
        signature, base64).
    :ivar redacted: opaque reasoning the vendor encrypted (Anthropic's ``redacted_thinking``,
        OpenAI's ``encrypted_content``).
    :ivar id: the vendor's id for it (an OpenAI reasoning item's ``rs_...``).
    :ivar call_id: the tool call whose part the vendor signed (Gemini puts a thought
        signature on a function call), so the signature goes back on that call.
    """

    provider: str
    text: str = ""
    signature: str | None = None
    redacted: str | None = None
    id: str | None = None
    call_id: str | None = None


class ToolCall(_Model):
    """A model's request to run one tool: ``id`` pairs it with its result message."""

    id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class Message(_Model):
    """One turn of a conversation.

    :ivar role: ``system``, ``user``, ``assistant`` or ``tool`` (a tool's result).
    :ivar content: text, or a list of content blocks (text and images).
    :ivar tool_calls: tools an assistant message asks to run.
    :ivar tool_call_id: for a ``tool`` message, the call it answers.
    :ivar name: for a ``tool`` message, the tool's name.
    :ivar is_error: for a ``tool`` message, whether the tool failed (the model sees why).
    :ivar id: an optional stable id; ``add_messages`` replaces a message with the same id.
    :ivar reasoning: for an assistant message, the model's reasoning before it
        (:class:`Reasoning`), kept in the transcript and sent back to the vendor that made it.
    """

    role: Role
    content: str | list[ContentBlock] = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    id: str | None = None
    reasoning: list[Reasoning] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_shape(self) -> Message:
        if self.role == "tool" and not self.tool_call_id:
            msg = (
                "a `tool` message needs `tool_call_id` naming the call it answers; build it "
                "with `tool_result(call, content)`."
            )
            raise ValueError(msg)
        if self.reasoning and self.role != "assistant":
            msg = f"only an assistant message can carry `reasoning`, not a {self.role!r} one."
            raise ValueError(msg)
        if self.tool_calls and self.role != "assistant":
            msg = f"only an assistant message can carry `tool_calls`, not a {self.role!r} one."
            raise ValueError(msg)
        return self

    @property
    def text(self) -> str:
        """The message's text (text blocks joined; images left out)."""
        if isinstance(self.content, str):
            return self.content
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def images(self) -> list[ImageBlock]:
        """The image blocks of the message, in order."""
        if isinstance(self.content, str):
            return []
        return [b for b in self.content if isinstance(b, ImageBlock)]


def _content(
    parts: Sequence[str | TextBlock | ImageBlock | FileBlock],
) -> str | list[ContentBlock]:
    if len(parts) == 1 and isinstance(parts[0], str):
        return parts[0]
    if not parts:
        return ""
    blocks: list[ContentBlock] = []
    for part in parts:
        if isinstance(part, str):
            blocks.append(TextBlock(text=part))
        elif isinstance(part, TextBlock | ImageBlock | FileBlock):
            blocks.append(part)
        else:
            msg = (
                f"message content parts must be str, TextBlock, ImageBlock or FileBlock, got "
                f"{type(part).__name__} ({part!r:.60})."
            )
            raise TypeError(msg)
    return blocks


def system(*content: str | TextBlock) -> Message:
    """A system (instructions) message."""
    return Message(role="system", content=_content(content))


def user(*content: str | TextBlock | ImageBlock | FileBlock) -> Message:
    """A user message; pass several parts to mix text and images."""
    return Message(role="user", content=_content(content))


def assistant(*content: str | TextBlock, tool_calls: Iterable[ToolCall] | None = None) -> Message:
    """An assistant message, optionally asking for tool calls."""
    return Message(role="assistant", content=_content(content), tool_calls=list(tool_calls or []))


def tool_result(
    call: ToolCall | str, content: Any, *, name: str | None = None, is_error: bool = False
) -> Message:
    """The result of a tool call, for the model to read.

    Non-string results are rendered as JSON (pydantic models through ``model_dump``).
    """
    if isinstance(call, ToolCall):
        call_id, name = call.id, name if name is not None else call.name
    else:
        call_id = call
    return Message(
        role="tool",
        content=render_result(content),
        tool_call_id=call_id,
        name=name,
        is_error=is_error,
    )


def render_result(value: Any) -> str | list[ContentBlock]:
    """Turn a tool's return value into message content."""
    if isinstance(value, str):
        return value
    if type(value) is int:  # what json.dumps would write, without its machinery
        return str(value)
    if isinstance(value, TextBlock | ImageBlock):
        return [value]
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, TextBlock | ImageBlock) for v in value)
    ):
        return list(value)
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(value, default=_json_default, sort_keys=True)
    except (TypeError, ValueError):
        return str(value)


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


# -- the reducer ------------------------------------------------------------------------------


def _as_messages(update: Any) -> list[Message]:
    if update is None:
        return []
    items = update if isinstance(update, list | tuple) else [update]
    result: list[Message] = []
    for item in items:
        if isinstance(item, Message):
            result.append(item)
        elif isinstance(item, dict):
            result.append(Message.model_validate(item))
        else:
            msg = (
                f"`add_messages` takes Message objects (or dicts of their fields), got "
                f"{type(item).__name__} ({item!r:.60}); build one with `user(...)`, "
                "`assistant(...)` or `tool_result(...)`."
            )
            raise TypeError(msg)
    return result


class _AddMessages:
    """``Annotated[list[Message], Reducer(add_messages)]``: append, or replace by ``id``.

    A message whose ``id`` matches one already in the list replaces it in place; every other
    message is appended. When a superstep only appended, :meth:`fold_delta` reports the
    appended suffix so a durable checkpoint stores just the new messages, not the history.
    """

    __name__ = "add_messages"
    __qualname__ = "add_messages"

    def __call__(self, left: Any, right: Any) -> list[Message]:
        new, _ = self.fold_delta(left, [right])
        result: list[Message] = new
        return result

    def fold_delta(
        self, current: Any, writes: Sequence[Any]
    ) -> tuple[list[Message], list[Message] | None]:
        """Fold a whole superstep's writes; return ``(new_list, appended_or_None)``."""
        base = _as_messages(current) if not _is_missing(current) else []
        index = {m.id: i for i, m in enumerate(base) if m.id is not None}
        result = list(base)
        appended: list[Message] = []
        replaced = False
        for write in writes:
            for message in _as_messages(write):
                at = index.get(message.id) if message.id is not None else None
                if at is not None:
                    result[at] = message
                    replaced = True
                    continue
                if message.id is not None:
                    index[message.id] = len(result)
                result.append(message)
                appended.append(message)
        return result, (None if replaced else appended)

    def __repr__(self) -> str:
        return "add_messages"


def _is_missing(value: Any) -> bool:
    return value is MISSING


#: The reducer for a message-history state field.
add_messages = _AddMessages()
