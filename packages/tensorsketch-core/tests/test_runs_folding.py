"""A submit's insert folded into its run's opening (``tensorsketch.runs.folding``, #49 item 1):
what ``submit`` returns is stored, a run that cannot take its thread's lease waits its turn,
and an opening that fails or is cancelled before it answered never leaves a second run."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tensorsketch import Context, Node, Schema
from tensorsketch.errors import ThreadBusyError
from tensorsketch.runs import AsyncRunner, RunRecord, run_store
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.rides import RecordRide
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.testing.runs import one_node_graph

#: Threads where a run with ``n == 7`` found a thread busy (once).
BUSY: list[str] = []

#: (entered, open): a run with ``n == 0`` sets the first and waits for the second.
GATE: tuple[asyncio.Event, asyncio.Event] | None = None


class Step(Node):
    class In(Schema):
        n: int

    class Out(Schema):
        out: str

    async def run(self, ctx: Context, inp: In) -> Out:
        if inp.n == 0 and GATE is not None:
            GATE[0].set()
            await GATE[1].wait()
        if inp.n == 7 and not BUSY:  # a thread busy once, after the run's opening
            BUSY.append(ctx.thread_id or "")
            raise ThreadBusyError("a subgraph's thread is busy")

        async def effect() -> str:
            return f"did {inp.n}"

        return self.Out(out=await ctx.step("effect", effect))


class Openings:
    """Wraps ``backend.open_thread``: the run ids whose record an opening inserted, and a
    hook to make an opening that carries an insert misbehave."""

    def __init__(self, backend: Backend) -> None:
        self.folded: list[str] = []
        self.hook: Any = None
        inner = backend.open_thread

        async def open_thread(*args: Any, ride: RecordRide | None = None, **kw: Any) -> Any:
            if ride is None or ride.insert is None:
                return await inner(*args, ride=ride, **kw)
            self.folded.append(ride.run_id)
            if self.hook is None:
                return await inner(*args, ride=ride, **kw)
            return await self.hook(inner, args, ride, kw)

        backend.open_thread = open_thread  # type: ignore[method-assign]


@pytest.fixture(params=["sqlite", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return SqliteBackend(tmp_path / "fold.db")
    return InMemoryBackend()


@pytest.fixture
async def runner(backend: Backend) -> AsyncIterator[AsyncRunner]:
    global GATE
    GATE = (asyncio.Event(), asyncio.Event())
    tasks = AsyncRunner(one_node_graph(Step, "step"), backend=backend, poll_interval=0.05)
    await tasks.start()
    # The first submit of a process is not folded on SQLite (its run tables must be known
    # to exist): warm the store up.
    warm = await tasks.submit({"n": 1}, thread_id="warm")
    await tasks.await_run(warm.run_id, timeout=30)
    try:
        yield tasks
    finally:
        GATE[1].set()
        await tasks.aclose()


async def test_a_folded_submit_returns_a_record_stored_in_one_durable_unit(
    tmp_path: Path,
) -> None:
    """SQLite: the insert, the thread's lease and the ``running`` write share one unit, a
    durable transaction; ``submit`` returns once it committed (the record is there)."""
    backend = SqliteBackend(tmp_path / "units.db")
    units: list[tuple[list[str], dict[str, Any]]] = []
    submit = backend.submit

    async def counted(queries: Any, **options: Any) -> Any:
        units.append(([q.sql for q in queries], options))
        return await submit(queries, **options)

    backend.submit = counted  # type: ignore[method-assign]
    tasks = AsyncRunner(one_node_graph(Step, "step"), backend=backend)
    try:
        warm = await tasks.submit({"n": 1}, thread_id="warm")
        await tasks.await_run(warm.run_id, timeout=30)
        units.clear()
        record = await tasks.submit({"n": 2}, thread_id="t")
        inserting = [
            (sqls, options)
            for sqls, options in units
            if any(s.startswith("INSERT INTO tensorsketch_runs ") for s in sqls)
        ]
        assert (record.status, record.version) == ("queued", 1)
        assert await run_store(backend).get(record.run_id) is not None
        done = await tasks.await_run(record.run_id, timeout=30)
    finally:
        await tasks.aclose()
    assert done.status == "succeeded" and done.output["out"] == "did 2"
    [(sqls, options)] = inserting
    assert any(s.startswith("INSERT INTO tensorsketch_leases") for s in sqls)
    assert options["transaction"] and options.get("durable", True)


async def test_a_folded_opening_that_takes_the_lease_writes_the_runs_row_once(
    tmp_path: Path,
) -> None:
    """SQLite: where the opening takes the lease, the run is inserted ``running`` (its ride's
    write is what is stored): no insert as ``queued`` then an update, and its record is
    encoded once, not twice."""
    backend = SqliteBackend(tmp_path / "once.db")
    units: list[list[str]] = []
    submit = backend.submit

    async def counted(queries: Any, **options: Any) -> Any:
        units.append([q.sql for q in queries])
        return await submit(queries, **options)

    backend.submit = counted  # type: ignore[method-assign]
    tasks = AsyncRunner(one_node_graph(Step, "step"), backend=backend)
    encoded: list[str] = []
    encode = RunRecord.encode

    def counting(record: RunRecord, *args: Any, **kw: Any) -> bytes:
        encoded.append(record.status)
        return encode(record, *args, **kw)

    try:
        warm = await tasks.submit({"n": 1}, thread_id="warm")
        await tasks.await_run(warm.run_id, timeout=30)
        units.clear()
        RunRecord.encode = counting  # type: ignore[method-assign]
        try:
            record = await tasks.submit({"n": 2}, thread_id="t")
            opened = list(encoded)
        finally:
            RunRecord.encode = encode  # type: ignore[method-assign]
        done = await tasks.await_run(record.run_id, timeout=30)
    finally:
        await tasks.aclose()
    assert done.status == "succeeded"
    assert opened == ["running"]
    [opening] = [u for u in units if any("tensorsketch_leases" in s for s in u)][:1]
    writes = [s for s in opening if "tensorsketch_runs " in s.split(" WHERE ")[0]]
    assert len(writes) == 1 and writes[0].startswith("INSERT INTO tensorsketch_runs ")


async def test_listeners_hear_a_folded_run_queued_then_running(
    runner: AsyncRunner, backend: Backend
) -> None:
    openings = Openings(backend)
    heard: list[tuple[str, str]] = []
    runner.listeners.append(lambda r: heard.append((r.run_id, r.status)))
    record = await runner.submit({"n": 2})
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded"
    assert openings.folded == [record.run_id]
    assert [s for run_id, s in heard if run_id == record.run_id] == [
        "queued",
        "running",
        "succeeded",
    ]


async def test_a_submit_with_a_key_or_labels_keeps_its_own_insert(
    runner: AsyncRunner, backend: Backend
) -> None:
    openings = Openings(backend)
    keyed = await runner.submit({"n": 2}, idempotency_key="k1")
    labelled = await runner.submit({"n": 3}, labels={"team": "a"})
    for record in (keyed, labelled):
        assert (await runner.await_run(record.run_id, timeout=30)).status == "succeeded"
    assert openings.folded == []
    again = await runner.submit({"n": 2}, idempotency_key="k1")
    assert again.run_id == keyed.run_id


async def test_a_folded_run_behind_another_on_its_thread_stays_queued_and_waits(
    runner: AsyncRunner, backend: Backend
) -> None:
    """Another process's run queued on the thread before it: the opening stores the new run
    without taking the lease; ``submit`` returns it queued, and it runs once the other one
    is done."""
    openings = Openings(backend)
    store = run_store(backend)
    ahead, _ = await store.create(
        RunRecord(
            run_id="run_ahead",
            thread_id="busy",
            owner="elsewhere",
            lease_expires_at=time.time() + 60,
            created_at=time.time() - 1,
        )
    )
    record = await runner.submit({"n": 2}, thread_id="busy")
    assert openings.folded == [record.run_id]
    await asyncio.sleep(0.3)
    stored = await store.get(record.run_id)
    assert stored is not None and stored.status == "queued"
    await store.transition(
        ahead.run_id, lambda r: r.replace(status="cancelled", owner=None, lease_expires_at=None)
    )
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded" and done.output["out"] == "did 2"


async def test_a_folded_run_whose_thread_lease_is_held_elsewhere_waits_for_it(
    runner: AsyncRunner, backend: Backend
) -> None:
    openings = Openings(backend)
    assert await backend.acquire_lease("held", "elsewhere", 0.5)
    record = await runner.submit({"n": 2}, thread_id="held")
    assert openings.folded == [record.run_id]
    assert record.status == "queued"
    # Stored without the lease; it then waits for it as any run does (today's path).
    assert await run_store(backend).get(record.run_id) is not None
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded"


async def test_an_opening_that_fails_before_storing_leaves_submit_to_store_the_run(
    runner: AsyncRunner, backend: Backend
) -> None:
    openings = Openings(backend)

    async def fail(inner: Any, args: Any, ride: RecordRide, kw: Any) -> Any:
        openings.hook = None
        raise RuntimeError("the store hiccuped")

    openings.hook = fail
    record = await runner.submit({"n": 2}, thread_id="hiccup")
    assert openings.folded == [record.run_id]
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded"
    page = await run_store(backend).list(thread_id="hiccup")
    assert [r.run_id for r in page.records] == [record.run_id]


async def test_an_opening_that_stored_the_run_but_never_answered_is_found_not_doubled(
    runner: AsyncRunner, backend: Backend
) -> None:
    """The unit committed (record, lease, ``running``) but its answer was lost: ``submit``
    reads the record, returns it, and the run goes on as stored — once."""
    openings = Openings(backend)

    async def lose_the_answer(inner: Any, args: Any, ride: RecordRide, kw: Any) -> Any:
        openings.hook = None
        await inner(*args, ride=ride, **kw)
        ride.result = None
        raise RuntimeError("the answer was lost")

    openings.hook = lose_the_answer
    record = await runner.submit({"n": 2}, thread_id="lost")
    assert record.status == "running"  # as stored by the opening
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded" and done.output["out"] == "did 2"
    page = await run_store(backend).list(thread_id="lost")
    assert [r.run_id for r in page.records] == [record.run_id]


@pytest.mark.parametrize("stored_first", [False, True])
async def test_a_runner_closed_while_a_fold_is_in_flight_leaves_one_run(
    backend: Backend, stored_first: bool
) -> None:
    """``aclose`` cancels the run's task while its opening is in flight: before the unit
    ran (nothing stored: ``submit`` stores it the usual way) or after it committed (the
    record is found and handed back). Either way ``submit`` returns a stored record, and
    there is one."""
    tasks = AsyncRunner(one_node_graph(Step, "step"), backend=backend)
    await tasks.start()
    warm = await tasks.submit({"n": 1}, thread_id="warm")
    await tasks.await_run(warm.run_id, timeout=30)
    openings = Openings(backend)
    entered = asyncio.Event()

    async def hang(inner: Any, args: Any, ride: RecordRide, kw: Any) -> Any:
        if stored_first:
            await inner(*args, ride=ride, **kw)
        entered.set()
        await asyncio.Event().wait()

    openings.hook = hang
    submitting = asyncio.create_task(tasks.submit({"n": 2}, thread_id="closing"))
    await asyncio.wait_for(entered.wait(), 10)
    await tasks.aclose()
    record = await asyncio.wait_for(submitting, 10)
    page = await run_store(backend).list(thread_id="closing")
    assert [r.run_id for r in page.records] == [record.run_id]
    if stored_first:
        assert page.records[0].owner is None  # handed back for another runner
    await backend.aclose()


async def test_enqueue_on_a_thread_busy_here_is_not_folded_and_runs_after(
    runner: AsyncRunner, backend: Backend
) -> None:
    assert GATE is not None
    openings = Openings(backend)
    first = await runner.submit({"n": 0}, thread_id="double")
    await asyncio.wait_for(GATE[0].wait(), 10)
    second = await runner.submit({"n": 2}, thread_id="double")
    assert openings.folded == [first.run_id]
    GATE[1].set()
    a = await runner.await_run(first.run_id, timeout=30)
    b = await runner.await_run(second.run_id, timeout=30)
    assert a.status == b.status == "succeeded"
    assert a.finished_at is not None and b.started_at is not None
    assert b.started_at >= a.finished_at


async def test_enqueue_on_a_thread_busy_in_another_runner_folds_and_waits_its_turn(
    runner: AsyncRunner, backend: Backend
) -> None:
    """The other runner's run heads the thread's queue: the folded opening stores the new
    run without the lease; it runs once that one is done."""
    assert GATE is not None
    first = await runner.submit({"n": 0}, thread_id="shared")
    await asyncio.wait_for(GATE[0].wait(), 10)
    other = AsyncRunner(one_node_graph(Step, "step"), backend=backend, poll_interval=0.05)
    openings = Openings(backend)
    try:
        second = await other.submit({"n": 2}, thread_id="shared")
        assert openings.folded == [second.run_id]
        await asyncio.sleep(0.2)
        waiting = await other.get(second.run_id)
        assert waiting.status == "queued"
        GATE[1].set()
        a = await runner.await_run(first.run_id, timeout=30)
        b = await other.await_run(second.run_id, timeout=30)
    finally:
        await other.aclose()
    assert a.status == b.status == "succeeded"
    assert a.finished_at is not None and b.started_at is not None
    assert b.started_at >= a.finished_at


async def _later_turn_units(tmp_path: Path, fold: bool) -> int:
    backend = SqliteBackend(tmp_path / f"turns-{fold}.db")
    units: list[int] = []
    submit = backend.submit

    async def counted(queries: Any, **options: Any) -> Any:
        units.append(len(queries))
        return await submit(queries, **options)

    backend.submit = counted  # type: ignore[method-assign]
    tasks = AsyncRunner(one_node_graph(Step, "step"), backend=backend)
    tasks.fold_submits = fold
    try:
        for n in (1, 2):
            units.clear()
            record = await tasks.submit({"n": n}, thread_id="turns")
            done = await tasks.await_run(record.run_id, timeout=30)
            assert done.status == "succeeded"
    finally:
        await tasks.aclose()
    return len(units)


async def test_a_later_turn_on_a_thread_folds_without_a_correction(tmp_path: Path) -> None:
    """The runner remembers where its last run left the thread: a later turn's guess of
    where it begins is right, so the fold saves its unit there too."""
    assert await _later_turn_units(tmp_path, True) == await _later_turn_units(tmp_path, False) - 1


async def test_a_wrong_guess_is_corrected_before_the_run_goes_on(
    runner: AsyncRunner, backend: Backend
) -> None:
    """The thread moved since this runner's last run on it (a direct invoke): the opening
    reads where it really stands, and the record says so."""
    first = await runner.submit({"n": 1}, thread_id="moved")
    await runner.await_run(first.run_id, timeout=30)
    await runner.graph.invoke({"n": 5}, thread_id="moved", backend=backend)
    head = await backend.latest_checkpoint("moved")
    last = await backend.last_event_seq("moved")
    assert head is not None and last is not None
    openings = Openings(backend)
    record = await runner.submit({"n": 2}, thread_id="moved")
    done = await runner.await_run(record.run_id, timeout=30)
    assert openings.folded == [record.run_id]
    assert done.status == "succeeded"
    assert (done.base_checkpoint, done.first_seq) == (head.checkpoint_id, last + 1)


async def test_a_backend_that_ignores_the_insert_is_caught_and_the_run_stored_once(
    runner: AsyncRunner, backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """A backend claiming ``folds_submits`` whose ``open_thread`` drops ``ride.insert``: the
    rider sees no stored record, the run stops before anything of it runs, and ``submit``
    stores it the usual way (logged, naming the fix)."""
    openings = Openings(backend)

    async def drop(inner: Any, args: Any, ride: RecordRide, kw: Any) -> Any:
        openings.hook = None
        plain = RecordRide(ride.run_id, ride.write)  # what a backend without folding does
        opening = await inner(*args, ride=plain, **kw)
        ride.result = plain.result
        return opening

    openings.hook = drop
    caplog.set_level(logging.WARNING, logger="tensorsketch.runs")
    record = await runner.submit({"n": 2}, thread_id="ignored")
    done = await runner.await_run(record.run_id, timeout=30)
    assert done.status == "succeeded"
    page = await run_store(backend).list(thread_id="ignored")
    assert [r.run_id for r in page.records] == [record.run_id]
    assert "folds_submits = False" in caplog.text


async def test_a_folded_run_that_meets_a_busy_thread_later_retries_as_any_run(
    runner: AsyncRunner, backend: Backend
) -> None:
    """Only a refused opening sends a folded run back to the queue: a ``ThreadBusyError``
    after it opened (here from a node) is retried as for any run, not left ``running``."""
    BUSY.clear()
    openings = Openings(backend)
    record = await runner.submit({"n": 7}, thread_id="later-busy")
    done = await runner.await_run(record.run_id, timeout=30)
    assert openings.folded == [record.run_id] and BUSY == ["later-busy"]
    assert done.status == "succeeded"
