"""Thread retention swept by the runner: idle threads deleted whole (checkpoints, events, run
records), others pruned to their newest checkpoints, threads with a run in flight or
suspended left alone. In-memory and SQLite (PostgreSQL and Redis: tensorsketch-backends'
tests/test_run_policies.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tensorsketch.runs import AsyncRunner, Retention, RunRecord
from tensorsketch.runs.retention import sweep
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.testing.runs import multitask_graph


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "memory":
        return InMemoryBackend()
    return SqliteBackend(tmp_path / "runs.db", lease_ttl=2.0)


async def _ran(runner: AsyncRunner, thread_id: str, tag: str = "a") -> RunRecord:
    record = await runner.submit({"tag": tag}, thread_id=thread_id)
    return await runner.await_run(record.run_id, timeout=30)


async def _suspended_record(runner: AsyncRunner, thread_id: str) -> None:
    """A run of ``thread_id`` waiting for an approval (as an agent's would)."""
    await runner.store.create(
        RunRecord(
            run_id=f"run_waiting_{thread_id}",
            thread_id=thread_id,
            graph=runner.graph.name,
            status="suspended",
            waiting_for="approval",
            created_at=time.time(),
        )
    )


async def test_sweep_deletes_idle_threads_whole_and_prunes_the_others(backend: Backend) -> None:
    runner = AsyncRunner(multitask_graph(), backend=backend, poll_interval=0.05)
    try:
        await _ran(runner, "old")
        await _ran(runner, "waiting")
        await _suspended_record(runner, "waiting")
        history = await backend.list_checkpoints("old")
        assert len(history) > 2
        later = time.time() + 3 * 86_400
        report = await sweep(backend, Retention(idle_days=2), at=later)
        assert report.deleted == ["old"]
        assert await backend.list_checkpoints("old") == []
        assert await backend.read_events("old") == []
        assert (await runner.list(thread_id="old")).records == []  # run records too
        assert len(await backend.list_checkpoints("waiting")) > 2  # a suspended run: kept
        await _ran(runner, "fresh")
        report = await sweep(backend, Retention(idle_days=2, keep_checkpoints=2))
        assert report.deleted == [] and set(report.pruned) == {"fresh"}
        assert len(await backend.list_checkpoints("fresh")) == 2
        state = await runner.graph.aget_state("fresh", backend)
        assert state is not None and state.ticks == ["a0", "a1", "a2"]  # pruning keeps it
        again = await _ran(runner, "fresh", "b")  # and the thread goes on
        assert again.output["ticks"][-1] == "b2"
    finally:
        await runner.aclose()


async def test_the_runner_sweeps_in_the_background(backend: Backend) -> None:
    policy = Retention(idle_days=0.2 / 86_400, sweep_every=0.1)  # idle after 0.2 s
    runner = AsyncRunner(multitask_graph(), backend=backend, poll_interval=0.05, retention=policy)
    try:
        done = await _ran(runner, "short-lived")
        assert done.status == "succeeded"
        for _ in range(100):
            if not await backend.list_checkpoints("short-lived"):
                break
            await asyncio.sleep(0.05)
        assert await backend.list_checkpoints("short-lived") == []
        assert (await runner.list(thread_id="short-lived")).records == []
    finally:
        await runner.aclose()


def test_a_retention_policy_that_keeps_everything_or_is_malformed_is_refused() -> None:
    with pytest.raises(ValueError, match="needs idle_days=, keep_checkpoints= or both"):
        Retention()
    with pytest.raises(ValueError, match=r"keep_checkpoints=...\) must be an int >= 1, got 0"):
        Retention(keep_checkpoints=0)
    with pytest.raises(ValueError, match=r"idle_days=...\) must be a positive number"):
        Retention(idle_days=-1)
    with pytest.raises(TypeError, match="`retention` must be a Retention"):
        AsyncRunner(multitask_graph(), backend=InMemoryBackend(), retention=30)  # type: ignore[arg-type]
