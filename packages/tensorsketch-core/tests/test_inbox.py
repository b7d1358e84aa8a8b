"""A worker hands results back through the loop's inbox (an eventfd the loop watches): one per
loop, closed with it, and ``call_soon_threadsafe`` where a loop cannot have one."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import weakref
from typing import Any

import pytest

from tensorsketch.runtime import inbox as inboxes
from tensorsketch.runtime import workers

linux_only = pytest.mark.skipif(not hasattr(os, "eventfd"), reason="eventfd is Linux's")


def _is_eventfd(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventfd]"
    except OSError:
        return False


@linux_only
async def test_a_loop_has_one_inbox_and_results_come_back_through_it() -> None:
    loop = asyncio.get_running_loop()
    inbox = inboxes.inbox_for(loop)
    assert isinstance(inbox, inboxes.Inbox)
    assert inboxes.inbox_for(loop) is inbox
    assert _is_eventfd(inbox.fd)
    put = inbox.put
    seen: list[Any] = []

    def counting_put(future: asyncio.Future[Any], result: Any, error: Any) -> None:
        seen.append(result)
        put(future, result, error)

    inbox.put = counting_put  # type: ignore[method-assign]
    try:
        assert await asyncio.gather(*(workers.call_blocking(pow, 2, i) for i in range(5))) == [
            1,
            2,
            4,
            8,
            16,
        ]
    finally:
        del inbox.put
    assert sorted(seen) == [1, 2, 4, 8, 16]


@linux_only
def test_the_inbox_closes_with_its_loop_even_with_a_result_still_on_its_way() -> None:
    release = threading.Event()
    finished = threading.Event()
    held: list[weakref.ref[inboxes.Inbox]] = []
    fds: list[int] = []

    def late() -> str:
        release.wait(10)
        return "nobody waits for this"

    async def main() -> None:
        inbox = inboxes.inbox_for(asyncio.get_running_loop())
        assert inbox is not None
        held.append(weakref.ref(inbox))
        fds.append(inbox.fd)
        assert await workers.call_blocking(str, 1) == "1"
        workers.call_blocking(late)  # still running when the loop closes

    asyncio.run(main())
    gc.collect()
    assert held[0]() is not None  # the worker still holds it, to deliver to
    assert _is_eventfd(fds[0])
    release.set()

    async def after() -> None:  # the worker delivered into the closed loop's inbox
        assert await workers.call_blocking(finished.set) is None

    asyncio.run(after())
    gc.collect()
    assert finished.is_set()
    assert held[0]() is None  # gone with its loop, and its descriptor closed
    assert not _is_eventfd(fds[0])  # (no eventfd was made since that could reuse it)


class _NoReaders(asyncio.SelectorEventLoop):
    def add_reader(self, fd: Any, callback: Any, *args: Any) -> None:  # type: ignore[override]
        raise NotImplementedError


def test_a_loop_that_cannot_watch_a_descriptor_gets_results_through_call_soon_threadsafe() -> None:
    loop = _NoReaders()
    try:

        async def main() -> list[int]:
            assert inboxes.inbox_for(asyncio.get_running_loop()) is None
            return list(await asyncio.gather(*(workers.call_blocking(abs, -i) for i in range(3))))

        assert loop.run_until_complete(main()) == [0, 1, 2]
    finally:
        loop.close()
