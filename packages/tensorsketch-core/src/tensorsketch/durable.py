"""Durable execution: checkpoints at every barrier, the effect journal, the event log, leases.

A checkpoint stores only what changed at its barrier: a field that was replaced is written in
full (``set``), a list that only grew is written as the appended suffix (``append``). The full
state at any checkpoint is the fold of its ancestors, so bytes written per superstep stay flat
as a message history grows, while :meth:`CompiledGraph.get_state` still returns whole values.
A root checkpoint (the first of a thread, or of a fork) is a full snapshot.

Reading must not be linear in the history, so deltas form a ladder (a base-:data:`FANOUT`
Fenwick tree): checkpoint ``n`` of an epoch stores the changes since checkpoint
``n - FANOUT**v`` (``FANOUT**v`` the largest power dividing ``n``), named by ``from``. Rebuilding
any checkpoint folds at most ``(FANOUT - 1)`` rows per level, ``O(FANOUT log n)`` rows, while
each appended item is re-stored once per level. An epoch ends with a new full snapshot once
the deltas a read would fold outweigh the last snapshot (:data:`SNAPSHOT_RATIO`), so a read
folds at most about twice the state's bytes and snapshots cost an amortized constant per step.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import itertools
import json
import time
import uuid
import warnings
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pydantic
from pydantic import BaseModel

from tensorsketch.effect_keys import writes_key
from tensorsketch.errors import (
    BackendUnavailableError,
    CheckpointDecodeError,
    LeaseLostError,
    ThreadBusyError,
)
from tensorsketch.events import Event
from tensorsketch.interrupts import PendingInterrupt
from tensorsketch.joins import JoinState
from tensorsketch.joins import decode as decode_joins
from tensorsketch.joins import encode as encode_joins

# Checkpoint ids: the runtime's fast, fork-safe 128-bit random ids (the ones spans use).
from tensorsketch.observability.tracing import new_trace_id as _new_id
from tensorsketch.runtime.backends.base import Backend, StoredCheckpoint, StoredEvent, lease_lost
from tensorsketch.serializers import (
    JsonSerializer,
    MsgpackSerializer,
    PickleSerializer,
)

if TYPE_CHECKING:
    from tensorsketch.pregel import GraphSpec, Task

__all__ = [
    "FORMAT_VERSION",
    "NEEDS_LOOP",
    "Checkpoint",
    "CheckpointInfo",
    "NeedsLoop",
    "Position",
    "RunJournal",
    "describe_checkpoints",
    "load_chain",
    "load_page",
    "read_checkpoint",
    "read_checkpoint_blocking",
    "validated_values",
]

#: Version of the checkpoint payload layout; a newer one is refused with a clear error.
#: 2 added the delta ladder (``n``, ``from``); version 1 payloads still load.
FORMAT_VERSION = 2
LEASE_TTL = 30.0
#: Fan-out of the delta ladder: more rows per read level, fewer levels to re-store. At 4 a
#: read folds about half the rows it did at 8 (9 against 16 for a 2,000-step thread), for
#: ~15 % more bytes written on a thread whose lists grow (benchmarks/README.md).
FANOUT = 4
#: A full snapshot replaces a delta once the delta bytes a read of it would fold exceed this
#: share of the epoch's snapshot (and :data:`MIN_CHAIN_BYTES`): snapshots then grow
#: geometrically, so their cost per step is amortized, and a read folds ~2x the state at most.
SNAPSHOT_RATIO = 1.0
#: Below this many delta bytes to fold a read is cheap whatever the state: no snapshot.
MIN_CHAIN_BYTES = 64 * 1024

#: Seconds a run waits for its lease heartbeat to stop (a renewal is one short round trip).
HEARTBEAT_STOP_WAIT = 2.0


def _drain_task(task: asyncio.Task[None]) -> None:
    """Retrieve a finished background task's outcome so asyncio does not log it."""
    if not task.cancelled():
        task.exception()


#: Serializers that give back exactly the values they were given (types included), the
#: condition for taking decoded values on trust; a custom one may be lossy.
_EXACT_SERIALIZERS = (JsonSerializer, MsgpackSerializer, PickleSerializer)
_TAGGED_SERIALIZERS = (JsonSerializer, MsgpackSerializer)
_FINGERPRINTS: weakref.WeakKeyDictionary[type[BaseModel], str | None] = weakref.WeakKeyDictionary()


def schema_fingerprint(schema: type[BaseModel]) -> str | None:
    """A short, stable digest of what ``schema`` accepts: its JSON schema (field names,
    types, nested shapes, constraints, defaults). Every checkpoint carries the digest of the
    state that wrote it, so a read by the same schema can take the decoded values as they are
    instead of validating them again: they were valid when written, and the serializer's
    type tags already rebuilt the models, dataclasses and enums among them.

    ``None`` (never trusted: always validated) for a schema with validator functions, whose
    code can change without changing the digest, or one without a JSON schema.
    """
    if schema in _FINGERPRINTS:
        return _FINGERPRINTS[schema]
    found: str | None = None
    decorators = schema.__pydantic_decorators__
    plain = not (
        decorators.field_validators or decorators.model_validators or decorators.validators
    ) and not any(
        type(m).__module__ == "pydantic.functional_validators"
        for info in schema.model_fields.values()
        for m in info.metadata
    )
    if plain:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a default JSON cannot show is still hashed
                document = schema.model_json_schema(mode="validation")
            text = json.dumps(document, sort_keys=True, default=repr)
        except Exception:
            text = None
        if text is not None:
            found = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    _FINGERPRINTS[schema] = found
    return found


class _PlannedTasks:
    """``next`` and ``sends`` over a ``tasks`` plan (what :class:`Checkpoint` and
    :class:`CheckpointInfo` both carry)."""

    __slots__ = ()
    tasks: tuple[tuple[str, dict[str, Any] | None], ...]

    @property
    def next(self) -> tuple[str, ...]:
        """Names of the plain (non-``Send``) nodes planned next."""
        return tuple(name for name, payload in self.tasks if payload is None)

    @property
    def sends(self) -> tuple[tuple[str, dict[str, Any]], ...]:
        """Pending ``Send`` instances as ``(node, payload)`` pairs."""
        return tuple((name, payload) for name, payload in self.tasks if payload is not None)


