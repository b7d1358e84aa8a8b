"""Reading a thread back: one checkpoint, a page, a branch, or just the headers.

What ``get_state``/``get_history``, the thread helpers and the Studio's debugger read; it
never writes, and folds only the rows the asked-for checkpoints are built from.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncGenerator
from typing import Any, Literal

from tensorsketch.durable.blobs import hydrate, may_refer
from tensorsketch.durable.checkpoint import Checkpoint, CheckpointInfo
from tensorsketch.durable.ladder import (
    FANOUT,
    Rebuilt,
    apply_changes,
    base_of,
    decode_all,
    decode_payload,
    rebuild,
    to_checkpoint,
)
from tensorsketch.effect_keys import decision_key
from tensorsketch.errors import CheckpointDecodeError
from tensorsketch.runtime.backends.base import Backend, StoredCheckpoint

__all__ = [
    "NEEDS_LOOP",
    "NeedsLoop",
    "describe_checkpoints",
    "fold_each",
    "iter_history",
    "load_chain",
    "load_page",
    "read_checkpoint",
    "read_checkpoint_blocking",
    "recorded_decisions",
]


def describe_checkpoints(backend: Backend, stored: list[StoredCheckpoint]) -> list[CheckpointInfo]:
    """The headers of ``stored`` (e.g. ``backend.list_checkpoints(thread)``), in order: ids,
    parents, steps, plans and metadata, without rebuilding any state."""
    out: list[CheckpointInfo] = []
    for s, payload in zip(stored, decode_all(backend, stored), strict=True):
        head = to_checkpoint(s, payload, {})
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

    Large files stored by reference stay references here (no store is read):
    :func:`tensorsketch.durable.blobs.hydrate` puts their data back.
    """
    if last_only:
        rebuilt = rebuild(backend, stored, target_id).complete()
        return [] if rebuilt.checkpoint is None else [rebuilt.checkpoint]
    if not stored:
        return []
    by_id = {s.checkpoint_id: s for s in stored}
    end = by_id.get(target_id) if target_id is not None else stored[-1]
    if end is None:
        return []
    branch = _branch(stored, by_id, end)
    payloads = decode_all(backend, branch)
    seen: dict[str, dict[str, Any]] = {}
    result: list[Checkpoint] = []
    for s, payload in zip(branch, payloads, strict=True):
        base = base_of(s, payload)
        # Each checkpoint applies its changes to its base's values (a copy: earlier
        # checkpoints keep theirs); a base outside the rows given starts from nothing.
        if base is not None and base not in seen:
            Rebuilt(None, None, True, (s, base)).complete()  # raises: the base is gone
        values = dict(seen[base]) if base is not None else {}
        apply_changes(values, payload["changes"], s, in_place=False)
        seen[s.checkpoint_id] = values
        result.append(to_checkpoint(s, payload, dict(values)))
    return result


def load_page(
    backend: Backend,
    stored: list[StoredCheckpoint],
    *,
    limit: int | None,
    before: str | None,
) -> list[Checkpoint]:
    """A page of the current branch (oldest first): the ``limit`` newest checkpoints that
    come before ``before``. Each is rebuilt from its own chain, so a page costs its size.
    Files stored by reference stay references, as in :func:`load_chain`."""
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
    return fold_each(backend, stored, by_id, branch)


