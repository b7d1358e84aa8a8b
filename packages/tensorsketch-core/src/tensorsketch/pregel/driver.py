"""The run driver: start a run of a compiled graph, open (or resume) its thread, run its
supersteps, close it — what ``CompiledGraph.invoke``, ``stream`` and a nested run share."""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from tensorsketch.durable.journal import RunJournal
from tensorsketch.durable.modes import Durability, check_durability
from tensorsketch.effects import decision_key, in_doubt_action
from tensorsketch.errors import BackendUnavailableError, DecisionConflictError, NotDurableWarning
from tensorsketch.interrupts import bind_approval, parse_approval
from tensorsketch.observability.tracing import ATTR_INPUT, ATTR_NAMESPACE, Tracer
from tensorsketch.pregel.build import breakpoint_nodes, subgraph_specs
from tensorsketch.pregel.loop import Run
from tensorsketch.pregel.restore import SpecCodec
from tensorsketch.pregel.seam import Executor
from tensorsketch.pregel.spec import EventSink, GraphSpec, Task, check_concurrency, plan_of
from tensorsketch.pregel.worker import resolve_executor
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.schema import Schema

__all__ = [
    "MAX_THREAD_ID",
    "apply_resume",
    "check_durable_args",
    "check_thread_id",
    "drive",
    "start_run",
]

#: Longest thread id accepted: well inside every store's key limits (a PostgreSQL index entry
#: holds at most ~2.7 kB, and a thread id is part of several primary keys).
MAX_THREAD_ID = 256


def check_thread_id(thread_id: object, what: str = "thread_id") -> None:
    """Refuse a thread id every store cannot keep alike: PostgreSQL rejects a non-``str`` or
    a NUL byte where SQLite and Redis would store it, so it is checked before any store."""
    if not isinstance(thread_id, str):
        msg = (
            f"{what} must be a str, got {type(thread_id).__name__} {thread_id!r}; pass "
            f"{what}=str(...) (the same string resumes the same thread)."
        )
        raise TypeError(msg)
    if not thread_id:
        msg = f"{what} must not be empty; pass a name or id such as {what}='order-42'."
        raise ValueError(msg)
    if len(thread_id) > MAX_THREAD_ID:
        msg = (
            f"{what} is too long ({len(thread_id)} characters, at most {MAX_THREAD_ID}); use "
            "a shorter id, e.g. a hash of the long one."
        )
        raise ValueError(msg)
    if "\x00" in thread_id:
        msg = f"{what} {thread_id!r} contains a NUL character, which stores cannot keep."
        raise ValueError(msg)


def start_run(
    spec: GraphSpec,
    *,
    thread_id: str | None,
    backend: Backend | None,
    tracer: Tracer | None,
    sink: EventSink | None,
    namespace: tuple[str, ...],
    interrupt_before: Sequence[str] | str | None = None,
    interrupt_after: Sequence[str] | str | None = None,
    max_concurrency: int | None = None,
    executor: str | Executor | None = None,
    run_id: str | None = None,
    deps: Any = None,
    durability: Durability = "sync",
) -> Run:
    """A new run of ``spec`` with a call's own options over the compiled ones (a journal
    when ``backend`` and ``thread_id`` make it durable); nothing is read or run yet."""
    durability = check_durability(durability)
    check_durable_args(thread_id, backend)
    if backend is None and thread_id is not None and not spec.warned_not_durable:
        spec.warned_not_durable = True
        warnings.warn(
            f"{spec.name} was run with thread_id={thread_id!r} but no backend=, so nothing is "
            "stored: the thread cannot be resumed, read back or forked. Pass backend= (e.g. "
            "SqliteBackend('runs.db')) to make it durable, or leave out thread_id.",
            NotDurableWarning,
            stacklevel=3,
        )
    journal = (
        RunJournal(backend, thread_id, SpecCodec(spec, backend.serializer))
        if backend is not None and thread_id is not None
        else None
    )
    run = Run(
        spec,
        thread_id=thread_id,
        journal=journal,
        tracer=tracer,
        sink=sink,
        namespace=namespace,
        run_id=run_id,
    )
    run.durability = durability
    if journal is not None:
        journal.durability = durability
    _set_breakpoints(run, interrupt_before, interrupt_after)
    if max_concurrency is not None:
        check_concurrency(max_concurrency, "max_concurrency=")
        run.max_concurrency = max_concurrency
    if executor is not None:
        run.executor = resolve_executor(executor, "executor=")
    if deps is not None:
        run.deps = deps
    return run


