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
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from tensorsketch.effect_keys import IDEMPOTENCY_PREFIX, decision_key, step_key
from tensorsketch.errors import EffectInDoubtError, TransactionUnsupportedError
from tensorsketch.serializers import UnstorableValueError
from tensorsketch.suspension import Interrupt

# The key helpers stay importable from here, where the engine has always found them.
__all__ = [
    "IDEMPOTENCY_PREFIX",
    "EffectCall",
    "EffectJournal",
    "EffectLog",
    "InDoubtPolicy",
    "decision_key",
    "in_doubt_action",
    "step_key",
]

#: What a resumed run does with an effect that started but recorded no result (an intent
#: without a result): run it again, suspend for a person to say what happened, or fail.
InDoubtPolicy = Literal["retry", "ask", "fail"]
_POLICIES = ("retry", "ask", "fail")


@dataclass(frozen=True, slots=True)
class EffectCall:
    """What an effect is: written as its intent before it calls out, and shown to whoever
    decides about it when a crash leaves it in doubt.

    :param name: the effect's name (``ctx.step``'s ``name``, a tool's name).
    :param args: its arguments as plain data (shown to a person deciding; never replayed).
    :param in_doubt: the policy for an intent found without a result (see
        :data:`InDoubtPolicy`); an idempotency key always retries.
    :param outside: ``False`` for a call that changes nothing outside the run (a model call,
        a clock read): re-running it is harmless, so no intent is written and its result
        rides the run's next journal write instead of a write of its own.
    :param settle: turns the result a person gives for this effect in doubt
        (``{"result": value}``) into what the effect journals (a tool wraps it as its record);
        ``None`` journals ``value`` as it is.
    :param input: the input of the node task making the call; a durable run journals its
        digest with the intent (``input_digest``), which a fork compares before it reuses the
        result. Never stored itself.
    """

    name: str
    node: str | None = None
    step: int | None = None
    args: Any = None
    in_doubt: InDoubtPolicy = "retry"
    outside: bool = True
    settle: Callable[[Any], Any] | None = field(default=None, compare=False, repr=False)
    input: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.in_doubt not in _POLICIES:
            msg = (
                f"in_doubt must be one of {', '.join(map(repr, _POLICIES))}, got {self.in_doubt!r}."
            )
            raise ValueError(msg)

    def intent(self) -> dict[str, Any]:
        """The intent record (plain data)."""
        return {
            "effect": self.name,
            "node": self.node,
            "step": self.step,
            "args": self.args,
            "policy": self.in_doubt,
        }


#: An effect with nothing known about it: retried when in doubt, as before intents existed.
_UNNAMED = EffectCall(name="")
#: A call with no outside effect (model calls, clock reads).
INSIDE = EffectCall(name="", outside=False)


