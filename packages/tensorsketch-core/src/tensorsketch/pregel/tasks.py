"""Task execution: one node instance with its retry policy and timeout, and a superstep's
tasks run concurrently with a shared countdown (the parallel gather)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pydantic

from tensorsketch._fastmodel import fast_constructor
from tensorsketch.channels import MISSING
from tensorsketch.command import GOTO_KEY, Command, ParentCommand
from tensorsketch.constants import END
from tensorsketch.context import Context
from tensorsketch.effects import EffectLog
from tensorsketch.errors import (
    EmptyChannelError,
    NodeError,
    NodeTimeoutError,
    RoutingError,
)
from tensorsketch.observability.tracing import ATTR_NAMESPACE, Tracer
from tensorsketch.pregel.spec import EventSink, GraphSpec, NodeSpec, Task, TaskDone
from tensorsketch.pregel.state import state_writes
from tensorsketch.send import Send, send_payload
from tensorsketch.suspension import Interrupt

__all__ = ["TaskExecution"]


class TaskExecution:
    """The execution half of a :class:`~tensorsketch.pregel.loop.Run`: build a task's input,
    run it (retries, timeout, tracing, events), check its output, run many at once."""

    spec: GraphSpec
    run_id: str
    thread_id: str | None
    namespace: tuple[str, ...]
    values: dict[str, Any]
    sink: EventSink | None
    tracer: Tracer
    effects: EffectLog
    deps: Any
    max_concurrency: int | None
    failed_task: Task | None

    if TYPE_CHECKING:

        async def emit(
            self,
            type: str,
            *,
            node: str | None = None,
            data: Any = None,
            step: int | None = None,
            namespace: tuple[str, ...] | None = None,
        ) -> None: ...

    def _where(self) -> dict[str, Any]:
        """A node span's namespace attribute, inside another graph's node (else nothing)."""
        return {ATTR_NAMESPACE: list(self.namespace)} if self.namespace else {}

    def build_input(self, task: Task) -> Any:
        spec = task.spec
        values = self.values
        payload = task.payload
        kwargs: dict[str, Any] = {}
        for name, required in spec.reads:
            if payload is not None and name in payload:
                kwargs[name] = payload[name]
                continue
            value = values.get(name, MISSING)
            if value is MISSING:
                if required:
                    msg = (
                        f"node {spec.name!r} reads state field {name!r}, which has no value yet; "
                        f"give {self.spec.state_schema.__name__}.{name} a default, pass it in "
                        "the input, or make sure a node writes it before this one runs."
                    )
                    raise EmptyChannelError(msg)
                continue
            kwargs[name] = value
        if payload is None:
            make = spec.make_input
            if make is None:
                make = spec.make_input = fast_constructor(spec.in_schema)
            return make(kwargs)
        try:
            return spec.in_schema.model_validate(kwargs)
        except pydantic.ValidationError as exc:
            msg = f"Send payload for {spec.name!r}{task.instance} does not fit its In: {exc}"
            raise RoutingError(msg) from exc

    def writes_of(self, spec: NodeSpec, out: Any) -> dict[str, Any]:
        """The state writes a node's return value stands for (a ``Command``'s routing rides
        along under ``GOTO_KEY``)."""
        if out is None:
            return {}
        if type(out) is Command:
            if out.graph is not None:
                if out.graph != Command.PARENT:
                    msg = (
                        f"node {spec.name!r} returned Command(graph={out.graph!r}); graph= "
                        "takes only Command.PARENT (the graph running this one as a "
                        "subgraph node), or None for this graph."
                    )
                    raise RoutingError(msg)
                raise ParentCommand.of(spec.name, out)
            writes = self.writes_of(spec, out.update)
            targets = out.targets()
            if targets:
                writes[GOTO_KEY] = goto_plan(spec, targets)
            return writes
        out_schema = spec.out_schema
        if not isinstance(out, out_schema):
            if isinstance(out, Mapping):
                try:
                    out = out_schema.model_validate(out)
                except pydantic.ValidationError as exc:
                    msg = f"node {spec.name!r} returned a dict that does not fit its Out: {exc}"
                    raise NodeError(msg) from exc
            else:
                msg = (
                    f"node {spec.name!r} returned {type(out).__name__} ({out!r:.80}); return "
                    f"`self.Out(...)` ({out_schema.__qualname__}), a dict of its fields, "
                    "a Command, or None."
                )
                raise NodeError(msg)
        fields_set = out.__pydantic_fields_set__
        data = out.__dict__
        return {name: data[name] for name in spec.writes if name in fields_set}

    async def run_task(self, task: Task, step: int, *, guarded: bool = True) -> dict[str, Any]:
        """Run one task and return its writes; ``guarded=False`` skips its retry policy and
        timeout (``_run_guarded`` applies them around this)."""
        spec = task.spec
        if guarded and (spec.retry is not None or spec.timeout is not None):
            return await self._run_guarded(task, step)
        inp = self.build_input(task)
        ctx = Context(self, spec.name, step, task.instance, inp)
        if self.sink is not None:
            await self.emit(
                "node_start", node=spec.name, data={"instance": task.instance}, step=step
            )
        cache = self.spec.cache if spec.cache is not None else None
        entry: tuple[str, str] | None = None
        if cache is not None:
            assert spec.cache is not None
            entry = (f"{self.spec.name}:{spec.name}", spec.cache.key_for(spec.name, inp))
            hit = await cache.get(*entry)
            if hit is not None:
                return await self._cached(task, step, cache.serializer.loads(hit), entry[1])
        try:
            if self.tracer.enabled:
                with self.tracer.span(
                    spec.name,
                    kind="node",
                    **{"tensorsketch.node": spec.name, "tensorsketch.step": step},
                    **self._where(),
                ):
                    out = await spec.run(ctx, inp)
            else:
                out = await spec.run(ctx, inp)
        except ParentCommand as handed:
            # A graph this node runs handed the run back: the Command is this node's.
            writes = self.handed_writes(spec, handed)
            if self.sink is not None:
                shown = dict(writes)
                goto = shown.pop(GOTO_KEY, [])
                ended = {"instance": task.instance, "writes": shown, "goto": goto}
                await self.emit("node_end", node=spec.name, data=ended, step=step)
            return writes
        except Interrupt as exc:
            exc.parts = [(task, exc.writes)]
            raise
        except Exception as exc:
            where = f"node {spec.name!r}{task.instance} in superstep {step}"
            if isinstance(exc, pydantic.ValidationError) and _building(exc, spec.out_schema):
                # The node's own return value (``self.Out(n="abc")``): its contract, like a
                # dict that does not fit, so the message itself names the node.
                msg = f"{where} returned an invalid {spec.out_schema.__qualname__}: {exc}"
                raise NodeError(msg) from exc
            exc.add_note(f"raised by {where} of {self.spec.name}")
            raise
        writes = self.writes_of(spec, out)
        if entry is not None:
            assert cache is not None and spec.cache is not None
            await cache.set(*entry, cache.serializer.dumps(writes), spec.cache.ttl)
        if self.sink is not None:
            data: dict[str, Any] = {"instance": task.instance, "writes": writes}
            if GOTO_KEY in writes:
                shown = dict(writes)
                data = {"instance": task.instance, "writes": shown, "goto": shown.pop(GOTO_KEY)}
            await self.emit("node_end", node=spec.name, data=data, step=step)
        return writes

    def handed_writes(self, spec: NodeSpec, handed: ParentCommand) -> dict[str, Any]:
        """The writes of a node whose child graph returned ``Command(graph=Command.PARENT)``:
        the update validated as fields of this graph's state (folded through its reducers at
        the barrier), the goto checked against the node's declared destinations."""
        where = f"node {handed.node!r} inside {spec.name!r}"
        try:
            writes = state_writes(
                self.spec,
                handed.update,
                f"Command(graph=Command.PARENT) from {where}",
                "Command(graph=Command.PARENT, update={'answer': ...})",
            )
        except ValueError as exc:
            raise RoutingError(str(exc)) from None
        for name, _payload in handed.goto:
            if name not in spec.destinations:
                declared = ", ".join(
                    sorted("END" if d == END else repr(d) for d in spec.destinations)
                )
                msg = (
                    f"{where} returned Command(graph=Command.PARENT, goto={name!r}), which is "
                    f"not one of {spec.name!r}'s declared destinations ({declared or 'none'}); "
                    f"declare it where the node is added: "
                    f"`add(..., name={spec.name!r}, destinations=({name!r},))`."
                )
                raise RoutingError(msg)
        plan = goto_plan(spec, handed.targets())
        if plan:
            writes[GOTO_KEY] = plan
        return writes

    async def _cached(
        self, task: Task, step: int, writes: dict[str, Any], key: str
    ) -> dict[str, Any]:
        """A cache hit: the stored writes stand for the node's run (which does not happen)."""
        spec = task.spec
        if self.tracer.enabled:
            with self.tracer.span(
                spec.name,
                kind="node",
                **{"tensorsketch.node": spec.name, "tensorsketch.step": step},
                **{"tensorsketch.cached": True, "tensorsketch.cache_key": key},
                **self._where(),
            ):
                pass
        if self.sink is not None:
            data = {"instance": task.instance, "key": key}
            await self.emit("cached", node=spec.name, data=data, step=step)
            await self.emit(
                "node_end",
                node=spec.name,
                data={"instance": task.instance, "writes": writes, "cached": True},
                step=step,
            )
        return writes

    async def _run_guarded(self, task: Task, step: int) -> dict[str, Any]:
        """``run_task`` for a node with a retry policy or a timeout.

        Every attempt gets a fresh context, so its effect keys are the failed attempt's: the
        ``ctx.step`` calls that attempt finished replay their results (the effect log keeps
        them for the superstep even in memory) instead of running again.
        """
        spec = task.spec
        policy = spec.retry
        attempts = policy.max_attempts if policy is not None else 1
        self.effects.remember_attempts()
        attempt = 1
        while True:
            try:
                return await self._attempt(task, step)
            except (Interrupt, ParentCommand):
                raise
            except Exception as exc:
                if attempt >= attempts or policy is None or not policy.retries(exc):
                    if attempt > 1:
                        exc.add_note(f"gave up after {attempt} attempts")
                    raise
                wait = policy.delay(attempt)
                if self.sink is not None:
                    await self.emit(
                        "node_retry",
                        node=spec.name,
                        data={
                            "instance": task.instance,
                            "attempt": attempt,
                            "error": f"{type(exc).__name__}: {exc}"[:500],
                            "delay": wait,
                        },
                        step=step,
                    )
                await asyncio.sleep(wait)
                attempt += 1

    async def _attempt(self, task: Task, step: int) -> dict[str, Any]:
        """One attempt of a guarded node: ``run_task``'s body under the node's timeout."""
        spec = task.spec
        limit = spec.timeout
        if limit is None:
            return await self.run_task(task, step, guarded=False)
        try:
            async with asyncio.timeout(limit) as scope:
                return await self.run_task(task, step, guarded=False)
        except TimeoutError as exc:
            if not scope.expired():
                raise  # the node's own TimeoutError, not ours
            msg = (
                f"node {spec.name!r}{task.instance} did not finish within its timeout of "
                f"{limit:g}s in superstep {step}; raise `timeout=` on `add(...)`, or give it "
                "a RetryPolicy to try again."
            )
            raise NodeTimeoutError(msg, node=spec.name, timeout=limit) from exc

    async def run_parallel(
        self, tasks: list[Task], step: int, on_done: TaskDone | None = None
    ) -> list[dict[str, Any]]:
        """Run tasks concurrently; the first failure cancels the rest and propagates as is.

        One shared countdown wakes the barrier instead of ``asyncio.wait``'s callback on every
        task: a 10,000-way fan-out costs one wake-up, not 10,000 callback registrations.
        ``on_done(task, writes)`` is awaited for each task that finishes while others still
        run, before it counts as done.
        """
        if not tasks:
            return []
        loop = asyncio.get_running_loop()
        gather = _Gather(len(tasks), loop.create_future(), on_done)
        run_into = self._run_into
        limit = self.max_concurrency
        if limit is not None and len(tasks) > limit:
            # ``limit`` workers take the tasks in order: never more than that in flight, and
            # results still land by task index, so the fold order is unchanged.
            order = iter(enumerate(tasks))
            futures = [loop.create_task(self._work(gather, order, step)) for _ in range(limit)]
        else:
            futures = [
                loop.create_task(run_into(gather, index, task, step))
                for index, task in enumerate(tasks)
            ]
        try:
            await gather.waiter
        except BaseException:
            await _cancel_all(futures)
            raise
        if gather.failures:
            # The first failure in task order among those seen when the barrier woke.
            index, first = min(gather.failures, key=lambda pair: pair[0])
            await _cancel_all(futures)
            self.failed_task = tasks[index]
            raise first
        if gather.handed:
            # A task handed the run to the parent graph: this run stops here.
            if len(gather.handed) > 1:
                names = [exc.node for _, exc in sorted(gather.handed, key=_first)]
                msg = (
                    f"nodes {names} each returned Command(graph=Command.PARENT) in one "
                    f"superstep of {self.spec.name}; the parent can take only one — route "
                    "to one node that hands the run back."
                )
                raise RoutingError(msg)
            raise gather.handed[0][1]
        if gather.suspended:
            # Every other task finished (their effects are journaled); suspend them all.
            raise Interrupt.merge([exc for _, exc in sorted(gather.suspended, key=_first)])
        return gather.results  # type: ignore[return-value]

    async def _work(self, gather: _Gather, order: Iterator[tuple[int, Task]], step: int) -> None:
        """One worker of a bounded superstep: run the next task until none is left."""
        for index, task in order:
            if gather.failures:
                return  # the superstep failed: start nothing new
            await self._run_into(gather, index, task, step)

    async def _run_into(self, gather: _Gather, index: int, task: Task, step: int) -> None:
        try:
            writes = gather.results[index] = await self.run_task(task, step)
            if gather.on_done is not None and gather.remaining > 1:
                await gather.on_done(task, writes)
        except Interrupt as exc:
            gather.suspended.append((index, exc))
        except ParentCommand as exc:  # the child stops; its siblings finish first
            gather.handed.append((index, exc))
        except Exception as exc:
            gather.fail(index, exc)
            return
        except BaseException as exc:  # cancelled from outside: the barrier must still wake
            gather.fail(index, exc)
            raise
        gather.remaining -= 1
        if not gather.remaining:
            waiter = gather.waiter
            if not waiter.done():
                waiter.set_result(None)


