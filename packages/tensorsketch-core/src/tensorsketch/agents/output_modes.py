"""Output modes: how a model call obtains an answer in an ``output_schema``.

- ``native`` — the provider's own structured output (OpenAI's and Gemini's JSON-schema
  response formats); refused for a provider that does not declare ``strict_json``.
- ``tool`` — a ``final_result`` tool whose arguments are the answer, for any model that
  calls tools (an OpenAI-compatible server without JSON-schema support, a local model).
- ``prompted`` — the schema in the instructions and the JSON read from the reply's text, for
  any model at all.
- ``auto`` (the default) — the schema handed to the provider, which uses the best way its
  API has: the native format where it declares ``strict_json``, a forced answer tool on
  Anthropic, whatever a custom provider does with ``output_schema``.

Whatever the mode, the reply is validated the same way and one that does not fit goes
through the same repair loop (:mod:`tensorsketch.agents.turn`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args

from tensorsketch.messages import Message, system
from tensorsketch.provider import ChatProvider, Completion
from tensorsketch.tools import Tool

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["FINAL_TOOL", "OutputMode", "check_output_mode", "shape_request", "take_answer"]

_S = TypeVar("_S", bound="BaseModel")

OutputMode = Literal["auto", "native", "tool", "prompted"]

_MODES: tuple[str, ...] = get_args(OutputMode)

#: The tool ``output_mode="tool"`` adds; its arguments are the answer.
FINAL_TOOL = "final_result"


def check_output_mode(mode: object, where: str) -> OutputMode:
    """``mode`` when it is one of the modes, else a ``ValueError`` listing them."""
    if mode not in _MODES:
        listed = ", ".join(repr(m) for m in _MODES)
        msg = f"{where}: `output_mode` must be one of {listed}, got {mode!r}."
        raise ValueError(msg)
    return mode  # type: ignore[return-value]


def shape_request(
    mode: OutputMode,
    provider: ChatProvider,
    messages: list[Message],
    tools: list[Tool],
    schema: type[_S] | None,
) -> tuple[list[Message], list[Tool], type[_S] | None]:
    """The messages, tools and schema one call sends to ``provider`` in ``mode``."""
    if schema is None or mode == "auto":
        return messages, tools, schema
    if mode == "native":
        if not provider.capabilities.strict_json:
            msg = (
                f"output_mode='native' needs a provider with structured output "
                f"(capabilities.strict_json), and {provider!r} has none; use output_mode="
                "'tool' (any model that calls tools) or 'prompted' (any model)."
            )
            raise ValueError(msg)
        return messages, tools, schema
    if mode == "tool":
        if any(t.name == FINAL_TOOL for t in tools):
            msg = (
                f"output_mode='tool' adds a tool named {FINAL_TOOL!r}, and the agent already "
                "has one; rename that tool or pick another output_mode."
            )
            raise ValueError(msg)
        return messages, [*tools, _final_tool(schema)], None
    return _with_instructions(messages, schema), tools, None


def take_answer(
    mode: OutputMode, completion: Completion, schema: type[BaseModel] | None
) -> Completion:
    """The reply with a ``final_result`` call made into the answer's text (``tool`` mode):
    the answer ends the turn, and the transcript keeps no call without a result."""
    if mode != "tool" or schema is None:
        return completion
    final = next((c for c in completion.message.tool_calls if c.name == FINAL_TOOL), None)
    if final is None:
        return completion
    text = json.dumps(final.args, ensure_ascii=False)
    message = completion.message.model_copy(update={"content": text, "tool_calls": []})
    return completion.model_copy(update={"message": message})


def repair_hint(mode: OutputMode) -> str:
    """What a repair message asks for in ``mode``."""
    if mode == "tool":
        return f"Call the {FINAL_TOOL} tool with the corrected answer."
    return "Reply with only the corrected JSON."


def _final_tool(schema: type[BaseModel]) -> Tool:
    def unused(args: dict[str, Any]) -> None:  # the loop takes the call; it never runs
        return None

    return Tool.from_schema(
        FINAL_TOOL,
        "Give your final answer by calling this tool; its arguments are the answer.",
        schema.model_json_schema(),
        unused,
    )


def _with_instructions(messages: Sequence[Message], schema: type[BaseModel]) -> list[Message]:
    """``messages`` with a system message asking for JSON in ``schema`` after the leading
    system messages."""
    spec = json.dumps(schema.model_json_schema(), sort_keys=True, separators=(",", ":"))
    ask = system(
        f"Answer with only a JSON object (no prose, no code fence) matching this JSON schema "
        f"({schema.__name__}): {spec}"
    )
    head = 0
    while head < len(messages) and messages[head].role == "system":
        head += 1
    return [*messages[:head], ask, *messages[head:]]