@dataclass(frozen=True, slots=True)
class Checkpoint(_PlannedTasks):
    """The state of a thread at one barrier (what ``get_history`` returns).

    :param tasks: the next superstep's tasks in plan order, as ``(node, payload)`` pairs
        (``payload`` is ``None`` for a plain node, the ``Send`` payload for a fan-out
        instance); the order is the barrier's fold order, so it is kept exactly.
    :param parent_id: the checkpoint this one grew from (the checkpoints of a thread and its
        forks form a tree).
    :param schema_id: the fingerprint of the state schema that wrote every row these values
        were folded from (``None``: unknown, or rows of several schemas); see
        :func:`schema_fingerprint`.
    :param joins: the wait-for-all joins that are part-way at this barrier: which of their
        sources have run since they last fired (empty for a checkpoint written before joins
        existed, or with none waiting).
    """

    id: str
    thread_id: str
    parent_id: str | None
    step: int
    values: dict[str, Any]
    tasks: tuple[tuple[str, dict[str, Any] | None], ...]
    created_at: float
    source: str = "loop"
    metadata: dict[str, Any] = field(default_factory=dict)
    schema_id: str | None = field(default=None, compare=False, repr=False)
    joins: tuple[JoinState, ...] = ()

    @property
    def plan(self) -> list[tuple[str, dict[str, Any] | None]]:
        """The tasks to run next, in plan order (copies, safe to change)."""
        return [(n, None if p is None else dict(p)) for n, p in self.tasks]


@dataclass(frozen=True, slots=True)
class CheckpointInfo(_PlannedTasks):
    """A checkpoint without its values: where it sits in the tree and what it plans.

    What a timeline of a long thread needs (:func:`describe_checkpoints`): reading it decodes
    each row's small header and plan but folds no state.

    :param changed: the fields this row's stored changes name (for a delta, the fields
        written since its base; for a snapshot, every field).
    """

    id: str
    thread_id: str
    parent_id: str | None
    step: int
    tasks: tuple[tuple[str, dict[str, Any] | None], ...]
    created_at: float
    source: str = "loop"
    metadata: dict[str, Any] = field(default_factory=dict)
    changed: tuple[str, ...] = ()


def describe_checkpoints(backend: Backend, stored: list[StoredCheckpoint]) -> list[CheckpointInfo]:
    """The headers of ``stored`` (e.g. ``backend.list_checkpoints(thread)``), in order: ids,
    parents, steps, plans and metadata, without rebuilding any state."""
    out: list[CheckpointInfo] = []
    for s, payload in zip(stored, _decode_all(backend, stored), strict=True):
        head = _checkpoint(s, payload, {})
        out.append(
            CheckpointInfo(
                id=head.id,
                thread_id=head.thread_id,
                parent_id=head.parent_id,
                step=head.step,
                tasks=head.tasks,
                created_at=head.created_at,
                source=head.source,
                metadata=head.metadata,
                changed=tuple(str(name) for name in payload["changes"]),
            )
        )
    return out


def _check_payload(stored: StoredCheckpoint, payload: Any) -> dict[str, Any]:
    # Runs for every row a read folds: the error text is only built for a row that fails.
    if (
        type(payload) is dict
        and type(version := payload.get("v")) is int
        and version <= FORMAT_VERSION
        and type(payload.get("changes")) is dict
        and type(payload.get("plan")) is list
    ):
        return payload
    if isinstance(payload, dict) and type(payload.get("v")) is int:
        if payload["v"] > FORMAT_VERSION:
            msg = (
                f"checkpoint {stored.checkpoint_id!r} of thread {stored.thread_id!r} uses "
                f"format version {payload['v']}, newer than this release understands "
                f"({FORMAT_VERSION}); upgrade tensorsketch-core to resume it."
            )
            raise CheckpointDecodeError(msg)
        if isinstance(payload.get("changes"), dict) and isinstance(payload.get("plan"), list):
            return payload  # dict / list subclasses from a custom serializer
    msg = (
        f"checkpoint {stored.checkpoint_id!r} of thread {stored.thread_id!r} is not a "
        "TensorSketch checkpoint (corrupt or written by something else); fork from an "
        "earlier checkpoint or start a new thread."
    )
    raise CheckpointDecodeError(msg)


def _decode_payload(backend: Backend, stored: StoredCheckpoint) -> dict[str, Any]:
    try:
        payload = backend.serializer.loads(stored.payload)
    except CheckpointDecodeError as exc:
        msg = (
            f"checkpoint {stored.checkpoint_id!r} of thread {stored.thread_id!r} cannot be "
            f"decoded: {str(exc).rstrip('.')}. To go on without it, fork from an earlier "
            "checkpoint (get_history() lists them) or start a new thread."
        )
        raise CheckpointDecodeError(msg) from exc
    return _check_payload(stored, payload)


def _decode_all(backend: Backend, stored: list[StoredCheckpoint]) -> list[dict[str, Any]]:
    """Decode the payloads of a chain: with the JSON or msgpack serializer in one call
    (:meth:`JsonSerializer.loads_many`, the per-call setup done once for the ~16 rows of a
    read); when that fails, row by row, so the error names the row."""
    serializer = backend.serializer
    if isinstance(serializer, _TAGGED_SERIALIZERS) and type(serializer) in _TAGGED_SERIALIZERS:
        try:  # exactly these: a subclass may decode its own way (its loads)
            payloads = serializer.loads_many([s.payload for s in stored])
        except ValueError:  # a CheckpointDecodeError among them: find and name the row
            pass
        else:
            return [_check_payload(s, p) for s, p in zip(stored, payloads, strict=True)]
    return [_decode_payload(backend, s) for s in stored]


def _base_of(s: StoredCheckpoint, payload: dict[str, Any]) -> str | None:
    """The checkpoint whose values this one's changes apply to (``None``: a snapshot)."""
    if payload.get("base"):
        return None
    base = payload.get("from", s.parent_id)
    return None if base is None else str(base)


def _malformed(s: StoredCheckpoint, exc: Exception) -> CheckpointDecodeError:
    msg = (
        f"checkpoint {s.checkpoint_id!r} of thread {s.thread_id!r} is malformed "
        f"({type(exc).__name__}: {exc}); fork from an earlier checkpoint or start a "
        "new thread."
    )
    return CheckpointDecodeError(msg)


def _checkpoint(
    s: StoredCheckpoint,
    payload: dict[str, Any],
    values: dict[str, Any],
    schema_id: str | None = None,
) -> Checkpoint:
    try:
        plan = [(str(name), p) for name, p in payload["plan"]]
        joins = decode_joins(payload["joins"]) if "joins" in payload else ()
    except (TypeError, ValueError) as exc:
        raise _malformed(s, exc) from exc
    return Checkpoint(
        id=s.checkpoint_id,
        thread_id=s.thread_id,
        parent_id=s.parent_id,
        step=s.step,
        values=values,
        tasks=tuple(plan),
        created_at=s.created_at,
        source=payload.get("source", "loop"),
        metadata={"seq": payload.get("seq", 0), **payload.get("meta", {})},
        schema_id=schema_id,
        joins=joins,
    )


@dataclass(slots=True)
class _Anchor:
    """One rung of the delta ladder: the latest checkpoint whose index is a multiple of
    ``FANOUT**level``, and what changed since it (field -> list length at the anchor while
    the field was only appended to, ``None`` once it was set or unset)."""

    index: int
    id: str
    chain_bytes: int
    dirty: dict[str, int | None]


