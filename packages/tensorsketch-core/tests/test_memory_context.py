"""``invoke(..., memory=store)`` -> ``ctx.memory``: nodes reach the store, nested graphs share
it, and in a durable run its reads and writes are journaled — a resumed run sees what the
first attempt saw and writes nothing twice, even when the process died between the store's
write and the journal's record of it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest

from tensorsketch import END, START, Context, Graph, InMemoryBackend, Node, Schema
from tensorsketch.errors import MemoryUnavailableError
from tensorsketch.memory import InMemoryStore, JournaledMemory, MemoryStore
from tensorsketch.memory.sqlite import SqliteStore
from tensorsketch.memory.store import Write
from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.sqlite import SqliteBackend

USER = ("users", "u1")


class Visit(Schema):
    text: str = ""
    crash: bool = False
    saw: str = ""
    rev: int = 0


class Remember(Node):
    """Reads the user's profile, writes a note, then (on request) fails before its checkpoint."""

    class In(Schema):
        text: str
        crash: bool

    class Out(Schema):
        saw: str
        rev: int

    async def run(self, ctx: Context, inp: Any) -> Any:
        assert isinstance(ctx.memory, JournaledMemory)
        profile = await ctx.memory.get(USER, "profile")
        rev = await ctx.memory.put(USER, "note", {"text": inp.text})
        if inp.crash:
            msg = "crashed after the write, before the checkpoint"
            raise RuntimeError(msg)
        return self.Out(saw="" if profile is None else profile.value["name"], rev=rev)


APP = Graph(Visit).add(Remember).edge(START, "Remember").edge("Remember", END).compile()


class Writes(InMemoryStore):
    """Counts the writes that reach the store; can die right after one (before anything,
    journal included, hears of it), as a killed process would."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.die_after_write = False

    async def _write(self, writes: Sequence[Write], now: float) -> list[int]:
        result = await super()._write(writes, now)
        self.writes += 1
        if self.die_after_write:
            self.die_after_write = False
            msg = "the process died right after the store wrote"
            raise SystemExit(msg)
        return result


async def test_nodes_reach_the_store_through_the_context() -> None:
    store = InMemoryStore()
    await store.put(USER, "profile", {"name": "Ada"})
    out = await APP.invoke({"text": "likes tea"}, memory=store)
    assert (out.saw, out.rev) == ("Ada", 1)
    note = await store.get(USER, "note")
    assert note is not None and note.value == {"text": "likes tea"}


async def test_no_store_is_a_clear_error_naming_the_fix() -> None:
    with pytest.raises(MemoryUnavailableError, match=re.escape("invoke(..., memory=store)")):
        await APP.invoke({"text": "x"})
    with pytest.raises(TypeError, match=r"memory= must be a tensorsketch\.memory\.MemoryStore"):
        await APP.invoke({"text": "x"}, memory={"not": "a store"})  # type: ignore[arg-type]


async def test_crash_after_the_write_before_the_checkpoint_writes_once_and_replays_reads(
    tmp_path: Any,
) -> None:
    store = SqliteStore(tmp_path / "memory.db")
    backend = SqliteBackend(tmp_path / "runs.db")
    await store.put(USER, "profile", {"name": "Ada"})
    with pytest.raises(RuntimeError, match="before the checkpoint"):
        await APP.invoke(
            {"text": "likes tea", "crash": True}, thread_id="t", backend=backend, memory=store
        )
    await store.put(USER, "profile", {"name": "changed meanwhile"})
    out = await APP.invoke({"crash": False}, thread_id="t", backend=backend, memory=store)
    assert out.saw == "Ada"  # the resumed run read what the first attempt read
    note = await store.get(USER, "note")
    assert note is not None and note.rev == 1  # written once
    assert out.rev == 1


async def test_a_write_whose_record_was_lost_is_not_repeated() -> None:
    store = Writes()
    backend = InMemoryBackend()
    store.die_after_write = True
    with pytest.raises(SystemExit):
        await APP.invoke({"text": "likes tea"}, thread_id="t", backend=backend, memory=store)
    assert store.writes == 1
    out = await APP.invoke({}, thread_id="t", backend=backend, memory=store)
    assert out.rev == 1
    note = await store.get(USER, "note")
    assert note is not None and note.rev == 1 and note.value == {"text": "likes tea"}
    assert store.writes == 1  # the retry found its own write and did not write again


async def test_an_unconditional_put_still_wins_over_another_writer_on_resume() -> None:
    store = Writes()
    backend = InMemoryBackend()
    with pytest.raises(RuntimeError):
        # Fails before its write: the journal holds only the revision it read (none).
        await APP.invoke(
            {"text": "mine", "crash": True},
            thread_id="t",
            backend=backend,
            memory=_FailsOnPut(store),
        )
    await store.put(USER, "note", {"text": "someone else's"})
    out = await APP.invoke({"crash": False}, thread_id="t", backend=backend, memory=store)
    note = await store.get(USER, "note")
    assert note is not None and note.value == {"text": "mine"} and out.rev == note.rev == 2


class _FailsOnPut(InMemoryStore):
    """Shares ``inner``'s items; every write fails before reaching them."""

    def __init__(self, inner: InMemoryStore) -> None:
        super().__init__(share=inner)

    async def _write(self, writes: Sequence[Write], now: float) -> list[int]:
        msg = "the store was unreachable"
        raise RuntimeError(msg)


class Outer(Schema):
    text: str = ""
    saw: str = ""
    rev: int = 0
    crash: bool = False


async def test_nested_graphs_share_the_parents_store() -> None:
    outer = Graph(Outer).add(APP, name="Inner").edge(START, "Inner").edge("Inner", END).compile()
    store: MemoryStore = InMemoryStore()
    await store.put(USER, "profile", {"name": "Ada"})
    out = await outer.invoke({"text": "nested"}, memory=store)
    assert out.saw == "Ada"
    assert (await store.get(USER, "note")) is not None


async def test_an_async_runners_store_reaches_its_runs(tmp_path: Any) -> None:
    store = InMemoryStore()
    await store.put(USER, "profile", {"name": "Ada"})
    async with AsyncRunner(
        APP, backend=SqliteBackend(tmp_path / "runs.db"), memory=store
    ) as runner:
        record = await runner.submit({"text": "from the runner"})
        done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded", done
    note = await store.get(USER, "note")
    assert note is not None and note.value == {"text": "from the runner"}
