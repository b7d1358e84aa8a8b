"""``CompiledGraph``: run a validated graph — invoke, stream, resume, inspect, fork, replay."""

from __future__ import annotations

import asyncio
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Mapping,
    Sequence,
)
from contextlib import aclosing
from typing import Any, Generic, TypeVar

from tensorsketch import threads
from tensorsketch.context import Context, MemoryBinding, RunHandle
from tensorsketch.durable.blobs import hydrate
from tensorsketch.durable.checkpoint import Checkpoint
from tensorsketch.durable.event_rows import read_stored_events
from tensorsketch.durable.lineage import ForkEffects, check_fork_effects, inherit
from tensorsketch.durable.modes import Durability
from tensorsketch.durable.reads import (
    NEEDS_LOOP,
    iter_history,
    load_chain,
    read_checkpoint,
    read_checkpoint_blocking,
    recorded_decisions,
)
from tensorsketch.effect_keys import step_key
from tensorsketch.errors import CheckpointDecodeError, ExecutorError
from tensorsketch.events import Event
from tensorsketch.graph_structure import GraphStructure
from tensorsketch.observability.tracing import Tracer
from tensorsketch.pregel.build import suggest
from tensorsketch.pregel.driver import (
    MAX_THREAD_ID,
    check_durable_args,
    check_thread_id,
    drive,
    start_run,
)
from tensorsketch.pregel.loop import Run
from tensorsketch.pregel.replay import NodeReplay, replay_node
from tensorsketch.pregel.restore import validated_values
from tensorsketch.pregel.run_info import attach_checkpoint_info, attach_subgraphs
from tensorsketch.pregel.seam import Executor
from tensorsketch.pregel.spec import EventSink, GraphSpec, Task
from tensorsketch.pregel.state import state_writes
from tensorsketch.pregel.subgraph import SUBGRAPH_CALL, SubgraphNode
from tensorsketch.runtime.backends.base import Backend, StoredCheckpoint
from tensorsketch.runtime.loops import run_sync
from tensorsketch.schema import Schema
from tensorsketch.suspension import Interrupt

__all__ = ["MAX_THREAD_ID", "CompiledGraph"]

S = TypeVar("S", bound=Schema)
T = TypeVar("T")

_DONE = object()


class _Failure:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _inner_breakpoints(parent: Run, node: str) -> tuple[list[str] | None, list[str] | None]:
    """The breakpoints a subgraph node passes to its child run: the parent run's
    ``"<node>.<inner>"`` names as ``"<inner>"``, beside the child's own (``None``: none)."""
    prefix = f"{node}."
    found: list[list[str] | None] = []
    for names in (parent.interrupt_before, parent.interrupt_after):
        inner = [n[len(prefix) :] for n in names if n.startswith(prefix)]
        found.append(inner or None)
    return found[0], found[1]


def _inside_subgraph(event: Event, depth: int) -> bool:
    """Whether ``event`` comes from inside a subgraph node below the stream's own level."""
    suffix = f":{SUBGRAPH_CALL}"
    return any(part.endswith(suffix) for part in event.namespace[depth:])


