"""Filling a hole is itself a TensorSketch run: durable, traced and budgeted.

The graph is ``Ask → Generate → Check``, looping back to ``Ask`` with the failures until a
candidate passes (``Write``), the attempts run out or the budget is spent (``Keep``, the
draft). ``Generate`` is an :class:`~tensorsketch.Llm` node, so each model call is journaled,
traced as a ``model`` span and charged to the run's :class:`~tensorsketch.budget.Budget`;
the checks and the writes are journaled steps, so a resumed fill repeats neither a model call
nor a check that finished. The file is written only by ``Write``, and only if it has not
changed since the spec was read.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import os
import tempfile
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tensorsketch.agents import Llm
from tensorsketch.budget import Budget, budget_scope, current_budget
from tensorsketch.canvas.drafts import draft_path, remove_draft, write_draft
from tensorsketch.canvas.exceptions import CanvasError
from tensorsketch.canvas.fill.body import parse_reply, splice
from tensorsketch.canvas.fill.checks import Checker, missing_tools, project_root
from tensorsketch.canvas.fill.contract import contract_tests
from tensorsketch.canvas.fill.spec import Example, HoleSpec, build_spec
from tensorsketch.constants import END, START
from tensorsketch.context import Context
from tensorsketch.graph import Graph
from tensorsketch.node import Node
from tensorsketch.observability.tracing import Tracer
from tensorsketch.provider import ChatProvider
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.schema import Schema

__all__ = ["FillError", "FillResult", "fill_hole"]

SYSTEM = (
    "You write the body of one method of a TensorSketch node: typed Python that passes mypy "
    "(strict when the project is) and the node's contract tests. The node's `run` receives "
    "its input as `inp` (an instance of its `In` schema) and returns `self.Out(...)` with "
    "every Out field set. Keep the signature exactly as given, write no `raise Hole`, put "
    "any import inside the body, and reply with one ```python block holding only the method."
)


class FillError(CanvasError):
    """The fill cannot start: a checker is not installed, or the arguments do not fit."""


class FillState(Schema):
    """The fill's durable state: the last candidate and its verdict."""

    source_sha: str = ""
    attempt: int = 0
    prompt: str = ""
    reply: str = ""
    code: str = ""
    failures: list[str] = []
    passed: list[str] = []
    over_budget: str = ""
    outcome: str = ""
    written: str = ""


@dataclass
class FillDeps:
    """What the nodes need that is not state: the spec and the checker (rebuilt on resume)."""

    spec: HoleSpec
    checker: Checker
    max_attempts: int
    provider: str
    write_tests: Path | None = None
    thread_id: str = ""


class Ask(Node):
    """The prompt: the spec, and after a failed attempt the candidate and what failed."""

    class In(Schema):
        attempt: int
        code: str
        failures: list[str]

    class Out(Schema):
        prompt: str

    async def run(self, ctx: Context, inp: In) -> Out:
        deps: FillDeps = ctx.deps
        prompt = deps.spec.prompt()
        if inp.attempt:
            failed = "\n\n".join(f"- {f}" for f in inp.failures)
            prompt += (
                f"\n\nAttempt {inp.attempt} was:\n```python\n{inp.code}```\nIt failed these "
                f"checks:\n{failed}\n\nFix it and reply with the whole method again."
            )
        return self.Out(prompt=prompt)


class Check(Node):
    """Parse the reply and check the candidate (in subprocesses; journaled)."""

    class In(Schema):
        attempt: int
        reply: str

    class Out(Schema):
        attempt: int
        code: str
        failures: list[str]
        passed: list[str]
        over_budget: str

    async def run(self, ctx: Context, inp: In) -> Out:
        deps: FillDeps = ctx.deps
        candidate = parse_reply(deps.spec, inp.reply)
        failures, passed = list(candidate.problems), []
        if not failures:
            text = splice(deps.spec, candidate.code)

            async def check() -> dict[str, list[str]]:
                report = await deps.checker.check(text, inp.attempt)
                return {"failures": report.failures, "passed": report.passed}

            verdict: dict[str, list[str]] = await ctx.step(f"check-{inp.attempt}", check)
            failures, passed = verdict["failures"], verdict["passed"]
        budget = current_budget()
        exceeded = budget.exceeded() if budget is not None else None
        return self.Out(
            attempt=inp.attempt + 1,
            code=candidate.code,
            failures=failures,
            passed=passed,
            over_budget=str(exceeded) if exceeded else "",
        )


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    try:
        os.chmod(tmp, path.stat().st_mode & 0o7777)
    except OSError:  # pragma: no cover - keep the default mode
        pass
    os.replace(tmp, path)


