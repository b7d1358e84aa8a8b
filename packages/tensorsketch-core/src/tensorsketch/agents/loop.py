"""``Agent``: the durable model-and-tools loop as one node.

:class:`Agent` calls the model; when the model asks for tools it runs them (in parallel, with
a concurrency cap and a per-tool timeout) and feeds the results back, until the model answers,
``max_iterations`` model calls were made, or the run's budget is spent. Every model call and
every tool call goes through the run's effect journal under an explicit, deterministic key
(superstep, node, iteration, call index; :mod:`tensorsketch.effect_keys` spells them), so
after a crash at iteration *k* a resume replays iterations ``0..k-1`` from the journal — no
model call or tool side effect is repeated — and continues from there. The tool calls of a
turn run in :mod:`tensorsketch.agents.tool_calls`.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from pydantic import BaseModel, Field

from tensorsketch._modelcall import call_provider
from tensorsketch.agents.context import (
    POLICY_FAILED,
    Compaction,
    TokenEstimate,
    digest,
    estimate_tokens,
    head_size,
    prefix_cut,
    still_covers,
    summary_message,
    summary_request,
    trim_messages,
)
from tensorsketch.agents.handoffs import HANDOFF, Handoff, Routing, as_handoffs, team_of
from tensorsketch.agents.options import AgentSettings, as_tools, check_deps, check_provider
from tensorsketch.agents.output_modes import shape_request
from tensorsketch.agents.ports import ReportChoice, port_hint, ports, report_fields
from tensorsketch.agents.state import REPORT_FIELDS, AgentStatus
from tensorsketch.agents.stuck import STUCK, RepeatWatch
from tensorsketch.agents.tool_calls import ToolSet, call_with_timeout, run_tool_calls
from tensorsketch.agents.turn import call_model, model_turn, sub_context
from tensorsketch.assistant_config import current_assistant
from tensorsketch.budget import Budget, budget_scope, current_budget
from tensorsketch.context import Context
from tensorsketch.effect_keys import (
    AgentPart,
    Scope,
    agent_shown_key,
    agent_turn_key,
    part_name,
)
from tensorsketch.effects import INSIDE
from tensorsketch.errors import BackendUnavailableError, ThreadBusyError
from tensorsketch.guardrails import Guardrail, GuardrailKind, Tripwire
from tensorsketch.interrupts import Interrupt
from tensorsketch.messages import Message, ToolCall, system, tool_result, user
from tensorsketch.middleware import ToolRequest, compose_model, compose_tool
from tensorsketch.node import Node
from tensorsketch.observability.tracing import ATTR_AGENT_NAME, current_span
from tensorsketch.provider import ChatProvider, Completion
from tensorsketch.schema import Schema
from tensorsketch.steering import SteeringInbox, current_inbox
from tensorsketch.tools import Tool
from tensorsketch.toolsets import ToolSearch, Toolset, search_tool

if TYPE_CHECKING:
    from typing import Unpack

    from tensorsketch.agents.options import AgentOptions

__all__ = ["Agent"]

log = logging.getLogger("tensorsketch.agents")


def _last_text(messages: Sequence[Message]) -> str:
    for message in reversed(messages):
        if message.role == "assistant" and message.text:
            return message.text
    return ""


class Agent(Node):
    """The model-and-tools loop as one durable node.

    :param provider: the model (``fallbacks`` are tried after it on retryable errors).
    :param tools: the tools the model may call.
    :param options: :class:`AgentOptions` — the same options :func:`create_agent` takes:
        ``system``, ``max_iterations``, ``middleware``, ``max_total_tokens``,
        ``max_cost_usd``, ``prices``, ``fallbacks``, ``tool_concurrency``, ``tool_timeout``,
        ``output_schema``, ``name``, ``max_tokens``, ``model_options``, ``context_policy``,
        ``deps_type``, ``stuck_after``, ``guardrails``, ``handoffs``, ``output_mode``.
    :param input_key: / :param output_key: the state fields holding the request and answer.
    :param report: the report fields to write besides ``messages`` and the output:
        ``True`` (all of ``status``, ``pending``, ``iterations``, ``usage``, ``cost_usd``,
        ``parsed`` and ``stop_detail``, as :class:`AgentState` has them), ``False`` (none),
        or a list of their names, e.g. ``report=["parsed", "usage"]``. The state must have
        the fields chosen. With an ``output_schema``, ``parsed`` is written whenever the
        state has a ``parsed`` field, whatever ``report`` says.
    """

    def __init__(
        self,
        provider: ChatProvider,
        tools: Iterable[Tool | Callable[..., Any] | Toolset] = (),
        *,
        input_key: str = "query",
        output_key: str = "output",
        report: ReportChoice = True,
        **options: Unpack[AgentOptions],
    ) -> None:
        self._setup("Agent()", provider, tools, options, input_key, output_key, report)

    @classmethod
    def _build(
        cls,
        where: str,
        provider: ChatProvider,
        tools: Iterable[Tool | Callable[..., Any] | Toolset],
        options: Mapping[str, Any],
    ) -> Agent:
        """An agent with the default keys, its options checked under ``where``'s name."""
        agent = cls.__new__(cls)
        agent._setup(where, provider, tools, options, "query", "output", True)
        return agent

    def _setup(
        self,
        where: str,
        provider: ChatProvider,
        tools: Iterable[Tool | Callable[..., Any] | Toolset],
        options: Mapping[str, Any],
        input_key: str,
        output_key: str,
        report: ReportChoice,
    ) -> None:
        self.provider = check_provider(provider, "Agent(provider)")
        settings = self.settings = AgentSettings.of(where, options)
        items = list(tools)
        #: Toolsets offered only on the runs their ``when`` allows.
        self._dynamic: tuple[Toolset, ...] = tuple(
            i for i in items if isinstance(i, Toolset) and i.enabled is not None
        )
        deferred = [i for i in items if isinstance(i, Toolset) and i.deferred and not i.enabled]
        self.tools = as_tools(i for i in items if not _held_back(i))
        self.tools_by_name = {t.name: t for t in self.tools}
        #: Tools sent by name only, until ``search_tools`` finds them.
        self._deferred: dict[str, Tool] = {t.name: t for ts in deferred for t in ts.tools}
        self.system = settings.system
        self.max_iterations = settings.max_iterations
        self.middleware = list(settings.middleware)
        self.fallbacks = list(settings.fallbacks)
        self.max_total_tokens = settings.max_total_tokens
        self.max_cost_usd = settings.max_cost_usd
        self.prices = settings.prices
        self.tool_concurrency = settings.tool_concurrency
        self.tool_timeout = settings.tool_timeout
        self.output_schema = settings.output_schema
        self.output_mode = settings.output_mode
        self.context_policy = settings.context_policy
        self.deps_type = settings.deps_type
        self.stuck_after = settings.stuck_after
        self.guardrails: tuple[Guardrail, ...] = tuple(settings.guardrails)
        self._guards: dict[GuardrailKind, tuple[Guardrail, ...]] = {
            kind: tuple(g for g in self.guardrails if g.kind == kind)
            for kind in ("input", "output", "tool_call")
        }
        self.name = settings.name
        #: The agents this one may hand the conversation to (``handoffs=``).
        self.handoffs: tuple[Handoff, ...] = as_handoffs(settings.handoffs, self.name)
        #: Every agent reachable through handoffs (this one included) and the handoff
        #: targets named but not found; empty when this agent hands off to nobody.
        self._team: dict[str, Agent] = {}
        self._unresolved: list[str] = []
        if self.handoffs:
            self._team, self._unresolved = team_of(self)
        members = list(self._team.values()) or [self]
        self.input_key = input_key
        self.output_key = output_key
        #: The report fields this agent writes (empty for ``report=False``).
        self.report = report_fields(report, REPORT_FIELDS)
        #: ``parsed`` is written wherever the state keeps it once a schema makes one.
        self._optional: frozenset[str] = frozenset()
        schemas = any(m.output_schema is not None for m in members)
        if schemas and "parsed" not in self.report:
            self._optional = frozenset({"parsed"})
        guarded = any(m.guardrails for m in members)
        if guarded:  # the tripwire is written wherever the state keeps it
            self._optional |= {"tripwire"}
        if self._team:  # so is the agent holding the conversation
            self._optional |= {"active_agent"}
        #: What ``_reported`` lets through: the chosen report fields and the optional ones.
        self._report_out = self.report | self._optional
        self.options: dict[str, Any] = settings.model_call_options()
        outputs: dict[str, Any] = {
            "messages": (list[Message], Field(default_factory=list)),
            output_key: (str, ""),
        }
        outputs.update((k, v) for k, v in REPORT_FIELDS.items() if k in self._report_out)
        if guarded:
            outputs["tripwire"] = (Tripwire | None, None)
        if self._team:
            outputs["active_agent"] = (str, "")
        inputs: dict[str, Any] = {
            input_key: (str, ""),
            "messages": (list[Message], Field(default_factory=list)),
        }
        policy = self.context_policy
        #: Whether the compaction point travels in the state (read and written each run).
        self._keeps_compaction = policy is not None and policy.summarize
        if self._keeps_compaction:
            inputs["compaction"] = outputs["compaction"] = (Compaction | None, None)
        in_model, out_model = ports("Agent", inputs, outputs)
        # Ports depend on the keys chosen, so they are per instance (the engine reads them).
        object.__setattr__(self, "In", in_model)
        object.__setattr__(self, "Out", out_model)
        self._model_handler = compose_model(self.middleware, call_model)
        self._tool_handler = compose_tool(self.middleware, self._innermost_tool)
        # Fixed for the agent's life, so not rebuilt on every turn.
        self._providers: tuple[ChatProvider, ...] = (self.provider, *self.fallbacks)
        self._handoff_tools: tuple[Tool, ...] = tuple(h.as_tool() for h in self.handoffs)
        clashes = sorted({t.name for t in self._handoff_tools} & set(self.tools_by_name))
        if clashes:
            msg = (
                f"agent {self.name!r} has a tool and a handoff both named {clashes[0]!r}; give "
                "the handoff another `handoff(..., tool_name=...)`."
            )
            raise ValueError(msg)
        self._offered()
        if self.output_mode == "tool" and self.output_schema is not None:
            shape_request("tool", self.provider, [], list(self._tool_list), self.output_schema)

    def _offered(self) -> None:
        """What the model is offered (the tools, the handoffs, the search for deferred
        tools) and what calls run against, from ``tools`` as they are now."""
        search = (search_tool(self._deferred),) if self._deferred else ()
        self._tool_list: tuple[Tool, ...] = (*self.tools, *self._handoff_tools, *search)
        every = [*self._tool_list, *self._deferred.values()]
        self._callable: dict[str, Tool] = {t.name: t for t in every}
        if len(self._callable) < len(every):
            names = [t.name for t in every]
            twice = sorted({n for n in names if names.count(n) > 1})
            msg = (
                f"agent {self.name!r} has two tools named {twice[0]!r} (across its tools, "
                "toolsets, handoffs and tool search); rename one or `.prefixed(...)` a toolset."
            )
            raise ValueError(msg)
        self._approvals = any(t.requires_approval for t in every)

    @property
    def approval_tools(self) -> frozenset[str]:
        """The names of the tools (handoffs and toolsets included) whose calls wait for a
        person's approval: what a server shows a client as calls to decide on."""
        every = [*self._callable.values(), *(t for ts in self._dynamic for t in ts.tools)]
        return frozenset(t.name for t in every if t.requires_approval)

    def _for_run(self, ctx: Context) -> Agent:
        """This agent with the toolsets this run's ``when`` predicates allow."""
        on = [ts for ts in self._dynamic if ts.enabled is not None and ts.enabled(ctx)]
        clone = copy.copy(self)
        clone._dynamic = ()
        clone.tools = [*self.tools, *(t for ts in on if not ts.deferred for t in ts.tools)]
        clone.tools_by_name = {t.name: t for t in clone.tools}
        clone._deferred = {
            **self._deferred,
            **{t.name: t for ts in on if ts.deferred for t in ts.tools},
        }
        clone._offered()
        return clone

    def variant(
        self,
        *,
        output_schema: type[Schema] | None = None,
        extra_tools: Iterable[Tool | Callable[..., Any]] = (),
    ) -> Agent:
        """A copy of this agent for one run: answering in ``output_schema`` (when given) and
        offering ``extra_tools`` besides its own.

        The copy keeps this agent's name, ports and everything else, so it can stand in for
        it in a compiled graph — how a server honours what one request asks for (a client's
        ``response_format``, a frontend's own tools) without changing the graph it serves.
        Raises ``ValueError`` when an extra tool has the name of one of this agent's tools.
        """
        clone = copy.copy(self)
        if output_schema is not None:
            if not (isinstance(output_schema, type) and issubclass(output_schema, BaseModel)):
                msg = f"variant(output_schema=...) must be a Schema class, got {output_schema!r}."
                raise TypeError(msg)
            clone.output_schema = output_schema
        added = as_tools(extra_tools)
        clashes = sorted({t.name for t in added} & set(self.tools_by_name))
        if clashes:
            msg = (
                f"agent {self.name!r} already has tool(s) named {', '.join(clashes)}; give the "
                "extra tools other names."
            )
            raise ValueError(msg)
        clashes = sorted({t.name for t in added} & {t.name for t in self._handoff_tools})
        if clashes:
            msg = (
                f"agent {self.name!r} already has a handoff named {', '.join(clashes)}; give "
                "the extra tools other names."
            )
            raise ValueError(msg)
        if added:
            clone.tools = [*self.tools, *added]
            clone.tools_by_name = {t.name: t for t in clone.tools}
            clone._offered()
        clone._tool_handler = compose_tool(clone.middleware, clone._innermost_tool)
        return clone

    def default_name(self) -> str:
        return self.name

    def optional_outputs(self) -> Collection[str]:
        return self._optional

    def port_hint(self, port: str, state_fields: Collection[str]) -> str | None:
        return port_hint(
            port,
            state_fields,
            keys={self.input_key: "input_key", self.output_key: "output_key"},
            report={k: "AgentStatus" if k == "status" else v[0] for k, v in REPORT_FIELDS.items()},
            fixed={"messages": list[Message], "compaction": Compaction | None},
        )

    def _reported(self, values: dict[str, Any]) -> dict[str, Any]:
        """The report values this agent writes (``report=`` chose them)."""
        return {k: v for k, v in values.items() if k in self._report_out}

    # -- the loop ---------------------------------------------------------------------------

    async def _history(self, ctx: Context, inp: Any, scope: Scope) -> tuple[list[Message], _Shown]:
        """The transcript so far, without what this superstep's earlier suspension showed of
        this run (the run makes those messages again), and how many those were."""
        history: list[Message] = list(getattr(inp, "messages", None) or [])
        if not (history and _waits_on_tools(history[-1])):
            return history, _NOT_SHOWN  # what a suspension shows ends with the waiting calls
        shown = await _shown_before(ctx, scope, history)
        return history[: len(history) - shown.size], shown

    def _opening(self, inp: Any, history: list[Message]) -> tuple[list[Message], list[Message]]:
        """The transcript the loop starts from, and the messages this run adds to it (the
        system prompt on a fresh transcript, the query unless it is already the last turn)."""
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
        return [*history, *new], new

    async def run(self, ctx: Context, inp: Any) -> Any:
        agent = self
        config = current_assistant()
        if config is not None and not ctx.namespace:  # the graph's own agents, not nested ones
            agent = self.configured(config)
        if agent._dynamic:
            return await agent._for_run(ctx)._loop(ctx, inp)
        return await agent._loop(ctx, inp)

    def configured(self, config: Mapping[str, Any]) -> Agent:
        """A copy of this agent as an assistant's configuration says (see
        :mod:`tensorsketch.runs.assistants`): ``model`` (its provider's model name),
        ``system_prompt``, ``tools`` (the names of its own tools it may offer),
        ``max_iterations`` and ``max_tokens``; keys it does not know are not its own.

        A run submitted with an assistant executes its graph's top-level agents this way.
        Raises ``ValueError`` for a tool this agent does not have.
        """
        clone = copy.copy(self)
        if "system_prompt" in config:
            clone.system = str(config["system_prompt"])
        if "max_iterations" in config:
            clone.max_iterations = int(config["max_iterations"])
        if "max_tokens" in config:
            clone.options = {**self.options, "max_tokens": int(config["max_tokens"])}
        if "model" in config:
            provider = copy.copy(self.provider)
            provider.model = str(config["model"])
            clone.provider = provider
            clone._providers = (provider, *self._providers[1:])
        if "tools" in config:
            allowed = set(config["tools"])
            unknown = sorted(allowed - set(self.tools_by_name))
            if unknown:
                msg = (
                    f"agent {self.name!r} has no tool(s) {unknown}; its tools are "
                    f"{sorted(self.tools_by_name)}."
                )
                raise ValueError(msg)
            clone.tools = [t for t in self.tools if t.name in allowed]
            clone.tools_by_name = {t.name: t for t in clone.tools}
            clone._offered()
        clone._tool_handler = compose_tool(clone.middleware, clone._innermost_tool)
        return clone

    async def _loop(self, ctx: Context, inp: Any) -> Any:
        _name_span(self.name)
        if self.deps_type is not None:
            check_deps(ctx, self.deps_type, self.name)
        scope = Scope.of(ctx)
        history, shown = await self._history(ctx, inp, scope)
        transcript, new = self._opening(inp, history)
        point: Compaction | None = getattr(inp, "compaction", None)
        budget = Budget(
            max_total_tokens=self.max_total_tokens,
            max_cost_usd=self.max_cost_usd,
            prices=self.prices,
            parent=current_budget(),
        )
        # What this run's turns need besides the model and the tools, decided here once
        # (the agent's own features were fixed when it was built): an agent using none of
        # them pays nothing for them per turn (tests/test_agent_loop_cost.py holds it to it).
        plan = _Plan(self._routing(ctx, transcript), self, transcript, ctx.thread_id is not None)
        watching = self.stuck_after is not None
        watch = RepeatWatch(self.stuck_after, transcript)
        inbox = current_inbox()
        capped = budget.limited()
        status: AgentStatus = "completed"
        detail = ""
        parsed: Any = None
        iterations = 0
        tripwire: Tripwire | None = None
        with budget_scope(budget):
            try:
                await self._guard_input(ctx, scope, transcript)
                for k in range(self.max_iterations):
                    exceeded = budget.exceeded() if capped else None
                    if exceeded is not None:
                        status, detail = "budget_exceeded", str(exceeded)
                        break
                    active = plan.active
                    steered = () if inbox is None else await _steered(ctx, scope, k, inbox)
                    transcript += steered
                    new += steered
                    routing, search = plan.routing, plan.search
                    sent = transcript if routing is None else routing.request(transcript)
                    offered = None if search is None else search.offered(active._tool_list)
                    outcome, point = await active._model_step(ctx, sent, k, scope, point, offered)
                    iterations = k + 1
                    completion: Completion = outcome["completion"]
                    budget.charge(completion.usage, completion.model or active.provider.model)
                    reply = _with_call_ids(completion.message, k)
                    repair = outcome.get("repair")
                    if repair:
                        watch.forget()
                        fix = (reply, user(repair))
                        transcript += fix
                        new += fix
                        if k + 1 == self.max_iterations:
                            status, detail = "max_iterations", f"stopped after {k + 1} calls"
                        continue
                    transcript.append(reply)
                    new.append(reply)
                    exceeded = budget.exceeded() if capped else None
                    if exceeded is not None:
                        _skip_calls(reply.tool_calls, transcript, new, _NOT_RUN_BUDGET)
                        status, detail = "budget_exceeded", str(exceeded)
                        break
                    if active.guardrails:
                        await active._guard_reply(ctx, scope, k, reply, transcript, new)
                    if not reply.tool_calls:
                        parsed = completion.parsed
                        status = "completed"
                        break
                    if watching:
                        repeated = watch.add(reply)
                        if repeated is not None:
                            _skip_calls(reply.tool_calls, transcript, new, _NOT_RUN_STUCK)
                            status, detail = "stuck", repeated
                            await self._stuck(ctx, k, repeated)
                            break
                    if routing is None and search is None:  # the turn is its tool calls
                        results = await run_tool_calls(ctx, plan.tools, reply.tool_calls, k, scope)
                        transcript.extend(results)
                        new.extend(results)
                    else:
                        await self._tool_turn(ctx, scope, k, plan, reply, transcript, new, watch)
                    if k + 1 == self.max_iterations:
                        status = "max_iterations"
                        detail = (
                            f"reached max_iterations={self.max_iterations} with tool results "
                            "the model has not seen; the output is the latest assistant text."
                        )
            except Interrupt as exc:
                stop = await self._suspension(
                    ctx, scope, exc, new, shown, budget, iterations, plan.active
                )
                raise stop from None
            except _Tripped as tripped:
                tripwire = tripped.tripwire
                status, detail = "tripped", tripped.detail
                iterations = tripped.iteration
        out: dict[str, Any] = {
            "messages": new[shown.size :] if shown.size else new,
            self.output_key: "" if tripwire is not None else _last_text(transcript),
        }
        report = {
            "parsed": parsed,
            "status": status,
            "pending": [],
            "iterations": iterations,
            "usage": budget.usage,
            "cost_usd": budget.cost_usd,
            "stop_detail": detail,
            "tripwire": tripwire,
            "active_agent": plan.active.name,
        }
        return self._result(out, point, report)

    def _routing(self, ctx: Context, transcript: list[Message]) -> Routing | None:
        """Who holds the conversation (``None`` when this agent hands off to nobody)."""
        if not self._team:
            return None
        if self._unresolved:
            names = ", ".join(repr(n) for n in self._unresolved)
            msg = (
                f"agent {self.name!r} can hand off (through its team) to {names}, but no agent "
                f"reachable from it has that name; reachable: {', '.join(sorted(self._team))}."
            )
            raise ValueError(msg)
        # The receivers with the toolsets this run allows; this very instance (a variant) runs.
        team = {n: a._for_run(ctx) if a._dynamic else a for n, a in self._team.items()}
        team[self.name] = self
        routing = Routing(self, team, transcript)
        if routing.active is not self and routing.active.deps_type is not None:
            check_deps(ctx, routing.active.deps_type, routing.active.name)
        return routing

    async def _tool_turn(
        self,
        ctx: Context,
        scope: Scope,
        k: int,
        plan: _Plan,
        reply: Message,
        transcript: list[Message],
        new: list[Message],
        watch: RepeatWatch,
    ) -> None:
        """Run a turn's tool calls and add their results; then note the tools a search
        loaded, and follow a handoff (announced by an ``agent.handoff`` event in the run's
        stream and an attribute on the node's span)."""
        routing = plan.routing
        giver = plan.active
        if routing is None:
            results = await run_tool_calls(ctx, plan.tools, reply.tool_calls, k, scope)
        else:
            results = await _run_with_handoffs(ctx, giver, plan.tools, reply, k, scope)
        transcript.extend(results)
        new.extend(results)
        if plan.search is not None:
            plan.search.read(results)
        taken = None if routing is None else routing.after(results, transcript)
        if routing is None or taken is None:
            return
        receiver = routing.active
        if receiver.deps_type is not None:
            check_deps(ctx, receiver.deps_type, receiver.name)
        plan.become(receiver, transcript)
        watch.forget()
        span = current_span.get()
        if span is not None:
            path = [self.name, *(p.taken.target_name for p in routing.points)]
            span.set_attribute(HANDOFF, " -> ".join(path))
        data = {"from": giver.name, "to": receiver.name, "iteration": k, "tool": taken.tool_name}
        await ctx.emit(HANDOFF, data)

    def _result(self, out: dict[str, Any], point: Compaction | None, report: dict[str, Any]) -> Any:
        """The node's output: the messages and answer, the compaction point when the state
        keeps it, and the report fields chosen."""
        if self._keeps_compaction:
            out["compaction"] = point
        if self._report_out:
            out.update(self._reported(report))
        return self.Out(**out)

    async def _suspension(
        self,
        ctx: Context,
        scope: Scope,
        exc: Interrupt,
        new: list[Message],
        shown: _Shown,
        budget: Budget,
        iterations: int,
        active: Agent,
    ) -> Interrupt:
        """The interrupt the run suspends with, carrying what ran so far: the transcript
        (the approver reads why), and with ``report``, the counts, the spend and who holds
        the conversation."""
        writes: dict[str, Any] = {}
        if new and _waits_on_tools(new[-1]):
            await _record_shown(ctx, scope, shown, new)
            writes["messages"] = new[shown.size :]
        writes.update(
            self._reported(
                {
                    "status": "suspended",
                    "pending": list(exc.pending),
                    "iterations": iterations,
                    "usage": budget.usage,
                    "cost_usd": budget.cost_usd,
                    "active_agent": active.name,
                }
            )
        )
        if not writes:
            return exc
        return Interrupt(pending=exc.pending, writes=writes)

    # -- model calls ------------------------------------------------------------------------

    async def _model_step(
        self,
        ctx: Context,
        transcript: list[Message],
        k: int,
        scope: Scope,
        point: Compaction | None,
        offered: tuple[Tool, ...] | None = None,
    ) -> tuple[dict[str, Any], Compaction | None]:
        mctx = ctx.scoped(part_name(k, "model"))  # sub_context, inline: every turn
        sent = transcript
        if self.context_policy is not None:
            sent, point = await self._compacted(ctx, transcript, k, scope, point)

        async def call() -> dict[str, Any]:
            # ``model_turn`` copies the transcript into the request before anything awaits,
            # and the loop does not touch it until this turn returns.
            return await model_turn(
                mctx,
                self._providers,
                self._model_handler,
                sent,
                self._tool_list if offered is None else offered,
                self.output_schema,
                self.options,
                agent=self.name,
                mode=self.output_mode,
            )

        outcome: dict[str, Any] = await ctx.effects.once(
            agent_turn_key(scope, k, "model"), call, INSIDE
        )
        return outcome, point

    def _estimate(self) -> TokenEstimate:
        policy = self.context_policy
        given = policy.estimate if policy is not None else None
        if given is not None:
            return given
        provider = self.provider
        return lambda messages: estimate_tokens(messages, provider)

    async def _compacted(
        self,
        ctx: Context,
        transcript: list[Message],
        k: int,
        scope: Scope,
        point: Compaction | None,
    ) -> tuple[list[Message], Compaction | None]:
        """The request's messages under the context policy's budget, and the compaction
        point they were built from (see :mod:`tensorsketch.agents.context`)."""
        policy = self.context_policy
        assert policy is not None
        estimate = self._estimate()
        budget = policy.budget_tokens
        if not policy.summarize:
            return trim_messages(transcript, budget, estimate)[0], None
        head = head_size(transcript)
        if point is not None and not still_covers(transcript, point):
            point = None  # the transcript was edited or forked under it: start again
        covered = head if point is None else point.covers
        request = self._with_summary(transcript, head, point, covered)
        if estimate(request) <= budget:
            return request, point  # the fast path: the last summary (if any) still fits
        target = int(budget * policy.compact_to) - estimate(transcript[:head])
        cut = prefix_cut(transcript[covered:], target, estimate, reserve=policy.summary_tokens)
        if cut == 0:  # nothing left to summarize: only this turn's own messages can go
            return trim_messages(request, budget, estimate)[0], point
        dropped = transcript[covered : covered + cut]
        previous = point.summary if point is not None else None
        writer = policy.summarizer or self.provider
        sctx = sub_context(ctx, part_name(k, "summary"))

        async def summarize() -> Completion | dict[str, str]:
            try:
                return await call_provider(
                    sctx,
                    writer,
                    summary_request(dropped, previous),
                    tools=None,
                    output_schema=None,
                    options={"max_tokens": policy.summary_tokens},
                )
            except (Interrupt, ThreadBusyError, BackendUnavailableError):
                raise
            except Exception as exc:  # best effort: a failed summary degrades this request
                return {"failed": f"{type(exc).__name__}: {exc}"}

        # Journaled (the failure too): a resumed run replays it instead of asking again.
        key = agent_turn_key(scope, k, "summary")
        written: Completion | dict[str, str] = await ctx.effects.once(key, summarize, INSIDE)
        if isinstance(written, dict):
            await self._policy_failed(ctx, k, written["failed"])
            return trim_messages(request, budget, estimate)[0], point
        spent = current_budget()
        if spent is not None:
            spent.charge(written.usage, written.model or writer.model)
        covers = covered + cut
        point = Compaction(
            summary=written.message.text,
            covers=covers,
            digest=digest(transcript[head:covers]),
        )
        request = self._with_summary(transcript, head, point, covers)
        # The summary's own size counts: a longer one than the room kept drops more of
        # this request (the point stays where it is).
        return trim_messages(request, budget, estimate)[0], point

    @staticmethod
    def _with_summary(
        transcript: list[Message], head: int, point: Compaction | None, covered: int
    ) -> list[Message]:
        if point is None:
            return transcript
        return [*transcript[:head], summary_message(point.summary), *transcript[covered:]]

    async def _policy_failed(self, ctx: Context, k: int, reason: str) -> None:
        """Make a degraded request visible: a warning, an attribute on the agent's span and a
        ``context.policy_failed`` event in the run's stream."""
        log.warning("agent %s: the context policy's summary failed (%s)", self.name, reason)
        span = current_span.get()
        if span is not None:
            span.set_attribute(POLICY_FAILED, reason)
        await ctx.emit(POLICY_FAILED, {"agent": self.name, "iteration": k, "error": reason})

    async def _stuck(self, ctx: Context, k: int, detail: str) -> None:
        """Make a stuck stop visible: a warning, an attribute on the agent's span and an
        ``agent.stuck`` event in the run's stream."""
        log.warning("agent %s stopped as stuck: %s", self.name, detail)
        span = current_span.get()
        if span is not None:
            span.set_attribute(STUCK, detail)
        await ctx.emit(STUCK, {"agent": self.name, "iteration": k, "detail": detail})

    # -- guardrails -------------------------------------------------------------------------

    async def _guard_input(self, ctx: Context, scope: Scope, transcript: list[Message]) -> None:
        """Run the input guardrails on the latest user message; raise ``_Tripped`` when one
        trips (before any model call)."""
        guards = self._guards["input"]
        if not guards:
            return
        text = next((m.text for m in reversed(transcript) if m.role == "user"), "")
        verdict = await self._journaled(ctx, scope, 0, "guard_input", guards, [text])
        if verdict is not None:
            raise _Tripped(verdict, 0)

    async def _guard_reply(
        self,
        ctx: Context,
        scope: Scope,
        k: int,
        reply: Message,
        transcript: list[Message],
        new: list[Message],
    ) -> None:
        """Run the tool-call guardrails on a turn's calls (none of them runs when one trips),
        or the output guardrails on a final answer (which is then kept out of the transcript
        and the output)."""
        if reply.tool_calls:
            guards = self._guards["tool_call"]
            subjects: list[str | ToolCall] = list(reply.tool_calls)
        else:
            guards = self._guards["output"]
            subjects = [reply.text]
        if not guards:
            return
        verdict = await self._journaled(ctx, scope, k, "guard_reply", guards, subjects)
        if verdict is None:
            return
        if reply.tool_calls:
            why = f"Not run: guardrail {verdict.guardrail!r} tripped: {verdict.reason}"
            _skip_calls(reply.tool_calls, transcript, new, why)
        else:
            transcript.pop()
            new.pop()
        raise _Tripped(verdict, k + 1)

    async def _journaled(
        self,
        ctx: Context,
        scope: Scope,
        k: int,
        part: AgentPart,
        guards: tuple[Guardrail, ...],
        subjects: list[str | ToolCall],
    ) -> Tripwire | None:
        """The first tripwire of ``guards`` over ``subjects`` (in order), journaled so a
        resumed run replays the verdict instead of checking again."""

        async def check() -> dict[str, Any]:
            for subject in subjects:
                for guard in guards:
                    reason = await guard.verdict(subject)
                    if reason is not None:
                        call = subject if isinstance(subject, ToolCall) else None
                        wire = Tripwire(
                            guardrail=guard.name, kind=guard.kind, reason=reason, tool_call=call
                        )
                        return {"tripped": wire.model_dump(mode="json")}
            return {"tripped": None}

        found = await ctx.effects.once(agent_turn_key(scope, k, part), check, INSIDE)
        tripped = found.get("tripped") if isinstance(found, dict) else None
        if tripped is None:
            return None
        wire = Tripwire.model_validate(tripped)
        await self._tripped(ctx, k, wire)
        return wire

    async def _tripped(self, ctx: Context, k: int, wire: Tripwire) -> None:
        """Make a tripped guardrail visible: an attribute on the agent's span and an
        ``agent.tripped`` event in the run's stream."""
        span = current_span.get()
        if span is not None:
            span.set_attribute(TRIPPED, f"{wire.guardrail}: {wire.reason}")
        data = {"agent": self.name, "iteration": k, **wire.model_dump(mode="json")}
        await ctx.emit(TRIPPED, data)

    # -- tool calls -------------------------------------------------------------------------

    def _tool_set(self, journaled: bool | None = None) -> ToolSet:
        """What this run's tool calls run against, read from the agent as it is now
        (``journaled``: whether the run has a thread, when the caller knows)."""
        return ToolSet(
            by_name=self._callable,
            handler=self._tool_handler,
            agent=self.name,
            concurrency=self.tool_concurrency,
            approvals=self._approvals,
            on_thread=journaled,
        )

    async def _innermost_tool(self, request: ToolRequest) -> Any:
        return await call_with_timeout(request, self.tool_timeout)


