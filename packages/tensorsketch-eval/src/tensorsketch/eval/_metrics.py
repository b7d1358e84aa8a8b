"""The pass@k and pass^k estimators, unbiased for any k <= n and stable for large n.

With ``n`` trials of which ``c`` passed, the chance that ``k`` trials drawn without replacement
contain at least one pass is ``1 - C(n-c, k) / C(n, k)`` (the estimator of Chen et al., 2021,
"Evaluating Large Language Models Trained on Code"), and the chance that all ``k`` pass is
``C(c, k) / C(n, k)``. Both are computed as running products of ratios, never as binomial
coefficients, so ``n`` in the thousands neither overflows nor loses precision.
"""

from __future__ import annotations

__all__ = ["pass_at_k", "pass_pow_k"]


def _check(n: int, c: int, k: int) -> None:
    for label, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int):
            msg = f"pass@k needs integer counts; {label}={value!r} is not an int."
            raise TypeError(msg)
    if n < 1 or not 0 <= c <= n:
        msg = f"pass@k needs 1 <= n and 0 <= c <= n (trials, passes); got n={n}, c={c}."
        raise ValueError(msg)
    if not 1 <= k <= n:
        msg = (
            f"k={k} is outside 1..n={n}: pass@k draws k of the n trials that ran; run at "
            "least k trials (`trials=`) or lower `k`."
        )
        raise ValueError(msg)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of ``k`` trials (of ``n`` run, ``c`` passed) passes."""
    _check(n, c, k)
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k/i)
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def pass_pow_k(n: int, c: int, k: int) -> float:
    """Probability that all ``k`` trials (of ``n`` run, ``c`` passed) pass."""
    _check(n, c, k)
    if c < k:
        return 0.0
    # C(c, k) / C(n, k) = prod_{i=0}^{k-1} (c-i)/(n-i)
    hit = 1.0
    for i in range(k):
        hit *= (c - i) / (n - i)
    return hit
