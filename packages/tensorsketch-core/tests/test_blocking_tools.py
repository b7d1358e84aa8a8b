"""Where a plain ``def`` tool runs: a warm worker thread (the loop keeps going while it blocks),
or inline on the loop with ``@tool(blocking=False)``; errors, cancellation and context
variables cross the hand-off as they did through ``asyncio.to_thread``."""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
import time
from typing import Any

import pytest

from tensorsketch import FakeProvider, Tool, create_agent, tool
from tensorsketch.messages import ToolCall, assistant
from tensorsketch.runtime import workers
from tensorsketch.tools import current_tool_call

WAIT = 10.0  # a bound on every wait below, so a broken hand-off fails instead of hanging


async def test_a_blocking_tool_leaves_the_loop_free() -> None:
    # The tool blocks its thread until a coroutine on the loop lets it go: were it running on
    # the loop, that coroutine could never run and the wait would time out.
    released = threading.Event()

    @tool
    def wait_for_release() -> bool:
        """Block until released."""
        return released.wait(WAIT)

    async def release() -> None:
        await asyncio.sleep(0)
        released.set()

    outcome, _ = await asyncio.gather(wait_for_release.run({}), release())
    assert outcome is True
    assert wait_for_release.blocking is True


async def test_blocking_false_runs_inline_on_the_loop_thread() -> None:
    loop_thread = threading.get_ident()

    @tool(blocking=False)
    def where(a: int) -> tuple[int, int]:
        """Which thread, inline."""
        return threading.get_ident(), a

    @tool
    def where_threaded() -> int:
        """Which thread, on a worker."""
        return threading.get_ident()

    raw = Tool.from_schema("raw", "Raw.", {}, lambda args: threading.get_ident(), blocking=False)
    assert await where.run({"a": 3}) == (loop_thread, 3)
    assert await raw.run({}) == loop_thread
    assert await where_threaded.run({}) != loop_thread
    assert where.blocking is False
    assert repr(where) == "Tool('where', blocking=False)"


def test_blocking_takes_a_bool() -> None:
    def f() -> None:
        """Nothing."""

    with pytest.raises(TypeError, match=r"tool 'f': `blocking=` takes True or False, got 'no'"):
        Tool.from_function(f, blocking="no")  # type: ignore[arg-type]


async def test_errors_raised_on_the_worker_reach_the_caller() -> None:
    class Boom(Exception):
        pass

    @tool
    def explode() -> None:
        """Fail."""
        raise Boom("from the worker")

    @tool
    def stop() -> None:
        """Raise StopIteration, which a future cannot carry."""
        raise StopIteration

    with pytest.raises(Boom, match="from the worker"):
        await explode.run({})
    with pytest.raises(RuntimeError, match="raised StopIteration"):
        await stop.run({})

    @tool(blocking=False)
    def explode_inline() -> None:
        """Fail inline."""
        raise Boom("inline")

    with pytest.raises(Boom, match="inline"):
        await explode_inline.run({})


async def test_cancelling_the_await_drops_the_result_and_the_workers_carry_on() -> None:
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    @tool
    def slow() -> str:
        """Block until released."""
        started.set()
        release.wait(WAIT)
        finished.set()
        return "late"

    task = asyncio.ensure_future(slow.run({}))
    assert await asyncio.to_thread(started.wait, WAIT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    assert await asyncio.to_thread(finished.wait, WAIT)

    @tool
    def after(n: int) -> int:
        """Still served."""
        return n + 1

    assert await after.run({"n": 1}) == 2


async def test_the_callers_context_variables_are_visible() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("from the caller")

    @tool
    def read() -> str:
        """Read the variable."""
        return var.get()

    assert await read.run({}) == "from the caller"


async def test_the_tool_call_is_visible_to_a_sync_tool_in_an_agent() -> None:
    seen: list[Any] = []

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        call = current_tool_call()
        seen.append((call.id if call else None, threading.get_ident()))
        return q.upper()

    provider = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="c1", name="lookup", args={"q": "tea"})]),
            assistant("done"),
        ]
    )
    out = await create_agent(provider, tools=[lookup]).invoke({"query": "go"})
    assert out.output == "done"
    assert seen == [("c1", seen[0][1])]
    assert seen[0][1] != threading.get_ident()


async def test_calls_run_side_by_side_up_to_the_cap() -> None:
    # Each call waits for all the others at a barrier: it passes only if they run at once.
    parties = min(4, workers.MAX_WORKERS)
    barrier = threading.Barrier(parties, timeout=WAIT)

    @tool
    def meet(i: int) -> int:
        """Wait for the others."""
        barrier.wait()
        return i

    assert await asyncio.gather(*(meet.run({"i": i}) for i in range(parties))) == list(
        range(parties)
    )


async def test_calls_beyond_the_cap_wait_in_the_backlog_and_all_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(workers, "_pool", workers._Pool())
    monkeypatch.setattr(workers, "MAX_WORKERS", 2)
    lock = threading.Lock()
    running = peak = 0
    release = threading.Event()

    def work(i: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        release.wait(WAIT)
        with lock:
            running -= 1
        return i * i

    futures = [workers.call_blocking(work, i) for i in range(10)]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*futures) == [i * i for i in range(10)]
    assert peak == 2
    assert workers._pool.count == 2
    # The workers stay warm: the next calls reuse them instead of starting threads.
    assert await asyncio.gather(*(workers.call_blocking(work, i) for i in range(3))) == [0, 1, 4]
    assert workers._pool.count == 2


