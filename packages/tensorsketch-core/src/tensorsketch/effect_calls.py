"""Which journal lookup is a side effect's, and what the call was.

A run's journal is read for many things — model replies, timers, bookkeeping — but only a
side effect (``ctx.step``, an agent's tool call) is something a fork must not repeat
silently (see :mod:`tensorsketch.durable.lineage`). The code making such a call says so
around its lookup with :func:`calling`; the journal takes the description with
:func:`take_effect_call` on a miss, so whatever the effect's own function then reads sees
no description.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["CallIdentity", "calling", "take_effect_call"]


@dataclass(frozen=True, slots=True)
class CallIdentity:
    """The side effect a journal lookup is for.

    :param label: how an error names it (``"ctx.step 'refund'"``, ``"tool call refund"``).
    :param digest: a digest of its arguments (``None``: the key alone identifies the call,
        as for a ``ctx.step``, whose function is opaque).
    """

    label: str
    digest: str | None = None


_CURRENT: ContextVar[CallIdentity | None] = ContextVar("tensorsketch_effect_call", default=None)


@contextlib.contextmanager
def calling(call: CallIdentity) -> Iterator[None]:
    """Mark the journal lookups inside as those of ``call`` (until one takes it)."""
    token = _CURRENT.set(call)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def take_effect_call() -> CallIdentity | None:
    """The side effect being looked up, if any; later lookups in this task see none."""
    call = _CURRENT.get()
    if call is not None:
        _CURRENT.set(None)
    return call
