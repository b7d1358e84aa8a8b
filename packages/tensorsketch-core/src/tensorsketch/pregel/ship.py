"""The caller's side of the executor seam: ship a superstep's ``Send`` instances, journal
what comes back (effects, then finished writes), re-emit their events, hand the writes to the
barrier."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from tensorsketch.effects import IDEMPOTENCY_PREFIX
from tensorsketch.errors import ExecutorError
from tensorsketch.pregel.seam import (
    Executor,
    SendCall,
    Superstep,
    TaskOutcome,
    manifest_key,
    mark_suspended,
)
from tensorsketch.pregel.spec import Task, TaskDone
from tensorsketch.suspension import Interrupt

if TYPE_CHECKING:
    from tensorsketch.pregel.loop import Run

__all__ = ["run_shipped"]


async def run_shipped(
    run: Run,
    executor: Executor,
    tasks: list[Task],
    step: int,
    on_done: TaskDone | None = None,
    restored: bool = False,
) -> list[dict[str, Any]]:
    """Run a superstep with its ``Send`` instances on ``executor`` and its plain nodes here;
    return every task's writes in plan order (what :meth:`Run.run_parallel` returns).

    ``on_done(task, writes)`` is awaited for each task that finishes while others still run
    (the journaled superstep's per-task commit). A resumed superstep (``restored``) first
    reads back what earlier attempts of its instances journaled.
    """
    shipment = _Shipment(run, executor, tasks, step, on_done)
    if restored and run.journal is not None:
        await _load_replays(run, shipment.work.calls, step)
    return await shipment.run()


class _Shipment:
    """The caller's side of one shipped superstep: outcomes in, writes out in plan order."""

    def __init__(
        self,
        run: Run,
        executor: Executor,
        tasks: list[Task],
        step: int,
        on_done: TaskDone | None,
    ) -> None:
        self.run_ = run
        self.executor = executor
        self.tasks = tasks
        self.step = step
        self.on_done = on_done
        calls: list[SendCall] = []
        self.local: set[int] = set()
        reads: dict[str, None] = {}
        every = run.ship_plain
        for index, task in enumerate(tasks):
            if (task.payload is None and not every) or task.spec.drives_child:
                self.local.add(index)
                continue
            calls.append(SendCall(index, task.spec.name, task.instance, task.payload))
            reads.update((name, None) for name, _ in task.spec.reads)
        values = run.values
        self.work = Superstep(
            graph=run.spec.name,
            step=step,
            values={name: values[name] for name in reads if name in values},
            calls=calls,
            resume=dict(run.resume),
            run_id=run.run_id,
            thread_id=run.thread_id,
            namespace=run.namespace,
            durable=run.journal is not None,
            streaming=run.sink is not None,
            max_concurrency=run.max_concurrency,
        )
        self.calls = {call.index: call for call in calls}
        self.results: list[dict[str, Any] | None] = [None] * len(tasks)
        self.reported = [False] * len(tasks)
        self.remaining = len(tasks)
        self.failures: list[tuple[int, BaseException]] = []
        self.suspended: list[tuple[int, Interrupt]] = []
        #: A batch from the executor, a plain node's outcome, the executor's error, or its end.
        self.queue: asyncio.Queue[list[TaskOutcome] | TaskOutcome | BaseException | None] = (
            asyncio.Queue()
        )

    async def run(self) -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        workers = [loop.create_task(self.pump())] if self.calls else []
        workers.extend(loop.create_task(self.here(index)) for index in sorted(self.local))
        open_ends = len(workers)
        try:
            while open_ends and not self.failures:
                item = await self.queue.get()
                if item is None:
                    open_ends -= 1
                elif isinstance(item, BaseException):
                    item.add_note(
                        f"while executor {self.executor.name!r} ran superstep {self.step}"
                    )
                    raise item
                elif isinstance(item, TaskOutcome):
                    open_ends -= 1  # a plain node here (its effects are journaled already)
                    await self.take([item], shipped=False)
                else:
                    await _journal_effects(self.run_, self.calls, item, self.step)
                    await self.take(item, shipped=True)
        finally:
            for worker in workers:
                worker.cancel()
            if workers:
                await asyncio.wait(workers)
        return self.finish()

    async def pump(self) -> None:
        tracer = self.run_.tracer
        if not tracer.enabled:
            await self.drain()
            return
        # One span for the shipped part of the superstep, under the run's (the instances'
        # own spans stay on the workers).
        attributes = {
            "tensorsketch.step": self.step,
            "tensorsketch.executor": self.executor.name,
            "tensorsketch.instances": len(self.calls),
        }
        with tracer.span(f"{self.executor.name} executor", kind="executor", **attributes):
            await self.drain()

    async def drain(self) -> None:
        try:
            async for group in self.executor.run(self.run_.spec, self.work):
                await self.queue.put(group)
        except Exception as exc:
            await self.queue.put(exc)
        else:
            await self.queue.put(None)

    async def here(self, index: int) -> None:
        outcome = TaskOutcome(index)
        try:
            outcome.writes = await self.run_.run_task(self.tasks[index], self.step)
            outcome.status = "done"
        except Interrupt as exc:
            mark_suspended(outcome, exc)
        except Exception as exc:
            outcome.status = "failed"
            outcome.error = exc
        await self.queue.put(outcome)

    async def take(self, group: list[TaskOutcome], *, shipped: bool) -> None:
        """Count outcomes in, in plan order: events, per-task commit, failures."""
        run = self.run_
        for outcome in sorted(group, key=_index):
            index = outcome.index
            if self.reported[index] if index in self.calls else shipped:
                msg = (
                    f"executor {self.executor.name!r} reported task index {index} of superstep "
                    f"{self.step} twice, or it is not one of the calls it was given."
                )
                raise ExecutorError(msg)
            self.reported[index] = True
            task = self.tasks[index]
            for type_, node, data, at, namespace in outcome.events:
                await run.emit(type_, node=node, data=data, step=at, namespace=namespace)
            if outcome.status == "done":
                writes = outcome.writes or {}
                self.results[index] = writes
                if self.on_done is not None and self.remaining > 1:
                    await self.on_done(task, writes)
                self.remaining -= 1
            elif outcome.status == "suspended":
                pause = Interrupt(pending=outcome.interrupts, writes=outcome.interrupt_writes)
                pause.parts = [(task, pause.writes)]
                self.suspended.append((index, pause))
                self.remaining -= 1
            elif outcome.status == "failed":
                error = outcome.error or ExecutorError(f"task {index} failed without an error")
                self.failures.append((index, error))

    def finish(self) -> list[dict[str, Any]]:
        if self.failures:
            index, first = min(self.failures, key=_first)
            self.run_.failed_task = self.tasks[index]
            raise first
        if self.suspended:
            raise Interrupt.merge([exc for _, exc in sorted(self.suspended, key=_first)])
        if self.remaining:
            missing = [i for i, seen in enumerate(self.reported) if not seen][:10]
            msg = (
                f"executor {self.executor.name!r} finished superstep {self.step} without "
                f"reporting {self.remaining} of its tasks (indexes {missing}); an executor "
                "must yield one outcome per call."
            )
            raise ExecutorError(msg)
        return self.results  # type: ignore[return-value]


async def _load_replays(run: Run, calls: list[SendCall], step: int) -> None:
    """Give each call the journal entries its earlier attempts recorded: follow its manifests
    (one round trip per generation, all calls at once), then read the entries."""
    journal = run.journal
    assert journal is not None
    listed: dict[int, list[str]] = {}
    pending = calls
    while pending:
        keys = [manifest_key(step, c.node, c.instance, c.generation) for c in pending]
        found = await journal.lookup_many(keys)
        more: list[SendCall] = []
        for call, key in zip(pending, keys):
            if key in found:
                listed.setdefault(call.index, []).extend(found[key])
                call.generation += 1
                more.append(call)
        pending = more
    if not listed:
        return
    wanted = sorted({key for keys in listed.values() for key in keys})
    entries = await journal.lookup_many(wanted)
    for call in calls:
        for key in listed.get(call.index, ()):
            if key in entries:
                call.replay[key] = entries[key]


async def _journal_effects(
    run: Run, calls: dict[int, SendCall], outcomes: list[TaskOutcome], step: int
) -> None:
    """Record a returned batch's effects before any of its instances counts as finished: in
    the journal (with each attempt's manifest) for a durable run, and the idempotency keys in
    the run's memory otherwise."""
    journal = run.journal
    if journal is None:
        for outcome in outcomes:
            for key, value in outcome.effects:
                if key.startswith(IDEMPOTENCY_PREFIX):
                    await run.effects.record(key, value)
        return
    items: list[tuple[str, Any]] = []
    for outcome in outcomes:
        call = calls.get(outcome.index)
        if call is None or not (outcome.effects or outcome.decisions):
            continue
        items.extend(outcome.effects)
        keys = [key for key, _ in outcome.effects] + outcome.decisions
        items.append((manifest_key(step, call.node, call.instance, call.generation), keys))
    if not items:
        return
    # Shielded like an effect record: the effects happened, so they are written even if the
    # run is cancelled meanwhile.
    writing = asyncio.ensure_future(journal.record_many(items))
    try:
        await asyncio.shield(writing)
    except asyncio.CancelledError:
        await asyncio.wait([writing])
        raise


def _first(pair: tuple[int, Any]) -> int:
    return pair[0]


def _index(outcome: TaskOutcome) -> int:
    return outcome.index
