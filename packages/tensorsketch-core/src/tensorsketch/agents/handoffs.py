"""Handoffs: one agent passes the conversation to another, which carries on with it.

An agent built with ``handoffs=[...]`` offers the model one ``transfer_to_<name>`` tool per
receiver. When the model calls one (an ordinary tool call: journaled, approved when the
handoff ``requires_approval``, checked by tool-call guardrails, run through the middleware),
the loop goes on with the receiver's instructions, tools, middleware, guardrails and output
schema — the same run, the same transcript, the same budget and iteration count.

The transcript itself records every handoff: the transfer tool's answer is a fixed text, so
the loop finds who is in charge by reading the messages (:class:`Routing`). Nothing else has
to be stored for a resumed, replayed or later run of the thread to continue with the right
agent, and ``get_state`` shows the handoff as a tool call and its answer (``active_agent``
names who holds the conversation).

An ``input_filter`` decides what the receiver's model sees of the conversation before the
handoff (it gets those messages without the system prompt and returns the ones to send;
the receiver's own system prompt goes first). The transcript keeps everything; the filter
is applied again on every later turn, so it must be a pure function of its input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tensorsketch.messages import Message, system
from tensorsketch.tools import Tool

if TYPE_CHECKING:
    from tensorsketch.agents.loop import Agent

__all__ = [
    "HANDOFF",
    "Handoff",
    "InputFilter",
    "Routing",
    "handoff",
    "keep_last",
    "team_of",
    "without_tools",
]

#: What the receiver's model is shown of the conversation before a handoff.
InputFilter = Callable[[list[Message]], list[Message]]

#: The event (and span attribute) a handoff emits.
HANDOFF = "agent.handoff"


@dataclass(frozen=True, slots=True)
class Handoff:
    """A way for an agent to pass the conversation to another agent.

    Build one with :func:`handoff`; a bare agent in ``handoffs=[...]`` is ``handoff(agent)``.

    :ivar target: the receiving agent (an :class:`Agent`), or its ``name`` when it is only
        reachable later (a handoff back to an agent built after this one).
    :ivar tool_name: the tool the model calls to hand off (``transfer_to_<name>``).
    :ivar description: what the model reads about when to hand off.
    :ivar input_filter: what the receiver's model sees of the conversation so far.
    :ivar requires_approval: a person approves each handoff before it happens.
    """

    target: Agent | str
    tool_name: str
    description: str
    input_filter: InputFilter | None = None
    requires_approval: bool = False

    @property
    def target_name(self) -> str:
        return self.target if isinstance(self.target, str) else self.target.name

    def answer(self) -> str:
        """The transfer tool's answer: fixed, so the transcript says a handoff happened."""
        return f"Transferred to {self.target_name}; {self.target_name} continues from here."

    def as_tool(self) -> Tool:
        answer = self.answer()

        def transfer(args: dict[str, Any]) -> str:
            return answer

        return Tool.from_schema(
            self.tool_name,
            self.description,
            {"type": "object", "properties": {}},
            transfer,
            requires_approval=self.requires_approval,
        )


def handoff(
    target: Any,
    *,
    tool_name: str | None = None,
    description: str | None = None,
    input_filter: InputFilter | None = None,
    requires_approval: bool = False,
) -> Handoff:
    """A handoff to ``target``: an :class:`Agent`, a :func:`create_agent` graph, or the
    ``name`` of an agent that is reachable from the one running (for a handoff back).

    :param tool_name: the transfer tool's name (default ``transfer_to_<name>``).
    :param description: when the model should hand off (default: a sentence naming the
        receiver).
    :param input_filter: ``(messages) -> messages`` — what the receiver's model sees of the
        conversation before the handoff (e.g. :func:`without_tools`, :func:`keep_last`).
    :param requires_approval: suspend the run before each such handoff until a person
        approves it, as for a tool with ``requires_approval``.
    """
    agent = _agent_of(target)
    name = agent if isinstance(agent, str) else agent.name
    if input_filter is not None and not callable(input_filter):
        msg = (
            f"handoff({name!r}, input_filter=...) must be a function taking and returning a "
            f"list of messages, got {input_filter!r}."
        )
        raise TypeError(msg)
    return Handoff(
        target=agent,
        tool_name=tool_name if tool_name is not None else f"transfer_to_{name}",
        description=description
        if description is not None
        else f"Hand the conversation over to the {name!r} agent, which continues it.",
        input_filter=input_filter,
        requires_approval=requires_approval,
    )


def _agent_of(target: Any) -> Agent | str:
    from tensorsketch.agents.loop import Agent  # noqa: PLC0415 - loop imports this module

    if isinstance(target, (Agent, str)):
        return target
    spec = getattr(target, "spec", None)
    nodes = getattr(spec, "nodes", None)
    if isinstance(nodes, Mapping):
        agents = [s.node for s in nodes.values() if isinstance(s.node, Agent)]
        if len(agents) == 1:
            return agents[0]
    msg = (
        "a handoff goes to an Agent, a create_agent(...) graph (one agent) or an agent's "
        f"name, got {target!r}."
    )
    raise TypeError(msg)