def fold_each(
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
            found = decoded[row.checkpoint_id] = decode_payload(backend, row)
        return found

    page: list[Checkpoint] = []
    for target in wanted:
        path: list[StoredCheckpoint] = []  # newest first, down to a known or a snapshot
        row: StoredCheckpoint | None = target
        while row is not None and row.checkpoint_id not in seen:
            path.append(row)
            base = base_of(row, payload_of(row))
            if base is None:
                row = None
                continue
            older = by_id.get(base)
            if older is None or position[base] >= position[row.checkpoint_id]:
                Rebuilt(None, None, True, (row, base)).complete()  # raises: base is gone
            row = older
        for row in reversed(path):
            base = base_of(row, payload_of(row))
            values = dict(seen[base]) if base is not None else {}
            apply_changes(values, payload_of(row)["changes"], row, in_place=False)
            seen[row.checkpoint_id] = values
        page.append(to_checkpoint(target, payload_of(target), dict(seen[target.checkpoint_id])))
    return page


#: Rows read per round trip by :func:`iter_history`: a short first page (a timeline view
#: reads only the newest few), then longer ones.
FIRST_PAGE, PAGE = 16, 128


async def iter_history(
    backend: Backend, thread_id: str, *, before: str | None = None
) -> AsyncGenerator[Checkpoint, None]:
    """The thread's current branch, newest first, each checkpoint with its full values.

    Rows are read a page at a time (:meth:`Backend.page_checkpoints`) and each checkpoint is
    folded from its own chain of deltas when it is reached, so a consumer that stops early
    reads only the pages it used, and memory holds about two pages of rows plus the folded
    values of the ladder anchors still ahead — never the thread. ``before`` starts just
    before that checkpoint (a ``KeyError`` once the branch is walked without meeting it).
    """
    folder = _Folder(backend, thread_id)
    want: str | None = None  # the branch's next checkpoint (its parent pointers, newest first)
    started = False
    skipping = before is not None
    rows = await backend.page_checkpoints(thread_id, limit=FIRST_PAGE)
    while rows:
        folder.turn_page(rows)
        ahead: list[StoredCheckpoint] | None = None
        for index, row in enumerate(rows):
            if not started:
                want, started = row.checkpoint_id, True
            if row.checkpoint_id != want:
                continue  # a checkpoint of another branch of the thread
            want = row.parent_id
            if skipping:
                skipping = row.checkpoint_id != before
                continue
            if ahead is None and index >= len(rows) - FANOUT:
                # The last rows of a page are built on rows of the next: read it now, in one
                # round trip, rather than their bases one by one.
                ahead = await backend.page_checkpoints(
                    thread_id, before=rows[-1].checkpoint_id, limit=PAGE
                )
                folder.look_ahead(ahead)
            checkpoint = await folder.fold(row)
            if folder.may_refer:
                await hydrate(backend, checkpoint, None, folder.blobs)
            yield checkpoint
            folder.done(row.checkpoint_id)
        if want is None:
            break
        if ahead is None:
            ahead = await backend.page_checkpoints(
                thread_id, before=rows[-1].checkpoint_id, limit=PAGE
            )
        rows = ahead
    if skipping and started:
        msg = (
            f"`before={before!r}` is not a checkpoint on thread {thread_id!r}'s current "
            "branch; pass the id of a checkpoint that get_history() returned."
        )
        raise KeyError(msg)
    if want is not None and await backend.get_checkpoint(thread_id, want) is not None:
        # The parent is in the thread but was not met below its child: it was saved later.
        msg = (
            f"checkpoint {want!r} of thread {thread_id!r} is the parent of an older "
            "checkpoint (the parent pointers loop or run forward): the store is corrupt; fork "
            "from an earlier checkpoint or start a new thread."
        )
        raise CheckpointDecodeError(msg)


class _Folder:
    """Folds one thread's checkpoints, newest first, each from its chain of deltas.

    A chain only reaches older checkpoints, so once a checkpoint is yielded nothing later
    needs it: :meth:`done` drops it, and what stays is the ladder's anchors below the
    current one (``O(FANOUT log n)`` of them), each read once.
    """

    def __init__(self, backend: Backend, thread_id: str) -> None:
        self.backend = backend
        self.thread_id = thread_id
        self.page: dict[str, StoredCheckpoint] = {}  # this page's rows and the next's
        self.undecoded: list[StoredCheckpoint] = []
        self.anchors: dict[str, StoredCheckpoint] = {}  # rows below the pages, read alone
        self.payloads: dict[str, dict[str, Any]] = {}
        self.values: dict[str, dict[str, Any]] = {}
        #: A row read so far may refer to a blob (then each checkpoint is hydrated).
        self.may_refer = False
        #: The blobs read so far, by hash (each is read once per walk).
        self.blobs: dict[str, bytes] = {}

    def turn_page(self, rows: list[StoredCheckpoint]) -> None:
        """``rows`` are the page now walked: nothing older is built on the last page's."""
        for key in self.page.keys() - {row.checkpoint_id for row in rows}:
            if key not in self.anchors:
                self.payloads.pop(key, None)
        self.page = {}
        self.undecoded = []
        self.look_ahead(rows)

    def look_ahead(self, rows: list[StoredCheckpoint]) -> None:
        self.may_refer = self.may_refer or may_refer(self.backend, rows)
        for row in rows:
            self.page[row.checkpoint_id] = row
            if row.checkpoint_id not in self.payloads:
                self.undecoded.append(row)

    def _payload(self, row: StoredCheckpoint) -> dict[str, Any]:
        found = self.payloads.get(row.checkpoint_id)
        if found is None:
            if self.undecoded and row.checkpoint_id in self.page:
                # The page's rows in one call (the serializer's setup done once).
                batch, self.undecoded = self.undecoded, []
                self.payloads.update(
                    zip((r.checkpoint_id for r in batch), decode_all(self.backend, batch))
                )
                found = self.payloads.get(row.checkpoint_id)
            if found is None:
                found = self.payloads[row.checkpoint_id] = decode_payload(self.backend, row)
        return found

    async def _row(self, of: StoredCheckpoint, base: str) -> StoredCheckpoint:
        found = self.page.get(base) or self.anchors.get(base)
        if found is None:
            # One row, not its chain: the anchors below it are mostly held already, and a
            # chain would carry its snapshot's bytes again for every page.
            found = await self.backend.get_checkpoint(self.thread_id, base)
            if found is None:
                Rebuilt(None, None, True, (of, base)).complete()  # raises: the base is gone
            assert found is not None
            self.anchors[base] = found
            self.may_refer = self.may_refer or may_refer(self.backend, [found])
        return found

    async def fold(self, target: StoredCheckpoint) -> Checkpoint:
        path: list[StoredCheckpoint] = []  # newest first, down to a folded one or a snapshot
        on_path: set[str] = set()
        row: StoredCheckpoint | None = target
        while row is not None and row.checkpoint_id not in self.values:
            path.append(row)
            on_path.add(row.checkpoint_id)
            base = base_of(row, self._payload(row))
            if base is None:
                break
            if base in on_path:
                msg = (
                    f"checkpoint {row.checkpoint_id!r} of thread {self.thread_id!r} is built "
                    "on itself (its chain of bases loops): the store is corrupt; fork from an "
                    "earlier checkpoint or start a new thread."
                )
                raise CheckpointDecodeError(msg)
            row = await self._row(row, base)
        for row in reversed(path):
            payload = self._payload(row)
            base = base_of(row, payload)
            values = dict(self.values[base]) if base is not None else {}
            apply_changes(values, payload["changes"], row, in_place=False)
            self.values[row.checkpoint_id] = values
        key = target.checkpoint_id
        return to_checkpoint(target, self._payload(target), dict(self.values[key]))

    def done(self, checkpoint_id: str) -> None:
        """``checkpoint_id`` was yielded: no older checkpoint is built on it."""
        self.values.pop(checkpoint_id, None)
        self.payloads.pop(checkpoint_id, None)
        self.anchors.pop(checkpoint_id, None)


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
    rebuilt = rebuild(backend, stored, checkpoint_id)
    if rebuilt.incomplete:  # a store that lost a base hint: read the whole thread
        stored = await backend.list_checkpoints(thread_id)
        rebuilt = rebuild(backend, stored, checkpoint_id).complete()
    if rebuilt.checkpoint is not None:
        await hydrate(backend, rebuilt.checkpoint, stored)
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
    cannot, where the chain needs the whole thread (a lost base hint), or where it may refer
    to files stored by reference (they are read with an await): await
    :func:`read_checkpoint` then."""
    stored = backend.read_chain_blocking(thread_id, checkpoint_id)
    if stored is None or may_refer(backend, stored):
        return NEEDS_LOOP
    rebuilt = rebuild(backend, stored, checkpoint_id)
    return NEEDS_LOOP if rebuilt.incomplete else rebuilt.checkpoint


async def recorded_decisions(backend: Backend, checkpoint: Checkpoint) -> dict[str, Any]:
    """The decisions already recorded for what ``checkpoint`` waits on, by interrupt id: a
    run that was resumed and stopped before its next checkpoint (a crash) left them in the
    journal, and the resumed run will use them."""
    raw = checkpoint.metadata.get("interrupts") or ()
    ids = [str(p["id"]) for p in raw if p.get("kind") not in ("timer", "breakpoint")]
    if not ids:
        return {}
    keys = {decision_key(checkpoint.step, i): i for i in ids}
    found = await backend.lookup_effects(checkpoint.thread_id, list(keys))
    decided: dict[str, Any] = {}
    for key, data in found.items():
        try:
            entry = backend.serializer.loads(data)
        except CheckpointDecodeError as exc:
            thread = checkpoint.thread_id
            msg = f"journal entry {key!r} of thread {thread!r} cannot be decoded: {exc}"
            raise CheckpointDecodeError(msg) from exc
        decided[keys[key]] = entry[0] if type(entry) is list and len(entry) == 1 else entry
    return decided
