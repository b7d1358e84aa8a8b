"""Checked by mypy in the `typecheck` session (not run by pytest): ``Context[Deps]`` types
``ctx.deps``, and a bare ``Context`` still needs no type argument."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, assert_type

from tensorsketch import Context, tool


@dataclass
class Shop:
    prices: dict[str, int]


@tool
async def price(ctx: Context[Shop], item: str) -> int:
    """The price of an item."""
    assert_type(ctx.deps, Shop)
    return ctx.deps.prices[item]


async def untyped(ctx: Context) -> None:
    assert_type(ctx.deps, Any)
    assert_type(ctx.scoped("part"), Context[Any])
