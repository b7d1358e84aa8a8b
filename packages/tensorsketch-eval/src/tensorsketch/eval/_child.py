"""The child side of :class:`~tensorsketch.eval.SubprocessSandbox`: run one trial, print JSON.

Reads ``{"agent", "inputs", "env", "output_key", "approve", "sys_path"}`` on stdin (with an
approval policy it resumes the run with those decisions); writes one result line (after a
marker, since the agent may print) with the final state, the environment after the run, the
decisions, the recorded spans and the error. It grades nothing.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from tensorsketch.eval._agents import build_agent
from tensorsketch.eval._approvals import run_with_reviewer, trial_thread
from tensorsketch.eval._sandbox import RESULT_MARK, trial_deps
from tensorsketch.eval._trial import plain_state
from tensorsketch.observability.export import span_json
from tensorsketch.observability.memory import InMemoryTracer


async def _trial(request: dict[str, Any]) -> dict[str, Any]:
    tracer = InMemoryTracer()
    env = request.get("env")
    deps = trial_deps(env)
    state: Any = None
    error = None
    decisions: list[dict[str, Any]] = []
    inputs = request.get("inputs") or {}
    approve = request.get("approve")
    try:
        graph = build_agent(request["agent"], env)
        if approve is None:
            state = await graph.invoke(inputs, tracer=tracer, **deps)
        else:
            case = str(request.get("case") or "case")

            def start(thread: str, store: Any) -> Any:
                return graph.invoke(inputs, thread_id=thread, backend=store, tracer=tracer, **deps)

            state = await run_with_reviewer(
                graph,
                start,
                policy=approve,
                case=case,
                thread_id=trial_thread(case, int(request.get("index") or 0)),
                tracer=tracer,
                **deps,
                decisions=decisions,
            )
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    key = request.get("output_key") or "output"
    output = None
    if state is not None:
        output = state.get(key) if isinstance(state, dict) else getattr(state, key, None)
    return {
        "output": output if isinstance(output, str | int | float | bool | None) else str(output),
        "state": plain_state(state),
        "env": env,
        "error": error,
        "decisions": decisions,
        "spans": [json.loads(span_json(span)) for span in tracer.spans],
    }


def main() -> None:
    request = json.loads(sys.stdin.read())
    for path in reversed(request.get("sys_path") or []):
        if path not in sys.path:
            sys.path.insert(0, path)
    result = asyncio.run(_trial(request))
    sys.stdout.write("\n" + RESULT_MARK + json.dumps(result, default=str) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
