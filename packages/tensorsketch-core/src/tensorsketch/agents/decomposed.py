"""The agent loop as a graph you can see: a ``model`` node and a ``tools`` node in a cycle.

:func:`create_agent` runs the model → tools cycle inside one node: one superstep, one
checkpoint per run, the fastest form. :func:`decompose` builds the same loop as a graph of
two nodes — ``model`` (one model turn: opening, guardrails, budget, stuck check) and
``tools`` (one turn's tool calls: approvals, timeouts, middleware) — routed by a conditional
edge back and forth, so each turn is a node of the graph: a span in the trace, an event in
the stream and a checkpoint in the thread's history. Add it to another graph as a subgraph
node (``Graph.add(decompose(agent))``) to see the cycle inside that graph's runs.

Both forms share the loop's own code (:class:`~tensorsketch.agents.Agent`'s model step,
guardrails and stuck watch, and :func:`~tensorsketch.agents.tool_calls.run_tool_calls`), so
approvals, guardrails, budgets and journaling behave the same and a scripted model gets the
same transcript either way. What differs is where the journal keys live (each turn in its own
superstep, not iterations of one) and the cost of a superstep per turn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from pydantic import Field

from tensorsketch._fastmodel import fast_constructor
from tensorsketch.agents.context import Compaction
from tensorsketch.agents.loop import (
    _NOT_RUN_BUDGET,
    _NOT_RUN_STUCK,
    Agent,
    _last_text,
    _skip_calls,
    _Tripped,
    _with_call_ids,
)
from tensorsketch.agents.options import check_deps
from tensorsketch.agents.state import AgentState, AgentStatus
from tensorsketch.agents.stuck import RepeatWatch
from tensorsketch.agents.tool_calls import run_tool_calls
from tensorsketch.budget import Budget, budget_scope, current_budget
from tensorsketch.constants import END, START
from tensorsketch.context import Context
from tensorsketch.effect_keys import Scope
from tensorsketch.graph import Graph
from tensorsketch.guardrails import Tripwire
from tensorsketch.interrupts import Interrupt, PendingInterrupt
from tensorsketch.messages import Message, user
from tensorsketch.node import Node
from tensorsketch.observability.tracing import ATTR_AGENT_NAME, current_span
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.provider import ChatProvider, Completion, Usage
from tensorsketch.schema import Schema
from tensorsketch.tools import Tool

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from typing import Unpack

    from tensorsketch.agents.options import AgentOptions
    from tensorsketch.events import Event

__all__ = ["DecomposedLoop", "LoopState", "decompose", "decomposed_agent"]

#: The node names of the decomposed loop.
MODEL = "model"
TOOLS = "tools"


class LoopState(AgentState):
    """:class:`AgentState` plus where the loop stands between its supersteps (private to the
    loop: a parent graph that adds it as a subgraph node never sees these).

    :ivar turn: the next model call's index in this run of the loop (0: a fresh run).
    :ivar route: where the last node sends the loop: ``"model"``, ``"tools"`` or ``END``.
    :ivar priced_cost_usd: / :ivar unpriced: the budget's spending so far in this run.
    """

    turn: int = 0
    route: str = ""
    priced_cost_usd: float = 0.0
    unpriced: list[str] = Field(default_factory=list)


class _Spent(Schema):
    """What the loop has spent so far in this run (read by both nodes)."""

    turn: int = 0
    usage: Usage = Field(default_factory=Usage)
    priced_cost_usd: float = 0.0
    unpriced: list[str] = Field(default_factory=list)


class _Step(Schema):
    """Everything a turn of the loop may write (only what it sets is written)."""

    messages: list[Message] = Field(default_factory=list)
    output: str = ""
    parsed: Any = None
    status: AgentStatus = "idle"
    pending: list[PendingInterrupt] = Field(default_factory=list)
    iterations: int = 0
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = None
    stop_detail: str = ""
    compaction: Compaction | None = None
    tripwire: Tripwire | None = None
    turn: int = 0
    route: str = ""
    priced_cost_usd: float = 0.0
    unpriced: list[str] = Field(default_factory=list)


#: ``_Step``'s defaults, and a constructor from a full set of trusted values.
_STEP_DEFAULTS: dict[str, Any] = _Step().__dict__
_make_step = fast_constructor(_Step)


def _step(values: dict[str, Any]) -> _Step:
    """A turn's writes as ``_Step`` without validating them again (every value already has
    its field's type): only the fields in ``values`` count as set, so only they are written.
    ``model_construct`` costs several times more, on every turn."""
    step = _make_step({**_STEP_DEFAULTS, **values})
    object.__setattr__(step, "__pydantic_fields_set__", set(values))
    return step


class _LoopNode(Node):
    """A node of the decomposed loop: it runs ``agent``'s own code for its part."""

    Out = _Step

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def _budget(self, inp: _Spent) -> Budget:
        """The run's budget as the earlier turns left it (a fresh one on a fresh run)."""
        agent = self.agent
        budget = Budget(
            max_total_tokens=agent.max_total_tokens,
            max_cost_usd=agent.max_cost_usd,
            prices=agent.prices,
            parent=current_budget(),
        )
        if inp.turn:
            # Set, not charged: the enclosing budget was charged when those calls ran.
            budget.usage = inp.usage
            budget.priced_cost_usd = inp.priced_cost_usd
            budget.unpriced = set(inp.unpriced)
            budget.calls = inp.turn
        return budget

    def _name_span(self) -> None:
        span = current_span.get()
        if span is not None:
            span.set_attribute(ATTR_AGENT_NAME, self.agent.name)

    def _end(
        self,
        transcript: list[Message],
        new: list[Message],
        budget: Budget,
        iterations: int,
        status: AgentStatus,
        **more: Any,
    ) -> _Step:
        """The last turn's writes: the answer and the report, as the one-node loop's."""
        out: dict[str, Any] = {
            "messages": new,
            "output": "" if more.get("tripwire") is not None else _last_text(transcript),
            "status": status,
            "pending": [],
            "iterations": iterations,
            "usage": budget.usage,
            "cost_usd": budget.cost_usd,
            "stop_detail": more.pop("detail", ""),
            "turn": 0,
            "route": END,
            "priced_cost_usd": 0.0,
            "unpriced": [],
        }
        agent = self.agent
        if agent.output_schema is not None:
            out["parsed"] = more.pop("parsed", None)
        if agent.guardrails:
            out["tripwire"] = more.pop("tripwire", None)
        out.update(more)
        return _step(out)

    @staticmethod
    def _going(route: str, new: list[Message], budget: Budget, turn: int, **more: Any) -> _Step:
        """A turn's writes when the loop goes on."""
        return _step(
            {
                "messages": new,
                "turn": turn,
                "route": route,
                "usage": budget.usage,
                "priced_cost_usd": budget.priced_cost_usd,
                "unpriced": sorted(budget.unpriced),
                **more,
            }
        )


