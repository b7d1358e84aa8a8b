"""The worker side of the executor seam: run shipped ``Send`` instances with the engine's
own task code, on whatever loop the executor provides, with no store."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from tensorsketch.context import NoDeps
from tensorsketch.effects import EffectCall, EffectLog, decision_key
from tensorsketch.errors import ExecutorError, TransactionUnsupportedError
from tensorsketch.events import Event
from tensorsketch.pregel.loop import Run
from tensorsketch.pregel.seam import (
    Executor,
    OnEffect,
    SendCall,
    Superstep,
    TaskOutcome,
    executors,
    mark_suspended,
)
from tensorsketch.pregel.spec import GraphSpec, Task
from tensorsketch.suspension import Interrupt

__all__ = ["InProcessExecutor", "resolve_executor", "run_calls"]


class InProcessExecutor(Executor):
    """The default: every task on the caller's event loop, through the engine's fast path.

    Given to ``compile``/``invoke`` (or as ``"inprocess"``) it selects that path; its
    :meth:`run` runs the calls through :func:`run_calls` on the current loop, for composing
    executors.
    """

    name = "inprocess"

    async def run(self, graph: GraphSpec, work: Superstep) -> AsyncIterator[list[TaskOutcome]]:
        yield await run_calls(graph, work)


#: A shipped instance's ``deps``: the caller's objects (connections, clients) stay with it.
_NOT_SHIPPED = NoDeps(
    "`deps=` are not shipped to an executor's workers (connections and clients stay in the "
    "calling process); read `ctx.deps` in a plain node, which runs in-process, or invoke "
    "with `executor='inprocess'`."
)

#: The outcome of the call the running code belongs to (set per call's asyncio task).
_CURRENT: contextvars.ContextVar[TaskOutcome] = contextvars.ContextVar("tensorsketch_call")


class _Recorder(EffectLog):
    """The effect log of shipped instances: replays what earlier attempts journaled, runs the
    rest, and keeps each instance's results for the caller to journal."""

    __slots__ = ("_durable", "_on_effect", "_replay")

    def __init__(self, work: Superstep, calls: Sequence[SendCall], on_effect: OnEffect | None):
        super().__init__(None, work.resume)
        self._durable = work.durable
        self._on_effect = on_effect
        self._replay: dict[str, Any] = {}
        for call in calls:
            self._replay.update(call.replay)

    @property
    def durable(self) -> bool:
        return self._durable

    async def once(self, key: str, fn: Callable[[], Any], call: EffectCall | None = None) -> Any:
        del call  # the worker keeps no intents: its manifest is journaled by the caller
        found, value = await self.peek(key)
        if found:
            return value
        result = fn()
        if inspect.isawaitable(result):
            result = await result
        await self.record(key, result)
        return result

    async def transaction(self, key: str, fn: Callable[[Any], Any]) -> Any:
        msg = (
            f"ctx.transaction ({key!r}) cannot run on an executor's worker: the run's store "
            "stays in the calling process. Run the node in process (no executor), or use "
            "ctx.step with an idempotency_key your database dedupes by."
        )
        raise TransactionUnsupportedError(msg)

    async def peek(self, key: str) -> tuple[bool, Any]:
        if key in self._replay:
            return True, self._replay[key]
        return False, None

    async def record(self, key: str, value: Any) -> None:
        if key in self._replay:
            return  # the first write wins, as in the journal
        # Kept for the whole batch: a retried attempt of the node replays it (in memory, the
        # engine keeps results only while a retry can use them; the outcome is the same).
        self._replay[key] = value
        outcome = _CURRENT.get()
        outcome.effects.append((key, value))
        if self._on_effect is not None:
            await self._on_effect(outcome.index, key, value)

    async def decision(self, step: int, interrupt_id: str) -> tuple[bool, Any]:
        key = decision_key(step, interrupt_id)
        if key in self._replay:
            return True, self._replay[key]
        if interrupt_id in self.resume:
            _CURRENT.get().decisions.append(key)
            return True, self.resume[interrupt_id]
        return False, None


async def _collect(event: Event) -> None:
    _CURRENT.get().events.append(
        (event.type, event.node, event.data, event.step, tuple(event.namespace))
    )