#: The event (and span attribute) a tripped guardrail emits.
TRIPPED = "agent.tripped"


class _Tripped(Exception):
    """A guardrail tripped: the loop stops with ``status="tripped"``."""

    def __init__(self, tripwire: Tripwire, iteration: int) -> None:
        super().__init__(tripwire.reason)
        self.tripwire = tripwire
        self.iteration = iteration
        self.detail = (
            f"guardrail {tripwire.guardrail!r} ({tripwire.kind}) tripped: {tripwire.reason}"
        )


class _Plan:
    """Who runs the conversation in this run and what they are offered: the active agent,
    the tools its calls run against, the handoffs so far (``routing``: ``None`` when the
    agent hands off to nobody), the tools its searches loaded (``search``: ``None`` without
    deferred tools). The loop reads these per turn instead of asking each feature."""

    __slots__ = ("active", "journaled", "routing", "search", "tools")

    def __init__(
        self, routing: Routing | None, agent: Agent, transcript: list[Message], journaled: bool
    ) -> None:
        self.routing = routing
        self.journaled = journaled
        self.become(agent if routing is None else routing.active, transcript)

    def become(self, agent: Agent, transcript: list[Message]) -> None:
        self.active = agent
        self.tools = agent._tool_set(self.journaled)
        self.search = ToolSearch(agent._deferred, transcript) if agent._deferred else None