@dataclass(slots=True)
class _Ladder:
    """What the writer needs to place the next delta: the latest checkpoint's index in its
    epoch, the epoch snapshot's size, and one anchor per level (the top one at index 0)."""

    n: int
    snapshot_bytes: int
    levels: list[_Anchor]


@dataclass(slots=True)
class _Rebuilt:
    checkpoint: Checkpoint | None
    ladder: _Ladder | None
    #: A delta's base was not among the rows given (read more and try again).
    incomplete: bool = False
    #: The checkpoint whose base was missing, and that base's id.
    missing: tuple[StoredCheckpoint, str] | None = None

    def complete(self) -> _Rebuilt:
        """This rebuild, if nothing was missing even from the whole thread: a delta whose
        base is gone (a deleted row) is an error, never a guess at the state."""
        if self.missing is not None:
            s, base = self.missing
            msg = (
                f"checkpoint {s.checkpoint_id!r} of thread {s.thread_id!r} stores changes "
                f"since checkpoint {base!r}, which is not in the store (deleted or never "
                "written), so its state cannot be rebuilt; fork from an earlier checkpoint "
                "that get_history() lists, or start a new thread."
            )
            raise CheckpointDecodeError(msg)
        return self


def _rebuild(
    backend: Backend,
    stored: list[StoredCheckpoint],
    target_id: str | None,
    *,
    ladder: bool = False,
) -> _Rebuilt:
    """Fold the one checkpoint ``target_id`` (default: the last row) from its chain of
    deltas, in place, and (``ladder=True``) the ladder a writer continuing from it needs.

    Rows the chain does not use are never decoded. The store's ``base_id`` hints give the
    chain before anything is decoded, so it is decoded in one batch and then checked against
    the payloads; rows without a hint are decoded as the walk reaches them.
    """
    if not stored:
        return _Rebuilt(None, None)
    last = len(stored) - 1
    if target_id is None or stored[last].checkpoint_id == target_id:
        end: int | None = last
    else:
        end = next((i for i, s in enumerate(stored) if s.checkpoint_id == target_id), None)
    if end is None:
        return _Rebuilt(None, None)
    by_id: dict[str, int] = {}

    def locate(base: str, below: int) -> int | None:
        if below > 0 and stored[below - 1].checkpoint_id == base:
            return below - 1  # the common case: the base is the row before
        if not by_id:
            by_id.update((s.checkpoint_id, i) for i, s in enumerate(stored))
        found = by_id.get(base)
        return found if found is not None and found < below else None

    payloads: dict[int, dict[str, Any]] = {}
    chain, missing = _walk_chain(backend, stored, end, locate, payloads)
    incomplete = missing is not None
    chain.reverse()
    values: dict[str, Any] = {}
    # The ladder: only for a version-2 chain that starts at its epoch's snapshot.
    laddered = (
        ladder
        and bool(payloads[chain[0]].get("base"))
        and all(payloads[i].get("v", 1) >= 2 for i in chain)
    )
    steps: list[tuple[int, StoredCheckpoint, dict[str, Any], dict[str, int]]] = []
    for i in chain:
        s, payload = stored[i], payloads[i]
        if payload.get("base"):
            values = {}
        lengths = _apply_changes(values, payload["changes"], s, in_place=True)
        if laddered:
            steps.append((int(payload.get("n", 0)), s, payload, lengths))
    # Values can skip validation only if one schema wrote every row they were folded from,
    # through a serializer that round-trips exactly.
    stamps = {payloads[i].get("s") for i in chain}
    stamp = stamps.pop() if len(stamps) == 1 else None
    exact = type(backend.serializer) in _EXACT_SERIALIZERS
    schema_id = stamp if isinstance(stamp, str) and exact else None
    checkpoint = _checkpoint(stored[chain[-1]], payloads[chain[-1]], values, schema_id)
    found = _ladder_from(steps) if laddered and not incomplete else None
    return _Rebuilt(checkpoint, found, incomplete, missing)


def _walk_chain(
    backend: Backend,
    stored: list[StoredCheckpoint],
    end: int,
    locate: Callable[[str, int], int | None],
    payloads: dict[int, dict[str, Any]],
) -> tuple[list[int], tuple[StoredCheckpoint, str] | None]:
    """The rows ``end``'s state is folded from, newest first, decoding them into
    ``payloads``; and, when the chain leaves the rows given, which row's base is missing.

    The store's ``base_id`` hints give a segment of the chain before anything is decoded, so
    it is decoded in one batch and then checked against the payloads.
    """
    chain: list[int] = []
    cursor: int | None = end
    while cursor is not None:
        segment = [cursor]
        while (hint := stored[segment[-1]].base_id) is not None:
            nxt = locate(hint, segment[-1])
            if nxt is None:
                break
            segment.append(nxt)
        payloads.update(
            zip(segment, _decode_all(backend, [stored[i] for i in segment]), strict=True)
        )
        for newer, older in itertools.pairwise(segment):
            if _base_of(stored[newer], payloads[newer]) != stored[older].checkpoint_id:
                s = stored[newer]
                msg = (
                    f"checkpoint {s.checkpoint_id!r} of thread {s.thread_id!r}: the store's "
                    "base id disagrees with the payload; the store is corrupt."
                )
                raise CheckpointDecodeError(msg)
        chain += segment
        oldest = segment[-1]
        base = _base_of(stored[oldest], payloads[oldest])
        cursor = None if base is None else locate(base, oldest)
        if base is not None and cursor is None:
            return chain, (stored[oldest], base)
    return chain, None


def _ladder_from(
    steps: list[tuple[int, StoredCheckpoint, dict[str, Any], dict[str, int]]],
) -> _Ladder | None:
    """Recover the writer's ladder from the chain a read folded (oldest first). Every anchor
    of the latest index is on that chain; anything unexpected returns ``None`` (the next
    checkpoint is then a snapshot, which starts a fresh epoch)."""
    indexes = [n for n, *_ in steps]
    if indexes[0] != 0 or any(b <= a for a, b in itertools.pairwise(indexes)):
        return None
    latest = indexes[-1]
    top = 0
    while FANOUT**top <= latest:
        top += 1
    chain_bytes: dict[int, int] = {}
    total = 0
    for n, s, _, _ in steps[1:]:
        total += len(s.payload)
        chain_bytes[n] = total
    chain_bytes[0] = 0
    at = {n: s.checkpoint_id for n, s, _, _ in steps}
    levels: list[_Anchor] = []
    for level in range(top + 1):
        index = latest // FANOUT**level * FANOUT**level
        if index not in at:
            return None
        dirty: dict[str, int | None] = {}
        for n, _, payload, lengths in steps:
            if n <= index:
                continue
            for name, change in payload["changes"].items():
                if change[0] == "append":
                    if name not in dirty:
                        dirty[name] = lengths.get(name)
                else:
                    dirty[name] = None
        levels.append(_Anchor(index, at[index], chain_bytes[index], dirty))
    return _Ladder(latest, len(steps[0][1].payload), levels)


