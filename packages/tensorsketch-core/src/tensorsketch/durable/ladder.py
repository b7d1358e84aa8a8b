"""The checkpoint format: a delta ladder of rows, written and folded back into values.

A checkpoint stores only what changed at its barrier: a field that was replaced is written in
full (``set``), a list that only grew is written as the appended suffix (``append``). The full
state at any checkpoint is the fold of its ancestors, so bytes written per superstep stay flat
as a message history grows, while ``get_state`` still returns whole values. A root checkpoint
(the first of a thread, or of a fork) is a full snapshot.

Reading must not be linear in the history, so deltas form a ladder (a base-:data:`FANOUT`
Fenwick tree): checkpoint ``n`` of an epoch stores the changes since checkpoint
``n - FANOUT**v`` (``FANOUT**v`` the largest power dividing ``n``), named by ``from``. Rebuilding
any checkpoint folds at most ``(FANOUT - 1)`` rows per level, ``O(FANOUT log n)`` rows, while
each appended item is re-stored once per level. An epoch ends with a new full snapshot once
the deltas a read would fold outweigh the last snapshot (:data:`SNAPSHOT_RATIO`), so a read
folds at most about twice the state's bytes and snapshots cost an amortized constant per step.

Both directions live here, so the format has one owner: :class:`LadderWriter` places each new
row, :func:`rebuild` folds a chain of rows back into a :class:`Checkpoint`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tensorsketch.durable.blobs import extract
from tensorsketch.durable.checkpoint import Checkpoint
from tensorsketch.durable.fingerprint import is_exact
from tensorsketch.durable.ids import new_checkpoint_id
from tensorsketch.errors import CheckpointDecodeError
from tensorsketch.joins import JoinState
from tensorsketch.joins import decode as decode_joins
from tensorsketch.joins import encode as encode_joins
from tensorsketch.runtime.backends.base import Backend, StoredCheckpoint
from tensorsketch.serializers import JsonSerializer, MsgpackSerializer, Serializer

__all__ = [
    "BLOB_FORMAT_VERSION",
    "FANOUT",
    "FORMAT_VERSION",
    "Ladder",
    "LadderWriter",
    "PlanEntry",
    "Position",
    "Rebuilt",
    "apply_changes",
    "base_of",
    "decode_all",
    "decode_payload",
    "merge_changes",
    "rebuild",
    "to_checkpoint",
]

#: One planned task as a checkpoint stores it: the node's name and its ``Send`` payload
#: (``None`` for a plain node).
PlanEntry = tuple[str, dict[str, Any] | None]

#: Version of the checkpoint payload layout; a newer one is refused with a clear error.
#: 2 added the delta ladder (``n``, ``from``); version 1 payloads still load.
FORMAT_VERSION = 2

#: The version of a row that refers to blobs (:mod:`tensorsketch.durable.blobs`, its hashes
#: under ``blobs``). Only such rows carry it, so a release before blobs reads every other
#: row and refuses these clearly.
BLOB_FORMAT_VERSION = 3


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


_TAGGED_SERIALIZERS = (JsonSerializer, MsgpackSerializer)


def _check_payload(stored: StoredCheckpoint, payload: Any) -> dict[str, Any]:
    # Runs for every row a read folds: the error text is only built for a row that fails.
    if (
        type(payload) is dict
        and type(version := payload.get("v")) is int
        and version <= BLOB_FORMAT_VERSION
        and type(payload.get("changes")) is dict
        and type(payload.get("plan")) is list
    ):
        return payload
    if isinstance(payload, dict) and type(payload.get("v")) is int:
        if payload["v"] > BLOB_FORMAT_VERSION:
            msg = (
                f"checkpoint {stored.checkpoint_id!r} of thread {stored.thread_id!r} uses "
                f"format version {payload['v']}, newer than this release understands "
                f"({BLOB_FORMAT_VERSION}); upgrade tensorsketch-core to resume it."
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


def decode_payload(backend: Backend, stored: StoredCheckpoint) -> dict[str, Any]:
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


def decode_all(backend: Backend, stored: list[StoredCheckpoint]) -> list[dict[str, Any]]:
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
    return [decode_payload(backend, s) for s in stored]


def base_of(s: StoredCheckpoint, payload: dict[str, Any]) -> str | None:
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


def to_checkpoint(
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
class Ladder:
    """What the writer needs to place the next delta: the latest checkpoint's index in its
    epoch, the epoch snapshot's size, and one anchor per level (the top one at index 0)."""

    n: int
    snapshot_bytes: int
    levels: list[_Anchor]


@dataclass(slots=True)
class Rebuilt:
    checkpoint: Checkpoint | None
    ladder: Ladder | None
    #: A delta's base was not among the rows given (read more and try again).
    incomplete: bool = False
    #: The checkpoint whose base was missing, and that base's id.
    missing: tuple[StoredCheckpoint, str] | None = None

    def complete(self) -> Rebuilt:
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


