"""``ContextPolicy``: keep what an agent sends to the model under a token budget.

A long conversation's transcript grows with every turn. The durable transcript keeps
everything; only the request is compacted. Before each model call the oldest complete
exchanges are dropped until the estimate fits the budget. An exchange is a user message, or
an assistant message together with the tool results that answer its calls, so a call is never
sent without its result. The system prompt, the latest user message and the newest exchange
always stay. With ``summarize=True`` the dropped prefix is first replaced by a summary that a
model call writes. The call is journaled under the model step's key, so a resumed run replays
the summary instead of asking again. It is traced like any model call and charged to the
run's budget, and its size counts against ``budget_tokens``.

A summary is kept as a :class:`Compaction` point (the summary and how many transcript
messages it stands for) in the agent's state, so it is checkpointed with the transcript:
later calls, later turns and a resumed run send the summary in place of the prefix it covers
and write no new one until that request is over budget again. A new summary extends the
previous one and cuts the request to ``compact_to`` of the budget, which leaves room for the
next turns (hysteresis: a long conversation is summarized every few turns, not every call).
A summarizer that fails degrades the request instead of failing the turn: the trimmed
transcript (behind the last good summary) goes out, and a ``context.policy_failed`` event
says why.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tensorsketch.messages import Message, system, user
from tensorsketch.provider import ChatProvider
from tensorsketch.schema import Schema

__all__ = [
    "POLICY_FAILED",
    "Compaction",
    "ContextPolicy",
    "TokenEstimate",
    "estimate_tokens",
    "trim_messages",
]

#: ``estimate(messages) -> tokens``: what a request of these messages costs.
TokenEstimate = Callable[[Sequence[Message]], int]

#: The stream event (and agent span attribute) that says a summary failed and the request
#: went out trimmed instead.
POLICY_FAILED = "context.policy_failed"

#: Tokens a message costs beyond its text (role and framing), in the fallback estimate.
MESSAGE_OVERHEAD = 4

SUMMARY_INSTRUCTIONS = (
    "Summarize the conversation below for your own later use: the user's goals, facts and "
    "decisions established, tool results that still matter, and open questions. Be brief."
)


def _chars(message: Message) -> int:
    size = len(message.text)
    for call in message.tool_calls:
        size += len(call.name) + len(json.dumps(call.args, default=str))
    return size


def estimate_tokens(messages: Sequence[Message], provider: ChatProvider | None = None) -> int:
    """The provider's own estimate (an ``estimate_tokens(messages)`` method) when it has one,
    else about four characters per token plus a few tokens per message: close enough to
    budget by, not to bill by."""
    own = getattr(provider, "estimate_tokens", None)
    if callable(own):
        return int(own(messages))
    return sum(_chars(m) // 4 + MESSAGE_OVERHEAD for m in messages)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextPolicy:
    """How an :class:`~tensorsketch.agents.Agent` compacts its requests.

    :param budget_tokens: the most tokens a request's messages may take (estimated).
    :param summarize: replace the dropped prefix with a model-written summary.
    :param summarizer: the provider that writes it (default: the agent's own).
    :param summary_tokens: room kept in the budget for the summary, and its ``max_tokens``.
    :param estimate: ``estimate(messages) -> tokens`` (default :func:`estimate_tokens` with
        the agent's provider).
    :param compact_to: when a summary is written, the request is cut to this fraction of
        ``budget_tokens`` (0 < x <= 1), so the next calls have room before another summary.
    """

    budget_tokens: int
    summarize: bool = False
    summarizer: ChatProvider | None = None
    summary_tokens: int = 256
    estimate: TokenEstimate | None = None
    compact_to: float = 0.6

    def __post_init__(self) -> None:
        if type(self.budget_tokens) is not int or self.budget_tokens < 1:
            msg = (
                "ContextPolicy(budget_tokens=...) must be a positive int (tokens per request), "
                f"got {self.budget_tokens!r}."
            )
            raise ValueError(msg)
        if type(self.summary_tokens) is not int or not 0 < self.summary_tokens < self.budget_tokens:
            msg = (
                "ContextPolicy(summary_tokens=...) must be a positive int below budget_tokens "
                f"({self.budget_tokens}), got {self.summary_tokens!r}."
            )
            raise ValueError(msg)
        if self.summarizer is not None and not isinstance(self.summarizer, ChatProvider):
            msg = f"ContextPolicy(summarizer=...) must be a ChatProvider, got {self.summarizer!r}."
            raise TypeError(msg)
        fraction = self.compact_to
        if (
            isinstance(fraction, bool)
            or not isinstance(fraction, int | float)
            or not 0 < fraction <= 1
        ):
            msg = (
                "ContextPolicy(compact_to=...) must be a fraction of budget_tokens above 0 and "
                f"at most 1 (e.g. 0.6), got {fraction!r}."
            )
            raise ValueError(msg)


class Compaction(Schema):
    """A compaction point: ``summary`` stands for the transcript's messages from the end of
    its leading system messages up to ``covers`` (an index into the transcript, at an
    exchange boundary); ``digest`` fingerprints them, so an edited or forked transcript that
    no longer matches is summarized afresh instead of getting a wrong summary."""

    summary: str
    covers: int
    digest: str


def _exchanges(messages: Sequence[Message]) -> list[list[Message]]:
    """Messages cut where a tool result cannot be separated from its call: each group starts
    at a message that is not a tool result."""
    groups: list[list[Message]] = []
    for message in messages:
        if message.role == "tool" and groups:
            groups[-1].append(message)
        else:
            groups.append([message])
    return groups


def trim_messages(
    messages: Sequence[Message], budget: int, estimate: TokenEstimate, *, reserve: int = 0
) -> tuple[list[Message], list[Message]]:
    """``(sent, dropped)``: drop the oldest complete exchanges until ``sent`` plus ``reserve``
    tokens fit ``budget``. Leading system messages, the latest user message's exchange and
    the newest exchange are never dropped, so ``sent`` may still exceed a budget too small
    for them."""
    head = 0
    while head < len(messages) and messages[head].role == "system":
        head += 1
    groups = _exchanges(messages[head:])
    costs = [estimate(group) for group in groups]
    total = estimate(messages[:head]) + sum(costs) + reserve
    last_user = max((i for i, g in enumerate(groups) if g[0].role == "user"), default=-1)
    keep = {last_user, len(groups) - 1}
    dropped: set[int] = set()
    for index in range(len(groups)):
        if total <= budget:
            break
        if index in keep:
            continue
        dropped.add(index)
        total -= costs[index]
    sent = list(messages[:head])
    gone: list[Message] = []
    for index, group in enumerate(groups):
        (gone if index in dropped else sent).extend(group)
    return sent, gone


def render(messages: Sequence[Message]) -> str:
    """Messages as plain text, the summarizer's input."""
    lines: list[str] = []
    for m in messages:
        text = m.text
        if m.tool_calls:
            calls = ", ".join(f"{c.name}({json.dumps(c.args, default=str)})" for c in m.tool_calls)
            text = f"{text} [calls {calls}]".strip()
        lines.append(f"{m.role}: {text}")
    return "\n".join(lines)


def summary_request(dropped: Sequence[Message], previous: str | None = None) -> list[Message]:
    """The summarizer's request for a dropped prefix (extending ``previous``, the summary of
    what came before it)."""
    text = render(dropped)
    if previous:
        text = f"Summary so far:\n{previous}\n\nThe conversation after it:\n{text}"
    return [system(SUMMARY_INSTRUCTIONS), user(text)]


def head_size(messages: Sequence[Message]) -> int:
    """How many leading system messages ``messages`` has (they are always sent)."""
    head = 0
    while head < len(messages) and messages[head].role == "system":
        head += 1
    return head


def digest(messages: Sequence[Message]) -> str:
    """A fingerprint of the messages a compaction point covers."""
    return hashlib.sha256(render(messages).encode()).hexdigest()[:32]


def still_covers(transcript: Sequence[Message], point: Compaction) -> bool:
    """Whether ``point`` still describes ``transcript``'s prefix (same messages, same cut)."""
    head = head_size(transcript)
    if not head <= point.covers <= len(transcript):
        return False
    if point.covers < len(transcript) and transcript[point.covers].role == "tool":
        return False
    return digest(transcript[head : point.covers]) == point.digest


def prefix_cut(
    messages: Sequence[Message], budget: int, estimate: TokenEstimate, *, reserve: int = 0
) -> int:
    """How many of ``messages`` (a transcript tail without system messages) to summarize so
    the rest plus ``reserve`` fits ``budget``: whole exchanges from the oldest, stopping
    before the latest user message's exchange and the newest exchange."""
    groups = _exchanges(messages)
    costs = [estimate(group) for group in groups]
    total = sum(costs) + reserve
    last_user = max((i for i, g in enumerate(groups) if g[0].role == "user"), default=-1)
    stop = min(i for i in (last_user, len(groups) - 1) if i >= 0) if groups else 0
    cut = 0
    for index in range(stop):
        if total <= budget:
            break
        total -= costs[index]
        cut += len(groups[index])
    return cut


def summary_message(text: str) -> Message:
    """Where a summary sits in the request: right after the system prompt."""
    return system(f"Summary of the earlier conversation:\n{text}")
