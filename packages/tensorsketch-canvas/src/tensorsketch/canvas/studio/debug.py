"""The Studio's debugger: browse a thread's checkpoints in the user's own backend, edit state,
fork, step, resume and replay a node.

Read-only except for the explicit actions, and each action is one documented core call the
user could make in code (``fork``, ``aupdate_state``, ``invoke`` with breakpoints or
``resume=``, ``AsyncRunner.approve``/``signal``, ``areplay_node``) on the one thread the
request names. See ``docs/studio.md`` ("Debugging" and "API") for the contract.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_core import to_jsonable_python

from tensorsketch.canvas.studio.app import ApiError
from tensorsketch.canvas.studio.debug_namespace import (
    Child,
    Namespace,
    child_tasks,
    is_child_thread,
    resolve,
)
from tensorsketch.canvas.studio.debug_source import GraphSource, backend_label
from tensorsketch.canvas.studio.state_values import checked_values
from tensorsketch.durable import (
    Checkpoint,
    CheckpointInfo,
    describe_checkpoints,
    read_checkpoint,
    schema_fingerprint,
)
from tensorsketch.durable.lineage import check_fork_effects
from tensorsketch.effect_keys import (
    INTENT_PREFIX,
    decisions_prefix,
    deferral_key,
    parse_effect_key,
    superstep_prefix,
    writes_prefix,
)
from tensorsketch.errors import (
    BackendUnavailableError,
    BackendUnsupportedError,
    CheckpointDecodeError,
    LeaseLostError,
    RunConflictError,
    TensorSketchError,
    ThreadBusyError,
)
from tensorsketch.interrupts import run_info
from tensorsketch.pregel.compiled import MAX_THREAD_ID, CompiledGraph
from tensorsketch.pregel.restore import validated_values
from tensorsketch.runtime.backends.base import Backend, ForkLink, ThreadSummary
from tensorsketch.runtime.backends.runs import RunRecord

__all__ = ["PREVIEW_BYTES", "Debugger"]

#: The most bytes of JSON a value preview holds (the full value has its own endpoint).
PREVIEW_BYTES = 2048
#: The largest full value the value endpoint returns.
MAX_VALUE_BYTES = 8 * 1024 * 1024
#: Threads per page, by default and at most.
PAGE = 50
MAX_PAGE = 200
#: The most run records a search by label reads.
MAX_RUN_RECORDS = 10_000
#: Thread heads remembered between listings (cleared when full).
_HEAD_CACHE = 10_000
#: How deep the debugger nests subgraph states in one checkpoint's answer.
_MAX_NESTING = 8
#: How long a resume through the runner waits for the run to settle before answering.
RESUME_WAIT = 60.0
_RUN_STATUS = {"succeeded": "completed"}


def _json(value: Any) -> Any:
    """``value`` as plain JSON data (models dumped; anything unknown as its repr)."""
    return to_jsonable_python(value, fallback=repr, serialize_unknown=True)


def preview(value: Any, limit: int = PREVIEW_BYTES) -> tuple[Any, bool]:
    """A JSON preview of ``value``: the value itself when its JSON fits in ``limit`` bytes,
    else a string with the beginning of its JSON text (and ``True``)."""
    data = _json(value)
    text = json.dumps(data, ensure_ascii=False, default=repr)
    if len(text.encode()) <= limit:
        return data, False
    cut = text.encode()[:limit].decode(errors="ignore")
    return cut + "…", True


def _iso(ts: float | None) -> str | None:
    if ts is None or not math.isfinite(ts):
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"


def _check_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_THREAD_ID or "\x00" in value:
        raise ApiError(400, f"{what} must be a non-empty string of at most {MAX_THREAD_ID} chars.")
    return value


def _confirmed(body: Mapping[str, Any], action: str) -> None:
    if body.get("confirm") is not True:
        raise ApiError(
            403,
            f'{action} needs a confirmation: send "confirm": true with the request once the '
            "user confirmed it.",
        )


def _as_node(graph: CompiledGraph[Any], body: Mapping[str, Any]) -> str | None:
    """The ``as_node`` of an edit (the node the edit stands for: its successors run next,
    routed on the edited state), or ``None`` to keep the checkpoint's plan."""
    as_node = body.get("as_node")
    if as_node is not None and (not isinstance(as_node, str) or as_node not in graph.spec.nodes):
        nodes = ", ".join(sorted(graph.spec.nodes))
        raise ApiError(404, f"as_node {as_node!r} is not a node of {graph.name} (nodes: {nodes}).")
    return as_node


def _error_text(error: Any, *, with_node: bool = True) -> str | None:
    """``Node: Kind: message`` (``with_node=False`` where the node has its own field)."""
    if not isinstance(error, Mapping):
        return None
    node = error.get("node")
    kind = str(error.get("type") or "error").rpartition(".")[2]
    text = f"{kind}: {error.get('message')}"
    return f"{node}: {text}" if node and with_node else text


@dataclass(frozen=True, slots=True)
class _Thread:
    thread_id: str
    rows: list[CheckpointInfo]
    head: CheckpointInfo


