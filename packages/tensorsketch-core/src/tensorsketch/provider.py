"""The provider seam: ``ChatProvider``, what it returns, and the errors it raises.

The core depends on no model SDK. A provider maps TensorSketch messages and tools to one API
and maps the reply back to a :class:`Completion`. Everything above this seam — agents,
structured output, middleware, fallbacks, budgets — is written against it alone.

Provider errors carry ``retryable`` so the retry and fallback machinery can decide without
knowing any vendor::

    ProviderError (TensorSketchError, RuntimeError)
    ├── RateLimitError            429; retryable; ``retry_after`` seconds when the API said
    ├── ProviderServerError       5xx / overloaded; retryable
    ├── ProviderTimeoutError      (also TimeoutError); retryable
    ├── ProviderConnectionError   (also ConnectionError); retryable
    ├── AuthenticationError       401/403; not retryable
    └── BadRequestError           400/404/422, context too long...; not retryable
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic
from pydantic import BaseModel, ConfigDict

from tensorsketch.errors import TensorSketchError, ValidationError
from tensorsketch.messages import Message
from tensorsketch.schema import Schema

if TYPE_CHECKING:
    from tensorsketch.tools import Tool

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "Capabilities",
    "ChatProvider",
    "Completion",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderServerError",
    "ProviderTimeoutError",
    "RateLimitError",
    "ReasoningDelta",
    "StreamDelta",
    "StructuredOutputError",
    "TextDelta",
    "ToolCallDelta",
    "Usage",
    "is_retryable",
    "parse_structured",
]

S = TypeVar("S", bound=BaseModel)


class Usage(BaseModel):
    """Token counts of one model call (or a sum of several: ``a + b``).

    ``cache_write_1h_tokens`` is the part of ``cache_write_tokens`` written to a one-hour
    cache (Anthropic bills it at a higher rate than the five-minute one).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Every token billed: input (incl. cache reads and writes) plus output."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )

    def _counts(self) -> bool:
        """Whether any count is non-zero."""
        return bool(
            self.input_tokens
            or self.output_tokens
            or self.cache_read_tokens
            or self.cache_write_tokens
        )

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        # Usage is frozen, so adding nothing may hand back the other side itself.
        if not other._counts():
            return self
        if not self._counts():
            return other
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            cache_write_1h_tokens=self.cache_write_1h_tokens + other.cache_write_1h_tokens,
        )


class Completion(BaseModel):
    """One model reply.

    :ivar message: the assistant message (may carry ``tool_calls``).
    :ivar parsed: the validated ``output_schema`` instance, when one was requested.
    :ivar usage: token counts; :param model: the model id the API reported.
    :ivar stop_reason: why the model stopped (``end_turn``, ``tool_use``, ``max_tokens``...).
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    message: Message
    parsed: Any = None
    usage: Usage = Usage()
    model: str | None = None
    stop_reason: str | None = None

    @property
    def text(self) -> str:
        """The reply's text."""
        return self.message.text


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A chunk of the reply's text, as it streams."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A chunk of a tool call: ``index`` groups the chunks of one call; ``arguments`` is a
    fragment of its JSON arguments (``id``/``name`` arrive on the first chunk)."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """A chunk of the model's reasoning (thinking, or the vendor's summary of it), as it
    streams; the whole of it arrives in the final reply's ``message.reasoning``."""

    text: str