class _Gather:
    """The shared state of one parallel superstep: results by task index, and a countdown."""

    __slots__ = ("failures", "handed", "on_done", "remaining", "results", "suspended", "waiter")

    def __init__(
        self, count: int, waiter: asyncio.Future[None], on_done: TaskDone | None = None
    ) -> None:
        self.on_done = on_done
        self.results: list[dict[str, Any] | None] = [None] * count
        self.remaining = count
        self.waiter = waiter
        self.failures: list[tuple[int, BaseException]] = []
        self.suspended: list[tuple[int, Interrupt]] = []
        self.handed: list[tuple[int, ParentCommand]] = []

    def fail(self, index: int, exc: BaseException) -> None:
        self.failures.append((index, exc))
        if not self.waiter.done():
            self.waiter.set_result(None)


async def _cancel_all(futures: list[asyncio.Task[None]]) -> None:
    """Cancel the tasks still running and wait until they have all finished."""
    pending = [f for f in futures if not f.done()]
    for f in pending:
        f.cancel()
    if pending:
        await asyncio.wait(pending)


def _first(pair: tuple[int, Any]) -> int:
    return pair[0]


def _building(exc: pydantic.ValidationError, schema: type[Any]) -> bool:
    """Whether ``exc`` was raised while building ``schema`` itself (its ``__init__`` or
    ``model_validate`` is on the traceback), not some other model of the same name."""
    if exc.title != schema.__name__:
        return False
    tb = exc.__traceback__
    while tb is not None:
        local = tb.tb_frame.f_locals
        if type(local.get("self")) is schema or local.get("cls") is schema:
            return True
        tb = tb.tb_next
    return False


def goto_plan(spec: NodeSpec, targets: list[str | Send]) -> list[list[Any]]:
    """A ``Command``'s targets as plain ``[node, payload]`` pairs (how a journal keeps them),
    each checked against the node's declared ``destinations``."""
    plan: list[list[Any]] = []
    for target in targets:
        if isinstance(target, Send):
            name, payload = target.node, send_payload(target)
        elif isinstance(target, str):
            name, payload = target, None
        else:
            msg = (
                f"node {spec.name!r} returned Command(goto={target!r}); goto takes node names, "
                "END or Send(...) objects."
            )
            raise RoutingError(msg)
        if name not in spec.destinations:
            declared = ", ".join(sorted("END" if d == END else repr(d) for d in spec.destinations))
            msg = (
                f"node {spec.name!r} returned Command(goto={name!r}), which is not one of its "
                f"declared destinations ({declared or 'none'}); add it to `destinations` on the "
                "class."
            )
            raise RoutingError(msg)
        if name != END:
            plan.append([name, payload])
    return plan
