"""The trace bridge: a bounded, in-memory tail of the spans ``http_span_sink`` POSTs.

Spans are grouped by trace id (one run, one trace). For the overlay, every span is folded into
the graph node it ran under: a ``node`` span names its node in the ``tensorsketch.node``
attribute, and model and tool spans reach it through their parent ids. A node of a subgraph
says where it sits in ``tensorsketch.namespace`` (``["Research:subgraph"]``), so it folds under
its subgraph node (``subgraphs["Research"]``), never among the parent's nodes — even while
the subgraph node's own span is still open and its parent chain not yet in the tail.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from typing import Any

__all__ = ["MAX_SPANS", "TraceTail", "parse_spans"]

#: Spans kept in memory; the oldest go first.
MAX_SPANS = 5000
#: The most recent spans listed per node.
LAST_SPANS = 10

_NODE_ATTR = "tensorsketch.node"
_NAMESPACE_ATTR = "tensorsketch.namespace"
_SUBGRAPH_LABEL = "subgraph"
_INPUT_TOKENS = "gen_ai.usage.input_tokens"
_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
_COST = "gen_ai.usage.cost_usd"


def parse_spans(body: Any) -> list[dict[str, Any]]:
    """The spans of a sink request (``{"spans": [span.to_dict(), ...]}``); :class:`ValueError`
    says what is wrong."""
    if not isinstance(body, dict) or not isinstance(body.get("spans"), list):
        msg = 'expected {"spans": [span, ...]} (the body http_span_sink sends).'
        raise ValueError(msg)
    spans: list[dict[str, Any]] = []
    for index, raw in enumerate(body["spans"]):
        if not isinstance(raw, dict):
            msg = f"spans[{index}] must be an object, got {type(raw).__name__}."
            raise ValueError(msg)
        for key in ("name", "trace_id", "span_id"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                msg = f"spans[{index}] needs a non-empty string {key!r}."
                raise ValueError(msg)
        attributes = raw.get("attributes")
        spans.append(
            {
                "name": raw["name"],
                "kind": str(raw.get("kind") or "custom"),
                "trace_id": raw["trace_id"],
                "span_id": raw["span_id"],
                "parent_id": raw.get("parent_id")
                if isinstance(raw.get("parent_id"), str)
                else None,
                "started_at": _number(raw.get("started_at")) or 0.0,
                "duration_ms": _number(raw.get("duration_ms")) or 0.0,
                "status": str(raw.get("status") or "ok"),
                "error": raw.get("error") if isinstance(raw.get("error"), str) else None,
                "attributes": dict(attributes) if isinstance(attributes, dict) else {},
            }
        )
    return spans


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _tokens(span: dict[str, Any]) -> int:
    total = 0
    for key in (_INPUT_TOKENS, _OUTPUT_TOKENS):
        value = span["attributes"].get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            total += value
    return total


def _cost(span: dict[str, Any]) -> float | None:
    return _number(span["attributes"].get(_COST))


class TraceTail:
    """The last :data:`MAX_SPANS` spans, by run. Thread-safe."""

    def __init__(self, max_spans: int = MAX_SPANS) -> None:
        self.max_spans = max_spans
        self._spans: deque[dict[str, Any]] = deque()
        self._runs: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._spans)

    def add(self, spans: list[dict[str, Any]]) -> list[str]:
        """Store ``spans``; returns the run ids they belong to (in arrival order)."""
        runs: list[str] = []
        with self._lock:
            for span in spans:
                self._spans.append(span)
                self._runs.setdefault(span["trace_id"], []).append(span)
                if span["trace_id"] not in runs:
                    runs.append(span["trace_id"])
            while len(self._spans) > self.max_spans:
                old = self._spans.popleft()
                bucket = self._runs.get(old["trace_id"])
                if bucket:
                    index = next((i for i, s in enumerate(bucket) if s is old), None)
                    if index is not None:
                        del bucket[index]
                    if not bucket:
                        del self._runs[old["trace_id"]]
        return runs

    def runs(self) -> list[dict[str, Any]]:
        """Every run in the tail, newest first."""
        with self._lock:
            items = [(run, list(spans)) for run, spans in self._runs.items()]
        out = [
            {
                "run": run,
                "started": min(s["started_at"] for s in spans),
                "spans": len(spans),
                "status": _run_status(spans),
                "graph": next(
                    (s["attributes"].get("tensorsketch.graph") for s in spans if _is_root(s)),
                    None,
                ),
                # the durable thread the run worked on: the debugger's view of the same run
                "thread_id": next(
                    (s["attributes"].get("tensorsketch.thread_id") for s in spans if _is_root(s)),
                    None,
                ),
            }
            for run, spans in items
        ]
        out.sort(key=lambda r: r["started"], reverse=True)
        return out

    def run(self, run_id: str) -> dict[str, Any] | None:
        """One run folded by node; ``None`` when the tail holds no span of it."""
        with self._lock:
            spans = list(self._runs.get(run_id, ()))
        if not spans:
            return None
        tree = fold_tree(spans)
        return {"run": run_id, "status": _run_status(spans), **tree}


def _is_root(span: dict[str, Any]) -> bool:
    """The run's own ``run`` span (a nested graph's run span carries its namespace)."""
    return span["kind"] == "run" and not span["attributes"].get(_NAMESPACE_ATTR)


def _run_status(spans: list[dict[str, Any]]) -> str:
    """``error``, ``running`` (its run span has not closed yet), ``suspended`` (it returned
    waiting for a decision or a time: its run span says so) or ``ok``."""
    roots = [s for s in spans if _is_root(s) or s["parent_id"] is None]
    if any(s["status"] == "error" for s in spans if s["kind"] in ("run", "node")):
        return "error"
    runs = [s for s in roots if s["kind"] == "run"]
    if not runs:
        return "running"  # spans arrive as they close: the run span comes last
    return "suspended" if runs[-1]["status"] == "suspended" else "ok"


#: A node in a run: the subgraph tasks above it (outermost first) and its name.
NodeKey = tuple[tuple[str, ...], str]


def _place(span: dict[str, Any]) -> tuple[tuple[str, ...], str | None]:
    """Where a span's namespace puts it: the subgraph nodes it sits in, and — for a graph a
    node body runs (``run_subgraph``, an agent as a tool) — that node, which the nested
    graph's spans fold into. A ``Send`` instance (``Research#1``) folds with its node."""
    raw = span["attributes"].get(_NAMESPACE_ATTR)
    if not isinstance(raw, list | tuple):
        return (), None
    tasks: list[str] = []
    for part in raw:
        if not isinstance(part, str):
            break
        head, _, label = part.rpartition(":")
        node = head.partition("#")[0]
        if label != _SUBGRAPH_LABEL:
            return tuple(tasks), node
        tasks.append(node)
    return tuple(tasks), None


