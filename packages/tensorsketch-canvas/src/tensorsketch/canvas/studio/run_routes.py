"""The run panel's routes (``/api/run...``), under the Studio's guards (localhost, the page's
origin, the launch token): the form, starting a run, a thread's status and messages, and
answering what it waits on."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tensorsketch.canvas.studio.app import ApiError
from tensorsketch.canvas.studio.debug import CORE_ERRORS
from tensorsketch.canvas.studio.runs import Runs
from tensorsketch.canvas.studio.safety import BodyTooLarge

__all__ = ["run_routes"]

Handler = Callable[[Request], Awaitable[Response]]

_RESUME = re.compile(r"^(?P<thread>.+)/resume$")


def run_routes(
    runs: Runs,
    guarded: Callable[[Handler], Handler],
    json_body: Callable[[Request], Awaitable[dict[str, Any]]],
    headers: dict[str, str],
) -> list[Route]:
    """``GET/POST /api/run``, ``GET /api/run/threads/{id}``, ``POST .../{id}/resume``."""

    def mapped(handler: Handler) -> Handler:
        """A core error (a busy thread, a checkpoint that no longer decodes) as its 4xx."""

        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request)
            except (ApiError, BodyTooLarge):
                raise  # the Studio's guard answers these
            except tuple(kind for kind, _ in CORE_ERRORS) as exc:
                status = next(code for kind, code in CORE_ERRORS if isinstance(exc, kind))
                raise ApiError(status, f"{type(exc).__name__}: {exc}") from None

        return guarded(endpoint)

    async def form(request: Request) -> Response:
        del request
        return JSONResponse(await runs.form(), headers=headers)

    async def start(request: Request) -> Response:
        started = await runs.start(await json_body(request))
        return JSONResponse(started, status_code=202, headers=headers)

    async def thread(request: Request) -> Response:
        return JSONResponse(await runs.thread(request.path_params["rest"]), headers=headers)

    async def resume(request: Request) -> Response:
        found = _RESUME.match(request.path_params["rest"])
        if found is None:
            raise ApiError(404, f"no run action at {request.url.path}; POST .../resume.")
        body = await json_body(request)
        started = await runs.resume(found.group("thread"), body)
        return JSONResponse(started, status_code=202, headers=headers)

    return [
        Route("/api/run", mapped(form), methods=["GET"]),
        Route("/api/run", mapped(start), methods=["POST"]),
        Route("/api/run/threads/{rest:path}", mapped(thread), methods=["GET"]),
        Route("/api/run/threads/{rest:path}", mapped(resume), methods=["POST"]),
    ]
