"""Spotting a stuck loop: the model asking for the same tool calls over and over.

A model that calls ``search(q="x")``, reads the result and calls ``search(q="x")`` again will
usually keep doing so until ``max_iterations`` runs out, paying for every turn. The agent
stops such a run early, with ``status="stuck"`` and the repeated call named, when the same
turn of tool calls (same names, same arguments) is asked for ``stuck_after`` times in a row,
or a short cycle of turns (A, B, A, B, ...) repeats that many times.

The count is read from the transcript since the last user message — not from a counter of
its own — so a resumed run, whose earlier turns replay from the journal, counts exactly what
the first attempt counted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tensorsketch.messages import Message

__all__ = ["MAX_CYCLE", "STUCK", "RepeatWatch", "turn_key"]

#: The event (and span attribute) a stuck stop emits.
STUCK = "agent.stuck"

#: The longest cycle of turns looked for (A, B, C, A, B, C, ...).
MAX_CYCLE = 3

#: One turn's tool calls: each call's name and its arguments. Compared with ``==`` (never
#: hashed), so arguments in another key order are the same arguments, at no cost of spelling.
TurnKey = tuple[Any, ...]


def _canonical(args: object) -> str:
    try:
        return json.dumps(args, sort_keys=True, separators=(",", ":"), default=repr)
    except (TypeError, ValueError):  # keys of mixed types: still a stable spelling
        return repr(args)


def turn_key(message: Message) -> TurnKey:
    """What makes two turns "the same": the calls' names and arguments, in order (a flat
    tuple: the loop builds one per turn, so it is kept cheap)."""
    key: list[Any] = []
    for call in message.tool_calls:
        key += (call.name, call.args)
    return tuple(key)


def _spell(key: TurnKey) -> str:
    pairs = zip(key[::2], key[1::2], strict=True)
    return ", ".join(f"{name}({_canonical(args)})" for name, args in pairs)


class RepeatWatch:
    """The tool-call turns since the last user message, and whether they now repeat.

    :param threshold: how many times in a row the same turn (or cycle) makes the run stuck;
        ``None``: never (the watch counts nothing).
    :param history: the transcript the run starts from (its trailing tool turns count).
    """

    __slots__ = ("threshold", "turns")

    def __init__(self, threshold: int | None, history: Sequence[Message]) -> None:
        self.threshold = threshold
        self.turns: list[TurnKey] = []
        if threshold is None:
            return
        for message in reversed(history):
            if message.role == "user":
                break
            if message.role == "assistant" and message.tool_calls:
                self.turns.append(turn_key(message))
        self.turns.reverse()

    def add(self, reply: Message) -> str | None:
        """Count ``reply`` (a turn with tool calls); say what repeats when the run is stuck."""
        n = self.threshold
        if n is None:
            return None
        turns = self.turns
        key: list[Any] = []  # turn_key(reply), inline: this runs every turn
        for call in reply.tool_calls:
            key += (call.name, call.args)
        turns.append(tuple(key))
        size = len(turns)
        if size < n:
            return None
        last = turns[-1]
        for period in range(1, MAX_CYCLE + 1):
            span = period * n
            if size < span:
                return None
            if turns[-1 - period] != last:  # the common case, a turn unlike its cycle's
                continue
            pattern = turns[-period:]
            if all(turns[-span + i] == pattern[i % period] for i in range(span - period)):
                return self._describe(pattern)
        return None

    def forget(self) -> None:
        """A user message came in (an output repair): later turns start a new count."""
        self.turns.clear()

    def _describe(self, pattern: list[TurnKey]) -> str:
        if len(pattern) == 1:
            what = _spell(pattern[0])
            return (
                f"the model asked for {what} {self.threshold} times in a row; stopped before "
                f"running it again (stuck_after={self.threshold})."
            )
        cycle = " -> ".join(_spell(key) for key in pattern)
        return (
            f"the model repeated the cycle {cycle} {self.threshold} times in a row; stopped "
            f"before running it again (stuck_after={self.threshold})."
        )
