"""Warm worker threads for blocking calls: where a plain ``def`` tool runs.

``asyncio.to_thread`` pays for generality on every call — an executor work item, a
``concurrent.futures`` future chained to an asyncio one, a semaphore and a lock — about twice
the bare cost of waking a thread and waking the loop back. A sync tool runs at most a few
times per model call, so that toll is most of what separates it from an ``async def`` tool.

:func:`call_blocking` puts the call on a queue a waiting worker takes it from, and the
worker hands the result back through the loop's :class:`~tensorsketch.runtime.inbox.Inbox`
(one ``eventfd`` write; ``call_soon_threadsafe`` where there is no inbox). Workers are kept warm
(they retire after :data:`IDLE_SECONDS` without work), at most :data:`MAX_WORKERS` run at
once (the default executor's cap); a call made while all of them are busy waits for the
first to finish. Like ``to_thread``, the caller's context variables are visible to
the call, and cancelling the await does not stop a call already running (no thread can be
interrupted): its result is dropped.

On Linux a worker that serves calls in a burst — woken within :data:`BURST_SECONDS` of
finishing the last one — waits for the next under the ``SCHED_BATCH`` scheduling policy
(:data:`BATCH_POLICY`): the same CPU share as any thread, but woken for a call it does not
preempt the thread that woke it. That thread is the loop's, still holding the GIL: a worker
that preempted it could only go back to sleep waiting for the GIL and be woken again once the
loop sleeps — three or more extra context switches per call, about a third of the hand-off's
CPU on a loaded 2-core machine (``benchmarks/bench_tool_handoff.py``). Calls spaced further
apart, as an agent's tool calls are by its model calls, are served under the default policy:
woken after a longer sleep on a busy machine, a ``SCHED_BATCH`` thread also waits for other
processes' time slices, which measured a worse tail (p90 0.2-2.1 ms against 0.13-0.22 ms
with calls 1 ms apart). Threads and processes a function starts on a worker in a burst inherit
the policy. A worker started under another policy than the default (the application run with
``chrt``, say) keeps it.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from tensorsketch.runtime.inbox import Inbox, inbox_for, settle

__all__ = ["BATCH_POLICY", "BURST_SECONDS", "IDLE_SECONDS", "MAX_WORKERS", "call_blocking"]

#: A worker left without work this long ends (a later call starts a new one).
IDLE_SECONDS = 60.0
#: The most calls running at once, like ``asyncio``'s default executor.
MAX_WORKERS = min(32, (os.cpu_count() or 1) + 4)
#: Whether a worker in a burst of calls waits for the next one under ``SCHED_BATCH`` (where
#: the OS has it).
BATCH_POLICY = True
#: A worker woken sooner than this after its last call ended is in a burst of calls.
BURST_SECONDS = 0.0005

#: One call: (context, function, args, kwargs, the loop's inbox or None, future).
_Item = tuple[
    contextvars.Context, Callable[..., Any], tuple[Any, ...], dict[str, Any], Inbox | None, Any
]


class _Pool:
    """Workers taking calls from one FIFO queue, so calls start in the order they were made
    (as with an executor); ``idle`` holds one token per worker waiting for a call.

    ``list.append``/``pop`` are atomic, so a call claims a waiting worker without a lock; the
    lock guards only the worker count, touched when a worker starts or retires.
    """

    def __init__(self, *, batch: bool = True) -> None:
        self.batch = batch  # whether its workers may take SCHED_BATCH in a burst
        self.calls: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self.idle: list[None] = []
        self.count = 0
        self.lock = threading.Lock()

    def submit(self, item: _Item) -> None:
        self.calls.put(item)
        try:
            self.idle.pop()  # a waiting worker takes it
        except IndexError:
            with self.lock:
                start = self.count < MAX_WORKERS
                if start:
                    self.count += 1
            if start:
                worker = threading.Thread(
                    target=self.serve, name="tensorsketch-blocking", daemon=True
                )
                worker.start()
            # else every worker is busy: the first to finish takes it

    def serve(self) -> None:
        calls, idle = self.calls, self.idle
        outcome: _Outcome | None = None
        batch = False  # whether this worker is under SCHED_BATCH now
        # A worker inherits its starter's policy: one the application chose (chrt, say) stays.
        may_batch = self.batch and _under_the_default_policy()
        while True:
            try:
                item = calls.get_nowait()
            except queue.Empty:
                # Waiting before the result is delivered: the caller's next call, made as
                # soon as its loop wakes, must find this worker, not start another one.
                idle.append(None)
                _deliver(outcome)
                outcome = None
                waiting_since = time.monotonic()
                try:
                    item = calls.get(timeout=IDLE_SECONDS)
                except queue.Empty:
                    try:
                        idle.pop()
                    except IndexError:
                        continue  # a call claimed this worker just now: it is queued
                    with self.lock:
                        if calls.empty():
                            self.count -= 1
                            return
                    continue  # queued while this worker retired: serve it
                in_burst = may_batch and time.monotonic() - waiting_since < BURST_SECONDS
                if in_burst != batch:
                    batch = _batch(in_burst)
            else:
                _deliver(outcome)
            outcome = _run(item)
            del item  # waiting, a worker holds nothing of the call it served (its loop, args)


_SCHED_BATCH: int | None = getattr(os, "SCHED_BATCH", None)  # Linux's
_batch_refused = False


def _under_the_default_policy() -> bool:
    if _SCHED_BATCH is None:
        return False
    try:
        return os.sched_getscheduler(0) == os.SCHED_OTHER
    except OSError:
        return False


def _batch(on: bool) -> bool:
    """Put the calling thread under ``SCHED_BATCH`` (``on``) or the default policy; whether
    it is under ``SCHED_BATCH`` now."""
    global _batch_refused
    if _SCHED_BATCH is None or _batch_refused or (on and not BATCH_POLICY):
        return False
    try:
        os.sched_setscheduler(0, _SCHED_BATCH if on else os.SCHED_OTHER, os.sched_param(0))
    except OSError:  # refused (a seccomp profile, say): the default policy, as before
        _batch_refused = True
        return False
    return on


#: What a call came to: where to hand it back, its future, its result or the error it raised.
_Outcome = tuple[Inbox | None, Any, Any, BaseException | None]


def _run(item: _Item) -> _Outcome:
    ctx, fn, args, kwargs, inbox, future = item
    try:
        return inbox, future, ctx.run(fn, *args, **kwargs), None
    except StopIteration as exc:  # cannot be set on a future (asyncio refuses it)
        error = RuntimeError(f"{fn!r} raised StopIteration")
        error.__cause__ = exc
        return inbox, future, None, error
    except BaseException as exc:  # delivered to the awaiting caller
        return inbox, future, None, exc


def _deliver(outcome: _Outcome | None) -> None:
    if outcome is None:
        return
    inbox, future, result, error = outcome
    if inbox is not None:
        inbox.put(future, result, error)
        return
    try:
        future.get_loop().call_soon_threadsafe(settle, future, result, error)
    except RuntimeError:  # the caller's loop has closed: nobody is waiting
        pass


_pool = _Pool()


def _reset_after_fork() -> None:
    global _pool  # a forked child has none of the parent's threads
    _pool = _Pool()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def call_blocking(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
    """Run ``fn(*args, **kwargs)`` on a worker thread; await the future for its result.

    Must be called from a running event loop (the future belongs to it).
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    _pool.submit((contextvars.copy_context(), fn, args, kwargs, inbox_for(loop), future))
    return future
