"""``create_agent``: one :class:`Agent` in a ready-made graph over :class:`AgentState`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from tensorsketch.agents.loop import Agent
from tensorsketch.agents.state import AgentState
from tensorsketch.constants import END, START
from tensorsketch.graph import Graph
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.provider import ChatProvider
from tensorsketch.tools import Tool
from tensorsketch.toolsets import Toolset

if TYPE_CHECKING:
    from typing import Unpack

    from tensorsketch.agents.options import AgentOptions

__all__ = ["create_agent"]


def create_agent(
    provider: ChatProvider,
    tools: Iterable[Tool | Callable[..., Any] | Toolset] = (),
    **options: Unpack[AgentOptions],
) -> CompiledGraph[AgentState]:
    """An agent as a normal compiled graph over :class:`AgentState`.

    ``await agent.invoke({"query": ...})`` returns the final state: ``output`` is the answer,
    ``messages`` the transcript, ``status`` how it ended. Add ``thread_id=`` and ``backend=``
    to make it durable. The options are :class:`Agent`'s (:class:`AgentOptions`: ``system``,
    ``max_iterations``, ``middleware``, ``max_total_tokens``, ``max_cost_usd``, ``prices``,
    ``fallbacks``, ``tool_concurrency``, ``tool_timeout``, ``output_schema``, ``name``,
    ``max_tokens``, ``model_options``, ``context_policy``, ``deps_type``, ``stuck_after``,
    ``guardrails``, ``handoffs``, ``output_mode``). ``tools`` may hold toolsets
    (:class:`~tensorsketch.Toolset`) next to single tools.
    Tools and middleware read the dependencies passed as ``invoke(..., deps=...)`` as ``ctx.deps``.
    """
    node = Agent._build("create_agent()", provider, tools, options)
    name = node.name
    graph = Graph(AgentState, name=name).add(node).edge(START, name).edge(name, END)
    return graph.compile()
