"""The :class:`Optimizer` contract, what an optimization returns, and the registry of
optimizers by name (the ``tensorsketch_optimizers`` hook and the ``tensorsketch.optimizers``
entry-point group).

An optimizer takes a :class:`~tensorsketch.eval.Program` and a suite and returns an
:class:`OptimizationResult`: the best prompt it found, the scores before and after, and every
round it tried. It never edits files; the caller decides whether to write the winner.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tensorsketch.eval._prompt import Prompt
from tensorsketch.eval.exceptions import EvalError
from tensorsketch.registry import Registry

if TYPE_CHECKING:
    from tensorsketch.eval._case import Case, Suite
    from tensorsketch.eval._program import Program
    from tensorsketch.eval._report import Report

__all__ = [
    "OptimizationResult",
    "OptimizationRound",
    "Optimizer",
    "Score",
    "create_optimizer",
    "optimizers",
    "register_optimizer",
]

_Z95 = 1.959963984540054


@dataclass(frozen=True, slots=True)
class Score:
    """Trials passed out of trials run, with a 95% Wilson confidence interval.

    Wilson rather than the normal approximation: eval suites are small and pass rates often
    sit at 0 or 1, where the normal interval collapses to a point.
    """

    passed: int
    total: int

    @classmethod
    def of(cls, report: Report) -> Score:
        trials = report.trials
        return cls(sum(t.passed for t in trials), len(trials))

    @property
    def rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        """The 95% Wilson score interval of the pass rate."""
        n = self.total
        if n == 0:
            return (0.0, 1.0)
        p, z2 = self.rate, _Z95 * _Z95
        centre = (p + z2 / (2 * n)) / (1 + z2 / n)
        half = _Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
        low = 0.0 if self.passed == 0 else max(0.0, centre - half)
        high = 1.0 if self.passed == n else min(1.0, centre + half)
        return (low, high)

    def __str__(self) -> str:
        low, high = self.interval
        return f"{self.rate:.0%} ({self.passed}/{self.total}, 95% CI {low:.0%}-{high:.0%})"

    def to_dict(self) -> dict[str, Any]:
        low, high = self.interval
        return {"passed": self.passed, "total": self.total, "rate": self.rate, "ci95": [low, high]}


@dataclass(frozen=True, slots=True)
class OptimizationRound:
    """One candidate tried: its prompt, its scores, and whether it became the best.

    Round 0 is the starting prompt. ``holdout`` is ``None`` for a candidate that did not beat
    the best on the training split (it was never run on the held-out one).
    """

    index: int
    prompt: Prompt
    train: Score
    holdout: Score | None
    accepted: bool
    note: str = ""
    cost_usd: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "round": self.index,
            "instructions": self.prompt.instructions,
            "examples": [{"input": e.input, "output": e.output} for e in self.prompt.examples],
            "train": self.train.to_dict(),
            "holdout": self.holdout.to_dict() if self.holdout is not None else None,
            "accepted": self.accepted,
            "note": self.note,
            "cost_usd": self.cost_usd,
        }


@dataclass(slots=True)
class OptimizationResult:
    """What an optimization found.

    :ivar initial: / ``best``: the starting prompt and the best one found (the same when
        nothing beat it).
    :ivar before: / ``after``: their scores on the held-out split (the honest numbers: the
        optimizer chose on the training split).
    :ivar before_train: / ``after_train``: the same on the training split.
    :ivar rounds: every candidate tried, round 0 being the starting prompt.
    :ivar stopped: why it stopped (``"max_rounds"``, ``"budget"``, ``"no_failures"``, ...).
    :ivar spent_usd: what the suite runs and the proposer cost, where the models are priced.
    :ivar unpriced_models: models called without a price: their cost is missing from
        ``spent_usd``, so a USD budget could not count them.
    :ivar reports: the best prompt's reports (training and held-out), for the HTML report.
    """

    optimizer: str
    suite: str
    initial: Prompt
    best: Prompt
    before: Score
    after: Score
    before_train: Score
    after_train: Score
    rounds: list[OptimizationRound]
    stopped: str
    spent_usd: float
    budget_usd: float | None = None
    unpriced_models: list[str] = field(default_factory=list)
    reports: list[Report] = field(default_factory=list)

    @property
    def improved(self) -> bool:
        return self.best != self.initial

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "optimization",
            "optimizer": self.optimizer,
            "suite": self.suite,
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "before_train": self.before_train.to_dict(),
            "after_train": self.after_train.to_dict(),
            "stopped": self.stopped,
            "spent_usd": self.spent_usd,
            "budget_usd": self.budget_usd,
            "unpriced_models": list(self.unpriced_models),
            "rounds": [r.to_dict() for r in self.rounds],
        }


@runtime_checkable
class Optimizer(Protocol):
    """Improves a :class:`~tensorsketch.eval.Program` against an eval suite.

    ``tensorsketch optimize`` builds one by name with the options it was given as keywords
    (``proposer=``, ``max_rounds=``, ``holdout=``, ``seed=``, ``trials=``); an optimizer
    takes the ones it uses and ignores the rest (``**options``).
    """

    name: str

    async def optimize(
        self,
        program: Program,
        suite: Suite | Iterable[Case],
        *,
        budget_usd: float | None = None,
    ) -> OptimizationResult:
        """Search for a better prompt; stop by ``budget_usd`` (suite runs plus proposals)."""
        ...


#: Names from ``register_optimizer``, the ``tensorsketch_optimizers`` hook and the
#: ``tensorsketch.optimizers`` entry-point group.
optimizers: Registry[Optimizer] = Registry(
    "optimizer", "tensorsketch_optimizers", "tensorsketch.optimizers"
)


def create_optimizer(name: str, /, **options: Any) -> Optimizer:
    """Build an optimizer by name: ``create_optimizer("reflective", proposer=model)``."""
    built = optimizers.create(name, **options)
    if not callable(getattr(built, "optimize", None)):
        msg = (
            f"optimizer {name!r} ({optimizers.origin(name)}) built {built!r}, which has no "
            "`optimize(program, suite, budget_usd=...)` method."
        )
        raise EvalError(msg)
    return built


def register_optimizer(name: str, optimizer: Any) -> None:
    """Register an optimizer class (or factory) under ``name``."""
    optimizers.register(name, optimizer)
