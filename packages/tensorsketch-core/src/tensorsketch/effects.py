"""The effect log: a side effect runs once per key, and its result survives crashes.

Exactly-once effects are what the durable runtime is for, so they live here, in one place:
running an effect under a key, peeking at and recording results, and the decisions an
``invoke(resume=...)`` supplies. How the keys are spelt is :mod:`tensorsketch.effect_keys`.
A durable run keeps the log in its store's journal (:class:`tensorsketch.durable.RunJournal`);
an in-memory run keeps idempotency keys and agent bookkeeping for its own lifetime only.

Node code reaches it through :class:`tensorsketch.Context` (``ctx.step``, ``ctx.effects``,
``ctx.next_key``); nothing outside the engine touches a run's internals.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any, Protocol

from tensorsketch.effect_keys import IDEMPOTENCY_PREFIX, decision_key, step_key
from tensorsketch.serializers import UnstorableValueError

# The key helpers stay importable from here, where the engine has always found them.
__all__ = ["IDEMPOTENCY_PREFIX", "EffectJournal", "EffectLog", "decision_key", "step_key"]


class EffectJournal(Protocol):
    """Where a durable run's effects are kept (:class:`tensorsketch.durable.RunJournal`)."""

    async def lookup(self, key: str) -> tuple[bool, Any]:
        """``(True, value)`` for a recorded key, else ``(False, None)``."""
        ...

    async def record(self, key: str, value: Any) -> None:
        """Record ``value`` under ``key`` (the first write of a key wins)."""
        ...

    def ensure_lease(self) -> None:
        """Raise if the run no longer holds its thread (before an effect starts)."""
        ...


class EffectLog:
    """One run's effects: journal-backed when the run is durable, in memory otherwise.

    :param resume: the decisions passed with ``invoke(resume=...)``, by interrupt id (kept by
        reference: the engine fills it once the checkpoint is restored).
    """

    __slots__ = ("_attempts", "_journal", "_memo", "resume")

    def __init__(self, journal: EffectJournal | None, resume: dict[str, Any]) -> None:
        self._journal = journal
        self._memo: dict[str, Any] = {}
        #: In memory, while a node with a retry policy runs: every result of the superstep,
        #: so a retried attempt replays what the failed one finished (``None``: not kept).
        self._attempts: dict[str, Any] | None = None
        self.resume = resume

    def remember_attempts(self) -> None:
        """Keep this superstep's results in memory too (a retried node replays them)."""
        if self._journal is None and self._attempts is None:
            self._attempts = {}

    def forget_attempts(self) -> None:
        """The superstep is folded: no attempt of it can run again."""
        self._attempts = None

    @property
    def durable(self) -> bool:
        """Whether results outlive this process (the run has a backend)."""
        return self._journal is not None

    async def once(self, key: str, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` once per key: replay the recorded result when there is one.

        In memory only idempotency keys are remembered (there is nothing to resume).
        """
        journal = self._journal
        if journal is None:
            if not key.startswith(IDEMPOTENCY_PREFIX):
                attempts = self._attempts
                if attempts is None:
                    return await _call(fn)
                if key in attempts:
                    return attempts[key]
                result = attempts[key] = await _call(fn)
                return result
            if key in self._memo:
                return self._memo[key]
            result = self._memo[key] = await _call(fn)
            return result
        found, value = await journal.lookup(key)
        if found:
            return value
        journal.ensure_lease()  # a runner that stalled past its lease must not call out
        result = await _call(fn)
        # The effect has happened: record it even if this task is cancelled meanwhile (a
        # sibling in the fan-out failed, the consumer stopped), or a resume would repeat it.
        recording = asyncio.ensure_future(journal.record(key, result))
        try:
            await asyncio.shield(recording)
        except asyncio.CancelledError:
            await recording
            raise
        except TypeError as exc:  # the serializer refuses the result: say whose it is
            msg = (
                f"the result of durable step {_described(key)} cannot be journaled (it ran, "
                f"but a resume could not replay it): {exc}"
            )
            raise UnstorableValueError(msg) from exc
        return result

    async def peek(self, key: str) -> tuple[bool, Any]:
        """Whether ``key`` has a recorded value, and the value (nothing is run)."""
        if self._journal is not None:
            return await self._journal.lookup(key)
        if key in self._memo:
            return True, self._memo[key]
        return False, None

    async def record(self, key: str, value: Any) -> None:
        """Record ``value`` under ``key`` (the first write wins)."""
        if self._journal is not None:
            await self._journal.record(key, value)
        else:
            self._memo.setdefault(key, value)

    async def decision(self, step: int, interrupt_id: str) -> tuple[bool, Any]:
        """The decision for interrupt ``interrupt_id`` of superstep ``step``: recorded in the
        journal, or passed to this invoke with ``resume=``."""
        if self._journal is not None:
            found, value = await self._journal.lookup(decision_key(step, interrupt_id))
            if found:
                return True, value
        if interrupt_id in self.resume:
            return True, self.resume[interrupt_id]
        return False, None


async def _call(fn: Callable[[], Any]) -> Any:
    result = fn()
    if inspect.isawaitable(result):
        result = await result
    return result


def _described(key: str) -> str:
    """A ``ctx.step`` journal key (``"0:Charge:1:charge"``) as its name and node."""
    parts = key.split(":", 3)
    if len(parts) == 4 and parts[0].isdigit():
        return f"{parts[3]!r} of node {parts[1]!r} (superstep {parts[0]})"
    return repr(key)
