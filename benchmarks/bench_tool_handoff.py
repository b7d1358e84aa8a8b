"""Where the time of a sync tool's hand-off to a worker thread goes, part by part.

``bench_tools.py`` measures what a plain ``def`` tool costs over ``async def``; this splits
that toll up. First the parts that run on one thread, each timed alone (best of rounds):
creating the future, copying the context, running in it, the queue, and the wake-up of the
loop (``call_soon_threadsafe``: a byte written to the loop's self-pipe, read back by the loop;
or the loop's eventfd :class:`~tensorsketch.runtime.inbox.Inbox`). Then the hand-off itself,
two threads, per call: wall time, the CPU each thread spent (``getrusage(RUSAGE_THREAD)``,
user + system) and context switches (voluntary + involuntary, both threads) — for a bare lock
ping-pong between two threads (the floor: two wake-ups under the GIL), ``call_blocking`` as it
was (workers under the default scheduling policy, results back by ``call_soon_threadsafe``),
with each change alone and both (workers under ``SCHED_BATCH``,
:data:`tensorsketch.runtime.workers.BATCH_POLICY`; the inbox), ``asyncio.to_thread``, and no
hand-off at all; once back to back and once with a pause between calls, as model calls space
out an agent's tool calls.

Context switches and CPU are counted by the kernel and move less with the machine's load than
wall time does; rounds alternate between the variants. Run
``python benchmarks/bench_tool_handoff.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import _thread
import argparse
import asyncio
import contextvars
import gc
import os
import queue
import resource
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any


def _add(a: int, b: int) -> int:
    return a + b


def _thread_usage() -> tuple[float, float]:
    """This thread's CPU seconds (user + system) and context switches so far."""
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_utime + r.ru_stime, float(r.ru_nvcsw + r.ru_nivcsw)


# --- parts on one thread ---------------------------------------------------------------


async def parts(n: int, rounds: int) -> dict[str, float]:
    """Microseconds per operation, best of ``rounds``."""
    loop = asyncio.get_running_loop()
    ctx = contextvars.copy_context()
    q: queue.SimpleQueue[Any] = queue.SimpleQueue()
    item: tuple[Any, ...] = (ctx, _add, (1, 2), {}, None, None)

    def create_future() -> None:
        loop.create_future()

    def copy_context() -> None:
        contextvars.copy_context()

    def call_plain() -> None:
        _add(1, 2)

    def call_in_context() -> None:
        ctx.run(_add, 1, 2)

    def queue_put_get() -> None:
        q.put(item)
        q.get_nowait()

    sync_parts: dict[str, Callable[[], None]] = {
        "loop.create_future()": create_future,
        "contextvars.copy_context()": copy_context,
        "fn(1, 2) plainly": call_plain,
        "ctx.run(fn, 1, 2)": call_in_context,
        "SimpleQueue put + get, no waiter": queue_put_get,
    }

    async def settle_soon() -> None:
        future = loop.create_future()
        loop.call_soon(future.set_result, 1)
        await future

    async def settle_threadsafe() -> None:
        future = loop.create_future()
        loop.call_soon_threadsafe(future.set_result, 1)
        await future

    from tensorsketch.runtime.inbox import inbox_for

    inbox = inbox_for(loop)

    async def settle_by_inbox() -> None:
        future = loop.create_future()
        assert inbox is not None
        inbox.put(future, 1, None)
        await future

    async_parts: dict[str, Callable[[], Awaitable[None]]] = {
        "await a future settled by call_soon": settle_soon,
        "await a future settled by call_soon_threadsafe": settle_threadsafe,
    }
    if inbox is not None:
        async_parts["await a future settled through the loop's eventfd inbox"] = settle_by_inbox
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, fn in sync_parts.items():
            start = time.perf_counter()
            for _ in range(n):
                fn()
            t = (time.perf_counter() - start) / n * 1e6
            best[name] = min(best.get(name, t), t)
        for name, afn in async_parts.items():
            start = time.perf_counter()
            for _ in range(n):
                await afn()
            t = (time.perf_counter() - start) / n * 1e6
            best[name] = min(best.get(name, t), t)
    soon = best["await a future settled by call_soon"]
    best["the self-pipe's write + reads (threadsafe - call_soon)"] = (
        best["await a future settled by call_soon_threadsafe"] - soon
    )
    if inbox is not None:
        best["the eventfd's write + read (inbox - call_soon)"] = (
            best["await a future settled through the loop's eventfd inbox"] - soon
        )
    return best


