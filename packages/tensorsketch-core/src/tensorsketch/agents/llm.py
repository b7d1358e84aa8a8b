"""``Llm``: one model call as a node, with the structured-output repair loop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tensorsketch.agents.options import check_provider
from tensorsketch.agents.output_modes import OutputMode, check_output_mode
from tensorsketch.agents.ports import ports
from tensorsketch.agents.turn import call_model, structured_reply
from tensorsketch.context import Context
from tensorsketch.effect_keys import Scope, llm_attempt_key
from tensorsketch.messages import system, user
from tensorsketch.middleware import Middleware, _check, compose_model
from tensorsketch.node import Node
from tensorsketch.provider import ChatProvider, StructuredOutputError
from tensorsketch.schema import Schema

__all__ = ["Llm"]


class Llm(Node):
    """One model call as a node: read ``input_key``, write the reply to ``output_key``.

    With ``output_schema``, the reply is validated into that schema and the instance is
    written instead of the text (the state field must accept it); a reply that does not
    validate is sent back for repair up to ``max_repairs`` times. The call is journaled.
    ``output_mode`` says how the schema is asked for (``"auto"``, ``"native"``, ``"tool"``,
    ``"prompted"``; :mod:`tensorsketch.agents.output_modes`).
    """

    def __init__(
        self,
        provider: ChatProvider,
        *,
        system: str | None = None,
        input_key: str = "query",
        output_key: str = "output",
        output_schema: type[Schema] | None = None,
        output_mode: OutputMode = "auto",
        max_repairs: int = 2,
        middleware: Sequence[Middleware] = (),
        max_tokens: int = 1024,
        model_options: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        self.provider = check_provider(provider, "Llm(provider)")
        self.system = system
        self.input_key = input_key
        self.output_key = output_key
        self.output_schema = output_schema
        self.output_mode = check_output_mode(output_mode, "Llm")
        self.max_repairs = max_repairs
        self.middleware = list(middleware)
        _check(self.middleware)
        self.options: dict[str, Any] = {"max_tokens": max_tokens, **(model_options or {})}
        self.name = name or "Llm"
        out_type: Any = str if output_schema is None else output_schema
        in_model, out_model = ports("Llm", {input_key: (str, ...)}, {output_key: (out_type, ...)})
        object.__setattr__(self, "In", in_model)
        object.__setattr__(self, "Out", out_model)
        self._handler = compose_model(self.middleware, call_model)

    def default_name(self) -> str:
        return self.name

    async def run(self, ctx: Context, inp: Any) -> Any:
        prompt = getattr(inp, self.input_key)
        messages = [*([system(self.system)] if self.system else []), user(prompt)]
        scope = Scope.of(ctx)
        completion, problem = await structured_reply(
            ctx,
            self.provider,
            messages,
            self.output_schema,
            self.options,
            tries=self.max_repairs + 1 if self.output_schema else 1,
            key=lambda attempt: llm_attempt_key(scope, attempt),
            label="llm",
            scope="llm",
            handler=self._handler,
            mode=self.output_mode,
        )
        if problem is None:
            value = completion.parsed if self.output_schema is not None else completion.text
            return self.Out(**{self.output_key: value})
        msg = (
            f"{self.name}: the model's reply did not match {self.output_schema.__name__} "  # type: ignore[union-attr]
            f"after {self.max_repairs} repairs: {problem}"
        )
        raise StructuredOutputError(msg, raw=completion.text, completion=completion)
