"""The eval harness: what a trial costs beyond the agent run, and how the drift detectors do.

1. A 100-case x 5-trial suite on a FakeProvider agent (model -> tool -> model, three graders
   per case; the tool is ``async def``, so no thread-pool hop is timed). The floor is the
   same 500 agent runs invoked back to back, each under a fresh ``InMemoryTracer`` as the
   harness does, with no grading; the harness overhead per trial is
   ``(evaluate wall - floor wall) / 500``. Also: the same suite at concurrency 8, and 20 trials
   through ``SubprocessSandbox`` (a child interpreter per trial).
2. Drift detectors on seeded synthetic streams with a known change point: the detection delay
   (records after the change until the alert; median / p95 / max over seeds) and the
   false-alarm rate on long stationary streams.

Run ``python benchmarks/bench_eval.py`` (``TS_BENCH_QUICK=1`` or ``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tensorsketch import FakeProvider, InMemoryTracer, create_agent, tool
from tensorsketch.eval import (
    Baseline,
    Case,
    Contains,
    DriftMonitor,
    StepEfficiency,
    SubprocessSandbox,
    Suite,
    ToolCalled,
    evaluate,
)
from tensorsketch.messages import Message, ToolCall, assistant


@tool
async def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key.
    """
    return f"value of {key}"


def policy(messages: list[Message], tools: list[object]) -> Message:
    if messages[-1].role == "user":
        return assistant(
            tool_calls=[ToolCall(id="l", name="lookup", args={"key": messages[-1].text})]
        )
    return assistant(f"The answer: {messages[-1].text}")


agent = create_agent(FakeProvider(policy=policy), [lookup])


def suite(cases: int, trials: int) -> Suite:
    return Suite(
        "bench",
        [
            Case(
                f"case-{i}",
                {"query": f"k{i}"},
                graders=[Contains(f"value of k{i}"), ToolCalled("lookup"), StepEfficiency(3)],
                trials=trials,
            )
            for i in range(cases)
        ],
    )


async def floor(cases: int, trials: int) -> float:
    started = time.perf_counter()
    for i in range(cases):
        for _ in range(trials):
            tracer = InMemoryTracer()
            await agent.invoke({"query": f"k{i}"}, tracer=tracer)
            assert tracer.trace.tool_calls == 1
    return time.perf_counter() - started


async def harness(cases: int, trials: int, concurrency: int) -> float:
    started = time.perf_counter()
    report = await evaluate(agent, suite(cases, trials), concurrency=concurrency)
    wall = time.perf_counter() - started
    assert report.completion_rate == 1.0 and len(report.trials) == cases * trials
    return wall


HERE = Path(__file__).resolve()


async def subprocess_trials(n: int) -> float:
    here = HERE
    started = time.perf_counter()
    report = await evaluate(
        f"{here}:agent",
        Case("sub", {"query": "k0"}, graders=[Contains("value of k0")], trials=n),
        sandbox=SubprocessSandbox(),
        concurrency=2,
    )
    assert report.completion_rate == 1.0, report.render()
    return time.perf_counter() - started


def timing_table(quick: bool) -> None:
    cases, trials, repeats = (20, 5, 1) if quick else (100, 5, 5)
    n = cases * trials
    # Interleaved and the fastest of each kept: on a shared machine, contention only ever adds.
    floors, seq, par = [], [], []
    for _ in range(repeats):
        floors.append(asyncio.run(floor(cases, trials)))
        seq.append(asyncio.run(harness(cases, trials, 1)))
        par.append(asyncio.run(harness(cases, trials, 8)))
    f, s, p = min(floors), min(seq), min(par)
    print(
        f"\n## {cases}-case x {trials}-trial suite "
        f"({n} trials; fastest of {repeats}, interleaved)\n"
    )
    print("| | wall | per trial | vs floor |")
    print("|---|---:|---:|---:|")
    print(
        f"| floor: {n} bare agent runs, fresh InMemoryTracer each | {f * 1000:.0f} ms "
        f"| {f / n * 1000:.2f} ms | 1.00x |"
    )
    print(
        f"| `evaluate(concurrency=1)` | {s * 1000:.0f} ms | {s / n * 1000:.2f} ms | {s / f:.2f}x |"
    )
    print(
        f"| `evaluate(concurrency=8)` | {p * 1000:.0f} ms | {p / n * 1000:.2f} ms | {p / f:.2f}x |"
    )
    print(f"\nharness overhead per trial (sequential): {(s - f) / n * 1000:.3f} ms")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import tensorsketch.eval._child"], check=True)
    child_import = time.perf_counter() - started
    print(f"a child interpreter importing the eval harness: {child_import * 1000:.0f} ms")
    k = 4 if quick else 20
    sub = asyncio.run(subprocess_trials(k))
    print(
        f"SubprocessSandbox: {k} trials, concurrency 2: {sub * 1000:.0f} ms "
        f"({sub / k * 1000:.0f} ms per trial)"
    )