def _held_back(item: object) -> bool:
    """Whether ``item`` is a toolset that is not simply offered: one with a ``when`` or a
    deferred one."""
    return isinstance(item, Toolset) and (item.enabled is not None or item.deferred)


class _Shown(NamedTuple):
    """How many messages of this run the state already shows (written when the run suspended
    earlier in this superstep), and how many suspensions recorded that (the next one's index)."""

    size: int
    recorded: int


_NOT_SHOWN = _Shown(0, 0)


def _waits_on_tools(message: Message) -> bool:
    """Whether ``message`` is a turn whose tool calls wait (the last message a suspension in
    the tool phase shows; a resumed run looks for what it showed only after one)."""
    return message.role == "assistant" and bool(message.tool_calls)


async def _shown_before(ctx: Context, scope: Scope, history: list[Message]) -> _Shown:
    """What this superstep's earlier suspensions wrote to ``messages``, if the history still
    ends with it (an edit of the state in between leaves the history as it is)."""
    entries: list[tuple[int, str]] = []
    while True:
        found, entry = await ctx.effects.peek(agent_shown_key(scope, len(entries)))
        if not found:
            break
        entries.append((int(entry[0]), str(entry[1])))
    for count, fingerprint in reversed(entries):
        if 0 < count <= len(history) and digest(history[len(history) - count :]) == fingerprint:
            return _Shown(count, len(entries))
    return _Shown(0, len(entries))


