"""Helpers every vendor mapping shares: SDK import, images, JSON, structured output, ids.

Nothing here imports a vendor SDK; each provider module imports its own.
"""

from __future__ import annotations

import base64
import copy
import importlib
import inspect
import json
import mimetypes
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pydantic

from tensorsketch.messages import FileBlock, ImageBlock, Message, Reasoning, TextBlock, ToolCall
from tensorsketch.provider import Completion, StructuredOutputError, Usage, parse_structured
from tensorsketch.tools import Tool

__all__ = [
    "TOOL_ID_PREFIX",
    "Draft",
    "check_tools",
    "content_blocks",
    "image_bytes",
    "import_sdk",
    "loads_args",
    "new_tool_id",
    "route_options",
    "strict_json_schema",
]

#: Prefix of tool-call ids TensorSketch made up because the API returned none (Gemini).
TOOL_ID_PREFIX = "ts_call_"


def import_sdk(module: str, extra: str) -> ModuleType:
    """Import a vendor SDK, or fail with the install command that brings it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        msg = (
            f"the {extra!r} provider needs the {module!r} package, which is not installed; "
            f'install it with `pip install "tensorsketch-providers[{extra}]"`.'
        )
        raise ImportError(msg, name=module) from exc


def route_options(method: Any, request: dict[str, Any], options: dict[str, Any]) -> None:
    """Add call ``options`` to ``request``: as keywords the SDK method knows, the rest inside
    ``extra_body``.

    SDK releases add and drop keyword parameters (a newer ``anthropic`` has no
    ``temperature`` keyword) while the API still takes the field, so anything the installed
    SDK does not name travels in the request body unchanged.
    """
    try:
        known = set(inspect.signature(method).parameters)
    except (TypeError, ValueError):
        known = set()
    extra: dict[str, Any] = dict(request.get("extra_body") or {})
    for key, value in options.items():
        if key == "extra_body" and isinstance(value, dict):
            extra.update(value)
        elif key in known:
            request[key] = value
        else:
            extra[key] = value
    if extra:
        request["extra_body"] = extra


def new_tool_id() -> str:
    """A tool-call id for APIs that do not return one."""
    return f"{TOOL_ID_PREFIX}{uuid.uuid4().hex[:16]}"


def content_blocks(message: Message) -> list[TextBlock | ImageBlock | FileBlock]:
    """A message's content as a list of blocks (a plain string becomes one text block)."""
    if isinstance(message.content, str):
        return [TextBlock(text=message.content)] if message.content else []
    return list(message.content)


def refuse_file(block: FileBlock, vendor: str, why: str) -> ValueError:
    """The error for a file a vendor's API cannot take, saying what to do instead."""
    what = block.name or block.media_type
    return ValueError(f"{vendor} cannot take the file {what!r}: {why}")


def image_bytes(block: ImageBlock) -> tuple[str, str] | None:
    """``(media_type, base64_data)`` for inline images and ``data:`` URLs; None for a URL."""
    if block.data is not None:
        return block.media_type or "application/octet-stream", block.data
    url = block.url or ""
    if url.startswith("data:"):
        header, _, payload = url[5:].partition(",")
        media_type, _, encoding = header.partition(";")
        if encoding != "base64":
            payload = base64.b64encode(payload.encode()).decode()
        return media_type or "application/octet-stream", payload
    return None


def guess_media_type(url: str) -> str:
    """The media type of an image URL, guessed from its extension (``image/jpeg`` if unknown)."""
    guessed, _ = mimetypes.guess_type(url.split("?", 1)[0])
    return guessed or "image/jpeg"


def loads_args(text: str) -> dict[str, Any]:
    """Decode a tool call's JSON arguments; a model's broken JSON becomes ``{"_raw": text}``.

    The agent's argument validation then reports the problem to the model, which is how a
    real model gets to repair its call.
    """
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"_raw": text}
    if isinstance(value, dict):
        return value
    return {"_raw": text}


def check_tools(tools: Sequence[Tool] | None, *, reserved: str | None = None) -> list[Tool]:
    """The tool list, checked for duplicate (and reserved) names."""
    result = list(tools or [])
    seen: set[str] = set()
    for item in result:
        if not isinstance(item, Tool):
            msg = (
                f"`tools` must hold Tool objects (decorate functions with `@tool`), got "
                f"{type(item).__name__} ({item!r:.60})."
            )
            raise TypeError(msg)
        if item.name in seen:
            msg = f"two tools are named {item.name!r}; tool names must be unique per call."
            raise ValueError(msg)
        if reserved is not None and item.name == reserved:
            msg = (
                f"the tool name {reserved!r} is reserved for structured output on this "
                "provider; rename the tool with `@tool(name=...)`."
            )
            raise ValueError(msg)
        seen.add(item.name)
    return result


