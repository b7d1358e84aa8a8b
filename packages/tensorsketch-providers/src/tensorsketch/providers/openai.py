"""``OpenAIProvider``: the Chat Completions API through the official ``openai`` SDK.

Chat Completions is the lingua franca of model servers, so ``base_url`` points this provider
at any compatible endpoint — vLLM, Ollama, llama.cpp, LM Studio, Together, Groq, OpenRouter —
and everything else (tools, streaming, structured output) works the same.

Mapping notes:

* Structured output uses ``response_format: {"type": "json_schema", "strict": true}`` with the
  schema rewritten for strict mode (every object closed, every property required); a schema
  strict mode cannot express (a free-form mapping) is sent without ``strict``.
* Streaming asks for ``stream_options: {"include_usage": true}`` so the final chunk carries the
  token counts; tool-call fragments are assembled by their ``index``.
* Images in a tool's result (Chat Completions tool messages are text-only) are sent in a user
  message right after the tool results.
* Reasoning: OpenAI's own models return none here (``OpenAIResponsesProvider`` keeps it);
  compatible servers that return it as ``reasoning_content`` (vLLM, DeepSeek) or ``reasoning``
  (Ollama, OpenRouter) have it kept as the message's ``reasoning`` and streamed as reasoning
  deltas. It is not sent back: Chat Completions has no field for it.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

from tensorsketch.messages import FileBlock, ImageBlock, Message, Reasoning, TextBlock, ToolCall
from tensorsketch.provider import (
    AuthenticationError,
    Capabilities,
    Completion,
    ReasoningDelta,
    StreamDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from tensorsketch.providers._base import SDKProvider, WholeReply
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
from tensorsketch.schema import Schema
from tensorsketch.tools import Tool

__all__ = ["OpenAIProvider"]

_sdk = import_sdk("openai", "openai")

_FINISH = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filter",
}
_SCHEMA_NAME = re.compile(r"[^a-zA-Z0-9_-]")
_PLACEHOLDER_KEY = "not-needed"


class OpenAIProvider(SDKProvider):
    """OpenAI models, or any server speaking Chat Completions via ``base_url``.

    :param model: the model id (``"gpt-4o"``; for a local server, the name it serves).
    :param api_key: defaults to ``OPENAI_API_KEY``; a ``base_url`` server that needs no key
        works without one.
    :param base_url: an OpenAI-compatible endpoint, e.g. ``"http://localhost:11434/v1"``.
    :param client: a ready ``openai.AsyncOpenAI`` to use instead of building one.
    :param max_retries: retries the SDK itself makes; set 0 when middleware retries.
    :param timeout: seconds per request.
    :param max_tokens_field: the request field for the output limit; older compatible servers
        only know ``"max_tokens"``.
    :param provider_name: the vendor name reported to tracing (``"vllm"``, ``"ollama"``, ...).
    """

    _NAME = "OpenAIProvider"
    _CAPABILITIES = Capabilities(tools=True, strict_json=True, streaming=True, vision=True)

    def __init__(
        self,
        model: str = "gpt-4o",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: Any = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens",
        provider_name: str = "openai",
    ) -> None:
        self._check_model(model)
        if max_tokens_field not in ("max_completion_tokens", "max_tokens"):
            msg = (
                "`max_tokens_field` must be 'max_completion_tokens' or 'max_tokens', got "
                f"{max_tokens_field!r}."
            )
            raise ValueError(msg)
        self.model = model
        self.provider_name = provider_name
        self.max_tokens_field = max_tokens_field
        if self._adopt_client(client, api_key=api_key, base_url=base_url):
            return
        if api_key is None and not os.environ.get("OPENAI_API_KEY"):
            if base_url is None:
                msg = (
                    "no OpenAI API key: set the `OPENAI_API_KEY` environment variable or pass "
                    "`OpenAIProvider(api_key=...)` (a local server needs only `base_url=`)."
                )
                raise AuthenticationError(msg, provider=provider_name, model=model)
            api_key = _PLACEHOLDER_KEY  # local servers ignore the key; the SDK insists on one
        self._client = _sdk.AsyncOpenAI(
            api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout
        )

    # -- calls ---------------------------------------------------------------------------------

    async def _send(self, request: dict[str, Any]) -> Any:
        return await self._create(**request)

    def _create(self, **request: Any) -> Any:
        """The Chat Completions call (the SDK's; a subclass may route it elsewhere)."""
        return self._client.chat.completions.create(**request)

    def _route(self, request: dict[str, Any], options: dict[str, Any]) -> None:
        """Add call options to ``request`` the way the SDK call takes them."""
        route_options(self._client.chat.completions.create, request, options)

    async def _stream(
        self, request: dict[str, Any], output_schema: type[Schema] | None
    ) -> AsyncIterator[StreamDelta | Completion]:
        request["stream"] = True
        request["stream_options"] = {"include_usage": True}
        draft = Draft(model=self.model)
        # vendor tool index -> [ordinal, id, name, argument fragments]
        calls: dict[int, list[Any]] = {}
        thoughts: list[str] = []
        finish: str | None = None
        opening = functools.partial(self._create, **request)
        async for chunk in self._events(opening):
            if isinstance(chunk, WholeReply):
                reply_type = _sdk.types.chat.ChatCompletion
                async for item in self._whole(chunk, reply_type, output_schema):
                    yield item
                return
            draft.model = getattr(chunk, "model", None) or draft.model
            if getattr(chunk, "usage", None) is not None:
                draft.usage = _usage(chunk.usage)
            for choice in chunk.choices or []:
                if choice.index not in (0, None):
                    continue
                if choice.delta is not None:
                    for item in _take_delta(choice.delta, draft, thoughts, calls):
                        yield item
                if choice.finish_reason:
                    finish = choice.finish_reason
        if finish is None:
            raise self._cut_off("chunk with a `finish_reason`")
        if thoughts:
            draft.reasoning.append(Reasoning(provider=self.provider_name, text="".join(thoughts)))
        for ordinal, call_id, name, fragments in sorted(calls.values(), key=lambda e: e[0]):
            draft.calls.append(
                ToolCall(
                    id=call_id or f"call_{ordinal}",
                    name=name or "",
                    args=loads_args("".join(fragments)),
                )
            )
        draft.stop_reason = _FINISH.get(finish or "", finish)
        yield draft.finish(output_schema)

    # -- mapping: ours -> Chat Completions ---------------------------------------------------

    def build_request(
        self,
        messages: Sequence[Message],
        tools: Sequence[Tool] | None,
        output_schema: type[Schema] | None,
        max_tokens: int,
        options: dict[str, Any],
    ) -> dict[str, Any]:
        """The keyword arguments for ``client.chat.completions.create``."""
        tool_list = check_tools(tools)
        wire: list[dict[str, Any]] = []
        pending_images: list[dict[str, Any]] = []
        for message in messages:
            if message.role != "tool" and pending_images:
                wire.append({"role": "user", "content": pending_images})
                pending_images = []
            wire.extend(_to_wire(message, pending_images))
        if pending_images:
            wire.append({"role": "user", "content": pending_images})
        request: dict[str, Any] = {
            "model": self.model,
            "messages": wire,
            self.max_tokens_field: max_tokens,
        }
        if tool_list:
            request["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.json_schema(),
                    },
                }
                for t in tool_list
            ]
        if output_schema is not None:
            schema, strict = strict_json_schema(output_json_schema(output_schema))
            json_schema: dict[str, Any] = {
                "name": _SCHEMA_NAME.sub("_", output_schema.__name__)[:64] or "output",
                "schema": schema,
                "strict": strict,
            }
            doc = (output_schema.__doc__ or "").strip()
            if doc:
                json_schema["description"] = doc
            request["response_format"] = {"type": "json_schema", "json_schema": json_schema}
        self._route(request, options)
        return request

    # -- mapping: Chat Completions -> ours ---------------------------------------------------

    def parse_response(self, response: Any, output_schema: type[Schema] | None) -> Completion:
        """A ``ChatCompletion`` from the SDK as a :class:`Completion`."""
        draft = Draft(model=getattr(response, "model", None) or self.model)
        if not response.choices:
            msg = f"{self.provider_name} model {self.model!r} returned no choices."
            self._reraise(_EmptyReply(msg))
        choice = response.choices[0]
        message = choice.message
        thought = _reasoning_text(message)
        if thought:
            draft.reasoning.append(Reasoning(provider=self.provider_name, text=thought))
        if message.content:
            draft.text.append(message.content)
        elif getattr(message, "refusal", None):
            draft.text.append(message.refusal)
        for index, call in enumerate(message.tool_calls or []):
            function = getattr(call, "function", None)
            if function is None:
                continue
            draft.calls.append(
                ToolCall(
                    id=call.id or f"call_{index}",
                    name=function.name,
                    args=loads_args(function.arguments or ""),
                )
            )
        if getattr(response, "usage", None) is not None:
            draft.usage = _usage(response.usage)
        finish = choice.finish_reason
        draft.stop_reason = _FINISH.get(finish or "", finish)
        return draft.finish(output_schema)