async def run_calls(
    graph: GraphSpec,
    work: Superstep,
    calls: Sequence[SendCall] | None = None,
    *,
    on_effect: OnEffect | None = None,
) -> list[TaskOutcome]:
    """Run shipped calls on this event loop (a worker's) and return their outcomes.

    The batch behaves like a superstep of its own: at most ``work.max_concurrency`` calls at
    once, started in order, and the first failure cancels the calls still running (their
    recorded effects still come back). Nothing here touches a store.

    :param graph: the compiled graph's spec, as the executor shipped it.
    :param work: the superstep (its ``calls`` unless ``calls`` names a batch of them).
    :param on_effect: awaited the moment an effect completes (an executor that keeps a
        worker-side record, so a retried batch replays instead of repeating it).
    """
    return await _Batch(graph, work, list(work.calls if calls is None else calls), on_effect).run()


class _Batch:
    """One batch of shipped calls on a worker: a detached run with no store."""

    def __init__(
        self, graph: GraphSpec, work: Superstep, calls: list[SendCall], on_effect: OnEffect | None
    ) -> None:
        self.graph = graph
        self.work = work
        self.calls = calls
        run = self.run_ = Run(
            graph,
            thread_id=work.thread_id,
            sink=_collect if work.streaming else None,
            namespace=work.namespace,
            run_id=work.run_id,
        )
        run.values = work.values
        run.executor = None  # the calls run here: a nested run on a worker ships nothing
        run.effects = _Recorder(work, calls, on_effect)
        run.deps = _NOT_SHIPPED
        run.resume = work.resume
        self.outcomes = [TaskOutcome(call.index) for call in calls]
        self.futures: list[asyncio.Task[None]] = []
        self.stopping = False

    async def run(self) -> list[TaskOutcome]:
        loop = asyncio.get_running_loop()
        count = len(self.calls)
        limit = self.work.max_concurrency
        if limit is not None and count > limit:
            order = iter(range(count))
            self.futures.extend(loop.create_task(self.worker(order)) for _ in range(limit))
        else:
            self.futures.extend(loop.create_task(self.one(i)) for i in range(count))
        if self.futures:
            try:
                await asyncio.wait(self.futures)
            except asyncio.CancelledError:
                for future in self.futures:
                    future.cancel()
                await asyncio.wait(self.futures)
                raise
        return self.outcomes

    async def worker(self, order: Iterator[int]) -> None:
        for position in order:
            if self.stopping:
                return
            await self.one(position)

    async def one(self, position: int) -> None:
        call, outcome = self.calls[position], self.outcomes[position]
        _CURRENT.set(outcome)
        spec = self.graph.nodes.get(call.node)
        try:
            if spec is None:
                msg = (
                    f"the worker's copy of graph {self.graph.name!r} has no node {call.node!r}; "
                    "run the same version of the graph on the workers as on the caller."
                )
                raise ExecutorError(msg)
            task = Task(spec, call.payload, call.instance)
            outcome.writes = await self.run_.run_task(task, self.work.step)
            outcome.status = "done"
        except Interrupt as exc:
            mark_suspended(outcome, exc)
        except asyncio.CancelledError:
            if not self.stopping:
                raise
            outcome.status = "cancelled"  # a sibling failed: like an in-process superstep
        except Exception as exc:
            outcome.status = "failed"
            outcome.error = exc
            self.stop()

    def stop(self) -> None:
        """The first failure cancels the batch's other calls."""
        if self.stopping:
            return
        self.stopping = True
        current = asyncio.current_task()
        for future in self.futures:
            if future is not current:
                future.cancel()


def resolve_executor(value: object, where: str) -> Executor | None:
    """``executor=`` as the engine keeps it: ``None`` for the in-process path, a name built
    through the ``tensorsketch_executors`` hook, or an :class:`Executor` as is."""
    if value is None or isinstance(value, InProcessExecutor):
        return None
    if isinstance(value, str):
        return resolve_executor(executors.create(value), where)
    if isinstance(value, Executor):
        return value
    msg = (
        f"{where} takes an executor name (e.g. 'ray'), a tensorsketch.executors.Executor, or "
        f"None for in-process; got {type(value).__name__} {value!r:.80}."
    )
    raise TypeError(msg)
