"""The code-based graders: cheap, fast, reproducible checks over a :class:`Trial`.

A grader is any object with a ``name`` and a ``grade(trial)`` method (sync or async) that
returns a :class:`Grade`. Graders read only what the harness hands them (the trace its own
tracer recorded, the final state, the environment), after the agent has finished.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, overload, runtime_checkable

from tensorsketch.eval._trial import Grade, Trial
from tensorsketch.eval.exceptions import GraderError

__all__ = [
    "Contains",
    "CostBudget",
    "Custom",
    "Equals",
    "FinalState",
    "Grader",
    "GraderLike",
    "LatencyBudget",
    "Regex",
    "StepEfficiency",
    "ToolArgs",
    "ToolCalled",
    "ToolSequence",
    "grader",
    "run_grader",
]


@runtime_checkable
class Grader(Protocol):
    """What the harness needs from a grader."""

    name: str

    def grade(self, trial: Trial) -> Grade | Awaitable[Grade]: ...


#: A grader, or the name of one registered through the ``tensorsketch_graders`` hook.
GraderLike = Grader | str


class _Base:
    name: str = "grader"

    def _verdict(self, passed: bool, reason: str, score: float | None = None) -> Grade:
        return Grade(
            self.name, passed, (1.0 if passed else 0.0) if score is None else score, reason
        )

    def __repr__(self) -> str:
        return f"<{self.name}>"


def _label(kind: str, *shown: str, **options: Any) -> str:
    """``Kind(shown..., option=value)``. Pass only the options that differ from their default:
    a label must never read like another grader's (``ToolCalled('x', times=0)`` asserts the
    opposite of ``ToolCalled('x')``), and reports group verdicts by label."""
    parts = [*shown, *(f"{key}={value!r}" for key, value in options.items())]
    return f"{kind}({', '.join(parts)})"


def _text(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)


class Contains(_Base):
    """The answer contains ``text`` (``ignore_case=True`` to ignore case)."""

    def __init__(self, text: str, *, ignore_case: bool = False) -> None:
        self.text, self.ignore_case = text, ignore_case
        self.name = _label("Contains", repr(text), **({"ignore_case": True} if ignore_case else {}))

    def grade(self, trial: Trial) -> Grade:
        answer = _text(trial.output)
        hay, needle = (
            (answer.lower(), self.text.lower()) if self.ignore_case else (answer, self.text)
        )
        if needle in hay:
            return self._verdict(True, f"the answer contains {self.text!r}")
        return self._verdict(False, f"{self.text!r} not in the answer {answer[:200]!r}")


class Equals(_Base):
    """The answer (or the state field ``field``) equals ``expected``."""

    def __init__(self, expected: Any, *, field: str | None = None, strip: bool = True) -> None:
        self.expected, self.field_name, self.strip = expected, field, strip
        shown = repr(expected) if field is None else f"{field}={expected!r}"
        self.name = _label("Equals", shown, **({} if strip else {"strip": False}))

    def grade(self, trial: Trial) -> Grade:
        got = trial.output if self.field_name is None else trial.field(self.field_name)
        if self.strip and isinstance(got, str) and isinstance(self.expected, str):
            ok = got.strip() == self.expected.strip()
        else:
            ok = got == self.expected
        where = "the answer" if self.field_name is None else f"state.{self.field_name}"
        return self._verdict(
            ok, f"{where} is {got!r}" + ("" if ok else f", expected {self.expected!r}")
        )


class Regex(_Base):
    """The answer matches the regular expression ``pattern`` (``re.search``)."""

    def __init__(self, pattern: str | re.Pattern[str], *, flags: int = 0) -> None:
        self.pattern = re.compile(pattern, flags) if isinstance(pattern, str) else pattern
        # re.UNICODE is implied for a str pattern; any other flag changes what matches
        extra = re.RegexFlag(self.pattern.flags & ~re.UNICODE)
        self.name = _label(
            "Regex", repr(self.pattern.pattern), *([f"flags={extra!r}"] if extra else [])
        )

    def grade(self, trial: Trial) -> Grade:
        answer = _text(trial.output)
        found = self.pattern.search(answer)
        if found:
            return self._verdict(True, f"matched {found.group(0)!r}")
        return self._verdict(False, f"no match for /{self.pattern.pattern}/ in {answer[:200]!r}")


class ToolCalled(_Base):
    """The agent called tool ``name``: at least ``min_times`` (default once), or exactly
    ``times`` when given."""

    def __init__(self, name: str, *, times: int | None = None, min_times: int = 1) -> None:
        self.tool, self.times, self.min_times = name, times, min_times
        options: dict[str, int] = {} if times is None else {"times": times}
        if min_times != 1:
            options["min_times"] = min_times
        self.name = _label("ToolCalled", repr(name), **options)

    def grade(self, trial: Trial) -> Grade:
        used = [call.name for call in trial.tool_calls]
        count = used.count(self.tool)
        ok = count == self.times if self.times is not None else count >= self.min_times
        want = f"exactly {self.times}" if self.times is not None else f"at least {self.min_times}"
        reason = f"{self.tool!r} called {count} time(s) (wanted {want}); tools used: {used}"
        return self._verdict(ok, reason)


class ToolArgs(_Base):
    """Some call to tool ``name`` had arguments that satisfy ``check``: a predicate
    ``args -> bool``, or a dict every one of whose items must appear in the arguments."""

    def __init__(
        self, name: str, check: Callable[[Any], bool] | Mapping[str, Any], *, label: str = ""
    ) -> None:
        self.tool, self.check = name, check
        shown = label or (
            repr(dict(check))
            if isinstance(check, Mapping)
            else str(getattr(check, "__name__", type(check).__name__))
        )
        self.name = _label("ToolArgs", repr(name), shown)

    def _ok(self, args: Any) -> bool:
        if isinstance(self.check, Mapping):
            return isinstance(args, Mapping) and all(
                key in args and args[key] == value for key, value in self.check.items()
            )
        try:
            return bool(self.check(args))
        except (KeyError, IndexError, TypeError, AttributeError, ValueError):
            return False  # the payload lacks what the predicate reads: not a match

    def grade(self, trial: Trial) -> Grade:
        calls = [call for call in trial.tool_calls if call.name == self.tool]
        if not calls:
            return self._verdict(False, f"{self.tool!r} was never called")
        for call in calls:
            if self._ok(call.args):
                return self._verdict(True, f"{self.tool}({call.args}) matches")
        shown = "; ".join(str(call.args)[:120] for call in calls)
        return self._verdict(False, f"no call to {self.tool!r} had matching arguments: {shown}")


class ToolSequence(_Base):
    """The tools were called in this order. By default other calls may come in between
    (a subsequence); ``strict=True`` requires exactly this sequence."""

    def __init__(self, tools: Sequence[str], *, strict: bool = False) -> None:
        self.tools, self.strict = list(tools), strict
        self.name = _label("ToolSequence", repr(self.tools), **({"strict": True} if strict else {}))

    def grade(self, trial: Trial) -> Grade:
        used = [call.name for call in trial.tool_calls]
        if self.strict:
            ok = used == self.tools
        else:
            remaining = iter(used)
            ok = all(any(name == step for name in remaining) for step in self.tools)
        return self._verdict(
            ok, f"called {used}, expected {'exactly ' if self.strict else ''}{self.tools}"
        )


class StepEfficiency(_Base):
    """The run took at most ``optimal_steps * slack`` steps (a step is one model call or one
    tool call). The score is ``optimal_steps / steps`` capped at 1, so a report shows how
    far from optimal a passing run was too."""

    def __init__(self, optimal_steps: int, *, slack: float = 1.0) -> None:
        if optimal_steps < 1 or slack < 1.0:
            msg = (
                f"StepEfficiency(optimal_steps={optimal_steps!r}, slack={slack!r}): "
                "optimal_steps must be >= 1 and slack >= 1.0."
            )
            raise ValueError(msg)
        self.optimal, self.slack = optimal_steps, slack
        self.name = _label(
            "StepEfficiency", repr(optimal_steps), **({"slack": slack} if slack != 1.0 else {})
        )

    def grade(self, trial: Trial) -> Grade:
        steps = trial.steps
        ok = 0 < steps <= self.optimal * self.slack
        score = min(1.0, self.optimal / steps) if steps else 0.0
        reason = (
            f"{steps} steps ({trial.trace.model_calls} model + {trial.trace.tool_calls} tool), "
            f"optimal {self.optimal}"
        )
        return self._verdict(ok, reason, score)


class CostBudget(_Base):
    """The run's estimated cost stayed within ``max_usd``. A run that used an unpriced model
    has an unknown cost; it fails unless ``unpriced="pass"``."""

    def __init__(self, max_usd: float, *, unpriced: str = "fail") -> None:
        if unpriced not in ("fail", "pass"):
            msg = f"CostBudget(unpriced={unpriced!r}) takes 'fail' or 'pass'."
            raise ValueError(msg)
        self.max_usd, self.unpriced = float(max_usd), unpriced
        self.name = _label(
            "CostBudget", f"${max_usd:g}", **({"unpriced": unpriced} if unpriced != "fail" else {})
        )

    def grade(self, trial: Trial) -> Grade:
        missing = trial.trace.unpriced_models
        cost = trial.cost_usd
        if missing and self.unpriced == "fail":
            return self._verdict(False, f"cost unknown: {missing} not in the price table")
        ok = cost <= self.max_usd
        return self._verdict(ok, f"${cost:.6f} of ${self.max_usd:g}")


class LatencyBudget(_Base):
    """The run finished within ``max_ms`` milliseconds (its trace's wall time)."""

    def __init__(self, max_ms: float) -> None:
        self.max_ms = float(max_ms)
        self.name = f"LatencyBudget({max_ms:g}ms)"

    def grade(self, trial: Trial) -> Grade:
        took = trial.latency_ms
        return self._verdict(took <= self.max_ms, f"{took:.1f} ms of {self.max_ms:g} ms")


def _arity(fn: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 1
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return 2
    return len(positional)


class FinalState(_Base):
    """The final state (and environment) is what it should be.

    ``FinalState(status="completed")`` compares state fields; ``FinalState(check)`` calls
    ``check(state)`` or ``check(state, env)`` (by how many parameters it takes) and passes
    when it returns true. Both forms combine.
    """

    def __init__(
        self, check: Callable[..., Any] | None = None, *, label: str = "", **fields: Any
    ) -> None:
        if check is None and not fields:
            msg = "FinalState needs a check function or field=value pairs to compare."
            raise ValueError(msg)
        self.check, self.fields = check, fields
        shown = label or ", ".join(
            [
                *(f"{k}={v!r}" for k, v in fields.items()),
                *([getattr(check, "__name__", "check")] if check else []),
            ]
        )
        self.name = f"FinalState({shown})"

    def grade(self, trial: Trial) -> Grade:
        for key, want in self.fields.items():
            got = trial.field(key)
            if got != want:
                return self._verdict(False, f"state.{key} is {got!r}, expected {want!r}")
        if self.check is not None:
            args = (trial.state, trial.env) if _arity(self.check) >= 2 else (trial.state,)
            if not self.check(*args):
                return self._verdict(
                    False, f"{getattr(self.check, '__name__', 'check')} returned false"
                )
        return self._verdict(True, "the final state matches")


class Custom(_Base):
    """Your own check: ``fn(trial)`` (sync or async) returning a bool, a score in [0, 1]
    (passing at ``threshold``), ``(passed, reason)`` or a :class:`Grade`."""

    def __init__(
        self, fn: Callable[[Trial], Any], *, name: str | None = None, threshold: float = 0.5
    ) -> None:
        self.fn, self.threshold = fn, threshold
        self.name = name or str(getattr(fn, "__name__", "custom"))

    async def grade(self, trial: Trial) -> Grade:
        value = self.fn(trial)
        if inspect.isawaitable(value):
            value = await value
        return coerce(self.name, value, self.threshold)


def coerce(name: str, value: Any, threshold: float = 0.5) -> Grade:
    """Turn what a custom grader returned into a :class:`Grade` (or say what was wrong)."""
    if isinstance(value, Grade):
        return value
    if isinstance(value, bool):
        return Grade(name, value, 1.0 if value else 0.0, "")
    if isinstance(value, int | float):
        score = float(value)
        return Grade(name, score >= threshold, score, f"score {score:.3g} (pass at {threshold:g})")
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], bool):
        return Grade(name, value[0], 1.0 if value[0] else 0.0, str(value[1]))
    msg = (
        f"grader {name!r} returned {value!r:.80}; return a bool, a score in [0, 1], "
        "(passed, reason) or a tensorsketch.eval.Grade."
    )
    raise GraderError(msg)


@overload
def grader(fn: Callable[[Trial], Any], /) -> Custom: ...
@overload
def grader(
    *, name: str | None = None, threshold: float = 0.5
) -> Callable[[Callable[[Trial], Any]], Custom]: ...
def grader(
    fn: Callable[[Trial], Any] | None = None, /, *, name: str | None = None, threshold: float = 0.5
) -> Custom | Callable[[Callable[[Trial], Any]], Custom]:
    """Make a function a grader: ``@grader`` or ``@grader(name=..., threshold=...)``."""
    if fn is not None:
        return Custom(fn, name=name, threshold=threshold)

    def wrap(inner: Callable[[Trial], Any]) -> Custom:
        return Custom(inner, name=name, threshold=threshold)

    return wrap


async def run_grader(item: Grader, trial: Trial) -> Grade:
    """Grade one trial; a grader that raises fails the trial with its error as the reason."""
    name = str(getattr(item, "name", type(item).__name__))
    try:
        result = item.grade(trial)
        if inspect.isawaitable(result):
            result = await result
    except GraderError:
        raise
    except Exception as exc:
        return Grade(name, False, 0.0, f"grader raised {type(exc).__name__}: {exc}")
    if not isinstance(result, Grade):
        return coerce(name, result)
    return result