class ModelStep(_LoopNode):
    """One model turn of the loop (and, on a fresh run, its opening and input guardrails)."""

    class In(_Spent):
        query: str = ""
        messages: list[Message] = Field(default_factory=list)
        compaction: Compaction | None = None

    async def run(self, ctx: Context, inp: In) -> _Step:
        agent = self.agent
        self._name_span()
        k = inp.turn
        history = list(inp.messages)
        if k == 0:
            if agent.deps_type is not None:
                check_deps(ctx, agent.deps_type, agent.name)
            transcript, new = agent._opening(inp, history)
        else:
            transcript, new = history, []
        budget = self._budget(inp)
        scope = Scope.of(ctx)
        point = inp.compaction if agent._keeps_compaction else None
        keeps = {"compaction": point} if agent._keeps_compaction else {}
        with budget_scope(budget):
            try:
                if k == 0:
                    await agent._guard_input(ctx, scope, transcript)
                exceeded = budget.exceeded()
                if exceeded is not None:
                    return self._end(
                        transcript, new, budget, k, "budget_exceeded", detail=str(exceeded), **keeps
                    )
                watch = RepeatWatch(agent.stuck_after, transcript)
                outcome, point = await agent._model_step(ctx, transcript, k, scope, point)
                keeps = {"compaction": point} if agent._keeps_compaction else {}
                completion: Completion = outcome["completion"]
                budget.charge(completion.usage, completion.model or agent.provider.model)
                reply = _with_call_ids(completion.message, k)
                repair = outcome.get("repair")
                if repair:
                    for message in (reply, user(repair)):
                        transcript.append(message)
                        new.append(message)
                    if k + 1 == agent.max_iterations:
                        detail = f"stopped after {k + 1} calls"
                        return self._end(
                            transcript, new, budget, k + 1, "max_iterations", detail=detail, **keeps
                        )
                    return self._going(MODEL, new, budget, k + 1, **keeps)
                transcript.append(reply)
                new.append(reply)
                exceeded = budget.exceeded()
                if exceeded is not None:
                    _skip_calls(reply.tool_calls, transcript, new, _NOT_RUN_BUDGET)
                    return self._end(
                        transcript,
                        new,
                        budget,
                        k + 1,
                        "budget_exceeded",
                        detail=str(exceeded),
                        **keeps,
                    )
                if agent.guardrails:
                    await agent._guard_reply(ctx, scope, k, reply, transcript, new)
                if not reply.tool_calls:
                    parsed = completion.parsed
                    return self._end(
                        transcript, new, budget, k + 1, "completed", parsed=parsed, **keeps
                    )
                repeated = watch.add(reply)
                if repeated is not None:
                    _skip_calls(reply.tool_calls, transcript, new, _NOT_RUN_STUCK)
                    await agent._stuck(ctx, k, repeated)
                    return self._end(
                        transcript, new, budget, k + 1, "stuck", detail=repeated, **keeps
                    )
                return self._going(TOOLS, new, budget, k + 1, **keeps)
            except _Tripped as tripped:
                return self._end(
                    transcript,
                    new,
                    budget,
                    tripped.iteration,
                    "tripped",
                    detail=tripped.detail,
                    tripwire=tripped.tripwire,
                    **keeps,
                )


