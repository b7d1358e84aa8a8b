"""A fork's journal: what it inherits from its origin, and what it does with the side
effects its origin ran after the fork point.

A fork (:meth:`CompiledGraph.fork`) copies its origin's journal as it stood at the fork
point (the entries of earlier supersteps, and those of the fork point's own superstep that
a suspended or failed checkpoint lists as ``"journaled"``), so nothing the fork point had
already done runs again. A side effect the origin ran *later* is another matter: the fork
re-runs that part of the timeline, and its default is to stop before the first such effect
(:class:`~tensorsketch.errors.ForkEffectError`) rather than repeat a refund silently.
``effects="reuse"`` replays the origin's result where the call is identical (same journal
key; for a tool call, same position in the agent's turn and same tool and arguments);
``effects="rerun"`` runs it again. The choice is journaled with the fork (under
:data:`LINEAGE_KEY`), so every later run of the fork thread follows it.

Only side effects count: a lookup made inside :func:`tensorsketch.effect_calls.calling`
(``ctx.step``, ``ctx.transaction``, an agent's tool call). Model calls, timers and
bookkeeping run anew in a fork; idempotency-keyed effects the origin recorded are treated as
run after the fork point.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from tensorsketch.durable.guard import store_guard
from tensorsketch.effect_calls import CallIdentity, take_effect_call
from tensorsketch.effect_keys import (
    AgentTurnKey,
    CallKey,
    DecisionKey,
    DeferralKey,
    LlmAttemptKey,
    NodeEffectKey,
    ToolCallKey,
    decisions_prefix,
    intent_key,
    parse_effect_key,
    superstep_prefix,
    tool_effect_key,
)
from tensorsketch.errors import BackendUnsupportedError, ForkEffectError

if TYPE_CHECKING:
    from tensorsketch.durable.checkpoint import Checkpoint
    from tensorsketch.durable.journal import RunJournal

__all__ = [
    "LINEAGE_KEY",
    "ForkEffects",
    "ForkResolver",
    "Lineage",
    "check_fork_effects",
    "inherit",
    "journaled_keys",
]

#: What a fork does with a side effect its origin ran after the fork point (``None``: stop).
ForkEffects = Literal["reuse", "rerun"]

#: The journal entry a fork keeps its origin and its choice under (no effect key spells it).
LINEAGE_KEY = "fork:lineage"

_MISS: tuple[bool, Any] = (False, None)
_UNREAD = object()


@dataclass(frozen=True, slots=True)
class Lineage:
    """Where a fork came from, and what it does with its origin's later effects."""

    origin: str
    checkpoint_id: str
    step: int
    effects: ForkEffects | None
    #: The origin's journal was copied at the fork. ``False`` on a store that cannot list
    #: it (only the eight required operations): the fork point's listed entries were copied
    #: one by one, and an earlier superstep's entry is inherited when the fork looks it up.
    copied: bool = True
    #: On such a store, the fork point's superstep may hold entries of tasks that had
    #: finished before its runner resumed it, which its checkpoint could not list.
    unlisted: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "checkpoint_id": self.checkpoint_id,
            "step": self.step,
            "effects": self.effects,
            "copied": self.copied,
            "unlisted": self.unlisted,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Lineage:
        return cls(
            str(data["origin"]),
            str(data["checkpoint_id"]),
            int(data["step"]),
            check_fork_effects(data.get("effects")),
            bool(data.get("copied", True)),
            bool(data.get("unlisted", False)),
        )


def check_fork_effects(value: object) -> ForkEffects | None:
    """``value`` as a fork's ``effects=`` choice, or a ``ValueError`` naming the options."""
    if value is None or value in ("reuse", "rerun"):
        return value
    msg = (
        f"effects= takes 'reuse' (replay the origin's result of an identical call), 'rerun' "
        f"(run it again) or None (stop before the first effect the origin ran after the fork "
        f"point), got {value!r}."
    )
    raise ValueError(msg)


# -- at the fork ------------------------------------------------------------------------------


def _before_fork(key: str, step: int, listed: set[str]) -> bool:
    """Whether origin entry ``key`` was journaled before a fork point planning ``step``."""
    if key in listed:
        return True
    parsed = parse_effect_key(key)
    if isinstance(parsed, DecisionKey):
        return parsed.step < step
    if isinstance(parsed, DeferralKey):
        return parsed.tool.scope.step < step
    if isinstance(parsed, CallKey | ToolCallKey | AgentTurnKey | LlmAttemptKey | NodeEffectKey):
        return parsed.scope.step < step
    return False  # a finished task's writes (per planning checkpoint), idempotency keys