async def test_calls_made_one_after_another_reuse_one_warm_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The worker is idle again before the caller hears back, so the next call finds it.
    monkeypatch.setattr(workers, "_pool", workers._Pool())
    threads = {await workers.call_blocking(threading.get_ident) for _ in range(50)}
    assert len(threads) == 1
    assert workers._pool.count == 1


async def test_calls_start_in_the_order_they_were_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "_pool", workers._Pool())
    monkeypatch.setattr(workers, "MAX_WORKERS", 1)
    started: list[int] = []
    assert await asyncio.gather(*(workers.call_blocking(started.append, i) for i in range(20))) == (
        [None] * 20
    )
    assert started == list(range(20))


async def _ticks_while_a_sleeping_tool_runs(blocking: bool, patience: float) -> int:
    """Run an agent whose sync tool sleeps (``time.sleep``, in short naps) until a coroutine
    beside it has ticked three times, or ``patience`` seconds passed; the ticks it saw
    while it ran."""
    ticks = 0
    done = False

    def nap() -> int:
        start, deadline = ticks, time.monotonic() + patience
        while ticks - start < 3 and time.monotonic() < deadline:
            time.sleep(0.005)  # blocks its thread, as a driver call would
        return ticks - start

    sleepy = Tool.from_function(nap, name="nap", description="Nap.", blocking=blocking)
    provider = FakeProvider(
        [assistant(tool_calls=[ToolCall(id="c1", name="nap", args={})]), assistant("done")]
    )

    async def ticker() -> None:
        nonlocal ticks
        while not done:
            await asyncio.sleep(0.001)
            ticks += 1

    async def run() -> str:
        nonlocal done
        try:
            out = await create_agent(provider, tools=[sleepy]).invoke({"query": "go"})
        finally:
            done = True
        return str(next(m.text for m in out.messages if m.role == "tool"))

    seen, _ = await asyncio.gather(run(), ticker())
    return int(seen)


async def test_the_loop_keeps_ticking_while_a_sync_tool_sleeps_in_an_agent() -> None:
    # The tool returns as soon as the ticker got three ticks in: it can only if the loop
    # kept running while the tool blocked its worker thread.
    assert await _ticks_while_a_sleeping_tool_runs(blocking=True, patience=WAIT) >= 3


async def test_an_inline_sync_tool_that_sleeps_does_stall_the_loop() -> None:
    # The same tool made blocking=False holds the loop for its whole nap: the check above
    # would see that (which is why blocking=False is for functions that return at once).
    assert await _ticks_while_a_sleeping_tool_runs(blocking=False, patience=0.1) == 0


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux's")
async def test_a_worker_in_a_burst_of_calls_runs_under_sched_batch_and_leaves_it_after_a_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Woken for a call in a burst, a worker must not preempt the loop's thread (it holds the
    # GIL); woken after a pause it takes the default policy back. The burst is set by the
    # bound, not by timing: every wake-up is in a burst with an hour, none with zero.
    loop_policy = os.sched_getscheduler(0)
    monkeypatch.setattr(workers, "_pool", workers._Pool())
    monkeypatch.setattr(workers, "BURST_SECONDS", 3600.0)

    async def policies(n: int) -> list[int]:
        return [await workers.call_blocking(os.sched_getscheduler, 0) for _ in range(n)]

    # The first call finds the new worker awake (no wake-up to judge), the next ones woke it.
    assert await policies(3) == [os.SCHED_OTHER, os.SCHED_BATCH, os.SCHED_BATCH]
    monkeypatch.setattr(workers, "BURST_SECONDS", 0.0)
    assert await policies(2) == [os.SCHED_OTHER, os.SCHED_OTHER]
    assert os.sched_getscheduler(0) == loop_policy
    assert workers._pool.count == 1


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux's")
async def test_batch_policy_false_keeps_workers_under_the_default_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(workers, "_pool", workers._Pool())
    monkeypatch.setattr(workers, "BURST_SECONDS", 3600.0)
    monkeypatch.setattr(workers, "BATCH_POLICY", False)
    seen = [await workers.call_blocking(os.sched_getscheduler, 0) for _ in range(3)]
    assert seen == [os.SCHED_OTHER] * 3


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux's")
def test_a_worker_keeps_a_policy_the_application_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    # Workers start from the loop's thread and inherit its policy: one the application chose
    # is never swapped for the default, whether calls come in a burst or not.
    monkeypatch.setattr(workers, "_pool", workers._Pool())
    seen: list[int] = []

    def loop_thread() -> None:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))  # as `chrt --batch` would

        async def calls() -> None:
            for burst in (3600.0, 3600.0, 0.0, 0.0):  # in a burst, then after pauses
                monkeypatch.setattr(workers, "BURST_SECONDS", burst)
                seen.append(await workers.call_blocking(os.sched_getscheduler, 0))

        asyncio.run(calls())

    thread = threading.Thread(target=loop_thread)
    thread.start()
    thread.join(WAIT)
    assert seen == [os.SCHED_BATCH] * 4
