"""The Studio's "Optimize" action: improve an agent's prompt against an eval suite.

``GET /api/optimize`` lists what can be optimized (the agents of the opened file with a
``system=`` keyword, the project's files that define a ``Suite``), the proposer models the
page may pick, and every optimization of this launch. ``POST /api/optimize`` starts one in a
subprocess (:mod:`~tensorsketch.canvas.studio.optimize_child`, built like ``tensorsketch
optimize``): the agent's and the suite's code never run in the Studio. Its rounds stream in
as they finish (``optimize`` events), and the outcome holds the scores before and after and
the diff. ``POST /api/optimize/write`` writes the winning prompt into the file, only when
the user confirmed it (``--write``), and only if the file did not change meanwhile.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import logging
import math
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tensorsketch.canvas._pyparse import parse_python
from tensorsketch.canvas.studio._files import atomic_write_bytes, sha256_hex
from tensorsketch.canvas.studio.app import ApiError, Studio
from tensorsketch.canvas.studio.models import ModelChoice, installed_providers, pick_model
from tensorsketch.canvas.studio.sse import EventHub

__all__ = ["Optimizations", "OptimizeSettings", "optimize_routes"]

_log = logging.getLogger("tensorsketch.canvas.studio")

Handler = Callable[[Request], Awaitable[Response]]

#: The most suite files listed (a project rarely has more than a few).
MAX_SUITES = 200
#: The largest suite file read while looking for ``Suite(`` (bytes).
MAX_SUITE_BYTES = 1_000_000
#: Rounds the page may ask for at most.
MAX_ROUNDS = 50
#: The last lines of the child's stderr kept for an error.
STDERR_TAIL = 4000


@dataclass
class OptimizeSettings:
    """What the optimizations of this Studio may use: ``proposers`` are proposers the Studio
    was started with, by the name the page picks (a ``file.py:attr`` spec each, loaded in the
    child: a scripted proposer in tests and demos); the registered providers are offered too.
    ``timeout`` bounds one optimization (seconds)."""

    proposers: dict[str, str] = field(default_factory=dict)
    timeout: float = 1800.0
    max_rounds: int = 5

    def choices(self) -> list[ModelChoice]:
        mine = [ModelChoice(name, configured=True) for name in self.proposers]
        taken = set(self.proposers)
        return [*mine, *(ModelChoice(n) for n in installed_providers() if n not in taken)]


def agents_in(source: str) -> list[str]:
    """The module-level names bound to a call that has a ``system=`` keyword (an agent)."""
    try:
        tree = parse_python(source)
    except SyntaxError:
        return []
    found = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and isinstance(stmt.value, ast.Call):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            named = len(targets) == 1 and isinstance(targets[0], ast.Name)
            if named and any(k.arg == "system" for k in stmt.value.keywords):
                found.append(targets[0].id)  # type: ignore[attr-defined]
    return found


def _suite_files(project: Path, files: list[Path]) -> list[str]:
    """The project's Python files that build a ``Suite(...)``, relative to the project."""
    out = []
    for path in files:
        try:
            if path.stat().st_size > MAX_SUITE_BYTES:
                continue
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if "Suite(" in text and "tensorsketch.eval" in text:
            out.append(path.relative_to(project).as_posix() if project.is_dir() else path.name)
            if len(out) >= MAX_SUITES:
                break
    return out


