"""pass@k and pass^k: unbiased for k < n, checked against direct combinatorics."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorsketch.eval import pass_at_k, pass_pow_k


@st.composite
def ncks(draw: st.DrawFn) -> tuple[int, int, int]:
    n = draw(st.integers(1, 60))
    return n, draw(st.integers(0, n)), draw(st.integers(1, n))


@settings(max_examples=400, derandomize=True)
@given(ncks())
def test_estimators_equal_the_binomial_formulas(nck: tuple[int, int, int]) -> None:
    n, c, k = nck
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)
    assert pass_pow_k(n, c, k) == pytest.approx(math.comb(c, k) / math.comb(n, k), abs=1e-12)


@settings(max_examples=60, derandomize=True)
@given(
    st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n)))
)
def test_estimators_equal_the_mean_over_every_k_subset(nck: tuple[int, int, int]) -> None:
    # The definition itself: average over all C(n, k) draws of k trials out of the n that ran.
    n, c, k = nck
    outcomes = [True] * c + [False] * (n - c)
    draws = list(itertools.combinations(outcomes, k))
    assert pass_at_k(n, c, k) == pytest.approx(sum(any(d) for d in draws) / len(draws))
    assert pass_pow_k(n, c, k) == pytest.approx(sum(all(d) for d in draws) / len(draws))


def test_large_n_is_stable() -> None:
    # math.comb(5000, 2500) has ~1500 digits: a float ratio of the two overflows, the products do not
    value = pass_at_k(5000, 10, 2500)
    exact = 1 - math.comb(4990, 2500) / math.comb(5000, 2500)
    assert value == pytest.approx(exact, rel=1e-9)
    assert 0.0 <= pass_pow_k(5000, 4999, 2500) <= 1.0


def test_k_equals_n_is_any_and_all() -> None:
    assert pass_at_k(5, 1, 5) == 1.0 and pass_at_k(5, 0, 5) == 0.0
    assert pass_pow_k(5, 4, 5) == 0.0 and pass_pow_k(5, 5, 5) == 1.0


@pytest.mark.parametrize(
    ("n", "c", "k", "match"),
    [
        (3, 1, 4, "outside 1..n=3"),
        (3, 4, 1, "0 <= c <= n"),
        (0, 0, 1, "1 <= n"),
        (3, 1, 0, "outside"),
    ],
)
def test_bad_counts_are_refused_with_the_fix(n: int, c: int, k: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        pass_at_k(n, c, k)
