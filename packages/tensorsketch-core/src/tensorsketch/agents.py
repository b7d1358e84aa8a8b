"""Agents: the durable model-and-tools loop as one node, and the single-call ``Llm`` node.

:class:`Agent` calls the model; when the model asks for tools it runs them (in parallel, with
a concurrency cap and a per-tool timeout) and feeds the results back, until the model answers,
``max_iterations`` model calls were made, or the run's budget is spent. Every model call and
every tool call goes through the run's effect journal under an explicit, deterministic key
(superstep, node, iteration, call index), so after a crash at iteration *k* a resume replays
iterations ``0..k-1`` from the journal — no model call or tool side effect is repeated — and
continues from there.

:func:`create_agent` wraps one ``Agent`` in a normal compiled graph over :class:`AgentState`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

import pydantic
from pydantic import Field

from tensorsketch import interrupts as _interrupts
from tensorsketch._modelcall import call_provider, cap_text
from tensorsketch.budget import Budget, budget_scope, current_budget
from tensorsketch.channels import Reducer
from tensorsketch.chat import (
    ChatProvider,
    Completion,
    StructuredOutputError,
    Usage,
    is_retryable,
    parse_structured,
)
from tensorsketch.context import Context
from tensorsketch.interrupts import (
    Interrupt,
    PendingInterrupt,
    RetryLater,
    lookup_decision,
    parse_approval,
    peek_effect,
    record_effect,
)
from tensorsketch.messages import (
    Message,
    ToolCall,
    add_messages,
    assistant,
    render_result,
    system,
    tool_result,
    user,
)
from tensorsketch.middleware import (
    Middleware,
    ModelRequest,
    ToolRequest,
    _check,
    compose_model,
    compose_tool,
    streamed_text,
)
from tensorsketch.node import Node
from tensorsketch.observability.tracing import (
    ATTR_AGENT_NAME,
    ATTR_TOOL_ARGUMENTS,
    ATTR_TOOL_CALL_ID,
    ATTR_TOOL_NAME,
    ATTR_TOOL_RESULT,
    current_span,
)
from tensorsketch.schema import Schema
from tensorsketch.tools import Tool, _current_call

if TYPE_CHECKING:
    from tensorsketch.compiled import CompiledGraph
    from tensorsketch.pricing import PriceTable

__all__ = ["Agent", "AgentState", "AgentStatus", "Llm", "create_agent"]

AgentStatus = Literal["idle", "completed", "max_iterations", "budget_exceeded", "suspended"]


class AgentState(Schema):
    """The state of a :func:`create_agent` graph.

    :ivar query: the user's request (appended to ``messages`` as a user turn).
    :ivar messages: the transcript: system, user, assistant and tool messages.
    :ivar output: the final answer's text (the latest assistant text when a limit stopped
        the loop).
    :ivar parsed: the validated ``output_schema`` instance, when the agent has one.
    :ivar status: ``completed`` (the model answered), ``max_iterations`` or
        ``budget_exceeded`` (a limit stopped it; ``output`` is the best answer so far), or
        ``suspended`` (waiting on ``pending``: approvals, questions or a timer).
    :ivar iterations: model calls made by the last run of the loop.
    :ivar usage: tokens spent by the last run of the loop, sub-agents included.
    :ivar cost_usd: its estimated cost, ``None`` when a model used is not in the price table.
    :ivar stop_detail: why a limit stopped the loop, in words.
    """

    query: str = ""
    messages: Annotated[list[Message], Reducer(add_messages)] = Field(default_factory=list)
    output: str = ""
    parsed: Any = None
    status: AgentStatus = "idle"
    pending: list[PendingInterrupt] = Field(default_factory=list)
    iterations: int = 0
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    stop_detail: str = ""


_REPORT_FIELDS: dict[str, Any] = {
    "parsed": (Any, None),
    "status": (AgentStatus, "idle"),
    "pending": (list[PendingInterrupt], Field(default_factory=list)),
    "iterations": (int, 0),
    "usage": (Usage, Field(default_factory=Usage)),
    "cost_usd": (float | None, None),
    "stop_detail": (str, ""),
}


def _ports(
    owner: str, inputs: Mapping[str, Any], outputs: Mapping[str, Any]
) -> tuple[type[Schema], type[Schema]]:
    in_model = pydantic.create_model(f"{owner}In", __base__=Schema, **inputs)
    out_model = pydantic.create_model(f"{owner}Out", __base__=Schema, **outputs)
    return in_model, out_model


def _check_provider(provider: Any, where: str) -> ChatProvider:
    if not isinstance(provider, ChatProvider):
        msg = (
            f"{where} needs a ChatProvider (FakeProvider(...), AnthropicProvider(...), "
            f"create_provider(name, ...)), got {provider!r}."
        )
        raise TypeError(msg)
    return provider


def _as_tools(tools: Iterable[Tool | Callable[..., Any]]) -> list[Tool]:
    result: list[Tool] = []
    seen: dict[str, Tool] = {}
    for item in tools:
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


def _last_text(messages: Sequence[Message]) -> str:
    for message in reversed(messages):
        if message.role == "assistant" and message.text:
            return message.text
    return ""


def _sub_context(ctx: Context, suffix: str) -> Context:
    """A context whose own journal keys are scoped under ``suffix`` (deterministic per call)."""
    return Context(ctx._run, ctx.node, ctx.superstep, f"{ctx.instance}[{suffix}]")


class Agent(Node):
    """The model-and-tools loop as one durable node.

    :param provider: the model; ``fallbacks`` are tried in order when a call fails with a
        retryable error (rate limit, server error, timeout, connection) — never after text
        was streamed, and every turn starts again from ``provider``.
    :param tools: the tools the model may call.
    :param system: the system prompt (the transcript's first message).
    :param max_iterations: at most this many model calls per run; when reached, the agent
        returns the latest assistant text with ``status="max_iterations"``.
    :param middleware: wraps every model and tool call (first entry outermost).
    :param max_total_tokens: / :param max_cost_usd: the run's budget, sub-agents included;
        when spent the agent stops with ``status="budget_exceeded"``.
    :param prices: a price table laid over ``DEFAULT_PRICES`` for cost accounting.
    :param tool_concurrency: most tool calls of one turn running at once (``None``: all).
    :param tool_timeout: seconds a tool call may take; a slow call becomes an error result.
    :param output_schema: validate the final answer into this schema (``state.parsed``); a
        reply that does not validate is sent back for repair (it counts as an iteration).
    :param input_key: / :param output_key: the state fields holding the request and answer.
    :param report: also write ``status``, ``pending``, ``iterations``, ``usage``,
        ``cost_usd``, ``parsed`` and ``stop_detail`` (the state must have those fields, as
        :class:`AgentState` does; pass ``False`` for a leaner state).
    """

    def __init__(
        self,
        provider: ChatProvider,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        *,
        system: str | None = None,
        max_iterations: int = 10,
        middleware: Sequence[Middleware] = (),
        max_total_tokens: int | None = None,
        max_cost_usd: float | None = None,
        prices: PriceTable | None = None,
        fallbacks: Sequence[ChatProvider] = (),
        tool_concurrency: int | None = None,
        tool_timeout: float | None = None,
        output_schema: type[Schema] | None = None,
        name: str = "agent",
        input_key: str = "query",
        output_key: str = "output",
        max_tokens: int = 1024,
        model_options: Mapping[str, Any] | None = None,
        report: bool = True,
    ) -> None:
        self.provider = _check_provider(provider, "Agent(provider)")
        self.fallbacks = [_check_provider(p, "Agent(fallbacks=[...])") for p in fallbacks]
        self.tools = _as_tools(tools)
        self.tools_by_name = {t.name: t for t in self.tools}
        if not isinstance(max_iterations, int) or max_iterations < 1:
            msg = f"`max_iterations` must be an int >= 1, got {max_iterations!r}."
            raise ValueError(msg)
        if tool_concurrency is not None and tool_concurrency < 1:
            msg = f"`tool_concurrency` must be >= 1 (or None for no cap), got {tool_concurrency!r}."
            raise ValueError(msg)
        if tool_timeout is not None and not tool_timeout > 0:
            msg = f"`tool_timeout` must be a positive number of seconds, got {tool_timeout!r}."
            raise ValueError(msg)
        if output_schema is not None and not (
            isinstance(output_schema, type) and issubclass(output_schema, pydantic.BaseModel)
        ):
            msg = f"`output_schema` must be a Schema class, got {output_schema!r}."
            raise TypeError(msg)
        middleware = list(middleware)
        _check(middleware)
        # Validate the limits now rather than at the first run.
        Budget(max_total_tokens=max_total_tokens, max_cost_usd=max_cost_usd, prices=prices)
        self.system = system
        self.max_iterations = max_iterations
        self.middleware = middleware
        self.max_total_tokens = max_total_tokens
        self.max_cost_usd = max_cost_usd
        self.prices = prices
        self.tool_concurrency = tool_concurrency
        self.tool_timeout = tool_timeout
        self.output_schema = output_schema
        self.name = name
        self.input_key = input_key
        self.output_key = output_key
        self.report = report
        self.options: dict[str, Any] = {"max_tokens": max_tokens, **(model_options or {})}
        outputs: dict[str, Any] = {
            "messages": (list[Message], Field(default_factory=list)),
            output_key: (str, ""),
        }
        if report:
            outputs.update(_REPORT_FIELDS)
        in_model, out_model = _ports(
            "Agent",
            {
                input_key: (str, ""),
                "messages": (list[Message], Field(default_factory=list)),
            },
            outputs,
        )
        # Ports depend on the keys chosen, so they are per instance (the engine reads them).
        object.__setattr__(self, "In", in_model)
        object.__setattr__(self, "Out", out_model)
        self._model_handler = compose_model(self.middleware, _innermost_model)
        self._tool_handler = compose_tool(self.middleware, self._innermost_tool)

    def default_name(self) -> str:
        return self.name

    # -- the loop ---------------------------------------------------------------------------

    async def run(self, ctx: Context, inp: Any) -> Any:
        node_span = current_span.get()
        if node_span is not None:  # name the agent on its node span (OTel: `invoke_agent {name}`)
            node_span.set_attribute(ATTR_AGENT_NAME, self.name)
        history: list[Message] = list(getattr(inp, "messages", None) or [])
        query = getattr(inp, self.input_key, "") or ""
        new: list[Message] = []
        if self.system and not any(m.role == "system" for m in history):
            if history:
                history = [system(self.system), *history]
            else:
                new.append(system(self.system))
        last_user = next((m.text for m in reversed(history) if m.role == "user"), None)
        if query and query != last_user:
            new.append(user(query))
        transcript = [*history, *new]
        budget = Budget(
            max_total_tokens=self.max_total_tokens,
            max_cost_usd=self.max_cost_usd,
            prices=self.prices,
            parent=current_budget(),
        )
        base = f"{ctx.superstep}:{ctx.node}{ctx.instance}:agent"
        status: AgentStatus = "completed"
        detail = ""
        parsed: Any = None
        iterations = 0
        with budget_scope(budget):
            try:
                for k in range(self.max_iterations):
                    exceeded = budget.exceeded()
                    if exceeded is not None:
                        status, detail = "budget_exceeded", str(exceeded)
                        break
                    outcome = await self._model_step(ctx, transcript, k, f"{base}:{k}")
                    iterations = k + 1
                    completion: Completion = outcome["completion"]
                    budget.charge(completion.usage, completion.model or self.provider.model)
                    reply = _with_call_ids(completion.message, k)
                    repair = outcome.get("repair")
                    if repair:
                        for message in (reply, user(repair)):
                            transcript.append(message)
                            new.append(message)
                        if k + 1 == self.max_iterations:
                            status, detail = "max_iterations", f"stopped after {k + 1} calls"
                        continue
                    transcript.append(reply)
                    new.append(reply)
                    exceeded = budget.exceeded()
                    if exceeded is not None:
                        for call in reply.tool_calls:
                            skipped = tool_result(
                                call, "Not run: the run's budget is spent.", is_error=True
                            )
                            transcript.append(skipped)
                            new.append(skipped)
                        status, detail = "budget_exceeded", str(exceeded)
                        break
                    if not reply.tool_calls:
                        parsed = completion.parsed
                        status = "completed"
                        break
                    results = await self._run_tools(ctx, reply.tool_calls, k, f"{base}:{k}")
                    transcript.extend(results)
                    new.extend(results)
                    if k + 1 == self.max_iterations:
                        status = "max_iterations"
                        detail = (
                            f"reached max_iterations={self.max_iterations} with tool results "
                            "the model has not seen; the output is the latest assistant text."
                        )
            except Interrupt as exc:
                if self.report:
                    raise Interrupt(
                        pending=exc.pending,
                        writes={
                            "status": "suspended",
                            "pending": list(exc.pending),
                            "iterations": iterations,
                        },
                    ) from None
                raise
        out: dict[str, Any] = {"messages": new, self.output_key: _last_text(transcript)}
        if self.report:
            out.update(
                parsed=parsed,
                status=status,
                pending=[],
                iterations=iterations,
                usage=budget.usage,
                cost_usd=budget.cost_usd,
                stop_detail=detail,
            )
        return self.Out(**out)

    # -- model calls ------------------------------------------------------------------------

    async def _model_step(
        self, ctx: Context, transcript: list[Message], k: int, key: str
    ) -> dict[str, Any]:
        mctx = _sub_context(ctx, f"{k}.model")
        messages = list(transcript)
        tools = list(self.tools)

        async def call() -> dict[str, Any]:
            return await model_turn(
                mctx,
                [self.provider, *self.fallbacks],
                self._model_handler,
                messages,
                tools,
                self.output_schema,
                self.options,
                agent=self.name,
            )

        outcome: dict[str, Any] = await ctx._run.journaled(f"{key}:model", "model", call, ctx)
        return outcome

    # -- tool calls -------------------------------------------------------------------------

    async def _run_tools(
        self, ctx: Context, calls: list[ToolCall], k: int, key: str
    ) -> list[Message]:
        run = ctx._run
        decisions: dict[str, tuple[bool, str | None]] = {}
        waiting: list[PendingInterrupt] = []
        for call in calls:
            found_tool = self.tools_by_name.get(call.name)
            if found_tool is None or not found_tool.requires_approval:
                continue
            found, decision = await lookup_decision(run, ctx.superstep, call.id)
            if found:
                decisions[call.id] = parse_approval(decision)
            else:
                waiting.append(
                    PendingInterrupt(
                        id=call.id,
                        kind="approval",
                        value={
                            "tool": call.name,
                            "args": call.args,
                            "call_id": call.id,
                            "agent": self.name,
                        },
                        node=ctx.node,
                    )
                )
        if waiting:
            # All-or-nothing per turn: nothing of this turn runs until every call is decided.
            raise Interrupt(pending=waiting)
        limit = asyncio.Semaphore(self.tool_concurrency or len(calls) or 1)
        outcomes = await asyncio.gather(
            *(
                self._tool_step(ctx, call, k, i, f"{key}:tool:{i}:{call.id}", decisions, limit)
                for i, call in enumerate(calls)
            ),
            return_exceptions=True,
        )
        interrupts = [o for o in outcomes if isinstance(o, Interrupt)]
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, Interrupt):
                raise outcome
        if interrupts:
            raise Interrupt.merge(interrupts)
        return [o for o in outcomes if isinstance(o, Message)]

    async def _tool_step(
        self,
        ctx: Context,
        call: ToolCall,
        k: int,
        i: int,
        key: str,
        decisions: Mapping[str, tuple[bool, str | None]],
        limit: asyncio.Semaphore,
    ) -> Message:
        found_tool = self.tools_by_name.get(call.name)
        if found_tool is None:
            names = ", ".join(sorted(self.tools_by_name)) or "none"
            return tool_result(
                call,
                f"Error: there is no tool named {call.name!r}. Available tools: {names}.",
                is_error=True,
            )
        approved, reason = decisions.get(call.id, (True, None))
        if not approved:
            why = f" Reason: {reason}" if reason else ""
            return tool_result(
                call,
                f"A human reviewer rejected this call to {call.name!r}; it was not run.{why} "
                "Do not retry it unless the user asks.",
            )
        run = ctx._run
        deferrals = 0
        while True:  # a tool that asked to be retried later waits for its wake-up time
            found, wake = await peek_effect(run, f"{key}:defer{deferrals}")
            if not found:
                break
            if _interrupts._now() < float(wake):
                raise Interrupt(
                    pending=[
                        PendingInterrupt(
                            id=f"{key}:defer{deferrals}",
                            kind="timer",
                            value={"tool": call.name, "call_id": call.id},
                            node=ctx.node,
                            wake_at=float(wake),
                        )
                    ]
                )
            deferrals += 1
        tctx = _sub_context(ctx, f"{k}.{i}")
        live = False

        async def execute() -> dict[str, Any]:
            nonlocal live
            live = True
            return await self._execute_tool(tctx, call, found_tool, f"{key}:defer{deferrals}")

        async with limit:
            record: dict[str, Any] = await run.journaled(key, "tool", execute, ctx)
        if not live:
            spent = current_budget()
            if spent is not None and record.get("calls"):
                spent.absorb(
                    record["usage"], record["cost"], list(record["unpriced"]), record["calls"]
                )
        return Message(
            role="tool",
            content=record["content"],
            tool_call_id=call.id,
            name=call.name,
            is_error=record["is_error"],
        )

    async def _innermost_tool(self, request: ToolRequest) -> Any:
        if self.tool_timeout is None:
            return await request.tool.run(request.call.args, ctx=request.ctx)
        try:
            return await asyncio.wait_for(
                request.tool.run(request.call.args, ctx=request.ctx), self.tool_timeout
            )
        except TimeoutError:
            msg = f"tool {request.tool.name!r} did not finish within {self.tool_timeout}s"
            raise TimeoutError(msg) from None

    async def _execute_tool(
        self, tctx: Context, call: ToolCall, found_tool: Tool, defer_key: str
    ) -> dict[str, Any]:
        spent = Budget(parent=current_budget())
        with budget_scope(spent):
            attributes = {
                ATTR_TOOL_NAME: call.name,
                ATTR_TOOL_CALL_ID: call.id,
                ATTR_TOOL_ARGUMENTS: cap_text(call.args),
                ATTR_AGENT_NAME: self.name,
            }
            token = _current_call.set(call)
            with tctx.span("tool_call", kind="tool", **attributes) as span:
                try:
                    value = await self._tool_handler(
                        ToolRequest(call=call, tool=found_tool, ctx=tctx, node=tctx.node)
                    )
                    content = render_result(value)
                    is_error = False
                except Interrupt:
                    raise
                except RetryLater as exc:
                    await record_effect(tctx._run, defer_key, exc.wake_at)
                    raise Interrupt(
                        pending=[
                            PendingInterrupt(
                                id=defer_key,
                                kind="timer",
                                value={"tool": call.name, "call_id": call.id, "reason": exc.reason},
                                node=tctx.node,
                                wake_at=exc.wake_at,
                            )
                        ]
                    ) from None
                except Exception as exc:
                    span.record_error(exc)
                    content = _error_text(exc)
                    is_error = True
                finally:
                    _current_call.reset(token)
                span.set_attribute(ATTR_TOOL_RESULT, cap_text(content))
        return {
            "content": content,
            "is_error": is_error,
            "usage": spent.usage,
            "cost": spent.priced_cost_usd,
            "unpriced": sorted(spent.unpriced),
            "calls": spent.calls,
        }


def _error_text(exc: BaseException) -> str:
    from tensorsketch.errors import ValidationError

    if isinstance(exc, ValidationError):
        return f"Error: {exc}"
    text = str(exc)
    return f"Error: {type(exc).__name__}: {text}" if text else f"Error: {type(exc).__name__}"


def _with_call_ids(message: Message, k: int) -> Message:
    """Give tool calls without an id a deterministic one (some APIs omit them)."""
    if all(call.id for call in message.tool_calls):
        return message
    calls = [
        call if call.id else call.model_copy(update={"id": f"call_{k}_{i}"})
        for i, call in enumerate(message.tool_calls)
    ]
    return message.model_copy(update={"tool_calls": calls})


async def _innermost_model(request: ModelRequest) -> Completion:
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
    handler: Callable[[ModelRequest], Any],
    messages: list[Message],
    tools: list[Tool],
    output_schema: type[Schema] | None,
    options: Mapping[str, Any],
    *,
    agent: str | None = None,
) -> dict[str, Any]:
    """One model turn: the middleware stack per provider, falling back on retryable errors.

    Returns ``{"completion": ..., "repair": None | "what was wrong"}``, the value journaled
    for the turn; a reply that fails ``output_schema`` is returned (not raised) so the repair
    is replayed on resume instead of calling the model again.
    """
    last = len(providers) - 1
    completion: Completion | None = None
    for index, provider in enumerate(providers):
        request = ModelRequest(
            messages=list(messages),
            tools=list(tools),
            output_schema=output_schema,
            options=dict(options),
            ctx=ctx,
            node=agent or ctx.node,
            provider=provider,
            fallback_index=index,
        )
        try:
            completion = await handler(request)
            break
        except StructuredOutputError as exc:
            return {"completion": _failed_reply(exc, provider), "repair": _repair_text(exc)}
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
    assert completion is not None
    if (
        output_schema is not None
        and completion.parsed is None
        and not completion.message.tool_calls
    ):
        try:
            parsed = parse_structured(completion.message.text, output_schema, completion=completion)
        except StructuredOutputError as exc:
            return {"completion": completion, "repair": _repair_text(exc)}
        completion = completion.model_copy(update={"parsed": parsed})
    return {"completion": completion, "repair": None}


def _failed_reply(exc: StructuredOutputError, provider: ChatProvider) -> Completion:
    if exc.completion is not None:
        return exc.completion
    return Completion(message=assistant(exc.raw), model=provider.model)


def _repair_text(exc: StructuredOutputError) -> str:
    return f"{exc} Reply with only the corrected JSON."


# -- the quick path ---------------------------------------------------------------------------


def create_agent(
    provider: ChatProvider,
    tools: Iterable[Tool | Callable[..., Any]] = (),
    *,
    system: str | None = None,
    max_iterations: int = 10,
    middleware: Sequence[Middleware] = (),
    max_total_tokens: int | None = None,
    max_cost_usd: float | None = None,
    prices: PriceTable | None = None,
    fallbacks: Sequence[ChatProvider] = (),
    tool_concurrency: int | None = None,
    tool_timeout: float | None = None,
    output_schema: type[Schema] | None = None,
    name: str = "agent",
    max_tokens: int = 1024,
    model_options: Mapping[str, Any] | None = None,
) -> CompiledGraph[AgentState]:
    """An agent as a normal compiled graph over :class:`AgentState`.

    ``await agent.invoke({"query": ...})`` returns the final state: ``output`` is the answer,
    ``messages`` the transcript, ``status`` how it ended. Add ``thread_id=`` and ``backend=``
    to make it durable. The options are :class:`Agent`'s.
    """
    from tensorsketch.constants import END, START
    from tensorsketch.graph import Graph

    node = Agent(
        provider,
        tools,
        system=system,
        max_iterations=max_iterations,
        middleware=middleware,
        max_total_tokens=max_total_tokens,
        max_cost_usd=max_cost_usd,
        prices=prices,
        fallbacks=fallbacks,
        tool_concurrency=tool_concurrency,
        tool_timeout=tool_timeout,
        output_schema=output_schema,
        name=name,
        max_tokens=max_tokens,
        model_options=model_options,
    )
    graph = Graph(AgentState, name=name).add(node).edge(START, name).edge(name, END)
    return graph.compile()


class Llm(Node):
    """One model call as a node: read ``input_key``, write the reply to ``output_key``.

    With ``output_schema``, the reply is validated into that schema and the instance is
    written instead of the text (the state field must accept it); a reply that does not
    validate is sent back for repair up to ``max_repairs`` times. The call is journaled.
    """

    def __init__(
        self,
        provider: ChatProvider,
        *,
        system: str | None = None,
        input_key: str = "query",
        output_key: str = "output",
        output_schema: type[Schema] | None = None,
        max_repairs: int = 2,
        middleware: Sequence[Middleware] = (),
        max_tokens: int = 1024,
        model_options: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        self.provider = _check_provider(provider, "Llm(provider)")
        self.system = system
        self.input_key = input_key
        self.output_key = output_key
        self.output_schema = output_schema
        self.max_repairs = max_repairs
        self.middleware = list(middleware)
        _check(self.middleware)
        self.options: dict[str, Any] = {"max_tokens": max_tokens, **(model_options or {})}
        self.name = name or "Llm"
        out_type: Any = str if output_schema is None else output_schema
        in_model, out_model = _ports("Llm", {input_key: (str, ...)}, {output_key: (out_type, ...)})
        object.__setattr__(self, "In", in_model)
        object.__setattr__(self, "Out", out_model)
        self._handler = compose_model(self.middleware, _innermost_model)

    def default_name(self) -> str:
        return self.name

    async def run(self, ctx: Context, inp: Any) -> Any:
        prompt = getattr(inp, self.input_key)
        messages = [*([system(self.system)] if self.system else []), user(prompt)]
        base = f"{ctx.superstep}:{ctx.node}{ctx.instance}:llm"
        for attempt in range(self.max_repairs + 1 if self.output_schema else 1):
            mctx = _sub_context(ctx, f"llm.{attempt}")
            sent = list(messages)

            async def call(mctx: Context = mctx, sent: list[Message] = sent) -> dict[str, Any]:
                return await model_turn(
                    mctx,
                    [self.provider],
                    self._handler,
                    sent,
                    [],
                    self.output_schema,
                    self.options,
                )

            outcome: dict[str, Any] = await ctx._run.journaled(
                f"{base}:{attempt}", "llm", call, ctx
            )
            completion: Completion = outcome["completion"]
            spent = current_budget()
            if spent is not None:
                spent.charge(completion.usage, completion.model or self.provider.model)
            if not outcome["repair"]:
                value = completion.parsed if self.output_schema is not None else completion.text
                return self.Out(**{self.output_key: value})
            messages += [completion.message, user(outcome["repair"])]
        msg = (
            f"{self.name}: the model's reply did not match {self.output_schema.__name__} "  # type: ignore[union-attr]
            f"after {self.max_repairs} repairs: {outcome['repair']}"
        )
        raise StructuredOutputError(msg, raw=completion.text, completion=completion)
