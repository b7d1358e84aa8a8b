"""The one place a provider is actually called: a ``model`` span and streamed token events.

Agents, ``Llm`` and ``generate_structured`` all end here, inside their journaled step, so a
call replayed from the journal opens no span and emits no tokens — the trace and the stream
show only what really ran.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tensorsketch.budget import current_budget
from tensorsketch.context import Context
from tensorsketch.messages import FileBlock, ImageBlock
from tensorsketch.observability.tracing import (
    ATTR_COST_USD,
    ATTR_INPUT_MESSAGES,
    ATTR_INPUT_TOKENS,
    ATTR_OUTPUT_MESSAGES,
    ATTR_OUTPUT_TOKENS,
    ATTR_PROVIDER,
    ATTR_REQUEST_MODEL,
    ATTR_RESPONSE_MODEL,
    ATTR_SYSTEM_INSTRUCTIONS,
    ATTR_TOOL_DEFINITIONS,
    Span,
)
from tensorsketch.pricing import estimate_cost
from tensorsketch.provider import (
    ChatProvider,
    Completion,
    ProviderError,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
)
from tensorsketch.schema import Schema

if TYPE_CHECKING:
    from tensorsketch.messages import ContentBlock, Message
    from tensorsketch.tools import Tool

__all__ = ["call_provider", "cap_text"]

#: Largest tool argument / result text put on a span.
SPAN_TEXT_LIMIT = 2000
#: Largest text of one message part in captured content (``capture_content``).
CONTENT_PART_LIMIT = 8000


def cap_text(value: Any, limit: int = SPAN_TEXT_LIMIT) -> str:
    """A span-sized rendering of a value (JSON when possible), cut at ``limit`` characters."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, sort_keys=True, default=str)
        except (TypeError, ValueError):
            text = str(value)
    if len(text) > limit:
        return text[:limit] + f"... [{len(text) - limit} more chars]"
    return text


def _mark_streamed(exc: BaseException) -> None:
    try:
        exc.__tensorsketch_streamed__ = True  # type: ignore[attr-defined]
    except AttributeError:  # pragma: no cover - exceptions with __slots__
        pass


async def call_provider(
    ctx: Context,
    provider: ChatProvider,
    messages: Sequence[Message],
    *,
    tools: Sequence[Tool] | None,
    output_schema: type[Schema] | None,
    options: dict[str, Any],
) -> Completion:
    """Call ``provider`` once under a ``model`` span; stream text as ``token`` events,
    tool-call argument fragments as ``tool_call_delta`` events and reasoning as
    ``reasoning_delta`` events when someone is consuming the run's stream."""
    traced = ctx.tracer.enabled
    content = traced and ctx.tracer.capture_content
    attributes: dict[str, Any] = (
        {
            "gen_ai.operation.name": "chat",
            ATTR_PROVIDER: provider.provider_name,
            ATTR_REQUEST_MODEL: provider.model,
        }
        if traced
        else _NO_ATTRIBUTES
    )
    if content:
        attributes.update(_request_content(messages, tools))
    with ctx.span("model_call", kind="model", **attributes) as span:
        if not ctx.streaming:
            completion = await provider.complete(
                messages, tools=tools, output_schema=output_schema, **options
            )
        elif type(provider).stream is ChatProvider.stream:
            # Only `complete`: its reply as one token event, no stream around it.
            completion = await _complete_as_stream(
                ctx, provider, messages, tools, output_schema, options
            )
        else:
            completion = await _stream_call(ctx, provider, messages, tools, output_schema, options)
        if not isinstance(completion, Completion):
            msg = (
                f"{type(provider).__name__}.complete() returned {type(completion).__name__}; "
                "it must return a tensorsketch Completion."
            )
            raise TypeError(msg)
        if traced:
            _describe(span, provider, completion)
            if content:
                span.set_attribute(ATTR_OUTPUT_MESSAGES, _json([_output_message(completion)]))
    return completion


