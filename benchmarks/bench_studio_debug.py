"""Benchmark the Studio debugger: the time to open a long thread.

Run with ``python benchmarks/bench_studio_debug.py [--checkpoints 2000] [--threads 1000]
[--repeat 5]``. It records one thread of ``--checkpoints`` checkpoints on SQLite (a counting
loop, one checkpoint per superstep, each journaling one effect) plus ``--threads`` short
threads beside it, starts a real uvicorn Studio with ``--backend`` on that file, and times
from the client: the thread detail (``GET /api/debug/threads/{id}``, what opening a thread
waits on), one checkpoint's detail (state, diff against its parent, journal entries) and the
first page of the threads list. Best and median of ``--repeat`` runs, in milliseconds. The
goal is under one second to open the 2,000-checkpoint thread; nothing here asserts it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tensorsketch.canvas.studio.debug_source import GraphSource
from tensorsketch.canvas.studio.server import StudioServer
from tensorsketch.runtime.backends.sqlite import SqliteBackend

GRAPH = textwrap.dedent(
    """
    from operator import add
    from typing import Annotated

    from tensorsketch import END, START, Context, Graph, Node, Reducer, Schema


    class Counter(Schema):
        count: int = 0
        limit: int = 3
        log: Annotated[list[str], Reducer(add)] = []


    class Increment(Node):
        class In(Schema):
            count: int

        class Out(Schema):
            count: int
            log: list[str]

        async def run(self, ctx: Context, inp: In) -> Out:
            n = inp.count + 1
            note = await ctx.step("note", lambda: f"effect {n}")
            return self.Out(count=n, log=[f"step {ctx.superstep}: {n} ({note})"])


    def keep_going(state: Counter) -> str:
        return END if state.count >= state.limit else "Increment"


    app = (
        Graph(Counter).add(Increment).edge(START, "Increment").conditional("Increment", keep_going)
    ).compile()
    """
)


def timed(repeat: int, fn: Callable[[], object]) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return min(times), statistics.median(times)


async def record(path: Path, db: Path, checkpoints: int, threads: int) -> None:
    graph = GraphSource(path).get().graph
    assert graph is not None
    backend = SqliteBackend(db)
    steps = checkpoints - 1  # the input checkpoint, then one per superstep
    await graph.invoke({"limit": steps}, thread_id="long", backend=backend, max_steps=steps + 1)
    for n in range(threads):
        await graph.invoke({"limit": 1}, thread_id=f"short-{n:04d}", backend=backend)
    await backend.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "loop_graph.py"
        path.write_text(GRAPH, encoding="utf-8")
        db = Path(tmp) / "runs.db"
        started = time.perf_counter()
        asyncio.run(record(path, db, args.checkpoints, args.threads))
        print(
            f"recorded 1 thread of {args.checkpoints} checkpoints and {args.threads} short "
            f"threads in {time.perf_counter() - started:.1f} s"
        )
        with StudioServer(path, port=0, backend=f"sqlite:///{db}") as server:
            headers = {"X-Studio-Token": server.token}
            with httpx.Client(base_url=server.base_url, headers=headers, timeout=60) as client:
                detail = client.get("/api/debug/threads/long")
                detail.raise_for_status()
                ids = [c["id"] for c in detail.json()["checkpoints"]]
                assert len(ids) == args.checkpoints, len(ids)
                middle = ids[len(ids) // 2]
                rows = [
                    ("open the thread (detail)", "/api/debug/threads/long"),
                    (
                        "one checkpoint (state, diff, journal)",
                        f"/api/debug/threads/long/checkpoints/{middle}",
                    ),
                    ("threads list, first page", "/api/debug/threads"),
                    ("threads list, search", "/api/debug/threads?q=short-09"),
                ]
                print(f"{'request':<40} {'best ms':>9} {'median ms':>10}")
                for label, url in rows:
                    best, median = timed(
                        args.repeat, lambda u=url: client.get(u).raise_for_status()
                    )
                    print(f"{label:<40} {best:>9.1f} {median:>10.1f}")


if __name__ == "__main__":
    main()
