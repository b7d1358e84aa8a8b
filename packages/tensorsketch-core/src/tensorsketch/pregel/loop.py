"""The BSP engine: plan, execute in parallel on one snapshot, fold writes at a barrier.

A :class:`Run` is one invocation of a compiled graph. Each superstep:

1. **plan** — the active tasks are known (the entry, then whatever the previous barrier named);
2. **execute** — every task runs concurrently and reads the same state; writes are buffered;
3. **barrier** — writes are folded into channels in task order (never completion order), the
   successors are computed from the new state, and (for a durable run) a checkpoint is saved.

Nothing here knows about agents, providers or stores: the durable layer is reached through
:class:`tensorsketch.durable.RunJournal`, and observers through the event sink and the tracer.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NoReturn

from tensorsketch.command import ParentCommand
from tensorsketch.context import NO_DEPS
from tensorsketch.durable.ids import new_checkpoint_id
from tensorsketch.durable.journal import Restored, RunJournal
from tensorsketch.durable.ladder import Position, merge_changes
from tensorsketch.durable.lineage import journaled_keys
from tensorsketch.durable.modes import Durability
from tensorsketch.effects import EffectLog
from tensorsketch.errors import (
    BackendUnavailableError,
    CheckpointDecodeError,
    EmptyChannelError,
    GraphRecursionError,
    NodeError,
    RoutingError,
    ThreadBusyError,
)
from tensorsketch.events import Event, new_event
from tensorsketch.joins import restore_arrivals, snapshot
from tensorsketch.observability.tracing import NOOP_TRACER, Tracer
from tensorsketch.pregel.plan import Planning, hold_deferred, with_held
from tensorsketch.pregel.run_info import attach_run_info
from tensorsketch.pregel.seam import Executor
from tensorsketch.pregel.ship import run_shipped
from tensorsketch.pregel.spec import EventSink, GraphSpec, Task, plan_of
from tensorsketch.pregel.state import RunState, unstorable_field
from tensorsketch.pregel.tasks import TaskExecution
from tensorsketch.schema import Schema
from tensorsketch.suspension import Interrupt, PendingInterrupt

__all__ = ["Run"]

#: Failures of the store itself: no failure checkpoint can be written for them.
_STORE_ERRORS = (BackendUnavailableError, CheckpointDecodeError, ThreadBusyError)


def _no_parent(graph: str, handed: ParentCommand) -> RoutingError:
    """``Command(graph=Command.PARENT)`` in a graph that runs at the top level."""
    msg = (
        f"node {handed.node!r} returned Command(graph=Command.PARENT), but {graph} is not "
        "running inside another graph; add it to a graph as a subgraph node "
        "(`Graph(...).add(compiled, destinations=(...))`) or return a plain Command."
    )
    return RoutingError(msg)


def _stopped_after(interrupts: list[PendingInterrupt]) -> bool:
    """Whether a restored run had stopped at an ``interrupt_after`` breakpoint."""
    return any(
        p.kind == "breakpoint" and isinstance(p.value, dict) and p.value.get("when") == "after"
        for p in interrupts
    )


def _ships(tasks: list[Task], every: bool) -> bool:
    """Whether a superstep has tasks for an executor to run elsewhere: its ``Send``
    instances, or (``every``: a subgraph's run inside a shipped instance) every task; a
    subgraph node itself never ships (it drives its child from here)."""
    return any((every or task.payload is not None) and not task.spec.drives_child for task in tasks)


def _weak_doubt(run: Run) -> Callable[[dict[str, Any]], Awaitable[None]]:
    """``run``'s :meth:`Run._effect_in_doubt`, through a weak reference: the bound method
    would make the run and its effect log a cycle, which outlived every run (with all the
    run's state hanging from it) until the garbage collector came by."""
    ref = weakref.ref(run)

    async def in_doubt(found: dict[str, Any]) -> None:
        alive = ref()
        if alive is not None:  # a log that outlived its run has no one to tell
            await alive._effect_in_doubt(found)

    return in_doubt


class Run(RunState, Planning, TaskExecution):
    """One execution of a compiled graph (an ``invoke`` or ``stream`` call)."""

    def __init__(
        self,
        spec: GraphSpec,
        *,
        thread_id: str | None = None,
        journal: RunJournal | None = None,
        tracer: Tracer | None = None,
        sink: EventSink | None = None,
        namespace: tuple[str, ...] = (),
        run_id: str | None = None,
    ) -> None:
        self.spec = spec
        self.thread_id = thread_id
        self.journal = journal
        self.tracer: Tracer = tracer if tracer is not None else NOOP_TRACER
        self.sink = sink
        self.namespace = namespace
        self.run_id = run_id or uuid.uuid4().hex
        self.values: dict[str, Any] = {}
        self.step = 0
        self.seq = 0
        self.checkpoint_id: str | None = None
        #: The checkpoint that planned the current superstep (its finished tasks' writes are
        #: journaled under it), and whether the run was restored from a checkpoint.
        self.plan_id: str | None = None
        self.restored = False
        #: Decisions passed with ``invoke(resume=...)``, keyed by interrupt id.
        self.resume: dict[str, Any] = {}
        #: Every side effect of the run goes through here (exactly once, journaled if durable).
        self.effects = EffectLog(journal, self.resume)
        self.effects.on_doubt = _weak_doubt(self)
        #: What the restored checkpoint was waiting on, and what this run stopped on.
        self.restored_interrupts: list[PendingInterrupt] = []
        self.interrupts: list[PendingInterrupt] = []
        #: ``run_end`` was emitted (at the last barrier, before the final checkpoint).
        self.ended = False
        #: The final state built for the last commit's ride (``_ending_state``).
        self._ended_state: Schema | None = None
        #: The task whose error ended the last superstep, if one did.
        self.failed_task: Task | None = None
        #: Static breakpoints for this run (the compiled ones unless ``invoke`` overrides).
        self.interrupt_before = spec.interrupt_before
        self.interrupt_after = spec.interrupt_after
        #: How many tasks of a superstep may run at once (``None``: all of them).
        self.max_concurrency = spec.max_concurrency
        #: Where this run's ``Send`` instances run (``None``: here, the fast path).
        self.executor = spec.executor
        #: Ship plain tasks too, not just ``Send`` instances: set for the child run of a
        #: subgraph node's ``Send`` instance, whose whole body is what would have shipped.
        self.ship_plain = False
        #: Which sources of each part-way join have run since it last fired (by join index).
        self.arrived: dict[int, set[str]] = {}
        self.routed: dict[int, list[Any]] = {}
        #: ``invoke(deps=...)``: the caller's objects for this call, never checkpointed.
        self.deps: Any = NO_DEPS
        #: ``invoke(memory=...)``: the run's long-term memory store (``ctx.memory``), or None.
        self.memory: Any = None
        #: The run record's labels when a runner executes it (``ctx.labels``); nested runs
        #: share their parent's.
        self.labels: Mapping[str, str] = {}
        #: The event types :attr:`sink` acts on (``None``: every type). The others are still
        #: numbered and stored, just not handed to it: a runner's stop check acts on two
        #: types of a run's eight or so events, and each call it skipped was a coroutine.
        self.sink_types: frozenset[str] | None = None
        #: ``invoke(durability=...)``: when checkpoints commit (:mod:`tensorsketch.durable.modes`).
        self.durability: Durability = "sync"
        #: ``"exit"``: barriers passed since the last commit, and what they changed together
        #: (``None``: a full snapshot is due).
        self.uncommitted = 0
        self.unsaved: dict[str, list[Any] | None] | None = {}

    def position(self) -> Position:
        """Where this run stands, for the journal to checkpoint."""
        joins = snapshot(self.spec.joins, self.arrived) if self.arrived else ()
        return Position(values=self.values, step=self.step, seq=self.seq, joins=joins)

    def restore(self, restored: Restored) -> None:
        """Continue from a checkpoint the journal read back."""
        self.values = restored.values
        self.step = restored.step
        self.seq = max(self.seq, restored.seq)
        self.checkpoint_id = restored.checkpoint_id
        self.plan_id = restored.plan_id
        self.restored = True
        self.restored_interrupts = list(restored.interrupts)
        self.arrived = restore_arrivals(self.spec.joins, restored.joins)

    def fresh_tasks(self, data: Any) -> list[Task]:
        """Start over from the state's defaults, fold ``data`` in, and plan the first
        superstep (a run with nothing to resume)."""
        self.values = {}
        self.arrived = {}
        self.seed()
        self.apply_input(data)
        self.check_input()
        return self.entry_tasks()

    async def save_checkpoint(
        self,
        changed: dict[str, list[Any] | None] | None,
        tasks: list[Task],
        **options: Any,
    ) -> str:
        """Checkpoint this run through its journal and move its cursor to the new id (a
        failed superstep's checkpoint keeps the superstep's planning id)."""
        journal = self.journal
        assert journal is not None
        options.setdefault("parent_id", self.checkpoint_id)
        if self.uncommitted:  # "exit": this checkpoint also holds the barriers not committed
            unsaved = self.unsaved
            if changed is not None:
                changed = None if unsaved is None else merge_changes(unsaved, changed)
        try:
            checkpoint_id = await journal.checkpoint(
                self.position(), changed, plan_of(tasks), **options
            )
        except TypeError as exc:  # a value the serializer refuses: say which field holds it
            by = "the run's input" if options.get("source") == "input" else None
            found = unstorable_field(self.spec, self.values, journal.backend.serializer, by)
            if found is None:
                raise
            raise found from exc
        meta = options.get("meta") or {}
        self.uncommitted, self.unsaved = 0, {}
        self.checkpoint_id = checkpoint_id
        self.plan_id = str(meta.get("retry_of") or checkpoint_id)
        return checkpoint_id

    async def _effect_in_doubt(self, found: dict[str, Any]) -> None:
        """Stream an effect found in doubt (``effect_in_doubt``), with what was done."""
        step = found.get("step")
        await self.emit(
            "effect_in_doubt",
            node=found.get("node"),
            data=found,
            step=step if isinstance(step, int) else self.step,
        )

    async def emit(
        self,
        type: str,
        *,
        node: str | None = None,
        data: Any = None,
        step: int | None = None,
        namespace: tuple[str, ...] | None = None,
    ) -> None:
        """Send one event to the consumer (and the durable event log).

        ``namespace`` overrides the run's own, to forward a nested run's events.
        """
        sink = self.sink
        if sink is None:
            return
        # What _event does, inline: a call less for every event a streamed run emits.
        event = new_event(
            self.seq,
            type,
            node,
            self.run_id,
            self.thread_id,
            data,
            self.namespace if namespace is None else namespace,
            step,
            time.time(),
        )
        self.seq += 1
        journal = self.journal
        if journal is not None:
            journal.events.append(event)
        wanted = self.sink_types
        if wanted is None or type in wanted:
            await sink(event)

    def _event(
        self,
        type: str,
        *,
        node: str | None = None,
        data: Any = None,
        step: int | None = None,
        namespace: tuple[str, ...] | None = None,
    ) -> Event:
        """Number an event and add it to the durable log's buffer (the caller delivers it);
        :meth:`emit` does the same inline."""
        event = new_event(
            self.seq,
            type,
            node,
            self.run_id,
            self.thread_id,
            data,
            self.namespace if namespace is None else namespace,
            step,
            time.time(),
        )
        self.seq += 1
        if self.journal is not None:
            self.journal.events.append(event)
        return event

    async def execute(self, tasks: list[Task], max_steps: int) -> None:
        """Run supersteps until no task is left, checkpointing at every barrier."""
        journal = self.journal
        steps_run = 0
        # A run resumed from an interrupt_before stop goes past it (once).
        passed = any(
            p.kind == "breakpoint" and isinstance(p.value, dict) and p.value.get("when") == "before"
            for p in self.restored_interrupts
        )
        if not tasks and _stopped_after(self.restored_interrupts):
            await self._end_after_breakpoint()
            return
        while tasks:
            if steps_run >= max_steps:
                await self._too_many_steps(tasks, max_steps)
            held: list[Task] = []
            if self.spec.deferred:
                tasks, held = hold_deferred(tasks)
            step = self.step
            if self.interrupt_before and not passed:
                stop = self.breakpoint("before", tasks)
                if stop is not None:
                    await self.suspend(tasks + held, Interrupt(pending=[stop]))
                    return
            passed = False
            restored, self.restored = self.restored, False
            self.failed_task = None
            try:
                results = await self._superstep(tasks, step, restored)
            except Interrupt as exc:
                await self.suspend(tasks + held, exc)
                return
            except ParentCommand as exc:
                await self._handed_up(tasks + held, exc)
            except asyncio.CancelledError as exc:
                if self.uncommitted:
                    await self._commit_stopped(tasks + held, exc)
                raise
            except Exception as exc:
                if journal is not None:
                    await self.record_failure(tasks + held, exc)
                raise
            changed = self.barrier(tasks, results)
            self.effects.forget_attempts()
            ran, tasks = tasks, self.next_tasks(tasks)
            if held:
                tasks = with_held(tasks, held)
            self.step = step + 1
            steps_run += 1
            if await self._close_superstep(changed, ran, tasks, step):
                return

    async def _superstep(
        self, tasks: list[Task], step: int, restored: bool
    ) -> list[dict[str, Any]]:
        """Run one superstep's tasks where they run: shipped, alone, or in parallel."""
        if self.executor is not None and _ships(tasks, self.ship_plain):
            return await self._run_shipped(tasks, step, restored)
        if len(tasks) == 1:
            return [await self.run_task(tasks[0], step)]
        if self.journal is None:
            return await self.run_parallel(tasks, step)
        return await self._run_journaled(tasks, step, restored)

    async def _handed_up(self, tasks: list[Task], handed: ParentCommand) -> NoReturn:
        """A node returned ``Command(graph=Command.PARENT)``: a nested run stops here and
        the node running it takes the Command (and journals it); at the top level there is
        no parent, which fails the run naming the node."""
        if self.namespace:
            raise handed
        error = _no_parent(self.spec.name, handed)
        if self.journal is not None:
            await self.record_failure(tasks, error)
        raise error from None

    async def _commit_stopped(self, tasks: list[Task], cancelled: BaseException) -> None:
        """``durability="exit"``: a run stopped between barriers (cancelled: a runner's stop
        request, a caller that stopped reading) commits where it stopped — the last barrier,
        planning the superstep it was in, as ``"sync"`` would have left it."""
        try:
            await self.save_checkpoint({}, tasks, final=True)
        except Exception as exc:  # the stop goes on; a resume starts from the last commit
            cancelled.add_note(f"the stopped run's checkpoint could not be committed: {exc}")

    async def _too_many_steps(self, tasks: list[Task], max_steps: int) -> None:
        """Stop a run that hit ``max_steps`` with :class:`GraphRecursionError`; a run that
        commits on exit (``durability="exit"``) commits where it stopped first."""
        active = sorted({t.spec.name for t in tasks})
        msg = (
            f"exceeded {max_steps} supersteps without halting (still active: {active}); "
            "check the loop's exit condition, or raise `max_steps=` if the run really "
            "needs more steps."
        )
        if self.uncommitted:
            await self.save_checkpoint({}, tasks, final=True)
        raise GraphRecursionError(msg)

    async def _close_superstep(
        self,
        changed: dict[str, list[Any] | None],
        ran: list[Task],
        tasks: list[Task],
        step: int,
    ) -> bool:
        """Report and checkpoint a finished barrier that planned ``tasks``; ``True`` when an
        ``interrupt_after`` breakpoint stops the run here — after its last superstep too
        (nothing planned: resuming then just ends it, see :meth:`_end_after_breakpoint`)."""
        journal = self.journal
        stop = self.breakpoint("after", ran) if self.interrupt_after else None
        sink = self.sink
        ended = None
        if sink is not None:
            await self.emit("values", data=dict(self.values), step=step)
            if not tasks and stop is None:  # logged with the final checkpoint, sent once stored
                self.ended = True
                ended = self._event("run_end", data=dict(self.values), step=self.step)
        if stop is not None:
            self.interrupts = [stop]
            if sink is not None:
                await self.emit("interrupt", data={"interrupts": [stop.to_dict()]}, step=step)
        final = not tasks or stop is not None
        if journal is not None and not final and self.durability == "exit":
            self._pass_uncommitted(changed)
        elif journal is not None:
            meta = {"interrupts": [stop.to_dict()]} if stop is not None else None
            ending = self._ending_state if final else None
            await self.save_checkpoint(changed, tasks, final=final, meta=meta, ending=ending)
        wanted = self.sink_types
        if sink is not None and ended is not None and (wanted is None or "run_end" in wanted):
            await sink(ended)
        return stop is not None

    def _pass_uncommitted(self, changed: dict[str, list[Any] | None]) -> None:
        """``durability="exit"``: go past a barrier without committing it. What it changed
        waits for the run's last checkpoint; the next superstep gets a planning id of its
        own, so its finished tasks' writes (and a failure's ``retry_of``) never collide
        with another superstep's."""
        unsaved = self.unsaved
        self.unsaved = None if unsaved is None else merge_changes(unsaved, changed)
        self.uncommitted += 1
        self.plan_id = new_checkpoint_id()

    async def _end_after_breakpoint(self) -> None:
        """End a run resumed from an ``interrupt_after`` stop that planned nothing: no node
        runs; a checkpoint without the interrupt records that the thread completed, and
        ``run_end`` is logged with it (the stop itself emitted none)."""
        sink = self.sink
        ended = None
        if sink is not None:
            self.ended = True
            ended = self._event("run_end", data=dict(self.values), step=self.step)
        if self.journal is not None:
            await self.save_checkpoint({}, [], final=True, ending=self._ending_state)
        wanted = self.sink_types
        if sink is not None and ended is not None and (wanted is None or "run_end" in wanted):
            await sink(ended)

    def breakpoint(self, when: str, tasks: list[Task]) -> PendingInterrupt | None:
        """The static breakpoint ``tasks`` hit (``when``: ``"before"`` they run or
        ``"after"`` their barrier), or ``None``; its id is unique to the superstep."""
        names = self.interrupt_before if when == "before" else self.interrupt_after
        hit = list(dict.fromkeys(t.spec.name for t in tasks if t.spec.name in names))
        if not hit:
            return None
        step = self.step if when == "before" else self.step - 1
        return PendingInterrupt(
            id=f"breakpoint:{when}:{step}",
            kind="breakpoint",
            value={"when": when, "nodes": hit},
            node=hit[0],
        )

    async def _run_shipped(
        self, tasks: list[Task], step: int, restored: bool
    ) -> list[dict[str, Any]]:
        """A superstep whose ``Send`` instances run on the run's executor (see
        :mod:`tensorsketch.executors`); a durable one keeps per-branch commit."""
        executor = self.executor
        assert executor is not None
        if self.journal is not None:
            return await self._run_journaled(tasks, step, restored, executor)
        return await run_shipped(self, executor, tasks, step)

    async def _run_journaled(
        self, tasks: list[Task], step: int, restored: bool, executor: Executor | None = None
    ) -> list[dict[str, Any]]:
        """Run a durable superstep with per-branch commit: each task's writes are journaled
        as it finishes, and a resumed superstep runs only the tasks that had not."""
        journal = self.journal
        assert journal is not None
        keys = [task.key for task in tasks]
        done = await journal.finished_writes(self.plan_id, keys) if restored else {}
        todo = [task for index, task in enumerate(tasks) if index not in done] if done else tasks
        log = journal.write_log(self.plan_id)

        async def done_task(task: Task, writes: dict[str, Any]) -> None:
            try:
                await log.add(task.key, writes)
            except TypeError as exc:  # a value the serializer refuses: say which and whose
                serializer = journal.backend.serializer
                by = f"node {task.spec.name!r}"
                found = unstorable_field(self.spec, writes, serializer, by)
                if found is None:
                    raise
                raise found from exc

        try:
            if executor is None:
                fresh = await self.run_parallel(todo, step, done_task)
            else:
                fresh = await run_shipped(self, executor, todo, step, done_task, restored)
        except BaseException as exc:
            # A failing task keeps its finished siblings; a suspension re-plans the superstep
            # under a new checkpoint, and a cancelled run stops where it is.
            keep = isinstance(exc, Exception) and not isinstance(exc, Interrupt)
            try:
                await log.close(keep=keep)
            except Exception as store_exc:
                exc.add_note(f"finished tasks could not be journaled: {store_exc}")
            raise
        await log.close(keep=False)
        if not done:
            return fresh
        ran = iter(fresh)
        return [done[i] if i in done else next(ran) for i in range(len(tasks))]

    async def record_failure(self, tasks: list[Task], exc: Exception) -> None:
        """Save a checkpoint that says which task failed and why (``get_state`` shows it); it
        plans the same superstep, so invoking the thread again retries just that."""
        journal = self.journal
        if journal is None or isinstance(exc, _STORE_ERRORS):
            return  # the store itself failed: there is nothing to write to
        task = self.failed_task or tasks[0]
        error = {
            "node": task.spec.name,
            "instance": task.instance,
            "step": self.step,
            "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "message": str(exc)[:2000],
        }
        try:
            meta = {"error": error, "retry_of": self.plan_id}
            await self.save_checkpoint(
                {}, tasks, source="error", meta=await self._journaled(meta), final=True
            )
        except Exception as store_exc:
            exc.add_note(f"the failure could not be recorded in a checkpoint: {store_exc}")

    async def suspend(self, tasks: list[Task], exc: Interrupt) -> None:
        """Stop at this superstep to wait on ``exc.pending``; resuming runs it again.

        Only the writes the interrupting nodes asked for (``Interrupt(writes=...)``) are
        folded; the checkpoint plans the same tasks at the same step, so on resume every
        journaled effect of the superstep replays under the same key.
        """
        pending: dict[str, list[Any]] = {}
        writers: dict[str, list[str]] = {}
        nodes: dict[str, str] = {}
        for task, writes in exc.parts:
            for p in exc.pending:
                nodes.setdefault(p.id, task.spec.name)
            for name, value in writes.items():
                if name not in task.spec.writes:
                    if name in task.spec.node.optional_outputs():
                        continue  # an extra the state does not keep
                    msg = (
                        f"node {task.spec.name!r} suspended with a write to {name!r}, which is "
                        "not one of its Out fields; write only Out fields on suspension."
                    )
                    raise NodeError(msg)
                value = self.spec.adapter(name).validate_python(value)
                pending.setdefault(name, []).append(value)
                writers.setdefault(name, []).append(task.spec.name)
        changed = self._fold(pending, writers) if pending else {}
        self.interrupts = [
            p if p.node is not None else p.model_copy(update={"node": nodes.get(p.id)})
            for p in exc.pending
        ]
        if self.sink is not None:
            await self.emit(
                "interrupt",
                data={"interrupts": [p.to_dict() for p in self.interrupts]},
                step=self.step,
            )
        if self.journal is not None:
            meta = {"interrupts": [p.to_dict() for p in self.interrupts]}
            await self.save_checkpoint(
                changed,
                tasks,
                source="interrupt",
                meta=await self._journaled(meta),
                final=True,
                ending=self._ending_state,
            )

    async def _journaled(self, meta: dict[str, Any]) -> dict[str, Any]:
        """``meta`` of a checkpoint that stops part-way through a superstep, with the keys
        the superstep journaled so far: a fork from it inherits exactly those (lineage)."""
        journal = self.journal
        assert journal is not None
        keys, unlisted = await journaled_keys(journal, self.step)
        if unlisted:
            meta = {**meta, "journaled_unlisted": True}
        return {**meta, "journaled": keys} if keys else meta

    def _ending_state(self) -> Schema:
        """:meth:`result_state` as the last checkpoint is about to commit (a run record's
        outcome rides that commit); kept, so the run's result is not validated twice."""
        state = self.result_state()
        self._ended_state = state
        return state

    def result_state(self) -> Schema:
        """What ``invoke`` returns: the validated final state, or — for a suspended run,
        whose required fields may not be set yet — the current values; with run info."""
        ended = self._ended_state
        if ended is not None:  # built for the last commit: only its checkpoint id moved
            attach_run_info(
                ended,
                interrupts=tuple(self.interrupts),
                thread_id=self.thread_id,
                checkpoint_id=self.checkpoint_id,
            )
            return ended
        if self.interrupts:
            try:
                state = self.final_state()
            except (EmptyChannelError, NodeError):
                state = self.state_view()
        else:
            state = self.final_state()
        attach_run_info(
            state,
            interrupts=tuple(self.interrupts),
            thread_id=self.thread_id,
            checkpoint_id=self.checkpoint_id,
        )
        return state