def load_chain(
    backend: Backend,
    stored: list[StoredCheckpoint],
    target_id: str | None = None,
    *,
    last_only: bool = False,
) -> list[Checkpoint]:
    """Fold stored deltas into full checkpoints along the branch ending at ``target_id``.

    Returns the branch oldest first (the whole history when ``target_id`` is ``None`` and
    the thread never branched), each with its exact values. ``last_only`` returns just the
    last checkpoint, folded in place from its chain of deltas (what resuming and
    ``get_state`` need): that touches ``O(FANOUT log n)`` rows, not the whole history.
    """
    if last_only:
        rebuilt = _rebuild(backend, stored, target_id).complete()
        return [] if rebuilt.checkpoint is None else [rebuilt.checkpoint]
    if not stored:
        return []
    by_id = {s.checkpoint_id: s for s in stored}
    end = by_id.get(target_id) if target_id is not None else stored[-1]
    if end is None:
        return []
    branch = _branch(stored, by_id, end)
    payloads = _decode_all(backend, branch)
    seen: dict[str, dict[str, Any]] = {}
    result: list[Checkpoint] = []
    for s, payload in zip(branch, payloads, strict=True):
        base = _base_of(s, payload)
        # Each checkpoint applies its changes to its base's values (a copy: earlier
        # checkpoints keep theirs); a base outside the rows given starts from nothing.
        if base is not None and base not in seen:
            _Rebuilt(None, None, True, (s, base)).complete()  # raises: the base is gone
        values = dict(seen[base]) if base is not None else {}
        _apply_changes(values, payload["changes"], s, in_place=False)
        seen[s.checkpoint_id] = values
        result.append(_checkpoint(s, payload, dict(values)))
    return result


def load_page(
    backend: Backend,
    stored: list[StoredCheckpoint],
    *,
    limit: int | None,
    before: str | None,
) -> list[Checkpoint]:
    """A page of the current branch (oldest first): the ``limit`` newest checkpoints that
    come before ``before``. Each is rebuilt from its own chain, so a page costs its size."""
    if not stored:
        return []
    by_id = {s.checkpoint_id: s for s in stored}
    branch = _branch(stored, by_id, stored[-1])
    if before is not None:
        ids = [s.checkpoint_id for s in branch]
        if before not in ids:
            msg = (
                f"`before={before!r}` is not a checkpoint on thread {stored[-1].thread_id!r}'s "
                "current branch; pass the id of a checkpoint that get_history() returned."
            )
            raise KeyError(msg)
        branch = branch[: ids.index(before)]
    if limit is not None:
        branch = branch[-limit:] if limit else []
    return _fold_each(backend, stored, by_id, branch)


def _fold_each(
    backend: Backend,
    stored: list[StoredCheckpoint],
    by_id: dict[str, StoredCheckpoint],
    wanted: list[StoredCheckpoint],
) -> list[Checkpoint]:
    """Full checkpoints for ``wanted`` (oldest first), each folded from its chain of deltas.

    Values are kept per checkpoint as they are built, so the bases several checkpoints
    share (a page's ladder anchors) are decoded and folded once; rows no chain uses are
    never decoded.
    """
    position = {row.checkpoint_id: i for i, row in enumerate(stored)}
    seen: dict[str, dict[str, Any]] = {}
    decoded: dict[str, dict[str, Any]] = {}

    def payload_of(row: StoredCheckpoint) -> dict[str, Any]:
        found = decoded.get(row.checkpoint_id)
        if found is None:
            found = decoded[row.checkpoint_id] = _decode_payload(backend, row)
        return found

    page: list[Checkpoint] = []
    for target in wanted:
        path: list[StoredCheckpoint] = []  # newest first, down to a known or a snapshot
        row: StoredCheckpoint | None = target
        while row is not None and row.checkpoint_id not in seen:
            path.append(row)
            base = _base_of(row, payload_of(row))
            if base is None:
                row = None
                continue
            older = by_id.get(base)
            if older is None or position[base] >= position[row.checkpoint_id]:
                _Rebuilt(None, None, True, (row, base)).complete()  # raises: base is gone
            row = older
        for row in reversed(path):
            base = _base_of(row, payload_of(row))
            values = dict(seen[base]) if base is not None else {}
            _apply_changes(values, payload_of(row)["changes"], row, in_place=False)
            seen[row.checkpoint_id] = values
        page.append(_checkpoint(target, payload_of(target), dict(seen[target.checkpoint_id])))
    return page


def _branch(
    stored: list[StoredCheckpoint], by_id: dict[str, StoredCheckpoint], end: StoredCheckpoint
) -> list[StoredCheckpoint]:
    """The checkpoints from the root to ``end`` along parent pointers, oldest first.

    Bounded by the rows given: parent pointers that loop (a corrupt or hostile store) are a
    decode error, not an endless walk.
    """
    branch: list[StoredCheckpoint] = []
    visited: set[str] = set()
    cursor: StoredCheckpoint | None = end
    while cursor is not None:
        if cursor.checkpoint_id in visited:
            msg = (
                f"checkpoint {cursor.checkpoint_id!r} of thread {cursor.thread_id!r} is its "
                "own ancestor (the parent pointers form a cycle): the store is corrupt; fork "
                "from a checkpoint outside the cycle or start a new thread."
            )
            raise CheckpointDecodeError(msg)
        visited.add(cursor.checkpoint_id)
        branch.append(cursor)
        if cursor.parent_id is None or cursor.parent_id not in by_id:
            break
        cursor = by_id[cursor.parent_id]
    branch.reverse()
    return branch


async def read_checkpoint(
    backend: Backend, thread_id: str, checkpoint_id: str | None = None
) -> Checkpoint | None:
    """One checkpoint's full values (the latest by default), reading only its chain."""
    stored = await backend.read_chain(thread_id, checkpoint_id)
    rebuilt = _rebuild(backend, stored, checkpoint_id)
    if rebuilt.incomplete:  # a store that lost a base hint: read the whole thread
        everything = await backend.list_checkpoints(thread_id)
        rebuilt = _rebuild(backend, everything, checkpoint_id).complete()
    return rebuilt.checkpoint


class NeedsLoop(enum.Enum):
    """What :func:`read_checkpoint_blocking` returns when the read must be awaited."""

    NEEDS_LOOP = "needs-loop"


NEEDS_LOOP: Literal[NeedsLoop.NEEDS_LOOP] = NeedsLoop.NEEDS_LOOP


def read_checkpoint_blocking(
    backend: Backend, thread_id: str, checkpoint_id: str | None = None
) -> Checkpoint | Literal[NeedsLoop.NEEDS_LOOP] | None:
    """:func:`read_checkpoint` on the calling thread, with no event loop, where the backend
    can answer that way (:meth:`Backend.read_chain_blocking`); :data:`NEEDS_LOOP` where it
    cannot, or where the chain needs the whole thread (a lost base hint): await
    :func:`read_checkpoint` then."""
    stored = backend.read_chain_blocking(thread_id, checkpoint_id)
    if stored is None:
        return NEEDS_LOOP
    rebuilt = _rebuild(backend, stored, checkpoint_id)
    return NEEDS_LOOP if rebuilt.incomplete else rebuilt.checkpoint