def check_durable_args(thread_id: str | None, backend: Backend | None) -> None:
    """A durable call names both a backend and a valid thread id."""
    if backend is None:
        return
    if thread_id is None:
        msg = "a durable run needs both backend= and thread_id=; pass thread_id='...'."
        raise ValueError(msg)
    check_thread_id(thread_id)
    if not isinstance(backend, Backend):
        msg = (
            f"backend= must be a tensorsketch Backend (InMemoryBackend(), SqliteBackend(...)"
            f", create_backend(name, ...)), got {type(backend).__name__}."
        )
        raise TypeError(msg)


def _set_breakpoints(run: Run, before: object, after: object) -> None:
    """Apply an ``invoke``'s own breakpoints (checked like ``compile``'s)."""
    if before is None and after is None:
        return
    problems: list[str] = []
    nodes = list(run.spec.nodes)
    children = subgraph_specs(run.spec)
    if before is not None:
        run.interrupt_before = breakpoint_nodes(
            "interrupt_before", before, nodes, problems, children
        )
    if after is not None:
        run.interrupt_after = breakpoint_nodes("interrupt_after", after, nodes, problems, children)
    if problems:
        raise ValueError("; ".join(problems))


async def drive(
    run: Run, input: Any, max_steps: int, resume: Mapping[str, Any] | None = None
) -> None:
    """Run ``run`` to its end or its suspension: open (or resume) its thread, apply ``input``
    and ``resume=`` decisions, execute its supersteps, and always close its journal (events
    stored, lease given back). Traced as one ``run`` span when the tracer records."""
    tracer = run.tracer
    if not tracer.enabled:  # NoopTracer: skip the run span entirely
        await _drive_inner(run, input, max_steps, resume)
        return
    attributes: dict[str, Any] = {"tensorsketch.graph": run.spec.name}
    if run.thread_id is not None:
        attributes["tensorsketch.thread_id"] = run.thread_id
    if run.namespace:
        attributes[ATTR_NAMESPACE] = list(run.namespace)
    if input is not None:
        # what the run was asked, so a recorded run can become an eval case
        attributes[ATTR_INPUT] = _input_text(input)
    with tracer.span("run", kind="run", **attributes) as span:
        await _drive_inner(run, input, max_steps, resume)
        span.set_attribute("tensorsketch.steps", run.step)
        if run.interrupts:
            # the run returned waiting for a person or a time: like the node that suspended,
            # its span says so (a trace viewer must not show a waiting run as done)
            span.status = "suspended"


async def _drive_inner(
    run: Run, input: Any, max_steps: int, resume: Mapping[str, Any] | None
) -> None:
    journal = run.journal
    store_down = False
    try:
        tasks = await _prepare(run, input, resume)
        if run.sink is not None:
            await run.emit("run_start", data={"input": _plain(input), "step": run.step})
        await run.execute(tasks, max_steps)
        if run.sink is not None and not run.interrupts and not run.ended:
            await run.emit("run_end", data=dict(run.values), step=run.step)
    except BackendUnavailableError:
        store_down = True
        raise
    finally:
        if journal is not None:
            await journal.finish(store_down=store_down)


async def _prepare(run: Run, input: Any, resume: Mapping[str, Any] | None = None) -> list[Task]:
    journal = run.journal
    if journal is None:
        return run.fresh_tasks(input)
    fresh = None if resume else _plan_fresh(run, input)
    opened = await journal.open(None if fresh is None else (run.position(), plan_of(fresh)))
    if opened.created is not None:
        assert fresh is not None
        run.checkpoint_id = run.plan_id = opened.created
        return fresh
    if opened.restored is not None:
        run.restore(opened.restored)
    if resume:
        await apply_resume(run, resume)
    if opened.restored is None:  # a new thread whose input was not saved by `open`
        tasks = run.fresh_tasks(input)
        await run.save_checkpoint(None, tasks, source="input")
        return tasks
    tasks = run.tasks_from_plan(opened.restored.plan)
    if input is not None:
        changed = run.apply_input(input)
        if not tasks:
            tasks = run.entry_tasks()
        await run.save_checkpoint(changed, tasks, source="input")
    return tasks