async def inherit(
    journal: RunJournal, origin: str, checkpoint: Checkpoint, effects: ForkEffects | None
) -> int:
    """Copy ``origin``'s journal as it stood at ``checkpoint`` into the fork ``journal``
    writes, with the fork's :class:`Lineage`; returns how many entries were copied. The
    fork's lease must be held."""
    backend = journal.backend
    listed = {str(k) for k in checkpoint.metadata.get("journaled") or ()}
    copied = True
    try:
        entries = await backend.list_effects(origin)
    except BackendUnsupportedError:
        # Only the required operations: copy the fork point's listed entries one by one;
        # an earlier superstep's entry is inherited when the fork looks it up (ForkResolver).
        copied = False
        entries = []
        for key in sorted(listed):
            raw = await backend.lookup_effect(origin, key)
            if raw is not None:
                entries.append((key, raw))
    kept = [(k, v) for k, v in entries if _before_fork(k, checkpoint.step, listed)]
    unlisted = bool(checkpoint.metadata.get("journaled_unlisted"))
    lineage = Lineage(origin, checkpoint.id, checkpoint.step, effects, copied, unlisted)
    await journal.record_encoded(
        [*kept, (LINEAGE_KEY, backend.serializer.dumps([lineage.to_dict()]))],
        "inheriting the origin's journal",
    )
    return len(kept)


async def journaled_keys(journal: RunJournal, step: int) -> tuple[list[str], bool]:
    """The keys superstep ``step`` has journaled so far (effects and decisions): what a
    suspended or failed checkpoint lists, so a fork from it inherits exactly those.

    A store that cannot list its journal gets the keys this run wrote or found instead;
    the flag says they may be incomplete (the run resumed the superstep past tasks that
    had finished, whose entries it never saw)."""
    backend = journal.backend
    prefixes = (superstep_prefix(step), decisions_prefix(step))
    try:
        async with store_guard(backend, "listing the superstep's journal"):
            found = await backend.list_effects(journal.thread_id, prefixes[0])
            found += await backend.list_effects(journal.thread_id, prefixes[1])
    except BackendUnsupportedError:
        seen = sorted(key for key in journal.seen if key.startswith(prefixes))
        return seen, journal.skipped_finished
    return sorted(key for key, _ in found), False


# -- during a fork's runs ---------------------------------------------------------------------