@dataclass(frozen=True, slots=True)
class _Head:
    ours: bool
    status: str | None


def _written_by(graph: CompiledGraph[Any], payload: dict[str, Any]) -> bool:
    """Whether a checkpoint payload looks written by ``graph``: its schema's fingerprint,
    or (no fingerprint, or a schema changed since) only its fields and its nodes."""
    fingerprint = schema_fingerprint(graph.state_schema)
    if fingerprint is not None and payload.get("s") == fingerprint:
        return True
    changes = payload.get("changes")
    plan = payload.get("plan")
    return (
        isinstance(changes, dict)
        and set(changes) <= set(graph.state_schema.model_fields)
        and isinstance(plan, list)
        and all(isinstance(t, list) and t and t[0] in graph.spec.nodes for t in plan)
    )


def _thread_row(summary: ThreadSummary, record: RunRecord | None, head: _Head) -> dict[str, Any]:
    label = None
    if record is not None and record.labels:
        label = ", ".join(f"{k}={v}" for k, v in sorted(record.labels.items()))
    return {
        "thread_id": summary.thread_id,
        "status": _RUN_STATUS.get(record.status, record.status) if record else head.status,
        "label": label,
        "labels": dict(record.labels) if record else {},
        "run_id": record.run_id if record else None,
        "checkpoints": summary.checkpoints,
        "updated_at": _iso(summary.updated_at),
    }


def _ran(
    info: CheckpointInfo | Checkpoint, parent: CheckpointInfo | Checkpoint | None
) -> list[str]:
    """The nodes whose superstep produced ``info``: its parent's plan for a barrier, the
    ``as_node`` of an edit, nothing for an input, a fork, a suspension or a failure."""
    if info.source == "loop" and parent is not None:
        return list(dict.fromkeys(name for name, _ in parent.tasks))
    if info.source == "update":
        as_node = info.metadata.get("as_node")
        return [str(as_node)] if as_node else []
    return []


def _status(head: CheckpointInfo | Checkpoint, record: RunRecord | None) -> str:
    if record is not None:
        return _RUN_STATUS.get(record.status, record.status)
    meta = head.metadata
    if meta.get("error"):
        return "failed"
    if meta.get("interrupts"):
        return "suspended"
    return "pending" if head.tasks else "completed"


def _waiting(head: CheckpointInfo | Checkpoint, record: RunRecord | None) -> dict[str, Any] | None:
    """What a suspended head waits for (the first pending interrupt, with the rest listed)."""
    raw = list(head.metadata.get("interrupts") or ())
    if not raw and record is not None and record.status == "suspended":
        raw = [dict(i) for i in record.interrupts]
    if not raw:
        return None
    items = [_interrupt_view(p) for p in raw if isinstance(p, Mapping)]
    if not items:
        return None
    return {**items[0], "all": items}


def _interrupt_view(p: Mapping[str, Any]) -> dict[str, Any]:
    value = p.get("value")
    kind = str(p.get("kind") or "interrupt")
    tool = args = question = None
    if kind == "approval" and isinstance(value, Mapping):
        tool = value.get("tool") or value.get("name")
        args = preview(value.get("args"))[0]
    elif kind == "interrupt":
        question = preview(value)[0]
    return {
        "kind": "question" if kind == "interrupt" else kind,
        "interrupt_id": str(p.get("id")),
        "node": p.get("node"),
        "tool": tool,
        "args": args,
        "question": question,
        "wake_at": _iso(p.get("wake_at")) if isinstance(p.get("wake_at"), int | float) else None,
        "value": preview(value)[0],
        # the subgraph tasks it sits in, outermost first ([] at the top level)
        "path": [str(part) for part in p.get("path") or ()],
    }


