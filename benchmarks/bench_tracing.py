"""Tracing overhead: what a run pays for each tracer.

A 10-node linear chain (each node opens one ``ctx.span`` sub-step, as instrumented code does)
is invoked repeatedly under:

* no tracer (the default ``NoopTracer``) and an explicit ``NoopTracer()``;
* ``InMemoryTracer`` (a fresh one per invoke, as the eval harness does per trial);
* ``FileTracer`` (JSON Lines to a temporary file, one flushed write per span);
* ``MultiTracer(InMemoryTracer(), callable)``;
* ``OTelTracer`` over an SDK ``TracerProvider`` with no exporter (when the OTel SDK is
  installed), i.e. the bridge's own cost.

A second table times one ``ctx.span`` enter/exit pair in isolation. Every traced run's span
count is checked, so the benchmark cannot time a tracer that recorded nothing.

Run ``python benchmarks/bench_tracing.py`` (``--quick`` for fewer repeats).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tensorsketch import (
    END,
    START,
    Context,
    FileTracer,
    Graph,
    InMemoryTracer,
    MultiTracer,
    Node,
    NoopTracer,
    Schema,
    Span,
    Tracer,
)

CHAIN_LEN = 10
INVOKES = 300
SPAN_PAIRS = 20_000
FLOOR = "floor"


class S(Schema):
    n: int = 0


class Step(Node):
    class In(Schema):
        n: int

    class Out(Schema):
        n: int

    async def run(self, ctx: Context, inp: In) -> Out:
        with ctx.span("work", index=inp.n):
            return self.Out(n=inp.n + 1)


class BareStep(Node):
    """The same node without the sub-span: the floor the tracers are measured against."""

    class In(Schema):
        n: int

    class Out(Schema):
        n: int

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(n=inp.n + 1)


def chain(*, spans: bool = True) -> Any:
    g = Graph(S)
    names = [f"N{i}" for i in range(CHAIN_LEN)]
    for name in names:
        g.add(Step() if spans else BareStep(), name=name)
    g.edge(START, names[0])
    for a, b in itertools.pairwise(names):
        g.edge(a, b)
    g.edge(names[-1], END)
    return g.compile()


def _otel_factory() -> Callable[[], Tracer] | None:
    try:
        from opentelemetry.sdk.trace import TracerProvider

        from tensorsketch.observability.otel import OTelTracer
    except ImportError:
        return None
    provider = TracerProvider()
    return lambda: OTelTracer(provider)


def factories(tmp: Path) -> dict[str, tuple[Callable[[], Tracer | None], int]]:
    """name -> (make a tracer for one invoke, spans each invoke must record; 0 = none)."""
    spans = 1 + 2 * CHAIN_LEN  # run + a node span and a sub-span per node
    sink: list[Span] = []
    out: dict[str, tuple[Callable[[], Tracer | None], int]] = {
        "default (NoopTracer)": (lambda: None, 0),
        "NoopTracer()": (NoopTracer, 0),
        "InMemoryTracer": (InMemoryTracer, spans),
        "FileTracer (JSONL)": (lambda: FileTracer(tmp / "bench.jsonl"), spans),
        "MultiTracer(mem, fn)": (lambda: MultiTracer(InMemoryTracer(), sink.append), spans),
    }
    otel = _otel_factory()
    if otel is not None:
        out["OTelTracer (SDK, no exporter)"] = (otel, 0)
    return out


def _recorded(tracer: Tracer | None) -> int:
    if isinstance(tracer, InMemoryTracer):
        return len(tracer.spans)
    if isinstance(tracer, FileTracer):
        return tracer.written
    if isinstance(tracer, MultiTracer):
        first = tracer.sinks[0]
        return len(first.spans) if isinstance(first, InMemoryTracer) else 0
    return 0


async def time_all(
    configs: dict[str, tuple[Callable[[], Tracer | None], int, bool]], invokes: int
) -> dict[str, float]:
    """Median seconds per invoke for each config. Configs take turns in blocks of 10 invokes,
    so drift on a busy machine (frequency, other processes) hits them all alike."""
    apps = {name: chain(spans=spans) for name, (_, _, spans) in configs.items()}
    samples: dict[str, list[float]] = {name: [] for name in configs}
    for block in range(-2, invokes // 10):  # two warm-up blocks
        for name, (make, expect, _) in configs.items():
            app = apps[name]
            gc.collect()
            for _ in range(10):
                tracer = make()
                start = time.perf_counter()
                out = await app.invoke({"n": 0}, tracer=tracer)
                took = time.perf_counter() - start
                if isinstance(tracer, FileTracer):
                    tracer.close()
                assert out.n == CHAIN_LEN
                if expect:
                    got = _recorded(tracer)
                    assert got == expect, f"{name} recorded {got} spans, not {expect}"
                if block >= 0:
                    samples[name].append(took)
    return {name: statistics.median(values) for name, values in samples.items()}


def time_span_pairs(tracer: Tracer, pairs: int) -> float:
    """Seconds per ``with tracer.span(...)`` enter/exit (inside a parent span, as in a node)."""
    span = tracer.span
    with span("parent", kind="node"):
        start = time.perf_counter()
        for _ in range(pairs):
            with span("work", kind="custom", index=1):
                pass
        took = time.perf_counter() - start
    return took / pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("TS_BENCH_QUICK") == "1"
    invokes = INVOKES // 5 if quick else INVOKES
    pairs = SPAN_PAIRS // 10 if quick else SPAN_PAIRS

    with tempfile.TemporaryDirectory() as folder:
        configs: dict[str, tuple[Callable[[], Tracer | None], int, bool]] = {
            FLOOR: (lambda: None, 0, False)
        }
        for name, (make, expect) in factories(Path(folder)).items():
            configs[name] = (make, expect, True)
        medians = asyncio.run(time_all(configs, invokes))
    floor = medians.pop(FLOOR)
    rows = list(medians.items())
    base = rows[0][1]
    print(f"{CHAIN_LEN}-node chain, one ctx.span per node, median of {invokes} invokes")
    print(f"  (floor: the same chain without ctx.span, no tracer: {floor * 1e6:.1f} us/invoke)")
    print(f"  {'tracer':<32} {'us/invoke':>10} {'vs default':>11} {'us/span':>8}")
    spans = 1 + 2 * CHAIN_LEN
    for name, seconds in rows:
        extra = (seconds - base) / spans * 1e6
        print(
            f"  {name:<32} {seconds * 1e6:>10.1f} {seconds / base:>10.2f}x "
            f"{extra if name != rows[0][0] else 0.0:>8.2f}"
        )

    print(f"\none span enter/exit in isolation ({pairs} pairs)")
    isolated: list[tuple[str, Tracer]] = [
        ("NoopTracer", NoopTracer()),
        ("InMemoryTracer", InMemoryTracer()),
    ]
    otel = _otel_factory()
    if otel is not None:
        isolated.append(("OTelTracer (SDK, no exporter)", otel()))
    for name, tracer in isolated:
        print(f"  {name:<32} {time_span_pairs(tracer, pairs) * 1e9:>8.0f} ns/span")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
