"""Run budgets: cap the tokens and dollars one agent run may spend, sub-agents included.

An agent opens a :class:`Budget` for its run and makes it *current* (a ``ContextVar``), so
every model call below it — its own, and those of sub-agents it calls through ``as_tool`` or
``run_subgraph`` — is charged to it and to every enclosing budget. The agent checks the budget
after each model call's usage is known (the check is not hard real-time: one call can
overshoot) and, when it is exceeded, stops with ``status="budget_exceeded"`` and the best
answer it has, the way ``max_iterations`` does. :class:`BudgetExceededError` says which limit
was hit; the agent puts it on the result's ``stop_detail`` and raises it only from
:meth:`Budget.check`.

Spending replayed from the durable journal is charged again on resume, so totals (and the
limit) cover the whole run across crashes, not just the last process.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar, Token
from typing import Literal

from tensorsketch.errors import TensorSketchError
from tensorsketch.pricing import PriceTable, estimate_cost
from tensorsketch.provider import Usage

__all__ = ["Budget", "BudgetExceededError", "budget_scope", "current_budget"]

_log = logging.getLogger("tensorsketch.budget")


class BudgetExceededError(TensorSketchError):
    """A run spent more than its ``max_total_tokens`` or ``max_cost_usd``."""

    def __init__(self, kind: Literal["tokens", "cost"], limit: float, actual: float) -> None:
        self.kind = kind
        self.limit = limit
        self.actual = actual
        if kind == "tokens":
            text = f"the run used {int(actual)} tokens, over its max_total_tokens={int(limit)}"
        else:
            text = f"the run cost ${actual:.6f}, over its max_cost_usd={limit}"
        super().__init__(text + "; raise the limit or make the task smaller.")


_NO_USAGE = Usage()


class Budget:
    """Token and cost accounting for one run, with optional limits.

    :param parent: an enclosing budget every charge is forwarded to (a sub-agent's budget
        points at its caller's).
    :param prices: the price table to cost calls with (laid over ``DEFAULT_PRICES``);
        inherited from the parent when not given.
    """

    def __init__(
        self,
        *,
        max_total_tokens: int | None = None,
        max_cost_usd: float | None = None,
        prices: PriceTable | None = None,
        parent: Budget | None = None,
    ) -> None:
        if max_total_tokens is not None and (
            not isinstance(max_total_tokens, int)
            or isinstance(max_total_tokens, bool)
            or max_total_tokens <= 0
        ):
            msg = f"`max_total_tokens` must be a positive int, got {max_total_tokens!r}."
            raise ValueError(msg)
        if max_cost_usd is not None and (
            not isinstance(max_cost_usd, int | float)
            or isinstance(max_cost_usd, bool)
            or not max_cost_usd > 0
        ):
            msg = f"`max_cost_usd` must be a positive number of dollars, got {max_cost_usd!r}."
            raise ValueError(msg)
        self.max_total_tokens = max_total_tokens
        self.max_cost_usd = max_cost_usd
        self.prices: PriceTable | None = (
            prices if prices is not None else (parent.prices if parent else None)
        )
        self.parent = parent
        #: Tokens charged so far (this budget and everything below it). ``Usage`` is frozen
        #: and every charge replaces it, so all fresh budgets can start from one zero.
        self.usage = _NO_USAGE
        #: USD of the calls whose model is priced.
        self.priced_cost_usd = 0.0
        #: Models charged that have no price (their cost is unknown).
        self.unpriced: set[str] = set()
        #: Model calls charged.
        self.calls = 0

    @property
    def total_tokens(self) -> int:
        return self.usage.total_tokens

    @property
    def cost_usd(self) -> float | None:
        """The run's cost, or ``None`` when any call used an unpriced model."""
        return None if self.unpriced else self.priced_cost_usd

    def charge(self, usage: Usage, model: str | None) -> float | None:
        """Add one model call's usage; return its estimated cost (``None`` if unpriced)."""
        cost = estimate_cost(model, usage, self.prices)
        budget: Budget | None = self
        while budget is not None:
            budget._add(usage, model, cost)
            budget = budget.parent
        return cost

    def absorb(self, usage: Usage, cost: float, unpriced: list[str], calls: int) -> None:
        """Add spending measured elsewhere (a journaled sub-run replayed on resume)."""
        budget: Budget | None = self
        while budget is not None:
            budget.usage = budget.usage + usage
            budget.priced_cost_usd += cost
            budget.unpriced.update(unpriced)
            budget.calls += calls
            budget = budget.parent

    def _add(self, usage: Usage, model: str | None, cost: float | None) -> None:
        self.usage = self.usage + usage
        self.calls += 1
        if cost is None:
            name = model or "(unknown model)"
            if name not in self.unpriced and self.max_cost_usd is not None:
                _log.warning(
                    "model %r has no price, so max_cost_usd=%s cannot count its calls; add it "
                    "with `prices={%r: (input, output)}`",
                    name,
                    self.max_cost_usd,
                    name,
                )
            self.unpriced.add(name)
        else:
            self.priced_cost_usd += cost

    def exceeded(self) -> BudgetExceededError | None:
        """The first limit broken, here or in an enclosing budget, else ``None``."""
        budget: Budget | None = self
        while budget is not None:
            if budget.max_total_tokens is not None:  # the sum only where there is a cap
                tokens = budget.usage.total_tokens
                if tokens > budget.max_total_tokens:
                    return BudgetExceededError("tokens", budget.max_total_tokens, tokens)
            if budget.max_cost_usd is not None and budget.priced_cost_usd > budget.max_cost_usd:
                return BudgetExceededError("cost", budget.max_cost_usd, budget.priced_cost_usd)
            budget = budget.parent
        return None

    def limited(self) -> bool:
        """Whether this budget or an enclosing one has a limit (else :meth:`exceeded` is
        always ``None``, and a loop need not ask it every turn)."""
        budget: Budget | None = self
        while budget is not None:
            if budget.max_total_tokens is not None or budget.max_cost_usd is not None:
                return True
            budget = budget.parent
        return False

    def check(self) -> None:
        """Raise :class:`BudgetExceededError` if a limit is broken."""
        error = self.exceeded()
        if error is not None:
            raise error

    def __repr__(self) -> str:
        return (
            f"Budget(tokens={self.total_tokens}/{self.max_total_tokens}, "
            f"cost={self.priced_cost_usd:.6f}/{self.max_cost_usd})"
        )


_current: ContextVar[Budget | None] = ContextVar("tensorsketch_budget", default=None)


def current_budget() -> Budget | None:
    """The budget model calls in this context are charged to, if any."""
    return _current.get()


class budget_scope:  # used like the function it was: `with budget_scope(b):`
    """Make ``budget`` current for the block (tasks started inside inherit it).

    A plain class rather than a ``@contextmanager`` generator: the agent loop opens one per
    run and one per tool call, and a generator frame costs several times more.
    """

    __slots__ = ("_budget", "_token")

    def __init__(self, budget: Budget) -> None:
        self._budget = budget
        self._token: Token[Budget | None] | None = None

    def __enter__(self) -> Budget:
        self._token = _current.set(self._budget)
        return self._budget

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _current.reset(self._token)
            self._token = None
