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
import hashlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

__all__ = ["CallIdentity", "calling", "input_digest", "take_effect_call"]


@dataclass(frozen=True, slots=True)
class CallIdentity:
    """The side effect a journal lookup is for.

    :param label: how an error names it (``"ctx.step 'refund'"``, ``"tool call refund"``).
    :param digest: a digest of its arguments (``None`` for a ``ctx.step``, whose function is
        opaque: it is identified by its key and the input of the node that made it).
    :param input: the input of the node task making the call (``None``: not known); a fork
        reuses a ``ctx.step`` result only for the same input (see :func:`input_digest`).
    """

    label: str
    digest: str | None = None
    input: Any = field(default=None, compare=False, repr=False)


def input_digest(dumps: Callable[[Any], bytes], value: Any) -> str | None:
    """A digest of the node input an effect ran under, encoded as the run's store encodes it
    (``dumps``). It is journaled with the effect's intent, so a fork can tell whether the
    ``ctx.step`` it would reuse ran on the same input. ``None`` when the serializer refuses
    the value: the call is then identified by its key alone. A node's ``In`` model counts
    by its fields (its class may be local to a function, which a store does not encode)."""
    if isinstance(value, BaseModel):
        value = value.model_dump()
    try:
        data = dumps(value)
    except (TypeError, ValueError):
        return None
    return "sha256:" + hashlib.sha256(data).hexdigest()[:32]


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
