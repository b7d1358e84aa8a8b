"""Double-texting: a submit on a thread with a run in flight, under each
``multitask_strategy`` (reject, enqueue, interrupt, rollback), on the in-memory and SQLite
stores (PostgreSQL and Redis: tensorsketch-serve's tests/test_tasks_multitask.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tensorsketch.runs import AsyncRunner, RunConflictError
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.testing.runs import check_double_texting, multitask_graph, ticks_of


@pytest.fixture(params=["memory", "sqlite"])
def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Backend]:
    shared = InMemoryBackend()

    def make() -> Backend:
        if request.param == "memory":
            return shared
        return SqliteBackend(tmp_path / "runs.db", lease_ttl=2.0)

    return make


@pytest.fixture
async def runner_for(
    make_backend: Callable[[], Backend],
) -> AsyncIterator[Callable[..., AsyncRunner]]:
    made: list[AsyncRunner] = []

    def build(**options: Any) -> AsyncRunner:
        options.setdefault("timer_refresh", 0.5)
        options.setdefault("poll_interval", 0.05)
        pause = options.pop("pause", 0.05)
        runner = AsyncRunner(multitask_graph(pause), backend=make_backend(), **options)
        made.append(runner)
        return runner

    yield build
    for runner in made:
        await runner.aclose()


async def _running(runner: AsyncRunner, run_id: str, ticks: int = 1) -> None:
    """Wait until the run is executing and has checkpointed ``ticks`` supersteps."""
    for _ in range(400):
        record = await runner.get(run_id)
        state = await runner.graph.aget_state(record.thread_id, runner.backend)
        if record.status == "running" and state is not None and len(ticks_of(state)) >= ticks:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"run {run_id} never ran {ticks} supersteps")


async def test_reject_refuses_a_second_input_while_the_first_runs(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for(multitask_strategy="reject", pause=0.5)
    first = await runner.submit({"tag": "a"}, thread_id="t-reject")
    await _running(runner, first.run_id)
    with pytest.raises(RunConflictError, match=r"multitask_strategy is 'reject'"):
        await runner.submit({"tag": "b"}, thread_id="t-reject")
    done = await runner.await_run(first.run_id, timeout=30)
    assert done.status == "succeeded"
    assert ticks_of(done.output) == ["a0", "a1", "a2"]
    # Once nothing is in flight, the thread takes input again.
    later = await runner.submit({"tag": "c"}, thread_id="t-reject")
    assert ticks_of((await runner.await_run(later.run_id, timeout=30)).output)[-1] == "c2"


async def test_enqueue_runs_each_input_after_the_one_before_in_order(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for(concurrency=2)
    runs = [await runner.submit({"tag": t}, thread_id="t-enqueue") for t in "abcd"]
    assert all(r.multitask_strategy == "enqueue" for r in runs)
    done = [await runner.await_run(r.run_id, timeout=60) for r in runs]
    assert [d.status for d in done] == ["succeeded"] * 4
    assert ticks_of(done[-1].output) == [f"{t}{i}" for t in "abcd" for i in range(3)]
    started = [d.started_at or 0.0 for d in done]
    finished = [d.finished_at or 0.0 for d in done]
    assert all(finished[i] <= started[i + 1] for i in range(3))  # never two at once


async def test_interrupt_stops_the_run_at_a_barrier_and_keeps_what_it_did(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for(pause=0.5)
    first = await runner.submit({"tag": "a"}, thread_id="t-interrupt")
    await _running(runner, first.run_id)
    second = await runner.submit(
        {"tag": "b"}, thread_id="t-interrupt", multitask_strategy="interrupt"
    )
    new = await runner.await_run(second.run_id, timeout=30)
    old = await runner.get(first.run_id)
    assert old.status == "cancelled"
    assert old.error is not None and old.error["type"] == "Interrupted"
    assert old.stopped_by == second.run_id
    assert new.status == "succeeded"
    ticks = ticks_of(new.output)
    kept = [t for t in ticks if t.startswith("a")]
    assert 1 <= len(kept) < 3, ticks  # stopped part-way, what it checkpointed stays
    assert ticks == [*kept, "b0", "b1", "b2"]


async def test_rollback_discards_the_stopped_runs_checkpoints(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for(pause=0.5)
    before = await runner.submit({"tag": "z"}, thread_id="t-rollback")
    await runner.await_run(before.run_id, timeout=30)  # the thread's state before the run
    first = await runner.submit({"tag": "a"}, thread_id="t-rollback")
    await _running(runner, first.run_id, ticks=4)
    second = await runner.submit(
        {"tag": "b"}, thread_id="t-rollback", multitask_strategy="rollback"
    )
    new = await runner.await_run(second.run_id, timeout=30)
    old = await runner.get(first.run_id)
    assert old.status == "cancelled"
    assert old.error is not None and old.error["type"] == "RolledBack"
    assert new.status == "succeeded"
    assert ticks_of(new.output) == ["z0", "z1", "z2", "b0", "b1", "b2"]


async def test_rollback_discards_only_the_stopped_runs_own_checkpoints_when_it_queued(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    """``b`` is enqueued while ``a`` runs, so where ``b`` will start is only guessed at its
    submit (``a``'s checkpoint then); ``a`` writes more before ``b`` starts, and ``c`` rolls
    ``b`` back. Only ``b``'s checkpoints go: the rollback reads where ``b`` really started
    (its record, corrected as it opened the thread), not the guess — which would discard the
    end of ``a``, a finished run, too (found by bench_double_texting.py on PostgreSQL)."""
    runner = runner_for(pause=0.2)
    a = await runner.submit({"tag": "a"}, thread_id="t-queued-rollback")
    await _running(runner, a.run_id)
    b = await runner.submit({"tag": "b"}, thread_id="t-queued-rollback")
    assert (await runner.await_run(a.run_id, timeout=30)).status == "succeeded"
    await _running(runner, b.run_id, ticks=4)  # a's three, then b's first
    c = await runner.submit(
        {"tag": "c"}, thread_id="t-queued-rollback", multitask_strategy="rollback"
    )
    done = await runner.await_run(c.run_id, timeout=30)
    stopped = await runner.get(b.run_id)
    assert stopped.status == "cancelled" and stopped.error["type"] == "RolledBack", stopped
    assert ticks_of(done.output) == ["a0", "a1", "a2", "c0", "c1", "c2"], done.output


async def test_a_run_queued_behind_one_executing_here_waits_without_polling_the_store(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    """``enqueue`` behind a run this process executes: the queued run is woken when that
    run stops, and reads the store only then — it does not poll every ``poll_interval``.
    Polling made 4,000 queued runs of bench_double_texting.py (1,000 threads) starve
    PostgreSQL's connection pool, and runs failed to store their outcome."""
    runner = runner_for(pause=0.3, poll_interval=0.005)
    first = await runner.submit({"tag": "a"}, thread_id="t-quiet-queue")
    await _running(runner, first.run_id)
    store = runner.store
    reads = {"get": 0, "list": 0}
    get, list_ = store.get, store.list

    async def counted_get(run_id: str) -> Any:
        reads["get"] += 1
        return await get(run_id)

    async def counted_list(**kwargs: Any) -> Any:
        if kwargs.get("thread_id") == "t-quiet-queue":
            reads["list"] += 1
        return await list_(**kwargs)

    store.get = counted_get  # type: ignore[method-assign]
    store.list = counted_list  # type: ignore[method-assign]
    second = await runner.submit({"tag": "b"}, thread_id="t-quiet-queue")
    await _running(runner, first.run_id, ticks=2)  # b waits its turn across a's ticks
    waiting = dict(reads)
    assert (await runner.await_run(second.run_id, timeout=30)).status == "succeeded"
    # At most the read when b was queued (a cold head) and the poll-free wait: no loop of
    # reads while a ran for a whole tick (0.3 s: 60 polls at 5 ms).
    assert waiting["list"] <= 2, waiting


async def test_interrupt_cancels_runs_still_queued_behind_the_running_one(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    runner = runner_for(pause=0.5)
    first = await runner.submit({"tag": "a"}, thread_id="t-queue")
    queued = await runner.submit({"tag": "q"}, thread_id="t-queue")
    await _running(runner, first.run_id)
    last = await runner.submit({"tag": "b"}, thread_id="t-queue", multitask_strategy="interrupt")
    new = await runner.await_run(last.run_id, timeout=30)
    assert (await runner.get(queued.run_id)).status == "cancelled"
    assert "q0" not in ticks_of(new.output)
    assert ticks_of(new.output)[-3:] == ["b0", "b1", "b2"]


async def test_an_unknown_strategy_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"`multitask_strategy` must be one of reject, enqueue"):
        AsyncRunner(multitask_graph(), backend=InMemoryBackend(), multitask_strategy="drop")  # type: ignore[arg-type]
    runner = AsyncRunner(multitask_graph(), backend=InMemoryBackend())
    try:
        with pytest.raises(ValueError, match=r"got 'later'"):
            await runner.submit({"tag": "a"}, thread_id="t", multitask_strategy="later")  # type: ignore[arg-type]
    finally:
        await runner.aclose()


@pytest.mark.parametrize("strategy", ["reject", "enqueue", "interrupt", "rollback"])
async def test_racing_inputs_on_several_threads_keep_each_policys_promise(
    runner_for: Callable[..., AsyncRunner], strategy: str
) -> None:
    """4 threads x 4 inputs submitted at once: the final state of each thread is what the
    policy promises, and no two runs of one thread ever executed at the same time."""
    runner = runner_for(concurrency=4, multitask_strategy=strategy)
    threads = [f"race-{strategy}-{i}" for i in range(4)]

    async def send(thread: str, tag: str) -> Any:
        try:
            return await runner.submit({"tag": tag}, thread_id=thread)
        except RunConflictError:
            return None

    sent = await asyncio.gather(*(send(t, tag) for tag in "abcd" for t in threads))
    accepted = [r for r in sent if r is not None]
    done = [await runner.await_run(r.run_id, timeout=120) for r in accepted]
    for thread in threads:
        mine = [d.to_dict() for d in done if d.thread_id == thread]
        state = await runner.graph.aget_state(thread, runner.backend)
        check_double_texting(strategy, mine, ticks_of(state))
        if strategy == "reject":  # submitted at once: only one of each thread's got in
            assert len(mine) == 1


async def test_a_submit_waiting_for_the_threads_turn_keeps_it_against_a_newcomer(
    tmp_path: Path,
) -> None:
    """``x`` holds the thread's turn while ``y`` waits for it; a third submit ``z`` arrives
    just as ``x`` hands the turn on (woken by ``x``'s stored record, so before ``y`` has it).
    ``z`` must wait for ``y``: were the turn forgotten once ``x`` let go, ``y`` and ``z``
    would each check what is in flight without the other and neither would stop the other
    (the load run of 1,000 threads x 5 rollback inputs found such a pair)."""
    backend = SqliteBackend(tmp_path / "runs.db")
    async with AsyncRunner(multitask_graph(0.2), backend=backend) as runner:
        x_stored = asyncio.Event()
        runner.listeners.append(lambda r: x_stored.set() if r.input == {"tag": "x"} else None)

        async def submit(tag: str) -> Any:
            return await runner.submit({"tag": tag}, thread_id="t", multitask_strategy="rollback")

        async def newcomer() -> Any:
            await x_stored.wait()
            return await submit("z")

        z = asyncio.create_task(newcomer())
        x = asyncio.create_task(submit("x"))
        await asyncio.sleep(0)  # x takes the turn first
        y = asyncio.create_task(submit("y"))
        made = await asyncio.gather(x, y, z)
        for record in made:
            await runner.await_run(record.run_id, timeout=30)
        runs = [r.to_dict() for r in (await runner.list(thread_id="t")).records]
        for r in runs:
            r["id"] = r["run_id"]
        last = max(runs, key=lambda r: (r["created_at"], r["id"]))
        check_double_texting("rollback", runs, ticks_of(last["output"]))
        assert [r["status"] for r in sorted(runs, key=lambda r: r["created_at"])][-1] == "succeeded"
        assert sum(r["status"] == "succeeded" for r in runs) == 1, runs
    await backend.aclose()


async def test_submits_on_one_thread_take_turns_in_order_and_a_cancelled_one_leaves_its_turn(
    runner_for: Callable[..., AsyncRunner],
) -> None:
    """This process's submits on a thread take one turn each, in arrival order; a submit
    cancelled while it waits for its turn (or once handed it) does not hold up the next,
    and the thread's entry is gone once the last one left."""
    runner = runner_for(multitask_strategy="enqueue")
    await runner.start()
    submission = runner._submission
    inner = submission._double_text
    entered: list[Any] = []
    release = asyncio.Event()

    async def held(input: Any, *args: Any) -> Any:
        entered.append(input["tag"])
        if input["tag"] == "a":
            await release.wait()
        return await inner(input, *args)

    submission._double_text = held  # type: ignore[method-assign]
    first = asyncio.create_task(runner.submit({"tag": "a"}, thread_id="turns"))
    await asyncio.sleep(0.01)
    second = asyncio.create_task(runner.submit({"tag": "b"}, thread_id="turns"))
    third = asyncio.create_task(runner.submit({"tag": "c"}, thread_id="turns"))
    await asyncio.sleep(0.01)
    assert entered == ["a"]
    second.cancel()
    await asyncio.sleep(0.01)
    release.set()
    records = [await first, await third]
    assert second.cancelled() and entered == ["a", "c"]
    for record in records:
        assert (await runner.await_run(record.run_id, timeout=30)).status == "succeeded"
    assert not runner._state.thread_gates
    # Handed the turn, then cancelled before it woke: the turn goes on to the next.
    entered.clear()
    waiting: list[asyncio.Task[Any]] = []

    async def hands_on(input: Any, *args: Any) -> Any:
        entered.append(input["tag"])
        if input["tag"] != "a":
            return await inner(input, *args)
        await release.wait()
        stored = await inner(input, *args)
        # Runs once this submit left (handing its turn to "b"), before "b" wakes.
        asyncio.get_running_loop().call_soon(waiting[0].cancel)
        return stored

    submission._double_text = hands_on  # type: ignore[method-assign]
    release.clear()
    first = asyncio.create_task(runner.submit({"tag": "a"}, thread_id="turns"))
    await asyncio.sleep(0.01)
    waiting.append(asyncio.create_task(runner.submit({"tag": "b"}, thread_id="turns")))
    third = asyncio.create_task(runner.submit({"tag": "c"}, thread_id="turns"))
    await asyncio.sleep(0.01)
    release.set()
    await first
    await third
    assert waiting[0].cancelled() and entered == ["a", "c"]
    assert not runner._state.thread_gates
