"""A small, overridable price table and ``estimate_cost``.

Prices are USD per million tokens, for text at each vendor's standard tier (no batch discount,
no long-context uplift). They change often and every deployment negotiates its own, so treat
:data:`DEFAULT_PRICES` as a starting point and pass your own table with ``prices=`` (it is laid
over the defaults). A model that is not in the table is *unpriced*: :func:`estimate_cost`
returns ``None`` for it, never ``0.0``, so a missing price shows up instead of reading as free.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from tensorsketch.provider import Usage

__all__ = ["DEFAULT_PRICES", "ModelPrice", "PriceTable", "estimate_cost", "price_for"]


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """USD per million tokens. Cache prices default to the input price when not given;
    ``cache_write`` is the five-minute write, and ``cache_write_1h`` (the one-hour write)
    defaults to twice the input price where there is a ``cache_write`` (Anthropic's rate)."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None
    cache_write_1h: float | None = None

    def __post_init__(self) -> None:
        for name in ("input", "output", "cache_read", "cache_write", "cache_write_1h"):
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                msg = (
                    f"ModelPrice.{name} must be a non-negative number of USD per million "
                    f"tokens, got {value!r}."
                )
                raise ValueError(msg)
            if value != value or value == float("inf"):
                msg = f"ModelPrice.{name} must be finite, got {value!r}."
                raise ValueError(msg)

    def cost(self, usage: Usage) -> float:
        """The USD cost of ``usage`` at these prices."""
        read = self.cache_read if self.cache_read is not None else self.input
        write = self.cache_write if self.cache_write is not None else self.input
        if self.cache_write_1h is not None:
            write_1h = self.cache_write_1h
        else:
            write_1h = 2 * self.input if self.cache_write is not None else write
        long = min(usage.cache_write_1h_tokens, usage.cache_write_tokens)
        total = (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * read
            + (usage.cache_write_tokens - long) * write
            + long * write_1h
        )
        return total / 1_000_000


PriceTable: TypeAlias = Mapping[str, ModelPrice | tuple[float, float] | Mapping[str, float]]

# Checked against the vendors' pricing pages in November 2026. Anthropic cache writes are the
# 5-minute tier; OpenAI and Google bill no separate cache write.
DEFAULT_PRICES: dict[str, ModelPrice] = {
    # Anthropic
    "claude-fable-5-1": ModelPrice(10.0, 50.0, cache_read=0.25, cache_write=12.5),
    "claude-opus-5-5": ModelPrice(4.0, 20.0, cache_read=0.20, cache_write=5.0),
    "claude-opus-5": ModelPrice(5.0, 25.0, cache_read=0.50, cache_write=6.25),
    "claude-sonnet-5-5": ModelPrice(2.0, 10.0, cache_read=0.10, cache_write=2.5),
    "claude-sonnet-5": ModelPrice(2.0, 10.0, cache_read=0.20, cache_write=2.5),
    "claude-haiku-5-5": ModelPrice(0.10, 0.50, cache_read=0.01, cache_write=0.125),
    "claude-opus-4-5": ModelPrice(5.0, 25.0, cache_read=0.50, cache_write=6.25),
    "claude-sonnet-4-6": ModelPrice(3.0, 15.0, cache_read=0.30, cache_write=3.75),
    "claude-sonnet-4-5": ModelPrice(3.0, 15.0, cache_read=0.30, cache_write=3.75),
    "claude-haiku-4-5": ModelPrice(1.0, 5.0, cache_read=0.10, cache_write=1.25),
    # OpenAI
    "gpt-6.1-sol": ModelPrice(2.0, 10.0, cache_read=0.10, cache_write=2.5),
    "gpt-6-sol": ModelPrice(2.0, 10.0, cache_read=0.20, cache_write=2.5),
    "gpt-6-luna": ModelPrice(0.10, 0.50, cache_read=0.01, cache_write=0.125),
    "gpt-5": ModelPrice(1.25, 10.0, cache_read=0.125),
    "gpt-5-mini": ModelPrice(0.25, 2.0, cache_read=0.025),
    "gpt-5-nano": ModelPrice(0.05, 0.40, cache_read=0.005),
    "gpt-4.1": ModelPrice(2.0, 8.0, cache_read=0.50),
    "gpt-4o": ModelPrice(2.5, 10.0, cache_read=1.25),
    "gpt-4o-mini": ModelPrice(0.15, 0.60, cache_read=0.075),
    # Google (prompts up to 200K tokens)
    "gemini-4-neon": ModelPrice(3.0, 15.0, cache_read=0.15),
    "gemini-4-hydrogen": ModelPrice(1.5, 7.5, cache_read=0.075),
    "gemini-2.5-pro": ModelPrice(1.25, 10.0, cache_read=0.125),
    "gemini-2.5-flash": ModelPrice(0.30, 2.50, cache_read=0.03),
    "gemini-2.5-flash-lite": ModelPrice(0.10, 0.40, cache_read=0.01),
}

#: Snapshot suffixes priced as their base id: dates (``-20250219``, ``-2024-11-20``,
#: ``@20240620``), ``-latest``, and Gemini's numbered versions (``-001``).
_DATED = re.compile(r"(-\d{8}|-\d{4}-\d{2}-\d{2}|-latest|@\d{8}|-\d{3})$")


def _coerce(model: str, value: object) -> ModelPrice:
    if isinstance(value, ModelPrice):
        return value
    if isinstance(value, tuple) and len(value) in (2, 3, 4, 5):
        return ModelPrice(*value)
    if isinstance(value, Mapping):
        return ModelPrice(**value)
    msg = (
        f"price for {model!r} must be a ModelPrice, an (input, output) tuple or a dict of "
        f"USD per million tokens, got {value!r}."
    )
    raise TypeError(msg)


def price_for(model: str | None, prices: PriceTable | None = None) -> ModelPrice | None:
    """The price of ``model`` (``prices`` first, then the defaults), or ``None``.

    An exact id wins; otherwise a dated snapshot (``claude-opus-5-20260724``,
    ``gpt-4o-2024-08-06``) or a ``models/`` prefix falls back to its base id.
    """
    if not model:
        return None
    for name in _candidates(model):
        if prices is not None and name in prices:
            return _coerce(name, prices[name])
        if name in DEFAULT_PRICES:
            return DEFAULT_PRICES[name]
    return None


@functools.lru_cache(maxsize=512)
def _candidates(model: str) -> tuple[str, ...]:
    """The ids ``model`` may be priced under, most specific first (a pure function of it)."""
    candidates = [model]
    base = model.removeprefix("models/")
    while True:
        if base not in candidates:
            candidates.append(base)
        stripped = _DATED.sub("", base)
        if stripped == base:
            break
        base = stripped
    return tuple(candidates)


def estimate_cost(
    model: str | None, usage: Usage, prices: PriceTable | None = None
) -> float | None:
    """Estimated USD cost of one call, or ``None`` when ``model`` is not in the price table."""
    price = price_for(model, prices)
    if price is None:
        return None
    return price.cost(usage)
