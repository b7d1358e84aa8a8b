"""Private event loops: how the sync helpers (``get_state``, ``get_history`` ...) run a
coroutine from plain code, and how a backend knows it may block while they do.

A sync helper's loop exists for that one call and nothing else runs on it, so nothing waits
while its thread blocks: a backend that normally hands blocking driver calls to a worker
thread (to keep a shared loop responsive) can run them on the calling thread instead, and
skip the two thread wake-ups of the hand-off. :func:`on_private_loop` tells it so.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["on_private_loop", "run_on_private_loop", "run_sync"]

T = TypeVar("T")

_PRIVATE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "tensorsketch_private_loop", default=False
)


def on_private_loop() -> bool:
    """Whether the running code is inside :func:`run_on_private_loop` (blocking is harmless)."""
    return _PRIVATE.get()


def run_on_private_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a new event loop of this thread, then close it.

    What ``asyncio.run`` does, minus what a store call does not need: no SIGINT handler is
    swapped in and out (a Ctrl-C interrupts the call like any blocking call) and no context
    is copied, and the value is not kept as the task's result (on CPython 3.11
    ``asyncio.run`` formats the repr of its main task, result included, which for a large
    state costs more than reading it). Like ``asyncio.run``, it cancels and awaits every
    task still pending when the call ends (a backend may close its pool from one, and an
    interrupted call cleans up), then finishes async generators and the default executor.
    Call it only where no loop is running.
    """
    box: dict[str, Any] = {}

    async def main() -> None:
        _PRIVATE.set(True)  # this task's context only (and tasks it creates)
        box["value"] = await coro

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        try:
            _cancel_pending(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
    value: T = box["value"]
    return value


def _cancel_pending(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the loop's unfinished tasks and wait for them, reporting any that failed
    otherwise to the loop's exception handler (as ``asyncio.run`` does)."""
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    if not pending:
        return
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    for task in pending:
        if not task.cancelled() and task.exception() is not None:
            loop.call_exception_handler(
                {
                    "message": "unhandled exception in a task left running by a sync call",
                    "exception": task.exception(),
                    "task": task,
                }
            )


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, even inside a running event loop.

    The coroutine gets a private loop (:func:`run_on_private_loop`): this thread's, or, when
    a loop is already running here, a new thread's. Either way nothing else waits on that
    loop, so a threaded SQL backend runs the call's statements on the calling thread.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run_on_private_loop(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = run_on_private_loop(coro)
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=target, name="tensorsketch-sync-read")
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value
