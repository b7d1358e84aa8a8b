"""``ChatAdapter``: the one seam between a graph and every chat-shaped protocol.

A protocol speaks in messages; a graph speaks in its state. ``to_input(messages)`` turns the
request's messages (TensorSketch :class:`~tensorsketch.messages.Message` objects) into the
graph's input, and ``to_reply(state)`` pulls the answer's text out of the final state. The
default is the :func:`~tensorsketch.create_agent` shape: the whole history goes into
``messages``, the last user turn is also the ``query``, and the reply is ``output``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tensorsketch.messages import Message
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.provider import Usage

__all__ = [
    "ChatAdapter",
    "ToInput",
    "ToReply",
    "agent_input",
    "agent_reply",
    "check_graph",
    "new_turn",
]

#: ``to_input(messages) -> the graph's input`` (a dict of state fields or a state instance).
ToInput = Callable[[list[Message]], Any]
#: ``to_reply(state) -> the answer's text``.
ToReply = Callable[[Any], str]


def agent_input(messages: list[Message]) -> dict[str, Any]:
    """The :func:`create_agent` input: every message, with the last user turn as ``query``.

    The agent appends ``query`` only when it is not already the last user message, so the
    history is not duplicated; ``query`` is set on every turn so that a durable thread's
    previous question is never asked again.
    """
    query = next((m.text for m in reversed(messages) if m.role == "user"), "")
    return {"messages": list(messages), "query": query}


def agent_reply(state: Any) -> str:
    """The :func:`create_agent` reply: ``state.output``."""
    return str(getattr(state, "output", "") or "")


def check_graph(graph: Any, where: str) -> None:
    """Refuse anything but a compiled graph by name, before a protocol app reads it (an
    ``AsyncRunner`` is the commonest mix-up: ``task_app`` takes one, these apps do not)."""
    if isinstance(graph, CompiledGraph):
        return
    kind = type(graph).__name__
    if kind == "AsyncRunner":
        msg = (
            f"{where}(graph) serves a compiled graph, got an AsyncRunner (task_app is the app "
            f"that takes a runner): pass the graph itself, `{where}(agent, backend=...)`."
        )
    else:
        msg = f"{where}(graph) serves a compiled graph (graph.compile()), got {kind}."
    raise TypeError(msg)


def new_turn(messages: Sequence[Message]) -> list[Message]:
    """The messages after the last assistant message: what a client adds on a thread that
    already holds the earlier turns (OpenAI-style clients resend the whole history)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "assistant":
            return list(messages[index + 1 :])
    return list(messages)


@dataclass(frozen=True, slots=True)
class ChatAdapter:
    """How a graph is driven by chat messages and answers with text.

    :param to_input: ``messages -> input`` for the graph (default :func:`agent_input`).
    :param to_reply: ``final state -> reply text`` (default :func:`agent_reply`).
    """

    to_input: ToInput = agent_input
    to_reply: ToReply = agent_reply

    @classmethod
    def for_graph(
        cls,
        graph: CompiledGraph[Any],
        to_input: ToInput | None = None,
        to_reply: ToReply | None = None,
        *,
        where: str = "serve",
    ) -> ChatAdapter:
        """The adapter a protocol app uses for ``graph``, checked now rather than per request.

        Without ``to_input`` / ``to_reply`` the graph must have the agent shape (``messages``,
        ``query`` and ``output`` fields); anything else names the fields to map.
        """
        check_graph(graph, where)
        for name, fn in (("to_input", to_input), ("to_reply", to_reply)):
            if fn is not None and not callable(fn):
                msg = f"{where}({name}=...) must be a function, got {fn!r}."
                raise TypeError(msg)
        fields = set(getattr(graph.state_schema, "model_fields", {}))
        needs = {"to_input": {"messages", "query"}, "to_reply": {"output"}}
        given = {"to_input": to_input, "to_reply": to_reply}
        for name, wanted in needs.items():
            missing = wanted - fields
            if given[name] is None and missing:
                msg = (
                    f"{where}(): graph {graph.name!r} is not an agent graph (its state "
                    f"{graph.state_schema.__name__} has no {', '.join(sorted(missing))} "
                    f"field); pass `{name}=` to map it, e.g. "
                    + (
                        "`to_input=lambda messages: {'prompt': messages[-1].text}`."
                        if name == "to_input"
                        else "`to_reply=lambda state: state.answer`."
                    )
                )
                raise TypeError(msg)
        return cls(to_input or agent_input, to_reply or agent_reply)

    def input_for(self, messages: list[Message]) -> Any:
        """The graph input for ``messages``; a mapping is copied so adapters may reuse one."""
        value = self.to_input(messages)
        return dict(value) if isinstance(value, Mapping) else value

    def reply_for(self, state: Any) -> str:
        """The reply text of ``state`` (``""`` for ``None``)."""
        reply = self.to_reply(state)
        if not isinstance(reply, str):
            msg = f"to_reply(state) must return the reply text (str), got {type(reply).__name__}."
            raise TypeError(msg)
        return reply


def usage_of(state: Any) -> Usage | None:
    """The run's token usage when the state reports one (an agent's ``usage`` field)."""
    usage = getattr(state, "usage", None)
    return usage if isinstance(usage, Usage) else None
