"""The agent loop: what one model-call iteration costs in each framework's own agent layer.

One shape, built the way each framework's documentation writes a tool-using agent:

* **TensorSketch** — ``create_agent(provider, tools=[add])`` over a ``ChatProvider`` subclass;
  in memory (no backend), and (informational) durable on a ``SqliteBackend`` thread; and the
  same agent with its loop drawn out as a ``model`` node and a ``tools`` node
  (``decomposed_agent``, in memory): one superstep per turn instead of one for the run.
* **LangGraph** — ``langgraph.prebuilt.create_react_agent(model, [add])`` over a
  ``BaseChatModel`` subclass.
* **PydanticAI** — ``Agent(FunctionModel(fn))`` with ``add`` as a ``tool_plain``.

The model is scripted and in-process: it asks for one ``add`` call per turn (with new
arguments each turn, as a model making progress does: TensorSketch stops a model repeating the
same call as stuck), ``K`` turns in a row, then answers (so a run makes ``K + 1`` model calls
and ``K`` tool calls). A run's time divided by ``K + 1`` is the cost of one iteration of the
loop — with no network and a model that does nothing, it is the agent layer's own overhead.
The tool is ``async def`` in all three: each framework runs a plain ``def`` tool in a worker
thread, and that thread hop (~20-25 µs here) is the thread pool's cost, not the agent layer's.
``K`` = 1, 10, 50 shows whether that cost stays flat as the transcript grows. Every run's
answer and tool-call count is checked, so nothing can be timed doing nothing.

Each implementation runs in its own fresh interpreter, in rounds that alternate between them;
an entry is the best of its samples. Run ``python benchmarks/bench_agents.py`` (``--quick``
or ``TS_BENCH_QUICK=1`` for a smoke run). ``--calls`` counts instead of timing: the Python and
C function calls per model-call iteration of the in-memory TensorSketch agent (K = 10), a
number that does not move with the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

KS = (1, 10, 50)
#: Model calls timed per sample (each sample runs ``ceil(CALLS / (K + 1))`` agent runs).
CALLS = 2_000
IMPLS = (
    "tensorsketch",
    "tensorsketch_sqlite",
    "tensorsketch_decomposed",
    "langgraph",
    "pydantic_ai",
)
LABELS = {
    "tensorsketch": "TensorSketch",
    "tensorsketch_sqlite": "TensorSketch + SQLite",
    "tensorsketch_decomposed": "TensorSketch, decomposed",
    "langgraph": "LangGraph",
    "pydantic_ai": "PydanticAI",
}
ANSWER = "done"
#: Tokens every scripted reply reports, as a real API's would (so usage accounting runs, and
#: PydanticAI does not fall back to estimating them from the transcript).
INPUT_TOKENS, OUTPUT_TOKENS = 50, 10


class Script:
    """The scripted model's decision: a tool call on each of the first ``k`` turns, then text."""

    def __init__(self) -> None:
        self.k = 0
        self.turn = 0
        self.tool_runs = 0

    def reset(self, k: int) -> None:
        self.k, self.turn, self.tool_runs = k, 0, 0

    def next_is_tool(self) -> bool:
        self.turn += 1
        return self.turn <= self.k


# -- the three implementations ------------------------------------------------------------------


class TensorSketchImpl:
    def __init__(self, sqlite: bool = False, decomposed: bool = False) -> None:
        from tensorsketch import ChatProvider, Completion, Usage, create_agent, tool
        from tensorsketch.agents import decomposed_agent
        from tensorsketch.messages import ToolCall, assistant

        script = self.script = Script()
        usage = Usage(input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS)

        class Scripted(ChatProvider):
            model = "scripted"
            provider_name = "scripted"

            async def complete(self, messages: Any, **_: Any) -> Completion:
                if script.next_is_tool():
                    call = ToolCall(
                        id=f"c{script.turn}", name="add", args={"a": script.turn, "b": 2}
                    )
                    message = assistant(tool_calls=[call])
                else:
                    message = assistant(ANSWER)
                return Completion(message=message, model="scripted", usage=usage)

        @tool
        async def add(a: int, b: int) -> int:
            """Add two numbers."""
            script.tool_runs += 1
            return a + b

        build = decomposed_agent if decomposed else create_agent
        self.agent = build(Scripted(), tools=[add], max_iterations=1_000)
        self.backend: Any = None
        self.runs = 0
        if sqlite:
            from tensorsketch import SqliteBackend

            self._dir = tempfile.TemporaryDirectory()
            self.backend = SqliteBackend(str(Path(self._dir.name) / "agents.db"))

    async def run(self, k: int) -> tuple[str, int]:
        self.script.reset(k)
        if self.backend is None:
            out = await self.agent.invoke({"query": "go"})
        else:
            self.runs += 1
            out = await self.agent.invoke(
                {"query": "go"}, thread_id=f"t{self.runs}", backend=self.backend
            )
        if out.usage.input_tokens != INPUT_TOKENS * (self.script.k + 1):
            msg = f"TensorSketch counted {out.usage} for K={self.script.k}"
            raise AssertionError(msg)
        return out.output, self.script.tool_runs


