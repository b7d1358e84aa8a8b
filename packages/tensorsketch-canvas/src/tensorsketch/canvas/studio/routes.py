"""The Starlette application: the page, the JSON API, the event stream and the span sink.

See ``docs/studio.md`` ("API") for the contract the frontend codes against.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from tensorsketch.canvas.studio import export, safety
from tensorsketch.canvas.studio.app import ApiError, Studio
from tensorsketch.canvas.studio.debug import Debugger
from tensorsketch.canvas.studio.debug_routes import debug_routes
from tensorsketch.canvas.studio.doubt import doubt_routes
from tensorsketch.canvas.studio.fill_routes import Fills, FillSettings, fill_routes
from tensorsketch.canvas.studio.memory_ops import memory_op_routes
from tensorsketch.canvas.studio.optimize_routes import (
    Optimizations,
    OptimizeSettings,
    optimize_routes,
)
from tensorsketch.canvas.studio.run_routes import run_routes
from tensorsketch.canvas.studio.runs import Runs
from tensorsketch.canvas.studio.sse import EventHub
from tensorsketch.canvas.studio.trace import parse_spans

__all__ = ["STATIC_DIR", "TRACE_MAX_BODY", "create_app"]

_log = logging.getLogger("tensorsketch.canvas.studio")

#: The frontend's built assets (index.html + assets/), served as they are.
STATIC_DIR = Path(__file__).with_name("static")
#: Span batches may be larger than edits: 64 spans with capped tool payloads.
TRACE_MAX_BODY = 4 * 1024 * 1024

_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}

PLACEHOLDER = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>TensorSketch Studio</title></head>
<body><h1>TensorSketch Studio</h1>
<p>The Studio's page has not been built into this install (no <code>static/index.html</code>).
The API is up: <a id="graph" href="#">/api/graph</a>.</p>
<pre id="out"></pre>
<script>
const token = new URLSearchParams(location.search).get("token");
fetch("/api/graph", {headers: {"X-Studio-Token": token}})
  .then(r => r.json()).then(d => {
    document.getElementById("out").textContent = JSON.stringify(d, null, 2);
  });
</script></body></html>
"""

Handler = Callable[[Request], Awaitable[Response]]


class _Static(StaticFiles):
    """The built assets; a plain 404 (not a crash) while the folder does not exist yet."""

    async def check_config(self) -> None:
        if not STATIC_DIR.is_dir():
            raise HTTPException(404, "the Studio's page has not been built (no static/ folder)")
        await super().check_config()


