"""``run_on_private_loop``: the loop the sync helpers (``get_state`` ...) run on, and the flag
that lets a threaded backend skip its worker thread there (the backend side is in
test_backends_sqlite)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tensorsketch.runtime.loops import on_private_loop, run_on_private_loop


def test_returns_the_value_and_flags_only_its_own_calls() -> None:
    seen: list[bool] = []

    async def read() -> dict[str, int]:
        seen.append(on_private_loop())
        inner = asyncio.get_running_loop().create_task(asyncio.sleep(0, on_private_loop()))
        seen.append(await inner)  # tasks it creates inherit the flag
        return {"n": 1}

    assert run_on_private_loop(read()) == {"n": 1}
    assert seen == [True, True]
    assert not on_private_loop()

    async def elsewhere() -> bool:
        return on_private_loop()

    assert asyncio.run(elsewhere()) is False  # an ordinary loop is not private


def test_an_error_propagates_and_the_loop_is_closed() -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def fail() -> None:
        loops.append(asyncio.get_running_loop())
        raise LookupError("no such thread")

    with pytest.raises(LookupError, match="no such thread"):
        run_on_private_loop(fail())
    assert loops[0].is_closed()
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()  # nothing left running on this thread


def test_open_async_generators_and_the_executor_are_shut_down() -> None:
    finalized: list[str] = []
    kept: list[AsyncIterator[int]] = []  # still referenced: only the shutdown closes it

    async def rows() -> AsyncIterator[int]:
        try:
            yield 1
            yield 2
        finally:
            finalized.append("rows")

    async def read() -> int:
        gen = rows()
        kept.append(gen)
        first = await gen.__anext__()  # left open, as a caller that stops early leaves it
        in_thread = await asyncio.get_running_loop().run_in_executor(None, lambda: 41)
        return first + in_thread

    assert run_on_private_loop(read()) == 42
    assert finalized == ["rows"]


def test_an_interrupted_call_is_cancelled_and_awaited_before_the_loop_closes() -> None:
    """A Ctrl-C arrives as KeyboardInterrupt out of the loop; the call's own cleanup still
    runs (here the interrupt is raised by a callback, as the signal would raise it)."""
    cleaned: list[str] = []

    def interrupt() -> None:
        raise KeyboardInterrupt

    async def slow_read() -> None:
        asyncio.get_running_loop().call_soon(interrupt)
        try:
            await asyncio.sleep(30)
        finally:
            cleaned.append("released")

    with pytest.raises(KeyboardInterrupt):
        run_on_private_loop(slow_read())
    assert cleaned == ["released"]


def test_tasks_left_running_are_cancelled_and_awaited_before_the_loop_closes() -> None:
    """As under ``asyncio.run``: a backend's pool closes itself from such a task."""
    closed: list[str] = []

    async def read() -> int:
        async def close_with_loop() -> None:
            try:
                await asyncio.get_running_loop().create_future()  # until cancelled
            finally:
                await asyncio.sleep(0)  # the cleanup may still await
                closed.append("pool")

        asyncio.get_running_loop().create_task(close_with_loop())
        await asyncio.sleep(0)
        return 1

    assert run_on_private_loop(read()) == 1
    assert closed == ["pool"]