async def _record_shown(ctx: Context, scope: Scope, shown: _Shown, new: list[Message]) -> None:
    """Journal what a suspension shows, so the resumed run tells it from the history."""
    await ctx.effects.record(agent_shown_key(scope, shown.recorded), [len(new), digest(new)])


def _with_call_ids(message: Message, k: int) -> Message:
    """Give tool calls without an id a deterministic one (some APIs omit them)."""
    for call in message.tool_calls:  # a loop, not all(<genexpr>): this runs every turn
        if not call.id:
            break
    else:
        return message
    calls = [
        call if call.id else call.model_copy(update={"id": f"call_{k}_{i}"})
        for i, call in enumerate(message.tool_calls)
    ]
    return message.model_copy(update={"tool_calls": calls})


async def _steered(ctx: Context, scope: Scope, k: int, inbox: SteeringInbox) -> list[Message]:
    """The steering messages sent to the run since the last model call, as user messages.

    A take that found something is journaled under the call's key (committed before the
    model call starts) and only then marked taken in the run's record, so a resumed run
    replays the same messages here and never takes them again later. An empty take, the
    common case, is not journaled: on a replay, a call whose model result is in the journal
    without a take before it took nothing (a message that came later waits for a later call),
    and a call with neither was never made, so it takes afresh. ``inbox`` is the run's
    (:func:`~tensorsketch.steering.current_inbox`, read once per run: a run outside a runner
    has none and never calls this).
    """
    key = agent_turn_key(scope, k, "steer")
    effects = ctx.effects
    found, taken = await effects.peek(key)
    if not found:
        taken = await inbox.pending()
        if not taken:
            return []
        passed, _ = await effects.peek(agent_turn_key(scope, k, "model"))
        if passed:  # replaying a call that took nothing: these came after it
            return []
        await effects.record(key, taken)
    if not taken:
        return []  # an empty take journaled before empty takes went unjournaled
    await inbox.taken(taken)
    return [user(str(m.get("content", ""))) for m in taken]


