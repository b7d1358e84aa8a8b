"""What graders read: the :class:`Trial` one run produces (trace + final state + environment),
its tool calls as the trace recorded them, and the :class:`Grade` a grader gives it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tensorsketch.messages import Message
from tensorsketch.observability.memory import Trace
from tensorsketch.observability.tracing import (
    ATTR_TOOL_ARGUMENTS,
    ATTR_TOOL_NAME,
    ATTR_TOOL_RESULT,
    Span,
)

if TYPE_CHECKING:
    from tensorsketch.eval._case import Case

__all__ = ["Grade", "ToolUse", "Trial", "parse_args", "plain_state", "tool_calls_of"]


@dataclass(frozen=True, slots=True)
class Grade:
    """One grader's verdict on one trial: pass/fail, a score in [0, 1] and why."""

    grader: str
    passed: bool
    score: float = 0.0
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "grader": self.grader,
            "passed": self.passed,
            "score": self.score,
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Grade:
        return cls(
            grader=str(raw["grader"]),
            passed=bool(raw["passed"]),
            score=float(raw.get("score", 1.0 if raw["passed"] else 0.0)),
            reason=str(raw.get("reason", "")),
        )


@dataclass(frozen=True, slots=True)
class ToolUse:
    """One tool call as the trace recorded it."""

    name: str
    args: Any
    result: str | None
    error: str | None


def _json_default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json")
        except (TypeError, ValueError):  # a field pydantic cannot put in JSON: str() it below
            return dump()
    return str(value)


def plain_state(state: Any) -> Any:
    """A final state as the JSON data a child process can send back: a schema state becomes
    its dict, a message or a model inside it a dict, anything else not JSON its ``str``.

    Both sandboxes hand graders this form, so a check written against one works in the other
    (the state object itself cannot cross a process boundary without importing the agent's
    code into the harness).
    """
    if state is None:
        return None
    return json.loads(json.dumps(state, default=_json_default))


def parse_args(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def tool_calls_of(trace: Trace) -> list[ToolUse]:
    """The tool calls of a trace in the order they ran, arguments parsed back from JSON."""
    found: list[tuple[float, int, Span]] = []
    for position, span in enumerate(trace.tool_spans):
        found.append((span.started_at, position, span))
    found.sort(key=lambda item: (item[0], item[1]))
    return [
        ToolUse(
            name=str(span.attributes.get(ATTR_TOOL_NAME) or span.name),
            args=parse_args(span.attributes.get(ATTR_TOOL_ARGUMENTS)),
            result=span.attributes.get(ATTR_TOOL_RESULT),
            error=span.error,
        )
        for _, _, span in found
    ]


@dataclass(slots=True)
class Trial:
    """One run of the agent: what graders see. ``case`` is ``None`` for a scored live run.

    :ivar output: the answer (``state.output`` for an agent, or the case's ``output_key``).
    :ivar trace: the run's spans, recorded by the harness's own tracer.
    :ivar state: the final state as plain JSON data (:func:`plain_state`: a dict of its
        fields), the same in either sandbox.
    :ivar env: the trial's environment after the run (what the tools changed).
    :ivar error: ``"ExcType: message"`` when the run raised or timed out.
    :ivar decisions: what ``Case(approve=...)`` decided, in order: ``{"id", "kind", "tool",
        "args", "decision"}`` per pending approval or question.
    """

    output: Any
    trace: Trace
    state: Any = None
    env: Any = None
    case: Case | None = None
    index: int = 0
    error: str | None = None
    wall_ms: float = 0.0
    decisions: list[dict[str, Any]] = field(default_factory=list)
    _tool_calls: tuple[Trace, list[ToolUse]] | None = field(default=None, repr=False, compare=False)

    @property
    def steps(self) -> int:
        """Model calls plus tool calls (model -> tool -> model is 3 steps)."""
        return self.trace.model_calls + self.trace.tool_calls

    @property
    def cost_usd(self) -> float:
        return self.trace.cost_usd

    @property
    def latency_ms(self) -> float:
        """The run's wall time as its trace measured it (the harness's own wall time when
        the run recorded no span, e.g. it failed before starting)."""
        return self.trace.duration_ms if len(self.trace) else self.wall_ms

    @property
    def tool_calls(self) -> list[ToolUse]:
        """The tool calls in the order they ran (parsed once per trace, shared by graders)."""
        cached = self._tool_calls
        if cached is None or cached[0] is not self.trace:
            cached = self._tool_calls = (self.trace, tool_calls_of(self.trace))
        return list(cached[1])

    @property
    def messages(self) -> list[Message]:
        """The transcript as :class:`~tensorsketch.messages.Message` objects, when the final
        state has one (an agent's ``messages``); an entry that is not a message is left out."""
        found = self.field("messages")
        if not isinstance(found, list):
            return []
        messages: list[Message] = []
        for item in found:
            if isinstance(item, Message):
                messages.append(item)
            elif isinstance(item, Mapping):
                try:
                    messages.append(Message.model_validate(item))
                except ValueError:
                    continue
        return messages

    def field(self, name: str, default: Any = None) -> Any:
        """A field of the final state, whether it is a schema instance or a plain dict."""
        if isinstance(self.state, Mapping):
            return self.state.get(name, default)
        return getattr(self.state, name, default)