class Write(Node):
    """Write the passing body into the file (only if the file is unchanged since the spec)."""

    class In(Schema):
        code: str
        source_sha: str
        attempt: int

    class Out(Schema):
        outcome: str
        written: str
        failures: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        deps: FillDeps = ctx.deps
        spec = deps.spec

        async def write() -> dict[str, Any]:
            current = spec.file.read_bytes().decode("utf-8")
            if build_sha(current) != inp.source_sha:
                return {
                    "outcome": "draft",
                    "written": "",
                    "failures": [
                        f"{spec.file} changed while the body was generated; nothing was written "
                        "(run the fill again on the file as it is now)"
                    ],
                }
            _atomic_write(spec.file, splice(spec, inp.code).encode("utf-8"))
            remove_draft(spec.file, spec.node)
            written = ""
            if deps.write_tests is not None:
                deps.write_tests.parent.mkdir(parents=True, exist_ok=True)
                deps.write_tests.write_text(
                    contract_tests(spec, into=deps.write_tests), encoding="utf-8"
                )
                written = str(deps.write_tests)
            return {"outcome": "written", "written": written, "failures": []}

        result: dict[str, Any] = await ctx.step("write", write)
        if result["outcome"] == "draft":
            _keep(deps, inp.code, result["failures"], inp.attempt)
        return self.Out(**result)


