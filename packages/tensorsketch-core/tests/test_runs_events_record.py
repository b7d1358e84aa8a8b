"""``AsyncRunner.events(record=)``: a caller that has just read the run's record (a server's
404 check) hands it over, and the events start from it without a second read."""

from __future__ import annotations

from typing import Any

from tensorsketch.agents import create_agent
from tensorsketch.fake import FakeProvider
from tensorsketch.runs import AsyncRunner, RunRecord
from tensorsketch.runtime.backends.memory import InMemoryBackend


async def _events(runner: AsyncRunner, run_id: str, **options: Any) -> tuple[list[str], int]:
    """The run's stored events (types) and how many times the store's record was read."""
    store = runner.store
    real, reads = store.get, []

    async def counted(wanted: str) -> RunRecord | None:
        reads.append(wanted)
        return await real(wanted)

    store.get = counted  # type: ignore[method-assign]
    try:
        types = [e.type async for e in runner.events(run_id, follow=False, **options)]
    finally:
        store.get = real  # type: ignore[method-assign]
    return types, len(reads)


async def test_events_start_from_the_record_handed_over_without_reading_it() -> None:
    async with AsyncRunner(create_agent(FakeProvider()), backend=InMemoryBackend()) as runner:
        record = await runner.submit({"query": "hi"})
        done = await runner.await_run(record.run_id, timeout=30)
        read, reads_without = await _events(runner, done.run_id)
        handed, reads_with = await _events(runner, done.run_id, record=done)
    assert handed == read and handed[0] == "run_start" and handed[-1] == "run_end"
    assert (reads_without, reads_with) == (1, 0)


async def test_another_runs_record_is_not_taken_for_this_ones() -> None:
    async with AsyncRunner(create_agent(FakeProvider()), backend=InMemoryBackend()) as runner:
        first = await runner.submit({"query": "one"}, thread_id="a")
        second = await runner.submit({"query": "two"}, thread_id="b")
        first = await runner.await_run(first.run_id, timeout=30)
        await runner.await_run(second.run_id, timeout=30)
        handed, reads = await _events(runner, second.run_id, record=first)
        own, _ = await _events(runner, second.run_id)
    assert handed == own and reads == 1
