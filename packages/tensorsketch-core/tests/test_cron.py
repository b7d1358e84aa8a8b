"""Cron schedules: the five-field parser in a time zone (DST gaps and repeats included),
and ``Scheduler.cron`` fired once per tick by several runners sharing a store, with its run
history. In-memory and SQLite stores."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tensorsketch.runs import AsyncRunner, RunRecord, Scheduler
from tensorsketch.runs.cron import CronExpression
from tensorsketch.runs.scheduler import fire
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.testing.runs import multitask_graph

UTC = dt.UTC


def _at(*parts: int, zone: str = "UTC") -> float:
    from zoneinfo import ZoneInfo

    return dt.datetime(*parts, tzinfo=ZoneInfo(zone)).timestamp()  # type: ignore[misc]


def _fires(expr: str, after: float, n: int, zone: str = "UTC") -> list[str]:
    cron = CronExpression.parse(expr, zone)
    out = []
    for _ in range(n):
        after = cron.next_after(after)
        out.append(dt.datetime.fromtimestamp(after, UTC).strftime("%Y-%m-%d %H:%M"))
    return out


def test_fields_steps_ranges_lists_and_names() -> None:
    start = _at(2026, 1, 5, 8, 50)  # a Monday
    assert _fires("*/20 9-10 * * mon-fri", start, 7) == [
        "2026-01-05 09:00",
        "2026-01-05 09:20",
        "2026-01-05 09:40",
        "2026-01-05 10:00",
        "2026-01-05 10:20",
        "2026-01-05 10:40",
        "2026-01-06 09:00",
    ]
    assert _fires("0 12 1,15 * *", start, 3) == [
        "2026-01-15 12:00",
        "2026-02-01 12:00",
        "2026-02-15 12:00",
    ]
    assert _fires("0 0 * feb sun", start, 2) == ["2026-02-01 00:00", "2026-02-08 00:00"]
    assert _fires("0 0 * * 7", start, 1) == ["2026-01-11 00:00"]  # 7 is Sunday too
    # Both day fields restricted: either one (the 13th, or a Friday).
    assert _fires("0 0 13 * fri", start, 3) == [
        "2026-01-09 00:00",
        "2026-01-13 00:00",
        "2026-01-16 00:00",
    ]


def test_a_time_zone_and_its_daylight_saving_changes() -> None:
    berlin = "Europe/Berlin"
    # 09:00 in Berlin is 08:00 UTC in winter and 07:00 UTC in summer.
    assert _fires("0 9 * * *", _at(2026, 3, 28, 12), 2, berlin) == [
        "2026-03-29 07:00",
        "2026-03-30 07:00",
    ]
    # 02:30 does not exist on 29 March (clocks skip it): no firing that day.
    assert _fires("30 2 * * *", _at(2026, 3, 28, 12), 2, berlin) == [
        "2026-03-30 00:30",
        "2026-03-31 00:30",
    ]
    # 02:30 happens twice on 25 October: it fires once, the first time.
    assert _fires("30 2 * * *", _at(2026, 10, 24, 12), 2, berlin) == [
        "2026-10-25 00:30",
        "2026-10-26 01:30",
    ]


@pytest.mark.parametrize(
    ("expr", "zone", "words"),
    [
        ("* * * *", "UTC", "has 5 fields"),
        ("60 * * * *", "UTC", "cron minute: 60 is out of range 0-59"),
        ("* 5-2 * * *", "UTC", "cron hour: the range '5-2' runs backwards"),
        ("*/0 * * * *", "UTC", "must be a positive number"),
        ("* * * foo *", "UTC", "cron month: 'foo' is not a number or a name"),
        ("0 0 30 feb *", "UTC", "never fires"),
        ("0 0 * * *", "Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
    ],
)
def test_a_bad_expression_or_zone_is_refused_naming_the_field(
    expr: str, zone: str, words: str
) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        CronExpression.parse(expr, zone)


@pytest.fixture(params=["memory", "sqlite"])
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Backend]:
    shared = InMemoryBackend()

    def make() -> Backend:
        if request.param == "memory":
            return shared
        return SqliteBackend(tmp_path / "runs.db", lease_ttl=2.0)

    return make


@pytest.fixture
async def runners(make_backend: Callable[[], Backend]) -> AsyncIterator[list[AsyncRunner]]:
    made = [
        AsyncRunner(
            multitask_graph(), backend=make_backend(), timer_refresh=0.1, poll_interval=0.05
        )
        for _ in range(3)
    ]
    yield made
    for runner in made:
        await runner.aclose()


async def _come_due(runner: AsyncRunner, schedule_id: str) -> RunRecord:
    """Make the schedule's next tick due now (as if its minute had come), waking every
    runner's timer loop."""

    def due(current: RunRecord) -> RunRecord:
        return current.replace(wake_at=time.time() - 0.01)

    stored = await runner.store.transition(schedule_id, due)
    assert stored is not None
    return stored