def _keep(deps: FillDeps, code: str, failures: list[str], attempts: int) -> Path:
    return write_draft(
        deps.spec.file,
        deps.spec.node,
        {
            "status": "unverified",
            "code": code,
            "failures": failures,
            "attempts": attempts,
            "provider": deps.provider,
            "thread_id": deps.thread_id,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )


class Keep(Node):
    """Keep the last candidate beside the file as a draft, with its failures."""

    class In(Schema):
        code: str
        failures: list[str]
        attempt: int
        over_budget: str

    class Out(Schema):
        outcome: str

    async def run(self, ctx: Context, inp: In) -> Out:
        deps: FillDeps = ctx.deps
        failures = [*inp.failures, *([inp.over_budget] if inp.over_budget else [])]

        async def keep() -> str:
            return str(_keep(deps, inp.code, failures, inp.attempt))

        await ctx.step("keep-draft", keep)
        return self.Out(outcome="draft")


def build_sha(text: str) -> str:
    """The hash :attr:`HoleSpec.source_sha` compares: the file's text as read."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _next(state: FillState, deps_attempts: int) -> str:
    if not state.failures:
        return "Write"
    if state.over_budget or state.attempt >= deps_attempts:
        return "Keep"
    return "Ask"


def fill_graph(provider: ChatProvider, *, max_attempts: int, max_tokens: int = 4096) -> Any:
    """The fill as a compiled graph (``Ask → Generate → Check → Ask | Write | Keep``)."""
    return (
        Graph(FillState)
        .add(Ask)
        .add(
            Llm(
                provider,
                system=SYSTEM,
                input_key="prompt",
                output_key="reply",
                max_tokens=max_tokens,
                name="Generate",
            )
        )
        .add(Check)
        .add(Write)
        .add(Keep)
        .edge(START, "Ask")
        .edge("Ask", "Generate")
        .edge("Generate", "Check")
        .conditional("Check", lambda s: _next(s, max_attempts))
        .edge("Write", END)
        .edge("Keep", END)
        .compile()
    )


@dataclass
class FillResult:
    """How a fill ended: ``outcome`` is ``"written"`` (the body passed and is in the file) or
    ``"draft"`` (kept beside the file with ``failures``)."""

    file: Path
    node: str
    outcome: str
    attempts: int
    failures: list[str]
    passed: list[str]
    thread_id: str
    tokens: int
    cost_usd: float | None
    diff: str = ""
    draft: Path | None = None
    tests: Path | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "written"


def state_dir(file: Path) -> Path:
    """Where fills keep their runs, traces and scratch files: ``<project>/.tensorsketch``."""
    return project_root(file) / ".tensorsketch"


async def fill_hole(
    file: str | os.PathLike[str],
    node: str,
    provider: ChatProvider,
    *,
    examples: list[Example] | None = None,
    max_attempts: int = 3,
    budget_usd: float | None = None,
    max_total_tokens: int | None = None,
    backend: Backend | None = None,
    thread_id: str | None = None,
    tracer: Tracer | None = None,
    timeout: float = 120.0,
    max_examples: int = 25,
    write_tests: str | os.PathLike[str] | None = None,
    workdir: str | os.PathLike[str] | None = None,
    mypy_cache: str | os.PathLike[str] | None = None,
) -> FillResult:
    """Fill the hole ``node`` in ``file`` with a body from ``provider``, verified first.

    The run is durable on ``backend`` (default: SQLite in ``<project>/.tensorsketch``) under
    ``thread_id``: pass the ``thread_id`` of an interrupted fill to resume it. Only a body
    that passes every check is written; otherwise the last candidate is kept as a draft.

    :param max_attempts: candidates to ask for (the first, then repairs) before giving up.
    :param budget_usd: stop asking for repairs once the model calls cost this much.
    :param write_tests: also write the contract tests to this path once the body passes.
    :raises FillError: mypy, pytest or hypothesis is missing, or an argument is out of range.
    """
    from tensorsketch.runtime.backends import SqliteBackend  # noqa: PLC0415 - only the default store needs it

    if max_attempts < 1:
        msg = f"max_attempts must be at least 1, got {max_attempts}"
        raise FillError(msg)
    missing = missing_tools()
    if missing:
        msg = (
            f"filling a hole checks the body with mypy, pytest and hypothesis; this environment "
            f"lacks {', '.join(missing)}: `pip install 'tensorsketch-canvas[fill]'`"
        )
        raise FillError(msg)
    path = Path(file)
    spec = build_spec(path, node, examples)
    home = state_dir(path)
    thread = thread_id or f"fill-{node}-{uuid.uuid4().hex[:8]}"
    scratch = Path(workdir) if workdir else home / "fill" / thread
    checker = Checker(
        spec,
        scratch,
        timeout=timeout,
        max_examples=max_examples,
        mypy_cache=Path(mypy_cache) if mypy_cache else home / "mypy_cache",
    )
    deps = FillDeps(
        spec=spec,
        checker=checker,
        max_attempts=max_attempts,
        provider=f"{provider.provider_name}:{provider.model}",
        write_tests=Path(write_tests) if write_tests else None,
        thread_id=thread,
    )
    own = backend is None
    if backend is None:
        home.mkdir(parents=True, exist_ok=True)
        backend = SqliteBackend(home / "holes.db")
    graph = fill_graph(provider, max_attempts=max_attempts)
    budget = Budget(max_total_tokens=max_total_tokens, max_cost_usd=budget_usd)
    try:
        resuming = thread_id is not None and await graph.aget_state(thread, backend) is not None
        start = None if resuming else {"source_sha": spec.source_sha}
        with budget_scope(budget):
            final: FillState = await graph.invoke(
                start,
                thread_id=thread,
                backend=backend,
                tracer=tracer,
                deps=deps,
                max_steps=3 * max_attempts + 4,
            )
    finally:
        if own:
            await backend.aclose()
    after = (await asyncio.to_thread(path.read_bytes)).decode("utf-8")
    diff = "".join(
        difflib.unified_diff(
            spec.source.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"{path} (hole)",
            tofile=f"{path} (filled)",
        )
    )
    return FillResult(
        file=path,
        node=node,
        outcome=final.outcome or "draft",
        attempts=final.attempt,
        failures=list(final.failures) + ([final.over_budget] if final.over_budget else []),
        passed=list(final.passed),
        thread_id=thread,
        tokens=budget.total_tokens,
        cost_usd=budget.cost_usd,
        diff=diff if final.outcome == "written" else "",
        draft=draft_path(path) if final.outcome != "written" else None,
        tests=Path(final.written) if final.written else None,
    )
