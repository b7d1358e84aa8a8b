"""``generate_structured``: ask a model for a typed result, validating and repairing.

The model is asked for ``Schema`` (through the provider's structured-output support). When
the reply does not validate, the validation errors are sent back as the next user turn and
the model tries again, up to ``max_repairs`` times. With ``ctx``, every attempt is journaled
under its own key, so a resumed run replays the attempts already made instead of paying for
them twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from tensorsketch.agents.output_modes import OutputMode, check_output_mode
from tensorsketch.agents.turn import structured_reply
from tensorsketch.context import Context
from tensorsketch.messages import Message, system, user
from tensorsketch.provider import ChatProvider, StructuredOutputError

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
    output_mode: OutputMode = "auto",
    **options: Any,
) -> S:
    """Return a validated ``schema`` instance for ``prompt``.

    :param prompt: the request text, or a whole conversation.
    :param ctx: the node's context; pass it to journal each attempt (durable and traced).
    :param max_repairs: how many times a reply that does not validate is sent back.
    :param output_mode: how the answer is asked for — ``"auto"``, ``"native"``, ``"tool"``
        or ``"prompted"`` (see the agents guide); each repairs the same way.
    :raises StructuredOutputError: when the last attempt still does not validate (its
        message lists the problems; ``.raw`` holds the model's last reply).
    """
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        msg = f"generate_structured() needs a Schema class, got {schema!r}."
        raise TypeError(msg)
    if not isinstance(provider, ChatProvider):
        msg = f"generate_structured() needs a ChatProvider, got {provider!r}."
        raise TypeError(msg)
    if not isinstance(max_repairs, int) or max_repairs < 0:
        msg = f"`max_repairs` must be an int >= 0, got {max_repairs!r}."
        raise ValueError(msg)
    mode = check_output_mode(output_mode, "generate_structured()")
    if isinstance(prompt, str):
        messages: list[Message] = [user(prompt)]
    else:
        messages = list(prompt)
    if system_prompt:
        messages.insert(0, system(system_prompt))
    base = ctx.next_key("generate_structured") if ctx is not None else ""
    completion, problem = await structured_reply(
        ctx,
        provider,
        messages,
        schema,
        {"max_tokens": max_tokens, **options},
        tries=max_repairs + 1,
        key=lambda attempt: f"{base}/{attempt}",
        label="generate_structured",
        scope="structured",
        mode=mode,
    )
    if problem is None:
        parsed = completion.parsed
        if isinstance(parsed, schema):
            return parsed
        return schema.model_validate(parsed)
    msg = (
        f"the model's reply did not match {schema.__name__} after {max_repairs} "
        f"repair(s): {problem}"
    )
    raise StructuredOutputError(msg, raw=completion.text, completion=completion)
