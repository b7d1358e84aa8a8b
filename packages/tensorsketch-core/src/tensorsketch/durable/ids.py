"""Ids the durable layer mints: checkpoint ids, lease owners and run ids."""

from __future__ import annotations

import os
import threading

# The runtime's fast, fork-safe 128-bit random ids (the ones spans use).
from tensorsketch.observability.tracing import new_trace_id

__all__ = ["new_checkpoint_id", "new_owner_id", "random_hex"]

#: Bytes drawn from the OS at a time: one ``getrandom`` per 256 ids instead of one each
#: (``uuid.uuid4`` makes a syscall and a ``UUID`` object for every id).
_POOL_BYTES = 4096


class _RandomPool:
    """Operating-system randomness, drawn in blocks and handed out 16 bytes at a time.

    The bytes are the same quality as ``uuid.uuid4``'s (``os.urandom``); a forked child
    drops the block it inherited, so parent and child never hand out the same id."""

    __slots__ = ("block", "lock", "taken")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.block = b""
        self.taken = 0

    def hex16(self) -> str:
        with self.lock:
            at = self.taken
            if at + 16 > len(self.block):
                self.block, at = os.urandom(_POOL_BYTES), 0
            self.taken = at + 16
            return self.block[at : at + 16].hex()

    def drop(self) -> None:
        self.block, self.taken = b"", 0
        self.lock = threading.Lock()  # a fork may copy it held by another thread


_pool = _RandomPool()
os.register_at_fork(after_in_child=_pool.drop)


def random_hex() -> str:
    """128 random bits from the OS as 32 hex digits: ``uuid.uuid4().hex``'s length and
    unpredictability (its fixed version bits aside), at a fraction of the cost."""
    return _pool.hex16()


def new_checkpoint_id() -> str:
    """A fresh checkpoint id (random: ids from forked processes never collide)."""
    return new_trace_id()


def new_owner_id() -> str:
    """A fresh lease owner: one per run, so two runs of a thread never share a lease."""
    return random_hex()
