"""Thread administration: list threads, delete one, prune its old checkpoints.

Each change takes the thread's lease first, like a run, so it never races a runner: a thread
that another process is running is refused with :class:`ThreadBusyError`.

Pruning keeps every kept checkpoint rebuildable. Checkpoints are deltas on a ladder of bases
(see :mod:`tensorsketch.durable`), so a kept row whose base would be removed is rewritten as
a full snapshot of its state first; the rows and their ids, parents and plans stay as they
were, so resuming the latest and forking any kept checkpoint work as before.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

from tensorsketch.durable.blobs import PREFIX, referenced
from tensorsketch.durable.ladder import BLOB_FORMAT_VERSION, base_of, decode_payload
from tensorsketch.durable.lease import LEASE_TTL
from tensorsketch.durable.reads import fold_each
from tensorsketch.errors import ThreadBusyError
from tensorsketch.runtime.backends.base import Backend, StoredCheckpoint
from tensorsketch.runtime.loops import run_sync

__all__ = ["alist_threads", "list_threads"]


def _check_limit(limit: int | None, what: str) -> None:
    if limit is not None and (type(limit) is not int or limit < 1):
        msg = f"`{what}` must be a positive int, got {limit!r}."
        raise ValueError(msg)


async def alist_threads(
    backend: Backend, *, limit: int | None = None, prefix: str = ""
) -> list[str]:
    """Ids of the threads in ``backend`` that have a checkpoint, sorted; ``prefix`` keeps
    those that start with it, ``limit`` the first ``limit`` of them."""
    _check_limit(limit, "limit")
    if not isinstance(prefix, str):
        msg = f"`prefix` must be a str, got {type(prefix).__name__} {prefix!r}."
        raise TypeError(msg)
    return await backend.list_threads(prefix, limit)


def list_threads(backend: Backend, *, limit: int | None = None, prefix: str = "") -> list[str]:
    """Sync form of :func:`alist_threads`."""
    return run_sync(alist_threads(backend, limit=limit, prefix=prefix))


@contextlib.asynccontextmanager
async def _holding(backend: Backend, thread_id: str, doing: str) -> AsyncIterator[str]:
    owner = f"admin-{uuid.uuid4().hex}"
    if not await backend.acquire_lease(thread_id, owner, LEASE_TTL):
        msg = (
            f"cannot {doing} thread {thread_id!r}: another process is running it right now "
            "(it holds the thread's lease). Wait for the run to finish or cancel it, then "
            "try again."
        )
        raise ThreadBusyError(msg)
    try:
        yield owner
    finally:
        await backend.release_lease(thread_id, owner)


async def delete_thread(backend: Backend, thread_id: str) -> None:
    """Remove a thread's run records, checkpoints, effect journal, events and lease.

    The run records go first, and a thread with a queued or running run is refused there
    (:class:`ThreadBusyError`) before anything is removed; a failure after them leaves a
    thread that a second call finishes deleting.
    """
    async with _holding(backend, thread_id, "delete"):
        store = backend.run_store()
        if store is not None:
            await store.delete_thread(thread_id)
        await backend.delete_thread(thread_id)


async def prune_thread(backend: Backend, thread_id: str, keep: int) -> int:
    """Keep the newest ``keep`` checkpoints of a thread (in the order they were written)
    and remove the older ones; returns how many were removed."""
    _check_limit(keep, "keep")
    async with _holding(backend, thread_id, "prune"):
        rows = await backend.list_checkpoints(thread_id)
        if len(rows) <= keep:
            return 0
        kept = rows[-keep:]
        kept_ids = {row.checkpoint_id for row in kept}
        payloads = {row.checkpoint_id: decode_payload(backend, row) for row in kept}
        orphans = [
            row
            for row in kept
            if (base := base_of(row, payloads[row.checkpoint_id])) is not None
            and base not in kept_ids
        ]
        by_id = {row.checkpoint_id: row for row in rows}
        # Files stored by reference stay references: the rewritten rows refer to them too.
        full = fold_each(backend, rows, by_id, orphans)
        rewritten = {
            row.checkpoint_id: _as_snapshot(backend, row, checkpoint.values)
            for row, checkpoint in zip(orphans, full, strict=True)
        }
        written = [rewritten.get(row.checkpoint_id, row) for row in kept]
        if not getattr(backend, "stores_blobs", False):
            await backend.replace_checkpoints(thread_id, written)
            return len(rows) - keep
        # The blobs the kept rows refer to stay; the thread's others go in the same unit.
        used = {
            str(digest)
            for row in kept
            if row.checkpoint_id not in rewritten
            for digest in payloads[row.checkpoint_id].get("blobs", ())
        }
        for checkpoint in full:
            used.update(str(b.data)[len(PREFIX) :] for b in referenced(checkpoint.values))
        await backend.replace_checkpoints(thread_id, written, blobs=used)
        return len(rows) - keep


def _as_snapshot(
    backend: Backend, row: StoredCheckpoint, values: dict[str, object]
) -> StoredCheckpoint:
    """``row`` with its changes replaced by its whole state (a ladder epoch of its own)."""
    payload = dict(decode_payload(backend, row))
    payload.pop("from", None)
    payload.pop("blobs", None)
    payload.update(base=True, n=0, changes={name: ["set", v] for name, v in values.items()})
    refs = {str(b.data)[len(PREFIX) :] for b in referenced(values)}
    if refs:  # still refers to the files its chain stored by reference
        payload.update(v=BLOB_FORMAT_VERSION, blobs=sorted(refs))
    return StoredCheckpoint(
        thread_id=row.thread_id,
        checkpoint_id=row.checkpoint_id,
        parent_id=row.parent_id,
        step=row.step,
        created_at=row.created_at,
        payload=backend.serializer.dumps(payload),
        base_id=None,
    )
