"""The engine's data: what ``compile()`` decided (:class:`GraphSpec`, :class:`NodeSpec`,
:class:`Branch`) and the unit of a superstep (:class:`Task`). A leaf: it runs nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pydantic

from tensorsketch._fastmodel import fast_constructor
from tensorsketch.cache.policy import CachePolicy
from tensorsketch.cache.store import NodeCache
from tensorsketch.channels import Channel
from tensorsketch.context import Context
from tensorsketch.events import Event
from tensorsketch.graph_structure import GraphStructure
from tensorsketch.joins import Join
from tensorsketch.node import Node
from tensorsketch.retry import RetryPolicy
from tensorsketch.schema import Schema

if TYPE_CHECKING:
    from tensorsketch.pregel.seam import Executor

__all__ = [
    "Branch",
    "EventSink",
    "GraphSpec",
    "NodeSpec",
    "Task",
    "TaskDone",
    "check_concurrency",
    "plan_of",
]

EventSink = Callable[[Event], Awaitable[None]]
TaskDone = Callable[["Task", dict[str, Any]], Awaitable[None]]


@dataclass(slots=True, eq=False)
class Branch:
    """A conditional edge: ``path(state)`` picks the successors of ``source``."""

    source: str
    path: Callable[[Any], Any]
    mapping: dict[str, str] | None
    kind: str
    exit: str | None
    path_name: str
    loop_node: str | None = None


@dataclass(slots=True, eq=False)
class NodeSpec:
    """A node as the engine sees it: what it reads, what it writes, where it goes next."""

    name: str
    node: Node
    run: Callable[[Context, Any], Awaitable[Any]]
    in_schema: type[Schema]
    out_schema: type[Schema]
    reads: tuple[tuple[str, bool], ...]
    writes: tuple[str, ...]
    successors: tuple[str, ...] = ()
    branch: Branch | None = None
    #: ``in_schema.model_construct`` for complete values, made fast on first use.
    make_input: Callable[[dict[str, Any]], Schema] | None = None
    #: ``add(retry=..., timeout=...)`` (or the graph's defaults): ``None`` is the fast path.
    retry: RetryPolicy | None = None
    timeout: float | None = None
    #: The wait-for-all joins this node is a source of (empty: the fast path).
    joins: tuple[Join, ...] = ()
    #: ``add(cache=...)``: reuse the node's writes by its input (``None``: the fast path).
    cache: CachePolicy | None = None
    #: ``add(defer=True)``: once planned, wait until nothing else is left to run.
    defer: bool = False
    #: ``Node.destinations``: where a returned ``Command(goto=...)`` may send the run.
    destinations: frozenset[str] = frozenset()
    #: A subgraph node: on an executor it stays here, where the store is, and drives its
    #: child's supersteps, whose tasks go to the executor (see ``tensorsketch.executors``).
    drives_child: bool = False


@dataclass(slots=True, eq=False)
class GraphSpec:
    """Everything ``compile()`` decided, frozen for the engine."""

    name: str
    state_schema: type[Schema]
    channels: dict[str, Channel]
    defaults: dict[str, Callable[[], Any]]
    required: tuple[str, ...]
    nodes: dict[str, NodeSpec]
    entry: tuple[str, ...]
    entry_branch: Branch | None
    structure: GraphStructure
    adapters: dict[str, pydantic.TypeAdapter[Any]] = field(default_factory=dict)
    #: ``compile(migrate=...)``: stored values -> current fields, applied on every restore.
    migrate: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    #: ``compile(interrupt_before=..., interrupt_after=...)``: static breakpoints.
    interrupt_before: frozenset[str] = frozenset()
    interrupt_after: frozenset[str] = frozenset()
    #: ``compile(max_concurrency=...)``: the most tasks of a superstep running at once.
    max_concurrency: int | None = None
    #: ``compile(executor=...)``: where ``Send`` instances run (``None``: on this loop).
    executor: Executor | None = None
    #: ``edge([...], dst)``: the wait-for-all joins, in declaration order.
    joins: tuple[Join, ...] = ()
    #: ``compile(cache=...)``: where cached nodes keep their results.
    cache: NodeCache | None = None
    #: Derived once, read on every superstep: the state's field names, in declaration order,
    #: the channels that forget their value at each barrier, and a fast state constructor.
    field_names: tuple[str, ...] = field(init=False, default=())
    field_set: frozenset[str] = field(init=False, default=frozenset())
    clearing: tuple[str, ...] = field(init=False, default=())
    make_state: Callable[[dict[str, Any]], Schema] = field(init=False)
    #: Required fields a new thread's input must hold, each with the reason (no node writes
    #: it, or none that can run before a reader): checked before any node runs.
    must_input: dict[str, str] = field(init=False, default_factory=dict)
    #: The ``add(defer=True)`` nodes (empty: the fast path).
    deferred: frozenset[str] = field(init=False, default=frozenset())
    #: ``thread_id=`` without ``backend=`` was warned about (once per compiled graph).
    warned_not_durable: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.field_names = tuple(self.state_schema.model_fields)
        self.field_set = frozenset(self.field_names)
        self.clearing = tuple(n for n, c in self.channels.items() if c.clears_each_step)
        self.make_state = fast_constructor(self.state_schema)

    def adapter(self, name: str) -> pydantic.TypeAdapter[Any]:
        """A validator for one state field (built on first use)."""
        found = self.adapters.get(name)
        if found is None:
            info = self.state_schema.model_fields[name]
            annotation: Any = info.annotation
            found = pydantic.TypeAdapter(annotation)
            self.adapters[name] = found
        return found


@dataclass(slots=True, eq=False)
class Task:
    """One unit of a superstep: a node, plus a ``Send`` payload for fan-out instances."""

    spec: NodeSpec
    payload: dict[str, Any] | None = None
    instance: str = ""

    @property
    def key(self) -> str:
        """The task's name within its superstep: the node's, then its ``Send`` instance."""
        return self.spec.name + self.instance


def check_concurrency(limit: Any, where: str) -> None:
    """``max_concurrency`` is ``None`` (no limit) or a positive int."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        msg = f"{where} takes an int >= 1 (or None for no limit), got {limit!r}."
        raise ValueError(msg)


def plan_of(tasks: list[Task]) -> list[tuple[str, dict[str, Any] | None]]:
    """Tasks as a checkpoint stores them: ``(node, payload)`` pairs, in plan order."""
    return [(task.spec.name, task.payload) for task in tasks]