def output_json_schema(schema: type[pydantic.BaseModel]) -> dict[str, Any]:
    """The JSON schema of an ``output_schema`` class."""
    if not (isinstance(schema, type) and issubclass(schema, pydantic.BaseModel)):
        msg = (
            f"`output_schema` must be a Schema (pydantic model) class, got {schema!r}; "
            "declare one with `class Answer(Schema): ...`."
        )
        raise TypeError(msg)
    return schema.model_json_schema()


def strict_json_schema(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Rewrite a JSON schema for strict (constrained-decoding) mode.

    Strict mode wants every object closed (``additionalProperties: false``) with all its
    properties required, and no ``$ref`` with sibling keywords. Returns the rewritten schema
    and whether it could be made strict: a free-form mapping (``dict[str, X]``) cannot, and
    then the caller sends it without ``strict``.
    """
    rewrite = _StrictRewrite(copy.deepcopy(schema))
    result = rewrite.visit(rewrite.root)
    if not rewrite.possible:
        return copy.deepcopy(schema), False
    return result, True


class _StrictRewrite:
    """One pass of :func:`strict_json_schema` over a copy of the schema (changed in place).

    ``possible`` turns false at the first free-form mapping, which strict mode cannot express.
    """

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self.possible = True

    def resolve(self, ref: str) -> Any:
        node: Any = self.root
        for part in ref.removeprefix("#/").split("/"):
            node = node[part]
        return node

    def visit(self, node: Any) -> Any:
        """The strict form of ``node``, with every subschema below it rewritten."""
        if not isinstance(node, dict):
            return node
        node.pop("title", None)
        node.pop("default", None)
        if "$ref" in node and len(node) > 1:  # strict mode refuses siblings: inline the target
            target = copy.deepcopy(self.resolve(node.pop("$ref")))
            target.pop("title", None)
            node = {**target, **node}
        for key in ("$defs", "definitions"):
            if isinstance(node.get(key), dict):
                node[key] = {name: self.visit(sub) for name, sub in node[key].items()}
        self._close_object(node)
        if isinstance(node.get("items"), dict):
            node["items"] = self.visit(node["items"])
        for key in ("anyOf", "oneOf", "allOf"):
            if isinstance(node.get(key), list):
                node[key] = [self.visit(sub) for sub in node[key]]
        if isinstance(node.get("allOf"), list) and len(node["allOf"]) == 1:
            only = node.pop("allOf")[0]
            node = {**only, **node}
        return node

    def _close_object(self, node: dict[str, Any]) -> None:
        """An object schema: no extra properties, and every property required."""
        properties = node.get("properties")
        if not (node.get("type") == "object" or isinstance(properties, dict)):
            return
        if node.get("additionalProperties") not in (None, False):
            self.possible = False
        node["additionalProperties"] = False
        if isinstance(properties, dict):
            node["properties"] = {name: self.visit(sub) for name, sub in properties.items()}
            node["required"] = list(node["properties"])


@dataclass
class Draft:
    """A reply being assembled (from one JSON body or from stream events), vendor-neutral.

    ``structured`` holds output that arrived outside the text (Anthropic's "respond" tool).
    """

    text: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    structured: dict[str, Any] | None = None
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    stop_reason: str | None = None
    reasoning: list[Reasoning] = field(default_factory=list)

    def finish(self, output_schema: type[pydantic.BaseModel] | None) -> Completion:
        """The :class:`Completion`, with ``parsed`` validated when a schema was asked for.

        :raises StructuredOutputError: the reply does not fit ``output_schema``; it carries
            the completion, so a repair loop can show the model its reply (and count its
            tokens).
        """
        text = "".join(self.text)
        if self.structured is not None and not text:
            text = json.dumps(self.structured, separators=(",", ":"))
        completion = Completion(
            message=Message(
                role="assistant",
                content=text,
                tool_calls=list(self.calls),
                reasoning=list(self.reasoning),
            ),
            usage=self.usage,
            model=self.model,
            stop_reason=self.stop_reason,
        )
        if output_schema is None or self.calls:
            return completion
        try:
            parsed = parse_structured(text, output_schema, completion=completion)
        except StructuredOutputError as exc:
            if self.stop_reason != "max_tokens":
                raise
            msg = f"{exc} The reply was cut off at `max_tokens`; raise it."
            raise StructuredOutputError(
                msg, exc.errors, raw=exc.raw, completion=exc.completion
            ) from None
        return completion.model_copy(update={"parsed": parsed})
