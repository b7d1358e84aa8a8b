"""The eval harness's errors.

::

    EvalError(Exception)            anything the harness refuses, with the fix in the message
    ├── GraderError(EvalError)      a grader raised or returned something that is not a verdict
    └── SandboxError(EvalError)     a sandbox could not run a trial (bad agent spec, dead child)
    GateFailed(AssertionError)      ``Report.require(...)`` found a metric below its gate

``GateFailed`` is an ``AssertionError`` so a failed gate inside a pytest test reads as a
failed test, and the CLI turns it into a non-zero exit status.
"""

from __future__ import annotations

__all__ = ["EvalError", "GateFailed", "GraderError", "SandboxError"]


class EvalError(Exception):
    """Something the eval harness cannot do as asked; the message says how to fix it."""


class GraderError(EvalError):
    """A grader raised, or returned something that is not a bool, a number or a ``Grade``."""


class SandboxError(EvalError):
    """A sandbox could not run a trial at all (as opposed to a trial that failed)."""


class GateFailed(AssertionError):
    """``Report.require(...)``: one or more metrics missed their gate.

    :ivar failures: ``{metric: (observed, required)}`` for every gate that failed.
    """

    def __init__(self, message: str, failures: dict[str, tuple[float, float]]) -> None:
        super().__init__(message)
        self.failures = failures