class LangGraphImpl:
    def __init__(self) -> None:
        from langchain_core.language_models import BaseChatModel
        from langchain_core.messages import AIMessage
        from langchain_core.outputs import ChatGeneration, ChatResult
        from langgraph.prebuilt import create_react_agent

        script = self.script = Script()
        usage = {
            "input_tokens": INPUT_TOKENS,
            "output_tokens": OUTPUT_TOKENS,
            "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
        }

        class Scripted(BaseChatModel):
            @property
            def _llm_type(self) -> str:
                return "scripted"

            def bind_tools(self, tools: Any, **_: Any) -> Any:
                return self

            def _reply(self) -> ChatResult:
                if script.next_is_tool():
                    call = {
                        "id": f"c{script.turn}",
                        "name": "add",
                        "args": {"a": script.turn, "b": 2},
                    }
                    message = AIMessage(content="", tool_calls=[call], usage_metadata=usage)
                else:
                    message = AIMessage(content=ANSWER, usage_metadata=usage)
                return ChatResult(generations=[ChatGeneration(message=message)])

            def _generate(self, messages: Any, stop: Any = None, **_: Any) -> ChatResult:
                return self._reply()

            async def _agenerate(self, messages: Any, stop: Any = None, **_: Any) -> ChatResult:
                return self._reply()

        async def add(a: int, b: int) -> int:
            """Add two numbers."""
            script.tool_runs += 1
            return a + b

        self.agent = create_react_agent(Scripted(), [add])

    async def run(self, k: int) -> tuple[str, int]:
        self.script.reset(k)
        out = await self.agent.ainvoke(
            {"messages": [("user", "go")]}, {"recursion_limit": 2 * k + 10}
        )
        return str(out["messages"][-1].content), self.script.tool_runs


class PydanticAIImpl:
    def __init__(self) -> None:
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel
        from pydantic_ai.usage import RequestUsage

        script = self.script = Script()

        def model(messages: list[Any], info: AgentInfo) -> ModelResponse:
            usage = RequestUsage(input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS)
            if script.next_is_tool():
                part = ToolCallPart(
                    "add", {"a": script.turn, "b": 2}, tool_call_id=f"c{script.turn}"
                )
                return ModelResponse(parts=[part], usage=usage)
            return ModelResponse(parts=[TextPart(ANSWER)], usage=usage)

        self.agent: Any = Agent(FunctionModel(model))

        @self.agent.tool_plain
        async def add(a: int, b: int) -> int:
            """Add two numbers."""
            script.tool_runs += 1
            return a + b

    async def run(self, k: int) -> tuple[str, int]:
        from pydantic_ai.usage import UsageLimits

        self.script.reset(k)
        out = await self.agent.run("go", usage_limits=UsageLimits(request_limit=k + 10))
        if out.usage.input_tokens != INPUT_TOKENS * (k + 1):
            msg = f"PydanticAI counted {out.usage} for K={k}"
            raise AssertionError(msg)
        return str(out.output), self.script.tool_runs


def _build(name: str) -> Any:
    if name == "tensorsketch":
        return TensorSketchImpl()
    if name == "tensorsketch_sqlite":
        return TensorSketchImpl(sqlite=True)
    if name == "tensorsketch_decomposed":
        return TensorSketchImpl(decomposed=True)
    if name == "langgraph":
        return LangGraphImpl()
    return PydanticAIImpl()


# -- measuring -----------------------------------------------------------------------------------


async def _check(name: str, impl: Any, k: int) -> None:
    answer, tools = await impl.run(k)
    if answer != ANSWER or tools != k:
        msg = f"{name}: K={k} answered {answer!r} after {tools} tool calls: the bench is broken."
        raise AssertionError(msg)


async def _samples(fn: Callable[[], Awaitable[Any]], repeats: int) -> list[float]:
    await fn()  # warm-up
    runs: list[float] = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        await fn()
        runs.append(time.perf_counter() - start)
    return runs


