"""``RetryPolicy``: how often, and after how long, a failing node runs again.

A retry re-runs the node body inside the same superstep, with a fresh :class:`Context` whose
effect keys line up with the failed attempt's: every ``ctx.step`` the failed attempt finished
returns its recorded result instead of running again (journaled in a durable run, kept for
the superstep in an in-memory one). Only the node's own work is repeated.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from tensorsketch.errors import TensorSketchError
from tensorsketch.suspension import Interrupt, RetryLater

__all__ = ["RetryPolicy", "default_retry_on"]

#: Not failures: the run suspends (an approval, a durable timer), nothing is retried.
_CONTROL_FLOW = (Interrupt, RetryLater)

#: Python's "the code is wrong" exceptions: running it again gives the same answer.
_PROGRAMMING_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    ArithmeticError,
    ImportError,
    LookupError,
    NameError,
    SyntaxError,
    RuntimeError,
    ReferenceError,
    StopIteration,
    StopAsyncIteration,
    OSError,
)


def default_retry_on(exc: BaseException) -> bool:
    """Whether ``exc`` looks transient: worth running the node again.

    Yes for timeouts (``NodeTimeoutError``, any ``TimeoutError``), lost connections, and
    errors that say so themselves (a provider error's ``retryable``: 429 and 5xx). No for
    TensorSketch's control flow and contract errors (``Interrupt``, ``RetryLater``,
    ``GraphValidationError``, ``NodeError``, ``BudgetExceededError``, a lost lease, ...) and
    for Python's programming errors (``ValueError``, ``TypeError``, ``KeyError``, ...).
    Anything else (an exception type of your own, an SDK's error) is retried.
    """
    if isinstance(exc, TimeoutError | ConnectionError):
        return True
    retryable = getattr(exc, "retryable", None)
    if isinstance(retryable, bool):
        return retryable
    return not isinstance(exc, (TensorSketchError, *_PROGRAMMING_ERRORS))


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Run a failing node again, up to ``max_attempts`` times in all, with backoff.

    The wait before attempt ``n + 1`` is ``initial_interval * backoff ** (n - 1)``, capped at
    ``max_interval`` seconds; with ``jitter`` it is scaled by a random factor in [0.5, 1.5)
    so a fan-out of failing tasks does not retry in lockstep.

    :param max_attempts: attempts in all, the first included (``1`` never retries).
    :param retry_on: exception types to retry, or a predicate ``exc -> bool``; the default,
        :func:`default_retry_on`, retries transient errors only.
    """

    max_attempts: int = 3
    initial_interval: float = 0.5
    backoff: float = 2.0
    max_interval: float = 30.0
    jitter: bool = True
    retry_on: (
        type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]
    ) = field(default=default_retry_on)

    def __post_init__(self) -> None:
        problems: list[str] = []
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            problems.append(f"max_attempts must be an int >= 1, got {self.max_attempts!r}")
        for name in ("initial_interval", "max_interval"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value < 0:
                problems.append(f"{name} must be a number of seconds >= 0, got {value!r}")
        if not isinstance(self.backoff, int | float) or self.backoff < 1:
            problems.append(f"backoff must be a multiplier >= 1, got {self.backoff!r}")
        retry_on = self.retry_on
        types = retry_on if isinstance(retry_on, tuple) else (retry_on,)
        if not (
            all(isinstance(t, type) and issubclass(t, BaseException) for t in types)
            or (not isinstance(retry_on, type | tuple) and callable(retry_on))
        ):
            problems.append(
                "retry_on must be an exception type, a tuple of them, or a function "
                f"exc -> bool, got {retry_on!r}"
            )
        if problems:
            msg = "RetryPolicy: " + "; ".join(problems) + "."
            raise ValueError(msg)

    def retries(self, exc: BaseException) -> bool:
        """Whether this policy retries ``exc`` (attempts aside)."""
        if isinstance(exc, _CONTROL_FLOW):
            return False  # control flow: the run suspends, nothing failed
        retry_on = self.retry_on
        if isinstance(retry_on, type | tuple):
            return isinstance(exc, retry_on)
        return bool(retry_on(exc))

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        wait = min(self.max_interval, self.initial_interval * self.backoff ** (attempt - 1))
        if self.jitter:
            wait *= 0.5 + random.random()  # spreads retries; not security
        return float(wait)
