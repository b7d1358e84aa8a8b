"""Middleware: wrap an agent's model calls and tool calls like an onion.

``middleware=[A, B]`` runs ``A`` outermost: ``A`` sees the request first and the result last.
Each layer gets the request and ``call_next`` (the rest of the stack, ending in the real call)
and may observe, modify, short-circuit or handle errors. The whole stack runs *inside* the
agent's journaled step, so on resume a recorded call is replayed without running any layer
again, and a call that succeeded after retries is journaled as that one success.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tensorsketch.budget import BudgetExceededError
from tensorsketch.context import Context
from tensorsketch.errors import ValidationError
from tensorsketch.provider import ChatProvider, Completion, ProviderError, RateLimitError
from tensorsketch.schema import Schema
from tensorsketch.suspension import Interrupt, RetryLater

if TYPE_CHECKING:
    from tensorsketch.messages import Message, ToolCall
    from tensorsketch.tools import Tool

__all__ = [
    "Middleware",
    "ModelHandler",
    "ModelRequest",
    "ObservabilityMiddleware",
    "RetryMiddleware",
    "ToolHandler",
    "ToolRequest",
    "compose_model",
    "compose_tool",
    "streamed_text",
]


@dataclass(slots=True)
class ModelRequest:
    """One model call about to be made. Mutate it before ``call_next`` to change the call.

    ``messages`` and ``tools`` are copies: changing them affects this call only, never the
    agent's transcript. ``options`` holds ``max_tokens`` and any provider options.
    """

    messages: list[Message]
    tools: list[Tool]
    output_schema: type[Schema] | None
    options: dict[str, Any]
    ctx: Context
    node: str
    #: The provider this call goes to (the primary, or a fallback).
    provider: ChatProvider | None = None
    #: Which attempt of the agent's model step this is (0 for the primary provider).
    fallback_index: int = 0


@dataclass(slots=True)
class ToolRequest:
    """One tool call about to run. ``call.args`` may be replaced before ``call_next``."""

    call: ToolCall
    tool: Tool
    ctx: Context
    node: str
    metadata: dict[str, Any] = field(default_factory=dict)


ModelHandler = Callable[[ModelRequest], Awaitable[Completion]]
ToolHandler = Callable[[ToolRequest], Awaitable[Any]]


class Middleware:
    """Base class: override :meth:`wrap_model`, :meth:`wrap_tool`, or both.

    The defaults pass straight through, so a subclass implements only what it needs.
    """

    async def wrap_model(self, request: ModelRequest, call_next: ModelHandler) -> Completion:
        """Wrap one model call; return the :class:`Completion`."""
        return await call_next(request)

    async def wrap_tool(self, request: ToolRequest, call_next: ToolHandler) -> Any:
        """Wrap one tool call; return the tool's result."""
        return await call_next(request)


def _check(middleware: Sequence[Middleware]) -> None:
    for item in middleware:
        if not isinstance(item, Middleware):
            msg = (
                f"middleware entries must be Middleware instances, got {item!r}; subclass "
                "`tensorsketch.Middleware` and pass an instance (note the parentheses)."
            )
            raise TypeError(msg)


def compose_model(middleware: Sequence[Middleware], innermost: ModelHandler) -> ModelHandler:
    """Build the onion around the real model call (first entry outermost)."""
    handler = innermost
    for item in reversed(middleware):
        handler = _bind_model(item, handler)
    return handler


def compose_tool(middleware: Sequence[Middleware], innermost: ToolHandler) -> ToolHandler:
    """Build the onion around the real tool call (first entry outermost)."""
    handler = innermost
    for item in reversed(middleware):
        handler = _bind_tool(item, handler)
    return handler


def _bind_model(item: Middleware, call_next: ModelHandler) -> ModelHandler:
    async def handler(request: ModelRequest) -> Completion:
        return await item.wrap_model(request, call_next)

    return handler


def _bind_tool(item: Middleware, call_next: ToolHandler) -> ToolHandler:
    async def handler(request: ToolRequest) -> Any:
        return await item.wrap_tool(request, call_next)

    return handler


def streamed_text(exc: BaseException) -> bool:
    """Whether a failed model call had already streamed text to the consumer.

    Such a call is never retried or switched to a fallback model: the consumer has seen part
    of an answer, and a second attempt would show a different one after it.
    """
    return bool(getattr(exc, "__tensorsketch_streamed__", False))


def _control_flow(exc: BaseException) -> bool:
    if isinstance(exc, Interrupt | RetryLater | BudgetExceededError | ValidationError):
        return True
    return isinstance(exc, ProviderError) and not exc.retryable


def _suspends(exc: BaseException) -> bool:
    return isinstance(exc, Interrupt | RetryLater)