#: What :meth:`ChatProvider.stream` yields before the final :class:`Completion`.
StreamDelta = TextDelta | ToolCallDelta | ReasoningDelta


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a provider (model) supports, so callers can adapt instead of failing.

    :param tools: native tool calling; :param strict_json: schema-constrained JSON output;
    :param streaming: real token streaming; :param vision: image inputs.
    """

    tools: bool = True
    strict_json: bool = False
    streaming: bool = False
    vision: bool = False


class ChatProvider(ABC):
    """One model API behind one method. Subclass it and implement :meth:`complete`.

    ``model`` names the model for tracing and pricing; ``provider_name`` is the vendor's name
    (``gen_ai.provider.name``).
    """

    model: str | None = None
    provider_name: str = "custom"

    @abstractmethod
    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Tool] | None = None,
        output_schema: type[Schema] | None = None,
        max_tokens: int = 1024,
        **options: Any,
    ) -> Completion:
        """Send the conversation and return the reply.

        With ``output_schema``, the reply's ``parsed`` holds the validated instance; a reply
        that does not validate raises :class:`StructuredOutputError` (use
        :func:`parse_structured`), which ``generate_structured`` turns into a repair turn.
        Failures of the API itself raise a :class:`ProviderError` subclass.
        """

    async def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Tool] | None = None,
        output_schema: type[Schema] | None = None,
        max_tokens: int = 1024,
        **options: Any,
    ) -> AsyncIterator[StreamDelta | Completion]:
        """Yield text / tool-call deltas as they arrive, then the final :class:`Completion`.

        The default calls :meth:`complete` and yields its text as one delta; providers with
        real streaming override it.
        """
        completion = await self.complete(
            messages,
            tools=tools,
            output_schema=output_schema,
            max_tokens=max_tokens,
            **options,
        )
        if completion.message.text:
            yield TextDelta(completion.message.text)
        yield completion

    @property
    def capabilities(self) -> Capabilities:
        """What this provider supports (the default: tools, nothing else promised)."""
        return Capabilities()

    def __repr__(self) -> str:
        model = f"model={self.model!r}" if self.model else ""
        return f"{type(self).__name__}({model})"


# -- structured output ------------------------------------------------------------------------


class StructuredOutputError(ValidationError):
    """The model's reply did not validate as the requested ``output_schema``.

    ``raw`` is the reply text and ``completion`` the whole reply (for its usage), so a
    validate-and-repair loop can show the model what it sent and what was wrong.
    """

    def __init__(
        self,
        message: str,
        errors: list[dict[str, Any]] | None = None,
        *,
        raw: str = "",
        completion: Completion | None = None,
    ) -> None:
        super().__init__(message, errors)
        self.raw = raw
        self.completion = completion


def _strip_fences(text: str) -> str:
    body = text.strip()
    if body.startswith("```"):
        first_newline = body.find("\n")
        body = body[first_newline + 1 :] if first_newline != -1 else body[3:]
        if body.rstrip().endswith("```"):
            body = body.rstrip()[:-3]
    return body.strip()


def parse_structured(text: str, schema: type[S], *, completion: Completion | None = None) -> S:
    """Parse a reply's text as JSON and validate it into ``schema``.

    Tolerates a Markdown code fence around the JSON. Raises :class:`StructuredOutputError`
    with a message a model can act on. Providers call this for ``output_schema`` requests.
    """
    body = _strip_fences(text)
    try:
        data = json.loads(body)
    except ValueError as exc:
        msg = (
            f"the reply is not valid JSON ({exc}); answer with only a JSON object matching "
            f"the {schema.__name__} schema."
        )
        raise StructuredOutputError(msg, raw=text, completion=completion) from None
    try:
        return schema.model_validate(data)
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False)
        problems = []
        for err in errors:
            where = ".".join(str(p) for p in err["loc"]) or "(root)"
            problems.append(f"`{where}`: {err['msg']}")
        msg = (
            f"the reply does not match the {schema.__name__} schema: "
            + "; ".join(problems)
            + ". Answer again with a corrected JSON object."
        )
        raise StructuredOutputError(
            msg, [dict(e) for e in errors], raw=text, completion=completion
        ) from None


# -- errors -----------------------------------------------------------------------------------


class ProviderError(TensorSketchError, RuntimeError):
    """A model API call failed. ``retryable`` says whether trying again may help.

    :param status_code: the HTTP status, when there was one.
    :param provider: the provider's name; :param model: the model asked for.
    """

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        provider: str | None = None,
        model: str | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.provider = provider
        self.model = model
        if retryable is not None:
            self.retryable = retryable


class RateLimitError(ProviderError):
    """The API throttled the call (HTTP 429); ``retry_after`` is its hint in seconds."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any) -> None:
        kw.setdefault("status_code", 429)
        super().__init__(message, **kw)
        self.retry_after = retry_after


class ProviderServerError(ProviderError):
    """The API failed on its side (5xx, overloaded)."""

    retryable = True


class ProviderTimeoutError(ProviderError, TimeoutError):
    """The call took too long."""

    retryable = True


class ProviderConnectionError(ProviderError, ConnectionError):
    """The API could not be reached."""

    retryable = True


class AuthenticationError(ProviderError):
    """The credentials were missing, wrong or not allowed (401/403)."""

    retryable = False


class BadRequestError(ProviderError):
    """The API rejected the request itself (400/404/422); sending it again will not help."""

    retryable = False


def is_retryable(exc: BaseException) -> bool:
    """Whether a failure is worth retrying or falling back on (provider errors say so
    themselves; bare timeouts and connection errors count as retryable)."""
    if isinstance(exc, ProviderError):
        return exc.retryable
    return isinstance(exc, TimeoutError | ConnectionError)
