"""The tool calls of one agent turn: approve, wait out deferrals, run once, answer the model.

A turn's calls run in parallel (under the agent's concurrency cap), each through the same
concerns, one function apiece:

- approval — :func:`decide_approvals`: a call to a tool with ``requires_approval`` runs only
  once a person decided (:class:`Approval`); until every such call of the turn is decided,
  the run suspends.
- deferral — :func:`wait_for_deferrals`: a tool that raised ``RetryLater`` left its wake-up
  time in the journal (:class:`Deferral`); the call suspends on a timer until then.
- the effect — :func:`journaled_call`: the call runs once under its journal key (through the
  middleware, traced, its spend charged); a resume replays the recorded result.
- the answer — the tool message the model reads: the result, an error, a rejection.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, NotRequired, TypedDict

from tensorsketch import suspension
from tensorsketch._modelcall import cap_text
from tensorsketch.budget import Budget, budget_scope, current_budget
from tensorsketch.context import Context
from tensorsketch.effect_calls import CallIdentity, calling
from tensorsketch.effect_keys import Scope, deferral_key, part_name, tool_effect_key
from tensorsketch.effects import EffectCall
from tensorsketch.errors import DepsUnavailableError, ValidationError
from tensorsketch.interrupts import (
    Interrupt,
    PendingInterrupt,
    RetryLater,
    approval_digest,
    parse_approval,
    tool_call_digest,
)
from tensorsketch.messages import Message, ToolCall, render_result, tool_result
from tensorsketch.middleware import ToolHandler, ToolRequest
from tensorsketch.observability.tracing import (
    ATTR_AGENT_NAME,
    ATTR_TOOL_ARGUMENTS,
    ATTR_TOOL_CALL_ID,
    ATTR_TOOL_NAME,
    ATTR_TOOL_RESULT,
)
from tensorsketch.provider import Usage
from tensorsketch.tools import Tool, _current_call

__all__ = [
    "Approval",
    "Deferral",
    "ToolRecord",
    "ToolSet",
    "call_with_timeout",
    "decide_approvals",
    "journaled_call",
    "run_tool_calls",
    "wait_for_deferrals",
]


class Approval(NamedTuple):
    """A person's decision on one tool call: run it, or do not (and, maybe, why not)."""

    approved: bool
    reason: str | None = None

    @classmethod
    def read(cls, decision: Any) -> Approval:
        """The decision as ``invoke(resume=...)`` passed it (see ``parse_approval``)."""
        approved, reason = parse_approval(decision)
        return cls(approved, reason)


#: The decision of a call nobody had to approve.
APPROVED = Approval(approved=True)


@dataclass(frozen=True, slots=True)
class Deferral:
    """A tool call's ``count``-th ``RetryLater``: the journal entry holding its wake-up time,
    whose key is also the id of the timer interrupt that waits for it."""

    tool_key: str
    count: int

    @property
    def key(self) -> str:
        return deferral_key(self.tool_key, self.count)

    def timer(self, call: ToolCall, node: str, wake_at: float, **details: Any) -> Interrupt:
        """The interrupt that suspends the run until ``wake_at`` (``details`` join its value)."""
        value = {"tool": call.name, "call_id": call.id, **details}
        pending = PendingInterrupt(
            id=self.key, kind="timer", value=value, node=node, wake_at=wake_at
        )
        return Interrupt(pending=[pending])


class ToolRecord(TypedDict):
    """What the journal keeps of one finished call: the answer, and what it spent (a replay
    charges the spend to the resumed run's budget)."""

    content: Any
    is_error: bool
    usage: Any
    cost: float
    unpriced: list[str]
    calls: int
    #: The call's :func:`~tensorsketch.interrupts.tool_call_digest` (absent in records
    #: written before #47).
    args_digest: NotRequired[str]


class ToolSet(NamedTuple):
    """What a run's tool calls run against, as the agent has it when the run starts.

    :ivar handler: the agent's middleware stack around the tool call itself.
    :ivar concurrency: at most this many calls of a turn run at once (``None``: no cap).
    :ivar approvals: whether any tool needs approval (skips the decision lookups if not).
    :ivar on_thread: whether the run has a thread (so its calls can be forked and are kept
        with their intent); decided once per run by the loop, ``None``: read per call.
    """

    by_name: Mapping[str, Tool]
    handler: ToolHandler
    agent: str
    concurrency: int | None
    approvals: bool
    on_thread: bool | None = None


