"""The model turn, and the one structured-output repair loop.

:func:`model_turn` makes one model call: the middleware stack per provider, falling back on
retryable errors, and checks the reply against ``output_schema``. It returns the value that
is journaled for the turn, ``{"completion": ..., "repair": None | "what was wrong"}`` — a
reply that fails the schema is returned, not raised, so a resume replays the repair instead
of calling the model again.

:func:`structured_reply` is the validate-and-repair loop ``Llm`` and ``generate_structured``
run (the agent loop repairs inside its own iterations instead): each attempt one journaled
model turn under its own key, a failed attempt's errors sent back as the next user message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from tensorsketch._modelcall import call_provider
from tensorsketch.agents.output_modes import OutputMode, repair_hint, shape_request, take_answer
from tensorsketch.budget import current_budget
from tensorsketch.context import Context
from tensorsketch.effect_keys import part_name
from tensorsketch.effects import INSIDE
from tensorsketch.messages import Message, assistant, user
from tensorsketch.middleware import ModelHandler, ModelRequest, streamed_text
from tensorsketch.provider import (
    ChatProvider,
    Completion,
    StructuredOutputError,
    is_retryable,
    parse_structured,
)
from tensorsketch.schema import Schema

if TYPE_CHECKING:
    from pydantic import BaseModel

    from tensorsketch.tools import Tool

__all__ = ["call_model", "model_turn", "structured_reply", "sub_context"]

#: One attempt of a repair loop: ``attempt(index, messages) -> turn outcome``.
Attempt = Callable[[int, list[Message]], Awaitable[dict[str, Any]]]


def sub_context(ctx: Context, suffix: str) -> Context:
    """A context whose own journal keys are scoped under ``suffix`` (deterministic per call)."""
    return ctx.scoped(suffix)


async def call_model(request: ModelRequest) -> Completion:
    """The innermost model handler: the real provider call, under a ``model`` span."""
    provider = request.provider
    assert provider is not None
    return await call_provider(
        request.ctx,
        provider,
        request.messages,
        tools=request.tools or None,
        output_schema=request.output_schema,
        options=request.options,
    )


async def model_turn(
    ctx: Context,
    providers: Sequence[ChatProvider],
    handler: ModelHandler,
    messages: Sequence[Message],
    tools: Sequence[Tool],
    output_schema: type[Schema] | None,
    options: dict[str, Any],
    *,
    agent: str | None = None,
    mode: OutputMode = "auto",
) -> dict[str, Any]:
    """One model turn: the middleware stack per provider, falling back on retryable errors.

    Returns ``{"completion": ..., "repair": None | "what was wrong"}``, the value journaled
    for the turn. ``messages``, ``tools`` and ``options`` are copied into each request, so a
    middleware changing them changes that call only. ``mode`` says how an ``output_schema``
    answer is asked for (:mod:`tensorsketch.agents.output_modes`), per provider.
    """
    last = len(providers) - 1
    node = agent or ctx.node
    # Only a schema asked for in a mode of ours reshapes the request and the answer.
    shaped = output_schema is not None and mode != "auto"
    for index, provider in enumerate(providers):
        if shaped:
            sent, offered, schema = shape_request(
                mode, provider, list(messages), list(tools), output_schema
            )
        else:
            sent, offered, schema = list(messages), list(tools), output_schema
        request = ModelRequest(
            messages=sent,
            tools=offered,
            output_schema=schema,
            options=dict(options),
            ctx=ctx,
            node=node,
            provider=provider,
            fallback_index=index,
        )
        try:
            completion = await handler(request)
        except StructuredOutputError as exc:
            return rejected(exc, provider, mode)
        except Exception as exc:
            if index == last or streamed_text(exc) or not is_retryable(exc):
                raise
            await ctx.emit(
                "fallback",
                {
                    "from": provider.model,
                    "to": providers[index + 1].model,
                    "error": str(exc) or type(exc).__name__,
                    "error_type": type(exc).__name__,
                },
            )
            continue
        if shaped:
            completion = take_answer(mode, completion, output_schema)
        return accepted(completion, output_schema, mode)
    msg = "model_turn() needs at least one provider."
    raise ValueError(msg)


def accepted(
    completion: Completion, output_schema: type[BaseModel] | None, mode: OutputMode = "auto"
) -> dict[str, Any]:
    """The outcome of a reply: parsed into ``output_schema`` when it is a final answer."""
    if (
        output_schema is not None
        and completion.parsed is None
        and not completion.message.tool_calls
    ):
        try:
            parsed = parse_structured(completion.message.text, output_schema, completion=completion)
        except StructuredOutputError as exc:
            return {"completion": completion, "repair": repair_text(exc, mode)}
        completion = completion.model_copy(update={"parsed": parsed})
    return {"completion": completion, "repair": None}


def rejected(
    exc: StructuredOutputError, provider: ChatProvider, mode: OutputMode = "auto"
) -> dict[str, Any]:
    """The outcome of a reply the provider itself found not to match the schema."""
    failed = exc.completion
    if failed is None:
        failed = Completion(message=assistant(exc.raw), model=provider.model)
    return {"completion": failed, "repair": repair_text(exc, mode)}


def repair_text(exc: StructuredOutputError, mode: OutputMode = "auto") -> str:
    return f"{exc} {repair_hint(mode)}"


async def structured_reply(
    ctx: Context | None,
    provider: ChatProvider,
    messages: list[Message],
    output_schema: type[BaseModel] | None,
    options: dict[str, Any],
    *,
    tries: int,
    key: Callable[[int], str] | None = None,
    label: str = "llm",
    scope: str = "llm",
    handler: ModelHandler = call_model,
    mode: OutputMode = "auto",
) -> tuple[Completion, str | None]:
    """The repair loop: up to ``tries`` model turns until the reply validates.

    Each attempt's usage is charged to the current budget. Returns the last completion and,
    when even the last attempt failed, what was wrong with it (``None`` on success).

    :param ctx: the node's context: each attempt is then journaled under ``key(attempt)``
        (its journal entry named ``label``, its own keys under ``scope.<attempt>``) and
        traced; without it the provider is called
        directly — no journal, no span, no stream, no middleware.
    """
    if ctx is None:
        attempt = _direct(provider, output_schema, options, mode)
    else:
        assert key is not None
        attempt = _journaled(
            ctx, provider, handler, output_schema, options, key, label, scope, mode
        )
    sent = list(messages)
    outcome: dict[str, Any] = {}
    for index in range(tries):
        outcome = await attempt(index, list(sent))
        completion: Completion = outcome["completion"]
        budget = current_budget()
        if budget is not None:
            budget.charge(completion.usage, completion.model or provider.model)
        if not outcome["repair"]:
            return completion, None
        sent += [completion.message, user(outcome["repair"])]
    return outcome["completion"], outcome["repair"]


def _journaled(
    ctx: Context,
    provider: ChatProvider,
    handler: ModelHandler,
    output_schema: type[BaseModel] | None,
    options: dict[str, Any],
    key: Callable[[int], str],
    label: str,
    scope: str,
    mode: OutputMode,
) -> Attempt:
    schema: Any = output_schema

    async def attempt(index: int, sent: list[Message]) -> dict[str, Any]:
        actx = sub_context(ctx, part_name(scope, index))

        async def call() -> dict[str, Any]:
            return await model_turn(actx, [provider], handler, sent, [], schema, options, mode=mode)

        outcome: dict[str, Any] = await ctx.effects.once(key(index), call, INSIDE)
        return outcome

    return attempt


def _direct(
    provider: ChatProvider,
    output_schema: type[BaseModel] | None,
    options: dict[str, Any],
    mode: OutputMode,
) -> Attempt:
    wanted: Any = output_schema

    async def attempt(index: int, sent: list[Message]) -> dict[str, Any]:
        messages, tools, schema = shape_request(mode, provider, sent, [], wanted)
        try:
            completion = await provider.complete(
                messages, tools=tools or None, output_schema=schema, **options
            )
        except StructuredOutputError as exc:
            return rejected(exc, provider, mode)
        return accepted(take_answer(mode, completion, output_schema), output_schema, mode)

    return attempt
