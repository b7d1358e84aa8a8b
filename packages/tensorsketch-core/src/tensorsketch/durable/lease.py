"""The thread lease: one writer per thread, renewed while its run goes on.

A run takes the lease when it opens the thread, a heartbeat renews it every third of its
length, and the last checkpoint gives it back in the same unit of work. Where the backend
fences writes, a run whose lease lapsed can write nothing more; :meth:`Lease.ensure` also
stops it from calling out to the world before the next write would tell it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time

from tensorsketch.durable.guard import store_guard
from tensorsketch.durable.ids import new_owner_id
from tensorsketch.errors import ThreadBusyError
from tensorsketch.runtime.backends.base import Backend, lease_lost

__all__ = ["HEARTBEAT_STOP_WAIT", "LEASE_TTL", "Lease"]

#: Lease length in seconds where the backend names none.
LEASE_TTL = 30.0
#: Seconds a run waits for its lease heartbeat to stop (a renewal is one short round trip).
HEARTBEAT_STOP_WAIT = 2.0


#: The context a heartbeat's timer runs in: nothing of the run's. A cancelled timer stays in
#: the event loop's heap until it would have fired (a third of the TTL), holding its context;
#: one that held the run's context kept the run's objects (its runner's rider and records)
#: alive that long.
_BARE = contextvars.Context()


def _drain_task(task: asyncio.Task[None]) -> None:
    """Retrieve a finished background task's outcome so asyncio does not log it."""
    if not task.cancelled():
        task.exception()


class Lease:
    """One run's hold on one thread: taken, renewed in the background, given back.

    Its length is the backend's ``lease_ttl`` (tests shorten it), else :data:`LEASE_TTL`.
    """

    __slots__ = (
        "_context",
        "_heartbeat",
        "_stopping",
        "_timer",
        "_until",
        "backend",
        "held",
        "lost",
        "owner",
        "thread_id",
        "ttl",
    )

    def __init__(self, backend: Backend, thread_id: str) -> None:
        self.backend = backend
        self.thread_id = thread_id
        self.owner = new_owner_id()
        self.ttl = float(getattr(backend, "lease_ttl", LEASE_TTL))
        #: Whether this run holds the lease now (taken and not yet given back).
        self.held = False
        #: Whether the lease lapsed or was taken over: nothing more of this run is written.
        self.lost = False
        #: The renewal in flight, if any (a task only while one is: most runs see none).
        self._heartbeat: asyncio.Task[None] | None = None
        #: The next renewal's timer, and the context it runs in (the holder's, as a task
        #: made by :meth:`hold` would have; dropped when the heartbeat stops).
        self._timer: asyncio.TimerHandle | None = None
        self._context: contextvars.Context | None = None
        self._stopping = False
        self._until = 0.0

    def busy_error(self) -> ThreadBusyError:
        """The error for a thread another writer holds."""
        msg = (
            f"thread {self.thread_id!r} is being run by another process right now, or its last "
            "runner stopped without giving it back (a crash, `kill -9`) and may be gone; only "
            "one writer may run a thread at a time. Retry once the lease lapses: it expires "
            f"{self.ttl:g}s after its owner stops renewing it (the backend's `lease_ttl`; a "
            "shorter one takes over a crashed runner's thread sooner), or use another thread_id."
        )
        return ThreadBusyError(msg)

    def hold(self) -> None:
        """The store granted the lease: count it held and start renewing it."""
        self.held = True
        self._until = time.monotonic() + self.ttl
        self._stopping = False
        self._context = contextvars.copy_context()
        if self._timer is not None:  # held again without a stop: one heartbeat, not two
            self._timer.cancel()
        self._schedule()

    def _schedule(self) -> None:
        """Arm the next renewal, a third of the TTL from now: a timer, not a sleeping task,
        so a run shorter than that allocates no task and leaves nothing of its own behind."""
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self.ttl / 3, self._tick, context=_BARE)

    def _tick(self) -> None:
        self._timer = None
        if self._stopping or self._context is None:
            return
        loop = asyncio.get_running_loop()
        self._heartbeat = loop.create_task(self._renew(), context=self._context)

    def ensure(self) -> None:
        """Raise :class:`LeaseLostError` if the lease is known lost, or has run out by this
        process's clock (the event loop was blocked past it), before an effect starts.

        Best effort — the fencing of every write is the guarantee; this keeps a runner that
        wakes from a stall from calling out to the world at all.
        """
        if self.held and (self.lost or time.monotonic() > self._until):
            self.lost = True
            raise lease_lost(self.thread_id)

    async def acquire(self) -> None:
        """Take the thread's lease (or raise :class:`ThreadBusyError`) and keep it renewed."""
        async with store_guard(self.backend, "taking the thread lease"):
            ok = await self.backend.acquire_lease(self.thread_id, self.owner, self.ttl)
        if not ok:
            raise self.busy_error()
        self.hold()

    def mark_lost(self) -> None:
        """A fenced write was refused: the lease is someone else's, never ours to release."""
        self.lost = True
        self.held = False

    async def _renew(self) -> None:
        """One renewal, then the next one armed. ``_stopping`` ends the heartbeat even when
        the driver ate the cancellation (redis-py's ``wait_for`` can swallow it;
        psycopg_pool can turn it into ``PoolTimeout``)."""
        asked = time.monotonic()
        try:
            ok = await self.backend.renew_lease(self.thread_id, self.owner, self.ttl)
        except Exception:
            pass  # a transient store error: the next checkpoint write will tell
        else:
            if not ok and not self._stopping:  # lapsed or taken over: never win it back
                self.lost = True
                return
            self._until = asked + self.ttl
        if not self._stopping:
            self._schedule()

    async def stop_heartbeat(self) -> None:
        """Stop renewing: cancel the heartbeat and wait for it, but never for long.

        A renewal stuck on a dead connection may not return at all; the run must not wait on
        it (the flag stops the loop once the call ends, and a renewal that lands after the
        release only keeps the lease for one more TTL, as a crash would). The caller's own
        cancellation is never swallowed here.
        """
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        self._context = None
        self._stopping = True
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is None or heartbeat.done():
            if heartbeat is not None:
                _drain_task(heartbeat)
            return
        heartbeat.cancel()
        await asyncio.wait([heartbeat], timeout=HEARTBEAT_STOP_WAIT)
        if not heartbeat.done():
            heartbeat.add_done_callback(_drain_task)
        else:
            _drain_task(heartbeat)

    async def release(self) -> None:
        """Stop renewing the lease and give it back (if the last checkpoint did not)."""
        await self.stop_heartbeat()
        if self.held and not self.lost:
            self.held = False
            with contextlib.suppress(Exception):
                await self.backend.release_lease(self.thread_id, self.owner)
