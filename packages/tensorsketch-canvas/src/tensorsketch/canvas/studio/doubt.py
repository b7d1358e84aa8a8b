"""Effects in doubt, as the debugger shows them: ``GET /api/debug/in-doubt?thread=ID``.

An effect writes its intent before it calls out and its result after; a thread whose journal
holds an intent without the result stopped in between (a crash, a kill), so nobody knows
whether the effect happened. Each one is listed with what a resume will do about it (its
policy: ``retry``, ``ask``, ``fail``; an idempotency key always retries) and, when the thread
already waits on a person for it (``ask``), the interrupt the answer goes to. The answer
itself goes through the debugger's resume (``POST .../resume``), like any other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tensorsketch.canvas.studio.app import ApiError
from tensorsketch.canvas.studio.debug import Debugger, preview
from tensorsketch.durable import read_checkpoint
from tensorsketch.effect_keys import (
    IDEMPOTENCY_PREFIX,
    INTENT_PREFIX,
    deferral_key,
    parse_effect_key,
)
from tensorsketch.errors import BackendUnsupportedError, CheckpointDecodeError
from tensorsketch.pregel.compiled import MAX_THREAD_ID

__all__ = ["doubt_routes", "effects_in_doubt"]

Handler = Callable[[Request], Awaitable[Response]]

#: What a resume does with an effect in doubt, by policy (shown beside each one).
WHAT_RESUME_DOES = {
    "retry": "a resume calls it again",
    "ask": "a resume waits for a person to say what happened",
    "fail": "a resume stops with EffectInDoubtError",
}


def _decoded(debugger: Debugger, raw: bytes) -> Any:
    try:
        value = debugger.backend.serializer.loads(raw)
    except Exception:  # a foreign entry is shown as unreadable, never a 500
        return None
    return value[0] if isinstance(value, list) and len(value) == 1 else value


async def _asked(debugger: Debugger, thread_id: str) -> set[str]:
    """The ids of the ``in_doubt`` interrupts the thread's head waits on."""
    latest = await debugger.backend.latest_checkpoint(thread_id)
    if latest is None:
        return set()
    await debugger.graph()  # the file's types decode the stored values
    try:
        head = await read_checkpoint(debugger.backend, thread_id, latest.checkpoint_id)
    except CheckpointDecodeError:
        return set()
    raw = (head.metadata.get("interrupts") if head is not None else None) or ()
    return {str(p.get("id")) for p in raw if isinstance(p, Mapping) and p.get("kind") == "in_doubt"}


async def effects_in_doubt(debugger: Debugger, thread_id: str) -> dict[str, Any]:
    """The thread's intents with no result, each with its policy and what a resume does."""
    backend = debugger.backend
    if not (await backend.list_checkpoints(thread_id)):
        raise ApiError(404, f"no thread {thread_id!r} in the {debugger.label} backend.")
    try:
        intents = await backend.list_effects(thread_id, INTENT_PREFIX)
    except BackendUnsupportedError:
        return {"thread_id": thread_id, "supported": False, "effects": []}
    keys = [key[len(INTENT_PREFIX) :] for key, _ in intents]
    # a tool that deferred itself (RetryLater) wrote its intent, then its wake-up time
    deferred = [deferral_key(key, 0) for key in keys]
    done = await backend.lookup_effects(thread_id, keys + deferred) if keys else {}
    pending = await _asked(debugger, thread_id)
    out = []
    for (_, raw), key in zip(intents, keys, strict=True):
        if key in done or deferral_key(key, 0) in done:
            continue
        intent = _decoded(debugger, raw)
        intent = intent if isinstance(intent, Mapping) else {}
        keyed = key.startswith(IDEMPOTENCY_PREFIX)
        policy = str(intent.get("policy") or "retry")
        action = "retry" if keyed else policy
        parsed = parse_effect_key(key)
        step = intent.get("step")
        out.append(
            {
                "key": key,
                "effect": intent.get("effect") or key,
                "node": intent.get("node") or getattr(parsed, "node", None),
                "step": step if isinstance(step, int) else None,
                "args": preview(intent.get("args"))[0],
                "policy": policy,
                "idempotency_key": keyed,
                "action": action,
                "explains": (
                    "it has an idempotency key: a resume calls it again, safely"
                    if keyed
                    else WHAT_RESUME_DOES.get(action, f"unknown policy {action!r}")
                ),
                "waiting": key in pending,
                "interrupt_id": key if key in pending else None,
            }
        )
    return {"thread_id": thread_id, "supported": True, "effects": out}


def doubt_routes(
    debugger: Debugger | None, guarded: Callable[[Handler], Handler], headers: dict[str, str]
) -> list[Route]:
    """``GET /api/debug/in-doubt?thread=ID`` (409 when the Studio has no ``--backend``)."""

    async def get(request: Request) -> Response:
        if debugger is None:
            raise ApiError(409, "the debugger is off: start the Studio with --backend URL.")
        thread = request.query_params.get("thread")
        if not thread or len(thread) > MAX_THREAD_ID or "\x00" in thread:
            raise ApiError(
                400,
                f"name the thread: ?thread=ID (a non-empty id of at most {MAX_THREAD_ID} chars).",
            )
        found = await effects_in_doubt(debugger, thread)
        return JSONResponse(found, headers=headers)

    return [Route("/api/debug/in-doubt", guarded(get), methods=["GET"])]
