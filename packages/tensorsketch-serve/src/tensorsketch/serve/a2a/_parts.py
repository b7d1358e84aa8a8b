"""A2A parts and artifacts from what a graph produces, and images from what a client sends.

A finished task carries its reply as the ``answer`` artifact (text, plus a file part for each
image and file of the agent's last message); an agent's structured output (``output_schema``,
kept in ``state.parsed``) becomes the ``output`` artifact, a JSON data part; and
``to_artifacts(state)`` names any other artifacts — a report a node wrote, a chart, a table —
as ``{name: value}``:

=========================================  ====================================================
the value                                  the part
=========================================  ====================================================
``str``                                    a text part
``bytes``                                  a file part (``raw``, base64 on the wire), its media
                                           type guessed from the artifact's name
:class:`~tensorsketch.messages.ImageBlock`  a file part (its ``url``, or its ``data``)
:class:`~tensorsketch.messages.FileBlock`   a file part (its ``url``, or its ``data``, with
                                           its ``name`` as the filename)
a pydantic model, dict, list, number, ...   a data part (JSON)
a ``list`` or ``tuple`` of the above       one part each
=========================================  ====================================================

Incoming file parts become content of the user's message, so the model reads them: images as
:class:`ImageBlock`, other files with a media type (a PDF, text, audio) as :class:`FileBlock`,
by bytes or by URI, within :data:`~tensorsketch.messages.MAX_FILE_BYTES`. A file part without
a media type, and data parts, reach the graph as text.
"""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python

from tensorsketch.messages import FileBlock, ImageBlock, Message, TextBlock
from tensorsketch.serve.a2a import _errors as errors

__all__ = ["ANSWER", "OUTPUT", "ToArtifacts", "artifacts_for", "part_of", "to_chat"]

#: ``to_artifacts(final state) -> {artifact name: value}``: the task's extra artifacts.
ToArtifacts = Callable[[Any], Mapping[str, Any]]
#: The artifact the reply is streamed into and finally written as.
ANSWER = "answer"
#: The artifact holding an agent's structured output.
OUTPUT = "output"


def part_of(value: Any, name: str = "") -> dict[str, Any]:
    """One A2A 1.0 part (JSON) for ``value`` (see the table above)."""
    if isinstance(value, str):
        return {"text": value}
    if isinstance(value, bytes | bytearray):
        media = mimetypes.guess_type(name)[0] or "application/octet-stream"
        part = {"raw": base64.b64encode(bytes(value)).decode(), "mediaType": media}
        return {**part, "filename": name} if name else part
    if isinstance(value, ImageBlock):
        media = value.media_type or "image/png"
        if value.url:
            return {"url": value.url, "mediaType": media}
        return {"raw": value.data or "", "mediaType": media}
    if isinstance(value, FileBlock):
        return _file_part(value)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return {"data": to_jsonable_python(value), "mediaType": "application/json"}


def _file_part(block: FileBlock) -> dict[str, Any]:
    if block.file_id is not None:
        msg = (
            f"the file {block.name or block.file_id!r} is a vendor's uploaded file id, which an "
            "A2A client cannot fetch; send it as `data=` (bytes) or a `url=`."
        )
        raise ValueError(msg)
    part: dict[str, Any] = (
        {"url": block.url} if block.url is not None else {"raw": block.data or ""}
    )
    part["mediaType"] = block.media_type
    return {**part, "filename": block.name} if block.name else part


def _parts(value: Any, name: str) -> list[dict[str, Any]]:
    if isinstance(value, list | tuple):
        return [part_of(item, name) for item in value]
    return [part_of(value, name)]


def artifacts_for(state: Any, reply: str, to_artifacts: ToArtifacts | None) -> list[dict[str, Any]]:
    """The finished task's artifacts: the answer, the structured output, then the user's."""
    parts = [{"text": reply}, *(part_of(block) for block in _reply_files(state))]
    out: list[dict[str, Any]] = [{"artifactId": ANSWER, "name": ANSWER, "parts": parts}]
    parsed = getattr(state, "parsed", None)
    if parsed is not None:
        out.append(
            {
                "artifactId": OUTPUT,
                "name": OUTPUT,
                "description": "The agent's structured output.",
                "parts": [part_of(parsed)],
            }
        )
    if to_artifacts is not None:
        extra = to_artifacts(state)
        if not isinstance(extra, Mapping):
            msg = (
                f"to_artifacts must return a mapping of artifact names to values, got "
                f"{type(extra).__name__}; e.g. `lambda state: {{'report.md': state.report}}`."
            )
            raise TypeError(msg)
        for name, value in extra.items():
            if value is None:
                continue
            parts = _parts(value, str(name))
            out.append({"artifactId": str(name), "name": str(name), "parts": parts})
    return out


def _reply_files(state: Any) -> list[ImageBlock | FileBlock]:
    """The images and files of the agent's last message (an agent-shaped state), if any."""
    messages = getattr(state, "messages", None)
    if not isinstance(messages, list):
        return []
    for message in reversed(messages):
        if isinstance(message, Message) and message.role == "assistant":
            if isinstance(message.content, str):
                return []
            return [b for b in message.content if isinstance(b, ImageBlock | FileBlock)]
    return []


def _file(part: Mapping[str, Any]) -> ImageBlock | FileBlock | None:
    """A file part as the block a model reads: an image, or a file with its media type."""
    media = str(part.get("mediaType") or "")
    if not media or not (part.get("url") or part.get("raw")):
        return None
    what = "an image part's" if media.startswith("image/") else "a file part's"
    raw: str | None = None
    if not part.get("url"):
        raw = str(part["raw"])
        try:
            base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise errors.invalid_params(f"{what} `raw` is not base64.") from None
    try:
        if media.startswith("image/"):
            if raw is None:
                return ImageBlock(url=str(part["url"]), media_type=media)
            return ImageBlock(data=raw, media_type=media)
        name = str(part["filename"]) if part.get("filename") else None
        if raw is None:
            return FileBlock(url=str(part["url"]), media_type=media, name=name)
        return FileBlock(data=raw, media_type=media, name=name)
    except ValidationError as exc:  # too large
        reason = exc.errors()[0].get("msg", str(exc)).removeprefix("Value error, ")
        raise errors.invalid_params(f"{what} file is refused: {reason}") from None


def part_text(part: Mapping[str, Any]) -> str | None:
    """What a graph reads of one part as text (``None`` for a file it sees as a file)."""
    if "text" in part:
        return str(part["text"])
    if "data" in part:
        return json.dumps(part["data"], sort_keys=True)
    if "url" in part:
        return f"[file: {part['url']}]"
    if "raw" in part:
        return f"[file: {part.get('filename') or part.get('mediaType') or 'bytes'}]"
    return ""


def message_text(message: Mapping[str, Any]) -> str:
    """A message's text parts joined, with each data part written as JSON."""
    out = [part_text(part) for part in message.get("parts") or ()]
    return "\n".join(text for text in out if text is not None)


def to_chat(message: Mapping[str, Any]) -> Message:
    """An A2A message as a chat message: its text, and its files as images and files."""
    role = "assistant" if message.get("role") == "ROLE_AGENT" else "user"
    parts = message.get("parts") or ()
    files = [block for part in parts if (block := _file(part)) is not None]
    if not files:
        return Message(role=role, content=message_text(message))
    blocks: list[TextBlock | ImageBlock | FileBlock] = []
    for part in parts:
        block = _file(part)
        if block is not None:
            blocks.append(block)
        else:
            text = part_text(part)
            if text:
                blocks.append(TextBlock(text=text))
    return Message(role=role, content=blocks)