def _name_span(agent: str) -> None:
    """Name the agent on its node span (OTel: ``invoke_agent {name}``)."""
    node_span = current_span.get()
    if node_span is not None:
        node_span.set_attribute(ATTR_AGENT_NAME, agent)


async def _run_with_handoffs(
    ctx: Context, active: Agent, tools: ToolSet, reply: Message, k: int, scope: Scope
) -> list[Message]:
    """A turn's tool calls when handoffs are possible: at most one handoff per turn (the
    first; the others are answered as not made), every other call as usual."""
    names = {h.tool_name for h in active.handoffs}
    calls = reply.tool_calls
    transfers = [c for c in calls if c.name in names]
    if len(transfers) < 2:
        return await run_tool_calls(ctx, tools, calls, k, scope)
    first = transfers[0]
    refused = {
        c.id: tool_result(
            c, f"Not run: this turn already hands off with {first.name!r}.", is_error=True
        )
        for c in transfers[1:]
    }
    kept = [c for c in calls if c.id not in refused]
    done = iter(await run_tool_calls(ctx, tools, kept, k, scope))
    return [refused[c.id] if c.id in refused else next(done) for c in calls]


_NOT_RUN_BUDGET = "Not run: the run's budget is spent."
_NOT_RUN_STUCK = "Not run: the same call was asked for too many times in a row."


def _skip_calls(
    calls: list[ToolCall], transcript: list[Message], new: list[Message], why: str
) -> None:
    """Answer tool calls the run will not make, so the transcript stays well formed."""
    for call in calls:
        skipped = tool_result(call, why, is_error=True)
        transcript.append(skipped)
        new.append(skipped)
