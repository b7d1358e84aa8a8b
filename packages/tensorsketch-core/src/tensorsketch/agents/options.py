"""The options :class:`Agent` and :func:`create_agent` share, defined once.

:class:`AgentOptions` is what a caller may pass (the keyword arguments, for type checkers);
:class:`AgentSettings` is the same set with its defaults, checked once when the agent is
built. A test keeps the two in step.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypedDict

import pydantic

from tensorsketch.agents.context import ContextPolicy
from tensorsketch.agents.output_modes import OutputMode, check_output_mode
from tensorsketch.budget import Budget
from tensorsketch.context import Context
from tensorsketch.errors import DepsUnavailableError
from tensorsketch.guardrails import Guardrail, check_guardrails
from tensorsketch.middleware import Middleware, _check
from tensorsketch.pricing import PriceTable
from tensorsketch.provider import ChatProvider
from tensorsketch.schema import Schema
from tensorsketch.tools import Tool
from tensorsketch.toolsets import Toolset

__all__ = ["AgentOptions", "AgentSettings", "as_tools", "check_deps", "check_provider"]


class AgentOptions(TypedDict, total=False):
    """The keyword options of :class:`Agent` and :func:`create_agent`.

    :ivar system: the system prompt (the transcript's first message).
    :ivar max_iterations: at most this many model calls per run (default 10); when reached,
        the agent returns the latest assistant text with ``status="max_iterations"``.
    :ivar middleware: wraps every model and tool call (first entry outermost).
    :ivar max_total_tokens: the run's token budget, sub-agents included; when spent the
        agent stops with ``status="budget_exceeded"``.
    :ivar max_cost_usd: the run's budget in US dollars, counted the same way.
    :ivar prices: a price table laid over ``DEFAULT_PRICES`` for cost accounting.
    :ivar fallbacks: providers tried in order when a call fails with a retryable error
        (rate limit, server error, timeout, connection) — never after text was streamed, and
        every turn starts again from the primary provider.
    :ivar tool_concurrency: most tool calls of one turn running at once (``None``: all).
    :ivar tool_timeout: seconds a tool call may take; a slow call becomes an error result.
    :ivar output_schema: validate the final answer into this schema (``state.parsed``); a
        reply that does not validate is sent back for repair (it counts as an iteration).
    :ivar output_mode: how an ``output_schema`` answer is asked for: ``"auto"`` (the
        provider's own way), ``"native"`` (the provider's structured output, refused where
        it has none), ``"tool"`` (a ``final_result`` tool) or ``"prompted"`` (the schema in
        the instructions, the JSON read from the text); the repair loop works in each.
    :ivar name: the agent's node name (default ``"agent"``).
    :ivar max_tokens: the reply limit of each model call (default 1024).
    :ivar model_options: further provider options sent with every model call.
    :ivar context_policy: keep each request under a token budget (:class:`ContextPolicy`):
        the oldest tool exchanges are dropped, optionally summarized; the transcript keeps all.
    :ivar deps_type: the type of the dependencies the agent's tools and middleware read as
        ``ctx.deps``: every run checks ``invoke(..., deps=...)`` is one before any model call.
    :ivar stuck_after: stop the run with ``status="stuck"`` when the model asks for the same
        tool calls (same names and arguments) this many times in a row, or repeats a cycle
        of up to three such turns this many times (default 3); the repeated call is not run
        again and ``stop_detail`` names it. ``None`` turns the check off (an agent that
        polls a tool on purpose).
    :ivar guardrails: checks on the input, the final answer and each turn's tool calls
        (:mod:`tensorsketch.guardrails`); one that trips stops the run with
        ``status="tripped"`` and ``state.tripwire`` saying which and why.
    :ivar handoffs: agents this one may hand the conversation to (agents, ``create_agent``
        graphs, or :func:`~tensorsketch.agents.handoff` for a filter, a tool name or an
        approval): the model gets a ``transfer_to_<name>`` tool for each, and the receiver
        carries on with the transcript under its own instructions and tools.
    """

    system: str | None
    max_iterations: int
    middleware: Sequence[Middleware]
    max_total_tokens: int | None
    max_cost_usd: float | None
    prices: PriceTable | None
    fallbacks: Sequence[ChatProvider]
    tool_concurrency: int | None
    tool_timeout: float | None
    output_schema: type[Schema] | None
    output_mode: OutputMode
    name: str
    max_tokens: int
    model_options: Mapping[str, Any] | None
    context_policy: ContextPolicy | None
    deps_type: type | None
    stuck_after: int | None
    guardrails: Sequence[Guardrail]
    handoffs: Sequence[Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentSettings:
    """:class:`AgentOptions` with every default filled in, validated."""

    system: str | None = None
    max_iterations: int = 10
    middleware: Sequence[Middleware] = ()
    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    prices: PriceTable | None = None
    fallbacks: Sequence[ChatProvider] = ()
    tool_concurrency: int | None = None
    tool_timeout: float | None = None
    output_schema: type[Schema] | None = None
    output_mode: OutputMode = "auto"
    name: str = "agent"
    max_tokens: int = 1024
    model_options: Mapping[str, Any] | None = field(default=None)
    context_policy: ContextPolicy | None = None
    deps_type: type | None = None
    stuck_after: int | None = 3
    guardrails: Sequence[Guardrail] = ()
    handoffs: Sequence[Any] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.max_iterations, int) or self.max_iterations < 1:
            msg = f"`max_iterations` must be an int >= 1, got {self.max_iterations!r}."
            raise ValueError(msg)
        stuck = self.stuck_after
        if stuck is not None and (type(stuck) is not int or stuck < 2):
            msg = (
                "`stuck_after` must be an int >= 2 (the same tool calls asked for this many "
                f"times in a row stop the run) or None to turn the check off, got {stuck!r}."
            )
            raise ValueError(msg)
        if self.tool_concurrency is not None and self.tool_concurrency < 1:
            msg = (
                "`tool_concurrency` must be >= 1 (or None for no cap), got "
                f"{self.tool_concurrency!r}."
            )
            raise ValueError(msg)
        if self.tool_timeout is not None and not self.tool_timeout > 0:
            msg = f"`tool_timeout` must be a positive number of seconds, got {self.tool_timeout!r}."
            raise ValueError(msg)
        schema = self.output_schema
        if schema is not None and not (
            isinstance(schema, type) and issubclass(schema, pydantic.BaseModel)
        ):
            msg = f"`output_schema` must be a Schema class, got {schema!r}."
            raise TypeError(msg)
        check_output_mode(self.output_mode, "Agent")
        policy = self.context_policy
        if policy is not None and not isinstance(policy, ContextPolicy):
            msg = f"`context_policy` must be a ContextPolicy(budget_tokens=...), got {policy!r}."
            raise TypeError(msg)
        if self.deps_type is not None and not isinstance(self.deps_type, type):
            msg = (
                f"`deps_type` must be a class (the type of `invoke(..., deps=...)`), got "
                f"{self.deps_type!r}."
            )
            raise TypeError(msg)
        object.__setattr__(self, "guardrails", check_guardrails(self.guardrails))
        middleware = list(self.middleware)
        _check(middleware)
        object.__setattr__(self, "middleware", middleware)
        fallbacks = [check_provider(p, "Agent(fallbacks=[...])") for p in self.fallbacks]
        object.__setattr__(self, "fallbacks", fallbacks)
        # The limits are checked now rather than at the first run.
        Budget(
            max_total_tokens=self.max_total_tokens,
            max_cost_usd=self.max_cost_usd,
            prices=self.prices,
        )

    @classmethod
    def of(cls, where: str, options: Mapping[str, Any]) -> AgentSettings:
        """Settings from keyword options; an unknown option is a ``TypeError`` naming it."""
        unknown = [key for key in options if key not in _NAMES]
        if unknown:
            key = unknown[0]
            close = difflib.get_close_matches(key, _NAMES, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            msg = f"{where} got an unexpected keyword argument {key!r}{hint}."
            raise TypeError(msg)
        return cls(**options)

    def model_call_options(self) -> dict[str, Any]:
        """What every model call is sent besides the transcript: ``max_tokens`` and the rest."""
        return {"max_tokens": self.max_tokens, **(self.model_options or {})}


_NAMES: tuple[str, ...] = tuple(f.name for f in fields(AgentSettings))


def check_deps(ctx: Context, deps_type: type, agent: str) -> None:
    """Refuse a run whose ``deps`` are missing or not a ``deps_type``, naming both."""
    try:
        deps = ctx.deps
    except DepsUnavailableError as exc:
        msg = (
            f"agent {agent!r} was built with deps_type={deps_type.__qualname__} and cannot "
            f"run without them — {exc}"
        )
        raise DepsUnavailableError(msg) from None
    if not isinstance(deps, deps_type):
        msg = (
            f"agent {agent!r} was built with deps_type={deps_type.__qualname__}, but this run "
            f"got {type(deps).__qualname__}; pass `invoke(..., deps={deps_type.__qualname__}"
            "(...))`."
        )
        raise TypeError(msg)


def check_provider(provider: Any, where: str) -> ChatProvider:
    if not isinstance(provider, ChatProvider):
        msg = (
            f"{where} needs a ChatProvider (FakeProvider(...), AnthropicProvider(...), "
            f"create_provider(name, ...)), got {provider!r}."
        )
        raise TypeError(msg)
    return provider


def as_tools(tools: Iterable[Tool | Callable[..., Any] | Toolset]) -> list[Tool]:
    """``@tool`` objects (plain functions are wrapped, toolsets flattened), their names
    checked to be unique."""
    result: list[Tool] = []
    seen: dict[str, Tool] = {}
    flat: list[Tool | Callable[..., Any]] = []
    for item in tools:
        flat.extend(item.tools if isinstance(item, Toolset) else [item])
    for item in flat:
        if isinstance(item, Tool):
            made = item
        elif callable(item):
            made = Tool.from_function(item)
        else:
            msg = f"tools must be @tool functions (or plain functions), got {item!r}."
            raise TypeError(msg)
        if made.name in seen:
            msg = (
                f"two tools are named {made.name!r}; tool names must be unique within an "
                "agent — rename one with `@tool(name=...)`."
            )
            raise ValueError(msg)
        seen[made.name] = made
        result.append(made)
    return result
