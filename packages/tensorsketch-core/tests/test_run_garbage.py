"""A run leaves no reference cycle behind: what it made is freed as it ends.

A cycle is freed only by the garbage collector, and every object it holds counts towards
the next collection, whose full passes walk the whole heap: a few cycles per run (a
serializer's self-naming closure per ``dumps``, a run and its effect log, a journal and its
fork resolver, with all the run's state hanging from them) made the collector a fifth of a
run's CPU. These tests count what a collection finds after the run (nothing), not times.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tensorsketch import InMemoryBackend
from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.runs import RunRecord
from tensorsketch.serializers import MsgpackSerializer
from tensorsketch.testing.runs import settle_agent


@contextmanager
def _cycles() -> Iterator[Counter[str]]:
    """Collects first, keeps the collector off inside, then fills the counter with the types
    of what a collection finds unreachable (what only the collector could free)."""
    found: Counter[str] = Counter()
    gc.collect()
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield found
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
    finally:
        gc.set_debug(0)
        found.update(type(o).__qualname__ for o in gc.garbage)
        gc.garbage.clear()
        if collecting:
            gc.enable()


@dataclasses.dataclass
class Point:
    x: int
    y: int


def test_dumps_and_loads_leave_no_cycle() -> None:
    serializer = MsgpackSerializer(types=[Point])
    native = {"points": [Point(1, 2), (3, 4)], "at": 1.5}  # tagged values: ormsgpack's walk
    walked = {1: Point(1, 2), "pair": (3, 4)}  # an int key: the Python walk decides
    stored = serializer.dumps(native), serializer.dumps(walked)
    assert serializer.loads(stored[0]) == native
    assert serializer.loads_many(stored) == [native, walked]
    with _cycles() as found:
        for _ in range(3):
            serializer.dumps(native)
            serializer.dumps(walked)
            serializer.loads(stored[0])
            serializer.loads_many(stored)
    assert not found, found


async def _settled(run: Callable[[str], Awaitable[None]]) -> Counter[str]:
    """What ``run`` leaves for the collector, on fresh threads, once warm."""
    for i in range(3):
        await run(f"warm-{i}")
    await asyncio.sleep(0)
    with _cycles() as found:
        for i in range(3):
            await run(f"measured-{i}")
        await asyncio.sleep(0)
    return found


async def test_a_durable_invoke_leaves_no_cycle() -> None:
    agent, backend = settle_agent(), InMemoryBackend()

    async def run(thread: str) -> None:
        out = await agent.invoke({"query": "settle"}, thread_id=thread, backend=backend)
        assert out.output == "settled"

    found = await _settled(run)
    assert not found, found  # e.g. Run and EffectLog, RunJournal and ForkResolver


async def test_a_runner_run_leaves_no_cycle() -> None:
    agent, backend = settle_agent(), InMemoryBackend()
    runner = AsyncRunner(agent, backend=backend)
    await runner.start()
    try:

        async def run(thread: str) -> None:
            record = await runner.submit({"query": "settle"}, thread_id=thread)
            done = await runner.await_run(record.run_id)
            assert done.status == "succeeded", done

        found = await _settled(run)
    finally:
        await runner.aclose()
    assert not found, found


def _alive(*names: str) -> Counter[str]:
    """How many objects of these classes are still reachable, after a collection."""
    gc.collect()
    return Counter(n for o in gc.get_objects() if (n := type(o).__qualname__) in names)


async def test_a_finished_runner_run_keeps_nothing_of_its_own() -> None:
    # A run's heartbeat slept on a timer made in the run's context; cancelled as the run
    # ended, the timer stayed in the loop's heap for a third of the lease TTL, and its
    # context kept the run's rider, inbox and records alive (into the oldest generation).
    agent, backend = settle_agent(), InMemoryBackend()
    runner = AsyncRunner(agent, backend=backend)
    await runner.start()
    try:
        for i in range(3):
            record = await runner.submit({"query": "settle"}, thread_id=f"t-{i}")
            done = await runner.await_run(record.run_id)
            assert done.status == "succeeded", done
        await asyncio.sleep(0)
        # (The records themselves: the in-memory backend keeps them.)
        assert not _alive("RunRider", "RecordInbox", "Folding", "RunJournal")
        state = runner._state
        assert not (state.tasks or state.known or state.riders or state.folds)
        assert not (state.settled_events or state.final or state.run_threads)
    finally:
        await runner.aclose()


async def test_a_short_durable_run_makes_no_heartbeat_task() -> None:
    # The lease is renewed every third of its TTL: a run shorter than that needs no task
    # sleeping to renew it (one per run, cancelled as the run ended).
    agent, backend = settle_agent(), InMemoryBackend()
    await agent.invoke({"query": "settle"}, thread_id="warm", backend=backend)
    made: list[str] = []
    loop = asyncio.get_running_loop()
    create_task = loop.create_task

    def counted(coro: Any, **kwargs: Any) -> Any:
        made.append(coro.__qualname__)
        return create_task(coro, **kwargs)

    loop.create_task = counted  # type: ignore[method-assign]
    try:
        await agent.invoke({"query": "settle"}, thread_id="t", backend=backend)
    finally:
        del loop.create_task
    assert "Lease._renew" not in made, made


async def test_a_runs_move_to_running_is_one_object() -> None:
    # The change each segment's begin write applies was a closure over five values: six
    # objects for the collector (the function and its cells); it is one.
    agent, backend = settle_agent(), InMemoryBackend()
    runner = AsyncRunner(agent, backend=backend)
    execution = runner._execution
    kept = [execution._beginning("warm", 0, takeover=False)]  # the call's caches filled
    gc.collect()
    gc.disable()
    try:
        before = gc.get_count()[0]
        kept.append(None)
        idle = gc.get_count()[0] - before  # what measuring itself counts
        before = gc.get_count()[0]
        kept.append(execution._beginning("ckpt", 3, takeover=False))
        made = gc.get_count()[0] - before - idle
    finally:
        gc.enable()
    assert made == 1, made
    begin = kept[-1]
    record = RunRecord(run_id="r", thread_id="t", owner=runner._state.owner)
    running = begin(record)
    assert running is not None and running.status == "running"
    assert (running.base_checkpoint, running.first_seq, running.attempts) == ("ckpt", 3, 1)
    assert begin(record.replace(owner="somebody else")) is None
    assert execution._beginning("", 0, takeover=True)(record.replace(status="running"))


async def test_a_durable_runs_store_writes_make_no_async_generator() -> None:
    # store_guard and the journal's fenced writes were generator-based context managers:
    # an async generator (tracked by the event loop) and half a dozen calls per write.
    agent, backend = settle_agent(), InMemoryBackend()
    await agent.invoke({"query": "settle"}, thread_id="warm", backend=backend)
    made: list[str] = []
    firstiter, finalizer = sys.get_asyncgen_hooks()

    def counted(agen: Any) -> None:
        made.append(agen.__qualname__)
        if firstiter is not None:
            firstiter(agen)

    sys.set_asyncgen_hooks(firstiter=counted, finalizer=finalizer)
    try:
        await agent.invoke({"query": "settle"}, thread_id="t", backend=backend)
    finally:
        sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=finalizer)
    assert not {"store_guard", "RunJournal._fenced"} & set(made), made
