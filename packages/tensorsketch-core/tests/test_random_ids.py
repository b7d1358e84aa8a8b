"""Run ids, thread ids and lease owners come from a pool of OS randomness (one syscall per
256 ids): unique, 32 hex digits, and never repeated across a fork."""

from __future__ import annotations

import os
import re
import sys

import pytest

from tensorsketch.durable import ids
from tensorsketch.durable.ids import new_owner_id, random_hex


def test_random_hex_is_32_hex_digits_and_unique_across_blocks() -> None:
    # Several pool blocks' worth, so the refill path is crossed more than once.
    drawn = [random_hex() for _ in range(3 * ids._POOL_BYTES // 16 + 5)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", h) for h in drawn)
    assert len(set(drawn)) == len(drawn)
    assert re.fullmatch(r"[0-9a-f]{32}", new_owner_id())


def test_random_hex_draws_the_os_once_per_block(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = os.urandom

    def counted(n: int) -> bytes:
        calls.append(n)
        return real(n)

    monkeypatch.setattr(ids._pool, "block", b"")
    monkeypatch.setattr(ids.os, "urandom", counted)
    for _ in range(ids._POOL_BYTES // 16 + 1):
        random_hex()
    assert calls == [ids._POOL_BYTES, ids._POOL_BYTES]


@pytest.mark.skipif(sys.platform == "win32" or not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_never_repeats_its_parents_ids() -> None:
    random_hex()  # the parent holds a partly used block
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids go to the parent
        os.close(read)
        os.write(write, "".join(random_hex() for _ in range(4)).encode())
        os._exit(0)
    os.close(write)
    child = b""
    while chunk := os.read(read, 4096):
        child += chunk
    os.close(read)
    os.waitpid(pid, 0)
    theirs = {child[i : i + 32].decode() for i in range(0, len(child), 32)}
    ours = {random_hex() for _ in range(4)}
    assert len(theirs) == 4
    assert not theirs & ours