class CompiledGraph(Generic[S]):
    """A validated, immutable graph. Safe to run many times and concurrently."""

    def __init__(self, spec: GraphSpec) -> None:
        self._spec = spec

    @property
    def name(self) -> str:
        return self._spec.name

    @property
    def state_schema(self) -> type[S]:
        """The state ``Schema`` this graph runs over."""
        schema: type[S] = self._spec.state_schema  # type: ignore[assignment]
        return schema

    @property
    def structure(self) -> GraphStructure:
        """Nodes, static edges and conditional branches as plain data."""
        return self._spec.structure

    @property
    def spec(self) -> GraphSpec:
        """The engine's view of the graph (for tools built on the runtime)."""
        return self._spec

    # -- running ----------------------------------------------------------------------------

    async def invoke(
        self,
        input: S | dict[str, Any] | None = None,
        *,
        thread_id: str | None = None,
        backend: Backend | None = None,
        max_steps: int = 25,
        tracer: Tracer | None = None,
        namespace: tuple[str, ...] = (),
        resume: Mapping[str, Any] | None = None,
        interrupt_before: Sequence[str] | str | None = None,
        interrupt_after: Sequence[str] | str | None = None,
        max_concurrency: int | None = None,
        executor: str | Executor | None = None,
        run_id: str | None = None,
        deps: Any = None,
        memory: MemoryBinding | None = None,
        durability: Durability = "sync",
    ) -> S:
        """Run to completion and return the final, validated state.

        :param input: state fields to seed (a dict or a state instance). On resume it is
            applied on top of the checkpointed state before continuing.
        :param thread_id: with ``backend``, makes the run durable: a later call with the same
            thread resumes from the latest checkpoint, replaying journaled effects.
        :param max_steps: the most supersteps this call may run (the guard against loops that
            never exit).
        :param resume: decisions for a suspended thread, keyed by interrupt id (tool-call ids
            for approvals), e.g. ``{"call_1": True}``.
        :param interrupt_before: static breakpoints for this call, replacing the compiled
            ones: stop before these nodes run (``[]`` turns the compiled ones off).
        :param interrupt_after: likewise, stop after these nodes' superstep.
        :param max_concurrency: the most tasks of one superstep running at once for this call
            (overrides ``compile(max_concurrency=...)``; ``None`` keeps the compiled limit).
        :param executor: where this call's ``Send`` instances run (overrides
            ``compile(executor=...)``; ``"inprocess"`` for the caller's loop, ``None`` keeps
            the compiled choice).
        :param run_id: the id this call's events and ``ctx.run_id`` carry (default: a new
            one); an ``AsyncRunner`` passes its run record's id.
        :param deps: this call's dependencies — a database pool, an HTTP client, settings —
            which every node, tool and middleware reads as ``ctx.deps`` (nested graphs and
            ``Send`` instances in-process too). They are never checkpointed: a resumed thread
            gets whatever its resuming call passes.
        :param memory: the long-term memory store (a :class:`tensorsketch.memory.MemoryStore`)
            nodes and tools read as ``ctx.memory``; in a durable run its reads and writes are
            journaled, so a resumed thread sees what the first attempt saw and writes nothing
            twice. Like ``deps``, never checkpointed; nested graphs share it.
        :param durability: when a durable run commits its checkpoints: ``"sync"`` (default)
            before each next superstep, ``"async"`` while the next superstep runs (at most one
            behind), ``"exit"`` only when the run ends, suspends or fails. Journaled effects
            stay exactly-once in every mode (:mod:`tensorsketch.durable.modes`); nested
            graphs use the same mode.

        A run that suspends (an approval, ``interrupt()``, a durable timer) returns instead of
        raising; ``run_info(state)`` (also ``state.__tensorsketch_run__``) says so and lists
        what it waits for.
        """
        run = start_run(
            self._spec,
            thread_id=thread_id,
            backend=backend,
            tracer=tracer,
            sink=None,
            namespace=namespace,
            interrupt_before=interrupt_before,
            interrupt_after=interrupt_after,
            max_concurrency=max_concurrency,
            executor=executor,
            run_id=run_id,
            deps=deps,
            durability=durability,
        )
        _attach_memory(run, memory)
        await drive(run, input, max_steps, resume)
        state: S = run.result_state()  # type: ignore[assignment]
        return state

    def stream(
        self,
        input: S | dict[str, Any] | None = None,
        *,
        thread_id: str | None = None,
        backend: Backend | None = None,
        max_steps: int = 25,
        tracer: Tracer | None = None,
        buffer: int = 256,
        namespace: tuple[str, ...] = (),
        resume: Mapping[str, Any] | None = None,
        interrupt_before: Sequence[str] | str | None = None,
        interrupt_after: Sequence[str] | str | None = None,
        max_concurrency: int | None = None,
        executor: str | Executor | None = None,
        run_id: str | None = None,
        deps: Any = None,
        subgraphs: bool = False,
        memory: MemoryBinding | None = None,
        durability: Durability = "sync",
    ) -> AsyncIterator[Event]:
        """Run the graph and yield its events as they happen.

        The buffer is bounded: when the consumer falls behind, the run pauses. Stopping the
        iteration early cancels the run. If the run fails, every event up to the failure is
        delivered and then the original exception is raised. The options are
        :meth:`invoke`'s (``deps=`` included).

        :param subgraphs: also yield the events from inside subgraph nodes, each with its
            ``namespace`` path (``("Research:subgraph", ...)``); without it a subgraph node
            shows as its own ``node_start`` / ``node_end`` (and what it suspends on).
        """
        return self._events(
            input,
            thread_id=thread_id,
            backend=backend,
            max_steps=max_steps,
            tracer=tracer,
            buffer=buffer,
            namespace=namespace,
            resume=resume,
            interrupt_before=interrupt_before,
            interrupt_after=interrupt_after,
            max_concurrency=max_concurrency,
            executor=executor,
            run_id=run_id,
            deps=deps,
            subgraphs=subgraphs,
            memory=memory,
            durability=durability,
        )

    async def _events(
        self,
        input: S | dict[str, Any] | None,
        *,
        thread_id: str | None = None,
        backend: Backend | None = None,
        max_steps: int = 25,
        tracer: Tracer | None = None,
        buffer: int = 256,
        namespace: tuple[str, ...] = (),
        resume: Mapping[str, Any] | None = None,
        interrupt_before: Sequence[str] | str | None = None,
        interrupt_after: Sequence[str] | str | None = None,
        max_concurrency: int | None = None,
        executor: str | Executor | None = None,
        run_id: str | None = None,
        deps: Any = None,
        subgraphs: bool = False,
        memory: MemoryBinding | None = None,
        durability: Durability = "sync",
    ) -> AsyncGenerator[Event, None]:
        """:meth:`stream`'s body (an async generator: closed at once when its consumer
        stops early)."""
        if buffer < 1:
            msg = f"stream(buffer=...) must be at least 1, got {buffer}."
            raise ValueError(msg)
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=buffer)
        run = start_run(
            self._spec,
            thread_id=thread_id,
            backend=backend,
            tracer=tracer,
            sink=queue.put,
            namespace=namespace,
            interrupt_before=interrupt_before,
            interrupt_after=interrupt_after,
            max_concurrency=max_concurrency,
            executor=executor,
            run_id=run_id,
            deps=deps,
            durability=durability,
        )
        _attach_memory(run, memory)

        async def produce() -> None:
            try:
                await drive(run, input, max_steps, resume)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                await queue.put(_Failure(exc))
                return
            await queue.put(_DONE)

        producer = asyncio.get_running_loop().create_task(produce())
        depth = len(namespace)
        try:
            while True:
                item = await queue.get()
                if item is _DONE:
                    break
                if isinstance(item, _Failure):
                    raise item.exc
                if not subgraphs and len(item.namespace) > depth and _inside_subgraph(item, depth):
                    continue
                yield item
        finally:
            if not producer.done():
                producer.cancel()
            try:
                await producer
            except asyncio.CancelledError:
                pass

    def _start_sinking(
        self,
        input: S | dict[str, Any] | None,
        sink: EventSink,
        *,
        thread_id: str,
        backend: Backend,
        max_steps: int = 25,
        tracer: Tracer | None = None,
        resume: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        deps: Any = None,
        memory: MemoryBinding | None = None,
        labels: Mapping[str, str] | None = None,
        durability: Durability = "sync",
        sink_types: frozenset[str] | None = None,
        on_events: Callable[[bool], None] | None = None,
    ) -> tuple[Run, Coroutine[Any, Any, None]]:
        """:meth:`invoke`'s run, handing every event — the ones :meth:`stream` yields,
        stored the same way — of the ``sink_types`` (``None``: all) to ``sink`` as it is
        emitted, in the run's own task: no queue and no producer task between the run and
        its one consumer (the runner), whose check of each event runs at that very point of
        the run. ``labels`` are ``ctx.labels``; ``on_events`` is called after each commit
        that stored events of the run (its thread's, not a durable subgraph's), with whether
        it was the run's last.

        Returns the run and the coroutine that drives it, which the caller awaits itself
        (then ``run.result_state()`` is what :meth:`invoke` returns): a coroutine of this
        method's around it would be one more frame resumed at every one of the run's
        waits."""
        run = start_run(
            self._spec,
            thread_id=thread_id,
            backend=backend,
            tracer=tracer,
            sink=sink,
            namespace=(),
            run_id=run_id,
            deps=deps,
            durability=durability,
        )
        _attach_memory(run, memory)
        run.labels = dict(labels or {})
        run.sink_types = sink_types
        if run.journal is not None:
            run.journal.on_events = on_events
        return run, drive(run, input, max_steps, resume)

    async def replay(
        self,
        thread_id: str,
        backend: Backend,
        *,
        since: int = 0,
        follow: bool = False,
        until: Callable[[], Awaitable[bool]] | None = None,
        poll_interval: float = 0.5,
        wait: Callable[[float], Awaitable[bool]] | None = None,
        quiet: Callable[[], bool] | None = None,
    ) -> AsyncIterator[Event]:
        """Yield the persisted events of a thread with ``seq >= since``, in order.

        ``follow=True`` live-tails a run that is going on — in this process or another one
        writing to the same backend: after the stored events it keeps yielding new ones as
        they are committed, until a ``run_end`` or ``interrupt`` event (the run finished or
        suspended) — or, when ``until`` is given, until ``until()`` says the run stopped
        moving and no event is left (a thread resumed later goes on past an ``interrupt``).
        New events are looked for quickly at first and then every ``poll_interval`` seconds
        at most; no event is skipped or repeated. ``wait``, when given, is awaited instead of
        sleeping between two looks, with the delay it would have slept; it returns whether
        the run moved (look again at once, and quickly after): a runner waits there on its
        own signal for a run it executes instead of polling the store. ``quiet``, when given,
        says whether nothing was committed since the last look began (a runner knows it of a
        run whose commits it sees): a look that found events is then not followed by another
        at once.
        """
        check_thread_id(thread_id)
        if not poll_interval > 0:
            msg = f"`poll_interval` must be a positive number of seconds, got {poll_interval!r}."
            raise ValueError(msg)
        cursor = since
        delay = 0.01
        while True:
            stored_events = await read_stored_events(backend, thread_id, cursor)
            last_type = None
            for event in stored_events:
                cursor = event.seq + 1
                last_type = event.type
                yield event
            if not follow:
                return
            if last_type in ("run_end", "interrupt") and until is None:
                return
            if stored_events:
                delay = 0.01
                if quiet is None or not quiet():
                    continue
            if until is not None and await until():
                # One last read: events committed just before the run stopped moving.
                if not await backend.read_events(thread_id, cursor):
                    return
                continue
            if wait is None:
                await asyncio.sleep(delay)
            elif await wait(delay):
                delay = 0.01
                continue
            delay = min(delay * 2, poll_interval)

    # -- inspecting -------------------------------------------------------------------------

    async def aget_history(
        self,
        thread_id: str,
        backend: Backend,
        *,
        limit: int | None = None,
        before: str | None = None,
    ) -> list[Checkpoint]:
        """The checkpoints of the thread's current branch, oldest first.

        ``limit`` keeps the newest ``limit`` of them; ``before`` (a checkpoint id) ends the
        page just before that checkpoint, so ``before=page[0].id`` reads the page before.
        Built on :meth:`aiter_history`: a page reads and rebuilds only its own checkpoints
        (each from its short chain of deltas), so paging through a long thread costs about
        the size of each page.
        """
        check_thread_id(thread_id)
        _check_limit(limit)
        page: list[Checkpoint] = []
        async with aclosing(iter_history(backend, thread_id, before=before)) as newest_first:
            async for checkpoint in newest_first:
                page.append(checkpoint)
                if len(page) == limit:
                    break
        page.reverse()
        return page

    def aiter_history(
        self,
        thread_id: str,
        backend: Backend,
        *,
        limit: int | None = None,
        before: str | None = None,
    ) -> AsyncIterator[Checkpoint]:
        """The checkpoints of the thread's current branch, newest first, read lazily.

        What :meth:`aget_history` returns, in the other order and one at a time: rows are
        read a page per round trip and each checkpoint is rebuilt when it is reached, so
        stopping early (``break``) reads only what was used, and walking a 20,000-step
        thread holds one page at a time, never the whole history. ``limit`` stops after that
        many; ``before`` starts just before that checkpoint (a ``KeyError`` if it is not on
        the current branch, raised once the branch has been walked).
        """
        check_thread_id(thread_id)
        _check_limit(limit)
        return _take(iter_history(backend, thread_id, before=before), limit)

    def check_run_input(
        self,
        input: Any = None,
        *,
        thread_id: str | None = None,
        where: str = "invoke()",
        example: str = "invoke({'query': ...})",
    ) -> None:
        """Refuse now what :meth:`invoke` would refuse later: input that is not this graph's
        state (a dict of its fields or a state instance, each value valid for its field) and
        a thread id no store can keep. A run queued for later (``AsyncRunner.submit``, a
        schedule) is checked with it, so a bad request fails when it is made.

        :param where: / :param example: the call the caller made and one of the right shape,
            for the messages (a task API says ``input``, not ``invoke()``).
        :raises TypeError: / :raises ValueError: naming what is wrong, as ``invoke`` would.
        """
        if thread_id is not None:
            check_thread_id(thread_id)
        if input is not None:
            state_writes(self._spec, input, where, example)

    async def aget_state(
        self, thread_id: str, backend: Backend, *, subgraphs: bool = False
    ) -> S | None:
        """The latest checkpointed state of the thread, or ``None`` if it has none.

        Reads only the latest checkpoint's chain of deltas (:meth:`Backend.read_chain`), so
        it costs about the state's size, however long the thread's history is. With
        ``subgraphs``, ``run_info(state).subgraphs`` holds the state of every subgraph node
        the next superstep runs that has started, nested to any depth.
        """
        check_thread_id(thread_id)
        latest = await read_checkpoint(backend, thread_id)
        if latest is None:
            return None
        state = self._state_at(latest, await recorded_decisions(backend, latest))
        if subgraphs:
            nested = await self._subgraph_states(latest, backend)
            if nested:
                attach_subgraphs(state, nested)
        return state

    async def _subgraph_states(self, checkpoint: Checkpoint, backend: Backend) -> dict[str, Any]:
        found: dict[str, Any] = {}
        counts: dict[str, int] = {}
        for name, payload in checkpoint.tasks:
            instance = ""
            if payload is not None:
                instance = f"#{counts.get(name, 0)}"
                counts[name] = counts.get(name, 0) + 1
            spec = self._spec.nodes.get(name)
            if spec is None or not isinstance(spec.node, SubgraphNode):
                continue
            key = step_key(checkpoint.step, name, instance, 0, SUBGRAPH_CALL)
            child = await spec.node.graph.aget_state(
                f"{checkpoint.thread_id}/{key}", backend, subgraphs=True
            )
            if child is not None:
                found[f"{name}{instance}"] = child
        return found

    async def aget_state_at(self, thread_id: str, backend: Backend, checkpoint_id: str) -> S:
        """The state at one checkpoint of the thread."""
        check_thread_id(thread_id)
        if not isinstance(checkpoint_id, str):
            msg = (
                f"checkpoint_id must be a str, got {type(checkpoint_id).__name__} "
                f"{checkpoint_id!r}; take a checkpoint's `.id` from get_history()."
            )
            raise TypeError(msg)
        found = await read_checkpoint(backend, thread_id, checkpoint_id)
        if found is None:
            msg = (
                f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}; take a checkpoint "
                "id from get_history() of the same thread and backend."
            )
            raise KeyError(msg)
        return self._state_at(found, await recorded_decisions(backend, found))

    def _state_at(self, checkpoint: Checkpoint, decisions: dict[str, Any] | None = None) -> S:
        values = validated_values(self._spec, checkpoint)
        state: S = self.state_schema.model_construct(**values)  # type: ignore[assignment]
        attach_checkpoint_info(state, checkpoint, decisions)
        return state

    def get_state(self, thread_id: str, backend: Backend, *, subgraphs: bool = False) -> S | None:
        """Sync form of :meth:`aget_state`: on the calling thread where the backend can read
        without an event loop (SQLite, memory), else on a private loop."""
        check_thread_id(thread_id)
        if subgraphs:
            return run_sync(self.aget_state(thread_id, backend, subgraphs=True))
        latest = read_checkpoint_blocking(backend, thread_id)
        if latest is NEEDS_LOOP or (latest is not None and latest.metadata.get("interrupts")):
            # A suspended thread's recorded decisions are read from the journal too.
            return run_sync(self.aget_state(thread_id, backend))
        return None if latest is None else self._state_at(latest)

    def get_history(
        self,
        thread_id: str,
        backend: Backend,
        *,
        limit: int | None = None,
        before: str | None = None,
    ) -> list[Checkpoint]:
        """Sync form of :meth:`aget_history`."""
        return run_sync(self.aget_history(thread_id, backend, limit=limit, before=before))

    # -- thread administration (see tensorsketch.threads) ----------------------------------

    async def adelete_thread(self, thread_id: str, backend: Backend) -> None:
        """Remove the thread's run records, checkpoints, effect journal, events and lease; a
        thread another process is running, or one with a queued or running run, is refused
        with :class:`ThreadBusyError` and nothing is removed."""
        check_thread_id(thread_id)
        await threads.delete_thread(backend, thread_id)

    def delete_thread(self, thread_id: str, backend: Backend) -> None:
        """Sync form of :meth:`adelete_thread`."""
        run_sync(self.adelete_thread(thread_id, backend))

    async def aprune_thread(self, thread_id: str, backend: Backend, *, keep: int) -> int:
        """Keep the thread's newest ``keep`` checkpoints and remove older ones (returns how
        many); every kept checkpoint still resumes, reads and forks as before."""
        check_thread_id(thread_id)
        return await threads.prune_thread(backend, thread_id, keep)

    def prune_thread(self, thread_id: str, backend: Backend, *, keep: int) -> int:
        """Sync form of :meth:`aprune_thread`."""
        return run_sync(self.aprune_thread(thread_id, backend, keep=keep))

    async def fork(
        self,
        backend: Backend,
        thread_id: str,
        checkpoint_id: str,
        new_thread_id: str,
        input: S | dict[str, Any] | None = None,
        *,
        max_steps: int = 25,
        tracer: Tracer | None = None,
        run: bool = True,
        deps: Any = None,
        effects: ForkEffects | None = None,
    ) -> S:
        """Branch a new thread from a past checkpoint, apply ``input``, and run it.

        The new thread inherits the origin's journal as it stood at the fork point, so what
        the fork point had done is not done again. A side effect (``ctx.step``, a tool call)
        that the origin ran *after* the fork point is decided by ``effects``: ``"reuse"``
        replays the origin's result where the call is identical (same journal key; a tool
        call also the same tool and arguments), ``"rerun"`` runs it again, and the default
        stops the run before the first one with :class:`~tensorsketch.errors.ForkEffectError`
        (nothing is run; fork again with a choice). The choice holds for every later run of
        the fork. Its first checkpoint's parent is ``checkpoint_id`` and its metadata names
        the origin thread (``"forked_from"``); :meth:`Backend.list_forks` lists the forks.

        :param run: ``False`` branches without running: ``input`` is applied as an
            :meth:`aupdate_state` edit (the fork point's plan stays), and the next
            ``invoke`` on the new thread continues from there.
        :param deps: the run's dependencies, as :meth:`invoke` takes them.
        """
        check_thread_id(thread_id)
        check_thread_id(new_thread_id, "new_thread_id")
        effects = check_fork_effects(effects)
        try:
            origin = await read_checkpoint(backend, thread_id, checkpoint_id)
        except CheckpointDecodeError:
            # A record that cannot be read (a later one, typically) must not block a fork
            # from one that can: fetch only the fork point's ancestry, one by one.
            stored = await _ancestry(backend, thread_id, checkpoint_id)
            chain = load_chain(backend, stored, checkpoint_id, last_only=True)
            origin = chain[-1] if chain else None
            if origin is not None:
                await hydrate(backend, origin, stored)
        if origin is None:
            latest = await backend.latest_checkpoint(thread_id)
            known = latest.checkpoint_id if latest is not None else "none"
            msg = (
                f"thread {thread_id!r} has no checkpoint {checkpoint_id!r} to fork from "
                f"(latest id: {known}); take an id from get_history()."
            )
            raise KeyError(msg)
        if await backend.latest_checkpoint(new_thread_id) is not None:
            msg = f"thread {new_thread_id!r} already exists; fork into a new thread_id."
            raise ValueError(msg)
        branch = start_run(
            self._spec,
            thread_id=new_thread_id,
            backend=backend,
            tracer=tracer,
            sink=None,
            namespace=(),
        )
        journal = branch.journal
        assert journal is not None
        branch.restore(journal.restore(origin))
        branch.seq = 0
        tasks = branch.tasks_from_plan(origin.plan)
        await journal.acquire()
        try:
            await inherit(journal, thread_id, origin, effects)
            fork_point = await branch.save_checkpoint(
                None,
                tasks,
                source="fork",
                parent_id=origin.id,
                # The origin thread, for the way back: Backend.list_forks finds the way out.
                meta={"forked_from": thread_id},
                final=True,
            )
        finally:
            await journal.release()
        if not run:
            if input is not None:
                return await self.aupdate_state(new_thread_id, backend, input)
            state = await self.aget_state(new_thread_id, backend)
            assert state is not None
            return state
        run_fork = start_run(
            self._spec,
            thread_id=new_thread_id,
            backend=backend,
            tracer=tracer,
            sink=None,
            namespace=(),
            deps=deps,
        )
        assert run_fork.journal is not None
        # The lease was given back with the fork point: if this runner stalls here and
        # another takes the fork over, running ``input`` now would start a second turn of
        # a thread already run (every effect again). The run starts only from the fork point.
        run_fork.journal.expect_head = fork_point
        await drive(run_fork, input, max_steps)
        forked: S = run_fork.result_state()  # type: ignore[assignment]
        return forked

    async def areplay_node(
        self,
        thread_id: str,
        backend: Backend,
        checkpoint_id: str,
        node: str,
        *,
        live: bool = False,
        deps: Any = None,
    ) -> NodeReplay:
        """Re-run one node that checkpoint ``checkpoint_id`` plans next, in isolation, on that
        checkpoint's state, and return what it writes now (it never writes to the thread).

        :param node: a node in the checkpoint's plan (its ``next`` or a pending ``Send``; a
            fan-out replays every instance).
        :param live: run the node's journaled calls for real instead of answering them
            from the thread's journal (recorded approvals and answers still apply).
        :param deps: the dependencies the node reads as ``ctx.deps`` (as :meth:`invoke`).
        """
        check_thread_id(thread_id)
        return await replay_node(
            self._spec, thread_id, backend, checkpoint_id, node, live=live, deps=deps
        )

    async def run_inside(
        self,
        input: Any,
        parent: RunHandle,
        ctx: Context,
        *,
        key: str,
        label: str,
        max_steps: int,
        qualify: bool = False,
        on_executor: bool = False,
    ) -> Any:
        """Run this graph inside a node of ``parent`` (``ctx.run_nested``): its events stream
        under the parent's, it traces into the parent's trace, and for a durable parent it is
        a thread of its own (``<parent thread>/<key>``) whose interrupts surface as the
        parent's. It reads the parent's ``deps``.

        With ``qualify`` (a subgraph node), a surfaced interrupt's id and ``path`` start with
        the node (``"Research/<id>"``), so two instances of one subgraph never share an id.
        With ``on_executor`` (a subgraph node), the child's tasks go to the parent run's
        executor as the parent's own would — and all of them when the node is a ``Send``
        instance, whose whole body is what the executor would have run."""
        if not isinstance(parent, Run):
            msg = f"run_inside() needs the engine's run as parent, got {type(parent).__name__}."
            raise TypeError(msg)
        prefix = f"{ctx.node}{ctx.instance}"
        namespace = (*parent.namespace, f"{prefix}:{label}")
        sink = None
        if parent.sink is not None:

            async def sink(event: Event) -> None:
                await parent.emit(
                    event.type,
                    node=event.node,
                    data=event.data,
                    step=event.step,
                    namespace=event.namespace,
                )

        journal = parent.journal
        if journal is None and parent.effects.durable:
            msg = (
                f"node {ctx.node!r}{ctx.instance} runs a nested graph ({label}) on an executor's "
                "worker, but a durable nested graph needs the store, which only the caller has; "
                "run this node in-process (as a plain node, not a Send instance) or invoke "
                "without an executor."
            )
            raise ExecutorError(msg)
        before, after = _inner_breakpoints(parent, ctx.node) if qualify else (None, None)
        if before is not None:
            before = sorted(self._spec.interrupt_before.union(before))
        if after is not None:
            after = sorted(self._spec.interrupt_after.union(after))
        if journal is None:
            run = start_run(
                self._spec,
                thread_id=None,
                backend=None,
                tracer=parent.tracer,
                sink=sink,
                namespace=namespace,
                deps=parent.deps,
                interrupt_before=before,
                interrupt_after=after,
                durability=parent.durability,
            )
            _attach_memory(run, getattr(parent, "memory", None))
            run.labels = getattr(parent, "labels", {})
            if on_executor:
                _share_executor(run, parent, ctx)
            await drive(run, input, max_steps)
        else:
            backend = journal.backend
            thread = f"{parent.thread_id}/{key}"
            history = await self.aget_history(thread, backend)
            resume: dict[str, Any] = {}
            if history:
                for raw in history[-1].metadata.get("interrupts") or ():
                    own = str(raw["id"])
                    asked = f"{prefix}/{own}" if qualify else own
                    found, decision = await parent.effects.decision(ctx.superstep, asked)
                    if found and raw.get("kind") not in ("timer", "breakpoint"):
                        resume[own] = decision
            run = start_run(
                self._spec,
                thread_id=thread,
                backend=backend,
                tracer=parent.tracer,
                sink=sink,
                namespace=namespace,
                deps=parent.deps,
                interrupt_before=before,
                interrupt_after=after,
                durability=parent.durability,
            )
            _attach_memory(run, getattr(parent, "memory", None))
            run.labels = getattr(parent, "labels", {})
            if on_executor:
                _share_executor(run, parent, ctx)
            await drive(run, None if history else input, max_steps, resume or None)
        if run.interrupts:
            pending = list(run.interrupts)
            if qualify:
                pending = [
                    p.model_copy(update={"id": f"{prefix}/{p.id}", "path": (prefix, *p.path)})
                    for p in pending
                ]
            raise Interrupt(pending=pending)
        return run.result_state()

    # -- editing ----------------------------------------------------------------------------

    async def aupdate_state(
        self,
        thread_id: str,
        backend: Backend,
        values: S | Mapping[str, Any],
        *,
        as_node: str | None = None,
    ) -> S:
        """Edit the thread's state: fold ``values`` into the channels as if node ``as_node``
        had returned them (a reducer field appends), saved as a new checkpoint whose parent
        is the latest one. Returns the new state (``run_info`` names its checkpoint).

        The next ``invoke`` on the thread continues from there: with ``as_node``, the
        successors of ``as_node`` run next (routing reads the edited state); without it, the
        pending plan stays, and a run stopped at a breakpoint or interrupt still is. An edit
        of a failed superstep's checkpoint without ``as_node`` keeps the error (the thread
        stays ``failed`` until invoking it retries the superstep, and the retry runs only the
        tasks that had not finished); ``as_node`` moves past that superstep and clears it.
        Takes the thread's lease, so it refuses (``ThreadBusyError``) while a run holds it.
        """
        check_durable_args(thread_id, backend)
        spec = self._spec
        if as_node is not None and as_node not in spec.nodes:
            msg = (
                f"update_state(as_node={as_node!r}): {as_node!r} is not a node of "
                f"{spec.name}{suggest(str(as_node), list(spec.nodes))}"
            )
            raise ValueError(msg)
        writes = self._update_writes(values)
        run = start_run(
            self._spec, thread_id=thread_id, backend=backend, tracer=None, sink=None, namespace=()
        )
        journal = run.journal
        assert journal is not None
        try:
            opened = await journal.open()
            if opened.restored is not None:
                run.restore(opened.restored)
            else:
                run.seed()  # a new thread: the edit is its first checkpoint
            writer = as_node or "update_state"
            changed = run._fold({k: [v] for k, v in writes.items()}, {k: [writer] for k in writes})
            meta: dict[str, Any] = {"as_node": as_node}
            if as_node is not None:
                tasks = run.next_tasks([Task(spec.nodes[as_node])])
                run.step += 1  # the edit stands for a superstep of `as_node`
            elif opened.restored is not None:
                tasks = run.tasks_from_plan(opened.restored.plan)
                if run.restored_interrupts:  # still waiting on the same things
                    meta["interrupts"] = [p.to_dict() for p in run.restored_interrupts]
                if opened.restored.error is not None:
                    # Still the failed superstep, not yet retried: keep why it failed (what
                    # get_state reports) and its planning id, so the retry after the edit
                    # still runs only the tasks that did not finish.
                    meta["error"] = opened.restored.error
                    meta["retry_of"] = opened.restored.plan_id
            else:
                tasks = run.entry_tasks()
            await run.save_checkpoint(
                changed if opened.restored is not None else None,
                tasks,
                source="update",
                meta=meta,
                final=True,
            )
        finally:
            await journal.finish()
        found = await read_checkpoint(backend, thread_id, run.checkpoint_id)
        assert found is not None
        return self._state_at(found)

    def update_state(
        self,
        thread_id: str,
        backend: Backend,
        values: S | Mapping[str, Any],
        *,
        as_node: str | None = None,
    ) -> S:
        """Sync form of :meth:`aupdate_state`."""
        return run_sync(self.aupdate_state(thread_id, backend, values, as_node=as_node))

    def _update_writes(self, values: object) -> dict[str, Any]:
        """``update_state``'s values, each validated as its state field."""
        example = "update_state(thread_id, backend, {'plan': ...})"
        return state_writes(self._spec, values, "update_state()", example)


