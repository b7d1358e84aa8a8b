"""A 10,000-way ``Send`` fan-out on a two-node local Ray cluster, beside the same run in-process.

The cluster (a head and a second node, 2 logical CPUs each, as ``tensorsketch.ray.testing``
starts it for the tests) lives in a private network namespace, so the timed part runs in a
driver started inside it (this script again, with ``--driver``). Each instance reads one
shared 1 MB state field (it goes to the object store once per superstep) and writes one int;
``RayExecutor`` ships 100 instances per Ray task. A warm-up run starts the worker processes;
then the in-process run and the Ray run take turns, and each one's best time is reported. The
two final states are compared (equal, or the benchmark fails).

``python benchmarks/bench_ray_fanout.py`` (``--quick``: fewer rounds). Needs
``tensorsketch-ray`` installed and permission to create a network namespace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import os
import subprocess
import sys
import time
from typing import Annotated, Any

WORKERS = 10_000
BATCH = 100
TARGET = 0.5


def _graph() -> Any:
    from tensorsketch import END, START, Context, Graph, Node, Reducer, Schema, Send

    class Fan(Schema):
        count: int = 0
        corpus: str = ""
        item: int = 0
        out: Annotated[list[int], Reducer(operator.add)] = []

    class Plan(Node):
        class In(Schema):
            count: int

        class Out(Schema):
            out: list[int]

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(out=[])

    class Work(Node):
        class In(Schema):
            item: int
            corpus: str

        class Out(Schema):
            out: list[int]

        async def run(self, ctx: Context, inp: In) -> Out:
            return self.Out(out=[inp.item * 3 + inp.corpus.count("x", inp.item % 97, 2000)])

    return (
        Graph(Fan)
        .add(Plan)
        .add(Work)
        .edge(START, "Plan")
        .router("Plan", lambda s: [Send("Work", {"item": i}) for i in range(s.count)])
        .edge("Work", END)
    )


async def _measure(rounds: int) -> dict[str, Any]:
    from tensorsketch.ray.executor import RayExecutor

    corpus = ("lorem ipsum x " * 80_000)[:1_000_000]
    graph = _graph()
    executor = RayExecutor(batch_size=BATCH)
    local, shipped = graph.compile(), graph.compile(executor=executor)
    data = {"count": WORKERS, "corpus": corpus}
    await shipped.invoke(data)  # warm-up: worker processes start, the graph is put
    executor.nodes.clear()
    times: dict[str, list[float]] = {"inprocess": [], "ray": []}
    states: dict[str, Any] = {}
    for _ in range(rounds):
        for name, compiled in (("inprocess", local), ("ray", shipped)):
            started = time.perf_counter()
            states[name] = await compiled.invoke(data)
            times[name].append(time.perf_counter() - started)
    if states["ray"].model_dump() != states["inprocess"].model_dump():
        msg = "the Ray run's final state differs from the in-process run's"
        raise AssertionError(msg)
    return {"times": times, "batches_per_node": sorted(executor.nodes.values())}


def _driver(rounds: int) -> int:
    import ray

    ray.init(
        address=os.environ["RAY_ADDRESS"],
        namespace="bench",
        logging_level="ERROR",
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    print(json.dumps(asyncio.run(_measure(rounds))))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rounds = 2 if args.quick or os.environ.get("TS_BENCH_QUICK") == "1" else 5
    if args.driver:
        return _driver(rounds)
    try:
        from tensorsketch.ray.testing import LocalRayCluster, PrivateNetwork
    except ImportError:
        print("Ray fan-out: skipped (install packages/tensorsketch-ray to run it)")
        return 0

    from importlib.metadata import version

    print(
        f"Ray fan-out — tensorsketch-ray {version('tensorsketch-ray')}, ray {version('ray')}, "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} cores; a head and one worker node "
        f"of 2 logical CPUs each; {WORKERS:,} instances, {BATCH} per Ray task; best of {rounds}."
    )
    with PrivateNetwork() as network:
        cluster = LocalRayCluster(network)
        try:
            started = time.perf_counter()
            cluster.start_head(num_cpus=2)
            cluster.add_node("b", num_cpus=2)
            print(f"  cluster up in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            child = cluster.driver(
                [sys.executable, __file__, "--driver", *(["--quick"] if args.quick else [])],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            out, err = child.communicate(timeout=900)
        finally:
            cluster.stop()
    if child.returncode != 0:
        print(err[-4000:], file=sys.stderr)
        return 1
    report = json.loads(out.strip().splitlines()[-1])
    local, ray_s = min(report["times"]["inprocess"]), min(report["times"]["ray"])
    rows = [
        ("in-process (one event loop)", local),
        (f"RayExecutor, 2 nodes ({report['batches_per_node']} batches per node)", ray_s),
    ]
    width = max(len(label) for label, _ in rows)
    print(f"\n| {'10,000-way Send fan-out'.ljust(width)} | wall time |")
    print(f"|{'-' * (width + 2)}|-----------|")
    for label, seconds in rows:
        print(f"| {label.ljust(width)} | {seconds * 1000:7.0f} ms |")
    met = "yes" if ray_s <= TARGET else "NO"
    print(f"\ntarget: 10k fan-out on the cluster <= {TARGET} s — met: {met} ({ray_s:.3f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
