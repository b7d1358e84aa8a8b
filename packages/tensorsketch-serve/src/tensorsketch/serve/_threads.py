"""Where a conversation stands on its durable thread, for protocols that continue one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tensorsketch.interrupts import RunInfo, run_info

if TYPE_CHECKING:
    from tensorsketch.compiled import CompiledGraph
    from tensorsketch.runtime.backends.base import Backend

__all__ = ["thread_info"]


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
