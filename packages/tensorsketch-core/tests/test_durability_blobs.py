"""Large files stored by reference (tensorsketch.durable.blobs): the threshold, what is and is
not referenced, the row format, and reads that put the data back (the stores' side is in the
conformance suite's blob tests)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Collection
from pathlib import Path
from typing import Any

from tensorsketch import InMemoryBackend
from tensorsketch.durable.blobs import PREFIX
from tensorsketch.messages import FileBlock, ImageBlock, user
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.runtime.loops import run_sync
from tensorsketch.serializers import JsonSerializer
from tensorsketch.testing.blob_conformance import FILES_GRAPH


def _data(size: int, seed: str = "x") -> str:
    body = hashlib.sha256(seed.encode()).digest() * (size // 32)
    return base64.b64encode(body).decode()


def _digest(data: str) -> str:
    return hashlib.sha256(data.encode()).hexdigest()


async def _rows(backend: Any, thread: str) -> list[dict[str, Any]]:
    return [backend.serializer.loads(r.payload) for r in await backend.list_checkpoints(thread)]


async def test_the_threshold_decides_what_is_stored_by_reference() -> None:
    backend = InMemoryBackend()
    backend.blob_threshold = 100 * 1024
    big, small = _data(96 * 1024, "big"), _data(48 * 1024, "small")  # 128 KiB, 64 KiB of text
    message = user(
        "two files",
        FileBlock(data=big, media_type="application/pdf"),
        FileBlock(data=small, media_type="application/pdf"),
    )
    await FILES_GRAPH.invoke({"messages": [message]}, thread_id="t", backend=backend)
    stored = await backend.get_blobs("t", [_digest(big), _digest(small)])
    assert list(stored) == [_digest(big)]
    payloads = [r.payload for r in await backend.list_checkpoints("t")]
    assert not any(big[:200].encode() in p for p in payloads)
    assert any(small[:200].encode() in p for p in payloads)  # below the line: inline
    state = await FILES_GRAPH.aget_state("t", backend)
    assert state is not None and state.messages[0] == message


async def test_no_threshold_keeps_every_file_inline() -> None:
    backend = InMemoryBackend()
    backend.blob_threshold = None
    data = _data(96 * 1024)
    message = user("a file", FileBlock(data=data, media_type="application/pdf"))
    await FILES_GRAPH.invoke({"messages": [message]}, thread_id="t", backend=backend)
    assert await backend.get_blobs("t", [_digest(data)]) == {}
    assert any(data[:200].encode() in r.payload for r in await backend.list_checkpoints("t"))


async def test_images_and_files_outside_messages_are_referenced_too() -> None:
    backend = InMemoryBackend(serializer=JsonSerializer())
    picture, attachment = _data(96 * 1024, "png"), _data(96 * 1024, "pdf")
    message = user("look", ImageBlock(data=picture, media_type="image/png"))
    file = FileBlock(data=attachment, media_type="application/pdf")
    await FILES_GRAPH.invoke(
        {"messages": [message], "attachment": file}, thread_id="t", backend=backend
    )
    assert len(await backend.get_blobs("t", [_digest(picture), _digest(attachment)])) == 2
    rows = await _rows(backend, "t")
    assert all(r["v"] == 3 and len(r["blobs"]) == 2 for r in rows if r["base"])
    state = await FILES_GRAPH.aget_state("t", backend)
    assert state is not None and state.messages[0] == message and state.attachment == file


async def test_a_thread_without_large_files_is_written_as_before() -> None:
    backend = InMemoryBackend()
    message = user("small", FileBlock(data=_data(1024), media_type="application/pdf"))
    await FILES_GRAPH.invoke({"messages": [message]}, thread_id="t", backend=backend)
    rows = await _rows(backend, "t")
    assert [r["v"] for r in rows] == [2] * len(rows)
    assert not any("blobs" in r for r in rows)
    assert all(not r.blobs for r in await backend.list_checkpoints("t"))


async def test_history_reads_each_blob_once() -> None:
    calls: list[list[str]] = []

    class Counting(InMemoryBackend):
        async def get_blobs(self, thread_id: str, hashes: Collection[str]) -> dict[str, bytes]:
            calls.append(sorted(hashes))
            return await super().get_blobs(thread_id, hashes)

    backend = Counting()
    data = _data(96 * 1024)
    file = FileBlock(data=data, media_type="application/pdf")
    await FILES_GRAPH.invoke({"messages": [user("a", file)]}, thread_id="t", backend=backend)
    for turn in range(6):
        await FILES_GRAPH.invoke(
            {"messages": [user(f"turn {turn}")]}, thread_id="t", backend=backend
        )
    calls.clear()
    history = await FILES_GRAPH.aget_history("t", backend)
    assert len(history) > 6 and calls == [[_digest(data)]]
    assert all(
        b.data == data
        for c in history
        for m in c.values.get("messages", [])
        if isinstance(m.content, list)
        for b in m.content
        if isinstance(b, FileBlock)
    )


def test_sync_get_state_on_sqlite_reads_the_files(tmp_path: Path) -> None:
    backend = SqliteBackend(tmp_path / "files.db")
    data = _data(96 * 1024)
    file = FileBlock(data=data, media_type="application/pdf")
    run_sync(FILES_GRAPH.invoke({"messages": [user("a", file)]}, thread_id="t", backend=backend))
    state = FILES_GRAPH.get_state("t", backend)
    assert state is not None
    block = state.messages[0].content[1]
    assert isinstance(block, FileBlock) and block.data == data
    assert not data.startswith(PREFIX)