def stream_record(rng: random.Random, p: float, latency: float) -> dict[str, Any]:
    return {
        "type": "trial",
        "passed": rng.random() < p,
        "latency_ms": rng.gauss(latency, 15.0),
        "cost_usd": rng.gauss(0.01, 0.0015),
        "grades": [],
    }


def delays(
    metric: str,
    before: tuple[float, float],
    after: tuple[float, float],
    seeds: int,
    change: int = 400,
) -> tuple[list[int], int]:
    found: list[int] = []
    missed = 0
    for seed in range(seeds):
        rng = random.Random(seed)
        base = Baseline(0.95, 500, {}, 0.01, 100.0, {})
        monitor = DriftMonitor(base, distributions=())
        hit = None
        for i in range(change + 600):
            p, latency = before if i < change else after
            for alert in monitor.observe(stream_record(rng, p, latency)):
                if alert.metric == metric and hit is None:
                    hit = i
        if hit is None or hit < change:
            missed += 1 if hit is None else 0
            if hit is not None:
                found.append(hit - change)  # a false alarm before the change shows up as negative
        else:
            found.append(hit - change)
    return found, missed


def false_alarms(records: int, seeds: int, *, estimated: bool = False) -> dict[str, int]:
    """Alerts on streams that never change. ``estimated``: the baseline is what a 100-trial
    offline run measured (its pass rate and means carry sampling error), not the truth."""
    counts: dict[str, int] = {}
    for seed in range(seeds):
        rng = random.Random(1000 + seed)
        n = 100 if estimated else 500
        offline = [stream_record(rng, 0.95, 100.0) for _ in range(n)]
        latencies = [r["latency_ms"] for r in offline]
        costs = [r["cost_usd"] for r in offline]
        rate = sum(r["passed"] for r in offline) / n if estimated else 0.95
        base = Baseline(
            rate,
            n,
            {},
            statistics.fmean(costs) if estimated else 0.01,
            statistics.fmean(latencies) if estimated else 100.0,
            {"latency_ms": latencies, "cost_usd": costs},
        )
        monitor = DriftMonitor(base, check_every=25)
        for _ in range(records):
            monitor.observe(stream_record(rng, 0.95, 100.0))
        for alert in monitor.alerts:
            counts[alert.metric] = counts.get(alert.metric, 0) + 1
    return counts


def drift_table(quick: bool) -> None:
    seeds = 20 if quick else 200
    print(f"\n## Drift detection delay ({seeds} seeded streams each; change after record 400)\n")
    print("| change | detector | median | p95 | max | missed |")
    print("|---|---|---:|---:|---:|---:|")
    scenarios = [
        ("pass rate 0.95 -> 0.80", "pass_rate", (0.95, 100.0), (0.80, 100.0)),
        ("pass rate 0.95 -> 0.60", "pass_rate", (0.95, 100.0), (0.60, 100.0)),
        ("latency 100 -> 120 ms (sd 15)", "latency_ms", (0.95, 100.0), (0.95, 120.0)),
        ("latency 100 -> 200 ms (sd 15)", "latency_ms", (0.95, 100.0), (0.95, 200.0)),
    ]
    for label, metric, before, after in scenarios:
        found, missed = delays(metric, before, after, seeds)
        found.sort()
        p95 = found[min(len(found) - 1, int(len(found) * 0.95))] if found else -1
        detector = "two-proportion z" if metric == "pass_rate" else "Page-Hinkley"
        print(
            f"| {label} | {detector} | {statistics.median(found):.0f} | {p95} | {max(found)} "
            f"| {missed} |"
        )
    records, streams = (20_000, 2) if quick else (100_000, 5)
    total = records * streams
    metrics = (
        "pass_rate",
        "latency_ms",
        "cost_usd",
        "psi:latency_ms",
        "ks:latency_ms",
        "psi:cost_usd",
        "ks:cost_usd",
    )
    print(f"\nfalse alarms on {streams} stationary streams x {records:,} records ({total:,}):\n")
    print("| baseline | " + " | ".join(metrics) + " |")
    print("|---|" + "---:|" * len(metrics))
    for label, estimated in (("the true rate and means", False), ("a 100-trial offline run", True)):
        counts = false_alarms(records, streams, estimated=estimated)
        print(f"| {label} | " + " | ".join(str(counts.get(m, 0)) for m in metrics) + " |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=("timing", "drift"), help="run one of the two parts")
    args = parser.parse_args()
    quick = args.quick or os.environ.get("TS_BENCH_QUICK") == "1"
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, {tempfile.gettempdir()}")
    if args.only != "drift":
        timing_table(quick)
    if args.only != "timing":
        drift_table(quick)


if __name__ == "__main__":
    main()
