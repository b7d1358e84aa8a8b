"""``ReflectiveOptimizer``: reflective instruction search plus bootstrapped few-shot examples
(the GEPA / MIPROv2 idea, small).

Each round it shows a proposer model the current instructions and the failing trials of the
training split — input, answer, why the graders failed it, and the tool calls the trace
recorded — and asks for better instructions. Candidates pair the proposal with the current
examples, with the proposer's own examples, and with demonstrations bootstrapped from passing
trials. The best candidate on the training split is run on the held-out split and kept only
if it scores higher there (or the same there and higher on training). It stops after
``max_rounds``, when training has no failure left, or before a step would overrun the budget.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import ConfigDict, Field

from tensorsketch.eval._case import Case, Suite
from tensorsketch.eval._harness import evaluate
from tensorsketch.eval._optimizer import OptimizationResult, OptimizationRound, Score
from tensorsketch.eval._program import Program
from tensorsketch.eval._prompt import Example, Prompt
from tensorsketch.eval._report import Report, TrialResult, clip
from tensorsketch.eval._trial import tool_calls_of
from tensorsketch.eval.exceptions import EvalError
from tensorsketch.messages import system, user
from tensorsketch.pricing import PriceTable, estimate_cost
from tensorsketch.provider import ChatProvider, ProviderError, StructuredOutputError
from tensorsketch.schema import Schema

__all__ = ["ReflectiveOptimizer", "split_cases"]

PROPOSER_SYSTEM = (
    "You improve the instructions (system prompt) of an AI agent. You are shown its current "
    "instructions and trials it failed: the input, its answer, why the graders failed it, and "
    "the tool calls it made. Work out what the instructions failed to tell the agent and "
    "rewrite them so it passes these trials and similar ones; keep what already works. Reply "
    'with JSON only: {"instructions": "...", "examples": [{"input": "...", "output": "..."}], '
    '"rationale": "..."}; "examples" is optional (demonstrations to show the agent).'
)


class _ProposedExample(Schema):
    model_config = ConfigDict(extra="ignore")

    input: str
    output: str


class Proposal(Schema):
    """What the proposer model answers (keys it adds besides these are ignored)."""

    model_config = ConfigDict(extra="ignore")

    instructions: str = Field(min_length=1)
    examples: list[_ProposedExample] | None = None
    rationale: str = ""


def split_cases(cases: Sequence[Case], holdout: float, seed: int) -> tuple[list[Case], list[Case]]:
    """The training and held-out cases. A case whose ``metadata["split"]`` is ``"train"`` or
    ``"holdout"`` goes there; the rest are shuffled with ``seed`` and ``holdout`` of them held
    out (at least one on each side)."""
    pinned = {"train": [], "holdout": []}  # type: dict[str, list[Case]]
    loose: list[Case] = []
    for case in cases:
        where = case.metadata.get("split")
        if where is None:
            loose.append(case)
        elif where in pinned:
            pinned[where].append(case)
        else:
            msg = (
                f"case {case.name!r} has metadata split={where!r}; use 'train' or 'holdout' "
                "(or leave it out to let the optimizer choose)."
            )
            raise EvalError(msg)
    random.Random(seed).shuffle(loose)
    want = round((len(cases)) * holdout) - len(pinned["holdout"])
    if not pinned["holdout"]:
        want = max(want, 1)
    if not pinned["train"]:
        want = min(want, len(loose) - 1)
    want = max(0, min(want, len(loose)))
    train = pinned["train"] + loose[want:]
    held = pinned["holdout"] + loose[:want]
    if not train or not held:
        msg = (
            f"the suite has {len(cases)} case(s); optimizing needs at least one training and "
            "one held-out case (two cases at the least, more for a score worth trusting)."
        )
        raise EvalError(msg)
    return train, held


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _case_input(case: Case) -> str:
    """A case's inputs as the text an example shows (the lone field's value, else JSON)."""
    inputs = dict(case.inputs)
    return _text(next(iter(inputs.values()))) if len(inputs) == 1 else _text(inputs)


def _trajectory(result: TrialResult) -> str:
    """The tool calls the trial's trace recorded, one per line."""
    lines = []
    for use in tool_calls_of(result.trace):
        outcome = f"error: {use.error}" if use.error else f"-> {clip(_text(use.result), 160)}"
        lines.append(f"  - {use.name}({clip(_text(use.args), 160)}) {outcome}")
    return "\n".join(lines) if lines else "  (no tool calls)"


