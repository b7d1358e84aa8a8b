"""The debugger's routes (``/api/debug/...``), under the Studio's guards.

Thread ids may hold ``/`` (a nested run's thread is ``<parent>/<key>``), so everything below
``/api/debug/threads/`` is one route, parsed from the right: the known suffixes
(``/checkpoints/<id>[/value]``, ``/fork``, ``/update``, ``/step``, ``/run``, ``/resume``,
``/replay-node``) end the path and the thread id is what comes before.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tensorsketch.canvas.studio.app import ApiError
from tensorsketch.canvas.studio.debug import CORE_ERRORS, Debugger
from tensorsketch.canvas.studio.safety import BodyTooLarge
from tensorsketch.canvas.studio.sse import EventHub

__all__ = ["debug_routes"]

_log = logging.getLogger("tensorsketch.canvas.studio")

Handler = Callable[[Request], Awaitable[Response]]
Guard = Callable[[Handler], Handler]
JsonBody = Callable[[Request], Awaitable[dict[str, Any]]]

_CHECKPOINT = re.compile(r"^(?P<thread>.+)/checkpoints/(?P<cp>[^/]+)(?P<value>/value)?$")
_ACTIONS = ("fork", "update", "step", "run", "resume", "replay-node")
_ACTION = re.compile(r"^(?P<thread>.+)/(?P<action>" + "|".join(_ACTIONS) + r")$")

DISABLED = (
    "the debugger is off: start the Studio with --backend URL (e.g. "
    "`tensorsketch studio FILE --backend sqlite:///runs.db`) to browse and edit threads."
)


def _json(data: Any, headers: dict[str, str], status: int = 200) -> JSONResponse:
    return JSONResponse(data, status_code=status, headers=headers)


def debug_routes(
    debugger: Debugger | None,
    hub: EventHub,
    guard: Guard,
    json_body: JsonBody,
    headers: dict[str, str],
) -> list[Route]:
    """The ``/api/debug`` routes; with no debugger every one answers 409 (status says so)."""

    def wrapped(handler: Callable[[Request, Debugger], Awaitable[Any]]) -> Handler:
        async def endpoint(request: Request) -> Response:
            if debugger is None:
                if request.url.path == "/api/debug/status":
                    return _json({"enabled": False, "error": DISABLED}, headers)
                return _json({"error": DISABLED}, headers, 409)
            try:
                return _json(await handler(request, debugger), headers)
            except (ApiError, BodyTooLarge):
                raise  # the Studio's guard answers these (4xx)
            except CORE_ERRORS_TYPES as exc:
                status = next(code for kind, code in CORE_ERRORS if isinstance(exc, kind))
                message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
                return _json({"error": message}, headers, status)

        return guard(endpoint)

    async def thread_get(request: Request, dbg: Debugger) -> Any:
        rest = request.path_params["rest"]
        found = _CHECKPOINT.match(rest)
        if found is None:
            return await dbg.thread(rest)
        if found.group("value"):
            channel = request.query_params.get("channel")
            return await dbg.value(found.group("thread"), found.group("cp"), channel)
        return await dbg.checkpoint(found.group("thread"), found.group("cp"))

    async def thread_post(request: Request, dbg: Debugger) -> Any:
        rest = request.path_params["rest"]
        found = _ACTION.match(rest)
        if found is None:
            raise ApiError(404, f"no debugger action at {request.url.path}; actions: {_ACTIONS}.")
        thread_id, action = found.group("thread"), found.group("action")
        body = await json_body(request)
        handlers = {
            "fork": dbg.fork,
            "update": dbg.update,
            "step": dbg.step,
            "run": dbg.run,
            "resume": dbg.resume,
            "replay-node": dbg.replay_node,
        }
        result = await handlers[action](thread_id, body)
        if action != "replay-node":  # a replay writes nothing
            _announce(hub, action, thread_id, result)
        return result

    return [
        Route("/api/debug/status", wrapped(status), methods=["GET"]),
        Route("/api/debug/threads", wrapped(threads), methods=["GET"]),
        Route("/api/debug/threads/{rest:path}", wrapped(thread_get), methods=["GET"]),
        Route("/api/debug/threads/{rest:path}", wrapped(thread_post), methods=["POST"]),
    ]


async def status(request: Request, dbg: Debugger) -> Any:
    del request
    return await dbg.status()


async def threads(request: Request, dbg: Debugger) -> Any:
    params = request.query_params
    limit = params.get("limit")
    if limit is not None and not limit.isdigit():
        raise ApiError(400, f"limit must be a positive integer, got {limit!r}.")
    return await dbg.threads(
        params.get("q"), params.get("cursor"), int(limit) if limit is not None else None
    )


def _announce(hub: EventHub, action: str, thread_id: str, result: dict[str, Any]) -> None:
    """The ``debug`` event every write publishes on ``/api/events``."""
    hub.publish(
        "debug",
        {
            "thread_id": result.get("thread_id", thread_id),
            "source_thread_id": thread_id,
            "checkpoint_id": result.get("checkpoint_id"),
            "action": action,
        },
    )


CORE_ERRORS_TYPES = tuple(kind for kind, _ in CORE_ERRORS)
