"""The memory items a thread read and wrote, as the debugger shows them:
``GET /api/debug/memory?thread=ID``.

A durable run sends every ``ctx.memory`` call through its effect journal (see
:mod:`tensorsketch.memory.journaled`): a read is recorded with the items it returned, a write
with the revision it made, and each call's intent with its arguments (namespace, key, the
value written). So the journal alone says what the thread saw and changed — no access to the
memory store is needed, and the view shows what the run saw then, not what the store holds
now. Each call is listed with the superstep, node and checkpoint it belongs to; an intent
without a result (the run stopped in between) is listed as not recorded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tensorsketch.canvas.studio.app import ApiError
from tensorsketch.canvas.studio.debug import Debugger, preview
from tensorsketch.durable import CheckpointInfo
from tensorsketch.effect_keys import INTENT_PREFIX, CallKey, parse_effect_key
from tensorsketch.errors import BackendUnsupportedError
from tensorsketch.pregel.compiled import MAX_THREAD_ID

__all__ = ["memory_op_routes", "thread_memory_ops"]

Handler = Callable[[Request], Awaitable[Response]]

#: The journaled calls of :class:`~tensorsketch.memory.JournaledMemory` shown, by step name
#: (the ``*.rev`` reads a write makes first are its own bookkeeping, not the node's).
_OPS = {
    "memory.get": "get",
    "memory.search": "search",
    "memory.list": "list",
    "memory.list_namespaces": "namespaces",
    "memory.put": "put",
    "memory.delete": "delete",
}


def _decoded(debugger: Debugger, raw: bytes) -> Any:
    try:
        value = debugger.backend.serializer.loads(raw)
    except Exception:  # a foreign entry is shown as unreadable, never a 500
        return None
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def _labels(value: Any) -> list[str] | None:
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def _row(
    op: str, namespace: Any, key: Any, *, rev: Any = None, value: Any = None, found: bool = True
) -> dict[str, Any]:
    shown, truncated = preview(value)
    return {
        "op": op,
        "namespace": _labels(namespace),
        "key": key if isinstance(key, str) else None,
        "rev": rev if isinstance(rev, int) and not isinstance(rev, bool) else None,
        "value": shown,
        "truncated": truncated,
        "found": found,
    }


def _item_rows(op: str, items: Any, prefix: Any) -> list[dict[str, Any]]:
    """One row per item a read returned; one empty row for a read that found nothing."""
    rows = [
        _row(op, i.get("namespace"), i.get("key"), rev=i.get("rev"), value=i.get("value"))
        for i in (items if isinstance(items, list) else [])
        if isinstance(i, Mapping)
    ]
    return rows or [_row(op, prefix, None, found=False)]


def _rows(op: str, args: Mapping[str, Any], result: Any, recorded: bool) -> list[dict[str, Any]]:
    """What one journaled call read or wrote, as rows of (namespace, key, rev, value)."""
    if op == "get":
        addresses = args.get("addresses")
        addresses = addresses if isinstance(addresses, list) else []
        results = result if isinstance(result, list) else []
        if not recorded or len(results) != len(addresses):
            pairs = [(a, None) for a in addresses] or [(None, None)]
        else:
            pairs = list(zip(addresses, results, strict=True))
        rows = []
        for address, item in pairs:
            ns, key = address if isinstance(address, list) and len(address) == 2 else (None, None)
            if isinstance(item, Mapping):
                rows.append(_row(op, ns, key, rev=item.get("rev"), value=item.get("value")))
            else:
                rows.append(_row(op, ns, key, found=False))
        return rows
    prefix = args.get("namespace_prefix")
    if op in ("search", "list"):
        if not recorded:
            return [_row(op, prefix, None, found=False)]
        items = result.get("items") if op == "list" and isinstance(result, Mapping) else result
        return _item_rows(op, items, prefix)
    if op == "namespaces":
        return [_row(op, prefix, None, value=result, found=bool(result))]
    ns, key = args.get("namespace"), args.get("key")
    if op == "put":
        return [_row(op, ns, key, rev=result, value=args.get("value"), found=recorded)]
    return [_row(op, ns, key, found=recorded and result is True)]  # delete: whether it removed


def _closing_checkpoints(rows: Iterable[CheckpointInfo], head: CheckpointInfo) -> dict[int, str]:
    """Superstep -> the checkpoint on the head's branch that closed it (a barrier's
    checkpoint at step n closes superstep n - 1; a suspended or failed superstep's checkpoint
    plans it again at its own step)."""
    by_id = {r.id: r for r in rows}
    closing: dict[int, str] = {}
    cursor: CheckpointInfo | None = head
    seen: set[str] = set()
    while cursor is not None and cursor.id not in seen:
        seen.add(cursor.id)
        if cursor.source == "loop":
            closing.setdefault(cursor.step - 1, cursor.id)
        elif cursor.source not in ("input", "fork", "update"):
            closing.setdefault(cursor.step, cursor.id)
        cursor = by_id.get(cursor.parent_id) if cursor.parent_id else None
    return closing


async def thread_memory_ops(debugger: Debugger, thread_id: str) -> dict[str, Any]:
    """Every journaled memory call of the thread, in journal order (superstep, node, call)."""
    rows, head = await debugger.checkpoint_rows(thread_id)
    try:
        entries = await debugger.backend.list_effects(thread_id)
    except BackendUnsupportedError:
        return {"thread_id": thread_id, "supported": False, "ops": []}
    closing = _closing_checkpoints(rows, head)
    results: dict[str, bytes] = {}
    intents: dict[str, bytes] = {}
    for key, raw in entries:
        if key.startswith(INTENT_PREFIX):
            intents[key[len(INTENT_PREFIX) :]] = raw
        else:
            results[key] = raw
    calls = []
    for key in set(results) | set(intents):
        parsed = parse_effect_key(key)
        if isinstance(parsed, CallKey) and parsed.name in _OPS:
            scope = parsed.scope
            calls.append((scope.step, scope.node, scope.instance, parsed.call, key))
    ops = []
    for step, node, instance, _, key in sorted(calls):
        intent = _decoded(debugger, intents[key]) if key in intents else None
        args = intent.get("args") if isinstance(intent, Mapping) else None
        recorded = key in results
        result = _decoded(debugger, results[key]) if recorded else None
        op = _OPS[key.rsplit(":", 1)[-1]]
        query = args.get("query") if isinstance(args, Mapping) and op == "search" else None
        for row in _rows(op, args if isinstance(args, Mapping) else {}, result, recorded):
            ops.append(
                {
                    "effect_key": key,
                    "step": step,
                    "node": node,
                    "instance": instance,
                    "checkpoint_id": closing.get(step),
                    "recorded": recorded,
                    "query": query if isinstance(query, str) else None,
                    **row,
                }
            )
    return {"thread_id": thread_id, "supported": True, "ops": ops}


def memory_op_routes(
    debugger: Debugger | None, guarded: Callable[[Handler], Handler], headers: dict[str, str]
) -> list[Route]:
    """``GET /api/debug/memory?thread=ID`` (409 when the Studio has no ``--backend``)."""

    async def get(request: Request) -> Response:
        if debugger is None:
            raise ApiError(409, "the debugger is off: start the Studio with --backend URL.")
        thread = request.query_params.get("thread")
        if not thread or len(thread) > MAX_THREAD_ID or "\x00" in thread:
            raise ApiError(
                400,
                f"name the thread: ?thread=ID (a non-empty id of at most {MAX_THREAD_ID} chars).",
            )
        return JSONResponse(await thread_memory_ops(debugger, thread), headers=headers)

    return [Route("/api/debug/memory", guarded(get), methods=["GET"])]
