"""Planning: which tasks the next superstep runs, from edges, routers, ``Send`` and joins."""

from __future__ import annotations

import difflib
import inspect
from typing import TYPE_CHECKING, Any

from tensorsketch.constants import END
from tensorsketch.errors import RoutingError
from tensorsketch.joins import arrive
from tensorsketch.pregel.spec import Branch, GraphSpec, NodeSpec, Task
from tensorsketch.schema import Schema
from tensorsketch.send import Send, send_payload

__all__ = ["Planning"]

#: What path functions usually return: never awaitable, so the awaitable check can be skipped.
_PLAIN_ROUTES: frozenset[type] = frozenset({str, list, tuple, Send})


class Planning:
    """The planning half of a :class:`~tensorsketch.pregel.loop.Run`: tasks from the entry,
    from a stored plan, or from a finished superstep's successors."""

    spec: GraphSpec
    arrived: dict[int, set[str]]
    #: The last barrier's ``Command(goto=...)`` plans, by task position (empty: none).
    routed: dict[int, list[Any]]

    if TYPE_CHECKING:

        def state_view(self) -> Schema: ...

    def entry_tasks(self) -> list[Task]:
        """The first superstep's tasks."""
        spec = self.spec
        if spec.entry_branch is not None:
            return self._route(spec.entry_branch, self.state_view(), {})
        return [Task(spec.nodes[name]) for name in spec.entry if name != END]

    def tasks_from_plan(self, plan: list[tuple[str, dict[str, Any] | None]]) -> list[Task]:
        """Rebuild tasks saved in a checkpoint (node names and pending Send payloads)."""
        tasks: list[Task] = []
        counts: dict[str, int] = {}
        for name, payload in plan:
            node = self.spec.nodes.get(name)
            if node is None:
                msg = (
                    f"the checkpoint plans node {name!r}, which this graph no longer has; "
                    "resume with the graph version that wrote it, or fork from an earlier "
                    "checkpoint."
                )
                raise RoutingError(msg)
            if payload is None:
                tasks.append(Task(node))
            else:
                k = counts.get(name, 0)
                counts[name] = k + 1
                tasks.append(Task(node, payload, f"#{k}"))
        return tasks

    def next_tasks(self, tasks: list[Task]) -> list[Task]:
        """Successors of this superstep's tasks, in task order; plain nodes are deduped.

        Each task that is a join source also arrives at its joins; a join whose sources have
        all arrived plans its target here (where its last-arriving source is in task order).
        """
        nodes = self.spec.nodes
        result: list[Task] = []
        seen_nodes: set[str] = set()
        handled: set[str] = set()
        view: Schema | None = None
        counts: dict[str, int] = {}
        commands = self.routed
        for index, task in enumerate(tasks):
            spec = task.spec
            if commands and index in commands:
                self._commanded(commands[index], result, seen_nodes, counts)
            if spec.name in handled:
                continue
            handled.add(spec.name)
            if spec.branch is None:
                for target in spec.successors:
                    if target != END and target not in seen_nodes:
                        seen_nodes.add(target)
                        result.append(Task(nodes[target]))
            else:
                if view is None:
                    view = self.state_view()
                for routed in self._route(spec.branch, view, counts):
                    if routed.payload is None:
                        if routed.spec.name in seen_nodes:
                            continue
                        seen_nodes.add(routed.spec.name)
                    result.append(routed)
            if spec.joins:
                for target in arrive(self.arrived, spec.joins, spec.name):
                    if target not in seen_nodes:
                        seen_nodes.add(target)
                        result.append(Task(nodes[target]))
        return result

    def _commanded(
        self,
        plan: list[Any],
        result: list[Task],
        seen_nodes: set[str],
        counts: dict[str, int],
    ) -> None:
        """Plan a task's ``Command(goto=...)`` targets (checked when the node returned it)."""
        nodes = self.spec.nodes
        for name, payload in plan:
            if payload is not None:
                result.append(self._instance(nodes[name], dict(payload), counts))
            elif name not in seen_nodes:
                seen_nodes.add(name)
                result.append(Task(nodes[name]))

    def _route(self, branch: Branch, view: Schema, counts: dict[str, int]) -> list[Task]:
        try:
            decided = branch.path(view)
        except Exception as exc:
            exc.add_note(f"while routing out of {branch.source!r} with {branch.path_name}()")
            raise
        if type(decided) not in _PLAIN_ROUTES and inspect.isawaitable(decided):
            msg = (
                f"path function {branch.path_name}() of {branch.source!r} returned an awaitable; "
                "routing functions must be plain (sync) functions of the state."
            )
            raise RoutingError(msg)
        items = decided if isinstance(decided, list | tuple) else [decided]
        tasks: list[Task] = []
        for item in items:
            if isinstance(item, Send):
                tasks.append(self._send_task(branch, item, counts))
                continue
            target = self._resolve(branch, item)
            if target != END:
                tasks.append(Task(self.spec.nodes[target]))
        return tasks

    def _resolve(self, branch: Branch, item: Any) -> str:
        nodes = self.spec.nodes
        mapping = branch.mapping
        if mapping is not None:
            if isinstance(item, str) and item in mapping:
                return mapping[item]
            if isinstance(item, str) and (item in mapping.values()):
                return item
            keys = ", ".join(repr(k) for k in mapping)
            msg = (
                f"{branch.path_name}() routing out of {branch.source!r} returned {item!r}, which "
                f"is not one of its keys ({keys}); return one of those keys or END."
            )
            raise RoutingError(msg)
        if isinstance(item, str) and (item == END or item in nodes):
            return item
        if item is None:
            msg = (
                f"{branch.path_name}() routing out of {branch.source!r} returned None; return a "
                "node name, a list of names, Send(...) objects, or END to stop."
            )
            raise RoutingError(msg)
        close = difflib.get_close_matches(str(item), list(nodes), n=1)
        hint = f" — did you mean {close[0]!r}?" if close else f" (nodes: {', '.join(nodes)})"
        msg = (
            f"{branch.path_name}() routing out of {branch.source!r} returned {item!r}, which is "
            f"not a node of this graph{hint}"
        )
        raise RoutingError(msg)

    def _send_task(self, branch: Branch, send: Send, counts: dict[str, int]) -> Task:
        spec = self.spec.nodes.get(send.node)
        if spec is None:
            msg = (
                f"{branch.path_name}() routing out of {branch.source!r} sent to unknown node "
                f"{send.node!r} (nodes: {', '.join(self.spec.nodes)})."
            )
            raise RoutingError(msg)
        try:
            data = send_payload(send)
        except RoutingError as exc:
            exc.add_note(f"while routing out of {branch.source!r} with {branch.path_name}()")
            raise
        return self._instance(spec, data, counts)

    def _instance(self, spec: NodeSpec, data: dict[str, Any], counts: dict[str, int]) -> Task:
        """One ``Send`` instance of ``spec`` with its payload checked against the state."""
        node = spec.name
        fields = self.spec.field_set
        unknown = [] if fields.issuperset(data) else [k for k in data if k not in fields]
        if unknown:
            msg = (
                f"Send({node!r}, ...) payload has {unknown!r}, which are not fields of "
                f"{self.spec.state_schema.__name__}; a payload overrides state fields."
            )
            raise RoutingError(msg)
        k = counts.get(node, 0)
        counts[node] = k + 1
        return Task(spec, data, f"#{k}")


def hold_deferred(tasks: list[Task]) -> tuple[list[Task], list[Task]]:
    """Split a superstep's plan into what runs now and the ``defer=True`` tasks held back:
    a deferred task runs only in a superstep where nothing else is planned."""
    now = [t for t in tasks if not t.spec.defer]
    if not now or len(now) == len(tasks):
        return tasks, []
    return now, [t for t in tasks if t.spec.defer]


def with_held(planned: list[Task], held: list[Task]) -> list[Task]:
    """The next plan with the held deferred tasks added: a plain task planned again is one
    task, and ``Send`` instances are numbered again in plan order (as a restored plan is)."""
    plain = {t.spec.name for t in planned if t.payload is None}
    merged = [*planned, *(t for t in held if t.payload is not None or t.spec.name not in plain)]
    if not any(t.payload is not None for t in held):
        return merged
    counts: dict[str, int] = {}
    renumbered: list[Task] = []
    for task in merged:
        if task.payload is None:
            renumbered.append(task)
            continue
        k = counts.get(task.spec.name, 0)
        counts[task.spec.name] = k + 1
        renumbered.append(Task(task.spec, task.payload, f"#{k}"))
    return renumbered