class ForkResolver:
    """A journal miss of a side effect, checked against the thread's origin if it is a fork.

    A thread that is not a fork costs one read of :data:`LINEAGE_KEY` per run (at its first
    side effect that is not journaled yet).
    """

    __slots__ = ("_journal", "_lineage")

    def __init__(self, journal: RunJournal) -> None:
        # Weakly: the journal holds its resolver, and a cycle would outlive every run until
        # the garbage collector came by (with all the run's state hanging from it).
        self._journal = cast("RunJournal", weakref.proxy(journal))
        self._lineage: Any = _UNREAD

    async def lineage(self) -> Lineage | None:
        """The thread's lineage (``None``: not a fork), read once."""
        if self._lineage is _UNREAD:
            self._lineage = await self._read(self._journal.thread_id)
        return cast("Lineage | None", self._lineage)

    async def _read(self, thread: str) -> Lineage | None:
        """``thread``'s lineage; a durable subgraph's thread (``<parent>/<key>``) of a fork
        derives one from its parent's: the same key under the origin thread, every entry of
        which counts as run after the fork point (its own supersteps are not the parent's)."""
        journal = self._journal
        raw = await journal.backend.lookup_effect(thread, LINEAGE_KEY)
        if raw is not None:
            return Lineage.from_dict(journal.decode(LINEAGE_KEY, raw))
        parent, slash, key = thread.rpartition("/")
        if not slash or not parent:
            return None
        above = await self._read(parent)
        if above is None:
            return None
        return Lineage(f"{above.origin}/{key}", above.checkpoint_id, 0, above.effects)

    async def lookup(self, key: str) -> tuple[bool, Any]:
        """What a fork answers for side effect ``key`` its own journal has no entry for:
        nothing (run it), the origin's result (``reuse``), or a :class:`ForkEffectError`."""
        call = take_effect_call()
        if call is None:
            return _MISS
        lineage = await self.lineage()
        if lineage is None:
            return _MISS
        journal = self._journal
        inherited = await self._inherited(lineage, key)
        if inherited is not None:  # ran before the fork point: the fork's own, as if copied
            value = journal.decode(key, inherited)
            await journal.record(key, value)
            return True, value
        found = await self._original(lineage, key)
        if found is None:
            return _MISS
        origin_key, raw = found
        where = (
            f"this fork (thread {journal.thread_id!r}) reached {call.label}, which its origin "
            f"thread {lineage.origin!r} ran after the fork point (checkpoint "
            f"{lineage.checkpoint_id!r}, superstep {lineage.step})"
        )
        if lineage.effects == "rerun" and lineage.unlisted and _step_of(key) == lineage.step:
            msg = (
                f"{where}, or before it: the store cannot list its journal and the origin's "
                "runner resumed that superstep past tasks that had finished, so which of its "
                "effects ran before the fork point is unknown; nothing was run. Fork with "
                "effects='reuse' (the origin's result of an identical call), from another "
                "checkpoint, or on a store that implements list_effects."
            )
            raise ForkEffectError(msg, key=key, origin=lineage.origin)
        if lineage.effects == "rerun":
            return _MISS
        if lineage.effects is None:
            msg = (
                f"{where}; running it again could repeat a side effect, so nothing was run. "
                "Fork again with effects='reuse' to replay the origin's recorded result (where "
                "the call is identical), or effects='rerun' to run it again."
            )
            raise ForkEffectError(msg, key=key, origin=lineage.origin)
        value = journal.decode(origin_key, raw)
        _check_identical(call, value, where, key, lineage.origin)
        if call.digest is None and call.input is not None:
            await self._check_same_input(call, lineage.origin, origin_key, where, key)
        await journal.record(key, value)  # the fork's own now: later runs replay it
        return True, value

    async def _inherited(self, lineage: Lineage, key: str) -> bytes | None:
        """On a store that could not copy the origin's journal at the fork, the origin's
        entry for ``key`` if it belongs to a superstep before the fork point's."""
        if lineage.copied:
            return None
        step = _step_of(key)
        if step is None or step >= lineage.step:
            return None
        found: bytes | None = await self._journal.backend.lookup_effect(lineage.origin, key)
        return found

    async def _check_same_input(
        self, call: CallIdentity, origin: str, origin_key: str, where: str, key: str
    ) -> None:
        """Refuse to reuse a ``ctx.step`` result its origin made on another node input (a
        fork whose state edit, or a ``Send`` payload, changed what the node was given). An
        origin whose intent recorded no input digest is compared by key alone."""
        journal = self._journal
        entry = intent_key(origin_key)
        raw = await journal.backend.lookup_effect(origin, entry)
        intent = journal.decode(entry, raw) if raw is not None else None
        recorded = intent.get("input_digest") if isinstance(intent, dict) else None
        if recorded is None:
            return
        mine = journal.digest(call.input)
        if mine == recorded:
            return
        msg = (
            f"{where} on another input of its node (digest {recorded}, this call's is {mine}): "
            "its result is not this call's, so it is not reused. Fork again with "
            "effects='rerun' to run it, or fork with state that gives the node the input it "
            "had."
        )
        raise ForkEffectError(msg, key=key, origin=origin)

    async def _original(self, lineage: Lineage, key: str) -> tuple[str, bytes] | None:
        """The origin's entry for the same call: the same key, or for a tool call the same
        position in the same agent turn (a model asked again names its calls anew)."""
        parsed = parse_effect_key(key)
        if isinstance(parsed, CallKey | ToolCallKey) and parsed.scope.step < lineage.step:
            return None  # before the fork point: inherited if the origin had it
        backend = self._journal.backend
        raw = await backend.lookup_effect(lineage.origin, key)
        if raw is not None:
            return key, raw
        if not isinstance(parsed, ToolCallKey):
            return None
        prefix = tool_effect_key(parsed.scope, parsed.iteration, parsed.index, "")
        try:
            listed: Sequence[tuple[str, bytes]] = await backend.list_effects(lineage.origin, prefix)
        except BackendUnsupportedError:
            return None
        for other, data in listed:
            if isinstance(parse_effect_key(other), ToolCallKey):
                return other, data
        return None


def _step_of(key: str) -> int | None:
    """The superstep an effect key belongs to (``None``: a thread-wide key)."""
    parsed = parse_effect_key(key)
    if isinstance(parsed, DecisionKey):
        return parsed.step
    if isinstance(parsed, DeferralKey):
        return parsed.tool.scope.step
    if isinstance(parsed, CallKey | ToolCallKey | AgentTurnKey | LlmAttemptKey | NodeEffectKey):
        return parsed.scope.step
    return None


def _check_identical(call: CallIdentity, value: Any, where: str, key: str, origin: str) -> None:
    """Refuse to reuse a result recorded for other arguments (or for unknown ones)."""
    if call.digest is None:
        return  # identified by its key alone
    recorded = value.get("args_digest") if isinstance(value, dict) else None
    if recorded == call.digest:
        return
    differs = (
        f"with other arguments (digest {recorded}, this call's is {call.digest})"
        if recorded is not None
        else "before its arguments were recorded, so they cannot be compared"
    )
    msg = (
        f"{where} {differs}; its result is not this call's, so it is not reused. Fork "
        "again with effects='rerun' to run the call."
    )
    raise ForkEffectError(msg, key=key, origin=origin)
