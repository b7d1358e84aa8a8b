"""The behaviour every ``Backend`` must have, as one reusable pytest suite.

Subclass :class:`BackendConformance` in your backend's tests and provide a ``backend_factory``
fixture: a callable that returns a handle on one store private to the test. Called without
arguments, every call must reach the *same* store (a second handle stands in for a second
process); keyword arguments (``serializer=...``) may build a fresh store::

    import pytest
    from tensorsketch.testing.backend_conformance import BackendConformance

    class TestAcmeBackend(BackendConformance):
        @pytest.fixture
        def backend_factory(self, tmp_path):
            return lambda **kw: AcmeBackend(tmp_path / "store", **kw)

The suite checks the raw contract (ordering, first-write-wins effects, event cursors, leases
with expiry) and the engine on top of it (resume after a failure without repeating effects,
Send fan-out, fork trees, replay cursors, one writer per thread, undecodable checkpoints, flat
write cost for a growing message list, large files stored once by reference, and the
serializer's safety). It needs pytest and
pytest-asyncio; the tests are ``async`` and marked for pytest-asyncio explicitly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import operator
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import pytest

from tensorsketch.channels import Reducer
from tensorsketch.constants import START
from tensorsketch.context import Context
from tensorsketch.durable import FANOUT
from tensorsketch.durable.reads import FIRST_PAGE
from tensorsketch.errors import (
    BackendUnsupportedError,
    CheckpointDecodeError,
    ForkEffectError,
    LeaseLostError,
    ThreadBusyError,
)
from tensorsketch.graph import Graph
from tensorsketch.interrupts import interrupt, run_info
from tensorsketch.node import Node
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runtime.backends.base import (
    Backend,
    ForkLink,
    StoredCheckpoint,
    StoredEvent,
    ThreadOpening,
    ThreadSummary,
)
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.runs import RunRecord
from tensorsketch.schema import Schema
from tensorsketch.serializers import MSGPACK_MAGIC
from tensorsketch.testing.blob_conformance import BlobConformance
from tensorsketch.testing.crash import CrashingBackend, SimulatedCrash
from tensorsketch.testing.fork_crash import recover_fork
from tensorsketch.testing.order import OrderState, order_graph
from tensorsketch.threads import alist_threads

__all__ = ["BackendConformance", "BackendFactory", "CountingBackend"]

BackendFactory = Callable[..., Backend]

#: Upper bound on bytes a superstep may write for the growing message state.
BYTES_PER_STEP_LIMIT = 2000


def _thread() -> str:
    return f"conf-{uuid.uuid4().hex[:12]}"


#: The serializers whose payloads are our tagged JSON / msgpack (crafted rows apply to them).
_TAGGED = frozenset({"JsonSerializer", "MsgpackSerializer"})


def _checkpoint(
    thread: str, n: int, payload: bytes, parent: str | None = None, base: str | None = None
) -> StoredCheckpoint:
    return StoredCheckpoint(
        thread_id=thread,
        checkpoint_id=f"cp-{n}",
        parent_id=parent,
        step=n,
        created_at=1_700_000_000.0 + n,
        payload=payload,
        base_id=base,
    )


def _covers(rows: list[StoredCheckpoint], chain: list[StoredCheckpoint]) -> bool:
    """``rows`` ends with ``chain``'s last row and holds all of ``chain`` in order (a store
    may return more than the chain, e.g. the whole thread)."""
    found = iter(rows)
    return bool(rows) and rows[-1] == chain[-1] and all(c in found for c in chain)


class CountingBackend(Backend):
    """Wraps a backend and counts the checkpoint rows each read hands back."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(serializer=inner.serializer)
        self.inner = inner
        self.name = inner.name
        self.lease_ttl = inner.lease_ttl
        self.rows_read = 0

    def _count(self, rows: list[StoredCheckpoint]) -> list[StoredCheckpoint]:
        self.rows_read += len(rows)
        return rows

    async def save_checkpoint(self, checkpoint: StoredCheckpoint) -> None:
        await self.inner.save_checkpoint(checkpoint)

    async def latest_checkpoint(self, thread_id: str) -> StoredCheckpoint | None:
        found = await self.inner.latest_checkpoint(thread_id)
        self.rows_read += found is not None
        return found

    async def get_checkpoint(self, thread_id: str, checkpoint_id: str) -> StoredCheckpoint | None:
        found = await self.inner.get_checkpoint(thread_id, checkpoint_id)
        self.rows_read += found is not None
        return found

    async def list_checkpoints(self, thread_id: str) -> list[StoredCheckpoint]:
        return self._count(await self.inner.list_checkpoints(thread_id))

    async def read_chain(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> list[StoredCheckpoint]:
        return self._count(await self.inner.read_chain(thread_id, checkpoint_id))

    async def page_checkpoints(
        self, thread_id: str, *, before: str | None = None, limit: int
    ) -> list[StoredCheckpoint]:
        return self._count(await self.inner.page_checkpoints(thread_id, before=before, limit=limit))

    async def record_effect(self, thread_id: str, key: str, value: bytes) -> None:
        await self.inner.record_effect(thread_id, key, value)

    async def lookup_effect(self, thread_id: str, key: str) -> bytes | None:
        return await self.inner.lookup_effect(thread_id, key)

    async def append_events(self, thread_id: str, events: list[StoredEvent]) -> None:
        await self.inner.append_events(thread_id, events)

    async def read_events(self, thread_id: str, since: int = 0) -> list[StoredEvent]:
        return await self.inner.read_events(thread_id, since)

    async def last_event_seq(self, thread_id: str) -> int | None:
        return await self.inner.last_event_seq(thread_id)

    async def acquire_lease(self, thread_id: str, owner: str, ttl: float) -> bool:
        return await self.inner.acquire_lease(thread_id, owner, ttl)

    async def release_lease(self, thread_id: str, owner: str) -> None:
        await self.inner.release_lease(thread_id, owner)

    async def open_thread(
        self, thread_id: str, owner: str, ttl: float, initial: StoredCheckpoint | None = None
    ) -> ThreadOpening:
        opening = await self.inner.open_thread(thread_id, owner, ttl, initial)
        self._count(opening.checkpoints)
        return opening

    async def commit_step(
        self,
        thread_id: str,
        checkpoint: StoredCheckpoint | None,
        events: list[StoredEvent],
        *,
        durable: bool = True,
        release_owner: str | None = None,
        fence: str | None = None,
    ) -> None:
        await self.inner.commit_step(
            thread_id,
            checkpoint,
            events,
            durable=durable,
            release_owner=release_owner,
            fence=fence,
        )


# -- graphs the suite runs ----------------------------------------------------------------------

#: Side effects that really ran, per (thread, effect); failures to inject, per thread.
CALLS: dict[tuple[str, str], int] = {}
FAIL_ONCE: set[tuple[str, str]] = set()


class _Tally:
    """The suite's side effects (:class:`~tensorsketch.testing.order.OrderEffects`): counted
    in :data:`CALLS`, each returning ``name#n``; a failure in :data:`FAIL_ONCE` raises once."""

    def perform(self, ctx: Context, name: str) -> Callable[[], str]:
        def call() -> str:
            key = (ctx.thread_id or "", name)
            CALLS[key] = CALLS.get(key, 0) + 1
            return f"{name}#{CALLS[key]}"

        return call

    def after(self, ctx: Context, where: str) -> None:
        _maybe_fail(ctx, where)


def _maybe_fail(ctx: Context, where: str) -> None:
    key = (ctx.thread_id or "", where)
    if key in FAIL_ONCE:
        FAIL_ONCE.discard(key)
        msg = f"injected failure at {where}"
        raise RuntimeError(msg)


def calls(thread: str) -> dict[str, int]:
    """The side effects a thread's runs performed, and how often."""
    return {name: n for (t, name), n in CALLS.items() if t == thread}


#: The shared order scenario (:mod:`tensorsketch.testing.order`) on the suite's tally.
ORDER_GRAPH: CompiledGraph[OrderState] = order_graph(_Tally(), name="conformance-order")


class ChatState(Schema):
    messages: Annotated[list[dict[str, str]], Reducer(operator.add)] = []
    turns: int = 0
    limit: int = 0


class Chat(Node):
    class In(Schema):
        turns: int

    class Out(Schema):
        messages: list[dict[str, str]]
        turns: int

    async def run(self, ctx: Context, inp: Any) -> Any:
        reply = {"role": "assistant", "content": f"reply {inp.turns}"}
        return self.Out(messages=[reply], turns=inp.turns + 1)


CHAT_GRAPH: CompiledGraph[ChatState] = (
    Graph(ChatState, name="conformance-chat")
    .add(Chat)
    .edge(START, "Chat")
    .loop("Chat", until=lambda s: s.turns >= s.limit)
    .compile()
)

#: thread -> (the runner is inside the node, let it finish)
GATES: dict[str, tuple[asyncio.Event, asyncio.Event]] = {}


class Wait(Node):
    class In(Schema):
        order: str

    class Out(Schema):
        note: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        inside, release = GATES[ctx.thread_id or ""]
        inside.set()
        await release.wait()
        return self.Out(note="done")


WAIT_GRAPH: CompiledGraph[OrderState] = (
    Graph(OrderState, name="conformance-wait").add(Wait).edge(START, "Wait").compile()
)


class Quote(Node):
    """A side effect, a question, then another side effect, in one superstep."""

    class In(Schema):
        order: str

    class Out(Schema):
        note: str

    async def run(self, ctx: Context, inp: Any) -> Any:
        quote = await ctx.step("quote", _Tally().perform(ctx, "quote"))
        answer = await interrupt(ctx, {"pay": quote})
        paid = await ctx.step("pay", _Tally().perform(ctx, "pay"))
        return self.Out(note=f"{quote}:{answer}:{paid}")


ASK_GRAPH: CompiledGraph[OrderState] = (
    Graph(OrderState, name="conformance-ask").add(Quote).edge(START, "Quote").compile()
)


class Opaque:
    """Not JSON-encodable: only pickle can store it."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


class OpaqueState(Schema):
    box: Any = None
    done: bool = False


class Unbox(Node):
    class In(Schema):
        box: Any

    class Out(Schema):
        done: bool

    async def run(self, ctx: Context, inp: Any) -> Any:
        value = await ctx.step("inspect", lambda: Opaque(inp.box.value + 1))
        _maybe_fail(ctx, "after-inspect")
        return self.Out(done=value == Opaque(inp.box.value + 1))


OPAQUE_GRAPH: CompiledGraph[OpaqueState] = (
    Graph(OpaqueState, name="conformance-opaque").add(Unbox).edge(START, "Unbox").compile()
)


class ProbeState(Schema):
    """What :class:`Probe` nodes saw: per superstep, the step of the latest committed
    checkpoint."""

    order: str = ""
    seen: Annotated[list[int], Reducer(operator.add)] = []
    note: str = ""


class HeldCommits(CrashingBackend):
    """Holds each barrier's commit (not the last, which gives the lease back) until a node of
    the next superstep lets it go: with ``durability="async"`` that node provably runs while
    the commit is still in flight."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.gate = asyncio.Semaphore(0)

    async def commit_step(
        self,
        thread_id: str,
        checkpoint: StoredCheckpoint | None,
        events: list[StoredEvent],
        *,
        durable: bool = True,
        release_owner: str | None = None,
        fence: str | None = None,
    ) -> None:
        if checkpoint is not None and release_owner is None:
            await self.gate.acquire()
        await super().commit_step(
            thread_id, checkpoint, events, durable=durable, release_owner=release_owner, fence=fence
        )


class Probe(Node):
    """Reads the store's latest committed checkpoint (``ctx.deps``: the store, or a
    :class:`HeldCommits` to release the barrier held before this superstep)."""

    class In(Schema):
        order: str

    class Out(Schema):
        seen: list[int]

    async def run(self, ctx: Context, inp: Any) -> Any:
        store: Backend = ctx.deps
        latest = await store.latest_checkpoint(ctx.thread_id or "")
        if isinstance(store, HeldCommits) and ctx.superstep > 0:
            store.gate.release()
        return self.Out(seen=[-1 if latest is None else latest.step])


def _probes(n: int, last: type[Node] | None = None) -> CompiledGraph[ProbeState]:
    """``P0 -> ... -> P<n-1>`` (then ``last``, when given)."""
    graph = Graph(ProbeState, name="conformance-probes")
    names = [f"P{i}" for i in range(n)]
    for name in names:
        graph.add(Probe, name=name)
    if last is not None:
        graph.add(last)
        names.append(last.__name__)
    graph.edge(START, names[0])
    for a, b in itertools.pairwise(names):
        graph.edge(a, b)
    return graph.compile()


PROBE_GRAPH = _probes(4)
PROBE_ASK_GRAPH = _probes(2, Quote)


async def _drain(stream: AsyncIterator[Any]) -> list[Any]:
    return [event async for event in stream]


def _chained(thread: str) -> list[StoredCheckpoint]:
    """Two snapshots (cp-0, cp-2), each with deltas on it: cp-4's chain is cp-2, cp-4."""
    return [
        _checkpoint(thread, 0, b"p0"),
        _checkpoint(thread, 1, b"p1", "cp-0", "cp-0"),
        _checkpoint(thread, 2, b"p2", "cp-1"),
        _checkpoint(thread, 3, b"p3", "cp-2", "cp-2"),
        _checkpoint(thread, 4, b"p4", "cp-3", "cp-2"),
    ]


# -- the suite --------------------------------------------------------------------------------


class BackendConformance(BlobConformance):
    """Subclass with a ``backend_factory`` fixture; every test below then runs on it (and
    the large-file tests of :class:`~tensorsketch.testing.blob_conformance.BlobConformance`)."""

    #: Whether the backend implements the optional thread administration operations
    #: (``list_threads``, ``delete_thread``, ``replace_checkpoints``); when ``False`` the
    #: suite checks that each one fails with a clear :class:`BackendUnsupportedError`.
    thread_admin: bool = True

    @pytest.fixture
    async def backend(self, backend_factory: BackendFactory) -> AsyncIterator[Backend]:
        handle = backend_factory()
        yield handle
        await handle.aclose()

    # -- the raw contract -------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_checkpoints_keep_save_order(self, backend: Backend) -> None:
        thread = _thread()
        assert await backend.latest_checkpoint(thread) is None
        assert await backend.list_checkpoints(thread) == []
        saved = [
            _checkpoint(thread, n, f"payload {n}".encode(), f"cp-{n - 1}" if n else None)
            for n in range(5)
        ]
        for checkpoint in saved:
            await backend.save_checkpoint(checkpoint)
        assert await backend.list_checkpoints(thread) == saved
        assert await backend.latest_checkpoint(thread) == saved[-1]
        assert await backend.get_checkpoint(thread, "cp-2") == saved[2]
        assert await backend.get_checkpoint(thread, "cp-404") is None

    @pytest.mark.asyncio
    async def test_threads_are_isolated(self, backend: Backend) -> None:
        a, b = _thread(), _thread()
        await backend.save_checkpoint(_checkpoint(a, 0, b"a"))
        await backend.record_effect(a, "k", b"a")
        await backend.append_events(a, [StoredEvent(0, b"a")])
        assert await backend.latest_checkpoint(b) is None
        assert await backend.get_checkpoint(b, "cp-0") is None
        assert await backend.lookup_effect(b, "k") is None
        assert await backend.read_events(b) == []
        assert await backend.last_event_seq(b) is None
        assert await backend.thread_head(b) == (None, None)

    @pytest.mark.asyncio
    async def test_thread_head_is_latest_checkpoint_and_last_event(self, backend: Backend) -> None:
        thread = _thread()
        assert await backend.thread_head(thread) == (None, None)
        await backend.save_checkpoint(_checkpoint(thread, 0, b"a"))
        assert await backend.thread_head(thread) == ("cp-0", None)
        await backend.append_events(thread, [StoredEvent(s, b"e") for s in range(3)])
        await backend.save_checkpoint(_checkpoint(thread, 1, b"b"))
        assert await backend.thread_head(thread) == ("cp-1", 2)

    @pytest.mark.asyncio
    async def test_payload_bytes_round_trip_exactly(self, backend: Backend) -> None:
        thread = _thread()
        payload = bytes(range(256)) * 4096  # every byte value, 1 MiB
        await backend.save_checkpoint(_checkpoint(thread, 0, payload))
        await backend.record_effect(thread, "blob", payload)
        await backend.append_events(thread, [StoredEvent(0, payload)])
        got = await backend.latest_checkpoint(thread)
        assert got is not None
        assert got.payload == payload
        assert await backend.lookup_effect(thread, "blob") == payload
        assert (await backend.read_events(thread))[0].payload == payload

    @pytest.mark.asyncio
    async def test_effect_first_write_wins(self, backend: Backend) -> None:
        thread = _thread()
        assert await backend.lookup_effect(thread, "0:A:0:pay") is None
        await backend.record_effect(thread, "0:A:0:pay", b"first")
        await backend.record_effect(thread, "0:A:0:pay", b"second")
        assert await backend.lookup_effect(thread, "0:A:0:pay") == b"first"

    @pytest.mark.asyncio
    async def test_batched_effects_first_write_wins(self, backend: Backend) -> None:
        """``record_effects``/``lookup_effects``: a superstep's finished tasks, in one unit."""
        thread = _thread()
        assert await backend.lookup_effects(thread, []) == {}
        await backend.record_effects(thread, [])
        await backend.record_effect(thread, "k0", b"kept")
        many = [(f"k{i}", f"v{i}".encode()) for i in range(1200)]  # more than one IN list
        await backend.record_effects(thread, many)
        found = await backend.lookup_effects(thread, [f"k{i}" for i in range(0, 1300, 7)])
        assert found == {
            f"k{i}": (b"kept" if i == 0 else f"v{i}".encode()) for i in range(0, 1200, 7)
        }
        assert await backend.lookup_effect(thread, "k1199") == b"v1199"
        assert await backend.lookup_effects(_thread(), ["k1"]) == {}  # threads are isolated

    @pytest.mark.asyncio
    async def test_a_stale_owner_can_never_write(self, backend: Backend) -> None:
        """Fencing: once another owner took the lease over, the old owner's commits and
        journal records are refused whole, and its renewal never wins the lease back."""
        if not backend.fences_writes:
            pytest.skip("this backend does not fence writes")
        thread = _thread()
        assert await backend.acquire_lease(thread, "stale", 0.2)
        assert await backend.renew_lease(thread, "stale", 0.2)
        await backend.commit_step(thread, _checkpoint(thread, 0, b"mine"), [], fence="stale")
        await asyncio.sleep(0.3)  # the owner stalls past its lease
        assert not await backend.renew_lease(thread, "stale", 30)  # lapsed: not renewed
        assert await backend.acquire_lease(thread, "new", 30)
        with pytest.raises(LeaseLostError, match=repr(thread)):
            await backend.commit_step(
                thread,
                _checkpoint(thread, 1, b"stale"),
                [StoredEvent(0, b"stale event")],
                fence="stale",
            )
        with pytest.raises(LeaseLostError):
            await backend.record_effects(thread, [("0:A:0:pay", b"stale")], fence="stale")
        with pytest.raises(LeaseLostError):
            await backend.commit_step(thread, None, [StoredEvent(0, b"late")], fence="stale")
        assert [c.payload for c in await backend.list_checkpoints(thread)] == [b"mine"]
        assert await backend.read_events(thread) == []
        assert await backend.lookup_effect(thread, "0:A:0:pay") is None
        await backend.record_effects(thread, [("0:A:0:pay", b"new")], fence="new")
        await backend.commit_step(thread, None, [], release_owner="new", fence="new")
        assert not await backend.renew_lease(thread, "stale", 30)  # free now: still not won
        assert await backend.lookup_effect(thread, "0:A:0:pay") == b"new"

    @pytest.mark.asyncio
    async def test_history_pages(self, backend: Backend) -> None:
        thread = _thread()
        await CHAT_GRAPH.invoke({"limit": 30}, thread_id=thread, backend=backend, max_steps=40)
        everything = await CHAT_GRAPH.aget_history(thread, backend)
        last = await CHAT_GRAPH.aget_history(thread, backend, limit=10)
        assert [c.id for c in last] == [c.id for c in everything[-10:]]
        assert [c.values for c in last] == [c.values for c in everything[-10:]]
        before = await CHAT_GRAPH.aget_history(thread, backend, limit=10, before=last[0].id)
        assert [c.id for c in before] == [c.id for c in everything[-20:-10]]
        assert [c.values for c in before] == [c.values for c in everything[-20:-10]]
        assert await CHAT_GRAPH.aget_history(thread, backend, before=everything[0].id) == []
        with pytest.raises(KeyError, match="not a checkpoint"):
            await CHAT_GRAPH.aget_history(thread, backend, before="nope")
        with pytest.raises(ValueError, match="positive int"):
            await CHAT_GRAPH.aget_history(thread, backend, limit=0)

    @pytest.mark.asyncio
    async def test_history_iterates_newest_first(self, backend: Backend) -> None:
        """``aiter_history`` is the list of ``aget_history`` in the other order, across
        several pages of rows, and honours ``limit`` and ``before`` as the list does."""
        thread = _thread()
        await CHAT_GRAPH.invoke({"limit": 150}, thread_id=thread, backend=backend, max_steps=160)
        everything = await CHAT_GRAPH.aget_history(thread, backend)
        assert len(everything) > 150
        walked = [c async for c in CHAT_GRAPH.aiter_history(thread, backend)]
        assert [c.id for c in walked] == [c.id for c in reversed(everything)]
        assert [c.values for c in walked] == [c.values for c in reversed(everything)]
        assert walked == everything[::-1]
        few = [c async for c in CHAT_GRAPH.aiter_history(thread, backend, limit=5)]
        assert few == everything[:-6:-1]
        older = CHAT_GRAPH.aiter_history(thread, backend, limit=5, before=few[-1].id)
        assert [c async for c in older] == everything[-6:-11:-1]
        deep = CHAT_GRAPH.aiter_history(thread, backend, before=everything[20].id)
        assert [c async for c in deep] == everything[19::-1]
        assert (
            await CHAT_GRAPH.aget_history(thread, backend, limit=3, before=everything[20].id)
            == (everything[17:20])
        )
        oldest = CHAT_GRAPH.aiter_history(thread, backend, before=everything[0].id)
        assert [c async for c in oldest] == []
        assert [c async for c in CHAT_GRAPH.aiter_history(_thread(), backend)] == []
        with pytest.raises(KeyError, match="not a checkpoint"):
            [c async for c in CHAT_GRAPH.aiter_history(thread, backend, before="nope")]
        with pytest.raises(ValueError, match="positive int"):
            CHAT_GRAPH.aiter_history(thread, backend, limit=0)

    @pytest.mark.asyncio
    async def test_history_follows_the_current_branch(self, backend: Backend) -> None:
        """Rows of another branch of the thread (its latest checkpoint's parent is an older
        one) are passed over by the iterator and the list alike."""
        source = InMemoryBackend()
        origin = _thread()
        await CHAT_GRAPH.invoke({"limit": 40}, thread_id=origin, backend=source, max_steps=50)
        rows = await source.list_checkpoints(origin)
        thread = _thread()
        for row in rows:
            await backend.save_checkpoint(dataclasses.replace(row, thread_id=thread))
        # A second child of row 9 (a copy of row 10 under a new id) becomes the latest.
        branch = dataclasses.replace(rows[10], thread_id=thread, checkpoint_id=_thread())
        await backend.save_checkpoint(branch)
        listed = await CHAT_GRAPH.aget_history(thread, backend)
        assert [c.id for c in listed] == [
            *(r.checkpoint_id for r in rows[:10]),
            branch.checkpoint_id,
        ]
        assert listed[-1].values == (await CHAT_GRAPH.aget_history(origin, source))[10].values
        walked = [c async for c in CHAT_GRAPH.aiter_history(thread, backend)]
        assert walked == listed[::-1]

    @pytest.mark.asyncio
    async def test_history_iterator_reads_only_the_pages_it_uses(self, backend: Backend) -> None:
        """Stopping after the newest few checkpoints of a long thread reads a page and their
        chains of deltas, not the thread; so does the list form with a ``limit``."""
        if type(backend).page_checkpoints is Backend.page_checkpoints:
            pytest.skip("this backend keeps the default page_checkpoints, which reads every row")
        thread = _thread()
        steps = 400
        await CHAT_GRAPH.invoke(
            {"limit": steps}, thread_id=thread, backend=backend, max_steps=steps + 1
        )
        counted = CountingBackend(backend)
        levels = 1
        while FANOUT**levels <= steps:
            levels += 1
        chain = (FANOUT - 1) * levels + 1
        bound = FIRST_PAGE + chain  # the first page of rows, and the chain below it
        newest: list[Any] = []
        async for checkpoint in CHAT_GRAPH.aiter_history(thread, counted):
            newest.append(checkpoint)
            if len(newest) == 3:
                break
        assert [len(c.values["messages"]) for c in newest] == [steps, steps - 1, steps - 2]
        assert counted.rows_read <= bound, counted.rows_read
        counted.rows_read = 0
        page = await CHAT_GRAPH.aget_history(thread, counted, limit=3)
        assert page == newest[::-1]
        assert counted.rows_read <= bound, counted.rows_read
        # Walking all of it reads each row about once (pages, plus the chains below them).
        counted.rows_read = 0
        assert len([c async for c in CHAT_GRAPH.aiter_history(thread, counted)]) == steps + 1
        assert counted.rows_read <= 2 * (steps + 1), counted.rows_read

    @pytest.mark.asyncio
    async def test_a_missing_or_looping_chain_is_a_decode_error(self, backend: Backend) -> None:
        """A delta whose base row is gone is never read as a snapshot (a wrong, older
        state); parent pointers that loop never make a read run forever."""
        source = InMemoryBackend()
        origin = _thread()
        await CHAT_GRAPH.invoke({"limit": 12}, thread_id=origin, backend=source, max_steps=20)
        rows = await source.list_checkpoints(origin)
        thread = _thread()
        moved = [dataclasses.replace(r, thread_id=thread) for r in rows]
        for row in moved[:5] + moved[6:]:  # the sixth row is "deleted"
            await backend.save_checkpoint(row)
        # The sixth row is the base of the seventh: reading that one must fail, loudly.
        with pytest.raises(CheckpointDecodeError, match="not in the store"):
            await CHAT_GRAPH.aget_state_at(thread, backend, moved[6].checkpoint_id)
        with pytest.raises(CheckpointDecodeError, match="not in the store"):
            await CHAT_GRAPH.aget_history(thread, backend)
        looped = _thread()
        first, second = (dataclasses.replace(r, thread_id=looped) for r in rows[3:5])
        await backend.save_checkpoint(dataclasses.replace(first, parent_id=second.checkpoint_id))
        await backend.save_checkpoint(second)
        with pytest.raises(CheckpointDecodeError):
            await asyncio.wait_for(CHAT_GRAPH.aget_history(looped, backend), 10)
        with pytest.raises(CheckpointDecodeError):
            await asyncio.wait_for(CHAT_GRAPH.aget_state(looped, backend), 10)

    @pytest.mark.asyncio
    async def test_events_read_from_a_cursor(self, backend: Backend) -> None:
        thread = _thread()
        assert await backend.last_event_seq(thread) is None
        await backend.append_events(thread, [StoredEvent(s, f"e{s}".encode()) for s in range(3)])
        await backend.append_events(thread, [StoredEvent(3, b"e3")])
        await backend.append_events(thread, [])
        assert [e.seq for e in await backend.read_events(thread)] == [0, 1, 2, 3]
        tail = await backend.read_events(thread, since=2)
        assert [(e.seq, e.payload) for e in tail] == [(2, b"e2"), (3, b"e3")]
        assert await backend.read_events(thread, since=4) == []
        assert await backend.last_event_seq(thread) == 3

    @pytest.mark.asyncio
    async def test_lease_has_one_owner(self, backend: Backend) -> None:
        thread = _thread()
        assert await backend.acquire_lease(thread, "alice", 30)
        assert not await backend.acquire_lease(thread, "bob", 30)
        assert await backend.acquire_lease(thread, "alice", 30)  # renewal
        await backend.release_lease(thread, "bob")  # not bob's: no effect
        assert not await backend.acquire_lease(thread, "bob", 30)
        await backend.release_lease(thread, "alice")
        assert await backend.acquire_lease(thread, "bob", 30)

    @pytest.mark.asyncio
    async def test_expired_lease_is_taken_over(self, backend: Backend) -> None:
        thread = _thread()
        assert await backend.acquire_lease(thread, "crashed", 0.2)
        assert not await backend.acquire_lease(thread, "next", 30)
        await asyncio.sleep(0.35)
        assert await backend.acquire_lease(thread, "next", 30)
        assert not await backend.acquire_lease(thread, "crashed", 30)

    # -- the batched units of work (a backend's own override, or the default) --------------

    @pytest.mark.asyncio
    async def test_open_thread_saves_the_input_of_a_new_thread_only(self, backend: Backend) -> None:
        thread = _thread()
        first = _checkpoint(thread, 0, b"input")
        opening = await backend.open_thread(thread, "alice", 30, first)
        assert (opening.acquired, opening.created) == (True, True)
        assert opening.checkpoints == []
        assert opening.last_event_seq is None
        assert await backend.list_checkpoints(thread) == [first]
        # Another owner is refused, and its input is not written.
        refused = await backend.open_thread(thread, "bob", 30, _checkpoint(thread, 7, b"bob"))
        assert (refused.acquired, refused.created, refused.checkpoints) == (False, False, [])
        assert await backend.list_checkpoints(thread) == [first]
        # The owner opening again (a resume) reads the thread; its fresh input is dropped.
        again = await backend.open_thread(thread, "alice", 30, _checkpoint(thread, 9, b"late"))
        assert (again.acquired, again.created) == (True, False)
        assert again.checkpoints == [first]
        assert await backend.list_checkpoints(thread) == [first]

    @pytest.mark.asyncio
    async def test_open_thread_reads_what_a_resume_needs(self, backend: Backend) -> None:
        thread = _thread()
        saved = _chained(thread)
        for checkpoint in saved:
            await backend.save_checkpoint(checkpoint)
        await backend.append_events(thread, [StoredEvent(s, b"e") for s in range(5)])
        opening = await backend.open_thread(thread, "alice", 30)
        assert opening.acquired and not opening.created
        # At least the latest checkpoint's chain of bases (cp-2 <- cp-4), in order.
        assert _covers(opening.checkpoints, [saved[2], saved[4]])
        assert opening.last_event_seq == 4
        assert not await backend.acquire_lease(thread, "bob", 30)  # the lease is alice's

    @pytest.mark.asyncio
    async def test_read_chain_follows_base_ids(self, backend: Backend) -> None:
        thread = _thread()
        assert await backend.read_chain(thread) == []
        saved = _chained(thread)
        for checkpoint in saved:
            await backend.save_checkpoint(checkpoint)
        assert _covers(await backend.read_chain(thread), [saved[2], saved[4]])
        assert _covers(await backend.read_chain(thread, "cp-3"), [saved[2], saved[3]])
        assert _covers(await backend.read_chain(thread, "cp-1"), [saved[0], saved[1]])
        assert _covers(await backend.read_chain(thread, "cp-0"), [saved[0]])
        # A base in another thread (a fork's origin) ends the chain.
        other = _thread()
        fork = _checkpoint(other, 9, b"fork", "cp-4", "cp-4")
        await backend.save_checkpoint(fork)
        assert _covers(await backend.read_chain(other), [fork])

    @pytest.mark.asyncio
    async def test_commit_step_stores_events_and_checkpoint_together(
        self, backend: Backend
    ) -> None:
        thread = _thread()
        assert await backend.acquire_lease(thread, "alice", 30)
        one = _checkpoint(thread, 1, b"one")
        await backend.commit_step(thread, one, [StoredEvent(0, b"e0"), StoredEvent(1, b"e1")])
        await backend.commit_step(thread, None, [StoredEvent(2, b"e2")])  # events only
        await backend.commit_step(thread, None, [])  # nothing at all
        relaxed = _checkpoint(thread, 2, b"two", "cp-1")
        await backend.commit_step(thread, relaxed, [], durable=False)
        assert await backend.list_checkpoints(thread) == [one, relaxed]
        assert [(e.seq, e.payload) for e in await backend.read_events(thread)] == [
            (0, b"e0"),
            (1, b"e1"),
            (2, b"e2"),
        ]
        assert not await backend.acquire_lease(thread, "bob", 30)
        last = _checkpoint(thread, 3, b"three", "cp-2")
        await backend.commit_step(thread, last, [StoredEvent(3, b"e3")], release_owner="alice")
        assert await backend.latest_checkpoint(thread) == last
        assert await backend.last_event_seq(thread) == 3
        assert await backend.acquire_lease(thread, "bob", 30)  # released with the last write

    @pytest.mark.asyncio
    async def test_commit_step_releases_only_its_owner(self, backend: Backend) -> None:
        thread = _thread()
        assert await backend.acquire_lease(thread, "alice", 30)
        await backend.commit_step(thread, _checkpoint(thread, 0, b"x"), [], release_owner="bob")
        assert not await backend.acquire_lease(thread, "bob", 30)

    @pytest.mark.asyncio
    async def test_concurrent_lease_race_has_one_winner(
        self, backend: Backend, backend_factory: BackendFactory
    ) -> None:
        other = backend_factory()
        try:
            thread = _thread()
            handles = [backend, other] * 5
            won = await asyncio.gather(
                *(h.acquire_lease(thread, f"owner-{i}", 30) for i, h in enumerate(handles))
            )
            assert sum(won) == 1
        finally:
            if other is not backend:
                await other.aclose()

    @pytest.mark.asyncio
    async def test_second_handle_reads_the_same_store(
        self, backend: Backend, backend_factory: BackendFactory
    ) -> None:
        thread = _thread()
        await ORDER_GRAPH.invoke(
            {"order": thread, "items": ["a"]}, thread_id=thread, backend=backend
        )
        other = backend_factory()
        try:
            state = await ORDER_GRAPH.aget_state(thread, other)
            assert state is not None
            assert state.receipts == ["ship:a#1"]
        finally:
            if other is not backend:
                await other.aclose()

    # -- the engine on top --------------------------------------------------------------------

    @pytest.mark.asyncio
    async def test_resume_replays_recorded_effects(self, backend: Backend) -> None:
        thread = _thread()
        FAIL_ONCE.add((thread, "after-charge"))
        with pytest.raises(RuntimeError, match="injected failure"):
            await ORDER_GRAPH.invoke(
                {"order": thread, "items": ["x", "y"]}, thread_id=thread, backend=backend
            )
        assert calls(thread) == {"reserve": 1, "charge": 1}
        out = await ORDER_GRAPH.invoke(thread_id=thread, backend=backend)  # no input: resume
        assert out.charged == "charge#1"
        assert sorted(out.receipts) == ["ship:x#1", "ship:y#1"]
        assert calls(thread) == {
            "reserve": 1,
            "charge": 1,
            "ship:x": 1,
            "ship:y": 1,
            "notify": 1,
        }

    @pytest.mark.asyncio
    async def test_fan_out_resumes_only_unfinished_workers(self, backend: Backend) -> None:
        thread = _thread()
        FAIL_ONCE.add((thread, "after-ship:b"))
        with pytest.raises(RuntimeError, match="injected failure"):
            await ORDER_GRAPH.invoke(
                {"order": thread, "items": ["a", "b", "c"]}, thread_id=thread, backend=backend
            )
        latest = (await ORDER_GRAPH.aget_history(thread, backend))[-1]
        assert [name for name, _ in latest.sends] == ["Ship", "Ship", "Ship"]  # pending Sends
        assert latest.source == "error"
        assert latest.metadata["error"]["message"] == "injected failure at after-ship:b"
        failed = await ORDER_GRAPH.aget_state(thread, backend)
        assert failed is not None and run_info(failed).status == "failed"
        out = await ORDER_GRAPH.invoke(thread_id=thread, backend=backend)
        assert out.receipts == ["ship:a#1", "ship:b#1", "ship:c#1"]  # task order, not timing
        assert all(n == 1 for n in calls(thread).values())

    @pytest.mark.asyncio
    @pytest.mark.parametrize(
        ("durability", "seen", "committed"),
        [
            ("sync", [0, 1, 2, 3], [0, 1, 2, 3, 4]),  # each barrier before the next step
            ("async", [0, 0, 1, 2], [0, 1, 2, 3, 4]),  # while the next step runs: one behind
            ("exit", [0, 0, 0, 0], [0, 4]),  # the input, then only where the run stopped
        ],
    )
    async def test_durability_modes_commit_when_they_promise(
        self, backend: Backend, durability: Any, seen: list[int], committed: list[int]
    ) -> None:
        thread = _thread()
        # "async": every barrier's commit is held until the next superstep's node has looked,
        # so the node runs while it is in flight (a "sync" run would wait forever).
        store = HeldCommits(backend) if durability == "async" else backend
        running = PROBE_GRAPH.stream(
            {"order": thread}, thread_id=thread, backend=store, deps=store, durability=durability
        )
        streamed = await asyncio.wait_for(_drain(running), 60)  # "async" that waited: a hang
        history = await PROBE_GRAPH.aget_history(thread, backend)
        assert [c.step for c in history] == committed
        assert history[-1].values["seen"] == seen
        state = await PROBE_GRAPH.aget_state(thread, backend)
        assert state is not None and state.seen == seen and run_info(state).status == "completed"
        stored = [event.seq async for event in PROBE_GRAPH.replay(thread, backend)]
        assert stored == [event.seq for event in streamed]  # every event logged, in order
        assert streamed[-1].type == "run_end"

    @pytest.mark.asyncio
    @pytest.mark.parametrize("durability", ["sync", "async", "exit"])
    async def test_durability_modes_resume_a_failure_without_repeating_effects(
        self, backend: Backend, durability: Any
    ) -> None:
        thread = _thread()
        FAIL_ONCE.add((thread, "after-ship:b"))
        data = {"order": thread, "items": ["a", "b", "c"]}
        with pytest.raises(RuntimeError, match="injected failure"):
            await ORDER_GRAPH.invoke(data, thread_id=thread, backend=backend, durability=durability)
        history = await ORDER_GRAPH.aget_history(thread, backend)
        # The failure is committed in every mode, with the barriers before it.
        assert history[-1].source == "error"
        assert history[-1].values["charged"] == "charge#1"
        if durability == "exit":
            assert [c.source for c in history] == ["input", "error"]
        out = await ORDER_GRAPH.invoke(thread_id=thread, backend=backend, durability=durability)
        assert out.receipts == ["ship:a#1", "ship:b#1", "ship:c#1"]
        assert out.note == "|notify#1:3"
        assert calls(thread) == {
            "reserve": 1,
            "charge": 1,
            "ship:a": 1,
            "ship:b": 1,
            "ship:c": 1,
            "notify": 1,
        }

    @pytest.mark.asyncio
    @pytest.mark.parametrize("durability", ["sync", "async", "exit"])
    async def test_durability_modes_resume_a_suspension(
        self, backend: Backend, durability: Any
    ) -> None:
        thread = _thread()
        out = await PROBE_ASK_GRAPH.invoke(
            {"order": thread},
            thread_id=thread,
            backend=backend,
            deps=backend,
            durability=durability,
        )
        (asked,) = run_info(out).interrupts
        history = await PROBE_ASK_GRAPH.aget_history(thread, backend)
        assert history[-1].source == "interrupt" and history[-1].values["seen"] == out.seen
        if durability == "exit":
            assert [c.step for c in history] == [0, 2] and out.seen == [0, 0]
        assert calls(thread) == {"quote": 1}
        done = await PROBE_ASK_GRAPH.invoke(
            thread_id=thread, backend=backend, resume={asked.id: "yes"}, durability=durability
        )
        assert done.note == "quote#1:yes:pay#1" and done.seen == out.seen
        assert calls(thread) == {"quote": 1, "pay": 1}

    @pytest.mark.asyncio
    async def test_new_input_on_resume_is_applied_first(self, backend: Backend) -> None:
        thread = _thread()
        FAIL_ONCE.add((thread, "after-charge"))
        with pytest.raises(RuntimeError):
            await ORDER_GRAPH.invoke(
                {"order": thread, "items": ["a"]}, thread_id=thread, backend=backend
            )
        out = await ORDER_GRAPH.invoke({"note": "vip"}, thread_id=thread, backend=backend)
        assert out.note == "vip|notify#1:1"
        history = await ORDER_GRAPH.aget_history(thread, backend)
        assert history[-1].source == "loop"
        assert [c.source for c in history].count("input") == 2

    @pytest.mark.asyncio
    async def test_history_and_fork_tree(self, backend: Backend) -> None:
        thread, fork = _thread(), _thread()
        await ORDER_GRAPH.invoke(
            {"order": thread, "items": ["a"]}, thread_id=thread, backend=backend
        )
        history = await ORDER_GRAPH.aget_history(thread, backend)
        assert history[0].parent_id is None
        assert [c.parent_id for c in history[1:]] == [c.id for c in history[:-1]]
        assert [c.step for c in history] == sorted(c.step for c in history)
        after_charge = history[1]
        assert after_charge.values["charged"] == "charge#1"
        forked = await ORDER_GRAPH.fork(
            backend, thread, after_charge.id, fork, {"items": ["z"], "note": "alt"}, effects="rerun"
        )
        fork_history = await ORDER_GRAPH.aget_history(fork, backend)
        assert fork_history[0].parent_id == after_charge.id  # the tree crosses threads
        assert [c.parent_id for c in fork_history[1:]] == [c.id for c in fork_history[:-1]]
        # effects="rerun": the pending Ship and Note of the origin run again down the fork.
        assert forked.charged == "charge#1"
        assert calls(fork) == {"ship:a": 1, "notify": 1}
        assert forked.note == "alt|notify#1:1"
        original = await ORDER_GRAPH.aget_state(thread, backend)
        assert original is not None
        assert original.note == "|notify#1:1"
        assert len(await ORDER_GRAPH.aget_history(thread, backend)) == len(history)
        with pytest.raises(ValueError, match="already exists"):
            await ORDER_GRAPH.fork(backend, thread, after_charge.id, fork)
        with pytest.raises(KeyError, match="no checkpoint"):
            await ORDER_GRAPH.fork(backend, thread, "nope", _thread())

    @pytest.mark.asyncio
    async def test_a_fork_stops_before_an_effect_its_origin_ran_after_the_fork_point(
        self, backend: Backend
    ) -> None:
        thread, fork = _thread(), _thread()
        await ORDER_GRAPH.invoke(
            {"order": thread, "items": ["a"]}, thread_id=thread, backend=backend
        )
        after_charge = (await ORDER_GRAPH.aget_history(thread, backend))[1]
        with pytest.raises(ForkEffectError, match=r"ctx.step 'ship'.*effects='reuse'.*'rerun'"):
            await ORDER_GRAPH.fork(backend, thread, after_charge.id, fork, {"note": "alt"})
        assert calls(fork) == {}  # stopped before the effect: nothing ran
        state = await ORDER_GRAPH.aget_state(fork, backend)
        assert state is not None and run_info(state).failed  # invoking again stops again
        with pytest.raises(ForkEffectError):
            await ORDER_GRAPH.invoke(thread_id=fork, backend=backend)
        assert calls(fork) == {}
        with pytest.raises(ValueError, match="effects= takes 'reuse'"):
            await ORDER_GRAPH.fork(backend, thread, after_charge.id, _thread(), effects="skip")  # type: ignore[arg-type]

    @pytest.mark.asyncio
    async def test_a_fork_reuses_the_origins_results_of_identical_effects(
        self, backend: Backend
    ) -> None:
        thread, fork = _thread(), _thread()
        done = await ORDER_GRAPH.invoke(
            {"order": thread, "items": ["a"]}, thread_id=thread, backend=backend
        )
        after_charge = (await ORDER_GRAPH.aget_history(thread, backend))[1]
        # A store with only the required operations (no list_effects) forks as safely:
        # it looks each entry up instead of copying the journal.
        recording = CrashingBackend(backend, mode="raise")  # no crash point: it only counts
        forked = await ORDER_GRAPH.fork(
            recording, thread, after_charge.id, fork, {"label": "alt"}, effects="reuse"
        )
        assert calls(fork) == {}  # ship and notify replayed from the origin
        assert forked.note == done.note and forked.receipts == done.receipts
        assert forked.label == "alt"
        # Reused results are the fork's own now: a run of the fork finds them in its journal.
        notify = [b.removeprefix("effect ") for b in recording.boundaries if ":notify" in b]
        assert notify and await backend.lookup_effect(fork, notify[0]) is not None

    @pytest.mark.asyncio
    async def test_a_fork_does_not_reuse_a_step_its_origin_made_on_another_input(
        self, backend: Backend
    ) -> None:
        thread, fork = _thread(), _thread()
        await ORDER_GRAPH.invoke(
            {"order": thread, "items": ["a"]}, thread_id=thread, backend=backend
        )
        after_charge = (await ORDER_GRAPH.aget_history(thread, backend))[1]
        # The edit changes Note's input (its note), not Ship's: ship is reused, notify is not.
        with pytest.raises(
            ForkEffectError, match=r"ctx\.step 'notify'.*another input.*effects='rerun'"
        ):
            await ORDER_GRAPH.fork(
                backend, thread, after_charge.id, fork, {"note": "alt"}, effects="reuse"
            )
        assert calls(fork) == {}
        rerun = await ORDER_GRAPH.fork(
            backend, thread, after_charge.id, _thread(), {"note": "alt"}, effects="rerun"
        )
        assert rerun.note.startswith("alt|")

    @pytest.mark.asyncio
    async def test_a_fork_from_a_suspension_inherits_what_ran_before_it_only(
        self, backend: Backend
    ) -> None:
        thread, fork = _thread(), _thread()
        backend.lease_ttl = 30.0
        out = await ASK_GRAPH.invoke({"order": thread}, thread_id=thread, backend=backend)
        (asked,) = run_info(out).interrupts
        suspended = (await ASK_GRAPH.aget_history(thread, backend))[-1]
        await ASK_GRAPH.invoke(thread_id=thread, backend=backend, resume={asked.id: "yes"})
        assert calls(thread) == {"quote": 1, "pay": 1}
        # The fork point is the suspension: the quote ran before it (inherited, replayed), the
        # answer and the payment came after (asked again; then the default stops before pay).
        out = await ASK_GRAPH.fork(backend, thread, suspended.id, fork)
        assert run_info(out).suspended and calls(fork) == {}
        with pytest.raises(ForkEffectError, match=r"ctx\.step 'pay'"):
            await ASK_GRAPH.invoke(thread_id=fork, backend=backend, resume={asked.id: "yes"})
        assert calls(fork) == {}

    @pytest.mark.asyncio
    async def test_a_reusing_fork_that_crashes_at_any_boundary_never_repeats_an_effect(
        self, backend: Backend
    ) -> None:
        thread = _thread()
        # Short, so a dead fork's lease lapses soon; not so short that a loaded machine's
        # stall loses a living run's lease.
        backend.lease_ttl = 0.5
        done = await ORDER_GRAPH.invoke(
            {"order": thread, "items": ["a", "b"]}, thread_id=thread, backend=backend
        )
        after_charge = (await ORDER_GRAPH.aget_history(thread, backend))[1]
        counting = CrashingBackend(backend, mode="raise")
        clean = await ORDER_GRAPH.fork(
            counting, thread, after_charge.id, _thread(), {"label": "x"}, effects="reuse"
        )
        for crash_at in range(1, len(counting.boundaries) + 1):
            fork = _thread()
            dying = CrashingBackend(backend, crash_at=crash_at, mode="raise")
            try:
                out = await ORDER_GRAPH.fork(
                    dying, thread, after_charge.id, fork, {"label": "x"}, effects="reuse"
                )
            except (SimulatedCrash, LeaseLostError):  # dead (a sibling task saw its lease go)
                out = await recover_fork(
                    ORDER_GRAPH, backend, thread, after_charge.id, fork, {"label": "x"}
                )
            assert calls(fork) == {}, crash_at
            assert (
                sorted(out.receipts) == sorted(clean.receipts) == sorted(done.receipts)
                and out.note == clean.note
            )

    # -- thread administration ---------------------------------------------------------------

    def _needs_thread_admin(self) -> None:
        if not self.thread_admin:
            pytest.skip("the backend does not implement thread administration")

    @pytest.mark.asyncio
    async def test_thread_admin_is_supported_or_refused_clearly(self, backend: Backend) -> None:
        if self.thread_admin:
            return
        thread = _thread()
        await ORDER_GRAPH.invoke(
            {"order": thread, "items": ["a"]}, thread_id=thread, backend=backend
        )
        with pytest.raises(BackendUnsupportedError, match="does not support listing threads"):
            await alist_threads(backend)
        with pytest.raises(BackendUnsupportedError, match="does not support deleting threads"):
            await ORDER_GRAPH.adelete_thread(thread, backend)
        with pytest.raises(BackendUnsupportedError, match="does not support pruning"):
            await ORDER_GRAPH.aprune_thread(thread, backend, keep=1)
        assert await ORDER_GRAPH.aget_state(thread, backend) is not None  # nothing lost
        await ORDER_GRAPH.invoke({"order": thread}, thread_id=thread, backend=backend)  # lease back

    @pytest.mark.asyncio
    async def test_list_threads_by_prefix(self, backend: Backend) -> None:
        self._needs_thread_admin()
        base = _thread()
        names = [f"{base}-b", f"{base}-a", f"{base}-c*", f"{base}_x"]
        for name in names:
            await backend.save_checkpoint(_checkpoint(name, 0, b"p"))
        await backend.append_events(f"{base}-events-only", [StoredEvent(1, b"e")])
        found = await alist_threads(backend, prefix=f"{base}-")
        assert found == sorted([f"{base}-a", f"{base}-b", f"{base}-c*"])
        assert await alist_threads(backend, prefix=f"{base}-", limit=2) == found[:2]
        assert await alist_threads(backend, prefix=f"{base}-c*") == [f"{base}-c*"]
        assert set(names) <= set(await alist_threads(backend))
        with pytest.raises(ValueError, match="positive int"):
            await alist_threads(backend, limit=0)

    @pytest.mark.asyncio
    async def test_summarize_threads_counts_and_dates(self, backend: Backend) -> None:
        self._needs_thread_admin()
        base = _thread()
        for n in range(3):
            await backend.save_checkpoint(_checkpoint(f"{base}-a", n, b"p"))
        await backend.save_checkpoint(_checkpoint(f"{base}-b", 7, b"p"))
        await backend.save_checkpoint(_checkpoint(f"{base}_x", 0, b"p"))
        await backend.append_events(f"{base}-events-only", [StoredEvent(1, b"e")])
        found = await backend.summarize_threads(f"{base}-")
        assert found == [
            ThreadSummary(f"{base}-a", 3, 1_700_000_002.0),
            ThreadSummary(f"{base}-b", 1, 1_700_000_007.0),
        ]
        everything = {s.thread_id for s in await backend.summarize_threads()}
        assert {f"{base}-a", f"{base}-b", f"{base}_x"} <= everything

    @pytest.mark.asyncio
    async def test_list_forks_links_a_thread_to_its_forks(self, backend: Backend) -> None:
        self._needs_thread_admin()
        thread, fork, other, grand = _thread(), _thread(), _thread(), _thread()
        await ORDER_GRAPH.invoke(
            {"order": thread, "items": ["a"]}, thread_id=thread, backend=backend
        )
        assert await backend.list_forks(thread) == []
        history = await ORDER_GRAPH.aget_history(thread, backend)
        await ORDER_GRAPH.fork(backend, thread, history[1].id, fork, run=False)
        await ORDER_GRAPH.fork(backend, thread, history[0].id, other, effects="rerun")  # runs on
        first = {t: (await ORDER_GRAPH.aget_history(t, backend))[0] for t in (fork, other)}
        assert first[fork].metadata["forked_from"] == thread  # the way back
        expected = [
            ForkLink(fork, first[fork].id, history[1].id),
            ForkLink(other, first[other].id, history[0].id),
        ]
        assert await backend.list_forks(thread) == sorted(expected, key=lambda f: f.thread_id)
        # A fork of the fork belongs to the fork; the forks themselves have none yet.
        await ORDER_GRAPH.fork(backend, fork, first[fork].id, grand, run=False)
        assert [f.thread_id for f in await backend.list_forks(fork)] == [grand]
        assert {f.thread_id for f in await backend.list_forks(thread)} == {fork, other}
        assert await backend.list_forks(other) == []
        # Pruning a fork drops its fork point: its new first row's parent is its own.
        await ORDER_GRAPH.aprune_thread(other, backend, keep=1)
        assert [f.thread_id for f in await backend.list_forks(thread)] == [fork]
        assert await backend.list_forks(other) == []
        assert await backend.list_forks(_thread()) == []  # no such thread: no forks

    @pytest.mark.asyncio
    async def test_list_effects_by_prefix(self, backend: Backend) -> None:
        thread, other = _thread(), _thread()
        await backend.record_effects(
            thread, [("2:B:0:x", b"3"), ("1:A:0:x", b"1"), ("1:A:1:y", b"2"), ("10:A:0:x", b"4")]
        )
        await backend.record_effect(other, "1:A:0:x", b"other")
        if not self.thread_admin:  # an optional operation: refused by name
            with pytest.raises(BackendUnsupportedError, match="list_effects"):
                await backend.list_effects(thread)
            return
        everything = await backend.list_effects(thread)
        assert everything == [  # sorted by key, as strings
            ("10:A:0:x", b"4"),
            ("1:A:0:x", b"1"),
            ("1:A:1:y", b"2"),
            ("2:B:0:x", b"3"),
        ]
        assert await backend.list_effects(thread, "1:") == [("1:A:0:x", b"1"), ("1:A:1:y", b"2")]
        assert await backend.list_effects(thread, "1:A:1") == [("1:A:1:y", b"2")]
        assert await backend.list_effects(thread, "%") == []  # no LIKE wildcards
        assert await backend.list_effects(_thread()) == []

    @pytest.mark.asyncio
    async def test_forget_effects_removes_those_entries_only(self, backend: Backend) -> None:
        thread, other = _thread(), _thread()
        await backend.record_effects(thread, [("a|1", b"1"), ("a|2", b"2"), ("b|1", b"3")])
        await backend.record_effect(other, "a|1", b"other")
        if not self.thread_admin:  # an optional operation: refused by name
            with pytest.raises(BackendUnsupportedError, match="forget_effects"):
                await backend.forget_effects(thread, ["a|1"])
            return
        await backend.forget_effects(thread, ["a|1", "b|1", "never"])
        assert await backend.list_effects(thread) == [("a|2", b"2")]
        assert await backend.lookup_effect(thread, "a|1") is None
        assert await backend.lookup_effect(other, "a|1") == b"other"
        await backend.forget_effects(thread, [])
        await backend.record_effect(thread, "a|1", b"again")  # gone: a new first write
        assert await backend.lookup_effect(thread, "a|1") == b"again"

    @pytest.mark.asyncio
    async def test_delete_thread_removes_everything_of_it_only(self, backend: Backend) -> None:
        self._needs_thread_admin()
        gone, kept = _thread(), _thread()
        for thread in (gone, kept):
            await ORDER_GRAPH.invoke(
                {"order": thread, "items": ["a"]}, thread_id=thread, backend=backend
            )
            await backend.record_effect(thread, "k", b"v")
        await ORDER_GRAPH.adelete_thread(gone, backend)
        assert await backend.list_checkpoints(gone) == []
        assert await backend.read_events(gone) == []
        assert await backend.lookup_effect(gone, "k") is None
        assert await ORDER_GRAPH.aget_state(gone, backend) is None
        assert gone not in await alist_threads(backend, prefix=gone)
        assert await backend.lookup_effect(kept, "k") == b"v"
        assert (await ORDER_GRAPH.aget_state(kept, backend)) is not None
        # The id is free again: a new run starts from nothing and repeats no effect.
        await ORDER_GRAPH.invoke({"order": gone, "items": ["b"]}, thread_id=gone, backend=backend)
        assert calls(gone)["ship:b"] == 1
        await ORDER_GRAPH.adelete_thread(_thread(), backend)  # an unknown thread: a no-op

    @pytest.mark.asyncio
    async def test_delete_thread_removes_its_run_records(self, backend: Backend) -> None:
        self._needs_thread_admin()
        store = backend.run_store()
        if store is None:
            pytest.skip(f"{type(backend).__name__} has no run store")
        thread, kept = _thread(), _thread()
        for name in (thread, kept):
            await ORDER_GRAPH.invoke(
                {"order": name, "items": ["a"]}, thread_id=name, backend=backend
            )
        done, _ = await store.create(RunRecord(run_id=f"run-{thread}", thread_id=thread))
        await store.transition(done.run_id, lambda r: r.replace(status="succeeded"))
        other, _ = await store.create(RunRecord(run_id=f"run-{kept}", thread_id=kept))
        # A queued run is work a runner is about to do: the thread is refused whole.
        queued, _ = await store.create(RunRecord(run_id=f"run-{thread}-2", thread_id=thread))
        with pytest.raises(ThreadBusyError, match="queued or running"):
            await ORDER_GRAPH.adelete_thread(thread, backend)
        assert await backend.list_checkpoints(thread)
        assert await store.get(done.run_id) is not None
        await store.transition(queued.run_id, lambda r: r.replace(status="cancelled"))
        await ORDER_GRAPH.adelete_thread(thread, backend)
        assert (await store.list(thread_id=thread)).records == []
        assert await backend.list_checkpoints(thread) == []
        assert await store.get(other.run_id) == other
        await ORDER_GRAPH.invoke({"order": thread}, thread_id=thread, backend=backend)  # lease free

    @pytest.mark.asyncio
    async def test_delete_or_prune_refuses_a_thread_another_process_runs(
        self, backend: Backend, backend_factory: BackendFactory
    ) -> None:
        self._needs_thread_admin()
        thread = _thread()
        await ORDER_GRAPH.invoke(
            {"order": thread, "items": ["a"]}, thread_id=thread, backend=backend
        )
        assert await backend.acquire_lease(thread, "other-runner", 60.0)
        other = backend_factory()
        try:
            with pytest.raises(ThreadBusyError, match="another process"):
                await ORDER_GRAPH.adelete_thread(thread, other)
            with pytest.raises(ThreadBusyError, match="another process"):
                await ORDER_GRAPH.aprune_thread(thread, other, keep=1)
        finally:
            if other is not backend:
                await other.aclose()
        assert await backend.list_checkpoints(thread)  # nothing was removed
        await backend.release_lease(thread, "other-runner")

    @pytest.mark.asyncio
    async def test_prune_keeps_the_newest_rebuildable(self, backend: Backend) -> None:
        self._needs_thread_admin()
        thread = _thread()
        steps = 40
        await CHAT_GRAPH.invoke(
            {"messages": [{"role": "user", "content": "hi"}], "limit": steps},
            thread_id=thread,
            backend=backend,
            max_steps=steps + 1,
        )
        before = await CHAT_GRAPH.aget_history(thread, backend)
        keep = 13  # cuts through the delta ladder: kept rows lose their bases
        removed = await CHAT_GRAPH.aprune_thread(thread, backend, keep=keep)
        assert removed == len(before) - keep
        after = await CHAT_GRAPH.aget_history(thread, backend)
        assert [(c.id, c.values) for c in after] == [(c.id, c.values) for c in before[-keep:]]
        for checkpoint in after:  # each kept one still reads alone
            state = await CHAT_GRAPH.aget_state_at(thread, backend, checkpoint.id)
            assert state.messages == checkpoint.values["messages"]
        # Resume goes on from the latest; a fork from the oldest kept one still works.
        out = await CHAT_GRAPH.invoke(
            {"limit": steps + 3}, thread_id=thread, backend=backend, max_steps=10
        )
        assert len(out.messages) == 1 + steps + 3
        fork = _thread()
        await CHAT_GRAPH.fork(backend, thread, after[0].id, fork)
        forked = await CHAT_GRAPH.aget_state(fork, backend)
        assert forked is not None and len(forked.messages) >= len(after[0].values["messages"])
        assert await CHAT_GRAPH.aprune_thread(thread, backend, keep=10_000) == 0
        with pytest.raises(ValueError, match="keep"):
            await CHAT_GRAPH.aprune_thread(thread, backend, keep=0)

    @pytest.mark.asyncio
    async def test_state_at_any_checkpoint(self, backend: Backend) -> None:
        thread = _thread()
        await ORDER_GRAPH.invoke(
            {"order": thread, "items": ["a", "b"]}, thread_id=thread, backend=backend
        )
        history = await ORDER_GRAPH.aget_history(thread, backend)
        for checkpoint in history:
            state = await ORDER_GRAPH.aget_state_at(thread, backend, checkpoint.id)
            assert state.receipts == checkpoint.values.get("receipts", [])
        assert (await ORDER_GRAPH.aget_state_at(thread, backend, history[1].id)).receipts == []

    @pytest.mark.asyncio
    async def test_replay_cursor_survives_resume(self, backend: Backend) -> None:
        thread = _thread()
        FAIL_ONCE.add((thread, "after-ship:a"))
        first: list[Any] = []

        async def run_until_failure() -> None:
            inp = {"order": thread, "items": ["a"]}
            async for event in ORDER_GRAPH.stream(inp, thread_id=thread, backend=backend):
                first.append(event)

        with pytest.raises(RuntimeError):
            await run_until_failure()
        second = await _drain(ORDER_GRAPH.stream(thread_id=thread, backend=backend))
        seqs = [e.seq for e in first + second]
        assert seqs == sorted(set(seqs))  # strictly increasing across the resume
        stored = await _drain(ORDER_GRAPH.replay(thread, backend))
        stored_seqs = [e.seq for e in stored]
        assert stored_seqs == sorted(set(stored_seqs))
        assert stored[-1].type == "run_end"
        assert {e.seq for e in second} <= set(stored_seqs)
        cursor = second[0].seq
        tail = await _drain(ORDER_GRAPH.replay(thread, backend, since=cursor))
        assert [e.seq for e in tail] == [s for s in stored_seqs if s >= cursor]
        assert tail[0].type == "run_start"

    @pytest.mark.asyncio
    async def test_second_runner_gets_thread_busy(
        self, backend: Backend, backend_factory: BackendFactory
    ) -> None:
        thread = _thread()
        inside, gate = GATES[thread] = (asyncio.Event(), asyncio.Event())
        other = backend_factory()
        try:
            first = asyncio.ensure_future(
                WAIT_GRAPH.invoke({"order": "o"}, thread_id=thread, backend=backend)
            )
            await inside.wait()  # the first runner holds the lease by now
            with pytest.raises(ThreadBusyError, match=thread):
                await WAIT_GRAPH.invoke(thread_id=thread, backend=other)
            gate.set()
            assert (await first).note == "done"
            assert (await WAIT_GRAPH.invoke(thread_id=thread, backend=other)).note == "done"
        finally:
            gate.set()
            GATES.pop(thread, None)
            if other is not backend:
                await other.aclose()

    @pytest.mark.asyncio
    async def test_crashed_owner_lease_is_taken_over(self, backend: Backend) -> None:
        thread = _thread()
        backend.lease_ttl = 0.3
        assert await backend.acquire_lease(thread, "a-runner-that-died", 0.3)
        with pytest.raises(ThreadBusyError):
            await ORDER_GRAPH.invoke({"order": thread}, thread_id=thread, backend=backend)
        await asyncio.sleep(0.45)
        out = await ORDER_GRAPH.invoke({"order": thread}, thread_id=thread, backend=backend)
        assert out.charged == "charge#1"

    @pytest.mark.parametrize("damage", ["corrupt bytes", "unknown type tag", "newer format"])
    @pytest.mark.asyncio
    async def test_undecodable_checkpoint_is_a_clear_error(
        self, backend: Backend, damage: str
    ) -> None:
        thread = _thread()
        FAIL_ONCE.add((thread, "after-charge"))
        with pytest.raises(RuntimeError):
            await ORDER_GRAPH.invoke(
                {"order": thread, "items": ["a"]}, thread_id=thread, backend=backend
            )
        good = await ORDER_GRAPH.aget_history(thread, backend)
        if damage == "corrupt bytes":
            payload = b"\x00\xffnot a checkpoint"
        elif damage == "unknown type tag":
            payload = json.dumps(
                {"v": 1, "base": False, "changes": {"note": ["set", {"$t": "martian"}]}, "plan": []}
            ).encode()
        else:
            payload = json.dumps({"v": 99, "changes": {}, "plan": []}).encode()
        bad = StoredCheckpoint(thread, "cp-damaged", good[-1].id, 9, 1.0, payload)
        if backend.serializer.__class__.__name__ in _TAGGED or damage == "corrupt bytes":
            await backend.save_checkpoint(bad)
        else:
            pytest.skip("JSON-crafted payloads only apply to the JSON and msgpack serializers")
        for _ in range(2):  # the same clear error every time: no crash loop, no busy thread
            with pytest.raises(CheckpointDecodeError) as info:
                await ORDER_GRAPH.invoke(thread_id=thread, backend=backend)
            assert thread in str(info.value)
            assert "cp-damaged" in str(info.value)
            if damage != "newer format":  # (that one says to upgrade)
                assert "fork from an earlier checkpoint" in str(info.value)
        with pytest.raises(CheckpointDecodeError, match="cp-damaged"):
            await ORDER_GRAPH.aget_state(thread, backend)
        # Nothing was lost: the good checkpoints are still there to fork from.
        fork = _thread()
        out = await ORDER_GRAPH.fork(backend, thread, good[-1].id, fork, effects="rerun")
        assert out.receipts == ["ship:a#1"]

    @pytest.mark.asyncio
    async def test_write_cost_stays_flat_as_messages_grow(self, backend: Backend) -> None:
        thread = _thread()
        history = [{"role": "user", "content": f"message {i}"} for i in range(10_000)]
        steps = 30
        out = await CHAT_GRAPH.invoke(
            {"messages": history, "limit": steps},
            thread_id=thread,
            backend=backend,
            max_steps=steps + 1,
        )
        assert len(out.messages) == 10_000 + steps
        stored = await backend.list_checkpoints(thread)
        sizes = [len(s.payload) for s in stored]
        assert sizes[0] > 100_000  # the root checkpoint holds the 10,000 messages
        per_step = sizes[1:]
        assert len(per_step) == steps
        assert max(per_step) < BYTES_PER_STEP_LIMIT, per_step
        # Flat: no growth with history. Every FANOUT-th step also re-stores the last
        # FANOUT appends (the ladder that keeps reads short); the others hold one message.
        typical = [size for n, size in enumerate(per_step, 1) if n % FANOUT]
        assert max(typical) - min(typical) < 64, per_step
        midway = stored[10]
        state = await CHAT_GRAPH.aget_state_at(thread, backend, midway.checkpoint_id)
        assert len(state.messages) == 10_000 + 10
        assert state.messages[:10_000] == history
        assert state.messages[-1] == {"role": "assistant", "content": "reply 9"}
        # Rebuilding the latest state folds appends in place; the history must not see it.
        latest = await CHAT_GRAPH.aget_state(thread, backend)
        assert latest is not None and latest.messages == out.messages
        chain = await CHAT_GRAPH.aget_history(thread, backend)
        assert [len(c.values["messages"]) for c in chain] == [10_000 + i for i in range(steps + 1)]
        again = await CHAT_GRAPH.aget_state(thread, backend)
        assert again is not None and again.messages == out.messages

    @pytest.mark.asyncio
    async def test_reads_touch_a_bounded_number_of_rows(self, backend: Backend) -> None:
        """Rebuilding the latest state (get_state, a resume, a fork) reads the latest
        checkpoint's chain of deltas, not every checkpoint of a long thread."""
        if type(backend).read_chain is Backend.read_chain:
            pytest.skip("this backend keeps the default read_chain, which reads every row")
        thread = _thread()
        steps = 700
        out = await CHAT_GRAPH.invoke(
            {"limit": steps}, thread_id=thread, backend=backend, max_steps=steps + 1
        )
        assert len(out.messages) == steps
        counted = CountingBackend(backend)
        levels = 1
        while FANOUT**levels <= steps:
            levels += 1
        bound = (FANOUT - 1) * levels + 1  # the most rows per level, and the snapshot
        latest = await CHAT_GRAPH.aget_state(thread, counted)
        assert latest is not None and latest.messages == out.messages
        assert counted.rows_read <= bound, counted.rows_read
        counted.rows_read = 0
        resumed = await CHAT_GRAPH.invoke(
            {"limit": steps + 3}, thread_id=thread, backend=counted, max_steps=10
        )
        assert resumed.messages[:steps] == out.messages and len(resumed.messages) == steps + 3
        assert counted.rows_read <= bound, counted.rows_read
        history = await CHAT_GRAPH.aget_history(thread, backend)
        middle = history[steps // 2 + 5]
        counted.rows_read = 0
        past = await CHAT_GRAPH.aget_state_at(thread, counted, middle.id)
        assert past.messages == middle.values["messages"]
        assert counted.rows_read <= bound, counted.rows_read
        # The history still has every checkpoint's exact values.
        assert [len(c.values["messages"]) for c in history] == [
            *range(steps + 1),
            *range(steps, steps + 4),
        ]

    @pytest.mark.asyncio
    async def test_default_serializer_refuses_classes_it_may_not_import(
        self, backend: Backend
    ) -> None:
        if backend.serializer.__class__.__name__ not in _TAGGED:
            pytest.skip("the safety rule is the JSON and msgpack serializers'")
        thread = _thread()
        crafted = [
            {"$t": "model", "c": "evil_module_not_imported:Payload", "v": {}},
            {"$t": "model", "c": "os:system", "v": {}},
            {"$t": "enum", "c": "subprocess:Popen", "v": 1},
            {"$t": "dataclass", "c": "subprocess:Popen", "v": {"args": ["true"]}},
        ]
        for n, value in enumerate(crafted):
            payload = json.dumps(
                {"v": 1, "base": True, "changes": {"note": ["set", value]}, "plan": []}
            ).encode()
            await backend.save_checkpoint(_checkpoint(thread, n, payload))
            refused = r"not registered|not a dataclass, pydantic model or enum"
            with pytest.raises(CheckpointDecodeError, match=refused):
                await ORDER_GRAPH.aget_state(thread, backend)
        assert "evil_module_not_imported" not in sys.modules

    @pytest.mark.asyncio
    async def test_pickle_by_name_round_trips_any_object(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory(serializer="pickle")
        try:
            assert backend.describe()["serializer"] == "pickle"
            thread = _thread()
            FAIL_ONCE.add((thread, "after-inspect"))
            with pytest.raises(RuntimeError):
                await OPAQUE_GRAPH.invoke({"box": Opaque(41)}, thread_id=thread, backend=backend)
            out = await OPAQUE_GRAPH.invoke(thread_id=thread, backend=backend)
            assert out.done is True
            assert out.box == Opaque(41)
        finally:
            await backend.aclose()

    @pytest.mark.asyncio
    async def test_msgpack_by_name_stores_msgpack_and_reads_json_rows(
        self, backend_factory: BackendFactory
    ) -> None:
        backend = backend_factory(serializer="msgpack")
        try:
            assert backend.describe()["serializer"] == "msgpack"
            thread = _thread()
            out = await CHAT_GRAPH.invoke({"limit": 20}, thread_id=thread, backend=backend)
            stored = await backend.list_checkpoints(thread)
            assert stored and all(s.payload[:1] == MSGPACK_MAGIC for s in stored)
            assert await CHAT_GRAPH.aget_state(thread, backend) == out
            assert [
                len(c.values["messages"]) for c in await CHAT_GRAPH.aget_history(thread, backend)
            ] == list(range(21))
            # A row written as JSON (the store used the JSON serializer before) reads back.
            switched = _thread()
            changes = {
                "messages": ["set", [{"role": "user", "content": "hi"}]],
                "turns": ["set", 1],
            }
            row = json.dumps({"v": 1, "base": True, "changes": changes, "plan": []}).encode()
            await backend.save_checkpoint(_checkpoint(switched, 0, row))
            state = await CHAT_GRAPH.aget_state(switched, backend)
            assert state is not None and (state.turns, state.messages[0]["content"]) == (1, "hi")
        finally:
            await backend.aclose()

    @pytest.mark.asyncio
    async def test_json_default_refuses_what_it_cannot_store(self, backend: Backend) -> None:
        if backend.serializer.__class__.__name__ not in _TAGGED:
            pytest.skip("the JSON and msgpack serializers' rule")
        with pytest.raises(TypeError, match="serializer='pickle'"):
            await OPAQUE_GRAPH.invoke({"box": Opaque(1)}, thread_id=_thread(), backend=backend)

    @pytest.mark.asyncio
    async def test_sync_reads_from_inside_a_running_loop(self, backend: Backend) -> None:
        thread = _thread()
        await ORDER_GRAPH.invoke(
            {"order": thread, "items": ["a"]}, thread_id=thread, backend=backend
        )
        # get_state/get_history run on a private loop in another thread: a backend bound to
        # this loop must still answer.
        state = ORDER_GRAPH.get_state(thread, backend)
        assert state is not None
        assert state.receipts == ["ship:a#1"]
        assert len(ORDER_GRAPH.get_history(thread, backend)) == 4
        assert (await ORDER_GRAPH.aget_state(thread, backend)) == state
