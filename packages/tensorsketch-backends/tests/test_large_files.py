"""A large file in a conversation is written to the store once, not once per checkpoint.

A 2 MB PDF sent in the first turn of a five-turn conversation, on each store: every payload
the runtime hands to the store (checkpoints, the blobs that ride with them, events, journal
entries) is recorded by id, and the PDF's base64 text must be in exactly one of them. A second
large file later in the thread used to make the next epoch's snapshot store both files again
(11.2 MB written for two 2 MB PDFs); files of ``blob_threshold`` bytes or more are now stored
by reference (content-addressed blobs, once per thread), so each is written once (5.6 MB).
"""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tensorsketch import FakeProvider, InMemoryBackend, create_agent
from tensorsketch.messages import FileBlock, assistant, user
from tensorsketch.runtime.backends.base import Backend, StoredCheckpoint, StoredEvent
from tensorsketch.runtime.backends.sqlite import SqliteBackend

TURNS = 5


class Writes:
    """Every payload handed to a store, keyed by what it is (a re-sent one counts once)."""

    def __init__(self) -> None:
        self.payloads: dict[tuple[str, ...], bytes] = {}

    def watch(self, backend: Backend) -> None:
        def checkpoint(cp: StoredCheckpoint | None) -> None:
            if cp is not None:
                self.payloads[("checkpoint", cp.thread_id, cp.checkpoint_id)] = cp.payload
                for digest, data in cp.blobs:  # by checkpoint: a blob sent twice counts twice
                    self.payloads[("blob", cp.thread_id, cp.checkpoint_id, digest)] = data

        def events(thread: str, batch: list[StoredEvent]) -> None:
            for event in batch:
                self.payloads[("event", thread, str(event.seq))] = event.payload

        def effects(thread: str, pairs: list[tuple[str, bytes]]) -> None:
            for key, value in pairs:
                self.payloads[("effect", thread, key)] = value

        wrap(backend, "save_checkpoint", lambda cp, *a, **k: checkpoint(cp))
        wrap(backend, "open_thread", lambda t, o, ttl, initial=None, **k: checkpoint(initial))
        wrap(backend, "commit_step", lambda t, cp, ev, **k: (checkpoint(cp), events(t, ev)))
        wrap(backend, "append_events", lambda t, ev, **k: events(t, ev))
        wrap(backend, "record_effect", lambda t, key, value, **k: effects(t, [(key, value)]))
        wrap(backend, "record_effects", lambda t, pairs, **k: effects(t, pairs))

    def total(self) -> int:
        return sum(len(p) for p in self.payloads.values())

    def holding(self, needle: bytes) -> list[tuple[str, ...]]:
        return [key for key, payload in self.payloads.items() if needle in payload]


def wrap(backend: Backend, name: str, seen: Callable[..., Any]) -> None:
    original = getattr(backend, name)

    async def watched(*args: Any, **kwargs: Any) -> Any:
        seen(*args, **kwargs)
        return await original(*args, **kwargs)

    setattr(backend, name, watched)


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[Backend]:
    backend: Backend
    if request.param == "memory":
        backend = InMemoryBackend()
    elif request.param == "sqlite":
        backend = SqliteBackend(str(tmp_path / "files.db"))
    elif request.param == "postgres":
        from tensorsketch.runtime.backends.postgres import PostgresBackend

        dsn = request.getfixturevalue("pg_dsn")
        backend = PostgresBackend(dsn, schema=request.getfixturevalue("pg_schema"))
    else:
        from tensorsketch.runtime.backends.redis import RedisBackend

        url = request.getfixturevalue("redis_url")
        backend = RedisBackend(url, prefix=request.getfixturevalue("redis_prefix"))
    yield backend
    await backend.aclose()


def pdf(size: int) -> FileBlock:
    body = b"%PDF-1.4\n" + os.urandom(size)
    return FileBlock(data=base64.b64encode(body).decode(), media_type="application/pdf")


async def converse(backend: Backend, files: dict[int, FileBlock], turns: int = TURNS) -> Writes:
    writes = Writes()
    writes.watch(backend)
    agent = create_agent(FakeProvider([assistant(f"answer {i}") for i in range(turns)]))
    for turn in range(turns):
        parts: list[Any] = [f"question {turn}"]
        if turn in files:
            parts.append(files[turn])
        result = await agent.invoke({"messages": [user(*parts)]}, thread_id="t", backend=backend)
        assert result.output == f"answer {turn}"
    state = await agent.aget_state("t", backend)
    assert state is not None
    sent = [
        block
        for message in state.messages
        if isinstance(message.content, list)
        for block in message.content
        if isinstance(block, FileBlock)
    ]
    assert sent == [files[t] for t in sorted(files)]  # loading gives the files back whole
    return writes


async def test_a_2_mb_pdf_in_a_five_turn_conversation_is_written_once(store: Backend) -> None:
    file = pdf(2 * 1024 * 1024)
    writes = await converse(store, {0: file})
    marker = (file.data or "")[1000:1064].encode()
    print(
        f"\n{store.name}: {writes.total()} bytes in {len(writes.payloads)} writes; "
        f"PDF base64 {len(file.data or '')} bytes; in {writes.holding(marker)}"
    )
    assert len(writes.holding(marker)) == 1
    assert writes.total() < len(file.data or "") + 64 * 1024


async def test_a_second_file_later_does_not_write_the_first_again(store: Backend) -> None:
    first, second = pdf(2 * 1024 * 1024), pdf(2 * 1024 * 1024)
    writes = await converse(store, {0: first, 2: second})
    m1, m2 = ((f.data or "")[1000:1064].encode() for f in (first, second))
    print(
        f"\n{store.name}: {writes.total()} bytes in {len(writes.payloads)} writes; "
        f"first in {len(writes.holding(m1))}, second in {len(writes.holding(m2))}"
    )
    assert len(writes.holding(m1)) == 1 and len(writes.holding(m2)) == 1
