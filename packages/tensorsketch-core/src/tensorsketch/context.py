"""``Context``: what a node body can ask of the run it is part of."""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, Protocol

from typing_extensions import TypeVar

from tensorsketch import suspension
from tensorsketch.effect_calls import CallIdentity, calling
from tensorsketch.effects import (
    IDEMPOTENCY_PREFIX,
    INSIDE,
    EffectCall,
    EffectLog,
    InDoubtPolicy,
    step_key,
)
from tensorsketch.errors import DepsUnavailableError, MemoryUnavailableError
from tensorsketch.observability.tracing import Span, Tracer
from tensorsketch.suspension import Interrupt, wake_time

__all__ = [
    "NO_DEPS",
    "Context",
    "DepsT",
    "MemoryBinding",
    "NestableGraph",
    "NoDeps",
    "RunHandle",
    "run_state",
]

#: The type of a run's dependencies, as ``Context[Deps]`` names it (``Any`` when unnamed).
DepsT = TypeVar("DepsT", default=Any)


class NoDeps:
    """A run's ``deps`` when it has none to give: ``ctx.deps`` raises with ``reason``."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return "NO_DEPS" if self is NO_DEPS else f"NoDeps({self.reason!r})"


#: The ``deps`` of a run invoked without ``deps=``.
NO_DEPS = NoDeps(
    "this run was given no dependencies; pass them as `invoke(..., deps=...)` (or "
    "`stream(..., deps=...)`) and read them as `ctx.deps`."
)


class RunHandle(Protocol):
    """What a :class:`Context` asks of the run it belongs to (the engine's ``Run`` is one):
    its identity, its effect log, tracer and event stream, and the caller's dependencies
    (``invoke(deps=...)``, or a :class:`NoDeps`). Context never imports the engine."""

    run_id: str
    thread_id: str | None
    namespace: tuple[str, ...]
    effects: EffectLog
    tracer: Tracer
    deps: Any

    @property
    def sink(self) -> Callable[..., Awaitable[None]] | None:
        """The event consumer, or ``None`` when nobody streams."""
        ...

    async def emit(
        self, type: str, *, node: str | None = None, data: Any = None, step: int | None = None
    ) -> None:
        """Send one event to the run's stream."""
        ...


class MemoryBinding(Protocol):
    """What ``invoke(..., memory=...)`` takes (a :class:`tensorsketch.memory.MemoryStore`):
    it hands each node a view of itself bound to that node's journal. Context never imports
    the store."""

    def for_context(self, ctx: Context[Any]) -> Any:
        """The store as ``ctx`` uses it (reads and writes journaled when the run is durable)."""
        ...


class NestableGraph(Protocol):
    """A graph that can run inside a node of another run (a ``CompiledGraph``)."""

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
        """Run as part of ``parent``: streamed, traced and, when durable, resumable with it."""
        ...


class Context(Generic[DepsT]):
    """Handed to every ``Node.run``: journaled effects, stream events, spans, run identity,
    and the caller's dependencies (``ctx.deps``; annotate ``Context[MyDeps]`` to type them).

    A context belongs to one node instance in one superstep; its effect keys are derived from
    (superstep, node, Send instance, call order), so a resumed superstep lines its calls up
    with the journal without any determinism rule for the rest of the body.
    """

    __slots__ = ("_calls", "_input", "_run", "instance", "node", "superstep")

    def __init__(
        self, run: RunHandle, node: str, step: int, instance: str = "", input: Any = None
    ) -> None:
        self._run = run
        self._calls = 0
        # The task's input: ``ctx.step`` journals its digest, so a fork reuses a result only
        # for the input it was made on.
        self._input = input
        #: The node's name in the graph.
        self.node = node
        #: The superstep this node instance runs in.
        self.superstep = step
        #: ``""`` for a normal node, ``"#k"`` for the k-th ``Send`` instance of the node.
        self.instance = instance

    @property
    def run_id(self) -> str:
        """This invocation's id: new for every ``invoke``/``stream`` call unless passed as its
        ``run_id=`` (an ``AsyncRunner`` passes its run record's id)."""
        return self._run.run_id

    @property
    def thread_id(self) -> str | None:
        """The durable thread, or ``None`` for an in-memory run."""
        return self._run.thread_id

    @property
    def namespace(self) -> tuple[str, ...]:
        """Path of enclosing runs for nested graphs (empty at the top level)."""
        return self._run.namespace

    @property
    def deps(self) -> DepsT:
        """What the caller passed as ``invoke(..., deps=...)``: a database pool, an HTTP
        client, settings — objects for this call only, shared by every node, tool and
        middleware of the run and of the graphs it nests, and never stored in a checkpoint.

        :raises DepsUnavailableError: the run was given none, or this code runs on an
            executor's worker (dependencies stay in the calling process).
        """
        deps = self._run.deps
        if isinstance(deps, NoDeps):
            raise DepsUnavailableError(f"node {self.node!r}: {deps.reason}")
        result: DepsT = deps
        return result

    @property
    def labels(self) -> Mapping[str, str]:
        """The run's labels when an ``AsyncRunner`` executes it (``submit(labels=...)``, the
        task API's ``labels``, and the ``owner`` an authorizing task API sets to who submitted
        it); empty for ``invoke`` and ``stream``. Nested graphs see their parent's."""
        labels: Mapping[str, str] = getattr(self._run, "labels", None) or {}
        return labels

    @property
    def memory(self) -> Any:
        """The run's long-term memory (``invoke(..., memory=store)``), as a
        :class:`tensorsketch.memory.JournaledMemory`: ``await ctx.memory.get(ns, key)``,
        ``put``, ``search``, ... In a durable run every read and write is journaled, so a
        resumed run sees what the first attempt saw and writes nothing twice. Nested graphs
        share their parent's store.

        :raises MemoryUnavailableError: the run was given no store, or this code runs on an
            executor's worker (the store stays in the calling process).
        """
        store: MemoryBinding | None = getattr(self._run, "memory", None)
        if store is None:
            msg = (
                f"node {self.node!r}: this run was given no memory store; pass one as "
                "`invoke(..., memory=store)` (e.g. `SqliteStore('memory.db')` from "
                "tensorsketch.memory) and read it as `ctx.memory`."
            )
            raise MemoryUnavailableError(msg)
        return store.for_context(self)

    @property
    def streaming(self) -> bool:
        """Whether someone consumes this run's events (``ctx.emit`` is a no-op otherwise)."""
        return self._run.sink is not None

    def streams(self, type: str) -> bool:
        """Whether events of ``type`` reach a consumer as they are emitted: a ``stream``'s
        takes every type; a run ``AsyncRunner`` executes hands its stop check only the few
        it acts on, and its followers read the stored events as each superstep commits (a
        node that streams pieces of something may then emit them joined)."""
        run = self._run
        if run.sink is None:
            return False
        wanted = getattr(run, "sink_types", None)  # the engine's Run: which types it hands
        return wanted is None or type in wanted

    @property
    def effects(self) -> EffectLog:
        """The run's effect log: run once under a key, peek, record, look up a decision.

        For the agent layer and helpers built on the journal; node code uses :meth:`step`.
        """
        return self._run.effects

    @property
    def tracer(self) -> Tracer:
        """The run's tracer (a nested run reports into the same trace)."""
        return self._run.tracer

    def next_key(self, name: str) -> str:
        """The journal key of this node's next journaled call, in call order: a resumed
        superstep makes the same calls in the same order, so it gets the same keys."""
        key = step_key(self.superstep, self.node, self.instance, self._calls, name)
        self._calls += 1
        return key

    async def run_nested(
        self,
        graph: NestableGraph,
        input: Any,
        *,
        key: str,
        label: str,
        max_steps: int = 25,
        qualify: bool = False,
        on_executor: bool = False,
    ) -> Any:
        """Run another compiled graph inside this node (``run_subgraph``, ``as_tool`` and
        subgraph nodes are built on it): streamed, traced and — for a durable run —
        resumable with it. ``qualify``: its interrupts' ids start with this node.
        ``on_executor``: its tasks go to this run's executor, as this run's would."""
        return await graph.run_inside(
            input,
            self._run,
            self,
            key=key,
            label=label,
            max_steps=max_steps,
            qualify=qualify,
            on_executor=on_executor,
        )

    def scoped(self, suffix: str) -> Context[DepsT]:
        """A context for one part of this node (an agent's tool call, a sub-step) whose
        journal keys cannot collide with the node's own or another part's."""
        return Context(
            self._run, self.node, self.superstep, f"{self.instance}[{suffix}]", self._input
        )

    async def step(
        self,
        name: str,
        fn: Callable[[], Any],
        *,
        idempotency_key: str | None = None,
        in_doubt: InDoubtPolicy = "retry",
        args: Any = None,
    ) -> Any:
        """Run a side effect exactly once per thread and return its (journaled) result.

        ``fn`` is a zero-argument callable returning an awaitable (or a plain value). Its
        intent is journaled before it is called and its result the moment it completes; on
        resume the recorded result is returned instead of calling ``fn`` again.
        ``idempotency_key`` dedupes the effect across the whole thread (a payment id), not
        just this superstep.

        A crash between the call and its record leaves the effect *in doubt* (it may have
        happened). With an ``idempotency_key`` the resume calls it again (the key makes that
        safe); otherwise ``in_doubt`` says what to do: ``"retry"`` (call again, the
        default), ``"ask"`` (suspend with the call and ``args`` shown; resume with
        ``"retry"``, ``"fail"`` or ``{"result": ...}``) or ``"fail"`` (raise
        :class:`~tensorsketch.errors.EffectInDoubtError`). ``args`` (plain data) is what a
        person deciding sees; it is journaled with the intent.
        """
        if idempotency_key is not None:
            key = f"{IDEMPOTENCY_PREFIX}{idempotency_key}"
        else:
            key = self.next_key(name)
        made_on = self._input if self._run.thread_id is not None else None
        call = EffectCall(
            name, node=self.node, step=self.superstep, args=args, in_doubt=in_doubt, input=made_on
        )
        with calling(CallIdentity(f"ctx.step {name!r} of node {self.node!r}", input=made_on)):
            return await self._run.effects.once(key, fn, call)

    async def transaction(self, name: str, fn: Callable[[Any], Any]) -> Any:
        """Run a database step exactly once: ``fn(connection)`` runs in a transaction of
        the run's own store (SQLite or PostgreSQL), and its writes commit together with the
        step's journal record, so a crash leaves both or neither. On resume the recorded
        result is returned and ``fn`` is not called again.

        ``fn`` gets the store's connection inside the open transaction: a
        ``sqlite3.Connection`` (a plain ``def``; it runs on the store's thread, so keep it
        short) or a ``psycopg.AsyncConnection`` (``async def``). Write your tables with it;
        do not commit or roll back yourself. Its return value (plain data) is the result.

        :raises TransactionUnsupportedError: the run is in memory, or its store (memory,
            Redis) cannot commit your writes with its journal: use ``ctx.step`` with an
            ``idempotency_key`` your database dedupes by instead.
        """
        key = self.next_key(name)
        # Down a fork, a step the origin committed after the fork point is a side effect:
        # the fork's effects= choice applies to it as to a ctx.step.
        with calling(CallIdentity(f"ctx.transaction {name!r} of node {self.node!r}")):
            return await self._run.effects.transaction(key, fn)

    async def emit(self, type: str, data: Any = None) -> None:
        """Push a custom event into the run's stream; a no-op when nobody is streaming.

        When the stream's buffer is full this waits, pausing the node: a slow consumer
        throttles the run instead of growing memory.
        """
        if self._run.sink is not None:
            await self._run.emit(type, node=self.node, data=data, step=self.superstep)

    def span(
        self, name: str, *, kind: str = "custom", **attributes: Any
    ) -> contextlib.AbstractContextManager[Span]:
        """Trace a sub-step; it nests under this node's span."""
        return self._run.tracer.span(name, kind=kind, **attributes)

    async def sleep_until(self, when: float | datetime.datetime) -> None:
        """A durable timer: suspend the run until ``when`` (a Unix time or an aware datetime).

        No process waits: ``invoke`` returns a suspended result, and invoking the thread
        after ``when`` continues past this line. The wake-up time is journaled, so a re-run
        computes nothing new.
        """
        wake = wake_time(when)
        key = self.next_key("sleep_until")
        wake_at = float(await self.effects.once(key, lambda: wake, INSIDE))
        if suspension.now() < wake_at:
            raise Interrupt(id=key, kind="timer", wake_at=wake_at)

    async def sleep(self, seconds: float) -> None:
        """A durable ``asyncio.sleep``: suspend the run for ``seconds`` (see ``sleep_until``)."""
        if seconds < 0:
            msg = f"sleep() needs a non-negative number of seconds, got {seconds!r}."
            raise ValueError(msg)
        key = self.next_key("sleep")
        wake = float(await self.effects.once(key, lambda: suspension.now() + seconds, INSIDE))
        if suspension.now() < wake:
            raise Interrupt(id=key, kind="timer", wake_at=wake)


def run_state(ctx: Context[Any]) -> Mapping[str, Any]:
    """The state the run of ``ctx`` planned its current superstep on (its input folded into
    the defaults, then every finished superstep's writes), read-only; empty where the run
    keeps none (a task shipped to an executor's worker). For helpers that are configured by
    what a run is about — a memory namespace's ``{user_id}`` — not for node bodies, which
    declare what they read in their ``In`` schema."""
    values = getattr(ctx._run, "values", None)
    return values if isinstance(values, Mapping) else {}