async def test_a_cron_schedule_fires_once_per_tick_across_runners_with_a_history(
    runners: list[AsyncRunner],
) -> None:
    first = runners[0]
    # Every five minutes, but only in one hour of the year: the test makes its ticks come due
    # itself, and a real tick landing while it runs (a loaded machine takes seconds) was a
    # third firing it did not expect.
    expression = "*/5 3 1 jan *"
    handle = await Scheduler(first).cron(expression, {"tag": "c"}, timezone="Asia/Tokyo")
    stored = await first.store.get(handle.id)
    assert stored is not None and stored.schedule is not None
    assert stored.schedule["cron"] == expression
    assert stored.wake_at is not None and stored.wake_at > time.time()
    assert dt.datetime.fromtimestamp(stored.wake_at, UTC).minute % 5 == 0
    again = await Scheduler(runners[1]).cron(expression, {"tag": "c"}, timezone="Asia/Tokyo")
    assert again.id == handle.id  # stored once, whoever declares it
    for runner in runners:
        await runner.start()
    for tick in (1, 2):
        await _come_due(first, handle.id)
        for _ in range(200):
            page = await handle.history()
            current = await first.store.get(handle.id)
            assert current is not None
            if len(page.records) >= tick and current.wake_at and current.wake_at > time.time():
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # every runner's timer loop has seen the tick by now
        page = await handle.history()
        assert len(page.records) == tick, [r.run_id for r in page.records]  # once per tick
        assert current.schedule is not None and current.schedule["fired"] == tick
        nxt = current.wake_at
        assert nxt is not None and nxt > time.time()
        assert dt.datetime.fromtimestamp(nxt, UTC).minute % 5 == 0
        for record in page.records:
            await first.await_run(record.run_id, timeout=30)
    done = await handle.history()
    assert [r.status for r in done.records] == ["succeeded", "succeeded"]
    assert all(r.labels["schedule"] == handle.id for r in done.records)
    await handle.cancel()


async def test_scheduler_cron_refuses_a_bad_expression_before_storing_it() -> None:
    runner = AsyncRunner(multitask_graph(), backend=InMemoryBackend())
    try:
        with pytest.raises(ValueError, match="cron day of week: 9 is out of range 0-7"):
            await Scheduler(runner).cron("0 9 * * 9", {"tag": "x"})
        assert (await runner.store.list(kind="schedule")).records == []
    finally:
        await runner.aclose()


async def test_a_schedule_read_after_another_runner_fired_it_is_not_fired_again(
    runners: list[AsyncRunner],
) -> None:
    """A timer loop can hold a schedule it read as due while another runner fires the tick
    and moves ``wake_at`` on; firing that copy must not tick a second time."""
    first = runners[0]
    handle = await Scheduler(first).cron("*/5 3 1 jan *", {"tag": "c"}, timezone="UTC")
    moved_on = await first.store.get(handle.id)
    assert moved_on is not None and moved_on.wake_at is not None
    assert moved_on.wake_at > time.time()
    await fire(first, moved_on)
    current = await first.store.get(handle.id)
    assert current is not None and current.schedule is not None
    assert current.schedule["fired"] == 0 and current.version == moved_on.version
    assert (await handle.history()).records == []