def _reasoning_text(delta_or_message: Any) -> str | None:
    """Reasoning a compatible server put beside the text (the SDK keeps unknown fields)."""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(delta_or_message, name, None)
        if isinstance(value, str) and value:
            return value
    return None


def _file(block: FileBlock) -> dict[str, Any]:
    """A file as an ``input_audio`` part (wav, mp3) or a ``file`` part (inline data or an
    uploaded file's id)."""
    if block.url is not None:
        raise refuse_file(
            block,
            "OpenAI Chat Completions",
            "it takes no file URLs; pass base64 `data=`, an uploaded file's `file_id=`, or use "
            "`OpenAIResponsesProvider`, which takes `url=`.",
        )
    if block.is_audio:
        if block.data is None:
            raise refuse_file(block, "OpenAI", "it takes audio inline only; pass base64 `data=`.")
        found = AUDIO_FORMATS.get(block.media_type)
        if found is None:
            known = ", ".join(sorted(AUDIO_FORMATS))
            raise refuse_file(block, "OpenAI", f"its audio input takes {known}.")
        return {"type": "input_audio", "input_audio": {"data": block.data, "format": found}}
    if block.file_id is not None:
        return {"type": "file", "file": {"file_id": block.file_id}}
    data_url = f"data:{block.media_type};base64,{block.data}"
    return {"type": "file", "file": {"filename": block.name or "file", "file_data": data_url}}


