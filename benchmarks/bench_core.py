"""Core runtime benchmarks: TensorSketch beside LangGraph and a plain-asyncio floor.

Every shape is built three times — a TensorSketch graph, the same LangGraph ``StateGraph``, and a
hand-written asyncio loop (``TaskGroup`` per superstep, dict snapshot, writes folded at the
barrier) — and timed in one process, one after another, so the ratios compare like with like:

1. a 10-node linear chain invoked 200x (per-superstep overhead);
2. one node looping on itself 1,000 supersteps;
3. ``Send`` map/reduce with 1,000 and 10,000 workers into a list reducer;
4. ``stream`` over the chain (node start/end and merged values of every superstep);
5. peak memory of the 10,000-worker fan-out (tracemalloc, in a fresh subprocess each);
6. import time (fresh subprocesses, median).

Run ``python benchmarks/bench_core.py`` (``--quick`` for fewer repeats). Every implementation's
result is checked, so a benchmark cannot silently time a graph that did nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import operator
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

CHAIN_LEN = 10
CHAIN_INVOKES = 200
LOOP_STEPS = 1_000
FANOUT_SIZES = (1_000, 10_000)
MEMORY_WORKERS = 10_000
IMPORT_SAMPLES = 7

IMPLS = ("floor", "tensorsketch", "langgraph")


# -- the plain-asyncio floor -------------------------------------------------------------------

FloorNode = Callable[[dict[str, Any], dict[str, Any] | None], Awaitable[dict[str, Any]]]


async def _floor_step(
    state: dict[str, Any],
    tasks: list[tuple[FloorNode, dict[str, Any] | None]],
    reducers: dict[str, Callable[[Any, list[Any]], Any]],
) -> None:
    """One superstep: every task reads the same snapshot; writes fold at the barrier in order."""
    snapshot = dict(state)
    async with asyncio.TaskGroup() as tg:
        futures = [tg.create_task(fn(snapshot, payload)) for fn, payload in tasks]
    pending: dict[str, list[Any]] = {}
    for future in futures:
        for key, value in future.result().items():
            pending.setdefault(key, []).append(value)
    for key, writes in pending.items():
        fold = reducers.get(key)
        if fold is not None:
            state[key] = fold(state.get(key), writes)
        elif len(writes) == 1:
            state[key] = writes[0]
        else:
            msg = f"two writes to {key!r} in one superstep"
            raise RuntimeError(msg)


def _concat(current: Any, writes: list[Any]) -> Any:
    out = list(current or [])
    for w in writes:
        out.extend(w)
    return out


class Floor:
    """The same shapes as a bare asyncio loop: what any BSP runtime must at least cost."""

    async def chain(self, x: int) -> int:
        async def inc(s: dict[str, Any], _: dict[str, Any] | None) -> dict[str, Any]:
            return {"x": s["x"] + 1}

        nodes = [inc] * CHAIN_LEN
        state: dict[str, Any] = {"x": x}
        for node in nodes:
            await _floor_step(state, [(node, None)], {})
        return int(state["x"])

    async def loop(self, steps: int) -> int:
        async def tick(s: dict[str, Any], _: dict[str, Any] | None) -> dict[str, Any]:
            return {"n": s["n"] + 1}

        state: dict[str, Any] = {"n": 0}
        while True:
            await _floor_step(state, [(tick, None)], {})
            if state["n"] >= steps:
                return int(state["n"])

    async def fanout(self, count: int) -> int:
        async def split(s: dict[str, Any], _: dict[str, Any] | None) -> dict[str, Any]:
            return {}

        async def work(s: dict[str, Any], p: dict[str, Any] | None) -> dict[str, Any]:
            n = p["n"] if p is not None else s["n"]
            return {"squares": [n * n]}

        async def total(s: dict[str, Any], _: dict[str, Any] | None) -> dict[str, Any]:
            return {"total": sum(s["squares"])}

        reducers = {"squares": _concat}
        state: dict[str, Any] = {"numbers": list(range(count)), "squares": [], "total": 0}
        await _floor_step(state, [(split, None)], reducers)
        sends: list[tuple[FloorNode, dict[str, Any] | None]] = [
            (work, {"n": x}) for x in state["numbers"]
        ]
        await _floor_step(state, sends, reducers)
        await _floor_step(state, [(total, None)], reducers)
        return int(state["total"])

    async def stream_chain(self, x: int) -> int:
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=256)

        async def inc(s: dict[str, Any], _: dict[str, Any] | None) -> dict[str, Any]:
            await queue.put(("start", None))
            out = {"x": s["x"] + 1}
            await queue.put(("end", out))
            return out

        async def produce() -> None:
            state: dict[str, Any] = {"x": x}
            for _ in range(CHAIN_LEN):
                await _floor_step(state, [(inc, None)], {})
                await queue.put(("values", dict(state)))
            await queue.put(None)

        producer = asyncio.get_running_loop().create_task(produce())
        last = x
        events = 0
        while (item := await queue.get()) is not None:
            events += 1
            if item[0] == "values":
                last = item[1]["x"]
        await producer
        assert events == 3 * CHAIN_LEN
        return last


# -- TensorSketch ------------------------------------------------------------------------------


class TensorSketchImpl:
    def __init__(self) -> None:
        from tensorsketch import END, START, Context, Graph, Node, Reducer, Schema, Send

        class ChainState(Schema):
            x: int = 0

        class Inc(Node):
            class In(Schema):
                x: int

            class Out(Schema):
                x: int

            async def run(self, ctx: Context, inp: Any) -> Any:
                return self.Out(x=inp.x + 1)

        chain = Graph(ChainState)
        for i in range(CHAIN_LEN):
            chain.add(Inc(), name=f"N{i}")
        chain.edge(START, "N0")
        for i in range(CHAIN_LEN - 1):
            chain.edge(f"N{i}", f"N{i + 1}")
        chain.edge(f"N{CHAIN_LEN - 1}", END)
        self.chain_app = chain.compile()

        class LoopState(Schema):
            n: int = 0
            limit: int = 0

        class Tick(Node):
            class In(Schema):
                n: int

            class Out(Schema):
                n: int

            async def run(self, ctx: Context, inp: Any) -> Any:
                return self.Out(n=inp.n + 1)

        self.loop_app = (
            Graph(LoopState)
            .add(Tick)
            .edge(START, "Tick")
            .loop("Tick", until=lambda s: s.n >= s.limit)
            .compile()
        )

        class MapState(Schema):
            numbers: list[int] = []
            n: int = 0
            squares: Annotated[list[int], Reducer(operator.add)] = []
            total: int = 0

        class Split(Node):
            async def run(self, ctx: Context, inp: Any) -> Any:
                return None

        class Square(Node):
            class In(Schema):
                n: int

            class Out(Schema):
                squares: list[int]

            async def run(self, ctx: Context, inp: Any) -> Any:
                return self.Out(squares=[inp.n * inp.n])

        class Total(Node):
            class In(Schema):
                squares: list[int]

            class Out(Schema):
                total: int

            async def run(self, ctx: Context, inp: Any) -> Any:
                return self.Out(total=sum(inp.squares))

        self.map_app = (
            Graph(MapState)
            .add(Split)
            .add(Square)
            .add(Total)
            .edge(START, "Split")
            .router("Split", lambda s: [Send("Square", {"n": x}) for x in s.numbers])
            .edge("Square", "Total")
            .edge("Total", END)
            .compile()
        )

    async def chain(self, x: int) -> int:
        out = await self.chain_app.invoke({"x": x})
        return int(out.x)

    async def loop(self, steps: int) -> int:
        out = await self.loop_app.invoke({"limit": steps}, max_steps=steps + 1)
        return int(out.n)

    async def fanout(self, count: int) -> int:
        out = await self.map_app.invoke({"numbers": list(range(count))})
        return int(out.total)

    async def stream_chain(self, x: int) -> int:
        last = x
        events = 0
        async for event in self.chain_app.stream({"x": x}):
            events += 1
            if event.type == "values":
                last = event.data["x"]
        assert events == 3 * CHAIN_LEN + 2, events
        return last


# -- LangGraph ---------------------------------------------------------------------------------


class LangGraphImpl:
    def __init__(self) -> None:
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import Send

        class ChainState(TypedDict):
            x: int

        async def inc(s: ChainState) -> dict[str, Any]:
            return {"x": s["x"] + 1}

        chain = StateGraph(ChainState)
        for i in range(CHAIN_LEN):
            chain.add_node(f"n{i}", inc)
        chain.add_edge(START, "n0")
        for i in range(CHAIN_LEN - 1):
            chain.add_edge(f"n{i}", f"n{i + 1}")
        chain.add_edge(f"n{CHAIN_LEN - 1}", END)
        self.chain_app = chain.compile()

        class LoopState(TypedDict):
            n: int
            limit: int

        async def tick(s: LoopState) -> dict[str, Any]:
            return {"n": s["n"] + 1}

        loop = StateGraph(LoopState)
        loop.add_node("tick", tick)
        loop.add_edge(START, "tick")
        loop.add_conditional_edges("tick", lambda s: END if s["n"] >= s["limit"] else "tick")
        self.loop_app = loop.compile()

        class MapState(TypedDict):
            numbers: list[int]
            squares: Annotated[list[int], operator.add]
            total: int

        class WorkIn(TypedDict):
            n: int

        async def split(s: MapState) -> dict[str, Any]:
            return {}

        async def square(s: WorkIn) -> dict[str, Any]:
            return {"squares": [s["n"] * s["n"]]}

        async def total(s: MapState) -> dict[str, Any]:
            return {"total": sum(s["squares"])}

        fan = StateGraph(MapState)
        fan.add_node("split", split)
        fan.add_node("square", square)
        fan.add_node("total", total)
        fan.add_edge(START, "split")
        fan.add_conditional_edges(
            "split", lambda s: [Send("square", {"n": x}) for x in s["numbers"]], ["square"]
        )
        fan.add_edge("square", "total")
        fan.add_edge("total", END)
        self.map_app = fan.compile()

    async def chain(self, x: int) -> int:
        out = await self.chain_app.ainvoke({"x": x})
        return int(out["x"])

    async def loop(self, steps: int) -> int:
        out = await self.loop_app.ainvoke({"n": 0, "limit": steps}, {"recursion_limit": steps + 10})
        return int(out["n"])

    async def fanout(self, count: int) -> int:
        out = await self.map_app.ainvoke({"numbers": list(range(count)), "squares": [], "total": 0})
        return int(out["total"])

    async def stream_chain(self, x: int) -> int:
        # "tasks" (task start + result) and "values" (state after each superstep) carry what
        # TensorSketch's node_start / node_end / values events carry.
        last = x
        events = 0
        async for mode, chunk in self.chain_app.astream({"x": x}, stream_mode=["tasks", "values"]):
            events += 1
            if mode == "values":
                last = chunk["x"]
        return last


# -- measuring ---------------------------------------------------------------------------------


def _build(name: str) -> Any:
    if name == "floor":
        return Floor()
    if name == "tensorsketch":
        return TensorSketchImpl()
    return LangGraphImpl()


@dataclass
class Timing:
    median: float
    runs: list[float]


async def _time(fn: Callable[[], Awaitable[Any]], repeats: int, warmup: int = 1) -> Timing:
    for _ in range(warmup):
        await fn()
    runs: list[float] = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        await fn()
        runs.append(time.perf_counter() - start)
    return Timing(statistics.median(runs), runs)


def _check(name: str, what: str, got: int, want: int) -> None:
    if got != want:
        msg = f"{name} computed {got} for {what}, expected {want}: the benchmark is broken."
        raise AssertionError(msg)


async def _measure(name: str, quick: bool) -> dict[str, float]:
    """Seconds for each timed shape of one implementation."""
    impl = _build(name)
    results: dict[str, float] = {}
    reps = 3 if quick else 7

    _check(name, "chain", await impl.chain(0), CHAIN_LEN)
    invokes = CHAIN_INVOKES // 4 if quick else CHAIN_INVOKES

    async def chain_batch() -> None:
        for i in range(invokes):
            await impl.chain(i)

    results["chain"] = (await _time(chain_batch, reps)).median / invokes

    _check(name, "loop", await impl.loop(LOOP_STEPS), LOOP_STEPS)
    results["loop"] = (await _time(lambda: impl.loop(LOOP_STEPS), reps)).median

    for count in FANOUT_SIZES:
        want = sum(i * i for i in range(count))
        _check(name, f"fanout {count}", await impl.fanout(count), want)
        slow = name == "langgraph" and count >= 10_000
        fan_reps = 1 if (quick and slow) else (3 if slow or quick else 5)
        timing = await _time(lambda c=count: impl.fanout(c), fan_reps, warmup=0)  # type: ignore[misc]
        results[f"fanout_{count}"] = timing.median

    _check(name, "stream", await impl.stream_chain(0), CHAIN_LEN)

    async def stream_batch() -> None:
        for i in range(invokes):
            await impl.stream_chain(i)

    results["stream"] = (await _time(stream_batch, reps)).median / invokes
    return results


def _timing_child(name: str, quick: bool) -> None:
    """In a fresh interpreter that imports only this implementation: time every shape."""
    print(json.dumps(asyncio.run(_measure(name, quick))))


def _timings(name: str, quick: bool) -> dict[str, float]:
    command = [sys.executable, __file__, "--timing-child", name]
    if quick:
        command.append("--quick")
    out = subprocess.run(command, check=True, capture_output=True, text=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _memory_child(name: str, count: int) -> None:
    """In a fresh interpreter: peak traced bytes allocated while running one fan-out."""
    import tracemalloc

    impl = _build(name)

    async def main() -> int:
        await impl.fanout(10)  # warm caches (schema validators, compiled paths) first
        gc.collect()
        tracemalloc.start()
        base, _ = tracemalloc.get_traced_memory()
        result = int(await impl.fanout(count))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        print(json.dumps({"peak": peak - base}))
        return result

    got = asyncio.run(main())
    _check(name, f"fanout {count}", got, sum(i * i for i in range(count)))


def _memory(name: str) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", name, str(MEMORY_WORKERS)],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["peak"])


IMPORTS = {
    "pydantic": "from pydantic import BaseModel",
    "tensorsketch": "import tensorsketch",
    "langgraph": "import langgraph.graph",
}


def _import_time(statement: str, samples: int) -> float:
    code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
    runs = []
    for _ in range(samples):
        out = subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True
        )
        runs.append(float(out.stdout.strip()))
    return statistics.median(runs)


# -- reporting ---------------------------------------------------------------------------------


def _fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def _fmt_bytes(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b else "-"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    return "\n".join([line, rule, *body])


def report(
    times: dict[str, dict[str, float]], memory: dict[str, float], imports: dict[str, float]
) -> str:
    fl, ts, lg = times["floor"], times["tensorsketch"], times["langgraph"]
    rows: list[list[str]] = []

    def row(label: str, key: str, per: int = 1, unit: str = "") -> None:
        f, t, g = fl[key] / per, ts[key] / per, lg[key] / per
        rows.append(
            [
                label,
                _fmt_time(f) + unit,
                _fmt_time(t) + unit,
                _fmt_time(g) + unit,
                _ratio(t, f),
                _ratio(g, t),
            ]
        )

    row(f"chain: {CHAIN_LEN} nodes, per invoke", "chain")
    row("chain: per superstep", "chain", CHAIN_LEN)
    row(f"loop: {LOOP_STEPS} supersteps, total", "loop")
    row("loop: per superstep", "loop", LOOP_STEPS)
    for count in FANOUT_SIZES:
        row(f"Send fan-out {count:,}: total", f"fanout_{count}")
        row(f"Send fan-out {count:,}: per worker", f"fanout_{count}", count)
    row("stream over chain, per run", "stream")
    mem = [
        f"fan-out {MEMORY_WORKERS:,}: peak traced memory",
        _fmt_bytes(memory["floor"]),
        _fmt_bytes(memory["tensorsketch"]),
        _fmt_bytes(memory["langgraph"]),
        _ratio(memory["tensorsketch"], memory["floor"]),
        _ratio(memory["langgraph"], memory["tensorsketch"]),
    ]
    rows.append(mem)
    headers = ["benchmark", "asyncio floor", "TensorSketch", "LangGraph", "TS / floor", "LG / TS"]
    out = [_table(headers, rows), ""]

    imp_rows = [
        ["`from pydantic import BaseModel`", _fmt_time(imports["pydantic"]), "-"],
        [
            "`import tensorsketch`",
            _fmt_time(imports["tensorsketch"]),
            _fmt_time(imports["tensorsketch"] - imports["pydantic"]),
        ],
        [
            "`import langgraph.graph`",
            _fmt_time(imports["langgraph"]),
            _fmt_time(imports["langgraph"] - imports["pydantic"]),
        ],
    ]
    out.append(_table(["import (fresh process, median)", "time", "on top of pydantic"], imp_rows))
    out.append("")

    step_ts = ts["loop"] / LOOP_STEPS
    step_lg = lg["loop"] / LOOP_STEPS
    step_fl = fl["loop"] / LOOP_STEPS

    def growth(t: dict[str, float]) -> float:
        return (t["fanout_10000"] / 10_000) / (t["fanout_1000"] / 1_000)

    targets = [
        ("per-superstep <= 1/5 of LangGraph", step_ts <= step_lg / 5, f"{step_lg / step_ts:.1f}x"),
        (
            "per-superstep within 3x of the floor",
            step_ts <= 3 * step_fl,
            f"{step_ts / step_fl:.2f}x",
        ),
        (
            "10k fan-out >= 20x faster than LangGraph",
            lg["fanout_10000"] >= 20 * ts["fanout_10000"],
            f"{lg['fanout_10000'] / ts['fanout_10000']:.1f}x",
        ),
        (
            "flat per-worker cost 1k -> 10k (<= 1.3x, or no worse than the floor)",
            growth(ts) <= max(1.3, growth(fl)),
            f"{growth(ts):.2f}x (floor {growth(fl):.2f}x, LangGraph {growth(lg):.2f}x)",
        ),
        (
            "10k fan-out memory <= 1/3 of LangGraph",
            memory["tensorsketch"] * 3 <= memory["langgraph"],
            f"{memory['langgraph'] / memory['tensorsketch']:.1f}x less",
        ),
        (
            "import tensorsketch < 150 ms",
            imports["tensorsketch"] < 0.150,
            _fmt_time(imports["tensorsketch"]),
        ),
    ]
    out.append(
        _table(
            ["target", "met", "measured"],
            [[t, "yes" if ok else "NO", m] for t, ok, m in targets],
        )
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--json", metavar="PATH", help="also write the raw numbers here")
    parser.add_argument("--memory-child", nargs=2, metavar=("IMPL", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--timing-child", metavar="IMPL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("TS_BENCH_QUICK") == "1"
    if args.memory_child:
        _memory_child(args.memory_child[0], int(args.memory_child[1]))
        return 0
    if args.timing_child:
        _timing_child(args.timing_child, quick)
        return 0

    from importlib.metadata import version

    print(
        f"# core runtime: tensorsketch-core {version('tensorsketch-core')}, "
        f"langgraph {version('langgraph')}, pydantic {version('pydantic')}, "
        f"python {sys.version.split()[0]}, {os.cpu_count()} cores; "
        "each implementation timed in its own fresh interpreter"
    )
    times: dict[str, dict[str, float]] = {}
    for name in IMPLS:
        print(f"  timing {name} ...", file=sys.stderr, flush=True)
        times[name] = _timings(name, quick)
    print("  measuring peak memory ...", file=sys.stderr, flush=True)
    memory = {name: _memory(name) for name in IMPLS}
    print("  measuring import time ...", file=sys.stderr, flush=True)
    samples = 3 if quick else IMPORT_SAMPLES
    imports = {key: _import_time(stmt, samples) for key, stmt in IMPORTS.items()}
    print()
    print(report(times, memory, imports))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"times": times, "memory": memory, "imports": imports}, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
