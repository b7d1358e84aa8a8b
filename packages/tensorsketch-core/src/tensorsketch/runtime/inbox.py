"""Results handed back to an event loop from other threads, with one wake-up each.

``loop.call_soon_threadsafe`` wakes a loop by writing a byte to its self-pipe; the loop then
reads the pipe until it is empty (a second read that fails, raised and caught) and runs a
handle created for the call. An :class:`Inbox` is an ``eventfd`` the loop watches as a reader:
a thread appends ``(future, result, error)`` and adds one to the counter; the loop reads the
counter once and settles every future waiting in the inbox. Measured on a 2-core VM, that is
about a fifth less CPU per hand-off than ``call_soon_threadsafe``
(``benchmarks/bench_tool_handoff.py``).

:func:`inbox_for` gives the running loop's inbox, made on first use; ``None`` where there is
no ``eventfd`` (not Linux) or the loop cannot watch a file descriptor (a proactor loop on
Windows): callers then use ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import collections
import os
import threading
import weakref
from typing import Any

__all__ = ["Inbox", "inbox_for", "settle"]


def settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """Give ``future`` its result or error, unless its awaiter gave up on it (cancelled)."""
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class Inbox:
    """Futures of one loop waiting to be settled, and the ``eventfd`` that wakes the loop.

    The loop's reader callback holds the inbox, so it lives while the loop watches it (and
    while a thread holds it to deliver); once the loop closes, the inbox goes with it and
    its descriptor is closed — never before the last thread holding it is done writing.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.waiting: collections.deque[tuple[Any, Any, BaseException | None]] = collections.deque()
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        try:
            loop.add_reader(self.fd, self.take)
        except BaseException:
            os.close(self.fd)
            raise
        weakref.finalize(self, os.close, self.fd)

    def put(self, future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
        """From any thread: settle ``future`` on its loop soon."""
        self.waiting.append((future, result, error))  # before the wake-up, so it is seen
        os.eventfd_write(self.fd, 1)

    def take(self) -> None:
        """On the loop: reset the counter, then settle everything waiting (a put between
        the two leaves the counter set: at worst one wake-up with nothing left to take)."""
        try:
            os.eventfd_read(self.fd)
        except BlockingIOError:
            pass
        waiting = self.waiting
        while waiting:
            settle(*waiting.popleft())


#: Each loop's inbox, held weakly both ways (the loop's reader keeps it alive); ``None``
#: for a loop that cannot have one.
_inboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.ref[Inbox] | None] = (
    weakref.WeakKeyDictionary()
)
_making = threading.Lock()


def inbox_for(loop: asyncio.AbstractEventLoop) -> Inbox | None:
    """The inbox of ``loop`` (the running loop of the calling thread), made on first use."""
    known = _inboxes.get(loop, False)
    if known is None:
        return None
    if isinstance(known, weakref.ref):
        inbox = known()
        if inbox is not None:
            return inbox
    with _making:  # two loops on two threads may make theirs at once
        try:
            inbox = Inbox(loop)
        except (AttributeError, NotImplementedError, OSError):  # no eventfd / add_reader
            _inboxes[loop] = None
            return None
        _inboxes[loop] = weakref.ref(inbox)
    return inbox


def _reset_after_fork() -> None:
    _inboxes.clear()  # a forked child's loops are not the parent's


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