class Optimizations:
    """The optimizations of one Studio launch, at most one running at a time."""

    def __init__(self, studio: Studio, hub: EventHub, settings: OptimizeSettings) -> None:
        self.studio = studio
        self.hub = hub
        self.settings = settings
        self.jobs: dict[str, dict[str, Any]] = {}
        #: what only the server keeps of a job: the new source it would write
        self._sources: dict[str, tuple[str, str]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def _read_source(self) -> str:
        try:
            return self.studio.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ApiError(422, f"cannot read {self.studio.path}: {exc}") from None

    def view(self) -> dict[str, Any]:
        assert self.studio.project is not None
        files = self.studio._project_files()  # the holes badge's walk
        return {
            "file": str(self.studio.path),
            "agents": agents_in(self._read_source()),
            "suites": _suite_files(self.studio.project, files),
            "choices": [c.view() for c in self.settings.choices()],
            "max_rounds": self.settings.max_rounds,
            "jobs": list(self.jobs.values()),
        }

    def start(self, body: dict[str, Any]) -> dict[str, Any]:
        agent, suite = body.get("agent"), body.get("suite")
        agents = agents_in(self._read_source())
        if not isinstance(agent, str) or agent not in agents:
            listed = ", ".join(agents) or "none: give an agent its instructions as system=..."
            raise ApiError(
                400,
                f"'agent' must name an agent of {self.studio.path.name} with a system= "
                f"prompt ({listed}), got {agent!r:.80}.",
            )
        assert self.studio.project is not None
        suites = _suite_files(self.studio.project, self.studio._project_files())
        if not isinstance(suite, str) or suite not in suites:
            raise ApiError(
                400,
                f"'suite' must be one of the project's suite files ({', '.join(suites) or 'none'})"
                f", got {suite!r:.80}.",
            )
        rounds = body.get("max_rounds", self.settings.max_rounds)
        if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= MAX_ROUNDS:
            raise ApiError(400, f"'max_rounds' must be an integer from 1 to {MAX_ROUNDS}.")
        budget = body.get("budget_usd")
        if budget is not None and (
            isinstance(budget, bool)
            or not isinstance(budget, int | float)
            or not math.isfinite(budget)
            or budget <= 0
        ):
            raise ApiError(400, "'budget_usd' must be a positive number of dollars (or left out).")
        choice, model = pick_model(self.settings.choices(), body)
        if any(j["status"] == "running" for j in self.jobs.values()):
            raise ApiError(409, "an optimization is already running; wait for it to end.")
        job_id = uuid.uuid4().hex[:12]
        request: dict[str, Any] = {
            "file": str(self.studio.path),
            "agent": agent,
            "suite": str(self.studio.project / suite) if self.studio.project.is_dir() else suite,
            "max_rounds": rounds,
            "budget_usd": budget,
        }
        if choice.configured:
            request["proposer"] = self.settings.proposers[choice.provider]
        else:
            request.update(provider=choice.provider, model=model)
        job: dict[str, Any] = {
            "id": job_id,
            "agent": agent,
            "suite": suite,
            "provider": choice.provider,
            "model": model,
            "max_rounds": rounds,
            "status": "running",
            "rounds": [],
            "started_at": time.time(),
        }
        self.jobs[job_id] = job
        task = asyncio.get_running_loop().create_task(self._run(job, request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    async def _run(self, job: dict[str, Any], request: dict[str, Any]) -> None:
        cwd = self.studio.project if self.studio.project and self.studio.project.is_dir() else None
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tensorsketch.canvas.studio.optimize_child",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.stdin.write(json.dumps(request).encode("utf-8"))
        proc.stdin.close()
        errors = asyncio.get_running_loop().create_task(proc.stderr.read())
        try:
            async with asyncio.timeout(self.settings.timeout):
                async for line in proc.stdout:
                    self._take(job, line)
                await proc.wait()
        except TimeoutError:
            job.update(status="error", error=f"stopped after {self.settings.timeout:g} s")
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        stderr = (await errors).decode("utf-8", "replace")
        if job["status"] == "running":
            tail = stderr[-STDERR_TAIL:].strip()
            job.update(status="error", error=f"the optimizer exited without a result: {tail}")
        self.hub.publish("optimize", {"id": job["id"], "status": job["status"]})

    def _take(self, job: dict[str, Any], line: bytes) -> None:
        """One report line of the child."""
        try:
            item = json.loads(line)
        except ValueError:
            return
        if not isinstance(item, dict):
            return
        if "round" in item:
            job["rounds"].append(item["round"])
            self.hub.publish("optimize", {"id": job["id"], "status": "running"})
        elif "started" in item:
            job["started"] = item["started"]
        elif "error" in item:
            job.update(status="error", error=str(item["error"]))
        elif "result" in item and isinstance(item["result"], dict):
            result = dict(item["result"])
            new = result.pop("new_source", None)
            sha = str(result.pop("source_sha256", ""))
            if isinstance(new, str):
                self._sources[job["id"]] = (sha, new)
            job.update(status="done", result=result, written=False)

    def write(self, body: dict[str, Any]) -> dict[str, Any]:
        job_id = body.get("job")
        job = self.jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None:
            raise ApiError(404, f"no optimization {job_id!r:.40} in this Studio launch.")
        if body.get("confirm") is not True:
            raise ApiError(
                403,
                'writing the prompt needs a confirmation: send "confirm": true once the user '
                "has seen the diff.",
            )
        if job["status"] != "done":
            raise ApiError(409, f"optimization {job_id} is {job['status']}: nothing to write.")
        if job_id not in self._sources:
            raise ApiError(409, "no candidate beat the current prompt: there is nothing to write.")
        if job.get("written"):
            raise ApiError(409, f"optimization {job_id} was already written.")
        sha, new = self._sources[job_id]
        with self.studio.lock:
            current = self.studio.path.read_bytes()
            if sha256_hex(current) != sha:
                raise ApiError(
                    409,
                    f"{self.studio.path.name} changed since the optimization read it; nothing "
                    "was written. Run the optimization again on the current file.",
                )
            atomic_write_bytes(self.studio.path, new.encode("utf-8"))
        job["written"] = True
        self.hub.publish("optimize", {"id": job_id, "status": "written"})
        return job


def optimize_routes(
    optimizations: Optimizations,
    guarded: Callable[[Handler], Handler],
    json_body: Callable[[Request], Awaitable[dict[str, Any]]],
    headers: dict[str, str],
) -> list[Route]:
    """``GET``/``POST /api/optimize`` and ``POST /api/optimize/write``."""

    async def get(request: Request) -> Response:
        del request
        view = await asyncio.to_thread(optimizations.view)
        return JSONResponse(view, headers=headers)

    async def post(request: Request) -> Response:
        body = await json_body(request)
        job = optimizations.start(body)
        return JSONResponse(job, status_code=202, headers=headers)

    async def write(request: Request) -> Response:
        body = await json_body(request)
        job = await asyncio.to_thread(optimizations.write, body)
        return JSONResponse(job, headers=headers)

    return [
        Route("/api/optimize", guarded(get), methods=["GET"]),
        Route("/api/optimize", guarded(post), methods=["POST"]),
        Route("/api/optimize/write", guarded(write), methods=["POST"]),
    ]