def _apply_changes(
    values: dict[str, Any], changes: dict[str, Any], s: StoredCheckpoint, *, in_place: bool
) -> dict[str, int]:
    """Apply one checkpoint's ``set``/``append``/``unset`` changes to ``values``; return the
    length each appended list had before (what the writer's ladder records).

    ``in_place`` extends lists the fold already owns (every list here was decoded for this
    fold); otherwise each append builds a new list, so earlier checkpoints keep their values.
    """
    lengths: dict[str, int] = {}
    try:
        for name, change in changes.items():
            op = change[0]
            if op == "set":
                values[name] = change[1]
            elif op == "append":
                current = values.get(name)
                lengths[name] = len(current) if isinstance(current, list) else 0
                if in_place and isinstance(current, list):
                    current.extend(change[1])
                else:
                    values[name] = [*(current or ()), *change[1]]
            elif op == "unset":
                values.pop(name, None)
            else:
                msg = (
                    f"checkpoint {s.checkpoint_id!r} of thread {s.thread_id!r} has unknown "
                    f"change {op!r} for {name!r}, likely written by a newer release: upgrade "
                    "tensorsketch-core to read it, or fork from an earlier checkpoint."
                )
                raise CheckpointDecodeError(msg)
    except (TypeError, ValueError, IndexError, KeyError) as exc:
        if isinstance(exc, CheckpointDecodeError):
            raise
        raise _malformed(s, exc) from exc
    return lengths


def _snapshot_changes(values: dict[str, Any]) -> dict[str, list[Any]]:
    return {name: ["set", value] for name, value in values.items()}


def _mark(
    dirty: dict[str, int | None], changed: dict[str, list[Any] | None], values: dict[str, Any]
) -> None:
    """Record one barrier's changes in an anchor's ``dirty`` map: a list only appended to
    since the anchor keeps its length there, anything else is ``None`` (store it whole)."""
    for name, appended in changed.items():
        if appended is None:
            dirty[name] = None
        elif name not in dirty:
            current = values.get(name)
            start = len(current) - len(appended) if isinstance(current, list) else -1
            dirty[name] = start if start >= 0 else None


def _delta_changes(dirty: dict[str, int | None], values: dict[str, Any]) -> dict[str, list[Any]]:
    """The changes since an anchor: appended suffixes, whole values, or ``unset``."""
    changes: dict[str, list[Any]] = {}
    for name, start in dirty.items():
        if name not in values:
            changes[name] = ["unset"]
            continue
        value = values[name]
        if start is not None and isinstance(value, list) and len(value) >= start:
            changes[name] = ["append", value[start:]]
        else:
            changes[name] = ["set", value]
    return changes


def validated_values(spec: GraphSpec, checkpoint: Checkpoint) -> dict[str, Any]:
    """A checkpoint's values validated into the state's field types.

    ``compile(migrate=fn)`` maps the stored values first. A stored field the state no longer
    declares, or one that no longer validates, is an error naming the fields: dropping or
    coercing it silently would lose data a renamed field still needs. Fields added since
    (with defaults) simply take their defaults.

    Values that the same state schema wrote (:attr:`Checkpoint.schema_id` is the state's
    :func:`schema_fingerprint`) are taken as decoded: validating them again would rebuild
    every list and dict of the state for nothing (most of reading a long history back).
    """
    if (
        spec.migrate is None
        and checkpoint.schema_id is not None
        and checkpoint.schema_id == schema_fingerprint(spec.state_schema)
    ):
        return dict(checkpoint.values)
    where = f"checkpoint {checkpoint.id!r} of thread {checkpoint.thread_id!r}"
    hint = (
        "If the state changed on purpose, pass graph.compile(migrate=fn), where "
        "fn(values: dict) -> dict maps the stored values onto the current fields (see "
        "'Changing the state' in docs/durability.md)."
    )
    stored = checkpoint.values
    if spec.migrate is not None:
        try:
            stored = spec.migrate(dict(stored))
        except Exception as exc:
            msg = (
                f"{where}: compile(migrate=...) failed on its values ({type(exc).__name__}: {exc})."
            )
            raise CheckpointDecodeError(msg) from exc
        if not isinstance(stored, dict):
            msg = f"{where}: compile(migrate=...) must return a dict, got {type(stored).__name__}."
            raise CheckpointDecodeError(msg)
    fields = spec.state_schema.model_fields
    state = spec.state_schema.__name__
    unknown = sorted(name for name in stored if name not in fields)
    if unknown:
        msg = (
            f"{where} stores field(s) {', '.join(map(repr, unknown))} that the state {state} "
            f"no longer declares (renamed or removed?). {hint}"
        )
        raise CheckpointDecodeError(msg)
    values: dict[str, Any] = {}
    failed: list[str] = []
    for name, value in stored.items():
        try:
            values[name] = spec.adapter(name).validate_python(value)
        except Exception as exc:
            failed.append(f"{name!r} ({_why_invalid(exc)})")
    if failed:
        msg = (
            f"{where}: stored field(s) no longer validate as the state {state}'s types: "
            f"{'; '.join(failed)}. {hint}"
        )
        raise CheckpointDecodeError(msg)
    return values


def _why_invalid(exc: Exception) -> str:
    """What a validation error says, in a line: pydantic's first message and where it is (its
    text ends with a link, not the reason), else the exception's own text."""
    if isinstance(exc, pydantic.ValidationError) and exc.errors():
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first.get("loc", ()))
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return f"{first['msg']}{f' at {at}' if at else ''}, got {first.get('input')!r:.60}{more}"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


@contextlib.asynccontextmanager
async def _guard(backend: Backend, what: str) -> AsyncIterator[None]:
    """Turn a lost connection into ``BackendUnavailableError`` saying how to resume."""
    try:
        yield
    except (OSError, ConnectionError, TimeoutError) as exc:
        if isinstance(exc, BackendUnavailableError):
            raise
        msg = (
            f"{backend.name} backend unavailable while {what}: {type(exc).__name__}: {exc}. "
            "The run stopped at its last checkpoint; invoke the same thread_id again once "
            "the store is back to resume."
        )
        raise BackendUnavailableError(msg) from exc


@dataclass(slots=True)
class Restored:
    """What a run continuing from a checkpoint starts with (the engine applies it)."""

    values: dict[str, Any]
    step: int
    seq: int
    checkpoint_id: str
    #: The checkpoint whose planned superstep comes next (finished tasks are keyed by it).
    plan_id: str
    #: What a suspended checkpoint waits on.
    interrupts: list[PendingInterrupt]
    plan: list[tuple[str, dict[str, Any] | None]]
    #: The part-way joins (see :class:`tensorsketch.joins.JoinState`).
    joins: tuple[JoinState, ...] = ()
    #: A failed superstep's error (``record_failure``), when the checkpoint records one.
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Position:
    """Where a run stands at a barrier — what a checkpoint of it records (the engine passes
    it in; the journal reads nothing off the run)."""

    values: dict[str, Any]
    step: int
    #: The ``seq`` the run's next event gets.
    seq: int
    #: The part-way wait-for-all joins (stored beside the plan).
    joins: tuple[JoinState, ...] = ()