class _Spend:
    """What the optimization has spent, and whether a next step fits the budget."""

    def __init__(self, budget_usd: float | None, prices: PriceTable | None) -> None:
        self.budget = budget_usd
        self.prices = prices
        self.spent = 0.0
        self.unpriced: set[str] = set()
        self.last_run: dict[str, float] = {}
        self.last_proposal = 0.0

    def add_report(self, split: str, report: Report) -> float:
        cost = sum(t.cost_usd for t in report.trials)
        self.unpriced.update(report.unpriced_models)
        self.spent += cost
        self.last_run[split] = cost
        return cost

    def add_call(self, model: str | None, usage: Any) -> float:
        cost = estimate_cost(model, usage, self.prices)
        if cost is None:
            self.unpriced.add(model or "(unknown model)")
            cost = 0.0
        self.spent += cost
        self.last_proposal = cost
        return cost

    def fits(self, cost: float) -> bool:
        return self.budget is None or self.spent + cost <= self.budget


class ReflectiveOptimizer:
    """Reflective instruction and few-shot search against an eval suite.

    :param proposer: the model that reads failures and proposes instructions.
    :param max_rounds: proposals to try at most.
    :param holdout: the fraction of cases held out to decide what is kept.
    :param seed: shuffles the split (the same seed, the same split).
    :param trials: trials per case (default: each case's own); more trials, tighter intervals.
    :param max_examples: demonstrations a candidate may carry.
    :param max_failures: failing trials shown to the proposer per round.
    :param concurrency: trials run at once.
    :param prices: a price table for the proposer's calls (laid over ``DEFAULT_PRICES``).
    :param on_round: called with each :class:`OptimizationRound` as it finishes.
    """

    name = "reflective"

    def __init__(
        self,
        proposer: ChatProvider | None = None,
        *,
        max_rounds: int = 5,
        holdout: float = 0.5,
        seed: int = 0,
        trials: int | None = None,
        max_examples: int = 3,
        max_failures: int = 5,
        concurrency: int = 1,
        prices: PriceTable | None = None,
        on_round: Callable[[OptimizationRound], None] | None = None,
    ) -> None:
        if proposer is None or not callable(getattr(proposer, "complete", None)):
            msg = (
                "ReflectiveOptimizer needs proposer=, the chat model that proposes new "
                f"instructions (a ChatProvider), got {proposer!r}."
            )
            raise EvalError(msg)
        for label, value, low in (
            ("max_rounds", max_rounds, 1),
            ("max_examples", max_examples, 0),
            ("max_failures", max_failures, 1),
            ("concurrency", concurrency, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                msg = f"ReflectiveOptimizer({label}=...) must be an int >= {low}, got {value!r}."
                raise EvalError(msg)
        if not isinstance(holdout, int | float) or not 0 < holdout < 1:
            msg = (
                f"ReflectiveOptimizer(holdout=...) is the fraction of cases held out, strictly "
                f"between 0 and 1, got {holdout!r}."
            )
            raise EvalError(msg)
        self.proposer = proposer
        self.max_rounds = max_rounds
        self.holdout = float(holdout)
        self.seed = seed
        self.trials = trials
        self.max_examples = max_examples
        self.max_failures = max_failures
        self.concurrency = concurrency
        self.prices = prices
        self.on_round = on_round

    # -- the search --------------------------------------------------------------------------

    async def optimize(
        self,
        program: Program,
        suite: Suite | Iterable[Case],
        *,
        budget_usd: float | None = None,
    ) -> OptimizationResult:
        """Search for a better prompt for ``program`` on ``suite``; see the class docstring."""
        if budget_usd is not None and (
            isinstance(budget_usd, bool)
            or not isinstance(budget_usd, int | float)
            or not budget_usd > 0
        ):
            msg = f"budget_usd must be a positive number of dollars, got {budget_usd!r}."
            raise EvalError(msg)
        if not isinstance(program, Program):
            msg = (
                f"optimize(program, ...) takes a Program (or PromptSource(...).program()), got "
                f"{type(program).__name__}."
            )
            raise EvalError(msg)
        name = suite.name if isinstance(suite, Suite) else "suite"
        train, held = split_cases(list(suite), self.holdout, self.seed)
        search = _Search(self, program, name, train, held, _Spend(budget_usd, self.prices))
        await search.start()
        stopped = "max_rounds"
        for index in range(1, self.max_rounds + 1):
            reason = await search.round(index)
            if reason is not None:
                stopped = reason
                break
        return OptimizationResult(
            optimizer=self.name,
            suite=name,
            initial=program.prompt,
            best=search.best,
            before=search.start_held,
            after=search.held_score,
            before_train=search.start_train,
            after_train=search.train_score,
            rounds=search.rounds,
            stopped=stopped,
            spent_usd=search.spend.spent,
            budget_usd=budget_usd,
            unpriced_models=sorted(search.spend.unpriced),
            reports=[search.best_train, search.best_held],
        )

    # -- proposals ---------------------------------------------------------------------------

    def _failure_text(self, failures: list[TrialResult], cases: list[Case]) -> str:
        by_name = {case.name: case for case in cases}
        shown = []
        for result in failures[: self.max_failures]:
            case = by_name.get(result.case or "")
            given = _case_input(case) if case is not None else "?"
            shown.append(
                f"Trial {result.case} #{result.index}\n"
                f"Input: {clip(given, 600)}\n"
                f"Answer: {clip(_text(result.output), 600)}\n"
                f"Why it failed: {clip(result.reason, 600)}\n"
                f"Tool calls:\n{_trajectory(result)}"
            )
        return "\n\n".join(shown)

    async def _propose(
        self, best: Prompt, failures: list[TrialResult], train: list[Case], spend: _Spend
    ) -> tuple[Proposal | None, float, str]:
        examples = "\n\n".join(e.render() for e in best.examples) or "(none)"
        request = (
            f"Current instructions:\n<<<\n{best.instructions}\n>>>\n\n"
            f"Current examples:\n{examples}\n\n"
            f"Failed trials ({len(failures)} in all, {min(len(failures), self.max_failures)} "
            f"shown):\n\n{self._failure_text(failures, train)}"
        )
        messages = [system(PROPOSER_SYSTEM), user(request)]
        try:
            completion = await self.proposer.complete(messages, output_schema=Proposal)
        except StructuredOutputError as exc:
            done = exc.completion
            cost = spend.add_call(done.model, done.usage) if done is not None else 0.0
            return (
                None,
                cost,
                f"the proposer's reply was not a valid proposal: {clip(str(exc), 200)}",
            )
        except ProviderError as exc:
            return None, 0.0, f"the proposer failed: {clip(str(exc), 200)}"
        cost = spend.add_call(completion.model, completion.usage)
        parsed = completion.parsed
        if not isinstance(parsed, Proposal):
            try:
                parsed = Proposal.model_validate_json(completion.text)
            except ValueError as exc:
                return (
                    None,
                    cost,
                    f"the proposer's reply was not a valid proposal: {clip(str(exc), 200)}",
                )
        return parsed, cost, ""

    def _candidates(
        self, proposal: Proposal, best: Prompt, report: Report, train: list[Case]
    ) -> list[Prompt]:
        instructions = proposal.instructions
        found = [Prompt(instructions, best.examples)]
        if proposal.examples and self.max_examples:
            proposed = tuple(Example(e.input, e.output) for e in proposal.examples)
            found.append(Prompt(instructions, proposed[: self.max_examples]))
        demos = self._bootstrap(report, train)
        if demos:
            found.append(Prompt(instructions, demos))
        return found

    def _bootstrap(self, report: Report, train: list[Case]) -> tuple[Example, ...]:
        """Demonstrations from the training trials that passed: their input and answer."""
        if not self.max_examples:
            return ()
        by_name = {case.name: case for case in train}
        demos: dict[str, Example] = {}
        for result in report.trials:
            case = by_name.get(result.case or "")
            if result.passed and case is not None and case.name not in demos:
                demos[case.name] = Example(_case_input(case), _text(result.output))
            if len(demos) == self.max_examples:
                break
        return tuple(demos.values())


def _ratio(score: Score) -> str:
    return f"{score.passed}/{score.total}"


class _Search:
    """One optimization's state: the best prompt so far, its reports, the rounds, the spend."""

    def __init__(
        self,
        owner: ReflectiveOptimizer,
        program: Program,
        name: str,
        train: list[Case],
        held: list[Case],
        spend: _Spend,
    ) -> None:
        self.owner = owner
        self.program = program
        self.name = name
        self.train = train
        self.held = held
        self.spend = spend
        self.rounds: list[OptimizationRound] = []
        self.best = program.prompt
        self.tried = {program.prompt}

    async def run(self, prompt: Prompt, split: str) -> tuple[Report, float]:
        chosen = self.train if split == "train" else self.held
        report = await evaluate(
            self.program.build(prompt),
            Suite(f"{self.name} ({split})", chosen),
            concurrency=self.owner.concurrency,
            trials=self.owner.trials,
        )
        return report, self.spend.add_report(split, report)

    def record(self, entry: OptimizationRound) -> None:
        self.rounds.append(entry)
        if self.owner.on_round is not None:
            self.owner.on_round(entry)

    async def start(self) -> None:
        """Round 0: the starting prompt on both splits."""
        self.best_train, cost_a = await self.run(self.best, "train")
        self.best_held, cost_b = await self.run(self.best, "holdout")
        self.train_score, self.held_score = Score.of(self.best_train), Score.of(self.best_held)
        self.start_train, self.start_held = self.train_score, self.held_score
        self.record(
            OptimizationRound(
                0,
                self.best,
                self.train_score,
                self.held_score,
                True,
                "starting prompt",
                cost_a + cost_b,
            )
        )

    async def round(self, index: int) -> str | None:
        """One proposal and its candidates; the reason to stop, or ``None`` to go on."""
        failures = [t for t in self.best_train.trials if not t.passed]
        if not failures:
            return "no_failures"
        spend = self.spend
        if not spend.fits(spend.last_proposal + spend.last_run["train"]):
            return "budget"
        proposal, cost, problem = await self.owner._propose(self.best, failures, self.train, spend)
        if proposal is None:
            self.record(
                OptimizationRound(index, self.best, self.train_score, None, False, problem, cost)
            )
            return None
        fresh = self.owner._candidates(proposal, self.best, self.best_train, self.train)
        candidates = [c for c in dict.fromkeys(fresh) if c not in self.tried]
        if not candidates:
            note = "the proposal repeats a prompt already tried"
            self.record(
                OptimizationRound(index, fresh[0], self.train_score, None, False, note, cost)
            )
            return None
        scored, cost, over = await self._train_candidates(index, candidates, cost)
        if not scored:
            return "budget" if over else None
        score, report, candidate = max(scored, key=lambda item: item[0].rate)  # first wins ties
        for other_score, _, other in scored:
            if other is not candidate:
                note = "another candidate of this round scored higher on training"
                self.record(OptimizationRound(index, other, other_score, None, False, note))
        if not spend.fits(spend.last_run["holdout"]):
            note = "not run on the held-out split: the budget would be exceeded"
            self.record(OptimizationRound(index, candidate, score, None, False, note, cost))
            return "budget"
        held_report, held_cost = await self.run(candidate, "holdout")
        held = Score.of(held_report)
        better = held.rate > self.held_score.rate or (
            held.rate == self.held_score.rate and score.rate > self.train_score.rate
        )
        if better:
            note = f"kept: held-out {_ratio(held)} (was {_ratio(self.held_score)})"
            self.best, self.best_train, self.best_held = candidate, report, held_report
            self.train_score, self.held_score = score, held
        else:
            note = f"dropped: held-out {_ratio(held)}, best {_ratio(self.held_score)}"
        self.record(
            OptimizationRound(index, candidate, score, held, better, note, cost + held_cost)
        )
        return "budget" if over else None

    async def _train_candidates(
        self, index: int, candidates: list[Prompt], cost: float
    ) -> tuple[list[tuple[Score, Report, Prompt]], float, bool]:
        """Each candidate on the training split, while the budget allows; those not worse
        than the best go on (with the cost not yet recorded), the rest are recorded."""
        scored: list[tuple[Score, Report, Prompt]] = []
        for candidate in candidates:
            if not self.spend.fits(self.spend.last_run["train"]):
                return scored, cost, True
            self.tried.add(candidate)
            report, spent = await self.run(candidate, "train")
            cost += spent
            score = Score.of(report)
            if score.rate < self.train_score.rate:
                note = f"training {_ratio(score)} < best {_ratio(self.train_score)}"
                self.record(OptimizationRound(index, candidate, score, None, False, note, cost))
                cost = 0.0
            else:
                scored.append((score, report, candidate))
        return scored, cost, False