class Debugger:
    """The debugger over one backend and the opened file's graph."""

    def __init__(
        self, backend: Backend, *, path: Path, graph: str | None = None, url: str | None = None
    ) -> None:
        self.backend = backend
        self.source = GraphSource(path, graph)
        self.label = backend_label(url, backend) if url else backend.name
        self._heads: dict[tuple[str, int, float, int], _Head] = {}

    # -- the graph ---------------------------------------------------------------------------

    async def graph(self) -> CompiledGraph[Any] | None:
        return (await asyncio.to_thread(self.source.get)).graph

    async def need_graph(self) -> CompiledGraph[Any]:
        loaded = await asyncio.to_thread(self.source.get)
        if loaded.graph is None:
            raise ApiError(
                409,
                f"the graph of {self.source.path.name} could not be loaded, so it cannot run: "
                f"{loaded.error}",
                graph_error=loaded.error,
            )
        return loaded.graph

    async def space(self, thread_id: str) -> Namespace:
        """``thread_id`` read as a namespace of the opened graph (a root thread has no
        levels); a subgraph's namespace reads and writes with the child's graph."""
        _check_id(thread_id, "thread id")
        return resolve(thread_id, await self.graph())

    async def graph_of(self, space: Namespace) -> CompiledGraph[Any]:
        """The graph that runs ``space`` (409 while the file does not import)."""
        graph = await self.need_graph()
        return graph if space.graph is None else space.graph

    @staticmethod
    def _top_level_only(space: Namespace, action: str) -> None:
        if space.nested:
            raise ApiError(
                409,
                f"{space.thread_id!r} is the namespace of subgraph "
                f"{space.levels[-1].task!r}: it runs inside its parent, so {action} the root "
                f"thread {space.root!r} instead (an answer or an edit can go to the namespace).",
            )

    async def status(self) -> dict[str, Any]:
        loaded = await asyncio.to_thread(self.source.get)
        return {
            "enabled": True,
            "backend": self.backend.name,
            "backend_label": self.label,
            "graph": loaded.name,
            "graph_name": loaded.graph.name if loaded.graph is not None else None,
            "graph_error": loaded.error,
            "tasks": self.backend.run_store() is not None,
        }

    # -- threads -----------------------------------------------------------------------------

    async def _labelled(self, needle: str) -> set[str]:
        """Threads whose runs carry a label key or value containing ``needle`` (a search
        reads the run store page by page, up to :data:`MAX_RUN_RECORDS` records)."""
        store = self.backend.run_store()
        found: set[str] = set()
        if store is None:
            return found
        cursor: str | None = None
        read = 0
        while read < MAX_RUN_RECORDS:
            page = await store.list(limit=1000, cursor=cursor)
            for record in page.records:
                if any(
                    needle in k.lower() or needle in v.lower() for k, v in record.labels.items()
                ):
                    found.add(record.thread_id)
            read += len(page.records)
            cursor = page.cursor
            if cursor is None:
                break
        return found

    async def _head(self, summary: ThreadSummary, graph: CompiledGraph[Any] | None) -> _Head:
        """What the thread's newest checkpoint says: whether this graph wrote it (the state
        schema's fingerprint when the row carries it, else its fields and planned nodes) and
        the status it leaves the thread in. Cached by the thread's count and newest time."""
        key = (summary.thread_id, summary.checkpoints, summary.updated_at, id(graph))
        known = self._heads.get(key)
        if known is not None:
            return known
        row = await self.backend.latest_checkpoint(summary.thread_id)
        payload: Any = None
        if row is not None:
            try:
                payload = self.backend.serializer.loads(row.payload)
            except Exception:
                payload = None
        if not isinstance(payload, dict):
            head = _Head(graph is None, None)
        else:
            raw_meta = payload.get("meta")
            meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
            plan = payload.get("plan") if isinstance(payload.get("plan"), list) else []
            status = (
                "failed"
                if meta.get("error")
                else "suspended"
                if meta.get("interrupts")
                else "pending"
                if plan
                else "completed"
            )
            head = _Head(graph is None or _written_by(graph, payload), status)
        if len(self._heads) >= _HEAD_CACHE:
            self._heads.clear()
        self._heads[key] = head
        return head

    async def threads(self, q: str | None, cursor: str | None, limit: int | None) -> dict[str, Any]:
        """``GET /api/debug/threads``: this graph's threads, newest first."""
        size = PAGE if limit is None else limit
        if not 1 <= size <= MAX_PAGE:
            raise ApiError(400, f"limit must be 1-{MAX_PAGE}, got {size}.")
        start = 0
        if cursor:
            if not cursor.isdigit():
                raise ApiError(400, "cursor must be the next_cursor of a previous page.")
            start = int(cursor)
        summaries = await self.backend.summarize_threads()
        summaries.sort(key=lambda s: (-s.updated_at, s.thread_id))
        needle = (q or "").strip().lower()
        if needle:
            labelled = await self._labelled(needle)
            summaries = [
                s for s in summaries if needle in s.thread_id.lower() or s.thread_id in labelled
            ]
        graph = await self.graph()
        out: list[dict[str, Any]] = []
        index = start
        while index < len(summaries) and len(out) < size:
            summary = summaries[index]
            index += 1
            if is_child_thread(summary.thread_id):
                continue  # a subgraph's namespace: shown nested under its parent thread
            record = await self._record(summary.thread_id)
            head = await self._head(summary, graph)
            by_record = record is not None and graph is not None and record.graph == graph.name
            if not (by_record or head.ours):
                continue
            out.append(_thread_row(summary, record, head))
        return {
            "threads": out,
            "next_cursor": str(index) if index < len(summaries) else None,
        }

    async def _thread(self, thread_id: str) -> _Thread:
        _check_id(thread_id, "thread id")
        await self.graph()  # the file's types decode the stored values (see _values)
        stored = await self.backend.list_checkpoints(thread_id)
        if not stored:
            raise ApiError(404, f"no thread {thread_id!r} in the {self.label} backend.")
        rows = describe_checkpoints(self.backend, stored)
        return _Thread(thread_id, rows, rows[-1])

    async def checkpoint_rows(self, thread_id: str) -> tuple[list[CheckpointInfo], CheckpointInfo]:
        """The thread's checkpoints and its head (an ``ApiError`` 404 when there are none)."""
        found = await self._thread(thread_id)
        return found.rows, found.head

    async def _record(self, thread_id: str) -> RunRecord | None:
        store = self.backend.run_store()
        if store is None:
            return None
        newest: RunRecord | None = None
        cursor: str | None = None
        while True:
            page = await store.list(thread_id=thread_id, limit=1000, cursor=cursor)
            if page.records:
                newest = page.records[-1]
            cursor = page.cursor
            if cursor is None:
                return newest

    async def thread(self, thread_id: str) -> dict[str, Any]:
        """``GET /api/debug/threads/{id}``: the checkpoint tree and what the head waits for."""
        space = await self.space(thread_id)
        found = await self._thread(thread_id)
        record = await self._record(thread_id)
        by_id = {r.id: r for r in found.rows}
        children: dict[str, int] = {}
        for r in found.rows:
            if r.parent_id is not None:
                children[r.parent_id] = children.get(r.parent_id, 0) + 1
        head_branch: set[str] = set()
        cursor: CheckpointInfo | None = found.head
        while cursor is not None and cursor.id not in head_branch:
            head_branch.add(cursor.id)
            cursor = by_id.get(cursor.parent_id) if cursor.parent_id else None
        forks: dict[str, list[dict[str, str]]] = {}
        for link in await self._forks(thread_id):
            forks.setdefault(link.origin_id, []).append(
                {"thread_id": link.thread_id, "checkpoint_id": link.checkpoint_id}
            )
        checkpoints = []
        for r in found.rows:
            parent = by_id.get(r.parent_id) if r.parent_id else None
            checkpoints.append(
                {
                    "id": r.id,
                    "parent_id": r.parent_id,
                    "step": r.step,
                    "source": r.source,
                    "ran": _ran(r, parent),
                    "next": list(dict.fromkeys(name for name, _ in r.tasks)),
                    "created_at": _iso(r.created_at),
                    "on_head_branch": r.id in head_branch,
                    "fork": r.parent_id is not None
                    and (children.get(r.parent_id, 0) > 1 or r.source == "fork"),
                    "error": _error_text(r.metadata.get("error")),
                    "interrupted": bool(r.metadata.get("interrupts")),
                    "forks": forks.get(r.id, []),
                }
            )
        return {
            "thread_id": thread_id,
            "status": _status(found.head, record),
            "run": _run_summary(record),
            "head": found.head.id,
            "forked_from": await self._forked_from(found.rows[0]),
            "checkpoints": checkpoints,
            "waiting": _waiting(found.head, record),
            "root_thread": space.root,
            "namespace": [level.view() for level in space.levels],
            "graph": space.graph.name if space.graph is not None else None,
            "subgraphs": await self._children(space, found.rows),
        }

    async def _children(self, space: Namespace, rows: list[CheckpointInfo]) -> list[dict[str, Any]]:
        """The subgraph namespaces directly inside this thread, by superstep: the child of
        each subgraph task its checkpoints planned that has checkpointed."""
        planned: dict[str, Child] = {}
        for r in rows:
            for child in child_tasks(space.graph, space.thread_id, r.step, r.tasks):
                planned.setdefault(child.thread_id, child)
        if not planned:
            return []
        try:
            stored = {
                s.thread_id: s.checkpoints
                for s in await self.backend.summarize_threads(f"{space.thread_id}/")
            }
        except BackendUnsupportedError:
            stored = {}
            for thread in planned:
                rows_of = await self.backend.list_checkpoints(thread)
                if rows_of:
                    stored[thread] = len(rows_of)
        return [
            {
                "task": child.task,
                "node": child.node,
                "step": child.step,
                "thread_id": thread,
                "graph": child.graph.name,
                "checkpoints": stored[thread],
            }
            for thread, child in planned.items()
            if thread in stored
        ]

    async def _forks(self, thread_id: str) -> list[ForkLink]:
        """The threads forked from this one; none on a store that cannot list threads."""
        try:
            return await self.backend.list_forks(thread_id)
        except BackendUnsupportedError:
            return []

    async def _forked_from(self, first: CheckpointInfo) -> dict[str, Any] | None:
        """Where a fork came from: its first checkpoint's parent, in the thread its metadata
        names (a fork written before forks recorded ``forked_from`` is not linked back).
        ``step`` is ``None`` once the origin checkpoint is gone (pruned or deleted)."""
        origin = first.metadata.get("forked_from")
        if first.source != "fork" or first.parent_id is None or not isinstance(origin, str):
            return None
        stored = await self.backend.get_checkpoint(origin, first.parent_id)
        step = stored.step if stored is not None else None
        return {"thread_id": origin, "checkpoint_id": first.parent_id, "step": step}

    # -- one checkpoint ----------------------------------------------------------------------

    async def _values(
        self, thread_id: str, checkpoint_id: str
    ) -> tuple[Checkpoint, dict[str, Any]]:
        _check_id(checkpoint_id, "checkpoint id")
        # Import the file first: values of types it defines (tagged ``module:Class``) decode
        # only once their classes exist in this process.
        graph = (await self.space(thread_id)).graph
        found = await read_checkpoint(self.backend, thread_id, checkpoint_id)
        if found is None:
            raise ApiError(404, f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}.")
        return found, self._shown(graph, found)

    @staticmethod
    def _shown(graph: CompiledGraph[Any] | None, found: Checkpoint) -> dict[str, Any]:
        """The values as the graph reads them (``aget_state_at``), or as stored when there is
        no graph or they no longer validate (the graph says why when it runs them)."""
        if graph is not None:
            try:
                return validated_values(graph.spec, found)
            except CheckpointDecodeError:
                pass
        return dict(found.values)

    async def checkpoint(self, thread_id: str, checkpoint_id: str) -> dict[str, Any]:
        """``GET /api/debug/threads/{id}/checkpoints/{cp}``."""
        _check_id(thread_id, "thread id")
        space = await self.space(thread_id)
        found, values = await self._values(thread_id, checkpoint_id)
        previous: dict[str, Any] = {}
        parent = None
        if found.parent_id is not None:
            parent = await read_checkpoint(self.backend, thread_id, found.parent_id)
            if parent is not None:  # None for a fork's first: its parent is another thread's
                previous = self._shown(space.graph, parent)
        state: dict[str, Any] = {}
        for name in sorted(set(values) | set(previous)):
            value, truncated = preview(values.get(name))
            changed = name not in previous or previous.get(name) != values.get(name)
            before = preview(previous[name])[0] if changed and name in previous else None
            state[name] = {
                "value": value,
                "truncated": truncated,
                "changed": changed and parent is not None,
                "previous": before,
                "present": name in values,
            }
        error = found.metadata.get("error")
        return {
            "id": found.id,
            "parent_id": found.parent_id,
            "step": found.step,
            "source": found.source,
            "created_at": _iso(found.created_at),
            "ran": _ran(found, parent),
            "next": list(dict.fromkeys(name for name, _ in found.tasks)),
            "sends": [{"node": node, "arg": preview(payload)[0]} for node, payload in found.sends],
            "effects": await self._effects(found),
            "state": state,
            "errors": [{"node": error.get("node"), "error": _error_text(error, with_node=False)}]
            if isinstance(error, Mapping)
            else [],
            "interrupts": [_interrupt_view(p) for p in found.metadata.get("interrupts") or ()],
            "subgraphs": await self._nested(space.graph, found, parent),
        }

    async def _nested(
        self,
        graph: CompiledGraph[Any] | None,
        found: Checkpoint,
        parent: Checkpoint | None,
        depth: int = 0,
    ) -> list[dict[str, Any]]:
        """The state of each subgraph task around ``found``, nested under its task: the
        children that ran in the superstep that wrote it (``ran``) and the ones it plans
        that have started (``next``: running or suspended), each with its own started
        children below it."""
        if graph is None or depth > _MAX_NESTING:
            return []
        sources: list[tuple[str, Checkpoint]] = [("next", found)]
        if parent is not None and found.source == "loop":
            sources.insert(0, ("ran", parent))
        out: list[dict[str, Any]] = []
        for relation, source in sources:
            for child in child_tasks(graph, found.thread_id, source.step, source.tasks):
                head = await read_checkpoint(self.backend, child.thread_id)
                if head is None:
                    continue  # planned, not started
                values = self._shown(child.graph, head)
                state = {}
                for name in sorted(values):
                    value, truncated = preview(values[name])
                    state[name] = {"value": value, "truncated": truncated}
                out.append(
                    {
                        "task": child.task,
                        "node": child.node,
                        "relation": relation,
                        "thread_id": child.thread_id,
                        "graph": child.graph.name,
                        "head": head.id,
                        "step": head.step,
                        "status": _status(head, None),
                        "next": list(dict.fromkeys(name for name, _ in head.tasks)),
                        "waiting": _waiting(head, None),
                        "state": state,
                        "subgraphs": await self._nested(child.graph, head, None, depth + 1),
                    }
                )
        return out

    async def _effects(self, found: Checkpoint) -> list[dict[str, Any]] | None:
        """The journal entries of the superstep that produced ``found`` (``None`` when the
        backend cannot list its journal)."""
        # A barrier's checkpoint (step n) closes superstep n - 1; a suspended or failed
        # superstep's checkpoint plans that same superstep again, at its own step.
        step = found.step - 1 if found.source == "loop" else found.step
        if found.source in ("input", "fork", "update"):
            return []
        prefixes = [("effect", superstep_prefix(step)), ("decision", decisions_prefix(step))]
        # an intent of the superstep whose effect recorded nothing is an effect in doubt
        prefixes.append(("in_doubt", INTENT_PREFIX + superstep_prefix(step)))
        plan_of = found.metadata.get("retry_of") or found.parent_id
        if found.source != "loop" and plan_of:
            prefixes.append(("writes", writes_prefix(plan_of)))
        entries: list[tuple[str, str, bytes]] = []
        try:
            for kind, prefix in prefixes:
                listed = await self.backend.list_effects(found.thread_id, prefix)
                entries.extend((kind, key, raw) for key, raw in listed)
        except BackendUnsupportedError:
            return None
        recorded = {key for kind, key, _ in entries if kind != "in_doubt"}
        out = []
        for kind, key, raw in entries:
            if kind == "in_doubt":
                key = key.removeprefix(INTENT_PREFIX)
                if key in recorded or deferral_key(key, 0) in recorded:
                    continue  # its result is there, or it deferred itself: not in doubt
            try:
                decoded = self.backend.serializer.loads(raw)
                value = decoded[0] if isinstance(decoded, list) and len(decoded) == 1 else decoded
            except Exception as exc:
                value = f"<cannot decode: {exc}>"
            if kind == "in_doubt" and isinstance(value, Mapping):
                value = {"policy": value.get("policy", "retry"), "args": value.get("args")}
            shown, truncated = preview(value)
            parsed = parse_effect_key(key)
            out.append(
                {
                    "key": key,
                    "kind": kind,
                    "node": parsed.node if parsed is not None else None,
                    "preview": shown,
                    "truncated": truncated,
                }
            )
        return out

    async def value(self, thread_id: str, checkpoint_id: str, channel: str | None) -> Any:
        """``GET .../value?channel=NAME``: one channel's whole value."""
        _check_id(thread_id, "thread id")
        if not channel:
            raise ApiError(400, "pass ?channel=NAME (a state field).")
        _, values = await self._values(thread_id, checkpoint_id)
        if channel not in values:
            raise ApiError(404, f"checkpoint {checkpoint_id!r} has no channel {channel!r}.")
        data = _json(values[channel])
        if len(json.dumps(data, default=repr)) > MAX_VALUE_BYTES:
            raise ApiError(
                413,
                f"{channel!r} is over {MAX_VALUE_BYTES} bytes of JSON; read it "
                "with get_state in code.",
            )
        return {"channel": channel, "value": data}

    # -- writing -----------------------------------------------------------------------------

    async def fork(self, thread_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        _confirmed(body, "fork (it writes a new thread)")
        self._top_level_only(await self.space(thread_id), "fork")
        graph = await self.need_graph()
        found = await self._thread(thread_id)
        checkpoint_id = _check_id(body.get("checkpoint_id"), "checkpoint_id")
        if checkpoint_id not in {r.id for r in found.rows}:
            raise ApiError(404, f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}.")
        values = _checked(graph, body.get("values") or {})
        new_id = body.get("new_thread_id")
        if new_id is None:
            new_id = f"{thread_id[:200]}-fork-{uuid.uuid4().hex[:8]}"
        new_id = _check_id(new_id, "new_thread_id")
        if await self.backend.latest_checkpoint(new_id) is not None:
            raise ApiError(409, f"thread {new_id!r} already exists; pick another new_thread_id.")
        run = body.get("run", False)
        if not isinstance(run, bool):
            raise ApiError(400, "'run' must be true or false.")
        try:  # what the fork does with an effect the origin ran after the fork point
            effects = check_fork_effects(body.get("effects"))
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        as_node = _as_node(graph, body)
        if as_node is None:
            call = graph.fork(
                self.backend,
                thread_id,
                checkpoint_id,
                new_id,
                values or None,
                run=run,
                effects=effects,
            )
            return {
                "thread_id": new_id,
                **await self._after_run(graph, new_id, await _driven(call)),
            }
        # Apply the edit as node `as_node` had returned it: the fork point's plan is replaced
        # by that node's successors, routed on the edited state (update_state's as_node).
        await graph.fork(
            self.backend, thread_id, checkpoint_id, new_id, None, run=False, effects=effects
        )
        state = await graph.aupdate_state(new_id, self.backend, values, as_node=as_node)
        if not run:
            return {"thread_id": new_id, **await self._after_run(graph, new_id, (state, None))}
        call = graph.invoke(thread_id=new_id, backend=self.backend)
        return {"thread_id": new_id, **await self._after_run(graph, new_id, await _driven(call))}

    async def update(self, thread_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        _confirmed(body, "update_state (it writes to the thread)")
        graph = await self.graph_of(await self.space(thread_id))
        found = await self._thread(thread_id)
        wanted = body.get("checkpoint_id")
        if wanted is not None and wanted != found.head.id:
            raise ApiError(
                409,
                "update_state edits the thread's latest checkpoint; fork to change an earlier "
                f"one (latest: {found.head.id}).",
                head=found.head.id,
            )
        as_node = _as_node(graph, body)
        values = _checked(graph, body.get("values"))
        state = await graph.aupdate_state(thread_id, self.backend, values, as_node=as_node)
        # the same answer as every other write (an edit runs nothing, so `error` is null)
        return await self._after_run(graph, thread_id, (state, None))

    def _input(self, graph: CompiledGraph[Any], body: Mapping[str, Any]) -> dict[str, Any] | None:
        raw = body.get("input")
        if raw is None:
            return None
        return _checked(graph, raw)

    async def step(self, thread_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        _confirmed(body, "step (it runs the thread)")
        self._top_level_only(await self.space(thread_id), "step")
        graph = await self.need_graph()
        before = (await self._thread(thread_id)).head.id
        call = graph.invoke(
            self._input(graph, body),
            thread_id=thread_id,
            backend=self.backend,
            max_steps=1,
            interrupt_before=[],
            interrupt_after=list(graph.spec.nodes),
        )
        return await self._after_run(graph, thread_id, await _driven(call), before)

    async def run(self, thread_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        _confirmed(body, "run (it runs the thread)")
        self._top_level_only(await self.space(thread_id), "run")
        graph = await self.need_graph()
        before = (await self._thread(thread_id)).head.id
        max_steps = body.get("max_steps", 25)
        if type(max_steps) is not int or not 1 <= max_steps <= 10_000:
            raise ApiError(400, "'max_steps' must be an int from 1 to 10000.")
        call = graph.invoke(
            self._input(graph, body),
            thread_id=thread_id,
            backend=self.backend,
            max_steps=max_steps,
        )
        return await self._after_run(graph, thread_id, await _driven(call), before)

    async def _after_run(
        self,
        graph: CompiledGraph[Any],
        thread_id: str,
        done: tuple[Any, str | None],
        before: str | None = None,
    ) -> dict[str, Any]:
        state, error = done
        if state is None:  # the run raised: the thread's latest checkpoint says how it stands
            state = await graph.aget_state(thread_id, self.backend)
            if state is None:
                raise ApiError(422, error or "the run wrote no checkpoint.")
        moves = await self._moves(thread_id, before)
        return {**self._outcome(state), "error": error, **moves}

    async def _moves(self, thread_id: str, before: str | None = None) -> dict[str, list[str]]:
        """``ran`` and ``next`` of a write's answer, read from the thread's new head: the
        nodes whose superstep (or edit) wrote it, and the nodes it plans next. ``before`` is
        the head before the call: when it is still the head, the call wrote no checkpoint
        (a completed thread runs nothing), so nothing ran."""
        found = await self._thread(thread_id)
        by_id = {r.id: r for r in found.rows}
        head = found.head
        ran = (
            []
            if head.id == before
            else _ran(head, by_id.get(head.parent_id) if head.parent_id else None)
        )
        return {"ran": ran, "next": list(dict.fromkeys(name for name, _ in head.tasks))}

    @staticmethod
    def _outcome(state: Any) -> dict[str, Any]:
        info = run_info(state)
        return {
            "checkpoint_id": info.checkpoint_id,
            "status": info.status,
            "interrupts": [_interrupt_view(p.to_dict()) for p in info.interrupts],
        }

    async def resume(self, thread_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        _confirmed(body, "resume (it runs the thread)")
        action = body.get("action")
        if action not in ("approve", "reject", "answer"):
            raise ApiError(400, "'action' must be 'approve', 'reject' or 'answer'.")
        space = await self.space(thread_id)
        if space.nested:
            return await self._resume_in(space, body)
        graph = await self.need_graph()
        found = await self._thread(thread_id)
        record = await self._record(thread_id)
        pending = [dict(p) for p in found.head.metadata.get("interrupts") or ()]
        if not pending:
            raise ApiError(409, f"thread {thread_id!r} is not waiting for anything.")
        wanted = body.get("interrupt_id")
        target = next((p for p in pending if wanted is None or p.get("id") == wanted), None)
        if target is None:
            ids = [p.get("id") for p in pending]
            raise ApiError(404, f"thread {thread_id!r} waits on {ids}, not {wanted!r}.")
        decision: Any
        if action in ("approve", "reject"):
            if target.get("kind") != "approval":
                raise ApiError(
                    409,
                    f"{target.get('id')!r} is a {target.get('kind')}, not an "
                    "approval; answer it instead.",
                )
            decision = action == "approve"
            if not decision and isinstance(body.get("value"), str):
                decision = {"approved": False, "reason": body["value"]}
        elif action == "answer":
            if "value" not in body:
                raise ApiError(400, "an answer needs 'value'.")
            decision = body["value"]
        else:
            raise ApiError(400, "'action' must be 'approve', 'reject' or 'answer'.")
        interrupt_id = str(target.get("id"))
        if (
            record is not None
            and record.status == "suspended"
            and action
            in (
                "approve",
                "reject",
                "answer",
            )
            and target.get("kind") in ("approval", "interrupt")
        ):
            return await self._resume_run(
                graph, record, interrupt_id, action, decision, found.head.id
            )
        resume = None if target.get("kind") in ("timer", "breakpoint") else {interrupt_id: decision}
        call = graph.invoke(thread_id=thread_id, backend=self.backend, resume=resume)
        done = await self._after_run(graph, thread_id, await _driven(call), found.head.id)
        return {**done, "via": "invoke"}

    async def _resume_in(self, space: Namespace, body: Mapping[str, Any]) -> dict[str, Any]:
        """Answer what a subgraph's namespace waits on: the whole run is suspended on it,
        so the root thread resumes, with the interrupt's id as the root names it."""
        found = await self._thread(space.thread_id)
        pending = [dict(p) for p in found.head.metadata.get("interrupts") or ()]
        if not pending:
            raise ApiError(409, f"thread {space.thread_id!r} is not waiting for anything.")
        wanted = body.get("interrupt_id")
        target = next((p for p in pending if wanted is None or p.get("id") == wanted), None)
        if target is None:
            ids = [p.get("id") for p in pending]
            raise ApiError(404, f"thread {space.thread_id!r} waits on {ids}, not {wanted!r}.")
        qualified = space.qualified(str(target.get("id")))
        done = await self.resume(space.root, {**body, "interrupt_id": qualified})
        return {**done, "thread_id": space.root}

    async def _resume_run(
        self,
        graph: CompiledGraph[Any],
        record: RunRecord,
        interrupt_id: str,
        action: Any,
        decision: Any,
        before: str,
    ) -> dict[str, Any]:
        """Resume through the run record (``AsyncRunner.approve``/``signal``), so the task
        API, metrics and other runners see the decision like any other."""
        from tensorsketch.runs import AsyncRunner  # noqa: PLC0415 - loads on first resume

        runner = AsyncRunner(graph, backend=self.backend)
        try:
            await runner.start()
            if action == "answer":
                # The runner's signal: a text payload, delivered as {"type", "payload"}.
                text = decision if isinstance(decision, str) else json.dumps(decision)
                await runner.signal(record.run_id, {"type": "answer", "payload": text})
            else:
                await runner.approve(record.run_id, {interrupt_id: decision})
            settled = await runner.await_run(record.run_id, timeout=RESUME_WAIT)
        except TimeoutError:
            settled = await runner.get(record.run_id)
        finally:
            await runner.aclose()
        latest = await self.backend.latest_checkpoint(record.thread_id)
        return {
            "checkpoint_id": latest.checkpoint_id if latest is not None else None,
            "status": _RUN_STATUS.get(settled.status, settled.status),
            "interrupts": [_interrupt_view(p) for p in settled.interrupts],
            "error": _error_text(settled.error),
            **await self._moves(record.thread_id, before),
            "via": "runner",
            "run_id": record.run_id,
        }

    async def replay_node(self, thread_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        graph = await self.graph_of(await self.space(thread_id))
        found = await self._thread(thread_id)
        checkpoint_id = _check_id(body.get("checkpoint_id"), "checkpoint_id")
        node = body.get("node")
        live = body.get("live", False)
        if not isinstance(live, bool):
            raise ApiError(400, "'live' must be true or false.")
        if live:
            _confirmed(body, "a live replay (it calls models and tools for real)")
        info = next((r for r in found.rows if r.id == checkpoint_id), None)
        if info is None:
            raise ApiError(404, f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}.")
        if not isinstance(node, str) or node not in {name for name, _ in info.tasks}:
            planned = sorted({name for name, _ in info.tasks})
            raise ApiError(
                404,
                f"checkpoint {checkpoint_id!r} does not plan node {node!r} (it plans "
                f"{planned or 'nothing'}); replay a node from the checkpoint before it ran.",
            )
        result = await graph.areplay_node(thread_id, self.backend, checkpoint_id, node, live=live)
        first = result.tasks[0] if result.tasks else None
        return {
            "node": node,
            "checkpoint_id": checkpoint_id,
            "output": preview(first.writes)[0] if first and first.writes is not None else None,
            "error": first.error if first else None,
            "interrupts": list(first.interrupts) if first else [],
            "instances": [
                {
                    "instance": t.instance,
                    "output": preview(t.writes)[0] if t.writes is not None else None,
                    "error": t.error,
                    "interrupts": list(t.interrupts),
                }
                for t in result.tasks
            ],
            "effects": {"replayed": result.replayed, "live": result.live},
            "duration_ms": result.duration_ms,
        }


async def _driven(call: Awaitable[Any]) -> tuple[Any, str | None]:
    """Await a run: its state, or — when the graph's code raised — ``None`` and the error
    (the thread recorded the failure; store and lease errors still propagate)."""
    try:
        return await call, None
    except (ThreadBusyError, BackendUnavailableError, LeaseLostError, RunConflictError):
        raise
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _run_summary(record: RunRecord | None) -> dict[str, Any] | None:
    if record is None:
        return None
    return {
        "run_id": record.run_id,
        "status": _RUN_STATUS.get(record.status, record.status),
        "graph": record.graph,
        "labels": dict(record.labels),
        "waiting_for": record.waiting_for,
        "wake_at": _iso(record.wake_at),
        "created_at": _iso(record.created_at),
        "finished_at": _iso(record.finished_at),
        "error": record.error,
        "attempts": record.attempts,
        "assistant": _assistant(record),
    }


def _assistant(record: RunRecord) -> dict[str, Any] | None:
    """Which assistant (id, name, version) the run ran with; ``None`` for the bare graph."""
    pinned = record.assistant
    if not isinstance(pinned, dict):
        return None
    return {key: pinned.get(key) for key in ("id", "name", "version")}


#: Errors of the core calls and what status each answers with.
CORE_ERRORS: tuple[tuple[type[BaseException], int], ...] = (
    (ThreadBusyError, 409),
    (RunConflictError, 409),
    (BackendUnavailableError, 503),
    (CheckpointDecodeError, 422),
    (BackendUnsupportedError, 501),
    (KeyError, 404),
    (ValueError, 422),
    (TypeError, 400),
    (TensorSketchError, 422),
)


def _checked(graph: CompiledGraph[Any], values: Any) -> dict[str, Any]:
    """Edited values, each checked as its state field: 422 naming the channel."""
    return checked_values(graph, values, body_key="values", name_key="channel")
