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

On Linux the workers run under the ``SCHED_BATCH`` scheduling policy (:data:`BATCH_POLICY`):
the same CPU share as any thread, but a worker woken for a call does not preempt the thread
that woke it. That thread is the loop's, still holding the GIL: a worker that preempted it
could only go back to sleep waiting for the GIL and be woken again once the loop sleeps —
three or more extra context switches per call (about a third of the hand-off's CPU on a
loaded 2-core machine; ``benchmarks/bench_tool_handoff.py``). Threads and processes a
function starts on a worker inherit the policy.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from tensorsketch.runtime.inbox import Inbox, inbox_for, settle

__all__ = ["BATCH_POLICY", "IDLE_SECONDS", "MAX_WORKERS", "call_blocking"]

#: A worker left without work this long ends (a later call starts a new one).
IDLE_SECONDS = 60.0
#: The most calls running at once, like ``asyncio``'s default executor.
MAX_WORKERS = min(32, (os.cpu_count() or 1) + 4)
#: Whether a worker starting from now on takes ``SCHED_BATCH`` (where the OS has it).
BATCH_POLICY = True

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

    def __init__(self) -> None:
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
        if BATCH_POLICY:
            _yield_on_wake_up()
        calls, idle = self.calls, self.idle
        outcome: _Outcome | None = None
        while True:
            try:
                item = calls.get_nowait()
            except queue.Empty:
                # Waiting before the result is delivered: the caller's next call, made as
                # soon as its loop wakes, must find this worker, not start another one.
                idle.append(None)
                _deliver(outcome)
                outcome = None
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
            else:
                _deliver(outcome)
            outcome = _run(item)
            del item  # waiting, a worker holds nothing of the call it served (its loop, args)


def _yield_on_wake_up() -> None:
    """Put the calling thread under ``SCHED_BATCH``: woken, it waits for its waker to sleep
    or use up its time slice rather than preempting it."""
    batch = getattr(os, "SCHED_BATCH", None)
    if batch is None:  # not Linux: the default policy
        return
    try:
        os.sched_setscheduler(0, batch, os.sched_param(0))
    except OSError:  # refused (a seccomp profile, say): run as before
        pass


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
