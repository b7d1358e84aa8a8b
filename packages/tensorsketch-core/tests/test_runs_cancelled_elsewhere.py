"""A run cancelled before it starts, by another process sharing the store (the task API's
cancel on another server), is a normal end: its runner says so at INFO, not as a warning.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from tensorsketch.runs import AsyncRunner
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.testing.runs import multitask_graph


async def test_a_run_cancelled_elsewhere_before_it_starts_logs_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "runs.db"
    runner = AsyncRunner(multitask_graph(pause=0.2), backend=SqliteBackend(path), concurrency=1)
    elsewhere = AsyncRunner(multitask_graph(), backend=SqliteBackend(path))
    caplog.set_level(logging.INFO, logger="tensorsketch.runs")
    try:
        first = await runner.submit({"tag": "a"}, thread_id="busy")  # holds the one slot
        waiting = [await runner.submit({"tag": "b"}, thread_id=f"t{n}") for n in range(3)]
        for record in waiting:
            assert (await runner.get(record.run_id)).status == "queued"
            await elsewhere.cancel(record.run_id)
        await runner.await_run(first.run_id, timeout=30)
        for _ in range(500):  # each queued run reaches its start in turn, and finds it is over
            logged = " ".join(r.getMessage() for r in caplog.records)
            if all(record.run_id in logged for record in waiting):
                break
            await asyncio.sleep(0.02)
    finally:
        await runner.aclose()
        await elsewhere.aclose()
    for record in waiting:
        assert (await elsewhere.get(record.run_id)).status == "cancelled"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == []
    said = [r.getMessage() for r in caplog.records if r.name == "tensorsketch.runs"]
    assert sum("was cancelled" in line for line in said) == len(waiting), said