class RetryMiddleware(Middleware):
    """Retry failed model and tool calls.

    :param attempts: tries in total (the first call plus ``attempts - 1`` retries).
    :param backoff: seconds before the first retry, doubling each time (``0`` to retry at
        once). A rate-limit error's ``retry_after`` is honoured when longer.
    :param retry_on: exception types worth retrying (default: any ``Exception``). Never
        retried whatever this says: a provider error marked not retryable (bad request,
        authentication), argument validation errors, suspensions, budget stops, and a model
        call that already streamed text.

    Each retry emits a ``retry`` event: ``{"target": "model"|"tool", "attempt", "error"}``.
    """

    def __init__(
        self,
        attempts: int = 3,
        backoff: float = 0.5,
        retry_on: tuple[type[BaseException], ...] = (Exception,),
        *,
        max_backoff: float = 30.0,
    ) -> None:
        if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
            msg = f"RetryMiddleware(attempts=...) must be an int >= 1, got {attempts!r}."
            raise ValueError(msg)
        if backoff < 0:
            msg = f"RetryMiddleware(backoff=...) must be >= 0 seconds, got {backoff!r}."
            raise ValueError(msg)
        if isinstance(retry_on, type):
            retry_on = (retry_on,)
        self.attempts = attempts
        self.backoff = backoff
        self.retry_on = tuple(retry_on)
        self.max_backoff = max_backoff

    def _delay(self, attempt: int, exc: BaseException) -> float:
        delay = min(self.backoff * (2 ** (attempt - 1)), self.max_backoff) if self.backoff else 0.0
        if isinstance(exc, RateLimitError) and exc.retry_after:
            delay = max(delay, min(exc.retry_after, self.max_backoff))
        return delay

    async def _run(self, target: str, ctx: Context, call: Callable[[], Awaitable[Any]]) -> Any:
        attempt = 1
        while True:
            try:
                return await call()
            except self.retry_on as exc:
                if attempt >= self.attempts or _control_flow(exc) or streamed_text(exc):
                    raise
                await ctx.emit(
                    "retry",
                    {"target": target, "attempt": attempt, "error": str(exc) or type(exc).__name__},
                )
                delay = self._delay(attempt, exc)
                if delay:
                    await asyncio.sleep(delay)
                attempt += 1

    async def wrap_model(self, request: ModelRequest, call_next: ModelHandler) -> Completion:
        result: Completion = await self._run("model", request.ctx, lambda: call_next(request))
        return result

    async def wrap_tool(self, request: ToolRequest, call_next: ToolHandler) -> Any:
        return await self._run("tool", request.ctx, lambda: call_next(request))


class ObservabilityMiddleware(Middleware):
    """Emit ``model_call`` / ``tool_call`` events (start, end, error) into the run's stream.

    A call that suspends the run (an interrupt inside a tool, ``RetryLater``) ends with
    ``phase="suspended"`` rather than ``error``.

    End events carry ``duration_ms`` (and token counts for model calls). It never changes a
    result, and costs nothing when nobody is streaming.
    """

    async def wrap_model(self, request: ModelRequest, call_next: ModelHandler) -> Completion:
        ctx = request.ctx
        if not ctx.streaming:
            return await call_next(request)
        model = request.provider.model if request.provider is not None else None
        await ctx.emit("model_call", {"phase": "start", "node": request.node, "model": model})
        started = time.perf_counter()
        try:
            completion = await call_next(request)
        except Exception as exc:
            await ctx.emit(
                "model_call",
                {
                    "phase": "suspended" if _suspends(exc) else "error",
                    "node": request.node,
                    "model": model,
                    "error": str(exc) or type(exc).__name__,
                    "error_type": type(exc).__name__,
                    "duration_ms": _ms(started),
                },
            )
            raise
        await ctx.emit(
            "model_call",
            {
                "phase": "end",
                "node": request.node,
                "model": completion.model or model,
                "duration_ms": _ms(started),
                "input_tokens": completion.usage.input_tokens,
                "output_tokens": completion.usage.output_tokens,
            },
        )
        return completion

    async def wrap_tool(self, request: ToolRequest, call_next: ToolHandler) -> Any:
        ctx = request.ctx
        if not ctx.streaming:
            return await call_next(request)
        name = request.tool.name
        await ctx.emit("tool_call", {"phase": "start", "tool": name, "call_id": request.call.id})
        started = time.perf_counter()
        try:
            result = await call_next(request)
        except Exception as exc:
            await ctx.emit(
                "tool_call",
                {
                    "phase": "suspended" if _suspends(exc) else "error",
                    "tool": name,
                    "call_id": request.call.id,
                    "error": str(exc) or type(exc).__name__,
                    "error_type": type(exc).__name__,
                    "duration_ms": _ms(started),
                },
            )
            raise
        await ctx.emit(
            "tool_call",
            {"phase": "end", "tool": name, "call_id": request.call.id, "duration_ms": _ms(started)},
        )
        return result


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000.0, 3)