_NO_ATTRIBUTES: dict[str, Any] = {}


async def _stream_call(
    ctx: Context,
    provider: ChatProvider,
    messages: Sequence[Message],
    tools: Sequence[Tool] | None,
    output_schema: type[Schema] | None,
    options: dict[str, Any],
) -> Completion:
    """The call as a stream, its deltas emitted as run events; an error after text was shown
    is marked as streamed (a retry would show the text twice). A provider that only
    implements ``complete`` goes to :func:`_complete_as_stream` instead.

    In a run whose sink takes no ``token`` event (a runner's: its followers read the stored
    events, which reach the store with the superstep's commit), consecutive text deltas are
    one ``token`` event, emitted when something else comes (a tool-call fragment, reasoning,
    the end, an error): the same text in the same place, one event where a long reply made
    hundreds, each built, numbered, encoded and stored."""
    joined: list[str] | None = None if ctx.streams("token") else []
    streamed = False
    completion: Completion | None = None
    try:
        async for item in provider.stream(
            messages, tools=tools, output_schema=output_schema, **options
        ):
            if isinstance(item, TextDelta):
                if item.text:
                    streamed = True
                    if joined is None:
                        await ctx.emit("token", {"text": item.text})
                    else:
                        joined.append(item.text)
                continue
            if joined:
                await ctx.emit("token", {"text": "".join(joined)})
                joined.clear()
            if isinstance(item, ToolCallDelta):
                await ctx.emit("tool_call_delta", _call_delta(item))
            elif isinstance(item, ReasoningDelta):
                if item.text:
                    await ctx.emit("reasoning_delta", {"text": item.text})
            elif isinstance(item, Completion):
                completion = item
    except BaseException as exc:
        if joined:  # the text shown before the error, as a delta each would have stored it
            await ctx.emit("token", {"text": "".join(joined)})
        if streamed:
            _mark_streamed(exc)
        raise
    if joined:
        await ctx.emit("token", {"text": "".join(joined)})
    if completion is None:
        msg = (
            f"{type(provider).__name__}.stream() ended without yielding a final "
            "Completion; a stream must end with the whole reply."
        )
        raise ProviderError(msg, provider=provider.provider_name)
    return completion


#: ``max_tokens`` as the default :meth:`ChatProvider.stream` passes it to ``complete``.
_STREAM_MAX_TOKENS: int = (ChatProvider.stream.__kwdefaults__ or {}).get("max_tokens", 1024)


async def _complete_as_stream(
    ctx: Context,
    provider: ChatProvider,
    messages: Sequence[Message],
    tools: Sequence[Tool] | None,
    output_schema: type[Schema] | None,
    options: dict[str, Any],
) -> Completion:
    """What the default :meth:`ChatProvider.stream` comes to — ``complete()``, then its text
    as one ``token`` event — without an async generator and a type check per item around it
    (a provider that only implements ``complete``: every scripted and test model)."""
    if "max_tokens" in options:
        completion = await provider.complete(
            messages, tools=tools, output_schema=output_schema, **options
        )
    else:  # the default stream passes its own default on (no copy of the options for it)
        completion = await provider.complete(
            messages,
            tools=tools,
            output_schema=output_schema,
            max_tokens=_STREAM_MAX_TOKENS,
            **options,
        )
    text = completion.message.text if isinstance(completion, Completion) else None
    if text:
        try:
            await ctx.emit("token", {"text": text})
        except BaseException as exc:
            _mark_streamed(exc)
            raise
    return completion


def _call_delta(item: ToolCallDelta) -> dict[str, Any]:
    """A ``tool_call_delta`` event's data: ``index`` groups one call's fragments; ``id`` and
    ``name`` come with its first fragment (``None`` after), ``arguments`` is a JSON fragment."""
    return {"index": item.index, "id": item.id, "name": item.name, "arguments": item.arguments}


