"""AsyncRunner and Scheduler on the two stores core ships (PostgreSQL and Redis: the
backends package's tests). Real graphs and agents on the fake model; no mocks."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tensorsketch import END, START, Context, Graph, Node, Schema
from tensorsketch.runs import (
    AsyncRunner,
    QueueFullError,
    RunConflictError,
    RunNotFoundError,
    RunRecord,
    Scheduler,
    run_store,
    wait_for_event,
)
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.testing.runs import (
    REFUNDS,
    Io,
    breakpoint_graph,
    check_run_durability,
    durability_graph,
    hang_graph,
    listen_graph,
    one_node_graph,
    refund_agent,
)

# -- graphs -------------------------------------------------------------------------------------

CALLS: dict[str, int] = {}


class Work(Node):
    class In(Schema):
        n: int

    class Out(Schema):
        out: str

    async def run(self, ctx: Context, inp: In) -> Out:
        if inp.n < 0:  # how a test makes a run fail
            msg = f"cannot work {inp.n} times"
            raise ValueError(msg)

        async def effect() -> str:
            CALLS[ctx.thread_id or ""] = CALLS.get(ctx.thread_id or "", 0) + 1
            return f"did {inp.n}"

        return self.Out(out=await ctx.step("effect", effect))


def work_graph() -> Any:
    return one_node_graph(Work, "work")


class Nap(Node):
    class In(Schema):
        n: int

    class Out(Schema):
        out: str

    async def run(self, ctx: Context, inp: In) -> Out:
        await ctx.sleep(inp.n / 10)
        return self.Out(out="woke")


#: (entered, open): a ``Gated`` run with ``n == 0`` sets the first and waits for the second
#: (a run occupying the only slot).
GATE: tuple[asyncio.Event, asyncio.Event] | None = None


class Gated(Node):
    class In(Schema):
        n: int

    class Out(Schema):
        out: str

    async def run(self, ctx: Context, inp: In) -> Out:
        if inp.n == 0 and GATE is not None:
            GATE[0].set()
            await GATE[1].wait()
        return self.Out(out=f"did {inp.n}")


def gated_graph() -> Any:
    return one_node_graph(Gated, "gated")


def nap_graph() -> Any:
    return one_node_graph(Nap, "nap")


class Laps(Node):
    """Three laps of ``n / 10`` seconds of (journaled) work, a one-second durable nap between
    laps: three segments, two suspensions."""

    class In(Schema):
        n: int

    class Out(Schema):
        out: str

    async def run(self, ctx: Context, inp: In) -> Out:
        async def work() -> str:
            await asyncio.sleep(inp.n / 10)
            return "lap"

        for lap in range(3):
            await ctx.step(f"lap{lap}", work)
            if lap < 2:
                await ctx.sleep(1.0)
        return self.Out(out="three laps")


def laps_graph() -> Any:
    return one_node_graph(Laps, "laps")


# The hanging, listening and approval-needing graphs come from the testing kit.

#: The ``ctx.run_id`` every segment of a ``WhoAmI`` run saw, in order.
SEEN_RUN_IDS: list[str] = []


class WhoAmI(Node):
    """Notes its ``ctx.run_id``, then waits for an event: two segments of one run."""

    class In(Schema):
        n: int

    class Out(Schema):
        event: dict[str, Any]

    async def run(self, ctx: Context, inp: In) -> Out:
        SEEN_RUN_IDS.append(ctx.run_id)
        return self.Out(event=await wait_for_event(ctx))


def who_am_i_graph() -> Any:
    return one_node_graph(WhoAmI, "who_am_i")


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Backend]:
    shared = InMemoryBackend()

    def make() -> Backend:
        if request.param == "memory":
            return shared
        return SqliteBackend(tmp_path / "runs.db", lease_ttl=2.0)

    return make


@pytest.fixture
async def runner_for(
    make_backend: Callable[[], Backend],
) -> AsyncIterator[Callable[..., AsyncRunner]]:
    made: list[AsyncRunner] = []

    def build(graph: Any, **options: Any) -> AsyncRunner:
        options.setdefault("timer_refresh", 0.5)
        options.setdefault("poll_interval", 0.05)
        runner = AsyncRunner(
            graph, backend=options.pop("backend", None) or make_backend(), **options
        )
        made.append(runner)
        return runner

    yield build
    for runner in made:
        await runner.aclose()


# -- the lifecycle ------------------------------------------------------------------------------


async def test_a_submitted_run_executes_in_the_background_and_is_recorded(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for(work_graph())
    record = await runner.submit({"n": 7}, labels={"tenant": "acme"})
    assert record.status == "queued"
    assert record.labels == {"tenant": "acme"}
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded"
    assert done.output["out"] == "did 7"
    assert done.started_at is not None and done.finished_at is not None
    assert done.owner is None
    assert CALLS[done.thread_id] == 1
    page = await runner.list(status="succeeded", labels={"tenant": "acme"})
    assert [r.run_id for r in page.records] == [record.run_id]
    events = [e.type async for e in runner.events(record.run_id)]
    assert events[0] == "run_start" and events[-1] == "run_end"


async def test_a_run_whose_task_was_cancelled_before_it_ran_is_forgotten(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    # A run's task forgets its run as it ends; one cancelled before its first step never
    # enters its coroutine, and is forgotten all the same: it can execute again.
    runner = runner_for(work_graph())
    # Labels keep the insert of their own: submit returns before the run's task ran.
    record = await runner.submit({"n": 3}, labels={"tenant": "acme"})
    task = runner._tasks[record.run_id]
    task.cancel()
    await asyncio.wait([task])
    await asyncio.sleep(0)  # (its done callbacks run)
    assert record.run_id not in runner._tasks and runner.in_flight == 0
    runner._spawn(record.run_id)
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded" and done.output["out"] == "did 3"
    assert runner.in_flight == 0


async def test_a_run_executed_here_is_not_read_back_while_it_is_awaited(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    """The runner holds the record of a run it executes and the state its stream ended
    with: submit + await_run never read the thread's state back, and read the record only
    at each superstep barrier (the stop check) — not at all on a backend whose commits
    carry the record's version (rides: nobody else wrote it)."""
    runner = runner_for(work_graph(), poll_interval=30.0)
    reads = {"record": 0, "state": 0}
    store_get, get_state = runner.store.get, runner.graph.aget_state

    async def counted_get(run_id: str) -> RunRecord | None:
        reads["record"] += 1
        return await store_get(run_id)

    async def counted_state(*args: Any, **kwargs: Any) -> Any:
        reads["state"] += 1
        return await get_state(*args, **kwargs)

    runner.store.get = counted_get  # type: ignore[method-assign]
    runner.graph.aget_state = counted_state  # type: ignore[method-assign]
    record = await runner.submit({"n": 3}, thread_id="counted")
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded", done.error
    seen = dict(reads)
    events = [e async for e in runner.events(record.run_id, follow=False)]
    barriers = sum(e.type == "values" and not e.namespace for e in events)
    assert barriers >= 1
    rides = bool(getattr(runner.backend, "carries_rides", False))
    assert seen == {"record": 0 if rides else barriers, "state": 0}