class ToolStep(_LoopNode):
    """One turn's tool calls: the calls of the model's last reply, answered in call order."""

    class In(_Spent):
        messages: list[Message] = Field(default_factory=list)

    async def run(self, ctx: Context, inp: In) -> _Step:
        agent = self.agent
        self._name_span()
        transcript = list(inp.messages)
        reply = transcript[-1]
        k = inp.turn - 1
        budget = self._budget(inp)
        with budget_scope(budget):
            try:
                results = await run_tool_calls(
                    ctx,
                    agent._tool_set(),
                    reply.tool_calls,
                    k,
                    Scope.of(ctx),
                )
            except Interrupt as exc:
                writes = {
                    "status": "suspended",
                    "pending": list(exc.pending),
                    "iterations": k + 1,
                    "usage": budget.usage,
                    "cost_usd": budget.cost_usd,
                }
                raise Interrupt(pending=exc.pending, writes=writes) from None
        transcript.extend(results)
        if k + 1 == agent.max_iterations:
            detail = (
                f"reached max_iterations={agent.max_iterations} with tool results "
                "the model has not seen; the output is the latest assistant text."
            )
            return self._end(transcript, results, budget, k + 1, "max_iterations", detail=detail)
        return self._going(MODEL, results, budget, k + 1)


class DecomposedLoop(CompiledGraph[LoopState]):
    """The compiled decomposed loop: a graph whose runs may take two supersteps per turn.

    ``max_steps`` defaults to what ``max_iterations`` turns need (``2 * max_iterations``, at
    least the engine's 25) on ``invoke`` and ``stream``, and as a subgraph node, so the agent's
    own limit is what stops it, as in :func:`create_agent`.
    """

    def __init__(self, graph: CompiledGraph[LoopState], max_iterations: int) -> None:
        super().__init__(graph.spec)
        self.loop_steps = max(25, 2 * max_iterations)

    async def invoke(self, *args: Any, **options: Any) -> LoopState:
        options.setdefault("max_steps", self.loop_steps)
        return await super().invoke(*args, **options)

    async def stream(self, *args: Any, **options: Any) -> AsyncIterator[Event]:
        options.setdefault("max_steps", self.loop_steps)
        async for event in super().stream(*args, **options):
            yield event

    async def run_inside(self, *args: Any, max_steps: int, **options: Any) -> Any:
        return await super().run_inside(*args, max_steps=max(max_steps, self.loop_steps), **options)


def _after_model(state: LoopState) -> str:
    return state.route


def _after_tools(state: LoopState) -> str:
    return state.route


def decompose(agent: Agent) -> DecomposedLoop:
    """``agent``'s loop as a compiled graph of a ``model`` node and a ``tools`` node.

    It takes and returns what :func:`create_agent`'s graph does (:class:`LoopState` is an
    :class:`AgentState`), and runs the agent's own turn and tool-call code, so its transcript
    is ``create_agent``'s. The graph is named after the agent: ``Graph.add(decompose(agent))``
    makes it a subgraph node of that name.
    """
    if not isinstance(agent, Agent):
        msg = f"decompose() takes an Agent (tensorsketch.agents.Agent), got {type(agent).__name__}."
        raise TypeError(msg)
    if (agent.input_key, agent.output_key) != ("query", "output"):
        msg = (
            f"decompose() runs over AgentState's fields, but agent {agent.name!r} has "
            f"input_key={agent.input_key!r}, output_key={agent.output_key!r}; build it with "
            "the default keys (map the fields with Graph.add(..., inputs=, outputs=) when "
            "the decomposed graph is a subgraph node)."
        )
        raise ValueError(msg)
    graph = Graph(LoopState, name=agent.name)
    graph.add(ModelStep(agent), name=MODEL).add(ToolStep(agent), name=TOOLS)
    graph.edge(START, MODEL)
    graph.conditional(MODEL, _after_model, [MODEL, TOOLS, END])
    graph.conditional(TOOLS, _after_tools, [MODEL, END])
    return DecomposedLoop(graph.compile(), agent.max_iterations)


def decomposed_agent(
    provider: ChatProvider,
    tools: Iterable[Tool | Callable[..., Any]] = (),
    **options: Unpack[AgentOptions],
) -> DecomposedLoop:
    """:func:`create_agent` with its loop drawn out: the same options, the same transcript,
    a ``model`` node and a ``tools`` node per turn (see :func:`decompose`)."""
    return decompose(Agent._build("decomposed_agent()", provider, tools, options))
