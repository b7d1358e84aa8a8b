"""Online evaluation: the same graders on live runs, off the response path.

``score`` grades one finished run (reference-free graders: budgets, safety, on-policy
judges). ``OnlineMonitor`` samples runs, schedules their scoring as background tasks (so
``observe`` returns at once) and emits each result to a reporter; ``flush`` waits for them.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable
from typing import Any

from tensorsketch.eval._graders import GraderLike
from tensorsketch.eval._harness import grade_trial
from tensorsketch.eval._registry import resolve_graders
from tensorsketch.eval._report import TrialResult
from tensorsketch.eval._reporters import deliver
from tensorsketch.eval._scores import record_grades
from tensorsketch.eval._trial import Trial, plain_state
from tensorsketch.observability.memory import Trace
from tensorsketch.observability.tracing import Tracer

__all__ = ["OnlineMonitor", "score"]

_log = logging.getLogger("tensorsketch.eval")


def _trial_of(output: Any, trace: Trace, env: Any = None) -> Trial:
    if not isinstance(trace, Trace):
        msg = (
            f"score(output, trace, graders) needs a tensorsketch Trace (tracer.trace or "
            f"Trace.load(path)), got {type(trace).__name__}."
        )
        raise TypeError(msg)
    state = None
    if not isinstance(output, str | int | float | bool | None):
        state = plain_state(output)  # a final state: grade its `output`, keep the rest
        output = (
            output.get("output") if isinstance(output, dict) else getattr(output, "output", output)
        )
    return Trial(output=output, trace=trace, state=state, env=env)


async def score(
    output: Any,
    trace: Trace,
    graders: Iterable[GraderLike],
    *,
    tracer: Tracer | None = None,
    env: Any = None,
) -> TrialResult:
    """Grade one live run: ``output`` is the answer or the final state, ``trace`` its trace.

    With ``tracer=``, each grade is also recorded into that tracer as a
    ``gen_ai.evaluation.result`` span under the run's span (e.g. the ``FileTracer`` or
    ``OTelTracer`` the run was traced with), so the scores sit beside the spans they judge.
    """
    trial = _trial_of(output, trace, env)
    grades = await grade_trial(trial, resolve_graders(graders), attach=False)
    if tracer is not None:
        record_grades(tracer, trace, grades)
    return TrialResult.of(trial, grades)


class OnlineMonitor:
    """Sample production runs, score them in the background, emit each result.

    :param graders: reference-free graders (or registered names).
    :param reporter: where each ``trial`` record goes (a ``MultiReporter`` to also watch drift).
    :param sample: the fraction of observed runs that are scored (0..1).
    :param tracer: also record the grades into this tracer, beside the run's spans.
    :param seed: seed the sampler (reproducible sampling in tests).
    """

    def __init__(
        self,
        graders: Iterable[GraderLike],
        *,
        reporter: Any = None,
        sample: float = 1.0,
        tracer: Tracer | None = None,
        seed: int | None = None,
    ) -> None:
        if not 0.0 <= float(sample) <= 1.0:
            msg = (
                "OnlineMonitor(sample=...) is the fraction of runs to score, in [0, 1]; "
                f"got {sample!r}."
            )
            raise ValueError(msg)
        self.graders = resolve_graders(graders)
        self.reporter = reporter
        self.sample = float(sample)
        self.tracer = tracer
        self._random = random.Random(seed)
        self._pending: set[asyncio.Task[None]] = set()
        #: Runs observed, runs scored, scoring tasks that failed.
        self.observed = 0
        self.scored = 0
        self.failed = 0

    async def observe(self, output: Any, trace: Trace, *, env: Any = None) -> bool:
        """Maybe score this run (per ``sample``); returns at once whether it was sampled."""
        self.observed += 1
        if self.sample < 1.0 and self._random.random() >= self.sample:
            return False
        trial = _trial_of(output, trace, env)  # bad input fails here, in the caller
        task = asyncio.get_running_loop().create_task(self._score(trial))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return True

    async def _score(self, trial: Trial) -> None:
        try:
            grades = await grade_trial(trial, self.graders, attach=False)
            if self.tracer is not None:
                record_grades(self.tracer, trial.trace, grades)
            result = TrialResult.of(trial, grades, keep_spans=False)
            if self.reporter is not None:
                await deliver(self.reporter, result.to_dict())
            self.scored += 1
        except Exception:
            self.failed += 1
            _log.exception("online scoring failed; the run itself was not affected")

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def flush(self) -> None:
        """Wait until every scheduled score has been emitted."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