# --- the hand-off, two threads -----------------------------------------------------------


class Sample:
    """One round of one variant: per call, wall µs (mean and 90th percentile), CPU µs per
    thread, switches."""

    def __init__(
        self,
        wall: float,
        caller_cpu: float,
        worker_cpu: float,
        switches: float,
        p90: float | None = None,
    ):
        self.wall, self.caller_cpu, self.worker_cpu, self.switches = (
            wall,
            caller_cpu,
            worker_cpu,
            switches,
        )
        self.p90 = wall if p90 is None else p90


def ping_pong(n: int) -> Sample:
    """Two plain threads handing a turn back and forth through two locks (no asyncio)."""
    go, back = _thread.allocate_lock(), _thread.allocate_lock()
    go.acquire()
    back.acquire()
    worker_usage: list[tuple[float, float]] = []

    def worker() -> None:
        before = _thread_usage()
        for _ in range(n):
            go.acquire()
            back.release()
        after = _thread_usage()
        worker_usage.append((after[0] - before[0], after[1] - before[1]))

    thread = threading.Thread(target=worker)
    thread.start()
    before = _thread_usage()
    start = time.perf_counter()
    for _ in range(n):
        go.release()
        back.acquire()
    wall = time.perf_counter() - start
    after = _thread_usage()
    thread.join()
    worker_cpu, worker_switches = worker_usage[0]
    return Sample(
        wall / n * 1e6,
        (after[0] - before[0]) / n * 1e6,
        worker_cpu / n * 1e6,
        (after[1] - before[1] + worker_switches) / n,
    )


Submit = Callable[..., Awaitable[Any]]