def rebuild(
    backend: Backend,
    stored: list[StoredCheckpoint],
    target_id: str | None,
    *,
    ladder: bool = False,
) -> Rebuilt:
    """Fold the one checkpoint ``target_id`` (default: the last row) from its chain of
    deltas, in place, and (``ladder=True``) the ladder a writer continuing from it needs.

    Rows the chain does not use are never decoded. The store's ``base_id`` hints give the
    chain before anything is decoded, so it is decoded in one batch and then checked against
    the payloads; rows without a hint are decoded as the walk reaches them.
    """
    if not stored:
        return Rebuilt(None, None)
    last = len(stored) - 1
    if target_id is None or stored[last].checkpoint_id == target_id:
        end: int | None = last
    else:
        end = next((i for i, s in enumerate(stored) if s.checkpoint_id == target_id), None)
    if end is None:
        return Rebuilt(None, None)
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
        lengths = apply_changes(values, payload["changes"], s, in_place=True)
        if laddered:
            steps.append((int(payload.get("n", 0)), s, payload, lengths))
    # Values can skip validation only if one schema wrote every row they were folded from,
    # through a serializer that round-trips exactly.
    stamps = {payloads[i].get("s") for i in chain}
    stamp = stamps.pop() if len(stamps) == 1 else None
    exact = is_exact(backend.serializer)
    schema_id = stamp if isinstance(stamp, str) and exact else None
    checkpoint = to_checkpoint(stored[chain[-1]], payloads[chain[-1]], values, schema_id)
    found = _ladder_from(steps) if laddered and not incomplete else None
    return Rebuilt(checkpoint, found, incomplete, missing)


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
            zip(segment, decode_all(backend, [stored[i] for i in segment]), strict=True)
        )
        for newer, older in itertools.pairwise(segment):
            if base_of(stored[newer], payloads[newer]) != stored[older].checkpoint_id:
                s = stored[newer]
                msg = (
                    f"checkpoint {s.checkpoint_id!r} of thread {s.thread_id!r}: the store's "
                    "base id disagrees with the payload; the store is corrupt."
                )
                raise CheckpointDecodeError(msg)
        chain += segment
        oldest = segment[-1]
        base = base_of(stored[oldest], payloads[oldest])
        cursor = None if base is None else locate(base, oldest)
        if base is not None and cursor is None:
            return chain, (stored[oldest], base)
    return chain, None


def _ladder_from(
    steps: list[tuple[int, StoredCheckpoint, dict[str, Any], dict[str, int]]],
) -> Ladder | None:
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
    return Ladder(latest, len(steps[0][1].payload), levels)


