"""What a store that keeps large files by reference (``Backend.stores_blobs``) must do.

:class:`~tensorsketch.testing.backend_conformance.BackendConformance` includes these tests, so
every backend runs them: a store with blobs checks the raw contract (blobs written with their
row, first write wins, gone with the thread, kept by ``replace_checkpoints(blobs=)``) and the
runtime on top (each file written once per thread, reads and forks whole, a missing blob named
in a clear error); every store checks that a backend object without blobs keeps files inline.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from typing import Annotated, Any

import pytest
from pydantic import Field

from tensorsketch.channels import Reducer
from tensorsketch.constants import START
from tensorsketch.context import Context
from tensorsketch.durable.blobs import PREFIX
from tensorsketch.errors import CheckpointDecodeError
from tensorsketch.graph import Graph
from tensorsketch.messages import FileBlock, Message, add_messages, assistant, user
from tensorsketch.node import Node
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runtime.backends.base import Backend, StoredCheckpoint
from tensorsketch.schema import Schema

__all__ = ["FILES_GRAPH", "BlobConformance", "FilesState"]

#: Big enough to be stored by reference at the default threshold (64 KiB), small enough to
#: keep the suite fast.
FILE_BYTES = 96 * 1024


class FilesState(Schema):
    """A conversation (files in messages, appended) and an attachment (replaced each turn)."""

    messages: Annotated[list[Message], Reducer(add_messages)] = Field(default_factory=list)
    attachment: FileBlock | None = None


class Reply(Node):
    class In(Schema):
        messages: list[Message]

    class Out(Schema):
        messages: list[Message]

    async def run(self, ctx: Context, inp: Any) -> Any:
        return self.Out(messages=[assistant(f"read {len(inp.messages)} messages")])


FILES_GRAPH: CompiledGraph[FilesState] = (
    Graph(FilesState, name="conformance-files").add(Reply).edge(START, "Reply").compile()
)


def _thread() -> str:
    return f"blob-{uuid.uuid4().hex[:12]}"


def _file(seed: str) -> FileBlock:
    body = hashlib.sha256(seed.encode()).digest() * (FILE_BYTES // 32)
    return FileBlock(data=base64.b64encode(body).decode(), media_type="application/pdf")


def _digest(block: FileBlock) -> str:
    return hashlib.sha256((block.data or "").encode()).hexdigest()


def _marker(block: FileBlock) -> bytes:
    return (block.data or "")[500:564].encode()


def _files(state: FilesState) -> list[FileBlock]:
    return [
        b
        for m in state.messages
        if isinstance(m.content, list)
        for b in m.content
        if isinstance(b, FileBlock)
    ]


def _row(thread: str, n: int, blobs: tuple[tuple[str, bytes], ...] = ()) -> StoredCheckpoint:
    return StoredCheckpoint(thread, f"cp-{n}", None, n, 1_700_000_000.0 + n, b"row", None, blobs)


class _Inline(Backend):
    """A store that predates blobs: forwards the eight operations, sets no ``stores_blobs``."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(serializer=inner.serializer)
        self.inner = inner

    async def save_checkpoint(self, checkpoint: StoredCheckpoint) -> None:
        assert not checkpoint.blobs, "blobs were handed to a store without stores_blobs"
        await self.inner.save_checkpoint(checkpoint)

    async def latest_checkpoint(self, thread_id: str) -> StoredCheckpoint | None:
        return await self.inner.latest_checkpoint(thread_id)

    async def get_checkpoint(self, thread_id: str, checkpoint_id: str) -> StoredCheckpoint | None:
        return await self.inner.get_checkpoint(thread_id, checkpoint_id)

    async def list_checkpoints(self, thread_id: str) -> list[StoredCheckpoint]:
        return await self.inner.list_checkpoints(thread_id)

    async def record_effect(self, thread_id: str, key: str, value: bytes) -> None:
        await self.inner.record_effect(thread_id, key, value)

    async def lookup_effect(self, thread_id: str, key: str) -> bytes | None:
        return await self.inner.lookup_effect(thread_id, key)

    async def append_events(self, thread_id: str, events: Any) -> None:
        await self.inner.append_events(thread_id, events)

    async def read_events(self, thread_id: str, since: int = 0) -> Any:
        return await self.inner.read_events(thread_id, since)