@dataclass(frozen=True, slots=True)
class Opened:
    """What opening a thread found: a checkpoint to continue from, the id of the input
    checkpoint just saved for a new thread, or neither (a new thread, input not saved)."""

    restored: Restored | None = None
    created: str | None = None


class RunJournal:
    """The durable side of one run: lease, restore, checkpoints, effects and events.

    A run reaches its store once to open the thread (:meth:`open`: lease, the reads a
    resume needs and, for a new thread, the input checkpoint) and once per barrier
    (:meth:`checkpoint`: the superstep's events and checkpoint in one unit; the last one also
    gives the lease back).
    """

    def __init__(self, backend: Backend, thread_id: str, spec: GraphSpec) -> None:
        self.backend = backend
        self.thread_id = thread_id
        self.spec = spec
        self.owner = uuid.uuid4().hex
        self._events: list[Event] = []
        self._heartbeat: asyncio.Task[None] | None = None
        self._lost_lease = False
        self._stopping = False
        self._held = False
        self._lease_until = 0.0
        self._fences = bool(getattr(backend, "fences_writes", False))
        #: Lease length in seconds: the backend's ``lease_ttl`` (tests shorten it).
        self.ttl = float(getattr(backend, "lease_ttl", LEASE_TTL))
        #: Where the next delta goes (``None``: the next checkpoint is a full snapshot).
        self._ladder: _Ladder | None = None
        exact = type(backend.serializer) in _EXACT_SERIALIZERS
        self._schema_id = schema_fingerprint(spec.state_schema) if exact else None

    # -- lease ------------------------------------------------------------------------------

    def _busy(self) -> ThreadBusyError:
        msg = (
            f"thread {self.thread_id!r} is being run by another process right now; only one "
            "writer may run a thread at a time. Wait for it to finish (its lease expires "
            f"{self.ttl:g}s after its owner stops), or use another thread_id."
        )
        return ThreadBusyError(msg)

    def _hold(self) -> None:
        self._held = True
        self._lease_until = time.monotonic() + self.ttl
        self._stopping = False
        self._heartbeat = asyncio.get_running_loop().create_task(self._renew())

    async def _commit(
        self,
        checkpoint: StoredCheckpoint | None,
        events: list[StoredEvent],
        *,
        durable: bool = True,
        release_owner: str | None = None,
    ) -> None:
        """``commit_step``, fenced by this run's lease where the backend can fence."""
        if self._fences:
            await self.backend.commit_step(
                self.thread_id,
                checkpoint,
                events,
                durable=durable,
                release_owner=release_owner,
                fence=self.owner,
            )
        else:  # a backend written before fencing: its commit_step takes no `fence`
            await self.backend.commit_step(
                self.thread_id, checkpoint, events, durable=durable, release_owner=release_owner
            )

    def ensure_lease(self) -> None:
        """Raise :class:`LeaseLostError` if the lease is known lost, or has run out by this
        process's clock (the event loop was blocked past it), before an effect starts.

        Best effort — the fencing of every write is the guarantee; this keeps a runner that
        wakes from a stall from calling out to the world at all.
        """
        if self._held and (self._lost_lease or time.monotonic() > self._lease_until):
            self._lost_lease = True
            raise lease_lost(self.thread_id)

    async def acquire(self) -> None:
        """Take the thread's lease (or raise :class:`ThreadBusyError`) and keep it renewed."""
        async with _guard(self.backend, "taking the thread lease"):
            ok = await self.backend.acquire_lease(self.thread_id, self.owner, self.ttl)
        if not ok:
            raise self._busy()
        self._hold()

    async def _renew(self) -> None:
        # ``_stopping`` ends the loop even when the driver ate the cancellation (redis-py's
        # ``wait_for`` can swallow it; psycopg_pool can turn it into ``PoolTimeout``).
        while not self._stopping:
            await asyncio.sleep(self.ttl / 3)
            asked = time.monotonic()
            try:
                ok = await self.backend.renew_lease(self.thread_id, self.owner, self.ttl)
            except Exception:
                continue  # a transient store error: the next checkpoint write will tell
            if not ok and not self._stopping:  # lapsed or taken over: never win it back
                self._lost_lease = True
                return
            self._lease_until = asked + self.ttl

    async def _stop_heartbeat(self) -> None:
        """Stop renewing: cancel the heartbeat and wait for it, but never for long.

        A renewal stuck on a dead connection may not return at all; the run must not wait on
        it (the flag stops the loop once the call ends, and a renewal that lands after the
        release only keeps the lease for one more TTL, as a crash would). The caller's own
        cancellation is never swallowed here.
        """
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is None:
            return
        self._stopping = True
        heartbeat.cancel()
        await asyncio.wait([heartbeat], timeout=HEARTBEAT_STOP_WAIT)
        if not heartbeat.done():
            heartbeat.add_done_callback(_drain_task)
        else:
            _drain_task(heartbeat)

    async def release(self) -> None:
        """Stop renewing the lease and give it back (if the last checkpoint did not)."""
        await self._stop_heartbeat()
        if self._held and not self._lost_lease:
            self._held = False
            with contextlib.suppress(Exception):
                await self.backend.release_lease(self.thread_id, self.owner)

    async def finish(self, *, store_down: bool = False) -> None:
        """End of a run, however it ended: store the events left, then release.

        ``store_down`` (the run failed with ``BackendUnavailableError``) skips both: each
        would wait out the store's timeout again before the caller hears of the outage, and
        the resume re-runs the failed superstep anyway (the lease runs out by itself).
        """
        if store_down:
            await self._stop_heartbeat()
            self._held = False
            return
        try:
            await self.flush_events()
        finally:
            await self.release()

    # -- restore ----------------------------------------------------------------------------

    async def open(self, fresh: tuple[Position, list[Task]] | None = None) -> Opened:
        """Take the lease and read what the thread's latest checkpoint restores.

        ``fresh`` is the run's input position (defaults and input applied) and the first
        superstep planned from it: if the thread turns out to be new, they are saved as its
        input checkpoint in the same round trip (:attr:`Opened.created`). The engine applies
        what comes back.
        """
        initial, ladder = None, None
        if fresh is not None:
            at, tasks = fresh
            initial, ladder = self._stored(at, None, tasks, source="input", parent_id=None)
        try:
            async with _guard(self.backend, "opening the thread"):
                opening = await self.backend.open_thread(
                    self.thread_id, self.owner, self.ttl, initial
                )
        except BackendUnavailableError:
            raise  # the store is gone: giving the lease back would only wait on it
        except Exception:
            # The store may have taken the lease before the failure (a row it could not
            # convert): give it back, or every retry would see ThreadBusyError for a whole TTL.
            with contextlib.suppress(Exception):
                await self.backend.release_lease(self.thread_id, self.owner)
            raise
        if not opening.acquired:
            raise self._busy()
        self._hold()
        if opening.created:
            assert initial is not None
            self._ladder = ladder
            return Opened(created=initial.checkpoint_id)
        rebuilt = _rebuild(self.backend, opening.checkpoints, None, ladder=True)
        if rebuilt.incomplete:  # a store that lost a base hint: read the whole thread
            async with _guard(self.backend, "opening the thread"):
                everything = await self.backend.list_checkpoints(self.thread_id)
            rebuilt = _rebuild(self.backend, everything, None, ladder=True).complete()
        latest = rebuilt.checkpoint
        if latest is None:
            return Opened()
        restored = self.restore(latest)
        self._ladder = rebuilt.ladder
        if opening.last_event_seq is not None:
            restored.seq = max(restored.seq, opening.last_event_seq + 1)
        return Opened(restored=restored)

    def restore(self, checkpoint: Checkpoint) -> Restored:
        """What a run continuing from ``checkpoint`` starts with (its next checkpoint is a
        full snapshot unless :meth:`open` found the ladder to continue)."""
        self._ladder = None
        suspended = checkpoint.metadata.get("interrupts") or ()
        error = checkpoint.metadata.get("error")
        return Restored(
            values=validated_values(self.spec, checkpoint),
            step=checkpoint.step,
            seq=int(checkpoint.metadata.get("seq", 0)),
            checkpoint_id=checkpoint.id,
            # A failed superstep's checkpoint plans the same tasks as the one that planned
            # it: its finished tasks' writes are journaled under that one's id.
            plan_id=str(checkpoint.metadata.get("retry_of") or checkpoint.id),
            interrupts=[PendingInterrupt.from_dict(p) for p in suspended],
            plan=checkpoint.plan,
            joins=checkpoint.joins,
            error=dict(error) if isinstance(error, dict) else None,
        )

    # -- checkpoints ------------------------------------------------------------------------

    def _stored(
        self,
        at: Position,
        changed: dict[str, list[Any] | None] | None,
        tasks: list[Task],
        *,
        source: str,
        parent_id: str | None,
        meta: dict[str, Any] | None = None,
    ) -> tuple[StoredCheckpoint, _Ladder]:
        """Encode a checkpoint at ``at`` (``changed=None``: a full snapshot) and the ladder
        that holds once it is stored.

        A delta goes on the ladder: it holds the changes since the anchor of its level, so a
        read folds ``O(FANOUT log n)`` rows; it becomes a snapshot instead when the bytes a
        read of it would fold outgrow the epoch's snapshot (see :data:`SNAPSHOT_RATIO`).
        """
        checkpoint_id = _new_id()
        ladder = self._ladder if changed is not None else None
        if ladder is not None and ladder.levels and ladder.levels[0].id == parent_id:
            assert changed is not None
            placed = self._delta(at, changed, tasks, ladder, checkpoint_id, source, parent_id, meta)
            if placed is not None:
                return placed
        payload = self._payload(at, _snapshot_changes(at.values), tasks, source, meta, base=True)
        stored = StoredCheckpoint(
            thread_id=self.thread_id,
            checkpoint_id=checkpoint_id,
            parent_id=parent_id,
            step=at.step,
            created_at=time.time(),
            payload=payload,
        )
        return stored, _Ladder(0, len(payload), [_Anchor(0, checkpoint_id, 0, {})])

    def _delta(
        self,
        at: Position,
        changed: dict[str, list[Any] | None],
        tasks: list[Task],
        ladder: _Ladder,
        checkpoint_id: str,
        source: str,
        parent_id: str | None,
        meta: dict[str, Any] | None,
    ) -> tuple[StoredCheckpoint, _Ladder] | None:
        """The next rung as a delta, or ``None`` when a snapshot should be written."""
        values = at.values
        index = ladder.n + 1
        level = 0
        while index % FANOUT ** (level + 1) == 0:
            level += 1
        levels = [_Anchor(a.index, a.id, a.chain_bytes, dict(a.dirty)) for a in ladder.levels]
        for anchor in levels:
            _mark(anchor.dirty, changed, values)
        if level >= len(levels) or levels[level].index != index - FANOUT**level:
            return None  # not the ladder this journal expects: start a new epoch
        if level == len(levels) - 1:  # the top rung's anchor stays the snapshot, one level up
            top = levels[level]
            levels.append(_Anchor(top.index, top.id, top.chain_bytes, dict(top.dirty)))
        anchor = levels[level]
        changes = _delta_changes(anchor.dirty, values)
        extra: dict[str, Any] = {"n": index}
        if anchor.id != parent_id:
            extra["from"] = anchor.id
        payload = self._payload(at, changes, tasks, source, meta, base=False, extra=extra)
        chain_bytes = anchor.chain_bytes + len(payload)
        if chain_bytes > max(SNAPSHOT_RATIO * ladder.snapshot_bytes, MIN_CHAIN_BYTES):
            return None
        for lower in range(level + 1):
            levels[lower] = _Anchor(index, checkpoint_id, chain_bytes, {})
        stored = StoredCheckpoint(
            thread_id=self.thread_id,
            checkpoint_id=checkpoint_id,
            parent_id=parent_id,
            step=at.step,
            created_at=time.time(),
            payload=payload,
            base_id=anchor.id,
        )
        return stored, _Ladder(index, ladder.snapshot_bytes, levels)

    def _payload(
        self,
        at: Position,
        changes: dict[str, list[Any]],
        tasks: list[Task],
        source: str,
        meta: dict[str, Any] | None,
        *,
        base: bool,
        extra: dict[str, Any] | None = None,
    ) -> bytes:
        payload: dict[str, Any] = {
            "v": FORMAT_VERSION,
            "base": base,
            "source": source,
            "seq": at.seq,
            "changes": changes,
            # Lists, not tuples: plain JSON, no type tag to write or read back.
            "plan": [[task.spec.name, task.payload] for task in tasks],
        }
        if at.joins:  # only while a join is part-way: a graph without joins writes as before
            payload["joins"] = encode_joins(at.joins)
        if self._schema_id is not None:  # the values are this schema's: see validated_values
            payload["s"] = self._schema_id
        if extra:
            payload.update(extra)
        if meta:
            payload["meta"] = meta
        return self.backend.serializer.dumps(payload)

    async def checkpoint(
        self,
        at: Position,
        changed: dict[str, list[Any] | None] | None,
        tasks: list[Task],
        *,
        parent_id: str | None,
        source: str = "loop",
        meta: dict[str, Any] | None = None,
        final: bool = False,
    ) -> str:
        """Save a checkpoint of ``at`` after a barrier (``changed=None`` writes a full
        snapshot), with the events buffered since the last one, as a child of ``parent_id``.

        ``meta`` is stored with it and read back as ``Checkpoint.metadata`` (a suspended
        run records what it waits for there). ``final`` marks the run's last write: the lease
        is given back in the same unit of work.
        """
        if self._lost_lease:
            raise lease_lost(self.thread_id)
        stored, ladder = self._stored(
            at, changed, tasks, source=source, parent_id=parent_id, meta=meta
        )
        events = self._encoded_events()
        release = None
        if final and self._held:
            await self._stop_heartbeat()
            release = self.owner
        async with self._fenced("saving a checkpoint"):
            await self._commit(
                stored,
                events,
                # The input is made durable by the next durable write (see open_thread).
                durable=source != "input",
                release_owner=release,
            )
        if release is not None:
            self._held = False
        self._ladder = ladder
        return stored.checkpoint_id

    # -- effects ----------------------------------------------------------------------------

    async def lookup(self, key: str) -> tuple[bool, Any]:
        async with _guard(self.backend, "reading the effect journal"):
            raw = await self.backend.lookup_effect(self.thread_id, key)
        if raw is None:
            return False, None
        return True, self._entry(key, raw)

    def _entry(self, key: str, raw: bytes) -> Any:
        """Decode one journal entry: ``record`` stores ``[value]``, so anything else (a
        string would replay its first character, ``{}`` would crash) is refused by name."""
        try:
            decoded = self.backend.serializer.loads(raw)
        except CheckpointDecodeError as exc:
            msg = f"journal entry {key!r} of thread {self.thread_id!r} cannot be decoded: {exc}"
            raise CheckpointDecodeError(msg) from exc
        if type(decoded) is not list or len(decoded) != 1:
            shape = type(decoded).__name__
            if isinstance(decoded, list):
                shape = f"a list of {len(decoded)} items"
            msg = (
                f"journal entry {key!r} of thread {self.thread_id!r} is malformed (a "
                f"one-item list was expected, found {shape}): it was not written by this "
                "runtime. Fork the thread from a checkpoint before the entry was written, or "
                "start a new thread."
            )
            raise CheckpointDecodeError(msg)
        return decoded[0]

    async def record(self, key: str, value: Any) -> None:
        await self._write([(key, value)], "recording an effect")

    async def _write(self, items: list[tuple[str, Any]], what: str) -> None:
        """Journal entries as one unit, fenced by this run's lease where the backend can
        fence (a backend's default ``record_effects`` writes them one by one)."""
        dumps = self.backend.serializer.dumps
        encoded = [(key, dumps([value])) for key, value in items]
        async with self._fenced(what):
            if self._fences:
                await self.backend.record_effects(self.thread_id, encoded, fence=self.owner)
            else:
                await self.backend.record_effects(self.thread_id, encoded)

    @contextlib.asynccontextmanager
    async def _fenced(self, what: str) -> AsyncIterator[None]:
        """A write of this run: a lost connection is ``BackendUnavailableError``; a refused
        fence marks the lease lost, so nothing else of this run is written."""
        try:
            async with _guard(self.backend, what):
                yield
        except LeaseLostError:
            self._lost_lease = True
            self._held = False  # not ours to release any more
            raise

    async def lookup_many(self, keys: list[str]) -> dict[str, Any]:
        """The recorded values among ``keys``, in one store round trip."""
        async with _guard(self.backend, "reading the effect journal"):
            raw = await self.backend.lookup_effects(self.thread_id, keys)
        return {key: self._entry(key, data) for key, data in raw.items()}

    async def record_many(self, items: list[tuple[str, Any]]) -> None:
        await self._write(items, "recording finished tasks")

    # -- per-branch commit ------------------------------------------------------------------

    @staticmethod
    def task_key(plan_id: str | None, task: Task) -> str:
        """Where a finished task's writes are journaled: per planning checkpoint, so writes
        computed from one state are never replayed onto another (new input re-plans)."""
        return writes_key(plan_id, task.spec.name, task.instance)

    async def finished_writes(self, plan_id: str | None, tasks: list[Task]) -> dict[int, Any]:
        """Writes of the tasks that finished before the run stopped, by task index."""
        keys = [self.task_key(plan_id, task) for task in tasks]
        found = await self.lookup_many(keys)
        return {i: found[key] for i, key in enumerate(keys) if key in found}

    def write_log(self, plan_id: str | None) -> TaskWriteLog:
        return TaskWriteLog(self, plan_id)

    # -- events -----------------------------------------------------------------------------

    def buffer_event(self, event: Event) -> None:
        self._events.append(event)

    def _encoded_events(self) -> list[StoredEvent]:
        if not self._events:
            return []
        events, self._events = self._events, []
        dumps = self.backend.serializer.dumps
        return [StoredEvent(seq=e.seq, payload=dumps(e.to_dict())) for e in events]

    async def flush_events(self) -> None:
        stored = self._encoded_events()
        if not stored:
            return
        if self._lost_lease:
            return  # the thread is someone else's now: its log is theirs to write
        async with self._fenced("appending stream events"):
            await self._commit(None, stored)


