"""What a plain ``def`` tool costs over the same tool written ``async def``.

A sync tool cannot run on the event loop unless it is known not to block, so it is handed to
a thread. Measured per call, the tool a trivial ``a + b``:

* ``Tool.run`` alone — ``async def``; ``def`` on the warm worker threads
  (:mod:`tensorsketch.runtime.workers`, the default); ``def`` on those workers as they were
  before ``SCHED_BATCH`` and the eventfd inbox (for reference); ``def`` through
  ``asyncio.to_thread`` (the hand-off TensorSketch used before the workers, for reference);
  ``def`` with ``@tool(blocking=False)`` (inline on the loop);
* the agent loop — ``create_agent`` with a scripted model asking for the tool ``K`` = 10
  times, per model-call iteration, with each of the tool kinds above (to_thread excepted).

Every variant runs in rounds that alternate between them; an entry is its best sample. Every
result is checked. Run ``python benchmarks/bench_tools.py`` (``--quick`` or
``TS_BENCH_QUICK=1`` for a smoke run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import gc
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

TARGET_US = 25.0
K = 10


def _tools() -> dict[str, Any]:
    from tensorsketch import tool
    from tensorsketch.runtime import workers

    before_pool = workers._Pool(batch=False)

    @tool
    async def add_async(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @tool
    def add_sync(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @tool(blocking=False)
    def add_inline(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    def add(a: int, b: int) -> int:
        return a + b

    async def call_as_before(**kwargs: Any) -> int:
        # How a sync tool was called before #49's second round: a warm worker always under
        # the default scheduling policy, its result sent back by call_soon_threadsafe.
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        before_pool.submit((contextvars.copy_context(), add, (), kwargs, None, future))
        return int(await future)

    async def worker_before(args: dict[str, Any]) -> int:
        return await call_as_before(**add_sync.validate(args))

    @tool
    async def add_before(a: int, b: int) -> int:
        """Add two numbers."""
        return await call_as_before(a=a, b=b)

    async def to_thread(args: dict[str, Any]) -> int:
        # What Tool.run did for a sync tool before the warm workers: validate, then to_thread.
        kwargs = add_sync.validate(args)
        return await asyncio.to_thread(add, **kwargs)

    return {
        "async def": add_async.run,
        "def (worker thread)": add_sync.run,
        "def (worker thread as before #49's second round)": worker_before,
        "def (asyncio.to_thread, before)": to_thread,
        "def, blocking=False (inline)": add_inline.run,
        "_tools": {
            "async def": add_async,
            "def (worker thread)": add_sync,
            "def (worker thread as before #49's second round)": add_before,
            "def, blocking=False (inline)": add_inline,
        },
    }


def _agent(kind_tool: Any) -> Callable[[], Awaitable[None]]:
    from tensorsketch import ChatProvider, Completion, create_agent
    from tensorsketch.messages import ToolCall, assistant

    turn = 0

    class Scripted(ChatProvider):
        model = "scripted"
        provider_name = "scripted"

        async def complete(self, messages: Any, **_: Any) -> Completion:
            nonlocal turn
            turn += 1
            if turn <= K:
                call = ToolCall(id=f"c{turn}", name=kind_tool.name, args={"a": turn, "b": 2})
                return Completion(message=assistant(tool_calls=[call]), model="scripted")
            return Completion(message=assistant("done"), model="scripted")

    agent = create_agent(Scripted(), tools=[kind_tool], max_iterations=1_000)

    async def run() -> None:
        nonlocal turn
        turn = 0
        out = await agent.invoke({"query": "go"})
        tool_results = [m for m in out.messages if m.role == "tool"]
        if out.output != "done" or len(tool_results) != K:
            msg = f"the agent with {kind_tool!r} answered {out.output!r}: the bench is broken"
            raise AssertionError(msg)

    return run


async def _best(fn: Callable[[], Awaitable[Any]], n: int) -> float:
    for _ in range(max(1, n // 10)):
        await fn()
    gc.collect()
    start = time.perf_counter()
    for _ in range(n):
        await fn()
    return (time.perf_counter() - start) / n


async def measure(quick: bool) -> dict[str, float]:
    tools = _tools()
    by_kind = tools.pop("_tools")
    calls = 2_000 if quick else 20_000
    runs = 30 if quick else 300
    rounds = 2 if quick else 5
    best: dict[str, float] = {}
    for kind, run in tools.items():
        if await run({"a": 2, "b": 3}) != 5:
            msg = f"{kind}: wrong sum"
            raise AssertionError(msg)
    agents = {kind: _agent(t) for kind, t in by_kind.items()}
    for _ in range(rounds):
        for kind, run in tools.items():

            async def one(run: Any = run) -> None:
                await run({"a": 2, "b": 3})

            t = await _best(one, calls)
            best[f"call: {kind}"] = min(best.get(f"call: {kind}", t), t)
        for kind, agent_run in agents.items():
            t = await _best(agent_run, runs) / (K + 1)
            best[f"agent iteration: {kind}"] = min(best.get(f"agent iteration: {kind}", t), t)
    return best


def report(best: dict[str, float]) -> str:
    lines = ["| per call / iteration | time | over `async def` |", "|---|---:|---:|"]
    for key, t in best.items():
        section = key.split(":")[0]
        base = best[f"{section}: async def"]
        lines.append(f"| {key} | {t * 1e6:.1f} µs | {(t - base) * 1e6:+.1f} µs |")
    toll = (best["call: def (worker thread)"] - best["call: async def"]) * 1e6
    inline = (best["call: def, blocking=False (inline)"] - best["call: async def"]) * 1e6
    lines.append("")
    lines.append(
        f"target: a sync tool <= {TARGET_US:.0f} µs over async — worker thread {toll:+.1f} µs "
        f"({'met' if toll <= TARGET_US else 'NOT met'}), blocking=False {inline:+.1f} µs "
        f"({'met' if inline <= TARGET_US else 'NOT met'})"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("TS_BENCH_QUICK") == "1"
    from importlib.metadata import version

    print(
        f"sync tools — tensorsketch-core {version('tensorsketch-core')}, Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} cores; best of alternating rounds."
    )
    print()
    print(report(asyncio.run(measure(quick))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
