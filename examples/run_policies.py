"""Run policies: double-texting, a cron schedule, and thread retention, offline on SQLite.

A chat thread gets a second message while the first is still being answered: with
``multitask_strategy="interrupt"`` the first run stops at its next superstep barrier
(keeping what it did) and the new one runs on top; with ``"rollback"`` the first run's work
is discarded; with ``"enqueue"`` (the default) the inputs run one after the other; with
``"reject"`` the second is refused. Then a cron schedule is stored in a time zone, and a
retention sweep prunes the thread to its newest checkpoints.

Run: python examples/run_policies.py
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import tempfile
from pathlib import Path

from tensorsketch.runs import AsyncRunner, Retention, RunConflictError, Scheduler
from tensorsketch.runs.retention import sweep
from tensorsketch.runtime.backends import SqliteBackend
from tensorsketch.testing.runs import multitask_graph, ticks_of

WORKDIR = Path(os.environ.get("TS_EXAMPLE_TMP") or tempfile.mkdtemp(prefix="ts-policies-"))


async def started(runner: AsyncRunner, run_id: str) -> None:
    """Wait until the run has checkpointed its first superstep."""
    for _ in range(500):
        record = await runner.get(run_id)
        state = await runner.graph.aget_state(record.thread_id, runner.backend)
        if record.status == "running" and ticks_of(state):
            return
        await asyncio.sleep(0.01)


async def main() -> None:
    backend = SqliteBackend(WORKDIR / "runs.db")
    runner = AsyncRunner(multitask_graph(), backend=backend, poll_interval=0.05)
    try:
        for strategy in ("enqueue", "interrupt", "rollback", "reject"):
            thread = f"chat-{strategy}"
            first = await runner.submit({"tag": "a"}, thread_id=thread)
            await started(runner, first.run_id)
            try:
                second = await runner.submit(
                    {"tag": "b"}, thread_id=thread, multitask_strategy=strategy
                )
            except RunConflictError:
                done = await runner.await_run(first.run_id, timeout=30)
                print(f"{strategy:>9}: second input refused; ticks {ticks_of(done.output)}")
                continue
            done = await runner.await_run(second.run_id, timeout=30)
            old = await runner.get(first.run_id)
            print(f"{strategy:>9}: first run {old.status}; ticks {ticks_of(done.output)}")

        handle = await Scheduler(runner).cron(
            "30 9 * * mon-fri", {"tag": "c"}, timezone="Europe/Berlin"
        )
        schedule = await runner.store.get(handle.id)
        assert schedule is not None and schedule.wake_at is not None
        when = dt.datetime.fromtimestamp(schedule.wake_at, dt.UTC)
        print(f"cron '30 9 * * mon-fri' in Europe/Berlin next fires at {when:%Y-%m-%d %H:%M} UTC")
        await handle.cancel()

        report = await sweep(backend, Retention(keep_checkpoints=2))
        kept = len(await backend.list_checkpoints("chat-enqueue"))
        print(f"retention pruned {len(report.pruned)} thread(s); chat-enqueue keeps {kept}")
    finally:
        await runner.aclose()
        await backend.aclose()


if __name__ == "__main__":
    asyncio.run(main())
