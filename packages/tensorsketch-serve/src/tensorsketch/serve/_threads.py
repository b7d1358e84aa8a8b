"""Where a conversation stands on its durable thread, for protocols that continue one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tensorsketch.agents import Agent
from tensorsketch.interrupts import RunInfo, run_info

if TYPE_CHECKING:
    from tensorsketch.pregel.compiled import CompiledGraph
    from tensorsketch.runtime.backends.base import Backend

__all__ = ["approval_tools", "may_suspend", "thread_info"]


async def thread_info(
    graph: CompiledGraph[Any], thread_id: str, backend: Backend
) -> tuple[Any, RunInfo] | None:
    """``(state, run info)`` of the thread's latest checkpoint, or ``None`` for a new thread.

    ``info.suspended`` / ``info.interrupts`` say whether the next request must carry decisions
    (``resume=``) rather than a new turn.
    """
    state = await graph.aget_state(thread_id, backend)
    if state is None:
        return None
    return state, run_info(state)


def approval_tools(graph: CompiledGraph[Any]) -> frozenset[str]:
    """The names of the tools of ``graph``'s agents whose calls wait for a person."""
    names: set[str] = set()
    for spec in graph.spec.nodes.values():
        if isinstance(spec.node, Agent):
            names |= spec.node.approval_tools
    return frozenset(names)


def may_suspend(graph: CompiledGraph[Any]) -> bool:
    """Whether a run of ``graph`` can be expected to stop and wait, so that a one-shot request
    needs a durable thread to be continued on.

    An agent node waits when one of its tools needs approval; any other node may call
    ``interrupt()``, so it counts as one that waits. (A tool that defers with ``RetryLater``,
    or a sub-agent's approvals, are not seen from here: such graphs need a conversation id.)
    """
    for spec in graph.spec.nodes.values():
        node = spec.node
        if not isinstance(node, Agent) or node.approval_tools:
            return True
    return False