async def _ancestry(backend: Backend, thread_id: str, checkpoint_id: str) -> list[StoredCheckpoint]:
    """``checkpoint_id`` and its ancestors, oldest first, read by id."""
    chain: list[StoredCheckpoint] = []
    cursor: str | None = checkpoint_id
    while cursor is not None and len(chain) < 100_000:
        found = await backend.get_checkpoint(thread_id, cursor)
        if found is None:
            break
        chain.append(found)
        cursor = found.parent_id
    chain.reverse()
    return chain


def _share_executor(run: Run, parent: Run, ctx: Context) -> None:
    """A subgraph node's child runs its tasks where the parent's would run: on the parent
    run's executor, the ``Send`` instances only — or every task, when the node is itself a
    ``Send`` instance (or inside one), whose body the executor would have run whole. The
    child's supersteps are driven here, beside the store, so it stays durable."""
    if parent.executor is None:
        return
    run.executor = parent.executor
    run.ship_plain = parent.ship_plain or ctx.instance.startswith("#")


def _attach_memory(run: Run, memory: MemoryBinding | None) -> None:
    """Give a run its ``ctx.memory`` store (``invoke(memory=...)``, or the parent run's)."""
    if memory is None:
        return
    if not callable(getattr(memory, "for_context", None)):
        msg = (
            f"memory= must be a tensorsketch.memory.MemoryStore (InMemoryStore(), "
            f"SqliteStore('memory.db'), create_memory_store(name, ...)), got "
            f"{type(memory).__name__}."
        )
        raise TypeError(msg)
    run.memory = memory


def _check_limit(limit: int | None) -> None:
    if limit is not None and (type(limit) is not int or limit < 1):
        msg = f"`limit` must be a positive int (checkpoints per page), got {limit!r}."
        raise ValueError(msg)


async def _take(
    checkpoints: AsyncGenerator[Checkpoint, None], limit: int | None
) -> AsyncGenerator[Checkpoint, None]:
    """The first ``limit`` of ``checkpoints`` (all of them for ``None``)."""
    count = 0
    async with aclosing(checkpoints):  # stopping early closes the reader too
        async for checkpoint in checkpoints:
            yield checkpoint
            count += 1
            if count == limit:
                return