def _take_delta(
    delta: Any, draft: Draft, thoughts: list[str], calls: dict[int, list[Any]]
) -> list[StreamDelta]:
    """Add one chunk's delta to the reply being assembled; what it shows, in order."""
    shown: list[StreamDelta] = []
    thought = _reasoning_text(delta)
    if thought:
        thoughts.append(thought)
        shown.append(ReasoningDelta(thought))
    for text in (delta.content, getattr(delta, "refusal", None)):
        if text:
            draft.text.append(text)
            shown.append(TextDelta(text))
    for fragment in delta.tool_calls or []:
        call_delta = _take_fragment(calls, fragment)
        if call_delta is not None:
            shown.append(call_delta)
    return shown


def _take_fragment(calls: dict[int, list[Any]], fragment: Any) -> ToolCallDelta | None:
    """Add one streamed tool-call fragment to ``calls``; the delta to show for it, if any."""
    key = fragment.index if fragment.index is not None else len(calls)
    entry = calls.get(key)
    function = fragment.function
    name = getattr(function, "name", None)
    args = getattr(function, "arguments", None) or ""
    if entry is None:
        entry = [len(calls), fragment.id, name, []]
        calls[key] = entry
        first = True
    else:
        entry[1] = entry[1] or fragment.id
        entry[2] = entry[2] or name
        first = False
    entry[3].append(args)
    if not (first or args):
        return None
    return ToolCallDelta(
        index=entry[0],
        id=fragment.id if first else None,
        name=name if first else None,
        arguments=args,
    )


class _EmptyReply(Exception):
    status_code = 502


def _usage(usage: Any) -> Usage:
    details = getattr(usage, "prompt_tokens_details", None)
    cached = (getattr(details, "cached_tokens", None) or 0) if details is not None else 0
    prompt = getattr(usage, "prompt_tokens", None) or 0
    return Usage(
        input_tokens=max(prompt - cached, 0),
        output_tokens=getattr(usage, "completion_tokens", None) or 0,
        cache_read_tokens=cached,
    )


def _to_wire(message: Message, pending_images: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if message.role == "system":
        return [{"role": "system", "content": message.text}]
    if message.role == "tool":
        texts = [b.text for b in content_blocks(message) if isinstance(b, TextBlock)]
        pending_images.extend(_part(b) for b in message.images)
        return [{"role": "tool", "tool_call_id": message.tool_call_id, "content": "".join(texts)}]
    if message.role == "assistant":
        # Chat Completions takes a null content only next to tool calls.
        content = message.text or (None if message.tool_calls else "")
        wire: dict[str, Any] = {"role": "assistant", "content": content}
        if message.tool_calls:
            wire["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.args)},
                }
                for call in message.tool_calls
            ]
        return [wire]
    if isinstance(message.content, str):
        return [{"role": "user", "content": message.content}]
    return [{"role": "user", "content": [_part(b) for b in message.content]}]


#: Audio formats Chat Completions' ``input_audio`` takes, by media type.
AUDIO_FORMATS = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}


def _part(block: TextBlock | ImageBlock | FileBlock) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, FileBlock):
        return _file(block)
    inline = image_bytes(block)
    url = f"data:{inline[0]};base64,{inline[1]}" if inline is not None else block.url
    return {"type": "image_url", "image_url": {"url": url}}
