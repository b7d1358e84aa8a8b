"""``OpenAIResponsesProvider``: OpenAI's Responses API through the official ``openai`` SDK.

Chat Completions hides a reasoning model's reasoning; the Responses API returns it as
``reasoning`` items (a summary when asked for with ``model_options={"reasoning": {"summary":
"auto"}}``, and the reasoning itself encrypted). This provider keeps them in the transcript and
sends them back, so a reasoning model picks up its own chain of thought after a tool call.

Mapping notes:

* Stateless: requests go out with ``store: false`` — the transcript, journaled and
  checkpointed by TensorSketch, is the conversation's state, not OpenAI's storage. A reasoning
  model's items are asked for with ``include: ["reasoning.encrypted_content"]`` and come back
  as :class:`~tensorsketch.messages.Reasoning` (``text``: the summary, ``redacted``: the
  encrypted content, ``id``: ``rs_...``); they are sent back first in their turn with their
  encrypted content and without item ids (an id refers to stored items, which there are none
  of). A reasoning item without encrypted content cannot be sent back statelessly and is left
  out.
* System messages become ``instructions``; tool results are ``function_call_output`` items;
  function tools are declared with ``strict: false`` (the API's default is strict, which most
  tool schemas do not meet).
* Structured output uses ``text.format`` ``json_schema`` with the schema rewritten for strict
  mode, as the Chat Completions provider does.
* Files: inline ``data`` as ``input_file`` ``file_data`` (audio as ``input_audio``), a ``url``
  as ``file_url``, an uploaded file's ``file_id`` as ``file_id``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

from tensorsketch.messages import FileBlock, ImageBlock, Message, Reasoning, TextBlock, ToolCall
from tensorsketch.provider import (
    Completion,
    ProviderServerError,
    ReasoningDelta,
    StreamDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from tensorsketch.providers._base import WholeReply
from tensorsketch.providers._common import (
    Draft,
    check_tools,
    content_blocks,
    image_bytes,
    import_sdk,
    loads_args,
    output_json_schema,
    refuse_file,
    route_options,
    strict_json_schema,
)
from tensorsketch.providers.openai import AUDIO_FORMATS, OpenAIProvider
from tensorsketch.schema import Schema
from tensorsketch.tools import Tool

__all__ = ["OpenAIResponsesProvider"]

_sdk = import_sdk("openai", "openai")

_SCHEMA_NAME = re.compile(r"[^a-zA-Z0-9_-]")
#: Model ids of OpenAI's reasoning models (o1, o3, o4-mini, gpt-5, codex-...).
_REASONING_MODEL = re.compile(r"^(o\d|gpt-5|codex)")
_INCOMPLETE = {"max_output_tokens": "max_tokens", "content_filter": "content_filter"}
_ENCRYPTED = "reasoning.encrypted_content"


class OpenAIResponsesProvider(OpenAIProvider):
    """OpenAI models through the Responses API, keeping reasoning items across turns.

    Takes :class:`OpenAIProvider`'s arguments (``model``, ``api_key``, ``base_url``,
    ``client``, ``max_retries``, ``timeout``, ``provider_name``) and:

    :param encrypted_reasoning: ask for reasoning items' encrypted content, so they can be
        sent back; ``None`` (the default) asks for reasoning models (``o1``, ``o3``,
        ``o4-mini``, ``gpt-5*``, ``codex-*``) only, since other models refuse the request.
    """

    _NAME = "OpenAIResponsesProvider"

    def __init__(
        self,
        model: str = "gpt-4o",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: Any = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        provider_name: str = "openai",
        encrypted_reasoning: bool | None = None,
    ) -> None:
        super().__init__(
            model,
            api_key=api_key,
            base_url=base_url,
            client=client,
            max_retries=max_retries,
            timeout=timeout,
            provider_name=provider_name,
        )
        if encrypted_reasoning is None:
            encrypted_reasoning = bool(_REASONING_MODEL.match(model))
        self.encrypted_reasoning = encrypted_reasoning

    # -- calls ---------------------------------------------------------------------------------

    def _create(self, **request: Any) -> Any:
        """The Responses call."""
        return self._client.responses.create(**request)

    def _route(self, request: dict[str, Any], options: dict[str, Any]) -> None:
        route_options(self._client.responses.create, request, options)

    async def _stream(
        self, request: dict[str, Any], output_schema: type[Schema] | None
    ) -> AsyncIterator[StreamDelta | Completion]:
        request["stream"] = True
        # output_index -> the call's ordinal among the reply's calls
        calls: dict[int, int] = {}
        final: Any = None
        opening = functools.partial(self._create, **request)
        async for event in self._events(opening):
            if isinstance(event, WholeReply):
                reply_type = _sdk.types.responses.Response
                async for item in self._whole(event, reply_type, output_schema):
                    yield item
                return
            kind = getattr(event, "type", "")
            if kind in ("response.completed", "response.incomplete"):
                final = event.response  # read on to the stream's end, which closes it
                continue
            delta = self._delta(kind, event, calls)
            if delta is not None:
                yield delta
        if final is None:
            raise self._cut_off("`response.completed` event")
        yield self.parse_response(final, output_schema)

    def _delta(self, kind: str, event: Any, calls: dict[int, int]) -> StreamDelta | None:
        """What one stream event shows as it arrives (None for the events that show nothing);
        a failure event raises."""
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            return TextDelta(event.delta) if event.delta else None
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            return ReasoningDelta(event.delta) if event.delta else None
        if kind == "response.output_item.added":
            item = event.item
            if getattr(item, "type", None) != "function_call":
                return None
            calls[event.output_index] = len(calls)
            return ToolCallDelta(
                index=len(calls) - 1,
                id=item.call_id,
                name=item.name,
                arguments=item.arguments or "",
            )
        if kind == "response.function_call_arguments.delta":
            ordinal = calls.get(event.output_index)
            if ordinal is None or not event.delta:
                return None
            return ToolCallDelta(index=ordinal, arguments=event.delta)
        if kind == "response.failed":
            error = getattr(event.response, "error", None)
            raise self._failed(getattr(error, "code", None), getattr(error, "message", ""))
        if kind == "error":
            raise self._failed(getattr(event, "code", None), getattr(event, "message", ""))
        return None

    def _failed(self, code: str | None, message: str | None) -> ProviderServerError:
        return ProviderServerError(
            f"{self._where} failed while answering: {message or 'no reason given'}"
            + (f" ({code})" if code else ""),
            provider=self.provider_name,
            model=self.model,
        )

    # -- mapping: ours -> Responses ----------------------------------------------------------

    def build_request(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool] | None,
        output_schema: type[Schema] | None,
        max_tokens: int,
        options: dict[str, Any],
    ) -> dict[str, Any]:
        """The keyword arguments for ``client.responses.create``."""
        tool_list = check_tools(tools)
        instructions: list[str] = []
        items: list[dict[str, Any]] = []
        for message in messages:
            if message.role == "system":
                if message.text:
                    instructions.append(message.text)
                continue
            items.extend(self._items(message))
        request: dict[str, Any] = {
            "model": self.model,
            "input": items,
            "max_output_tokens": max_tokens,
            "store": False,
        }
        if instructions:
            request["instructions"] = "\n\n".join(instructions)
        if self.encrypted_reasoning:
            request["include"] = [_ENCRYPTED]
        if tool_list:
            request["tools"] = [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.json_schema(),
                    "strict": False,
                }
                for t in tool_list
            ]
        if output_schema is not None:
            schema, strict = strict_json_schema(output_json_schema(output_schema))
            text_format: dict[str, Any] = {
                "type": "json_schema",
                "name": _SCHEMA_NAME.sub("_", output_schema.__name__)[:64] or "output",
                "schema": schema,
                "strict": strict,
            }
            doc = (output_schema.__doc__ or "").strip()
            if doc:
                text_format["description"] = doc
            request["text"] = {"format": text_format}
        self._route(request, options)
        return request

    def _items(self, message: Message) -> list[dict[str, Any]]:
        """One message as Responses input items."""
        if message.role == "tool":
            blocks = content_blocks(message)
            output: Any = "".join(b.text for b in blocks if isinstance(b, TextBlock))
            if message.images:
                output = [_input_part(b) for b in blocks if not isinstance(b, FileBlock)]
            return [
                {"type": "function_call_output", "call_id": message.tool_call_id, "output": output}
            ]
        if message.role == "assistant":
            items = [
                _reasoning_item(r)
                for r in message.reasoning
                if r.provider == self.provider_name and r.redacted is not None
            ]
            if message.text:
                items.append({"role": "assistant", "content": message.text})
            items.extend(
                {
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": json.dumps(call.args),
                }
                for call in message.tool_calls
            )
            return items
        if isinstance(message.content, str):
            return [{"role": "user", "content": message.content}]
        return [{"role": "user", "content": [_input_part(b) for b in message.content]}]

    # -- mapping: Responses -> ours ----------------------------------------------------------

    def parse_response(self, response: Any, output_schema: type[Schema] | None) -> Completion:
        """A ``Response`` from the SDK as a :class:`Completion`."""
        draft = Draft(model=getattr(response, "model", None) or self.model)
        for item in getattr(response, "output", None) or []:
            kind = getattr(item, "type", None)
            if kind == "reasoning":
                draft.reasoning.append(self._reasoning(item))
            elif kind == "message":
                for part in getattr(item, "content", None) or []:
                    if part.type == "output_text":
                        draft.text.append(part.text)
                    elif part.type == "refusal":
                        draft.text.append(part.refusal)
            elif kind == "function_call":
                draft.calls.append(
                    ToolCall(id=item.call_id, name=item.name, args=loads_args(item.arguments))
                )
        if getattr(response, "usage", None) is not None:
            draft.usage = _usage(response.usage)
        if getattr(response, "status", None) == "incomplete":
            details = getattr(response, "incomplete_details", None)
            reason = getattr(details, "reason", None) or "incomplete"
            draft.stop_reason = _INCOMPLETE.get(reason, reason)
        else:
            draft.stop_reason = "tool_use" if draft.calls else "end_turn"
        return draft.finish(output_schema)

    def _reasoning(self, item: Any) -> Reasoning:
        summary = [s.text for s in getattr(item, "summary", None) or []]
        if not summary:  # models that show the reasoning itself rather than a summary
            summary = [c.text for c in getattr(item, "content", None) or []]
        return Reasoning(
            provider=self.provider_name,
            text="\n\n".join(summary),
            redacted=getattr(item, "encrypted_content", None),
            id=getattr(item, "id", None),
        )


def _reasoning_item(reasoning: Reasoning) -> dict[str, Any]:
    """A kept reasoning item, sent back by its encrypted content (no id: nothing is stored)."""
    summary = [{"type": "summary_text", "text": reasoning.text}] if reasoning.text else []
    return {"type": "reasoning", "summary": summary, "encrypted_content": reasoning.redacted}


def _input_part(block: TextBlock | ImageBlock | FileBlock) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "input_text", "text": block.text}
    if isinstance(block, FileBlock):
        return _input_file(block)
    inline = image_bytes(block)
    url = f"data:{inline[0]};base64,{inline[1]}" if inline is not None else block.url
    return {"type": "input_image", "image_url": url, "detail": "auto"}


def _input_file(block: FileBlock) -> dict[str, Any]:
    """A file as ``input_audio`` (wav, mp3, inline) or ``input_file`` (data, URL or file id)."""
    if block.is_audio:
        found = AUDIO_FORMATS.get(block.media_type)
        if found is None:
            known = ", ".join(sorted(AUDIO_FORMATS))
            raise refuse_file(block, "OpenAI", f"its audio input takes {known}.")
        if block.data is None:
            raise refuse_file(block, "OpenAI", "it takes audio inline only; pass base64 `data=`.")
        return {"type": "input_audio", "input_audio": {"data": block.data, "format": found}}
    part: dict[str, Any] = {"type": "input_file"}
    if block.data is not None:
        part["file_data"] = f"data:{block.media_type};base64,{block.data}"
        part["filename"] = block.name or "file"
    elif block.file_id is not None:
        part["file_id"] = block.file_id
    else:
        part["file_url"] = block.url
    return part


def _usage(usage: Any) -> Usage:
    details = getattr(usage, "input_tokens_details", None)
    cached = (getattr(details, "cached_tokens", None) or 0) if details is not None else 0
    total_in = getattr(usage, "input_tokens", None) or 0
    return Usage(
        input_tokens=max(total_in - cached, 0),
        output_tokens=getattr(usage, "output_tokens", None) or 0,
        cache_read_tokens=cached,
    )
