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
from tensorsketch.observability.tracing import (
    ATTR_COST_USD,
    ATTR_INPUT_TOKENS,
    ATTR_OUTPUT_TOKENS,
    ATTR_PROVIDER,
    ATTR_REQUEST_MODEL,
    ATTR_RESPONSE_MODEL,
    Span,
)
from tensorsketch.pricing import estimate_cost
from tensorsketch.provider import ChatProvider, Completion, ProviderError, TextDelta

if TYPE_CHECKING:
    from tensorsketch.context import Context
    from tensorsketch.messages import Message
    from tensorsketch.schema import Schema
    from tensorsketch.tools import Tool

__all__ = ["call_provider", "cap_text"]

#: Largest tool argument / result text put on a span.
SPAN_TEXT_LIMIT = 2000


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
    """Call ``provider`` once under a ``model`` span; stream text as ``token`` events when
    someone is consuming the run's stream."""
    traced = ctx.tracer.enabled
    attributes: dict[str, Any] = (
        {
            "gen_ai.operation.name": "chat",
            ATTR_PROVIDER: provider.provider_name,
            ATTR_REQUEST_MODEL: provider.model,
        }
        if traced
        else _NO_ATTRIBUTES
    )
    with ctx.span("model_call", kind="model", **attributes) as span:
        streamed = False
        try:
            if ctx.streaming:
                completion: Completion | None = None
                async for item in provider.stream(
                    messages, tools=tools, output_schema=output_schema, **options
                ):
                    if isinstance(item, TextDelta):
                        if item.text:
                            streamed = True
                            await ctx.emit("token", {"text": item.text})
                    elif isinstance(item, Completion):
                        completion = item
                if completion is None:
                    msg = (
                        f"{type(provider).__name__}.stream() ended without yielding a final "
                        "Completion; a stream must end with the whole reply."
                    )
                    raise ProviderError(msg, provider=provider.provider_name)
            else:
                completion = await provider.complete(
                    messages, tools=tools, output_schema=output_schema, **options
                )
        except BaseException as exc:
            if streamed:
                _mark_streamed(exc)
            raise
        if not isinstance(completion, Completion):
            msg = (
                f"{type(provider).__name__}.complete() returned {type(completion).__name__}; "
                "it must return a tensorsketch Completion."
            )
            raise TypeError(msg)
        if traced:
            _describe(span, provider, completion)
    return completion


_NO_ATTRIBUTES: dict[str, Any] = {}


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