def _plan_fresh(run: Run, input: Any) -> list[Task] | None:
    """Plan the first superstep as if the thread were new, so the store can save the
    input checkpoint in the same round trip as the lease; the plan is dropped if the
    thread already has checkpoints.

    Only for a graph whose entry is fixed (no routing function runs early); an input
    that does not apply is left for the regular path to report.
    """
    if run.spec.entry_branch is not None:
        return None
    try:
        return run.fresh_tasks(input)
    except Exception:
        run.values = {}
        return None


def _plain(value: Any) -> Any:
    if isinstance(value, Schema):
        return value.model_dump()
    return value


#: How much of a run's input its ``run`` span keeps (like the agent layer's tool payloads).
_INPUT_LIMIT = 4000


def _input_text(value: Any) -> str:
    if isinstance(value, Schema):
        value = value.model_dump(mode="json")
    try:
        text = json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = str(value)
    if len(text) > _INPUT_LIMIT:
        return text[:_INPUT_LIMIT] + f"... [{len(text) - _INPUT_LIMIT} more chars]"
    return text


async def apply_resume(run: Run, resume: Mapping[str, Any] | None) -> None:
    """Check ``resume=`` decisions against what the restored checkpoint waits for and record
    them in the journal (engine use, after the checkpoint is restored)."""
    if not resume:
        return
    if not isinstance(resume, Mapping):
        msg = (
            f"`resume=` takes a dict of decisions keyed by interrupt id, got "
            f"{type(resume).__name__} ({resume!r:.60})."
        )
        raise TypeError(msg)
    waiting = {p.id: p for p in run.restored_interrupts}
    if not waiting:
        msg = (
            f"thread {run.thread_id!r} is not suspended (nothing awaits a decision), but "
            "`resume=` was passed; invoke without it."
        )
        raise ValueError(msg)
    unknown = [key for key in resume if key not in waiting]
    if unknown:
        listed = ", ".join(repr(k) for k in waiting)
        msg = (
            f"`resume=` names {unknown!r}, which the run is not waiting on; it waits on "
            f"{listed}. Pass decisions only for those ids."
        )
        raise ValueError(msg)
    for key in resume:
        if waiting[key].kind == "breakpoint":
            msg = (
                f"{key!r} is a breakpoint; it needs no decision: invoke the thread again "
                "without `resume=` (and without input) to continue past it."
            )
            raise ValueError(msg)
        if waiting[key].kind == "timer":
            msg = (
                f"{key!r} is a timer (it wakes at {waiting[key].wake_at}); it needs no decision, "
                "just invoke again after that time."
            )
            raise ValueError(msg)
    bound = dict(resume)
    for key, decision in resume.items():
        if waiting[key].kind == "approval":
            # Fail now, not deep in the resumed run; bind it to the call it approves.
            bound[key] = bind_approval(waiting[key], decision)
        if waiting[key].kind == "in_doubt":
            in_doubt_action(key, decision)  # likewise: a wrong shape is never recorded
    resume = bound
    if run.effects.durable:
        for key, decision in resume.items():
            await _check_not_decided(run, waiting[key].kind, key, decision)
    run.resume.clear()
    run.resume.update(resume)
    if run.effects.durable:
        for key, decision in resume.items():
            await run.effects.record(decision_key(run.step, key), _plain_decision(decision))


async def _check_not_decided(run: Run, kind: str, key: str, decision: Any) -> None:
    """Refuse a decision that differs from one already recorded for ``key`` (a run resumed
    with it stopped before its next checkpoint); the same decision again is a no-op."""
    found, first = await run.effects.decision(run.step, key)
    if not found:
        return
    if kind == "approval":
        try:
            same = parse_approval(first) == parse_approval(decision)
        except ValueError:
            same = False
    else:
        same = first == _plain_decision(decision)
    if same:
        return
    msg = (
        f"{key!r} of thread {run.thread_id!r} was already decided: {first!r} is recorded, and "
        f"the run continues with it (its effects may have run); {decision!r} conflicts with "
        "it. A recorded decision is final: invoke the thread without resume= to finish the "
        "run, or fork an earlier checkpoint to decide again."
    )
    raise DecisionConflictError(msg, interrupt_id=key, first=first)


def _plain_decision(decision: Any) -> Any:
    if isinstance(decision, Mapping):
        return dict(decision)
    return decision