async def test_a_thread_that_moves_while_its_run_waits_for_a_slot_is_read_as_it_begins(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    """A new run starts from where its thread stood at submit — a guess its first write
    checks in the same round trip: a thread written meanwhile (here by a direct invoke while
    the run waited for the only slot) moves its start, so it still gets its input."""
    global GATE
    GATE = asyncio.Event(), asyncio.Event()
    graph = gated_graph()
    runner = runner_for(graph, concurrency=1)
    try:
        await runner.submit({"n": 0})
        await asyncio.wait_for(GATE[0].wait(), 30)
        waiting = await runner.submit({"n": 5}, thread_id="moved")
        assert (await runner.get(waiting.run_id)).status == "queued"
        moved = await graph.invoke({"n": 1}, thread_id="moved", backend=runner.backend)
        assert moved.out == "did 1"
        latest = await runner.backend.latest_checkpoint("moved")
        assert latest is not None
        GATE[1].set()
        done = await runner.await_run(waiting.run_id, timeout=30)
    finally:
        GATE[1].set()
        GATE = None
    assert done.status == "succeeded", done.error
    assert done.output["out"] == "did 5"
    assert done.base_checkpoint == latest.checkpoint_id


async def test_a_follower_of_a_run_waiting_here_for_a_slot_reads_nothing_until_it_starts(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    """A run queued here for a slot writes nothing until it takes one: its follower waits
    for the runner's signal (the slot taken, or the task's end) instead of polling the
    store, and sees the same events, in the same order, to the same end."""
    global GATE
    GATE = asyncio.Event(), asyncio.Event()
    runner = runner_for(gated_graph(), concurrency=1)
    reads: list[str] = []
    read_events, store_get = runner.backend.read_events, runner.store.get

    async def counted_events(thread_id: str, since: int = 0) -> Any:
        reads.append(thread_id)
        return await read_events(thread_id, since)

    async def counted_get(run_id: str) -> RunRecord | None:
        reads.append(run_id)
        return await store_get(run_id)

    runner.backend.read_events = counted_events  # type: ignore[method-assign]
    runner.store.get = counted_get  # type: ignore[method-assign]
    seen: list[Any] = []
    try:
        await runner.submit({"n": 0})
        await asyncio.wait_for(GATE[0].wait(), 30)
        waiting = await runner.submit({"n": 5})

        async def follow() -> None:
            seen.extend([e async for e in runner.events(waiting.run_id)])

        follower = asyncio.create_task(follow())
        await asyncio.sleep(0.3)  # polling from 10 ms, doubling, would look 5 times or more
        looked = [r for r in reads if r in (waiting.run_id, waiting.thread_id)]
        GATE[1].set()
        await asyncio.wait_for(follower, 30)
    finally:
        GATE[1].set()
        GATE = None
    # Its record read and its thread's events read once as it attached; then nothing.
    assert looked == [waiting.run_id, waiting.thread_id]
    stored = [e async for e in runner.events(waiting.run_id, follow=False)]
    assert [(e.seq, e.type) for e in seen] == [(e.seq, e.type) for e in stored]
    assert seen[-1].type == "run_end"


async def test_leaving_the_queue_is_not_synced_but_the_outcome_is(tmp_path: Path) -> None:
    """The queued -> running write need not wait for the disk (the segment's first durable
    commit carries it there); the run's outcome does. Both ride the run's own units: the
    one that opens the thread and the one that commits its last checkpoint."""
    backend = SqliteBackend(tmp_path / "relaxed.db")
    writes: list[tuple[str, str, bool]] = []
    submit = backend.submit

    async def counted(queries: Any, **options: Any) -> Any:
        for q in queries:
            if q.sql.lstrip().upper().startswith("UPDATE") and "version = version + 1" in q.sql:
                unit = "own" if len(queries) == 1 else "ridden"
                writes.append((q.params[0], unit, options.get("durable", True)))
        return await submit(queries, **options)

    backend.submit = counted  # type: ignore[method-assign]
    runner = AsyncRunner(work_graph(), backend=backend)
    try:
        record = await runner.submit({"n": 2})
        done = await runner.await_run(record.run_id, timeout=30)
    finally:
        await runner.aclose()
    assert done.status == "succeeded"
    assert writes == [("running", "ridden", False), ("succeeded", "ridden", True)]


@pytest.mark.parametrize("fold", [True, False])
async def test_a_runner_run_costs_the_units_of_the_same_invoke(tmp_path: Path, fold: bool) -> None:
    """The record's writes ride the run's own units (#49): its ``running`` status rides the
    thread's opening, its version read every journal write, its outcome the last commit —
    and the submit's insert rides the opening too (folded: the run could start at once), so
    a run through the runner takes the direct invoke's units. Unfolded, one more."""
    backend = SqliteBackend(tmp_path / "units.db")
    units: list[int] = []
    submit = backend.submit

    async def counted(queries: Any, **options: Any) -> Any:
        units.append(len(queries))
        return await submit(queries, **options)

    backend.submit = counted  # type: ignore[method-assign]
    graph = work_graph()
    runner = AsyncRunner(graph, backend=backend)
    runner.fold_submits = fold
    try:
        warm = await runner.submit({"n": 1}, thread_id="warm")
        await runner.await_run(warm.run_id, timeout=30)
        units.clear()
        await graph.invoke({"n": 2}, thread_id="direct", backend=backend)
        direct = len(units)
        units.clear()
        record = await runner.submit({"n": 2}, thread_id="through")
        done = await runner.await_run(record.run_id, timeout=30)
        through = len(units)
    finally:
        await runner.aclose()
    assert done.status == "succeeded" and done.output["out"] == "did 2"
    assert through == direct + (0 if fold else 1), (direct, through)


async def test_a_runs_engine_run_id_is_its_record_id_in_every_segment(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    """The id a user holds (``record.run_id``) is the one a node sees as ``ctx.run_id`` and
    every streamed event carries, also after the run suspends and resumes."""
    SEEN_RUN_IDS.clear()
    runner = runner_for(who_am_i_graph())
    record = await runner.submit({"n": 1})
    waiting = await runner.await_run(record.run_id, timeout=30)
    assert waiting.waiting_for == "event"
    await runner.signal(record.run_id, {"type": "go"})
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded"
    assert [record.run_id] * 2 == SEEN_RUN_IDS  # both segments
    events = [e async for e in runner.events(record.run_id, follow=False)]
    assert [e.type for e in events].count("run_start") == 2  # both segments were streamed
    assert {e.run_id for e in events} == {record.run_id}


async def test_a_runner_never_started_runs_what_its_signal_or_approval_resumes(
    runner_for: Callable[..., AsyncRunner], make_backend: Callable[[], Backend]
) -> None:
    """A process that only answers runs (a webhook handler with a runner of its own, never
    ``start``-ed) signals or approves a suspended run: the runner starts itself as ``submit``
    and ``resume`` do, and ``await_run`` returns the finished run instead of waiting forever."""
    REFUNDS.clear()
    waiting_for_event = runner_for(who_am_i_graph())
    asked = await waiting_for_event.submit({"n": 1})
    assert (await waiting_for_event.await_run(asked.run_id, timeout=30)).waiting_for == "event"
    waiting_for_approval = runner_for(refund_agent())
    refund = await waiting_for_approval.submit({"query": "A-18"})
    assert (await waiting_for_approval.await_run(refund.run_id, timeout=30)).status == "suspended"
    await waiting_for_event.aclose()
    await waiting_for_approval.aclose()

    answering = runner_for(who_am_i_graph(), backend=make_backend())
    await answering.signal(asked.run_id, {"type": "go"})
    done = await answering.await_run(asked.run_id, timeout=10)
    assert done.status == "succeeded", done
    approving = runner_for(refund_agent(), backend=make_backend())
    await approving.approve(refund.run_id, {"call_1": True})
    done = await approving.await_run(refund.run_id, timeout=10)
    assert done.status == "succeeded" and REFUNDS == ["A-18"], done


async def test_a_closed_runner_refuses_a_signal_naming_the_fix(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    """A closed runner cannot run what a signal resumes: a clear error, before anything is
    stored, instead of an accepted event that nothing ever delivers."""
    runner = runner_for(who_am_i_graph())
    asked = await runner.submit({"n": 1})
    waiting = await runner.await_run(asked.run_id, timeout=30)
    await runner.aclose()
    with pytest.raises(RuntimeError, match="was closed, so it cannot run"):
        await runner.signal(asked.run_id, {"type": "go"})
    with pytest.raises(RuntimeError, match="was closed, so it cannot run"):
        await runner.approve(asked.run_id, {"call_1": True})
    assert (await runner.get(asked.run_id)).version == waiting.version  # nothing stored


async def test_an_idempotency_key_submits_once_unless_the_run_failed(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for(work_graph())
    first = await runner.submit({"n": 1}, idempotency_key="req-1")
    again = await runner.submit({"n": 1}, idempotency_key="req-1")
    assert again.run_id == first.run_id
    await runner.await_run(first.run_id, timeout=30)
    assert (await runner.submit({"n": 1}, idempotency_key="req-1")).run_id == first.run_id
    bad = await runner.submit({"n": -1}, idempotency_key="req-2")
    failed = await runner.await_run(bad.run_id, timeout=30)
    assert failed.status == "failed"
    assert failed.error is not None and failed.error["type"]
    retried = await runner.submit({"n": 2}, idempotency_key="req-2")
    assert retried.run_id != bad.run_id
    assert (await runner.await_run(retried.run_id, timeout=30)).status == "succeeded"


async def test_unknown_runs_and_bad_arguments_get_clear_errors(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for(work_graph())
    with pytest.raises(RunNotFoundError, match="no run 'nope'"):
        await runner.get("nope")
    with pytest.raises(ValueError, match="label"):
        await runner.submit({"n": 1}, labels={"tenant": 5})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="idempotency_key"):
        await runner.submit({"n": 1}, idempotency_key="")
    with pytest.raises(ValueError, match="concurrency"):
        AsyncRunner(work_graph(), backend=InMemoryBackend(), concurrency=0)


async def test_a_run_invoke_would_refuse_is_refused_when_submitted(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    """Input and thread ids are checked at submit, as invoke checks them, so a queued run
    cannot fail later for what was wrong with the request (and a schedule is checked once,
    not at every firing)."""
    runner = runner_for(work_graph())
    with pytest.raises(ValueError, match=r"^submit\(\) got .*'nofield' is not a field"):
        await runner.submit({"nofield": "x"})
    with pytest.raises(ValueError, match=r"'n'"):
        await runner.submit({"n": "not a number"})
    with pytest.raises(TypeError, match=r"^submit\(\) takes a dict.*e\.g\. submit\("):
        await runner.submit(5)
    with pytest.raises(ValueError, match="too long"):
        await runner.submit({"n": 1}, thread_id="t" * 300)
    with pytest.raises(ValueError, match="NUL"):
        await runner.submit({"n": 1}, thread_id="a\x00b")
    with pytest.raises(TypeError, match="must be a str"):
        await runner.submit({"n": 1}, thread_id=7)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dict"):
        await Scheduler(runner).every(1, 5)
    assert (await runner.list()).records == []  # nothing was stored


# -- approvals ----------------------------------------------------------------------------------


async def test_approve_takes_only_awaited_ids_and_resumes_the_run_exactly_once(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    REFUNDS.clear()
    runner = runner_for(refund_agent())
    record = await runner.submit({"query": "A-17"})
    waiting = await runner.await_run(record.run_id, timeout=30)
    assert waiting.status == "suspended"
    assert waiting.waiting_for == "approval"
    assert [i["id"] for i in waiting.interrupts] == ["call_1"]
    with pytest.raises(ValueError, match=r"does not wait on \['call_9'\]"):
        await runner.approve(record.run_id, {"call_1": True, "call_9": True})
    untouched = await runner.get(record.run_id)
    assert untouched.decisions == {} and untouched.version == waiting.version
    with pytest.raises(ValueError, match="approval decision"):
        await runner.approve(record.run_id, {"call_1": "maybe"})
    await runner.approve(record.run_id, {"call_1": True})
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded"
    assert done.output["output"] == "done: refunded A-17"
    assert REFUNDS == ["A-17"]
    with pytest.raises(RunConflictError, match="only a run waiting for approval"):
        await runner.approve(record.run_id, {"call_1": False})


async def test_an_expired_approval_is_rejected_when_next_read(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    REFUNDS.clear()
    runner = runner_for(refund_agent(), approval_timeout=0.2)
    record = await runner.submit({"query": "B-2"})
    await runner.await_run(record.run_id, timeout=30)
    await asyncio.sleep(0.3)
    await runner.get(record.run_id)  # reading it applies the timeout
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded"
    assert "approval timeout" in done.output["output"]
    assert REFUNDS == []


# -- timers, signals, cancel, timeouts ----------------------------------------------------------


async def test_a_durable_timer_wakes_itself(runner_for: Callable[..., AsyncRunner]) -> None:
    runner = runner_for(nap_graph())
    record = await runner.submit({"n": 3})  # sleeps 0.3 s
    first = await runner.await_run(record.run_id, timeout=30)
    assert first.status == "suspended" and first.waiting_for == "timer"
    assert first.wake_at is not None
    assert (await runner.health())["next_wake_at"] == pytest.approx(first.wake_at)
    for _ in range(1200):
        current = await runner.get(record.run_id)
        if current.status == "succeeded":
            break
        await asyncio.sleep(0.05)
    assert current.status == "succeeded" and current.output["out"] == "woke"
    assert current.attempts == 2


async def test_signal_delivers_an_event_once_into_a_waiting_run(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for(listen_graph())
    record = await runner.submit({"n": 1})
    waiting = await runner.await_run(record.run_id, timeout=30)
    assert waiting.waiting_for == "event"
    with pytest.raises(ValueError, match="only event_id, type and payload"):
        await runner.signal(record.run_id, {"type": "x", "role": "system"})
    with pytest.raises(ValueError, match="payload"):
        await runner.signal(record.run_id, {"type": "x", "payload": {"a": 1}})
    await runner.signal(record.run_id, {"event_id": "e1", "type": "paid", "payload": "42"})
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded"
    assert done.output["event"] == {"event_id": "e1", "type": "paid", "payload": "42"}
    with pytest.raises(RunConflictError, match="only a suspended run"):
        await runner.signal(record.run_id, {"event_id": "e2", "type": "paid"})


async def test_signals_wait_in_a_bounded_buffer_for_the_next_segment(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    REFUNDS.clear()
    runner = runner_for(refund_agent())
    record = await runner.submit({"query": "C-3"})
    await runner.await_run(record.run_id, timeout=30)
    await runner.signal(record.run_id, {"event_id": "n1", "type": "note", "payload": "vip"})
    with pytest.raises(RunConflictError, match="already delivered"):
        await runner.signal(record.run_id, {"event_id": "n1", "type": "note", "payload": "vip"})
    for n in range(63):
        await runner.signal(record.run_id, {"type": "note", "payload": str(n)})
    with pytest.raises(RunConflictError, match="64 undelivered events"):
        await runner.signal(record.run_id, {"type": "note", "payload": "one too many"})
    held = await runner.get(record.run_id)
    assert len(held.events) == 64 and held.status == "suspended"
    await runner.approve(record.run_id, {"call_1": True})
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded"
    assert done.events == ()
    texts = [m["content"] for m in done.output["messages"] if m["role"] == "user"]
    assert "[event note] vip" in texts


async def test_cancel_stops_a_running_run_and_is_not_a_failure(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for(hang_graph())
    record = await runner.submit({"n": 60})
    for _ in range(1200):
        if (await runner.get(record.run_id)).status == "running":
            break
        await asyncio.sleep(0.02)
    cancelled = await runner.cancel(record.run_id)
    assert cancelled.status == "cancelled"
    assert runner.in_flight == 0
    assert (await runner.get(record.run_id)).status == "cancelled"
    with pytest.raises(RunConflictError, match="already cancelled"):
        await runner.cancel(record.run_id)


async def test_run_timeout_fails_a_run_that_runs_too_long(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for(hang_graph(), run_timeout=0.2)
    record = await runner.submit({"n": 60})
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "failed"
    assert done.error == {
        "type": "RunTimeout",
        "message": "the run took longer than run_timeout=0.2s",
    }


async def test_run_timeout_bounds_the_whole_run_across_segments_and_a_restart(
    make_backend: Callable[[], Backend], runner_for: Callable[..., AsyncRunner]
) -> None:
    # Each segment works 0.8 s, under the 1.5 s limit; the run as a whole (2.4 s) is not.
    first = runner_for(laps_graph(), backend=make_backend(), run_timeout=1.5)
    record = await first.submit({"n": 8})
    paused = await first.await_run(record.run_id, timeout=30)
    assert paused.status == "suspended" and paused.active_seconds >= 0.8
    await first.aclose()  # restarted while the timer is pending: the count is in the record
    second = runner_for(laps_graph(), backend=make_backend(), run_timeout=1.5)
    await second.start()
    for _ in range(400):
        current = await second.get(record.run_id)
        if current.terminal:
            break
        await asyncio.sleep(0.05)
    assert current.status == "failed"
    assert current.error == {
        "type": "RunTimeout",
        "message": "the run took longer than run_timeout=1.5s",
    }
    assert current.active_seconds >= 1.5


async def test_run_timeout_does_not_count_time_suspended(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    # 0.3 s of work and 2 s asleep on durable timers: within a 1.5 s limit.
    runner = runner_for(laps_graph(), run_timeout=1.5)
    record = await runner.submit({"n": 1})
    for _ in range(600):
        current = await runner.get(record.run_id)
        if current.terminal:
            break
        await asyncio.sleep(0.05)
    assert current.status == "succeeded", current.error
    assert 0.3 <= current.active_seconds < (current.finished_at or 0) - (current.started_at or 0)


async def test_max_queued_refuses_new_work_but_not_resumes(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for(hang_graph(), concurrency=1, max_queued=2)
    first = await runner.submit({"n": 60})
    for _ in range(1200):  # the first holds the one slot once its task started
        if (await runner.get(first.run_id)).status == "running":
            break
        await asyncio.sleep(0.02)
    await runner.submit({"n": 60})
    await runner.submit({"n": 60})
    with pytest.raises(QueueFullError, match="max_queued=2") as caught:
        await runner.submit({"n": 60})
    assert caught.value.retry_after > 0
    health = await runner.health()
    assert health["waiting_for_slot"] == 2 and health["in_flight"] == 3


async def test_drain_refuses_new_work_and_waits_for_in_flight_runs(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for(work_graph())
    record = await runner.submit({"n": 5})
    assert await runner.drain(timeout=30)
    assert (await runner.get(record.run_id)).status == "succeeded"
    assert (await runner.health())["draining"]
    with pytest.raises(QueueFullError, match="draining"):
        await runner.submit({"n": 6})


class Stubborn(Node):
    """Swallows its cancellation and sleeps on until the test's ``release`` is set: user code
    that shutdown must not hang on."""

    class In(Schema):
        n: int

    class Out(Schema):
        out: str

    async def run(self, ctx: Context, inp: In) -> Out:
        STUBBORN["started"].set()
        while not STUBBORN["release"].is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                continue
        return self.Out(out="done at last")


STUBBORN: dict[str, asyncio.Event] = {}


async def test_aclose_returns_at_its_timeout_when_a_node_swallows_cancellation(
    runner_for: Callable[..., AsyncRunner], caplog: pytest.LogCaptureFixture
) -> None:
    STUBBORN.update(started=asyncio.Event(), release=asyncio.Event())
    runner = runner_for(one_node_graph(Stubborn, "stubborn"))
    record = await runner.submit({"n": 1})
    await asyncio.wait_for(STUBBORN["started"].wait(), 30)
    stuck = list(runner._tasks.values())
    try:
        await asyncio.wait_for(runner.aclose(timeout=0.3), 10)  # without the bound: forever
    finally:
        STUBBORN["release"].set()
        await asyncio.wait(stuck, timeout=30)
    assert f"tensorsketch-run-{record.run_id} did not stop within 0.3 s" in caplog.text
    with pytest.raises(ValueError, match="`timeout` must be a positive"):
        await runner.aclose(timeout=0)


# -- takeover -----------------------------------------------------------------------------------


def _dead_owner() -> str:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return f"{socket.gethostname()}:{child.pid}:dead"


async def test_resume_pending_takes_over_orphans_but_never_a_live_owners_run(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for(work_graph())
    store = run_store(runner.backend)
    now = time.time()
    await store.create(
        RunRecord(
            run_id="orphan",
            thread_id="t-orphan",
            input={"n": 3},
            owner=_dead_owner(),
            lease_expires_at=now + 600,
        )
    )
    await store.create(
        RunRecord(
            run_id="lapsed",
            thread_id="t-lapsed",
            input={"n": 4},
            status="running",
            owner="elsewhere:1:x",
            lease_expires_at=now - 1,
            started_at=now - 5,
            base_checkpoint="",
        )
    )
    await store.create(
        RunRecord(
            run_id="live",
            thread_id="t-live",
            input={"n": 5},
            owner="elsewhere:2:y",
            lease_expires_at=now + 600,
        )
    )
    taken = await runner.resume_pending()
    assert sorted(taken) == ["lapsed", "orphan"]
    for run_id, out in (("orphan", "did 3"), ("lapsed", "did 4")):
        done = await runner.await_run(run_id, timeout=30)
        assert done.status == "succeeded" and done.output["out"] == out
    assert (await runner.get("live")).status == "queued"
    assert (await runner.get("live")).owner == "elsewhere:2:y"


async def test_a_takeover_runs_the_input_of_a_run_whose_start_was_never_corrected(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    """A run's first ``running`` write guesses where its thread stands and a second write
    corrects a wrong guess; when that second write fails (a starved pool did it, in
    bench_double_texting on PostgreSQL) or its process dies in between, the record names a
    start the thread has moved past. The takeover must see that none of the thread is this
    run's and run its input, not "resume" a run that never began (it used to succeed with
    nothing of its own on the thread)."""
    runner = runner_for(work_graph())
    store = run_store(runner.backend)
    before = await runner.submit({"n": 1}, thread_id="t-stale")
    before = await runner.await_run(before.run_id, timeout=30)
    assert before.status == "succeeded"
    head, last = await runner.backend.thread_head("t-stale")
    now = time.time()
    await store.create(
        RunRecord(
            run_id="stale",
            thread_id="t-stale",
            input={"n": 2},
            status="running",
            owner="elsewhere:1:x",
            lease_expires_at=now - 1,
            started_at=now - 5,
            base_checkpoint="",  # the guess: the thread as it stood before the first run
            first_seq=0,
        )
    )
    assert await runner.resume_pending() == ["stale"]
    done = await runner.await_run("stale", timeout=30)
    assert done.status == "succeeded" and done.output["out"] == "did 2"
    # Where it really started, for a rollback and for its events.
    assert (done.base_checkpoint, done.first_seq) == (head, (last or 0) + 1)


async def test_a_restarted_runner_picks_up_a_pending_timer(
    make_backend: Callable[[], Backend], runner_for: Callable[..., AsyncRunner]
) -> None:
    first = runner_for(nap_graph(), backend=make_backend())
    record = await first.submit({"n": 5})
    assert (await first.await_run(record.run_id, timeout=30)).status == "suspended"
    await first.aclose()  # the process goes away with the timer pending
    second = runner_for(nap_graph(), backend=make_backend())
    await second.start()
    for _ in range(1200):
        current = await second.get(record.run_id)
        if current.status == "succeeded":
            break
        await asyncio.sleep(0.05)
    assert current.status == "succeeded"


# -- the scheduler ------------------------------------------------------------------------------


async def test_every_fires_repeatedly_and_survives_a_restart(
    make_backend: Callable[[], Backend], runner_for: Callable[..., AsyncRunner]
) -> None:
    runner = runner_for(work_graph(), backend=make_backend())
    handle = await Scheduler(runner).every(0.2, {"n": 1})
    again = await Scheduler(runner).every(0.2, {"n": 1})
    assert again.id == handle.id  # the same schedule, not a second one
    for _ in range(1200):
        page = await runner.list(labels={"schedule": handle.id}, status="succeeded")
        if len(page.records) >= 2:
            break
        await asyncio.sleep(0.05)
    assert len(page.records) >= 2
    await runner.aclose()
    restarted = runner_for(work_graph(), backend=make_backend())
    await restarted.start()
    before = len(page.records)
    for _ in range(1200):
        page = await restarted.list(labels={"schedule": handle.id}, limit=200)
        if len(page.records) >= before + 2:
            break
        await asyncio.sleep(0.05)
    assert len(page.records) >= before + 2
    await Scheduler(restarted).every(0.2, {"n": 1})  # same id
    await handle.__class__(handle.id, restarted).cancel()


async def test_at_fires_once_and_bad_schedules_are_refused(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for(work_graph())
    scheduler = Scheduler(runner)
    handle = await scheduler.at(time.time() + 0.2, {"n": 9})
    for _ in range(1200):
        page = await runner.list(labels={"schedule": handle.id}, status="succeeded")
        if page.records:
            break
        await asyncio.sleep(0.05)
    assert [r.output["out"] for r in page.records] == ["did 9"]
    schedule = await runner.store.get(handle.id)
    assert schedule is not None and schedule.status == "succeeded"
    with pytest.raises(ValueError, match="positive interval"):
        await scheduler.every(0, {"n": 1})
    with pytest.raises(ValueError, match="max_in_flight"):
        await scheduler.every(1, {"n": 1}, max_in_flight=0)
    with pytest.raises(TypeError, match="Unix timestamp"):
        await scheduler.at("tomorrow", {"n": 1})  # type: ignore[arg-type]


async def test_replay_follow_tails_a_run_from_another_handle(
    make_backend: Callable[[], Backend], runner_for: Callable[..., AsyncRunner]
) -> None:
    runner = runner_for(nap_graph(), backend=make_backend())
    record = await runner.submit({"n": 4})
    reader = make_backend()
    seen = [e async for e in nap_graph().replay(record.thread_id, reader, follow=True)]
    assert seen[-1].type == "interrupt"
    resumed = [
        e
        async for e in nap_graph().replay(
            record.thread_id, reader, since=seen[-1].seq + 1, follow=True
        )
    ]
    assert resumed[-1].type == "run_end"
    seqs = [e.seq for e in (*seen, *resumed)]
    assert seqs == sorted(set(seqs))


async def test_cancel_from_another_runner_stops_the_owner_at_its_next_renewal(
    make_backend: Callable[[], Backend], runner_for: Callable[..., AsyncRunner]
) -> None:
    owner = runner_for(hang_graph(), backend=make_backend(), lease_ttl=0.6)
    other = runner_for(hang_graph(), backend=make_backend())
    record = await owner.submit({"n": 60})
    for _ in range(1200):
        if (await owner.get(record.run_id)).status == "running":
            break
        await asyncio.sleep(0.02)
    assert owner.in_flight == 1
    cancelled = await other.cancel(record.run_id)  # not the process running it
    assert cancelled.status == "cancelled"
    for _ in range(1200):
        if owner.in_flight == 0:
            break
        await asyncio.sleep(0.05)
    assert owner.in_flight == 0  # the owner saw it at its next lease renewal and stopped
    assert (await owner.get(record.run_id)).status == "cancelled"


async def test_a_run_at_a_static_breakpoint_says_where_and_resume_continues_it(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for(breakpoint_graph())
    record = await runner.submit({"n": 7})
    first = await runner.await_run(record.run_id, timeout=30)
    assert first.status == "suspended" and first.waiting_for == "breakpoint"
    assert [(i["kind"], i["node"], i["value"]) for i in first.interrupts] == [
        ("breakpoint", "Draft", {"when": "after", "nodes": ["Draft"]})
    ]
    assert first.output["out"] == "draft 7"  # Review has not run
    assert (await runner.health())["suspended"].get("breakpoint", 0) >= 1
    with pytest.raises(RunConflictError, match="only a run waiting for approval"):
        await runner.approve(record.run_id, {first.interrupts[0]["id"]: True})
    await runner.resume(record.run_id)
    second = await runner.await_run(record.run_id, timeout=30)
    assert second.status == "suspended" and second.waiting_for == "breakpoint"
    assert second.interrupts[0]["value"] == {"when": "before", "nodes": ["Publish"]}
    assert second.interrupts[0]["node"] == "Publish"
    assert second.output["out"] == "draft 7 reviewed"
    assert second.decisions == {}  # the passed breakpoint's mark is spent
    await runner.resume(record.run_id)
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded"
    assert done.output["out"] == "draft 7 reviewed published"
    assert done.attempts == 3
    with pytest.raises(RunConflictError, match="only a run stopped at a breakpoint"):
        await runner.resume(record.run_id)


async def test_a_run_stopped_after_its_last_node_resume_ends_it(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    # interrupt_after on the node that ends the graph stops the run there too (as in
    # LangGraph); resume() then ends it without running the node or its effect again.
    graph = (
        Graph(Io, name="work-stop")
        .add(Work)
        .edge(START, "Work")
        .edge("Work", END)
        .compile(interrupt_after=["Work"])
    )
    runner = runner_for(graph)
    record = await runner.submit({"n": 4})
    first = await runner.await_run(record.run_id, timeout=30)
    assert first.status == "suspended" and first.waiting_for == "breakpoint"
    assert [(i["node"], i["value"]) for i in first.interrupts] == [
        ("Work", {"when": "after", "nodes": ["Work"]})
    ]
    assert first.output["out"] == "did 4"
    await runner.resume(record.run_id)
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded" and done.output["out"] == "did 4"
    assert done.attempts == 2 and CALLS[record.thread_id] == 1
    events = [e.type async for e in graph.replay(record.thread_id, runner.backend)]
    assert events.count("node_start") == 1 and events.count("run_end") == 1


async def test_resume_refuses_a_run_waiting_for_something_else(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    REFUNDS.clear()
    runner = runner_for(refund_agent())
    record = await runner.submit({"query": "C-3"})
    waiting = await runner.await_run(record.run_id, timeout=30)
    with pytest.raises(RunConflictError, match=r"waiting for approval.*approve\(\) it instead"):
        await runner.resume(record.run_id)
    assert (await runner.get(record.run_id)).version == waiting.version
    assert REFUNDS == []


# -- durability modes ---------------------------------------------------------------------------


async def test_submit_durability_is_kept_by_the_record_for_every_segment(
    runner_for: Callable[..., AsyncRunner], make_backend: Callable[[], Backend]
) -> None:
    """submit(durability=...) on the two stores core ships; the PostgreSQL and Redis run in
    tensorsketch-backends' test_run_policies.py (same check)."""
    first = runner_for(durability_graph())
    second = runner_for(durability_graph(), backend=make_backend())
    await check_run_durability(first, second)


async def test_submit_refuses_an_unknown_durability(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for(durability_graph())
    with pytest.raises(ValueError, match=r"submit\(durability=...\) must be one of 'sync'"):
        await runner.submit({"n": 1}, durability="eventually")  # type: ignore[arg-type]
    assert (await runner.list()).records == []
