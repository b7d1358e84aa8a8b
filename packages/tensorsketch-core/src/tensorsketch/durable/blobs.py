"""Large files in checkpoints, stored by reference: each payload once per thread.

A file or image sent inline (a ``FileBlock`` / ``ImageBlock`` with base64 ``data``) would
otherwise be written into every snapshot of the thread that holds it. On a store that
:attr:`~tensorsketch.runtime.backends.base.Backend.stores_blobs`, the writer replaces data
of :attr:`~tensorsketch.runtime.backends.base.Backend.blob_threshold` bytes or more with a
reference (``tensorsketch-blob:sha256:<hex>``, the hash of the data's bytes) and hands the
data to the store with the first row that refers to it; later rows carry only the reference.
Reads put the data back before anyone sees the values.

Only rows that refer to a blob change format (version 3, with their hashes under ``blobs``),
so a thread without large files is written exactly as before, and a release that predates
blobs refuses a row that has them instead of showing a reference as file data.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from tensorsketch.durable.checkpoint import Checkpoint
from tensorsketch.errors import CheckpointDecodeError
from tensorsketch.messages import FileBlock, ImageBlock
from tensorsketch.runtime.backends.base import Backend, StoredCheckpoint

__all__ = ["PREFIX", "Extracted", "extract", "hydrate", "may_refer", "referenced"]

#: What a referenced block's ``data`` starts with (never base64: it has ``-`` and ``:``).
PREFIX = "tensorsketch-blob:sha256:"
_PREFIX_BYTES = PREFIX.encode()
_BLOCKS = (FileBlock, ImageBlock)
_SCALARS = frozenset({str, int, float, bool, type(None), bytes})
#: Serializers known to write a string's characters as they are (so a row that refers to a
#: blob contains :data:`PREFIX`, and one whose payload lacks it refers to none).
_PLAIN_TEXT = frozenset({"JsonSerializer", "MsgpackSerializer", "PickleSerializer"})


class Extracted:
    """What taking blobs out of one row's changes found: the changes to store instead, the
    hashes they refer to, and the data of each (by hash)."""

    __slots__ = ("changes", "data", "refs")

    def __init__(self, changes: dict[str, Any]) -> None:
        self.changes = changes
        self.refs: set[str] = set()
        self.data: dict[str, bytes] = {}


def extract(changes: dict[str, Any], threshold: int) -> Extracted:
    """``changes`` with every block whose inline data is ``threshold`` bytes or more turned
    into a reference. Copy on write: the values the run holds are never changed."""
    out = Extracted(changes)
    walker = _Walker(threshold, out)
    out.changes = {name: walker.value(change) for name, change in changes.items()}
    return out


class _Walker:
    __slots__ = ("out", "threshold")

    def __init__(self, threshold: int, out: Extracted) -> None:
        self.threshold = threshold
        self.out = out

    def value(self, obj: Any) -> Any:
        kind = type(obj)
        if kind in _SCALARS:
            return obj
        if kind is list or kind is tuple:
            items = [self.value(v) for v in obj]
            same = all(a is b for a, b in zip(items, obj, strict=True))
            return obj if same else kind(items)
        if kind is dict:
            found = {k: self.value(v) for k, v in obj.items()}
            return obj if all(found[k] is v for k, v in obj.items()) else found
        if isinstance(obj, _BLOCKS):
            return self.block(obj)
        if isinstance(obj, BaseModel):
            updates = {}
            for name, v in obj.__dict__.items():
                new = self.value(v)
                if new is not v:
                    updates[name] = new
            return obj.model_copy(update=updates) if updates else obj
        return obj

    def block(self, block: FileBlock | ImageBlock) -> Any:
        data = block.data
        if data is None:
            return block
        if data.startswith(PREFIX):  # already a reference (a pruned row's values)
            self.out.refs.add(data[len(PREFIX) :])
            return block
        if len(data) < self.threshold:
            return block
        raw = data.encode()
        digest = hashlib.sha256(raw).hexdigest()
        self.out.refs.add(digest)
        self.out.data[digest] = raw
        return block.model_copy(update={"data": PREFIX + digest})


def may_refer(backend: Backend, rows: Iterable[StoredCheckpoint]) -> bool:
    """Whether any of ``rows`` may refer to a blob: a byte search for the reference, where
    the serializer writes strings as they are; otherwise ``True`` on a store with blobs."""
    if not getattr(backend, "stores_blobs", False):
        return False
    if type(backend.serializer).__name__ not in _PLAIN_TEXT:
        return True
    return any(_PREFIX_BYTES in row.payload for row in rows)


def referenced(values: Any) -> list[FileBlock | ImageBlock]:
    """The blocks in ``values`` (a checkpoint's values, or a row's changes) whose data is a
    reference, in the order met."""
    found: list[FileBlock | ImageBlock] = []
    _collect(values, found, set())
    return found


def _collect(obj: Any, found: list[FileBlock | ImageBlock], seen: set[int]) -> None:
    kind = type(obj)
    if kind in _SCALARS:
        return
    if kind is list or kind is tuple:
        for v in obj:
            _collect(v, found, seen)
    elif kind is dict:
        for v in obj.values():
            _collect(v, found, seen)
    elif isinstance(obj, _BLOCKS):
        data = obj.data
        if data is not None and data.startswith(PREFIX) and id(obj) not in seen:
            seen.add(id(obj))
            found.append(obj)
    elif isinstance(obj, BaseModel):
        for v in obj.__dict__.values():
            _collect(v, found, seen)


async def hydrate(
    backend: Backend,
    checkpoint: Checkpoint,
    rows: Iterable[StoredCheckpoint] | None,
    cache: dict[str, bytes] | None = None,
) -> set[str]:
    """Put the stored data back into ``checkpoint``'s referenced blocks (in place: the
    blocks were decoded for this read) and return the hashes read. ``rows`` are the rows it
    was folded from; when none may refer to a blob, nothing is walked or read (``None``:
    the caller checked, walk the values). ``cache`` keeps what was read for the next
    checkpoint of the same read (a history walk).

    :raises CheckpointDecodeError: naming the checkpoint, its thread and the hash, when a
        referenced blob is not in the store.
    """
    if rows is not None and not may_refer(backend, rows):
        return set()
    blocks = referenced(checkpoint.values)
    if not blocks:
        return set()
    wanted = sorted({str(b.data)[len(PREFIX) :] for b in blocks})
    found = {} if cache is None else cache
    missing = [d for d in wanted if d not in found]
    if missing:
        found.update(await backend.get_blobs(checkpoint.thread_id, missing))
    for block in blocks:
        digest = str(block.data)[len(PREFIX) :]
        raw = found.get(digest)
        if raw is None:
            msg = (
                f"checkpoint {checkpoint.id!r} of thread {checkpoint.thread_id!r} refers to a "
                f"stored file (blob sha256 {digest}) that is not in the store (deleted or never "
                "written), so its state cannot be rebuilt; fork from an earlier checkpoint "
                "that get_history() lists, or start a new thread."
            )
            raise CheckpointDecodeError(msg)
        block.data = raw.decode()
    return set(wanted)