class BlobConformance:
    """Mixed into :class:`~tensorsketch.testing.backend_conformance.BackendConformance`
    (which provides the ``backend`` fixture and ``thread_admin``)."""

    thread_admin: bool = True

    @staticmethod
    def _needs_blobs(backend: Backend) -> None:
        if not backend.stores_blobs:
            pytest.skip(f"{type(backend).__name__} keeps files inline (no stores_blobs)")

    # -- the raw contract -------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_blobs_are_written_with_their_row(self, backend: Backend) -> None:
        self._needs_blobs(backend)
        thread = _thread()
        await backend.save_checkpoint(_row(thread, 1, (("a" * 64, b"first"),)))
        await backend.commit_step(thread, _row(thread, 2, (("b" * 64, b"second"),)), [])
        await backend.commit_step(thread, _row(thread, 3, (("a" * 64, b"again"),)), [])
        found = await backend.get_blobs(thread, ["a" * 64, "b" * 64, "c" * 64])
        assert found == {"a" * 64: b"first", "b" * 64: b"second"}  # first write wins
        assert await backend.get_blobs(_thread(), ["a" * 64]) == {}  # per thread
        assert await backend.get_blobs(thread, []) == {}
        rows = await backend.list_checkpoints(thread)
        assert [r.blobs for r in rows] == [(), (), ()]  # rows come back without them
        other = _thread()
        opening = await backend.open_thread(
            other, "me", 30.0, _row(other, 1, (("d" * 64, b"input"),))
        )
        assert opening.created
        assert await backend.get_blobs(other, ["d" * 64]) == {"d" * 64: b"input"}
        await backend.release_lease(other, "me")

    @pytest.mark.asyncio
    async def test_blobs_go_with_their_thread(self, backend: Backend) -> None:
        self._needs_blobs(backend)
        if not self.thread_admin:
            pytest.skip("the backend does not implement thread administration")
        thread, kept = _thread(), _thread()
        for name in (thread, kept):
            await backend.save_checkpoint(_row(name, 1, (("a" * 64, b"x"), ("b" * 64, b"y"))))
        rows = await backend.list_checkpoints(thread)
        await backend.replace_checkpoints(thread, rows, blobs=["b" * 64])
        assert await backend.get_blobs(thread, ["a" * 64, "b" * 64]) == {"b" * 64: b"y"}
        await backend.delete_thread(thread)
        assert await backend.get_blobs(thread, ["b" * 64]) == {}
        assert len(await backend.get_blobs(kept, ["a" * 64, "b" * 64])) == 2

    # -- the runtime on top -----------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_each_large_file_is_stored_once_and_read_whole(self, backend: Backend) -> None:
        self._needs_blobs(backend)
        thread = _thread()
        first, second = _file(f"{thread}-1"), _file(f"{thread}-2")
        for turn in range(5):
            parts: list[Any] = [f"question {turn}"]
            parts += {0: [first], 2: [second]}.get(turn, [])
            await FILES_GRAPH.invoke(
                {"messages": [user(*parts)]}, thread_id=thread, backend=backend
            )
        rows = await backend.list_checkpoints(thread)
        assert not any(_marker(f) in r.payload for r in rows for f in (first, second))
        stored = await backend.get_blobs(thread, [_digest(first), _digest(second)])
        assert stored == {_digest(f): (f.data or "").encode() for f in (first, second)}
        state = await FILES_GRAPH.aget_state(thread, backend)
        assert state is not None and _files(state) == [first, second]
        assert _files(FILES_GRAPH.get_state(thread, backend) or FilesState()) == [first, second]
        history = await FILES_GRAPH.aget_history(thread, backend)
        for checkpoint in history:
            at = await FILES_GRAPH.aget_state_at(thread, backend, checkpoint.id)
            assert _files(at) == _files(FilesState(messages=checkpoint.values.get("messages", [])))
            assert all(not (f.data or "").startswith(PREFIX) for f in _files(at))
        # A fork holds its files itself: deleting the origin leaves it whole.
        fork = _thread()
        await FILES_GRAPH.fork(backend, thread, history[-1].id, fork, run=False)
        if self.thread_admin:
            await FILES_GRAPH.adelete_thread(thread, backend)
            assert await backend.get_blobs(thread, [_digest(first)]) == {}
        forked = await FILES_GRAPH.aget_state(fork, backend)
        assert forked is not None and _files(forked) == [first, second]

    @pytest.mark.asyncio
    async def test_a_missing_blob_is_a_clear_error(self, backend: Backend) -> None:
        self._needs_blobs(backend)
        if not self.thread_admin:
            pytest.skip("the backend does not implement thread administration")
        thread = _thread()
        file = _file(thread)
        await FILES_GRAPH.invoke(
            {"messages": [user("read this", file)]}, thread_id=thread, backend=backend
        )
        rows = await backend.list_checkpoints(thread)
        await backend.replace_checkpoints(thread, rows, blobs=[])  # the blob is gone
        for read in (
            FILES_GRAPH.aget_state(thread, backend),
            FILES_GRAPH.aget_state_at(thread, backend, rows[-1].checkpoint_id),
            # Twice: the same clear error each time, never a thread left busy.
            FILES_GRAPH.invoke({"messages": [user("again")]}, thread_id=thread, backend=backend),
            FILES_GRAPH.invoke({"messages": [user("again")]}, thread_id=thread, backend=backend),
        ):
            with pytest.raises(CheckpointDecodeError) as info:
                await read
            text = str(info.value)
            assert thread in text and _digest(file) in text and "not in the store" in text
            assert any(r.checkpoint_id in text for r in rows)

    @pytest.mark.asyncio
    async def test_prune_keeps_only_the_blobs_kept_rows_use(self, backend: Backend) -> None:
        self._needs_blobs(backend)
        if not self.thread_admin:
            pytest.skip("the backend does not implement thread administration")
        thread = _thread()
        old, new = _file(f"{thread}-old"), _file(f"{thread}-new")
        for turn in range(6):
            attachment = old if turn == 0 else new
            await FILES_GRAPH.invoke(
                {"messages": [user(f"turn {turn}")], "attachment": attachment},
                thread_id=thread,
                backend=backend,
            )
        await FILES_GRAPH.aprune_thread(thread, backend, keep=3)
        assert await backend.get_blobs(thread, [_digest(old)]) == {}
        assert await backend.get_blobs(thread, [_digest(new)]) != {}
        for checkpoint in await FILES_GRAPH.aget_history(thread, backend):
            at = await FILES_GRAPH.aget_state_at(thread, backend, checkpoint.id)
            assert at.attachment == new
        out = await FILES_GRAPH.invoke(
            {"messages": [user("after pruning")]}, thread_id=thread, backend=backend
        )
        assert out.attachment == new

    @pytest.mark.asyncio
    async def test_a_store_without_blobs_keeps_files_inline(self, backend: Backend) -> None:
        inline = _Inline(backend)
        thread = _thread()
        file = _file(thread)
        await FILES_GRAPH.invoke(
            {"messages": [user("read this", file)]}, thread_id=thread, backend=inline
        )
        await FILES_GRAPH.invoke({"messages": [user("and")]}, thread_id=thread, backend=inline)
        rows = await inline.list_checkpoints(thread)
        assert any(_marker(file) in r.payload for r in rows)
        state = await FILES_GRAPH.aget_state(thread, inline)
        assert state is not None and _files(state) == [file]
