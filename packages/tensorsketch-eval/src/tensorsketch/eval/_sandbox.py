"""The ``Sandbox`` seam: a sandbox *runs* one trial and hands back artifacts; it never grades.

Graders always run in the harness, after the sandbox returns. :class:`InProcessSandbox` runs
the trial in this process under a fresh tracer and a fresh environment; the agent's model
output cannot reach a grader, but code the *tools* run shares the process, so use it when the
case controls the tools. :class:`SubprocessSandbox` runs the trial in a child Python process
(killed at the timeout): whatever the agent's code does there, it cannot touch the graders,
their results or this process's memory — only the JSON the child sends back is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import sys
import time
from abc import ABC, abstractmethod
from typing import Any

from tensorsketch.eval._agents import build_agent
from tensorsketch.eval._approvals import run_with_reviewer, trial_thread
from tensorsketch.eval._case import Case
from tensorsketch.eval._trial import Trial, plain_state
from tensorsketch.eval.exceptions import SandboxError
from tensorsketch.observability.memory import InMemoryTracer, Trace

__all__ = ["InProcessSandbox", "Sandbox", "SubprocessSandbox"]

#: The line prefix a child process writes its result after (its stdout may carry prints).
RESULT_MARK = "\x1etensorsketch-eval-result "


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def trial_deps(env: Any) -> dict[str, Any]:
    """The keyword that gives a trial's run its env as ``ctx.deps`` (none without an env, so
    any object with an ``invoke(inputs, *, tracer)`` can still be evaluated)."""
    return {} if env is None else {"deps": env}


def _import_path() -> list[str]:
    return [p for p in sys.path if p and os.path.isdir(p)]


class Sandbox(ABC):
    """Runs one trial of a case and returns a :class:`Trial` (never a grade)."""

    @abstractmethod
    async def run(
        self, agent: Any, case: Case, index: int, *, timeout: float | None = None
    ) -> Trial:
        """Run trial ``index`` of ``case``; a failure is recorded in ``Trial.error``."""


class InProcessSandbox(Sandbox):
    """Runs the trial here: a fresh ``InMemoryTracer`` and a fresh ``case.env`` per trial."""

    async def run(
        self, agent: Any, case: Case, index: int, *, timeout: float | None = None
    ) -> Trial:
        env = case.fresh_env()
        deps = trial_deps(env)
        tracer = InMemoryTracer()
        inputs = copy.deepcopy(dict(case.inputs))
        started = time.perf_counter()
        state: Any = None
        error: str | None = None
        decisions: list[dict[str, Any]] = []
        try:
            graph = build_agent(agent, env)
            point = case.checkpoint
            if point is not None:

                def start(thread: str, store: Any) -> Any:
                    return graph.fork(
                        point.backend,
                        point.thread_id,
                        point.checkpoint_id,
                        thread,
                        inputs or None,
                        tracer=tracer,
                        effects=point.effects,
                        **deps,
                    )

            else:

                def start(thread: str, store: Any) -> Any:
                    return graph.invoke(
                        inputs, thread_id=thread, backend=store, tracer=tracer, **deps
                    )

            if case.approve is not None:
                running = run_with_reviewer(
                    graph,
                    start,
                    policy=case.approve,
                    case=case.name,
                    thread_id=trial_thread(case.name, index),
                    backend=point.backend if point is not None else None,
                    tracer=tracer,
                    **deps,
                    decisions=decisions,
                )
            elif point is not None:
                running = start(trial_thread(case.name, index), point.backend)
            else:
                running = graph.invoke(inputs, tracer=tracer, **deps)
            state = await asyncio.wait_for(running, timeout)
        except TimeoutError:
            error = f"TimeoutError: the trial ran longer than {timeout:g}s and was cancelled"
        except SandboxError:
            raise
        except Exception as exc:
            error = _error_text(exc)
        wall = (time.perf_counter() - started) * 1000.0
        output = None
        if state is not None:
            output = (
                state.get(case.output_key)
                if isinstance(state, dict)
                else getattr(state, case.output_key, None)
            )
        return Trial(
            output, tracer.trace, plain_state(state), env, case, index, error, wall, decisions
        )


class SubprocessSandbox(Sandbox):
    """Runs each trial in a child Python process; the timeout kills it.

    The agent must be importable in the child: pass ``evaluate("pkg.module:agent", ...)`` (or
    ``"file.py:agent"``), or ``SubprocessSandbox(agent=...)``. Inputs and ``case.env`` travel
    as JSON, so they must be JSON-friendly; the final state comes back as a plain dict.

    :param python: the interpreter to run (default: this one).
    :param env_vars: extra environment variables for the child.
    """

    def __init__(
        self,
        *,
        agent: str | None = None,
        python: str | None = None,
        env_vars: dict[str, str] | None = None,
    ) -> None:
        self.agent = agent
        self.python = python or sys.executable
        self.env_vars = dict(env_vars or {})

    def _spec(self, agent: Any) -> str:
        spec = self.agent or agent
        if not isinstance(spec, str):
            msg = (
                "SubprocessSandbox runs the agent in a child process, which must import it: "
                "pass the agent as a 'module:attr' or 'file.py:attr' string (evaluate("
                "'my_agents:agent', suite, sandbox=SubprocessSandbox())), not an object."
            )
            raise SandboxError(msg)
        return spec

    async def run(
        self, agent: Any, case: Case, index: int, *, timeout: float | None = None
    ) -> Trial:
        if case.checkpoint is not None:
            msg = (
                f"case {case.name!r} forks a checkpoint; run it with InProcessSandbox (the "
                "backend object stays in this process)."
            )
            raise SandboxError(msg)
        if callable(case.approve):
            msg = (
                f"case {case.name!r} decides approvals with a function, which cannot travel to "
                "a child process: give approve= a dict {tool_name: decision}, or run the case "
                "with InProcessSandbox."
            )
            raise SandboxError(msg)
        env = case.fresh_env()
        payload = json.dumps(
            {
                "agent": self._spec(agent),
                "inputs": dict(case.inputs),
                "env": env,
                "output_key": case.output_key,
                "approve": dict(case.approve) if case.approve is not None else None,
                "case": case.name,
                "index": index,
                "sys_path": _import_path(),
            },
            default=str,
        ).encode()
        started = time.perf_counter()
        child_env = {**os.environ, **self.env_vars, "PYTHONUNBUFFERED": "1"}
        process = await asyncio.create_subprocess_exec(
            self.python,
            "-m",
            "tensorsketch.eval._child",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=child_env,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(payload), timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            wall = (time.perf_counter() - started) * 1000.0
            error = (
                f"TimeoutError: the trial ran longer than {timeout:g}s; its process "
                f"{process.pid} was killed"
            )
            return Trial(None, Trace([]), None, env, case, index, error, wall)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise
        wall = (time.perf_counter() - started) * 1000.0
        text = out.decode("utf-8", "replace")
        mark = text.rfind(RESULT_MARK)
        if mark < 0:
            tail = err.decode("utf-8", "replace").strip().splitlines()[-5:]
            error = (
                f"ChildProcessError: the trial's process exited with {process.returncode} "
                f"and no result: {' | '.join(tail)}"
            )
            return Trial(None, Trace([]), None, env, case, index, error, wall)
        try:
            result = json.loads(text[mark + len(RESULT_MARK) :].splitlines()[0])
            trace = Trace.from_dicts(result.get("spans") or [])
        except (ValueError, KeyError, TypeError) as exc:
            error = (
                f"ChildProcessError: the trial's process sent a result that is not readable ({exc})"
            )
            return Trial(None, Trace([]), None, env, case, index, error, wall)
        return Trial(
            result.get("output"),
            trace,
            result.get("state"),
            result.get("env"),
            case,
            index,
            result.get("error"),
            wall,
            list(result.get("decisions") or []),
        )