def _describe(span: Span, provider: ChatProvider, completion: Completion) -> None:
    """The reply's model, token counts and estimated cost, on its ``model`` span."""
    model = completion.model or provider.model
    budget = current_budget()
    cost = estimate_cost(model, completion.usage, budget.prices if budget else None)
    span.set_attributes(
        **{
            ATTR_RESPONSE_MODEL: model,
            ATTR_INPUT_TOKENS: completion.usage.input_tokens,
            ATTR_OUTPUT_TOKENS: completion.usage.output_tokens,
            ATTR_COST_USD: cost,
            "gen_ai.usage.cache_read_tokens": completion.usage.cache_read_tokens,
            "gen_ai.usage.cache_write_tokens": completion.usage.cache_write_tokens,
        }
    )
    if completion.stop_reason is not None:
        span.set_attribute("gen_ai.response.finish_reasons", [completion.stop_reason])


# -- captured content, in the OpenTelemetry GenAI conventions' JSON shapes ------------------

#: Provider stop reasons and the conventions' ``finish_reason`` values.
_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "stop": "stop",
    "tool_use": "tool_call",
    "tool_calls": "tool_call",
    "max_tokens": "length",
    "length": "length",
    "content_filter": "content_filter",
    "refusal": "content_filter",
}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "content": cap_text(text, CONTENT_PART_LIMIT)}


def _block_parts(content: str | list[ContentBlock]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [_text_part(content)] if content else []
    parts: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, ImageBlock):
            if block.url is not None:
                part: dict[str, Any] = {"type": "uri", "modality": "image", "uri": block.url}
            else:  # inline bytes stay out of the trace (a generic part, not a "blob")
                part = {"type": "image", "modality": "image"}
            if block.media_type:
                part["mime_type"] = block.media_type
            parts.append(part)
        elif isinstance(block, FileBlock):  # like images: a URL is shown, bytes are not
            modality = "audio" if block.is_audio else "document"
            file_part: dict[str, Any] = {"type": "file", "modality": modality}
            if block.url is not None:
                file_part = {"type": "uri", "modality": modality, "uri": block.url}
            file_part["mime_type"] = block.media_type
            parts.append(file_part)
        else:
            parts.append(_text_part(block.text))
    return parts


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        response = message.content if isinstance(message.content, str) else message.text
        parts: list[dict[str, Any]] = [
            {
                "type": "tool_call_response",
                "id": message.tool_call_id,
                "response": cap_text(response, CONTENT_PART_LIMIT),
            }
        ]
    else:
        parts = [
            {"type": "reasoning", "content": cap_text(r.text, CONTENT_PART_LIMIT)}
            for r in message.reasoning
            if r.text
        ]
        parts += _block_parts(message.content)
        parts.extend(
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.args}
            for call in message.tool_calls
        )
    result: dict[str, Any] = {"role": message.role, "parts": parts}
    if message.role == "tool" and message.name:
        result["name"] = message.name
    return result


def _request_content(messages: Sequence[Message], tools: Sequence[Tool] | None) -> dict[str, str]:
    """``gen_ai.input.messages`` / ``system_instructions`` / ``tool.definitions`` as JSON."""
    instructions = [
        part for m in messages if m.role == "system" for part in _block_parts(m.content)
    ]
    result = {ATTR_INPUT_MESSAGES: _json([_message(m) for m in messages if m.role != "system"])}
    if instructions:
        result[ATTR_SYSTEM_INSTRUCTIONS] = _json(instructions)
    if tools:
        result[ATTR_TOOL_DEFINITIONS] = _json(
            [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.json_schema(),
                }
                for t in tools
            ]
        )
    return result


def _output_message(completion: Completion) -> dict[str, Any]:
    reply = _message(completion.message)
    reason = completion.stop_reason
    if reason is None:
        reason = "tool_call" if completion.message.tool_calls else "stop"
    reply["role"] = "assistant"
    reply["finish_reason"] = _FINISH_REASONS.get(reason, reason)
    return reply