# -- the turn ---------------------------------------------------------------------------------


async def run_tool_calls(
    ctx: Context, tools: ToolSet, calls: Sequence[ToolCall], k: int, scope: Scope
) -> list[Message]:
    """The tool messages answering ``calls`` (iteration ``k``), in call order.

    Raises :class:`Interrupt` — every pending approval and timer of the turn in one — when a
    call cannot run yet.
    """
    decisions: dict[str, Approval] = {}
    if tools.approvals:
        decisions = await decide_approvals(ctx, calls, tools)
    if len(calls) == 1:  # the common turn: no tasks to gather, no cap to apply
        call = calls[0]
        key = tool_effect_key(scope, k, 0, call.id)
        try:
            return [await _answer(ctx, tools, call, k, 0, key, decisions)]
        except Interrupt as exc:
            raise Interrupt.merge([exc]) from None
    cap = tools.concurrency
    limit = asyncio.Semaphore(cap) if cap is not None and cap < len(calls) else None
    outcomes = await asyncio.gather(
        *(
            _answer(ctx, tools, call, k, i, tool_effect_key(scope, k, i, call.id), decisions, limit)
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


async def _answer(
    ctx: Context,
    tools: ToolSet,
    call: ToolCall,
    k: int,
    i: int,
    key: str,
    decisions: Mapping[str, Approval],
    limit: asyncio.Semaphore | None = None,
) -> Message:
    """One call's tool message: checked, approved, undeferred, then run (or replayed)."""
    tool = tools.by_name.get(call.name)
    if tool is None:
        return _unknown_tool(call, tools.by_name)
    approval = decisions.get(call.id, APPROVED) if decisions else APPROVED
    if not approval.approved:
        return _rejected(call, approval)
    deferral = await wait_for_deferrals(ctx, call, key)
    record = await journaled_call(ctx, tools, call, tool, k, i, key, deferral, limit)
    return Message(
        role="tool",
        content=record["content"],
        tool_call_id=call.id,
        name=call.name,
        is_error=record["is_error"],
    )


# -- approval ---------------------------------------------------------------------------------


async def decide_approvals(
    ctx: Context, calls: Sequence[ToolCall], tools: ToolSet
) -> dict[str, Approval]:
    """The decisions on the calls that need approval, by call id.

    All or nothing per turn: while any of them is undecided, raises an :class:`Interrupt`
    asking for every undecided one, and nothing of the turn runs.
    """
    decisions: dict[str, Approval] = {}
    waiting: list[PendingInterrupt] = []
    for call in calls:
        tool = tools.by_name.get(call.name)
        if tool is None or not tool.requires_approval:
            continue
        digest = tool_call_digest(call.name, call.args)
        decision, asked = await _bound_decision(ctx, call.id, digest)
        if decision is not None:
            decisions[call.id] = decision
        else:
            waiting.append(
                PendingInterrupt(
                    id=asked,
                    kind="approval",
                    value={
                        "tool": call.name,
                        "args": call.args,
                        "call_id": call.id,
                        "agent": tools.agent,
                        "digest": digest,
                    },
                    node=ctx.node,
                )
            )
    if waiting:
        raise Interrupt(pending=waiting)
    return decisions


async def _bound_decision(ctx: Context, call_id: str, digest: str) -> tuple[Approval | None, str]:
    """The decision recorded for this call *with these arguments*, and the interrupt id to
    ask under when there is none.

    A decision bound to another digest (the call's arguments changed since: an edit, a fork
    that inherited the decision, a re-plan that reused the id) never applies; the call is
    asked about again under ``<call id>@<digest>``, since the first id's decision is final.
    """
    found, decision = await ctx.effects.decision(ctx.superstep, call_id)
    if not found:
        return None, call_id
    if approval_digest(decision) in (None, digest):
        return Approval.read(decision), call_id
    asked = f"{call_id}@{digest.removeprefix('sha256:')[:12]}"
    found, decision = await ctx.effects.decision(ctx.superstep, asked)
    if found and approval_digest(decision) in (None, digest):
        return Approval.read(decision), asked
    return None, asked


# -- deferral ---------------------------------------------------------------------------------


async def wait_for_deferrals(ctx: Context, call: ToolCall, key: str) -> Deferral:
    """The deferral a ``RetryLater`` of this run of the call would be recorded as.

    Walks the wake-up times earlier runs recorded; raises the timer :class:`Interrupt` of the
    first one still in the future.
    """
    count = 0
    while True:
        found, wake = await ctx.effects.peek(deferral_key(key, count))
        if not found:
            return Deferral(key, count)
        if suspension.now() < float(wake):
            raise Deferral(key, count).timer(call, ctx.node, float(wake))
        count += 1


# -- the effect -------------------------------------------------------------------------------


async def journaled_call(
    ctx: Context,
    tools: ToolSet,
    call: ToolCall,
    tool: Tool,
    k: int,
    i: int,
    key: str,
    deferral: Deferral,
    limit: asyncio.Semaphore | None,
) -> ToolRecord:
    """Run the call once under ``key`` (waiting for a ``limit`` slot), or replay its record.

    A live call reports ``start``/``end`` tool events to a streaming run; a replayed one
    emits nothing and charges its recorded spend to the current budget instead.
    """
    tctx = ctx.scoped(part_name(k, i))  # sub_context, inline: every call
    live = False
    # Only a journaled run (one with a thread) can be forked or compare a call's arguments;
    # a run without one skips the digest, the side-effect marking and the intent (a JSON
    # dump, a sha256 and two objects per call on the hot path of every in-memory agent).
    on_thread = tools.on_thread
    if on_thread is None:
        on_thread = ctx.thread_id is not None
    digest = tool_call_digest(call.name, call.args) if on_thread else None

    async def execute() -> ToolRecord:
        nonlocal live
        live = True
        streaming = ctx.streaming
        if streaming:
            await ctx.emit(
                "tool", {"phase": "start", "id": call.id, "name": call.name, "args": call.args}
            )
        record = await _run_live(tctx, tools, call, tool, deferral)
        if digest is not None:
            record["args_digest"] = digest  # what a fork's effects="reuse" compares
        if streaming:
            await ctx.emit(
                "tool",
                {
                    "phase": "end",
                    "id": call.id,
                    "name": call.name,
                    "result": _result_text(record["content"]),
                    "is_error": record["is_error"],
                },
            )
        return record

    record: ToolRecord
    if not on_thread:  # in memory: no intent to write, no fork to tell
        if limit is None:
            record = await ctx.effects.once(key, execute)
        else:
            async with limit:
                record = await ctx.effects.once(key, execute)
    else:
        what = EffectCall(
            call.name,
            node=ctx.node,
            step=ctx.superstep,
            args=call.args,
            in_doubt=getattr(tool, "in_doubt", "retry"),
            settle=_settled_record,
        )
        # A side effect: a fork must not repeat one its origin ran (tensorsketch.effect_calls).
        with calling(CallIdentity(f"tool call {call.name}({cap_text(call.args, 200)})", digest)):
            if limit is None:
                record = await ctx.effects.once(key, execute, what)
            else:
                async with limit:
                    record = await ctx.effects.once(key, execute, what)
    if not live:
        spent = current_budget()
        if spent is not None and record.get("calls"):
            spent.absorb(record["usage"], record["cost"], list(record["unpriced"]), record["calls"])
    return record


async def _run_live(
    tctx: Context, tools: ToolSet, call: ToolCall, tool: Tool, deferral: Deferral
) -> ToolRecord:
    """The call itself: through the middleware, under a ``tool_call`` span and a budget of
    its own. A ``RetryLater`` is journaled as ``deferral`` and suspends the run on a timer;
    any other error becomes the text of an error result."""
    spent = Budget(parent=current_budget())
    traced = tctx.tracer.enabled
    with budget_scope(spent):
        attributes = (
            {
                ATTR_TOOL_NAME: call.name,
                ATTR_TOOL_CALL_ID: call.id,
                ATTR_TOOL_ARGUMENTS: cap_text(call.args),
                ATTR_AGENT_NAME: tools.agent,
            }
            if traced
            else _NO_ATTRIBUTES
        )
        token = _current_call.set(call)
        with tctx.span("tool_call", kind="tool", **attributes) as span:
            try:
                value = await tools.handler(
                    ToolRequest(call=call, tool=tool, ctx=tctx, node=tctx.node)
                )
                content = render_result(value)
                is_error = False
            except Interrupt as exc:
                raise _from_tool(exc, call) from None
            except DepsUnavailableError:
                raise  # a missing `deps=` is the caller's to fix, not the model's
            except RetryLater as exc:
                await tctx.effects.record(deferral.key, exc.wake_at)
                raise deferral.timer(call, tctx.node, exc.wake_at, reason=exc.reason) from None
            except Exception as exc:
                span.record_error(exc)
                content = _error_text(exc)
                is_error = True
            finally:
                _current_call.reset(token)
            if traced:
                span.set_attribute(ATTR_TOOL_RESULT, cap_text(content))
    return {
        "content": content,
        "is_error": is_error,
        "usage": spent.usage,
        "cost": spent.priced_cost_usd,
        "unpriced": sorted(spent.unpriced),
        "calls": spent.calls,
    }


def _settled_record(result: Any) -> ToolRecord:
    """A call in doubt that a person says went through, returning ``result``: its record
    (the model reads ``result`` as the tool's answer; nothing was spent this time)."""
    content = result if isinstance(result, str) else json.dumps(result, default=str)
    return {
        "content": content,
        "is_error": False,
        "usage": Usage(),
        "cost": 0.0,
        "unpriced": [],
        "calls": 0,
    }


async def call_with_timeout(request: ToolRequest, timeout: float | None) -> Any:
    """The innermost tool handler: the tool's own ``run``, cut off after ``timeout`` seconds."""
    if timeout is None:
        return await request.tool.run(request.call.args, ctx=request.ctx)
    try:
        return await asyncio.wait_for(request.tool.run(request.call.args, ctx=request.ctx), timeout)
    except TimeoutError:
        msg = f"tool {request.tool.name!r} did not finish within {timeout}s"
        raise TimeoutError(msg) from None


# -- the answer -------------------------------------------------------------------------------

_NO_ATTRIBUTES: dict[str, Any] = {}


def _unknown_tool(call: ToolCall, by_name: Mapping[str, Tool]) -> Message:
    names = ", ".join(sorted(by_name)) or "none"
    return tool_result(
        call,
        f"Error: there is no tool named {call.name!r}. Available tools: {names}.",
        is_error=True,
    )


def _rejected(call: ToolCall, approval: Approval) -> Message:
    why = f" Reason: {_sentence(approval.reason)}" if approval.reason else ""
    return tool_result(
        call,
        f"A human reviewer rejected this call to {call.name!r}; it was not run.{why} "
        "Do not retry it unless the user asks.",
    )


def _sentence(text: str) -> str:
    """The reviewer's words verbatim, ended as a sentence when they end without punctuation,
    so the model does not read them run into the instruction that follows."""
    text = text.strip()
    ended = text.rstrip(")]\"'\u201d\u2019\u00bb").endswith((".", "!", "?", "\u2026"))
    return text if ended else f"{text}."


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        return f"Error: {exc}"
    text = str(exc)
    return f"Error: {type(exc).__name__}: {text}" if text else f"Error: {type(exc).__name__}"


def _result_text(content: Any) -> str:
    """A tool result as the text a stream consumer shows (images left out)."""
    if isinstance(content, str):
        return content
    return Message(role="tool", content=content, tool_call_id="-").text


def _from_tool(exc: Interrupt, call: ToolCall) -> Interrupt:
    """``exc`` with each question it asks marked with the tool call that asked it, so the
    person answering sees which call and arguments wait on them."""
    marked = {"id": call.id, "name": call.name, "args": dict(call.args)}
    pending = [
        p.model_copy(update={"tool_call": marked}) if p.tool_call is None else p
        for p in exc.pending
    ]
    found = Interrupt(pending=pending, writes=exc.writes)
    found.parts = exc.parts
    return found