def _own_key(span: dict[str, Any]) -> NodeKey | None:
    """The node a ``node`` span is the span of (``None`` for any other span)."""
    name = span["attributes"].get(_NODE_ATTR)
    if span["kind"] != "node" or not isinstance(name, str):
        return None
    path, body = _place(span)
    return (path, name) if body is None else None


def fold_tree(spans: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"nodes": {...}, "subgraphs": {task: {"nodes", "subgraphs"}}}``: per graph node its
    status, latency (total over its calls), cost, calls, tokens and last spans, each
    subgraph's nodes under its subgraph node. A
    subgraph node counts the tokens and cost of what ran inside it, and is ``running``
    from its first inner span until its own span closes."""
    folded = _fold(spans)
    tree: dict[str, Any] = {"nodes": {}, "subgraphs": {}}
    for (path, name), entry in folded.items():
        level = tree
        for task in path:
            level = level["subgraphs"].setdefault(task, {"nodes": {}, "subgraphs": {}})
        level["nodes"][name] = entry
    return tree


def _fold(spans: list[dict[str, Any]]) -> dict[NodeKey, dict[str, Any]]:
    by_id = {s["span_id"]: s for s in spans}
    memo: dict[str, NodeKey | None] = {}

    def node_of(span: dict[str, Any]) -> NodeKey | None:
        chain: list[str] = []
        current: dict[str, Any] | None = span
        found: NodeKey | None = None
        while current is not None:
            sid = current["span_id"]
            if sid in memo:
                found = memo[sid]
                break
            chain.append(sid)
            name = current["attributes"].get(_NODE_ATTR)
            if current["kind"] == "node" and isinstance(name, str):
                path, body = _place(current)
                found = (path, name if body is None else body)
                break
            if len(chain) > 256:
                break
            parent = current["parent_id"]
            current = by_id.get(parent) if parent else None
        for sid in chain:
            memo[sid] = found
        return found

    nodes: dict[NodeKey, dict[str, Any]] = {}
    folded: dict[NodeKey, list[dict[str, Any]]] = {}

    def entry_of(key: NodeKey) -> dict[str, Any]:
        folded.setdefault(key, [])
        return nodes.setdefault(
            key,
            {
                "status": "running",
                "latency_ms": 0.0,
                "cost": None,
                "calls": 0,
                "tokens": 0,
                "errors": 0,
                "last": [],
            },
        )

    for span in spans:
        node = node_of(span)
        if node is None:
            continue
        entry = entry_of(node)
        folded[node].append(span)
        _tally(entry, span, _own_key(span) == node)
        path = node[0]
        for depth in range(len(path)):  # the subgraph nodes it ran inside
            outer = entry_of((path[:depth], path[depth]))
            if span["kind"] == "model":
                _add_usage(outer, span)
    for node, entry in nodes.items():
        own = [s for s in folded[node] if _own_key(s) == node]
        if own and own[-1]["status"] == "error":
            entry["status"] = "error"
        elif own:
            # "suspended": the node waits for a person or a time (drawn apart from "ok")
            entry["status"] = own[-1]["status"]
        entry["latency_ms"] = round(entry["latency_ms"], 3)
        recent = sorted(folded[node], key=lambda s: s["started_at"])[-LAST_SPANS:]
        entry["last"] = [
            {
                "name": s["name"],
                "kind": s["kind"],
                "duration_ms": s["duration_ms"],
                "tokens": _tokens(s),
                "cost": _cost(s),
                "error": s["error"],
            }
            for s in recent
        ]
    return nodes


def _tally(entry: dict[str, Any], span: dict[str, Any], own: bool) -> None:
    """Add one span to its node's totals (calls and latency come from the node's own span,
    tokens and cost from the model spans folded into it)."""
    if own:
        entry["calls"] += 1
        entry["latency_ms"] += span["duration_ms"]
    if span["status"] == "error":
        entry["errors"] += 1
    if span["kind"] == "model":
        _add_usage(entry, span)


def _add_usage(entry: dict[str, Any], span: dict[str, Any]) -> None:
    entry["tokens"] += _tokens(span)
    cost = _cost(span)
    if cost is not None:
        entry["cost"] = (entry["cost"] or 0.0) + cost
