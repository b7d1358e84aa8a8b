"""``evaluate``: run every trial of a suite behind a sandbox, grade it here, emit the records.

Trials run concurrently up to ``concurrency``; each has its own fresh environment and tracer.
A trial that raises or times out is recorded as failed with its error; the suite goes on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tensorsketch.eval._case import Case, Suite
from tensorsketch.eval._graders import Grader, run_grader
from tensorsketch.eval._registry import resolve_graders
from tensorsketch.eval._report import CaseResult, Report, TrialResult
from tensorsketch.eval._reporters import deliver
from tensorsketch.eval._sandbox import InProcessSandbox, Sandbox
from tensorsketch.eval._scores import record_grades
from tensorsketch.eval._trial import Grade, Trial
from tensorsketch.eval.exceptions import EvalError
from tensorsketch.observability.memory import InMemoryTracer

__all__ = ["ProgressEvent", "evaluate", "grade_trial", "planned_trials"]


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """Handed to ``on_trial`` after each trial: what finished and the running totals."""

    result: TrialResult
    done: int
    total: int
    passed: int
    failed: int
    cost_usd: float


class _Pinned:
    """A grader with its ``grade`` method bound before any trial runs (so replacing the
    class's method afterwards, from inside a trial, changes nothing)."""

    __slots__ = ("grade", "name")

    def __init__(self, grader: Grader) -> None:
        self.name = str(getattr(grader, "name", type(grader).__name__))
        self.grade = grader.grade


async def grade_trial(trial: Trial, graders: Iterable[Any], *, attach: bool = True) -> list[Grade]:
    """Run every grader on a finished trial (in this process), in order."""
    grades = [await run_grader(g, trial) for g in graders]
    if attach and len(trial.trace):
        # The verdicts join the trial's own trace, as `gen_ai.evaluation.result` spans.
        sink = InMemoryTracer()
        record_grades(sink, trial.trace, grades)
        trial.trace = type(trial.trace)([*trial.trace.spans, *sink.spans])
    return grades


def _cases_of(suite: Suite | Case | Iterable[Case]) -> tuple[str, list[Case]]:
    if isinstance(suite, Suite):
        return suite.name, list(suite.cases)
    if isinstance(suite, Case):
        return suite.name, [suite]
    cases = list(suite)
    if not all(isinstance(c, Case) for c in cases):
        msg = "evaluate(agent, suite) takes a Suite, a Case or a list of Cases."
        raise EvalError(msg)
    return "suite", cases


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_options(
    concurrency: int, timeout: float | None, trials: int | None, k: int | None
) -> None:
    if not _positive_int(concurrency):
        msg = f"evaluate(concurrency=...) must be a positive int, got {concurrency!r}."
        raise EvalError(msg)
    for label, value in (("trials", trials), ("k", k)):
        if value is not None and not _positive_int(value):
            msg = (
                f"evaluate({label}=...) must be a positive int, or None for each case's own; "
                f"got {value!r}."
            )
            raise EvalError(msg)
    if timeout is not None and timeout <= 0:
        msg = f"evaluate(timeout=...) is seconds per trial and must be > 0, got {timeout!r}."
        raise EvalError(msg)


_Plan = list[tuple[Case, list[_Pinned], int]]


def planned_trials(
    cases: Iterable[Case], trials: int | None, k: int | None, retry: Report | None
) -> dict[str, tuple[int, int | None]]:
    """Each case's number of trials and its k. ``trials`` / ``k`` override the case's own; on a
    retry, a case the stored run has keeps that run's trial count and k (so a run made with
    ``trials=4`` is retried as four trials, its passing ones kept), unless overridden."""
    stored = {c.name: c for c in retry.cases} if retry is not None else {}
    planned: dict[str, tuple[int, int | None]] = {}
    for case in cases:
        old = stored.get(case.name)
        if old is not None and old.trials:
            n = trials or max(t.index for t in old.trials) + 1
            planned[case.name] = (n, k or (min(old.k, n) if old.k else case.k))
        else:
            planned[case.name] = (trials or case.trials, k or case.k)
    return planned


def _plan(
    cases: list[Case],
    planned: dict[str, tuple[int, int | None]],
    k: int | None,
    retry: Report | None,
) -> tuple[_Plan, dict[tuple[str, int], TrialResult]]:
    """The trials to run (graders resolved and pinned now, before any runs) and, on a retry,
    the passing trials kept from the stored run."""
    plan: _Plan = []
    kept: dict[tuple[str, int], TrialResult] = {}
    previous = {(t.case, t.index): t for t in retry.trials} if retry is not None else {}
    for case in cases:
        n = planned[case.name][0]
        if k is not None and k > n:
            msg = (
                f"evaluate(k={k}) exceeds the {n} trials of case {case.name!r}; run more "
                "trials or lower k."
            )
            raise EvalError(msg)
        pinned = [_Pinned(g) for g in resolve_graders(case.graders)]
        if not pinned:
            msg = f"case {case.name!r} has no graders; a trial passes only if every grader passes."
            raise EvalError(msg)
        for index in range(n):
            old = previous.get((case.name, index))
            if old is not None and old.passed:
                kept[(case.name, index)] = old
            else:
                plan.append((case, pinned, index))
    return plan, kept


async def evaluate(
    agent: Any,
    suite: Suite | Case | Iterable[Case],
    *,
    reporter: Any = None,
    sandbox: Sandbox | None = None,
    concurrency: int = 1,
    timeout: float | None = None,
    trials: int | None = None,
    k: int | None = None,
    retry: Report | None = None,
    on_trial: Callable[[ProgressEvent], Awaitable[None] | None] | None = None,
    keep_spans: bool = True,
) -> Report:
    """Run every case's trials, grade each in the harness and return the :class:`Report`.

    :param agent: a compiled graph, a factory ``agent(env) -> graph``, or a ``"module:attr"``
        spec (required by :class:`SubprocessSandbox`).
    :param reporter: receives a ``trial`` record per trial and a ``report`` record at the end.
    :param concurrency: how many trials run at once.
    :param timeout: seconds per trial; a trial over it is cancelled (killed in a subprocess)
        and recorded as failed.
    :param trials: / ``k``: override every case's ``trials`` / ``k``.
    :param retry: a previous report of this suite: only its failed trials run again, its
        passing ones are kept (what ``--retry-failed`` does). A case keeps the stored run's
        number of trials and k unless ``trials`` / ``k`` override them; a case the stored run
        lacks runs all its own trials.
    :param on_trial: called after each trial with a :class:`ProgressEvent` (progress bars).
    """
    _check_options(concurrency, timeout, trials, k)
    name, cases = _cases_of(suite)
    box = sandbox or InProcessSandbox()
    planned = planned_trials(cases, trials, k, retry)
    plan, kept = _plan(cases, planned, k, retry)
    total = len(plan) + len(kept)
    gate = asyncio.Semaphore(concurrency)
    results: dict[tuple[str, int], TrialResult] = dict(kept)
    lock = asyncio.Lock()
    counts = {"done": len(kept), "passed": len(kept), "failed": 0, "cost": 0.0}
    started = time.perf_counter()

    async def one(case: Case, pinned: list[_Pinned], index: int) -> None:
        async with gate:
            trial = await box.run(agent, case, index, timeout=timeout)
        grades = await grade_trial(trial, pinned)
        result = TrialResult.of(trial, grades, keep_spans=keep_spans)
        async with lock:
            results[(case.name, index)] = result
            counts["done"] += 1
            counts["passed" if result.passed else "failed"] += 1
            counts["cost"] += result.cost_usd
            event = ProgressEvent(
                result,
                int(counts["done"]),
                total,
                int(counts["passed"]),
                int(counts["failed"]),
                float(counts["cost"]),
            )
        if reporter is not None:
            await deliver(reporter, result.to_dict())
        if on_trial is not None:
            shown = on_trial(event)
            if shown is not None:
                await shown

    running = [asyncio.ensure_future(one(case, pinned, index)) for case, pinned, index in plan]
    try:
        await asyncio.gather(*running)
    except BaseException:
        # a harness error (a grader that returns nonsense, a bad agent spec), or the caller
        # cancelled: stop the other trials rather than leave them running unobserved
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        raise
    case_results = [
        CaseResult(
            case.name,
            [
                results[(case.name, i)]
                for i in range(planned[case.name][0])
                if (case.name, i) in results
            ],
            planned[case.name][1],
        )
        for case in cases
    ]
    report = Report(
        name,
        case_results,
        meta={
            "wall_ms": (time.perf_counter() - started) * 1000.0,
            "sandbox": type(box).__name__,
            "concurrency": concurrency,
            "retried": len(plan) if retry is not None else 0,
        },
    )
    if reporter is not None:
        record = report.to_dict()
        record.pop("trial_results")  # each trial was emitted as its own record already
        await deliver(reporter, record)
    return report
