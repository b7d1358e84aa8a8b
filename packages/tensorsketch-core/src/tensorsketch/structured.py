"""``generate_structured``: ask a model for a typed result, validating and repairing.

The model is asked for ``Schema`` (through the provider's structured-output support). When
the reply does not validate, the validation errors are sent back as the next user turn and
the model tries again, up to ``max_repairs`` times. With ``ctx``, every attempt is journaled
under its own key, so a resumed run replays the attempts already made instead of paying for
them twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from tensorsketch.chat import ChatProvider, Completion, StructuredOutputError
from tensorsketch.messages import Message, system, user

if TYPE_CHECKING:
    from tensorsketch.context import Context

__all__ = ["generate_structured"]

S = TypeVar("S", bound=BaseModel)


async def generate_structured(
    provider: ChatProvider,
    schema: type[S],
    prompt: str | Sequence[Message],
    ctx: Context | None = None,
    *,
    max_repairs: int = 2,
    system_prompt: str | None = None,
    max_tokens: int = 1024,
    **options: Any,
) -> S:
    """Return a validated ``schema`` instance for ``prompt``.

    :param prompt: the request text, or a whole conversation.
    :param ctx: the node's context; pass it to journal each attempt (durable and traced).
    :param max_repairs: how many times a reply that does not validate is sent back.
    :raises StructuredOutputError: when the last attempt still does not validate (its
        message lists the problems; ``.raw`` holds the model's last reply).
    """
    from tensorsketch.agents import _innermost_model, _sub_context, model_turn
    from tensorsketch.budget import current_budget

    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        msg = f"generate_structured() needs a Schema class, got {schema!r}."
        raise TypeError(msg)
    if not isinstance(provider, ChatProvider):
        msg = f"generate_structured() needs a ChatProvider, got {provider!r}."
        raise TypeError(msg)
    if not isinstance(max_repairs, int) or max_repairs < 0:
        msg = f"`max_repairs` must be an int >= 0, got {max_repairs!r}."
        raise ValueError(msg)
    if isinstance(prompt, str):
        messages: list[Message] = [user(prompt)]
    else:
        messages = list(prompt)
    if system_prompt:
        messages.insert(0, system(system_prompt))
    call_options = {"max_tokens": max_tokens, **options}
    base = ctx._next_key("generate_structured") if ctx is not None else None
    last: dict[str, Any] = {}
    for attempt in range(max_repairs + 1):
        sent = list(messages)
        if ctx is not None and base is not None:
            actx = _sub_context(ctx, f"structured.{attempt}")

            async def call(actx: Context = actx, sent: list[Message] = sent) -> dict[str, Any]:
                return await model_turn(
                    actx,
                    [provider],
                    _innermost_model,
                    sent,
                    [],
                    schema,  # type: ignore[arg-type]
                    call_options,
                )

            last = await ctx._run.journaled(f"{base}/{attempt}", "generate_structured", call, ctx)
        else:
            last = await _unjournaled(provider, sent, schema, call_options)
        completion: Completion = last["completion"]
        budget = current_budget()
        if budget is not None:
            budget.charge(completion.usage, completion.model or provider.model)
        if not last["repair"]:
            parsed = completion.parsed
            if isinstance(parsed, schema):
                return parsed
            return schema.model_validate(parsed)
        messages += [completion.message, user(last["repair"])]
    completion = last["completion"]
    msg = (
        f"the model's reply did not match {schema.__name__} after {max_repairs} "
        f"repair(s): {last['repair']}"
    )
    raise StructuredOutputError(msg, raw=completion.text, completion=completion)


async def _unjournaled(
    provider: ChatProvider,
    messages: list[Message],
    schema: type[BaseModel],
    options: dict[str, Any],
) -> dict[str, Any]:
    """One attempt outside any graph run (no journal, no span, no stream)."""
    from tensorsketch.agents import _repair_text
    from tensorsketch.chat import parse_structured

    try:
        completion = await provider.complete(messages, output_schema=schema, **options)  # type: ignore[arg-type]
    except StructuredOutputError as exc:
        failed = exc.completion or Completion(
            message=Message(role="assistant", content=exc.raw), model=provider.model
        )
        return {"completion": failed, "repair": _repair_text(exc)}
    if completion.parsed is None:
        try:
            parsed = parse_structured(completion.message.text, schema, completion=completion)
        except StructuredOutputError as exc:
            return {"completion": completion, "repair": _repair_text(exc)}
        completion = completion.model_copy(update={"parsed": parsed})
    return {"completion": completion, "repair": None}
