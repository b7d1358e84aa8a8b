"""The executor seam's types: what crosses between a run and the executor that runs its
``Send`` instances elsewhere (see :mod:`tensorsketch.executors` for the whole story)."""

from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tensorsketch.errors import ExecutorError
from tensorsketch.name_registry import Registry
from tensorsketch.suspension import Interrupt, PendingInterrupt

if TYPE_CHECKING:
    from tensorsketch.pregel.spec import GraphSpec

__all__ = [
    "EventRecord",
    "Executor",
    "OnEffect",
    "RemoteTaskError",
    "SendCall",
    "Status",
    "Superstep",
    "TaskOutcome",
    "executors",
    "manifest_key",
    "mark_suspended",
    "portable_error",
]

Status = Literal["done", "failed", "suspended", "cancelled"]


#: ``(type, node, data, step, namespace)`` of an event a shipped instance emitted.
EventRecord = tuple[str, str | None, Any, int | None, tuple[str, ...]]


#: Called on the worker the moment an effect completes: ``(plan index, key, value)``.
OnEffect = Callable[[int, str, Any], Awaitable[None]]


@dataclass(slots=True)
class SendCall:
    """One ``Send`` instance, as shipped: enough to rebuild its task on a worker (a plain
    task, shipped from inside a subgraph node's instance, has no payload and instance ``""``).
    """

    #: Position in the superstep's plan (the barrier folds by it).
    index: int
    node: str
    #: ``"#k"``: the k-th ``Send`` to ``node`` in this superstep (part of its effect keys).
    instance: str
    payload: dict[str, Any] | None
    #: Journaled results of this instance's earlier attempts (effects and the decisions it
    #: read), by key: replayed instead of run again.
    replay: dict[str, Any] = field(default_factory=dict)
    #: How many manifests earlier attempts wrote (this attempt writes the next one).
    generation: int = 0

    def __reduce__(self) -> tuple[Any, ...]:
        # A flat tuple: a superstep ships thousands, and the dataclass default goes through
        # a Python-level __getstate__ per instance (several times slower to pickle).
        fields = (self.index, self.node, self.instance, self.payload, self.replay)
        return (SendCall, (*fields, self.generation))


@dataclass(slots=True)
class Superstep:
    """A superstep's shipped work: sent once, shared by every batch of it."""

    graph: str
    step: int
    #: The state values the shipped nodes read (a ``Send`` payload overrides them).
    values: dict[str, Any]
    calls: list[SendCall]
    #: ``invoke(resume=...)``'s decisions, by interrupt id.
    resume: dict[str, Any]
    run_id: str
    thread_id: str | None
    namespace: tuple[str, ...]
    #: The run has a backend: effects are journaled (by the caller) and replay on resume.
    durable: bool
    #: Someone consumes the run's events: shipped instances collect theirs.
    streaming: bool
    #: ``max_concurrency`` of the run: the most instances in flight at once.
    max_concurrency: int | None


@dataclass(slots=True)
class TaskOutcome:
    """What one shipped instance came back with."""

    index: int
    status: Status = "cancelled"
    writes: dict[str, Any] | None = None
    #: The exception a failed instance raised (with the engine's note naming it).
    error: BaseException | None = None
    #: What a suspended instance waits on, and the writes it made anyway.
    interrupts: list[PendingInterrupt] = field(default_factory=list)
    interrupt_writes: dict[str, Any] = field(default_factory=dict)
    #: Effects recorded by this attempt, in call order: ``(key, value)``.
    effects: list[tuple[str, Any]] = field(default_factory=list)
    #: Journaled decisions this attempt read (their keys go into the manifest).
    decisions: list[str] = field(default_factory=list)
    events: list[EventRecord] = field(default_factory=list)

    def __reduce__(self) -> tuple[Any, ...]:
        # Flat, like SendCall's: outcomes come back by the thousand, most with writes only.
        rest = (self.interrupts, self.interrupt_writes, self.effects, self.decisions, self.events)
        if self.error is None and not any(rest):
            return (TaskOutcome, (self.index, self.status, self.writes))
        return (
            TaskOutcome,
            (
                self.index,
                self.status,
                self.writes,
                self.error,
                self.interrupts,
                self.interrupt_writes,
                self.effects,
                self.decisions,
                self.events,
            ),
        )


class Executor(ABC):
    """Runs a superstep's ``Send`` instances somewhere other than the caller's loop.

    Subclass it and implement :meth:`run`; register a factory under a name with the
    ``tensorsketch_executors`` hook (or :func:`tensorsketch.register_executor`) so that
    ``compile(executor="name")`` finds it. One executor may serve many runs at once.
    """

    #: Shown in errors and traces.
    name: str = "custom"

    @abstractmethod
    def run(self, graph: GraphSpec, work: Superstep) -> AsyncIterator[list[TaskOutcome]]:
        """Run every call of ``work`` and yield their outcomes as batches finish (any order,
        each outcome once). Closing the iterator early must stop the work still running.

        :param graph: the compiled graph's engine spec (ship it once, not per call).
        :param work: the superstep's calls and the state they read.
        """


def manifest_key(step: int, node: str, instance: str, generation: int) -> str:
    """Where the caller lists the journal keys a shipped instance's attempt recorded."""
    return f"shipped:{step}:{node}{instance}:{generation}"


class RemoteTaskError(ExecutorError):
    """A shipped instance raised an exception that could not be sent back as itself (it does
    not pickle); its type, message and notes are kept."""

    def __init__(self, message: str, *, type_name: str = "") -> None:
        super().__init__(message)
        #: The original exception's ``module.QualName``.
        self.type_name = type_name


def portable_error(exc: BaseException) -> BaseException:
    """``exc`` if it survives a pickle round trip, else a :class:`RemoteTaskError` with its
    type, message and notes (for executors that send outcomes between processes)."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        kind = type(exc)
        name = f"{kind.__module__}.{kind.__qualname__}"
        error = RemoteTaskError(f"{name}: {exc}", type_name=name)
        for note in getattr(exc, "__notes__", ()):
            error.add_note(str(note))
        return error
    return exc


#: Executors by name (``compile(executor="ray")``), fed by the ``tensorsketch_executors`` hook.
executors: Registry[Executor] = Registry(
    "executor", "tensorsketch_executors", "tensorsketch.executors"
)


def mark_suspended(outcome: TaskOutcome, exc: Interrupt) -> None:
    """Record on ``outcome`` that its instance suspended on ``exc`` (and the writes it made)."""
    outcome.status = "suspended"
    outcome.interrupts = list(exc.pending)
    outcome.interrupt_writes = dict(exc.writes)