def _json(data: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(data, status_code=status, headers=_HEADERS)


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return _json({"error": message, **extra}, status)


class _Api:
    """The Studio's endpoints over one opened file (``studio``) and its event hub."""

    def __init__(self, studio: Studio, hub: EventHub) -> None:
        self.studio = studio
        self.hub = hub

    def guarded(self, handler: Handler, *, token: bool = True) -> Handler:
        async def endpoint(request: Request) -> Response:
            if not safety.origin_ok(request):
                return _error(
                    403, "cross-origin request refused: only the Studio's own page may call it."
                )
            if token and not safety.token_ok(request, self.studio.token):
                return _error(
                    403,
                    "missing or wrong Studio token: open the URL the command printed "
                    "(it carries ?token=...).",
                )
            try:
                return await handler(request)
            except ApiError as exc:
                return _json(exc.body(), exc.status)
            except safety.BodyTooLarge as exc:
                return _error(413, str(exc))
            except Exception as exc:
                _log.exception("Studio request %s %s failed", request.method, request.url.path)
                return _error(500, f"internal error: {type(exc).__name__}: {exc}")

        return endpoint

    async def json_body(self, request: Request, limit: int = safety.MAX_BODY) -> dict[str, Any]:
        raw = await safety.read_body(request, limit)
        try:
            data = safety.load_json(raw)
        except (safety.NestedTooDeep, safety.NotText) as exc:
            raise ApiError(400, str(exc)) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"the body is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ApiError(400, f"the body must be a JSON object, got {type(data).__name__}.")
        return data

    async def page(self, request: Request) -> Response:
        del request
        index = STATIC_DIR / "index.html"
        try:
            html = await asyncio.to_thread(index.read_text, encoding="utf-8")
        except OSError:
            html = PLACEHOLDER
        return HTMLResponse(html, headers=_HEADERS)

    async def page_forbidden(self, request: Request) -> Response:
        if not safety.token_ok(request, self.studio.token):
            return HTMLResponse(
                "<!doctype html><title>TensorSketch Studio</title><p>This page needs the token "
                "from the URL the command printed: <code>/?token=...</code></p>",
                status_code=403,
                headers=_HEADERS,
            )
        return await self.page(request)

    async def get_graph(self, request: Request) -> Response:
        graph = request.query_params.get("graph")
        studio = self.studio.for_file(request.query_params.get("file"))
        return _json(await asyncio.to_thread(studio.graph_view, graph))

    async def post_edit(self, request: Request) -> Response:
        body = await self.json_body(request)
        result = await asyncio.to_thread(self.studio.for_file(body.get("file")).edit, body)
        self.hub.publish("file", {"version": result["version"]})
        return _json(result)

    async def post_handoff(self, request: Request) -> Response:
        body = await self.json_body(request)
        result = await asyncio.to_thread(self.studio.handoff, body)
        self.hub.publish("file", {"version": result["version"]})
        return _json(result)

    async def post_open(self, request: Request) -> Response:
        body = await self.json_body(request)
        studio = self.studio.for_file(body.get("file"))
        return _json(await asyncio.to_thread(studio.open_node, body))

    async def post_layout(self, request: Request) -> Response:
        body = await self.json_body(request)
        studio = self.studio.for_file(body.get("file"))
        return _json(await asyncio.to_thread(studio.set_layout, body))

    async def events(self, request: Request) -> Response:
        del request
        return StreamingResponse(
            self.hub.stream(),
            media_type="text/event-stream",
            headers={**_HEADERS, "X-Accel-Buffering": "no"},
        )

    async def post_trace(self, request: Request) -> Response:
        # Non-browser clients (no Origin) may post spans without the token; a browser page
        # must be the Studio's own and carry it. ``guarded`` already refused foreign origins.
        if "origin" in request.headers and not safety.token_ok(request, self.studio.token):
            return _error(403, "a browser posting spans must send the Studio token.")
        body = await self.json_body(request, TRACE_MAX_BODY)
        try:
            spans = parse_spans(body)
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        runs = self.studio.trace.add(spans)
        for run in runs:
            self.hub.publish("trace", {"run": run})
        return _json({"accepted": len(spans)})

    async def get_trace(self, request: Request) -> Response:
        run = request.query_params.get("run")
        if run is None:
            return _json({"runs": self.studio.trace.runs()})
        folded = self.studio.trace.run(run)
        if folded is None:
            return _error(404, f"no spans of run {run!r} in the trace tail.")
        return _json(folded)

    async def get_export(self, request: Request) -> Response:
        fmt = request.query_params.get("format", "mermaid")
        if fmt not in ("mermaid", "svg"):
            return _error(400, f"format must be 'mermaid' or 'svg', got {fmt!r}.")
        studio = self.studio.for_file(request.query_params.get("file"))
        ir = await asyncio.to_thread(studio.current_ir, request.query_params.get("graph"))
        if fmt == "mermaid":
            return Response(export.to_mermaid(ir), media_type="text/plain", headers=_HEADERS)
        return Response(export.to_svg(ir), media_type="image/svg+xml", headers=_HEADERS)

    async def not_found(self, request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 404
        detail = exc.detail if isinstance(exc, HTTPException) else "not found"
        return _error(status, f"{request.method} {request.url.path}: {detail}")


def create_app(
    studio: Studio,
    *,
    hub: EventHub | None = None,
    debugger: Debugger | None = None,
    fill: FillSettings | None = None,
    optimize: OptimizeSettings | None = None,
) -> Starlette:
    """The Studio's ASGI app for ``studio`` (one opened file, one token); ``debugger`` (a
    backend to browse, ``--backend``) turns on the ``/api/debug`` routes, ``fill`` (the model
    that writes bodies, ``--fill-provider``) the ``POST /api/holes/fill`` action; ``optimize``
    says which proposers the ``/api/optimize`` action offers besides the registered ones."""
    hub = hub or EventHub(studio.path)
    fills = Fills(studio, hub, fill)
    optimizations = Optimizations(studio, hub, optimize or OptimizeSettings())
    api = _Api(studio, hub)
    runs = Runs(studio, hub, debugger)
    guarded = api.guarded
    routes: list[Route | Mount] = [
        Route("/", guarded(api.page_forbidden, token=False), methods=["GET"]),
        Route("/api/graph", guarded(api.get_graph), methods=["GET"]),
        Route("/api/edit", guarded(api.post_edit), methods=["POST"]),
        Route("/api/layout", guarded(api.post_layout), methods=["POST"]),
        Route("/api/handoff", guarded(api.post_handoff), methods=["POST"]),
        Route("/api/open", guarded(api.post_open), methods=["POST"]),
        Route("/api/events", guarded(api.events), methods=["GET"]),
        Route("/api/trace", guarded(api.post_trace, token=False), methods=["POST"]),
        Route("/api/trace", guarded(api.get_trace), methods=["GET"]),
        Route("/api/export", guarded(api.get_export), methods=["GET"]),
        *doubt_routes(debugger, guarded, _HEADERS),
        *memory_op_routes(debugger, guarded, _HEADERS),
        *debug_routes(debugger, hub, guarded, api.json_body, _HEADERS),
        *fill_routes(fills, guarded, api.json_body, _HEADERS),
        *optimize_routes(optimizations, guarded, api.json_body, _HEADERS),
        *run_routes(runs, guarded, api.json_body, _HEADERS),
        Mount("/static", app=_Static(directory=STATIC_DIR, check_dir=False), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(safety.HostCheckMiddleware)],
        exception_handlers={HTTPException: api.not_found},
    )
    app.state.studio = studio
    app.state.hub = hub
    app.state.debugger = debugger
    app.state.fills = fills
    app.state.optimizations = optimizations
    app.state.runs = runs
    return app
