"""Guardrails: checks that stop an agent's run with a typed outcome instead of an exception.

A guardrail looks at one thing — the user's input before the first model call, the final
answer before the run completes, or a turn's tool calls before they run — and either lets
it through (returns ``None``) or trips (returns the reason). A tripped guardrail ends the
run with ``status="tripped"`` and a :class:`Tripwire` on the state naming the guardrail and
the reason; nothing raises into the caller's code. Guardrails run outside the middleware
stack: middleware sees only the calls the guardrails let through, so the two compose.

Every check's outcome is journaled with the run, so a resumed run replays it rather than
asking a non-deterministic check again. The built-ins (:func:`pii`, :func:`max_size`,
:func:`deny_tools`) need no model.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from tensorsketch.messages import ToolCall

__all__ = [
    "PII_PATTERNS",
    "Guardrail",
    "GuardrailKind",
    "Tripwire",
    "deny_tools",
    "input_guardrail",
    "max_size",
    "output_guardrail",
    "pii",
    "tool_guardrail",
]

#: Where a guardrail looks: the user's input, the final answer, or a turn's tool calls.
GuardrailKind = Literal["input", "output", "tool_call"]

#: What a check returns: ``None`` to let it through, or the reason it trips.
Verdict = str | None
#: A check of text (input or output guardrails), sync or async.
TextCheck = Callable[[str], Verdict | Awaitable[Verdict]]
#: A check of one tool call (tool-call guardrails), sync or async.
CallCheck = Callable[[ToolCall], Verdict | Awaitable[Verdict]]


class Tripwire(BaseModel):
    """Why a guardrail stopped the run (``state.tripwire``).

    :ivar guardrail: the guardrail's name.
    :ivar kind: ``input``, ``output`` or ``tool_call``.
    :ivar reason: what the check said, in words.
    :ivar tool_call: the call that tripped a ``tool_call`` guardrail (its id, name and args).
    """

    guardrail: str
    kind: GuardrailKind
    reason: str
    tool_call: ToolCall | None = None


@dataclass(frozen=True, slots=True)
class Guardrail:
    """One check and where it looks; build it with :func:`input_guardrail`,
    :func:`output_guardrail`, :func:`tool_guardrail` or a built-in."""

    name: str
    kind: GuardrailKind
    check: Callable[[Any], Verdict | Awaitable[Verdict]]

    async def verdict(self, subject: str | ToolCall) -> Verdict:
        """The check's answer for ``subject``; a non-string, non-``None`` answer is refused."""
        answer = self.check(subject)
        if inspect.isawaitable(answer):
            answer = await answer
        if answer is not None and not isinstance(answer, str):
            msg = (
                f"guardrail {self.name!r} returned {answer!r}; a check returns None (let it "
                "through) or a str (the reason it trips)."
            )
            raise TypeError(msg)
        return answer or None


def _named(check: Callable[..., Any], name: str | None) -> str:
    return name or getattr(check, "__name__", None) or type(check).__name__


def input_guardrail(check: TextCheck, *, name: str | None = None) -> Guardrail:
    """A guardrail on the user's input: ``check(text)`` runs before the first model call."""
    return Guardrail(_named(check, name), "input", check)


def output_guardrail(check: TextCheck, *, name: str | None = None) -> Guardrail:
    """A guardrail on the final answer: ``check(text)`` runs before the run completes."""
    return Guardrail(_named(check, name), "output", check)


def tool_guardrail(check: CallCheck, *, name: str | None = None) -> Guardrail:
    """A guardrail on tool calls: ``check(call)`` runs for each call before any of a turn's
    calls run (none of the turn runs when one trips)."""
    return Guardrail(_named(check, name), "tool_call", check)


#: The patterns :func:`pii` looks for by default (deliberately simple; bring your own for more).
PII_PATTERNS: Mapping[str, str] = {
    "email": r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}",
    "credit_card": r"\b(?:\d[ -]?){13,19}\b",
    "us_ssn": r"\b\d{3}-\d{2}-\d{4}\b",
    "phone": r"(?<![\w+])\+?\d{1,3}[ .-]?\(?\d{3}\)?[ .-]?\d{3}[ .-]?\d{4}\b",
}


def pii(
    kind: Literal["input", "output"] = "input",
    *,
    patterns: Mapping[str, str] | None = None,
    name: str = "pii",
) -> Guardrail:
    """Trips when the text contains personal data: e-mail addresses, card numbers, US SSNs,
    phone numbers (:data:`PII_PATTERNS`), or the ``patterns`` given (label → regex)."""
    chosen = dict(PII_PATTERNS if patterns is None else patterns)
    compiled = [(label, re.compile(pattern)) for label, pattern in chosen.items()]

    def check(text: str) -> Verdict:
        found = [label for label, pattern in compiled if pattern.search(text)]
        return f"the {kind} contains personal data ({', '.join(found)})." if found else None

    return Guardrail(name, kind, check)


def max_size(
    chars: int, kind: Literal["input", "output"] = "input", *, name: str = "max_size"
) -> Guardrail:
    """Trips when the text is longer than ``chars`` characters."""
    if type(chars) is not int or chars < 1:
        msg = f"max_size(chars=...) must be an int >= 1, got {chars!r}."
        raise ValueError(msg)

    def check(text: str) -> Verdict:
        if len(text) > chars:
            return f"the {kind} is {len(text)} characters, over the limit of {chars}."
        return None

    return Guardrail(name, kind, check)


def deny_tools(
    names: Collection[str] = (),
    *,
    args: Mapping[str, str] | None = None,
    name: str = "deny_tools",
) -> Guardrail:
    """Trips on a call to a tool in ``names``, or whose arguments (as JSON) match the regex
    ``args[tool]`` (``"*"`` for any tool), e.g. ``args={"shell": r"rm\\s+-rf"}``."""
    denied = frozenset(names)
    rules = [(tool, re.compile(pattern)) for tool, pattern in (args or {}).items()]

    def check(call: ToolCall) -> Verdict:
        if call.name in denied:
            return f"tool {call.name!r} is on the deny-list."
        if rules:
            spelled = json.dumps(call.args, sort_keys=True, default=repr)
            for tool, pattern in rules:
                if tool in ("*", call.name) and pattern.search(spelled):
                    return (
                        f"the arguments of {call.name!r} match the denied pattern "
                        f"{pattern.pattern!r}."
                    )
        return None

    return Guardrail(name, "tool_call", check)


def check_guardrails(guardrails: Iterable[Any]) -> tuple[Guardrail, ...]:
    """The ``guardrails=`` option, each checked to be a :class:`Guardrail`."""
    result = tuple(guardrails)
    for item in result:
        if not isinstance(item, Guardrail):
            msg = (
                f"guardrails must be Guardrail objects (input_guardrail(fn), "
                f"output_guardrail(fn), tool_guardrail(fn), pii(), max_size(n), deny_tools()), "
                f"got {item!r}."
            )
            raise TypeError(msg)
    return result