async def hand_off(submit: Submit, n: int, pause: float, *, on_a_worker: bool = True) -> Sample:
    """``n`` calls of a trivial function through ``submit``; the worker's usage is read on
    the worker itself (the variants below serve calls made one after another on one thread).
    With a ``pause``, the loop sleeps that long after each call: only the calls are timed,
    and the caller's CPU and switches for as many bare sleeps, measured next, are taken off."""
    for _ in range(max(10, n // 20)):
        await submit(_add, 1, 2)
    gc.collect()
    worker_usage = submit if on_a_worker else _no_worker
    worker_before = await worker_usage(_thread_usage)
    before = _thread_usage()
    walls: list[float] = []
    for _ in range(n):
        start = time.perf_counter()
        await submit(_add, 1, 2)
        walls.append(time.perf_counter() - start)
        if pause:
            await asyncio.sleep(pause)
    wall = sum(walls)
    walls.sort()
    after = _thread_usage()
    worker_after = await worker_usage(_thread_usage)
    caller_cpu, switches = after[0] - before[0], after[1] - before[1]
    if pause:
        sleeps_before = _thread_usage()
        for _ in range(n):
            await asyncio.sleep(pause)
        sleeps_after = _thread_usage()
        caller_cpu -= sleeps_after[0] - sleeps_before[0]
        switches -= sleeps_after[1] - sleeps_before[1]
    switches += worker_after[1] - worker_before[1]
    return Sample(
        wall / n * 1e6,
        caller_cpu / n * 1e6,
        (worker_after[0] - worker_before[0]) / n * 1e6,
        switches / n,
        walls[int(0.9 * (n - 1))] * 1e6,
    )


async def _no_worker(fn: Callable[..., Any], /, *args: Any) -> tuple[float, float]:
    return 0.0, 0.0


def _pools() -> dict[bool, Any]:
    """A fresh pool whose workers take ``SCHED_BATCH`` in a burst of calls (the default),
    and one whose workers never do."""
    from tensorsketch.runtime import workers

    return {True: workers._Pool(), False: workers._Pool(batch=False)}


async def hand_offs(n: int, rounds: int, pause: float) -> dict[str, list[Sample]]:
    from tensorsketch.runtime.inbox import inbox_for

    pools = _pools()

    def through(batch: bool, inbox: bool) -> Submit:
        """``call_blocking`` with the worker's policy and the way back chosen."""
        pool = pools[batch]

        def submit(fn: Callable[..., Any], /, *args: Any) -> Awaitable[Any]:
            loop = asyncio.get_running_loop()
            future = loop.create_future()
            back = inbox_for(loop) if inbox else None
            pool.submit((contextvars.copy_context(), fn, args, {}, back, future))
            return future

        return submit

    async def inline(fn: Callable[..., Any], /, *args: Any) -> Any:
        return fn(*args)  # what the call costs an `async def` tool: no hand-off

    if hasattr(os, "SCHED_BATCH"):  # back to back, only the burst pool's worker takes it
        for batch in (True, False):
            seen = {await through(batch, False)(os.sched_getscheduler, 0) for _ in range(20)}
            if (os.SCHED_BATCH in seen) != batch:
                msg = f"a worker meant to run {'under' if batch else 'without'} SCHED_BATCH"
                raise AssertionError(msg + " did not: the bench is broken")

    variants: dict[str, Submit] = {
        "call_blocking before: default policy, call_soon_threadsafe": through(False, False),
        "SCHED_BATCH in bursts, call_soon_threadsafe": through(True, False),
        "default policy, the loop's eventfd inbox": through(False, True),
        "call_blocking after: SCHED_BATCH in bursts, eventfd inbox": through(True, True),
        "asyncio.to_thread (reference; its threads' CPU not read)": asyncio.to_thread,
        "no hand-off (inline, as an async def tool)": inline,
    }
    samples: dict[str, list[Sample]] = {}
    for _ in range(rounds):
        if not pause:
            samples.setdefault("bare lock ping-pong, two threads (no asyncio)", []).append(
                await asyncio.to_thread(ping_pong, n)
            )
        for name, submit in variants.items():
            if name.startswith("asyncio") and pause:
                continue  # to_thread spreads calls over its threads: no one worker to read
            on_a_worker = submit is not inline and submit is not asyncio.to_thread
            samples.setdefault(name, []).append(
                await hand_off(submit, n, pause, on_a_worker=on_a_worker)
            )
    return samples


def _table(samples: dict[str, list[Sample]]) -> list[str]:
    med = statistics.median
    lines = [
        "| per call | wall (median / best of the rounds' means) | wall p90 (median) "
        "| CPU, caller thread | CPU, worker thread | CPU, both | context switches |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, rows in samples.items():
        caller = med(r.caller_cpu for r in rows)
        worker = med(r.worker_cpu for r in rows)
        lines.append(
            f"| {name} | {med(r.wall for r in rows):.1f} / {min(r.wall for r in rows):.1f} µs "
            f"| {med(r.p90 for r in rows):.1f} µs | {caller:.1f} µs | {worker:.1f} µs "
            f"| {caller + worker:.1f} µs "
            f"| {med(r.switches for r in rows):.2f} |"
        )
    return lines


async def measure(quick: bool) -> str:
    n = 2_000 if quick else 20_000
    rounds = 2 if quick else 7
    out = [f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", ""]
    out += ["Parts on one thread (best of rounds):", ""]
    out += ["| part | µs |", "|---|---:|"]
    out += [f"| {name} | {t:.2f} |" for name, t in (await parts(n * 5, rounds)).items()]
    out += [
        "",
        f"The hand-off, {n:,} calls a round, {rounds} alternating rounds, back to back:",
        "",
    ]
    out += _table(await hand_offs(n, rounds, pause=0.0))
    pause = 0.001
    paused_n = max(200, n // 20)
    out += ["", f"The same, {paused_n:,} calls a round with {pause * 1e3:g} ms between calls:", ""]
    out += _table(await hand_offs(paused_n, rounds, pause=pause))
    out += ["", f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("TS_BENCH_QUICK") == "1"
    print(
        f"sync tool hand-off — Python {sys.version.split()[0]}, {os.cpu_count()} cores, "
        f"{os.uname().release}"
    )
    print()
    print(asyncio.run(measure(quick)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
