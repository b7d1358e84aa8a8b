"""``AgentState``: the state of a :func:`~tensorsketch.agents.create_agent` graph.

No ``from __future__ import annotations`` here: ``AgentState`` is published as
``tensorsketch.agents.AgentState`` (its ``__module__``), so its annotations must not be
strings that ``typing.get_type_hints`` would look up in that other module.
"""

from typing import Annotated, Any, Literal

from pydantic import Field

from tensorsketch.agents.context import Compaction
from tensorsketch.channels import Reducer
from tensorsketch.guardrails import Tripwire
from tensorsketch.interrupts import PendingInterrupt
from tensorsketch.messages import Message, add_messages
from tensorsketch.provider import Usage
from tensorsketch.schema import Schema

__all__ = ["REPORT_FIELDS", "AgentState", "AgentStatus"]

AgentStatus = Literal[
    "idle", "completed", "max_iterations", "budget_exceeded", "stuck", "tripped", "suspended"
]


class AgentState(Schema):
    """The state of a :func:`create_agent` graph.

    :ivar query: the user's request (appended to ``messages`` as a user turn).
    :ivar messages: the transcript: system, user, assistant and tool messages.
    :ivar output: the final answer's text (the latest assistant text when a limit stopped
        the loop).
    :ivar parsed: the validated ``output_schema`` instance, when the agent has one.
    :ivar status: ``completed`` (the model answered), ``max_iterations`` or
        ``budget_exceeded`` (a limit stopped it; ``output`` is the best answer so far),
        ``stuck`` (the model asked for the same tool calls ``stuck_after`` times in a row;
        ``stop_detail`` names them), ``tripped`` (a guardrail stopped it: ``tripwire`` says
        which and why), or ``suspended`` (waiting on ``pending``: approvals,
        questions or a timer).
    :ivar iterations: model calls made by the last run of the loop.
    :ivar usage: tokens spent by the last run of the loop, sub-agents included.
    :ivar cost_usd: its estimated cost, ``None`` when a model used is not in the price table.
    :ivar stop_detail: why a limit (or a stuck loop) stopped the loop, in words.
    :ivar tripwire: the :class:`~tensorsketch.guardrails.Tripwire` of the guardrail that
        stopped the run (``status="tripped"``), else ``None``.
    :ivar active_agent: the agent holding the conversation (written by agents with
        ``handoffs``): the one the last handoff went to, else the agent itself.
    :ivar compaction: where a summarizing ``context_policy`` left the requests compacted
        (:class:`~tensorsketch.agents.Compaction`), so later turns reuse its summary.
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
    compaction: Compaction | None = None
    tripwire: Tripwire | None = None
    active_agent: str = ""


#: The fields ``Agent(report=True)`` writes besides ``messages`` and the output.
REPORT_FIELDS: dict[str, Any] = {
    "parsed": (Any, None),
    "status": (AgentStatus, "idle"),
    "pending": (list[PendingInterrupt], Field(default_factory=list)),
    "iterations": (int, 0),
    "usage": (Usage, Field(default_factory=Usage)),
    "cost_usd": (float | None, None),
    "stop_detail": (str, ""),
}