async def _measure(name: str, quick: bool) -> dict[str, list[float]]:
    """Seconds per model-call iteration, per ``K`` (one round of samples)."""
    impl = _build(name)
    calls = CALLS // 8 if quick else CALLS
    if name == "tensorsketch_sqlite":
        calls //= 4  # a commit per durable step: fewer calls keep the round short
    reps = 2 if quick else 3
    results: dict[str, list[float]] = {}
    for k in KS:
        await _check(name, impl, k)
        runs = max(1, -(-calls // (k + 1)))

        async def batch(k: int = k, runs: int = runs) -> None:
            for _ in range(runs):
                await impl.run(k)

        results[str(k)] = [t / (runs * (k + 1)) for t in await _samples(batch, reps)]
    return results


#: Runs counted by ``--calls`` (after one warm-up run), each ``CALLS_K`` tool-call turns.
CALLS_RUNS, CALLS_K = 20, 10


async def count_calls(runs: int = CALLS_RUNS, k: int = CALLS_K) -> dict[str, float]:
    """Python-level and C-level function calls per model-call iteration of the in-memory
    TensorSketch agent (``sys.setprofile``, ``runs`` runs of ``K`` = ``k``).

    A count, not a time: it does not move with the machine's load, so a change that adds
    per-turn work shows up exactly (``python benchmarks/bench_agents.py --calls``).
    """
    impl = TensorSketchImpl()
    await _check("tensorsketch", impl, k)  # warm-up: caches, first-call imports
    counts = {"call": 0, "c_call": 0}

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event in counts:
            counts[event] += 1

    sys.setprofile(profile)
    try:
        for _ in range(runs):
            await impl.run(k)
    finally:
        sys.setprofile(None)
    per = runs * (k + 1)
    return {"python": counts["call"] / per, "c": counts["c_call"] / per}


def _child(*args: str) -> Any:
    out = subprocess.run(
        [sys.executable, __file__, *args], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _timings(quick: bool, impls: tuple[str, ...]) -> dict[str, dict[str, float]]:
    rounds = 2 if quick else 3
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in impls}
    for r in range(rounds):
        for name in impls:
            print(f"  round {r + 1}/{rounds}: timing {name} ...", file=sys.stderr, flush=True)
            args = ["--timing-child", name, *(["--quick"] if quick else [])]
            for key, runs in _child(*args).items():
                samples[name].setdefault(key, []).extend(runs)
    return {name: {k: min(v) for k, v in by_key.items()} for name, by_key in samples.items()}


def _fmt_time(seconds: float) -> str:
    if abs(seconds) < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if abs(seconds) < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    return "\n".join([line, rule, *body])


def report(times: dict[str, dict[str, float]]) -> str:
    impls = [name for name in IMPLS if name in times]
    headers = ["per model-call iteration", *(LABELS[n] for n in impls)]
    peers = [n for n in ("langgraph", "pydantic_ai") if n in times]
    headers += [f"{LABELS[p]} / TS" for p in peers]
    rows: list[list[str]] = []
    for k in KS:
        key = str(k)
        row = [f"K = {k}", *(_fmt_time(times[n][key]) for n in impls)]
        ts = times["tensorsketch"][key]
        row += [f"{times[p][key] / ts:.1f}x" for p in peers]
        rows.append(row)
    out = [_table(headers, rows)]
    target = 50e-6
    worst = max(times["tensorsketch"].values())
    met = worst <= target
    out.append("")
    out.append(
        f"target: TensorSketch <= 50 µs per iteration (in memory) — "
        f"{'met' if met else 'NOT met'} (worst K: {_fmt_time(worst)})"
    )
    for p in peers:
        least = min(times[p][str(k)] / times["tensorsketch"][str(k)] for k in KS)
        out.append(f"target: {LABELS[p]} >= 30x TensorSketch — {least:.1f}x at the closest K")
    if "tensorsketch_decomposed" in times:
        ratios = [
            times["tensorsketch_decomposed"][str(k)] / times["tensorsketch"][str(k)] for k in KS
        ]
        shown = ", ".join(f"{r:.2f}x at K = {k}" for k, r in zip(KS, ratios))
        out.append(f"decomposed loop (model and tools nodes) / create_agent's one node: {shown}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--json", metavar="PATH", help="also write the raw numbers here")
    parser.add_argument("--only", nargs="+", choices=IMPLS, help="time only these implementations")
    parser.add_argument(
        "--calls",
        action="store_true",
        help=f"count function calls per iteration instead of timing (K = {CALLS_K})",
    )
    parser.add_argument("--timing-child", metavar="IMPL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("TS_BENCH_QUICK") == "1"
    if args.calls:
        counted = asyncio.run(count_calls())
        print(
            f"agent loop, in memory, K = {CALLS_K}, {CALLS_RUNS} runs (sys.setprofile): "
            f"{counted['python']:.1f} Python calls and {counted['c']:.1f} C calls per "
            "model-call iteration"
        )
        return 0
    if args.timing_child:
        print(json.dumps(asyncio.run(_measure(args.timing_child, quick))))
        return 0

    from importlib.metadata import version

    impls = tuple(args.only or IMPLS)
    if "tensorsketch" not in impls:
        impls = ("tensorsketch", *impls)
    versions = [f"tensorsketch-core {version('tensorsketch-core')}"]
    if "langgraph" in impls:
        versions.append(f"langgraph {version('langgraph')}")
    if "pydantic_ai" in impls:
        versions.append(f"pydantic-ai-slim {version('pydantic-ai-slim')}")
    print(
        f"agent loop — {', '.join(versions)}, pydantic {version('pydantic')}, "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} cores. Best of "
        f"{'2' if quick else '3'} alternating rounds, each implementation in its own interpreter."
    )
    times = _timings(quick, impls)
    print()
    print(report(times))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(times, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
