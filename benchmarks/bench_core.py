"""Core runtime benchmarks: TensorSketch beside LangGraph and a plain-asyncio floor.

Every shape is built three times — a TensorSketch graph, the same LangGraph ``StateGraph``, and a
hand-written asyncio loop (``TaskGroup`` per superstep, dict snapshot, writes folded at the
barrier) — and timed in one run of this script, so the ratios compare like with like:

1. a 10-node linear chain invoked 200x (per-superstep overhead);
2. one node looping on itself 1,000 supersteps;
3. ``Send`` map/reduce with 1,000 and 10,000 workers into a list reducer;
4. ``stream`` over the chain (node start/end and merged values of every superstep), and the
   chain as a subgraph node of a one-node parent (``Graph.add(compiled)`` beside LangGraph's
   compiled-graph node);
5. peak memory of the 10,000-worker fan-out (tracemalloc, and max-RSS growth, each in a fresh
   interpreter per implementation);
6. import time (fresh interpreters, median).

Each implementation is timed in its own interpreter (one framework's heap must not slow another's
garbage collector), in rounds that alternate between the three; a shape's time is its best run.
Run ``python benchmarks/bench_core.py`` (``--quick`` for a smoke run). Every implementation's
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
from collections.abc import Awaitable, Callable, Coroutine
from typing import Annotated, Any, TypedDict

from chains import CHAIN_LEN, ChainState, ainc, lg_chain, ts_chain

CHAIN_INVOKES = 200
LOOP_STEPS = 1_000
FANOUT_SIZES = (1_000, 10_000)
MEMORY_WORKERS = 10_000
IMPORT_SAMPLES = 7

IMPLS = ("floor", "tensorsketch", "langgraph")


# -- the plain-asyncio floor -------------------------------------------------------------------

FloorNode = Callable[[dict[str, Any], dict[str, Any] | None], Coroutine[Any, Any, dict[str, Any]]]
Fold = Callable[[Any, list[Any]], Any]


async def _floor_step(
    state: dict[str, Any],
    tasks: list[tuple[FloorNode, dict[str, Any] | None]],
    reducers: dict[str, Fold],
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

        reducers: dict[str, Fold] = {"squares": _concat}
        state: dict[str, Any] = {"numbers": list(range(count)), "squares": [], "total": 0}
        await _floor_step(state, [(split, None)], reducers)
        sends: list[tuple[FloorNode, dict[str, Any] | None]] = [
            (work, {"n": x}) for x in state["numbers"]
        ]
        await _floor_step(state, sends, reducers)
        await _floor_step(state, [(total, None)], reducers)
        return int(state["total"])

    async def subgraph(self, x: int) -> int:
        return await self.chain(x)  # no nesting in a bare loop: the chain's own cost

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

        self.chain_app = ts_chain()
        parent = Graph(self.chain_app.state_schema).add(ts_chain(), name="Chain")
        self.subgraph_app = parent.edge(START, "Chain").edge("Chain", END).compile()

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

    async def subgraph(self, x: int) -> int:
        out = await self.subgraph_app.invoke({"x": x})
        return int(out.x)

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

        self.chain_app = lg_chain(ainc).compile()
        parent = StateGraph(ChainState)
        parent.add_node("chain", lg_chain(ainc).compile())
        parent.add_edge(START, "chain")
        parent.add_edge("chain", END)
        self.subgraph_app = parent.compile()

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

    async def subgraph(self, x: int) -> int:
        out = await self.subgraph_app.ainvoke({"x": x})
        return int(out["x"])

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


async def _samples(fn: Callable[[], Awaitable[Any]], repeats: int, warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        await fn()
    runs: list[float] = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        await fn()
        runs.append(time.perf_counter() - start)
    return runs


def _check(name: str, what: str, got: int, want: int) -> None:
    if got != want:
        msg = f"{name} computed {got} for {what}, expected {want}: the benchmark is broken."
        raise AssertionError(msg)


async def _measure(name: str, quick: bool) -> dict[str, list[float]]:
    """Seconds per run of each timed shape of one implementation (one round of samples)."""
    impl = _build(name)
    results: dict[str, list[float]] = {}
    reps = 2 if quick else 3

    _check(name, "chain", await impl.chain(0), CHAIN_LEN)
    invokes = CHAIN_INVOKES // 4 if quick else CHAIN_INVOKES

    async def chain_batch() -> None:
        for i in range(invokes):
            await impl.chain(i)

    results["chain"] = [t / invokes for t in await _samples(chain_batch, reps)]

    _check(name, "loop", await impl.loop(LOOP_STEPS), LOOP_STEPS)
    results["loop"] = await _samples(lambda: impl.loop(LOOP_STEPS), reps)

    for count in FANOUT_SIZES:
        want = sum(i * i for i in range(count))
        _check(name, f"fanout {count}", await impl.fanout(count), want)
        slow = name == "langgraph" and count >= 10_000
        fan_reps = 1 if slow else reps
        results[f"fanout_{count}"] = await _samples(
            lambda c=count: impl.fanout(c),  # type: ignore[misc]
            fan_reps,
            warmup=0,
        )
        # The same with the cyclic GC paused: tells the runtime's own per-worker cost apart
        # from full collections, whose cost grows with everything alive in the process.
        gc.disable()
        try:
            results[f"fanout_nogc_{count}"] = await _samples(
                lambda c=count: impl.fanout(c),  # type: ignore[misc]
                fan_reps,
                warmup=0,
            )
        finally:
            gc.enable()

    _check(name, "subgraph", await impl.subgraph(0), CHAIN_LEN)

    async def subgraph_batch() -> None:
        for i in range(invokes):
            await impl.subgraph(i)

    results["subgraph"] = [t / invokes for t in await _samples(subgraph_batch, reps)]

    _check(name, "stream", await impl.stream_chain(0), CHAIN_LEN)

    async def stream_batch() -> None:
        for i in range(invokes):
            await impl.stream_chain(i)

    results["stream"] = [t / invokes for t in await _samples(stream_batch, reps)]
    return results


def _child(*args: str) -> Any:
    out = subprocess.run(
        [sys.executable, __file__, *args], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _timings(quick: bool) -> dict[str, dict[str, float]]:
    """Best time of each shape, over rounds that alternate between the implementations.

    Each round runs every implementation in a fresh interpreter that imports only what it
    needs, so one framework's heap never slows another's garbage collector; alternating the
    rounds spreads a noisy neighbour's load over all three instead of one.
    """
    rounds = 2 if quick else 3
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in IMPLS}
    for r in range(rounds):
        for name in IMPLS:
            print(f"  round {r + 1}/{rounds}: timing {name} ...", file=sys.stderr, flush=True)
            args = ["--timing-child", name, *(["--quick"] if quick else [])]
            for key, runs in _child(*args).items():
                samples[name].setdefault(key, []).extend(runs)
    return {name: {k: min(v) for k, v in by_key.items()} for name, by_key in samples.items()}


def _memory_child(name: str, count: int, how: str) -> None:
    """In a fresh interpreter: the memory one fan-out needs at its peak.

    ``traced``: peak bytes tracemalloc sees allocated during the run; ``rss``: how far the run
    pushes the process' maximum resident set above where the warmed-up process stood.
    """
    import resource
    import tracemalloc

    impl = _build(name)

    async def main() -> int:
        await impl.fanout(10)  # warm caches (schema validators, compiled paths) first
        gc.collect()
        if how == "traced":
            tracemalloc.start()
            base, _ = tracemalloc.get_traced_memory()
            result = int(await impl.fanout(count))
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            used = peak - base
        else:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            result = int(await impl.fanout(count))
            used = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
        print(json.dumps({"bytes": used}))
        return result

    got = asyncio.run(main())
    _check(name, f"fanout {count}", got, sum(i * i for i in range(count)))


def _memory(name: str, how: str) -> float:
    return float(_child("--memory-child", name, str(MEMORY_WORKERS), how)["bytes"])


#: Import statements timed in fresh interpreters. ``app baseline`` is what any program that
#: defines one pydantic model and runs asyncio pays before it imports a framework at all.
IMPORTS = {
    "pydantic": "from pydantic import BaseModel",
    "baseline": "import asyncio\nfrom pydantic import BaseModel\nclass M(BaseModel):\n    x: int",
    "tensorsketch": "import tensorsketch",
    "langgraph": "import langgraph.graph",
}


def _import_times(samples: int) -> dict[str, dict[str, float]]:
    """Median seconds per statement, with and without bytecode caches.

    ``cached`` is how an installed package imports (pip writes ``.pyc`` files at install; an
    editable install writes them on first import): one warm-up import per statement writes the
    caches, then the samples read them. ``source`` compiles every module from source, as in an
    environment with ``PYTHONDONTWRITEBYTECODE=1`` and no ``__pycache__`` (this sandbox): the
    caches are pointed at an empty folder. The statements take turns so noise spreads evenly.
    """
    import tempfile

    plain = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONPYCACHEPREFIX")}
    cached_env = {k: v for k, v in plain.items() if k != "PYTHONDONTWRITEBYTECODE"}
    runs: dict[str, dict[str, list[float]]] = {"cached": {}, "source": {}}
    with tempfile.TemporaryDirectory(prefix="ts-bench-nopyc-") as empty:
        source_env = {**plain, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": empty}
        envs = {"cached": cached_env, "source": source_env}

        def once(statement: str, env: dict[str, str]) -> float:
            code = (
                f"import time\nt = time.perf_counter()\n{statement}\nprint(time.perf_counter() - t)"
            )
            out = subprocess.run(
                [sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env
            )
            return float(out.stdout.strip())

        for statement in IMPORTS.values():
            once(statement, cached_env)  # write the bytecode caches
        for _ in range(samples):
            for mode, env in envs.items():
                for key, statement in IMPORTS.items():
                    runs[mode].setdefault(key, []).append(once(statement, env))
    return {
        mode: {key: statistics.median(values) for key, values in by_key.items()}
        for mode, by_key in runs.items()
    }


# -- reporting ---------------------------------------------------------------------------------


def _fmt_time(seconds: float) -> str:
    if abs(seconds) < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if abs(seconds) < 1:
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
    times: dict[str, dict[str, float]],
    memory: dict[str, dict[str, float]],
    imports: dict[str, dict[str, float]],
) -> str:
    """The side-by-side table, the import table and the targets, as Markdown."""
    fl, ts, lg = times["floor"], times["tensorsketch"], times["langgraph"]
    rows: list[list[str]] = []

    def row(label: str, key: str, per: int = 1) -> None:
        f, t, g = fl[key] / per, ts[key] / per, lg[key] / per
        rows.append([label, _fmt_time(f), _fmt_time(t), _fmt_time(g), _ratio(t, f), _ratio(g, t)])

    row(f"chain: {CHAIN_LEN} nodes, per invoke", "chain")
    row("chain: per superstep", "chain", CHAIN_LEN)
    row(f"loop: {LOOP_STEPS:,} supersteps, total", "loop")
    row("loop: per superstep", "loop", LOOP_STEPS)
    for count in FANOUT_SIZES:
        row(f"Send fan-out {count:,}: total", f"fanout_{count}")
        row(f"Send fan-out {count:,}: per worker", f"fanout_{count}", count)
    for count in FANOUT_SIZES:
        row(f"  same, GC paused: per worker ({count:,})", f"fanout_nogc_{count}", count)
    row("stream over chain, per run", "stream")
    row("the chain as a subgraph node, per invoke", "subgraph")
    for how, label in (("traced", "peak traced memory"), ("rss", "peak RSS growth")):
        f, t, g = (memory[name][how] for name in IMPLS)
        rows.append(
            [
                f"fan-out {MEMORY_WORKERS:,}: {label}",
                _fmt_bytes(f),
                _fmt_bytes(t),
                _fmt_bytes(g),
                _ratio(t, f),
                _ratio(g, t),
            ]
        )
    headers = ["benchmark", "asyncio floor", "TensorSketch", "LangGraph", "TS / floor", "LG / TS"]
    out = [_table(headers, rows), ""]

    cached, source = imports["cached"], imports["source"]
    imp_rows = []
    labels = {
        "pydantic": "`from pydantic import BaseModel`",
        "baseline": "app baseline: pydantic + one model + asyncio",
        "tensorsketch": "`import tensorsketch`",
        "langgraph": "`import langgraph.graph`",
    }
    for key, label in labels.items():
        framework = key in ("tensorsketch", "langgraph")
        row_cells = [label]
        for got in (cached, source):
            row_cells.append(_fmt_time(got[key]))
            row_cells.append(_fmt_time(got[key] - got["baseline"]) if framework else "-")
        imp_rows.append(row_cells)
    imp_headers = [
        "import (fresh process, median)",
        "with .pyc",
        "over baseline",
        "from source",
        "over baseline",
    ]
    out += [_table(imp_headers, imp_rows), ""]

    def growth(t: dict[str, float], key: str = "fanout") -> float:
        return (t[f"{key}_10000"] / 10_000) / (t[f"{key}_1000"] / 1_000)

    step_ts, step_lg, step_fl = (t["loop"] / LOOP_STEPS for t in (ts, lg, fl))
    mem_ts, mem_lg = memory["tensorsketch"]["traced"], memory["langgraph"]["traced"]
    nest_ts, nest_lg = ts["subgraph"] / ts["chain"], lg["subgraph"] / lg["chain"]
    targets = [
        ("per superstep <= 1/5 of LangGraph", step_ts * 5 <= step_lg, f"{step_lg / step_ts:.1f}x"),
        (
            "a subgraph node costs about its supersteps inline (<= 1.5x the chain)",
            nest_ts <= 1.5,
            f"{nest_ts:.2f}x the inline chain (LangGraph's subgraph: {nest_lg:.2f}x its chain)",
        ),
        ("per superstep <= 3x the floor", step_ts <= 3 * step_fl, f"{step_ts / step_fl:.2f}x"),
        (
            "10k fan-out >= 20x faster than LangGraph",
            lg["fanout_10000"] >= 20 * ts["fanout_10000"],
            f"{lg['fanout_10000'] / ts['fanout_10000']:.1f}x",
        ),
        (
            "flat per-worker cost 1k -> 10k (<= 1.3x, or no worse than the floor)",
            growth(ts) <= max(1.3, growth(fl)),
            f"{growth(ts):.2f}x (floor {growth(fl):.2f}x, LangGraph {growth(lg):.2f}x); "
            f"GC paused: {growth(ts, 'fanout_nogc'):.2f}x (floor "
            f"{growth(fl, 'fanout_nogc'):.2f}x, LangGraph {growth(lg, 'fanout_nogc'):.2f}x)",
        ),
        (
            "10k fan-out memory <= 1/3 of LangGraph",
            mem_ts * 3 <= mem_lg,
            f"{mem_lg / mem_ts:.1f}x less",
        ),
        (
            "import tensorsketch < 150 ms",
            cached["tensorsketch"] < 0.150,
            f"{_fmt_time(cached['tensorsketch'])} with .pyc; "
            f"{_fmt_time(source['tensorsketch'])} from source "
            f"(pydantic alone: {_fmt_time(cached['pydantic'])} / "
            f"{_fmt_time(source['pydantic'])})",
        ),
    ]
    rows_t = [[t, "yes" if ok else "NO", m] for t, ok, m in targets]
    out.append(_table(["target", "met", "measured"], rows_t))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--json", metavar="PATH", help="also write the raw numbers here")
    parser.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--timing-child", metavar="IMPL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("TS_BENCH_QUICK") == "1"
    if args.memory_child:
        name, count, how = args.memory_child
        _memory_child(name, int(count), how)
        return 0
    if args.timing_child:
        print(json.dumps(asyncio.run(_measure(args.timing_child, quick))))
        return 0

    from importlib.metadata import version

    print(
        f"core runtime — tensorsketch-core {version('tensorsketch-core')}, "
        f"langgraph {version('langgraph')}, pydantic {version('pydantic')}, "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} cores. Times are the best of "
        f"{'2' if quick else '3'} alternating rounds, each implementation in its own interpreter."
    )
    times = _timings(quick)
    print("  measuring peak memory ...", file=sys.stderr, flush=True)
    memory = {name: {how: _memory(name, how) for how in ("traced", "rss")} for name in IMPLS}
    print("  measuring import time ...", file=sys.stderr, flush=True)
    imports = _import_times(5 if quick else IMPORT_SAMPLES)
    print()
    print(report(times, memory, imports))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            raw = {"times": times, "memory": memory, "imports": imports}
            json.dump(raw, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