class EffectJournal(Protocol):
    """Where a durable run's effects are kept (:class:`tensorsketch.durable.RunJournal`)."""

    async def lookup(self, key: str) -> tuple[bool, Any]:
        """``(True, value)`` for a recorded key, else ``(False, None)``."""
        ...

    async def record(self, key: str, value: Any) -> None:
        """Record ``value`` under ``key`` (the first write of a key wins)."""
        ...

    async def find(self, key: str) -> tuple[bool, Any, dict[str, Any] | None]:
        """``key``'s recorded value if any, and the intent written before it was called."""
        ...

    async def intend(self, key: str, intent: dict[str, Any]) -> None:
        """Write the intent of the effect about to run under ``key``."""
        ...

    async def transact(self, key: str, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(connection)`` in the store's own database, committed with its record."""
        ...

    def record_later(self, key: str, value: Any) -> None:
        """Record ``value`` with the run's next journal write (a call with no outside
        effect: losing it to a crash only means calling it again)."""
        ...

    def ensure_lease(self) -> None:
        """Raise if the run no longer holds its thread (before an effect starts)."""
        ...

    def digest(self, value: Any) -> str | None:
        """A digest of ``value`` as the store encodes it (``None``: it cannot be encoded)."""
        ...


class EffectLog:
    """One run's effects: journal-backed when the run is durable, in memory otherwise.

    :param resume: the decisions passed with ``invoke(resume=...)``, by interrupt id (kept by
        reference: the engine fills it once the checkpoint is restored).
    """

    __slots__ = ("_attempts", "_journal", "_memo", "on_doubt", "resume")

    def __init__(self, journal: EffectJournal | None, resume: dict[str, Any]) -> None:
        self._journal = journal
        self._memo: dict[str, Any] = {}
        #: In memory, while a node with a retry policy runs: every result of the superstep,
        #: so a retried attempt replays what the failed one finished (``None``: not kept).
        self._attempts: dict[str, Any] | None = None
        self.resume = resume
        #: Told about every effect found in doubt (the engine streams it as an event).
        self.on_doubt: Callable[[dict[str, Any]], Awaitable[None]] | None = None

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

    async def once(self, key: str, fn: Callable[[], Any], call: EffectCall | None = None) -> Any:
        """Run ``fn`` once per key: replay the recorded result when there is one.

        A durable run writes ``call``'s intent before calling ``fn`` (the write also proves
        the store is there before anything happens outside); a resume that finds the intent
        but no result applies ``call.in_doubt``. In memory only idempotency keys are
        remembered (there is nothing to resume).
        """
        journal = self._journal
        if journal is None:
            if self._attempts is None and not key.startswith(IDEMPOTENCY_PREFIX):
                result = fn()  # the common case, every in-memory call: _call inline
                if inspect.isawaitable(result):
                    result = await result
                return result
            return await self._in_memory(key, fn)
        call = call or _UNNAMED
        found, value, intent = await journal.find(key)
        if found:
            return value
        if intent is not None:
            settled, value = await self._in_doubt(key, intent, call)
            if settled:
                return value
        journal.ensure_lease()  # a runner that stalled past its lease must not call out
        if not call.outside:
            result = await _call(fn)
            try:
                journal.record_later(key, result)
            except TypeError as exc:
                raise _unstorable(key, exc) from exc
            return result
        intent = call.intent()
        if call.input is not None:
            digest = journal.digest(call.input)
            if digest is not None:
                intent["input_digest"] = digest
        await journal.intend(key, intent)
        journal.ensure_lease()  # a stall right after the intent must not call out either
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
            raise _unstorable(key, exc) from exc
        return result

    async def _in_memory(self, key: str, fn: Callable[[], Any]) -> Any:
        """``once`` without a journal, for an idempotency key (remembered for the run) or
        while a retried node's attempts are kept (remembered for the superstep)."""
        kept = self._memo if key.startswith(IDEMPOTENCY_PREFIX) else self._attempts
        assert kept is not None
        if key in kept:
            return kept[key]
        result = kept[key] = await _call(fn)
        return result

    async def _in_doubt(
        self, key: str, intent: Mapping[str, Any], call: EffectCall
    ) -> tuple[bool, Any]:
        """An intent without a result: apply the policy. ``(True, value)`` when a person's
        decision settled it; ``(False, None)`` to run the effect again."""
        policy: str = call.in_doubt
        if key.startswith(IDEMPOTENCY_PREFIX):
            policy = "retry"  # the key makes a second call safe: the outside system dedupes
        shown = {
            "key": key,
            "effect": intent.get("effect") or call.name or _described(key),
            "node": intent.get("node", call.node),
            "step": intent.get("step", call.step),
            "args": intent.get("args", call.args),
            "policy": policy,
        }
        decided, decision = False, None
        if policy == "ask":
            decided, decision = await self._decision_for(key, call)
            if not decided:
                await self._tell(shown, "ask")
                choices = 'resume with "retry", "fail" or {"result": <what it returned>}'
                raise Interrupt({**shown, "choices": choices}, id=key, kind="in_doubt")
            policy = in_doubt_action(key, decision)
        if policy == "fail":
            await self._tell(shown, "fail")
            msg = (
                f"effect {shown['effect']!r} (journal key {key!r}) started before the run "
                f"stopped and recorded no result, so it may or may not have happened "
                f"(arguments: {shown['args']!r}); its in_doubt policy is 'fail'. Check the "
                "outside system; use in_doubt='ask' to supply the result on resume, or an "
                "idempotency key to make a retry safe."
            )
            raise EffectInDoubtError(msg, key=key, call=shown)
        if policy == "settled":
            assert isinstance(decision, Mapping)
            await self._tell(shown, "settled")
            value = decision["result"]
            if call.settle is not None:
                value = call.settle(value)
            await self.record(key, value)
            return True, value
        await self._tell(shown, "retry")
        return False, None

    async def _decision_for(self, key: str, call: EffectCall) -> tuple[bool, Any]:
        if call.step is None:
            return (key in self.resume, self.resume.get(key))
        return await self.decision(call.step, key)

    async def _tell(self, shown: dict[str, Any], action: str) -> None:
        if self.on_doubt is not None:
            await self.on_doubt({**shown, "action": action})

    async def transaction(self, key: str, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(connection)`` once per key in a transaction of the run's own database,
        committed together with its journal record (see ``Context.transaction``)."""
        journal = self._journal
        if journal is None:
            msg = (
                "ctx.transaction needs a durable run on SQLite or PostgreSQL: its writes "
                "commit with the run's journal record. Invoke with `thread_id=` and "
                "`backend=SqliteBackend(...)` (or PostgresBackend), or use `ctx.step`."
            )
            raise TransactionUnsupportedError(msg)
        found, value = await journal.lookup(key)
        if found:
            return value
        journal.ensure_lease()
        return await journal.transact(key, fn)

    async def peek(self, key: str) -> tuple[bool, Any]:
        """Whether ``key`` has a recorded value, and the value (nothing is run); in memory,
        a result a retried node's failed attempt got counts too (``once`` replays it)."""
        if self._journal is not None:
            return await self._journal.lookup(key)
        if key in self._memo:
            return True, self._memo[key]
        attempts = self._attempts
        if attempts is not None and key in attempts:  # a retried node's earlier attempt
            return True, attempts[key]
        return False, None

    async def record(self, key: str, value: Any) -> None:
        """Record ``value`` under ``key`` (the first write wins)."""
        if self._journal is not None:
            await self._journal.record(key, value)
        else:
            self._memo.setdefault(key, value)

    def record_later(self, key: str, value: Any) -> None:
        """Record ``value``, which no outside effect produced, under ``key`` with the run's
        next journal write: what ``once`` does after its look-up, for a caller whose
        :meth:`peek` just missed. A crash before that write only makes the caller compute
        it again. In memory it is kept as :meth:`record` keeps it."""
        journal = self._journal
        if journal is None:
            self._memo.setdefault(key, value)
            return
        try:
            journal.record_later(key, value)
        except TypeError as exc:
            raise _unstorable(key, exc) from exc

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


def in_doubt_action(key: str, decision: Any) -> str:
    """What a person decided about an effect in doubt: ``"retry"``, ``"fail"``, or
    ``"settled"`` for ``{"result": value}`` (it happened, and returned ``value``)."""
    if decision in ("retry", "fail"):
        return str(decision)
    if isinstance(decision, Mapping) and set(decision) == {"result"}:
        return "settled"
    msg = (
        f'the decision for effect {key!r} in doubt must be "retry" (run it again), "fail" '
        f'or {{"result": <what it returned>}} (it happened), got {decision!r}.'
    )
    raise ValueError(msg)


def _unstorable(key: str, exc: TypeError) -> UnstorableValueError:
    msg = (
        f"the result of durable step {_described(key)} cannot be journaled (it ran, "
        f"but a resume could not replay it): {exc}"
    )
    return UnstorableValueError(msg)


def _described(key: str) -> str:
    """A ``ctx.step`` journal key (``"0:Charge:1:charge"``) as its name and node."""
    parts = key.split(":", 3)
    if len(parts) == 4 and parts[0].isdigit():
        return f"{parts[3]!r} of node {parts[1]!r} (superstep {parts[0]})"
    return repr(key)