class TaskWriteLog:
    """A superstep's finished tasks, journaled while their siblings still run, so a crash or
    a failing sibling costs only the unfinished tasks on resume.

    A finishing task writes its own entry before it counts as done, together with any that
    finished meanwhile (one batch while a write is in flight). The superstep's last task
    writes nothing: the barrier's checkpoint covers it a moment later.
    """

    __slots__ = ("_buffer", "_idle", "_journal", "_plan_id")

    def __init__(self, journal: RunJournal, plan_id: str | None) -> None:
        self._journal = journal
        self._plan_id = plan_id
        self._buffer: list[tuple[str, Any]] = []
        self._idle: asyncio.Event | None = None  # set while no batch is being written

    async def add(self, task: Task, writes: dict[str, Any]) -> None:
        self._buffer.append((RunJournal.task_key(self._plan_id, task), writes))
        if self._idle is not None and not self._idle.is_set():
            return  # the batch in flight is followed by one that includes this entry
        await self._drain()

    async def _drain(self) -> None:
        idle = self._idle = asyncio.Event()
        try:
            while self._buffer:
                batch, self._buffer = self._buffer, []
                # Shielded like an effect record: a cancelled task (its sibling failed)
                # still lets the write in flight finish instead of cutting it off.
                writing = asyncio.ensure_future(self._journal.record_many(batch))
                try:
                    await asyncio.shield(writing)
                except asyncio.CancelledError:
                    await asyncio.wait([writing])
                    raise
        finally:
            idle.set()

    async def close(self, *, keep: bool) -> None:
        """End of the superstep: ``keep`` stores every finished task (a sibling failed);
        otherwise what is not written yet is dropped. No batch is in flight on return (the
        run may be about to give its lease back)."""
        if not keep:
            self._buffer = []
        if self._idle is not None:
            await self._idle.wait()
        if keep and self._buffer:
            await self._drain()
