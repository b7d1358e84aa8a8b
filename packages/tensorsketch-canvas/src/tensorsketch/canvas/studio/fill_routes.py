"""The Studio's "fill this hole" action: ``POST /api/holes/fill`` starts a fill of one hole,
``GET /api/holes/fill`` reports every fill of this launch.

Filling is turned on when the Studio starts (``--fill-provider NAME --fill-model M``); the
page then picks among that provider and the ones registered in this environment
(:mod:`~tensorsketch.canvas.studio.models`), never an object or import path of its own, so
API keys stay in the server process. Only a hole the holes list shows can be filled. A fill
runs in the background on the server's event loop (its checks run in subprocesses); when it
ends, a ``fill`` event goes to the page's event stream, and the hole list shows the result:
gone when written, ``"unverified"`` when kept as a draft.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tensorsketch.canvas.studio.app import ApiError, Studio
from tensorsketch.canvas.studio.models import ModelChoice, installed_providers, pick_model
from tensorsketch.canvas.studio.sse import EventHub
from tensorsketch.observability.tracing import RecordingTracer, Span

__all__ = ["FillSettings", "Fills", "fill_routes"]

_log = logging.getLogger("tensorsketch.canvas.studio")

Handler = Callable[[Request], Awaitable[Response]]


@dataclass
class FillSettings:
    """How the Studio fills holes: the provider (a registered name, or a provider object in
    tests and embedding), the model, and the fill's limits."""

    provider: Any
    model: str | None = None
    attempts: int = 3
    budget_usd: float | None = None
    timeout: float = 120.0
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The configured provider's name on the page (a provider object: ``scripted``)."""
        return self.provider if isinstance(self.provider, str) else "scripted"

    def choices(self) -> list[ModelChoice]:
        """What the page may pick: the configured provider first, then the registered ones."""
        mine = ModelChoice(self.label, self.model, configured=True)
        return [mine, *(ModelChoice(n) for n in installed_providers() if n != mine.provider)]

    def make_provider(self, choice: ModelChoice | None = None, model: str | None = None) -> Any:
        """The provider for ``choice`` asking ``model`` (a scripted one answers as scripted)."""
        if choice is None or choice.configured:
            if not isinstance(self.provider, str):
                return self.provider
            name, model = self.provider, model or self.model
        else:
            name = choice.provider
        from tensorsketch.registry import create_provider  # noqa: PLC0415 - providers load on the first fill

        return create_provider(name, model=model)


class _Progress(RecordingTracer):
    """Tells the job which step of the fill runs (``Ask``, ``Check``...) and which attempt."""

    def __init__(self, job: dict[str, Any]) -> None:
        super().__init__()
        self.job = job

    def _start(self, name: str, kind: str, attributes: dict[str, Any]) -> Span:
        if kind == "node":
            self.job["stage"] = name
            if name == "Ask":
                self.job["attempt"] = int(self.job.get("attempt") or 0) + 1
        return super()._start(name, kind, attributes)

    def _record(self, span: Span) -> None:
        del span


class Fills:
    """The fills of one Studio launch, at most one running per hole."""

    def __init__(self, studio: Studio, hub: EventHub, settings: FillSettings | None) -> None:
        self.studio = studio
        self.hub = hub
        self.settings = settings
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def view(self) -> dict[str, Any]:
        choices = [c.view() for c in self.settings.choices()] if self.settings else []
        return {
            "enabled": self.settings is not None,
            "choices": choices,
            "attempts": self.settings.attempts if self.settings else None,
            "fills": list(self.jobs.values()),
        }

    def start(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.settings is None:
            raise ApiError(
                409,
                "filling holes is off: start the Studio with --fill-provider NAME and "
                "--fill-model MODEL to choose the model that writes the bodies.",
            )
        file, node = body.get("file"), body.get("node")
        if (
            not isinstance(node, str)
            or not node
            or (file is not None and not isinstance(file, str))
        ):
            raise ApiError(
                400,
                'the body must be {"node": "<class name>", "file": "<path from the holes '
                'list>"} (file may be left out for the opened file).',
            )
        choice, model = pick_model(self.settings.choices(), body)
        target = str(self.studio.path) if file is None else file
        holes = [h for h in self.studio.holes() if h["node"] == node and h["file"] == target]
        if not holes:
            raise ApiError(404, f"no hole {node!r} in {target}: fill a node the holes list shows.")
        key = (target, node)
        if self.jobs.get(key, {}).get("status") == "running":
            raise ApiError(409, f"{node} is already being filled; wait for that fill to end.")
        job: dict[str, Any] = {
            "file": target,
            "node": node,
            "status": "running",
            "provider": choice.provider,
            "model": model,
            "stage": "starting",
            "attempt": 0,
            "started_at": time.time(),
        }
        self.jobs[key] = job
        run = self._run(Path(target), node, job, choice, model)
        task = asyncio.get_running_loop().create_task(run)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    async def _run(
        self, file: Path, node: str, job: dict[str, Any], choice: ModelChoice, model: str | None
    ) -> None:
        from tensorsketch.canvas.fill import fill_hole  # noqa: PLC0415 - the runtime loads on the first fill

        settings = self.settings
        assert settings is not None
        try:
            result = await fill_hole(
                file,
                node,
                settings.make_provider(choice, model),
                max_attempts=settings.attempts,
                tracer=_Progress(job),
                budget_usd=settings.budget_usd,
                timeout=settings.timeout,
                **settings.options,
            )
        except Exception as exc:  # the page shows why; the server keeps serving
            _log.warning("filling %s in %s failed: %s", node, file, exc)
            job.update(status="error", error=f"{type(exc).__name__}: {exc}")
        else:
            job.update(
                status=result.outcome,
                attempts=result.attempts,
                failures=result.failures,
                passed=result.passed,
                run=result.thread_id,
                tokens=result.tokens,
                cost_usd=result.cost_usd,
                diff=result.diff,
                stage="done",
            )
        self.hub.publish("fill", dict(job))


def fill_routes(
    fills: Fills,
    guarded: Callable[[Handler], Handler],
    json_body: Callable[[Request], Awaitable[dict[str, Any]]],
    headers: dict[str, str],
) -> list[Route]:
    """``POST /api/holes/fill`` (202 and the job) and ``GET /api/holes/fill``."""

    async def post(request: Request) -> Response:
        job = fills.start(await json_body(request))
        return JSONResponse(job, status_code=202, headers=headers)

    async def get(request: Request) -> Response:
        del request
        return JSONResponse(fills.view(), headers=headers)

    return [
        Route("/api/holes/fill", guarded(post), methods=["POST"]),
        Route("/api/holes/fill", guarded(get), methods=["GET"]),
    ]