def as_handoffs(items: Iterable[Any], owner: str) -> tuple[Handoff, ...]:
    """``handoffs=[...]`` as :class:`Handoff` objects, their tool names unique."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        msg = (
            f"agent {owner!r}: `handoffs` must be a list of agents or handoff(...), got {items!r}."
        )
        raise TypeError(msg)
    result: list[Handoff] = []
    seen: set[str] = set()
    for item in items:
        made = item if isinstance(item, Handoff) else handoff(item)
        if made.tool_name in seen:
            msg = (
                f"agent {owner!r} has two handoffs named {made.tool_name!r}; give one "
                "`handoff(..., tool_name=...)`."
            )
            raise ValueError(msg)
        seen.add(made.tool_name)
        result.append(made)
    return tuple(result)


def team_of(root: Agent) -> tuple[dict[str, Agent], list[str]]:
    """Every agent reachable from ``root`` through handoffs, by name, and the names handoffs
    point at that none of them has (a problem only when ``root`` runs).

    Raises ``ValueError`` when two different agents share a name.
    """
    team: dict[str, Agent] = {}
    wanted: list[str] = []
    todo: list[Agent] = [root]
    while todo:
        agent = todo.pop()
        known = team.get(agent.name)
        if known is agent:
            continue
        if known is not None:
            msg = (
                f"two different agents reachable through handoffs are named {agent.name!r}; "
                "give each its own `name=`."
            )
            raise ValueError(msg)
        team[agent.name] = agent
        for item in agent.handoffs:
            if isinstance(item.target, str):
                wanted.append(item.target)
            else:
                todo.append(item.target)
    return team, sorted({name for name in wanted if name not in team})


@dataclass(slots=True)
class _Point:
    """A handoff found in the transcript: taken, and how many non-system messages came
    before the receiver's part."""

    taken: Handoff
    at: int


class Routing:
    """Who holds the conversation, and what their model is sent, read from the transcript.

    Built once per run from the messages so far; the loop tells it each turn's tool results
    (:meth:`after`) and asks it for each request (:meth:`request`).
    """

    __slots__ = ("_body", "_prefix", "_tail_from", "active", "points", "team")

    def __init__(self, root: Agent, team: Mapping[str, Agent], transcript: list[Message]) -> None:
        self.team = team
        self.active: Agent = root
        self.points: list[_Point] = []
        self._body = 0  # non-system messages read so far
        self._prefix: list[Message] = []  # the filtered view of the part before the last point
        self._tail_from = 0  # the transcript index the unfiltered part starts at
        for index, message in enumerate(transcript):
            self._read(message, transcript, index + 1)

    def request(self, transcript: list[Message]) -> list[Message]:
        """The messages the active agent's model is sent: the transcript itself until a
        handoff happened, then its own system prompt and the filtered conversation."""
        if not self.points:
            return transcript
        head = [system(self.active.system)] if self.active.system else []
        tail = [m for m in transcript[self._tail_from :] if m.role != "system"]
        return [*head, *self._prefix, *tail]

    def after(self, results: Sequence[Message], transcript: list[Message]) -> Handoff | None:
        """Read a turn's tool results (already appended to ``transcript``); the handoff they
        make, if any."""
        start = len(transcript) - len(results)
        found: Handoff | None = None
        for offset, message in enumerate(results):
            taken = self._read(message, transcript, start + offset + 1)
            found = taken or found
        return found

    def _read(self, message: Message, transcript: list[Message], end: int) -> Handoff | None:
        if message.role == "system":
            return None
        self._body += 1
        if message.role != "tool" or message.is_error:
            return None
        taken = next((h for h in self.active.handoffs if h.tool_name == message.name), None)
        if taken is None or message.text != taken.answer():
            return None
        receiver = self.team.get(taken.target_name)
        if receiver is None:
            return None
        chunk = [
            *self._prefix,
            *(m for m in transcript[self._tail_from : end] if m.role != "system"),
        ]
        self._prefix = _filtered(taken, chunk)
        self._tail_from = end
        self.points.append(_Point(taken, self._body))
        self.active = receiver
        return taken


def _filtered(taken: Handoff, messages: list[Message]) -> list[Message]:
    if taken.input_filter is None:
        return messages
    shown = taken.input_filter(list(messages))
    if not isinstance(shown, list) or not all(isinstance(m, Message) for m in shown):
        msg = (
            f"the input_filter of handoff {taken.tool_name!r} must return a list of Message, "
            f"got {type(shown).__name__}."
        )
        raise TypeError(msg)
    return shown


# -- input filters ----------------------------------------------------------------------------


def without_tools(messages: list[Message]) -> list[Message]:
    """An input filter: the conversation without tool calls and tool results (assistant
    turns that only called tools are left out; ones with text keep the text)."""
    kept: list[Message] = []
    for message in messages:
        if message.role == "tool":
            continue
        if message.role == "assistant" and message.tool_calls:
            if not message.text:
                continue
            message = message.model_copy(update={"tool_calls": []})
        kept.append(message)
    return kept


def keep_last(n: int) -> InputFilter:
    """An input filter: the last ``n`` messages, starting at a user or assistant message (a
    tool result is never sent without the call it answers)."""
    if type(n) is not int or n < 1:
        msg = f"keep_last(n) needs an int >= 1, got {n!r}."
        raise ValueError(msg)

    def last(messages: list[Message]) -> list[Message]:
        shown = messages[-n:]
        while shown and shown[0].role == "tool":
            shown = shown[1:]
        return shown

    return last