def apply_changes(
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


def merge_changes(
    first: dict[str, list[Any] | None], then: dict[str, list[Any] | None]
) -> dict[str, list[Any] | None]:
    """Two barriers' changes as one (``durability="exit"`` commits several barriers in
    one checkpoint): appends to a list concatenate; a field replaced in either is whole."""
    merged = dict(first)
    for name, appended in then.items():
        if name not in merged:
            merged[name] = appended
            continue
        before = merged[name]
        merged[name] = None if before is None or appended is None else [*before, *appended]
    return merged


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


class LadderWriter:
    """Encodes one thread's next checkpoint row and keeps the ladder it continues.

    :param schema_id: the state schema's fingerprint, stamped on every row so a read by the
        same schema may skip validation (``None``: never stamped).
    :param blob_threshold: inline file data of this many bytes or more is stored by
        reference (:mod:`tensorsketch.durable.blobs`); ``None``: the store keeps no blobs.
    """

    __slots__ = ("blob_threshold", "known_blobs", "ladder", "schema_id", "serializer", "thread_id")

    def __init__(
        self,
        thread_id: str,
        serializer: Serializer,
        schema_id: str | None,
        blob_threshold: int | None = None,
    ) -> None:
        self.thread_id = thread_id
        self.serializer = serializer
        self.schema_id = schema_id
        self.blob_threshold = blob_threshold
        #: Where the next delta goes (``None``: the next checkpoint is a full snapshot).
        self.ladder: Ladder | None = None
        #: Blobs the thread's store holds already (read back, or written by this writer):
        #: a row that refers to one does not carry its data again.
        self.known_blobs: set[str] = set()

    def adopt(self, ladder: Ladder, stored: StoredCheckpoint) -> None:
        """``stored`` was written (or is being written behind the run): continue from it."""
        self.ladder = ladder
        self.known_blobs.update(digest for digest, _ in stored.blobs)

    def forget(self) -> None:
        """A write failed: the next checkpoint is a snapshot that carries every blob again."""
        self.ladder = None
        self.known_blobs.clear()

    def encode(
        self,
        at: Position,
        changed: dict[str, list[Any] | None] | None,
        plan: list[PlanEntry],
        *,
        source: str,
        parent_id: str | None,
        meta: dict[str, Any] | None = None,
    ) -> tuple[StoredCheckpoint, Ladder]:
        """Encode a checkpoint at ``at`` (``changed=None``: a full snapshot) and the ladder
        that holds once it is stored (the caller adopts it after the write succeeds).

        A delta goes on the ladder: it holds the changes since the anchor of its level, so a
        read folds ``O(FANOUT log n)`` rows; it becomes a snapshot instead when the bytes a
        read of it would fold outgrow the epoch's snapshot (see :data:`SNAPSHOT_RATIO`).
        """
        checkpoint_id = new_checkpoint_id()
        ladder = self.ladder if changed is not None else None
        if ladder is not None and ladder.levels and ladder.levels[0].id == parent_id:
            assert changed is not None
            placed = self._delta(at, changed, plan, ladder, checkpoint_id, source, parent_id, meta)
            if placed is not None:
                return placed
        changes = _snapshot_changes(at.values)
        payload, blobs = self._payload(at, changes, plan, source, meta, base=True)
        stored = StoredCheckpoint(
            thread_id=self.thread_id,
            checkpoint_id=checkpoint_id,
            parent_id=parent_id,
            step=at.step,
            created_at=time.time(),
            payload=payload,
            blobs=blobs,
        )
        return stored, Ladder(0, len(payload), [_Anchor(0, checkpoint_id, 0, {})])

    def _delta(
        self,
        at: Position,
        changed: dict[str, list[Any] | None],
        plan: list[PlanEntry],
        ladder: Ladder,
        checkpoint_id: str,
        source: str,
        parent_id: str | None,
        meta: dict[str, Any] | None,
    ) -> tuple[StoredCheckpoint, Ladder] | None:
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
            return None  # not the ladder this writer expects: start a new epoch
        if level == len(levels) - 1:  # the top rung's anchor stays the snapshot, one level up
            top = levels[level]
            levels.append(_Anchor(top.index, top.id, top.chain_bytes, dict(top.dirty)))
        anchor = levels[level]
        changes = _delta_changes(anchor.dirty, values)
        extra: dict[str, Any] = {"n": index}
        if anchor.id != parent_id:
            extra["from"] = anchor.id
        payload, blobs = self._payload(at, changes, plan, source, meta, base=False, extra=extra)
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
            blobs=blobs,
        )
        return stored, Ladder(index, ladder.snapshot_bytes, levels)

    def _payload(
        self,
        at: Position,
        changes: dict[str, list[Any]],
        plan: list[PlanEntry],
        source: str,
        meta: dict[str, Any] | None,
        *,
        base: bool,
        extra: dict[str, Any] | None = None,
    ) -> tuple[bytes, tuple[tuple[str, bytes], ...]]:
        """The row's bytes, and the blobs it refers to that the store does not hold yet."""
        payload: dict[str, Any] = {
            "v": FORMAT_VERSION,
            "base": base,
            "source": source,
            "seq": at.seq,
            "changes": changes,
            # Lists, not tuples: plain JSON, no type tag to write or read back.
            "plan": [[name, sent] for name, sent in plan],
        }
        if at.joins:  # only while a join is part-way: a graph without joins writes as before
            payload["joins"] = encode_joins(at.joins)
        if self.schema_id is not None:  # the values are this schema's (see is_exact)
            payload["s"] = self.schema_id
        if extra:
            payload.update(extra)
        if meta:
            payload["meta"] = meta
        threshold = self.blob_threshold
        if threshold is not None and self.known_blobs:
            # A thread with large files: take them out first rather than encode them twice.
            return self._referencing(payload, changes, threshold, None)
        encoded = self.serializer.dumps(payload)
        if threshold is None or len(encoded) < threshold or not self._may_hold_blocks(encoded):
            return encoded, ()  # no file in it reaches the threshold: the common case
        return self._referencing(payload, changes, threshold, encoded)

    def _referencing(
        self,
        payload: dict[str, Any],
        changes: dict[str, list[Any]],
        threshold: int,
        encoded: bytes | None,
    ) -> tuple[bytes, tuple[tuple[str, bytes], ...]]:
        """The row with its large files as references (``encoded``: the row as it stands,
        if it was encoded already), and the blobs the store does not hold yet."""
        found = extract(changes, threshold)
        if not found.refs:
            return (self.serializer.dumps(payload) if encoded is None else encoded), ()
        payload["v"] = BLOB_FORMAT_VERSION
        payload["changes"] = found.changes
        payload["blobs"] = sorted(found.refs)
        new = tuple((d, raw) for d, raw in sorted(found.data.items()) if d not in self.known_blobs)
        return self.serializer.dumps(payload), new

    def _may_hold_blocks(self, encoded: bytes) -> bool:
        """A tagged serializer names a block's class in the bytes; others may hold one."""
        if type(self.serializer) not in _TAGGED_SERIALIZERS:
            return True
        return b"FileBlock" in encoded or b"ImageBlock" in encoded
