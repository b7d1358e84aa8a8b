"""Subgraph namespaces in the debugger.

A subgraph node checkpoints its child on a thread of its own inside the parent's:
``<thread>/<step>:<node>[#k]:<call>:subgraph``, one such segment per level. That thread id
*is* the child's namespace, so the debugger's thread routes take it as they are; this module
reads it back — the root thread, the subgraph tasks on the way down, and the compiled graph
that writes the child (its values decode and validate with that graph, not the parent's) —
and lists the children a checkpoint's tasks started.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tensorsketch.canvas.studio.app import ApiError
from tensorsketch.effect_keys import step_key
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.pregel.subgraph import SUBGRAPH_CALL, SubgraphNode

__all__ = ["Child", "Level", "Namespace", "child_tasks", "is_child_thread", "resolve"]

_SEGMENT = re.compile(
    r"^(?P<step>\d+):(?P<node>[^:/#]+)(?P<instance>#\d+)?:(?P<call>\d+):" + SUBGRAPH_CALL + "$"
)
_SUFFIX = ":" + SUBGRAPH_CALL


@dataclass(frozen=True, slots=True)
class Level:
    """One subgraph task on the way from the root thread down to a child."""

    task: str  # the node and its Send instance: "Research", "Research#1"
    node: str
    step: int
    graph: CompiledGraph[Any] | None  # the child graph this task runs (None: not loaded)

    def view(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "node": self.node,
            "graph": self.graph.name if self.graph is not None else None,
        }


@dataclass(frozen=True, slots=True)
class Namespace:
    """A thread id read as a namespace: the root thread and the levels below it."""

    thread_id: str
    root: str
    levels: tuple[Level, ...]
    graph: CompiledGraph[Any] | None  # the graph that writes ``thread_id``

    @property
    def nested(self) -> bool:
        return bool(self.levels)

    def qualified(self, interrupt_id: str) -> str:
        """A child's interrupt id as its root thread names it (``Review/<id>``)."""
        return "/".join([*(level.task for level in self.levels), interrupt_id])


def _split(thread_id: str) -> tuple[str, list[re.Match[str]]]:
    """The root thread and the namespace segments after it, read from the right. A segment
    that ends like a subgraph key but is not one is a 400."""
    parts = thread_id.split("/")
    found: list[re.Match[str]] = []
    while len(parts) > 1:
        last = parts[-1]
        match = _SEGMENT.match(last)
        if match is None:
            if last.endswith(_SUFFIX):
                raise ApiError(
                    400,
                    f"{last!r} in thread {thread_id!r} is not a subgraph namespace: a child "
                    f"thread ends in <step>:<node>[#k]:<call>{_SUFFIX} (take it from the "
                    "parent checkpoint's subgraphs).",
                )
            break
        found.append(match)
        parts.pop()
    found.reverse()
    return "/".join(parts), found


def is_child_thread(thread_id: str) -> bool:
    """Whether ``thread_id`` is a subgraph's namespace (not a thread a run started)."""
    last = thread_id.rpartition("/")[2]
    return "/" in thread_id and _SEGMENT.match(last) is not None


def _subgraph_nodes(graph: CompiledGraph[Any]) -> list[str]:
    return sorted(n for n, s in graph.spec.nodes.items() if isinstance(s.node, SubgraphNode))


def resolve(thread_id: str, graph: CompiledGraph[Any] | None) -> Namespace:
    """``thread_id`` as a namespace of ``graph``. A segment naming a node that is not a
    subgraph node of the graph at its level is a 404 (without the graph — the file does
    not import — the names cannot be checked and the child reads as stored)."""
    root, segments = _split(thread_id)
    levels: list[Level] = []
    current = graph
    for match in segments:
        node = match.group("node")
        task = node + (match.group("instance") or "")
        child: CompiledGraph[Any] | None = None
        if current is not None:
            spec = current.spec.nodes.get(node)
            if spec is None or not isinstance(spec.node, SubgraphNode):
                what = "has no node" if spec is None else "is not a subgraph node:"
                known = _subgraph_nodes(current)
                raise ApiError(
                    404,
                    f"namespace {thread_id!r}: {current.name} {what} {node!r} "
                    f"(its subgraph nodes: {', '.join(known) or 'none'}); "
                    f"{node!r} is not a subgraph node to open.",
                )
            child = spec.node.graph
        levels.append(Level(task, node, int(match.group("step")), child))
        current = child
    return Namespace(thread_id, root, tuple(levels), current)


@dataclass(frozen=True, slots=True)
class Child:
    """A subgraph task a checkpoint plans, and the thread its child checkpoints on."""

    task: str
    node: str
    step: int
    thread_id: str
    graph: CompiledGraph[Any]


def child_tasks(
    graph: CompiledGraph[Any] | None,
    thread_id: str,
    step: int,
    tasks: tuple[tuple[str, dict[str, Any] | None], ...],
) -> list[Child]:
    """The subgraph tasks of a checkpoint that plans ``tasks`` for superstep ``step``, each
    with its child's thread (the key the subgraph node journals, as ``get_state`` finds it:
    a ``Send`` instance is ``#k`` in the order of the plan)."""
    if graph is None:
        return []
    found: list[Child] = []
    counts: dict[str, int] = {}
    for name, payload in tasks:
        instance = ""
        if payload is not None:
            instance = f"#{counts.get(name, 0)}"
            counts[name] = counts.get(name, 0) + 1
        spec = graph.spec.nodes.get(name)
        if spec is None or not isinstance(spec.node, SubgraphNode):
            continue
        key = step_key(step, name, instance, 0, SUBGRAPH_CALL)
        found.append(Child(name + instance, name, step, f"{thread_id}/{key}", spec.node.graph))
    return found
