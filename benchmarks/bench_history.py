"""Reading a long thread's history back: 1,000 against 20,000 steps, on each store.

The thread is the held-out probe's shape: one node appends one 200-byte message per step, so
the state at step ``n`` holds ``n`` messages and the whole history holds ``n²/2`` of them. Per
store and length it times (median of a few reads, no tracing) and measures the peak Python
heap of (one read under ``tracemalloc``):

* ``get_history`` — the list, oldest first, every checkpoint's full values;
* ``aiter_history``, the first 10 — what a timeline view or "undo the last turns" reads;
* ``aiter_history``, to the end — every checkpoint, newest first, one at a time (a
  consumer that keeps none of them, e.g. a search or an export);
* ``get_state`` — the latest state alone.

The thread is written once in memory, then its rows are copied into each store (SQLite file,
PostgreSQL, Redis; a store that cannot be reached is skipped). Every read's result is checked
(the count, and the newest checkpoint's last message). Run ``python benchmarks/bench_history.py``
(``--quick`` or ``TS_BENCH_QUICK=1``: 200 against 2,000 steps).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import operator
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

PG_DSN = os.environ.get("TS_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("TS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
MESSAGE_BYTES = 200
FIRST = 10


def _content(i: int) -> str:
    head = f"message {i} "
    return head + "x" * (MESSAGE_BYTES - len(head))


def _app() -> Any:
    from tensorsketch import START, Context, Graph, Node, Reducer, Schema

    class LongState(Schema):
        messages: Annotated[list[dict[str, str]], Reducer(operator.add)] = []
        turns: int = 0
        limit: int = 0

    class Append(Node):
        class In(Schema):
            turns: int

        class Out(Schema):
            messages: list[dict[str, str]]
            turns: int

        async def run(self, ctx: Context, inp: Any) -> Any:
            reply = {"role": "assistant", "content": _content(inp.turns)}
            return self.Out(messages=[reply], turns=inp.turns + 1)

    return (
        Graph(LongState)
        .add(Append)
        .edge(START, "Append")
        .loop("Append", until=lambda s: s.turns >= s.limit)
        .compile()
    )


async def _rows(app: Any, steps: int) -> list[Any]:
    from tensorsketch.runtime.backends import InMemoryBackend

    source = InMemoryBackend()
    await app.invoke({"limit": steps}, thread_id="long", backend=source, max_steps=steps + 1)
    return await source.list_checkpoints("long")


async def _store(kind: str, workdir: Path) -> Any:
    if kind == "sqlite":
        from tensorsketch.runtime.backends import SqliteBackend

        return SqliteBackend(workdir / f"history-{uuid.uuid4().hex[:6]}.db")
    if kind == "postgres":
        from tensorsketch.runtime.backends import PostgresBackend

        return PostgresBackend(PG_DSN, schema=f"ts_hist_{uuid.uuid4().hex[:8]}")
    from tensorsketch.runtime.backends import RedisBackend

    return RedisBackend(REDIS_URL, prefix=f"ts_hist_{uuid.uuid4().hex[:8]}")


async def _drop(kind: str, backend: Any) -> None:
    await backend.aclose()
    if kind == "postgres":
        import psycopg

        async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{backend.schema}" CASCADE')
    elif kind == "redis":
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(REDIS_URL)
        keys = [k async for k in client.scan_iter(match=f"{backend.prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


async def _reachable(kind: str, workdir: Path) -> bool:
    if kind == "sqlite":
        return True
    backend = await _store(kind, workdir)
    try:
        await asyncio.wait_for(backend.latest_checkpoint("probe"), 5)
    except Exception:
        return False
    finally:
        await _drop(kind, backend)
    return True


async def _timed(fn: Callable[[], Awaitable[Any]], reads: int) -> tuple[float, float]:
    """Median seconds of ``reads`` calls, then the peak traced heap (MB) of one more."""
    times = []
    for _ in range(reads):
        gc.collect()
        start = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - start)
    gc.collect()
    tracemalloc.start()
    await fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return statistics.median(times), peak / 1e6


async def _measure(
    kind: str, steps: int, rows: list[Any], app: Any, workdir: Path
) -> dict[str, Any]:
    backend = await _store(kind, workdir)
    try:
        for row in rows:
            await backend.save_checkpoint(row)
        expected_last = _content(steps - 1)
        reads = 3 if steps > 5_000 else 5

        async def history() -> None:
            found = await app.aget_history("long", backend)
            assert len(found) == len(rows), (len(found), len(rows))
            assert found[-1].values["messages"][-1]["content"] == expected_last

        async def first() -> None:
            got = []
            async for checkpoint in app.aiter_history("long", backend):
                got.append(checkpoint)
                if len(got) == FIRST:
                    break
            assert got[0].values["messages"][-1]["content"] == expected_last

        async def walk() -> None:
            count = 0
            async for checkpoint in app.aiter_history("long", backend):
                if count == 0:
                    assert checkpoint.values["messages"][-1]["content"] == expected_last
                count += 1
            assert count == len(rows), (count, len(rows))

        async def state() -> None:
            found = await app.aget_state("long", backend)
            assert found.messages[-1]["content"] == expected_last

        out: dict[str, Any] = {}
        probes = {"get_history": history, "get_state": state}
        if hasattr(app, "aiter_history"):
            probes = {
                "get_history": history,
                f"aiter_history, first {FIRST}": first,
                "aiter_history, to the end": walk,
                "get_state": state,
            }
        for name, probe in probes.items():
            n = reads if name != "get_state" else 21
            out[name] = await _timed(probe, n)
        return out
    finally:
        await _drop(kind, backend)


def _fmt(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


async def main_async(quick: bool) -> None:
    lengths = (200, 2_000) if quick else (1_000, 20_000)
    app = _app()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        kinds = [k for k in ("sqlite", "postgres", "redis") if await _reachable(k, workdir)]
        results: dict[tuple[str, int], dict[str, Any]] = {}
        for steps in lengths:
            print(f"  writing a {steps:,}-step thread ...", file=sys.stderr, flush=True)
            rows = await _rows(app, steps)
            for kind in kinds:
                print(f"  reading it from {kind} ...", file=sys.stderr, flush=True)
                results[kind, steps] = await _measure(kind, steps, rows, app, workdir)
            del rows
            gc.collect()
    short, long = lengths
    header = (
        f"| store | read | {short:,} steps | {long:,} steps | {long // short}x steps costs "
        f"| peak heap {short:,} | peak heap {long:,} |"
    )
    print(header)
    print("|---|---|---:|---:|---:|---:|---:|")
    for kind in kinds:
        for name in results[kind, short]:
            (t1, m1), (t2, m2) = results[kind, short][name], results[kind, long][name]
            print(
                f"| {kind} | {name} | {_fmt(t1)} | {_fmt(t2)} | {t2 / t1:.0f}x "
                f"| {m1:.1f} MB | {m2:.1f} MB |"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter threads (a smoke run)")
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("TS_BENCH_QUICK") == "1"
    from importlib.metadata import version

    print(
        f"long-thread history — tensorsketch-core {version('tensorsketch-core')}, Python "
        f"{sys.version.split()[0]}, {os.cpu_count()} cores; median time, peak traced heap."
    )
    print()
    asyncio.run(main_async(quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
