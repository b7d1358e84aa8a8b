"""Agents: the durable model-and-tools loop as one node, and the single-call ``Llm`` node.

- :class:`Agent` (``loop``) — the loop: model turn, tools, repeat, every call journaled.
- :func:`create_agent` (``factory``) — one ``Agent`` in a compiled graph over
  :class:`AgentState` (``state``).
- :func:`decompose` / :func:`decomposed_agent` (``decomposed``) — the same loop drawn out as
  a ``model`` node and a ``tools`` node in a cycle, over :class:`LoopState`.
- :class:`Llm` (``llm``) — one model call as a node, with structured-output repair.
- ``tool_calls`` — one turn's tool calls: approval, deferral, the journaled call, the
  answer the model reads.
- ``turn`` — the model turn (middleware, fallbacks, the schema check) and the one
  structured-output repair loop ``Llm`` and ``generate_structured`` share.
- ``context`` — :class:`ContextPolicy`: requests kept under a token budget (and the
  :class:`Compaction` point a summary leaves in the state).
- ``memory_tools`` — :func:`memory_tools`: remember / recall / forget over ``ctx.memory``.
- ``memory_hydration`` — :class:`MemoryHydration`: what memory knows, in each prompt.
- ``memory_write_back`` — :class:`MemoryWriteBack`: what a finished turn taught, into memory.
- ``session_history`` — :class:`SessionHistory`: a user's conversation across threads.
- ``handoffs`` — :func:`handoff`: an agent passes the conversation to another
  (``handoffs=[...]``), with input filters :func:`without_tools` and :func:`keep_last`.
- ``output_modes`` — :data:`OutputMode`: how an ``output_schema`` answer is asked for
  (``auto``, ``native``, ``tool``, ``prompted``).
- ``options`` — :class:`AgentOptions`, the options ``Agent`` and ``create_agent`` share.

Import the public names from here (or from ``tensorsketch``); the submodules are internal.
"""

from __future__ import annotations

from tensorsketch.agents.context import (
    POLICY_FAILED,
    Compaction,
    ContextPolicy,
    estimate_tokens,
    trim_messages,
)
from tensorsketch.agents.decomposed import LoopState, decompose, decomposed_agent
from tensorsketch.agents.factory import create_agent
from tensorsketch.agents.handoffs import Handoff, handoff, keep_last, without_tools
from tensorsketch.agents.llm import Llm
from tensorsketch.agents.loop import Agent
from tensorsketch.agents.memory_hydration import MemoryHydration
from tensorsketch.agents.memory_tools import memory_tools
from tensorsketch.agents.memory_write_back import MemoryWriteBack
from tensorsketch.agents.options import AgentOptions
from tensorsketch.agents.output_modes import OutputMode
from tensorsketch.agents.session_history import SessionHistory
from tensorsketch.agents.state import AgentState, AgentStatus

__all__ = [
    "POLICY_FAILED",
    "Agent",
    "AgentOptions",
    "AgentState",
    "AgentStatus",
    "Compaction",
    "ContextPolicy",
    "Handoff",
    "Llm",
    "LoopState",
    "MemoryHydration",
    "MemoryWriteBack",
    "OutputMode",
    "SessionHistory",
    "create_agent",
    "decompose",
    "decomposed_agent",
    "estimate_tokens",
    "handoff",
    "keep_last",
    "memory_tools",
    "trim_messages",
    "without_tools",
]

# The public home of these names, as before ``agents`` was a package: checkpoint tags,
# pickles and reprs keep naming ``tensorsketch.agents``, so data written by either version
# loads in the other. (``AgentState``'s annotations are real objects, not strings, so
# ``typing.get_type_hints`` does not depend on its module.)
for _obj in (Agent, AgentState, Compaction, Llm, create_agent):
    _obj.__module__ = __name__
del _obj
