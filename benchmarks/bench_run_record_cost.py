"""What a run record costs on SQLite and Redis: the same agent turn invoked directly and
through ``AsyncRunner``, client CPU and units of work per run (issue 49, item 1).

``bench_durable_runs.py`` measures the turn on PostgreSQL (with the server's CPU and the
statements on the wire); the other two stores run here, in one process: a scripted model asks
for a tool, the tool answers, the model answers, ``RUNS`` runs (default 200) ``CONCURRENCY``
(32) at a time, each on a thread of its own. The two ways alternate in rounds (default 4) so a
loaded machine weighs on both alike; the CPU is ``time.process_time`` over each batch (every
thread of the process: SQLite's worker thread included). Units of work are counted where they
leave the process: ``SqlBackend.submit`` calls on SQLite, commands packed for the Redis
connections (one per round trip, a pipeline or a script alike). Usage::

    python benchmarks/bench_run_record_cost.py                 # both stores
    python benchmarks/bench_run_record_cost.py --calls 300     # Python calls per run (cProfile)
    python benchmarks/bench_run_record_cost.py --store sqlite --runs 100 --rounds 2
    TS_BENCH_QUICK=1 python benchmarks/bench_run_record_cost.py  # 40 runs x 2 rounds
    python benchmarks/bench_run_record_cost.py --instructions 200  # under valgrind (below)
    python benchmarks/bench_run_record_cost.py --opcodes 100   # Python bytecodes, by function

Redis at ``TS_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``), under a fresh prefix
that is deleted afterwards. ``--calls N`` counts instead the Python calls per run (cProfile over
``N`` runs one at a time, each way, after a warm-up): deterministic, so it shows a change of a
few percent that the timed rounds on a loaded machine cannot; it also takes ``postgres``
(``TS_TEST_POSTGRES_DSN``, default ``postgresql://postgres@127.0.0.1:5432/test``).

``--instructions N`` counts machine instructions per run instead (valgrind's callgrind, every
thread of the process, C and Python alike): each way runs in a process of its own, once with
a warm-up alone and once with ``N`` more runs after it, and the difference over ``N`` is one
run's cost. It adds two ways that split the runner's extra into the run's event log and its
record: ``stream``, the same turn through ``agent.stream`` with the backend (the events
stored, and handed through a queue to the consumer's task), and ``sink``, the call the runner
itself makes to run the graph (``_start_sinking``: the events stored, each handed to a check
in the run's own task) without any record around it. On a shared machine whose timed rounds
of one commit spread from 1.3x to 1.7x, repeated counts agree within about 2 %; what they
cannot show is waiting (valgrind runs one thread at a time, so SQLite's worker batches
commits differently) and time spent in the kernel. Needs ``valgrind`` on the PATH
(``apt-get install valgrind``).
"""

import argparse
import asyncio
import collections
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

REDIS_URL = os.environ.get("TS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
PG_DSN = os.environ.get("TS_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
QUICK = os.environ.get("TS_BENCH_QUICK") == "1"
CONCURRENCY = 32
ANSWER = "settled"

Run = Callable[[str], Awaitable[None]]


def _agent() -> Any:
    """The turn the run-cost tests drive too (``tensorsketch.testing.runs.settle_agent``)."""
    from tensorsketch.testing.runs import settle_agent

    return settle_agent()


class Units:
    """Counts the units of work the backend sends (see the module docstring)."""

    def __init__(self, store: str) -> None:
        self.count = 0
        if store == "sqlite":
            from tensorsketch.runtime.backends.sql import SqlBackend

            owner: Any = SqlBackend
            name = "submit"
        else:
            # Where a command or a pipeline is packed for the wire: one per round trip
            # (the backend's connections send without redis-py's send_packed_command).
            from redis.asyncio.connection import AbstractConnection

            for name in ("pack_command", "pack_commands"):
                packing = getattr(AbstractConnection, name)

                def packed(*args: Any, _packing: Any = packing, **kwargs: Any) -> Any:
                    self.count += 1
                    return _packing(*args, **kwargs)

                setattr(AbstractConnection, name, packed)
            return
        original = getattr(owner, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return await original(*args, **kwargs)

        setattr(owner, name, counted)


def _backend(store: str, prefix: str) -> Any:
    if store == "sqlite":
        from tensorsketch.runtime.backends.sqlite import SqliteBackend

        return SqliteBackend(os.path.join(tempfile.mkdtemp(), "runs.db"))
    if store == "postgres":
        from tensorsketch.runtime.backends.postgres import PostgresBackend

        return PostgresBackend(PG_DSN)
    from tensorsketch.runtime.backends.redis import RedisBackend

    return RedisBackend(REDIS_URL, prefix=prefix)


async def _drive(run: Run, keys: list[str]) -> None:
    queue = list(reversed(keys))

    async def caller() -> None:
        while queue:
            await run(queue.pop())

    await asyncio.gather(*(caller() for _ in range(CONCURRENCY)))


def _ways(agent: Any, backend: Any, tasks: Any) -> dict[str, Run]:
    """Each way of running the turn on ``backend``: ``invoke``, ``stream``, ``sink`` (the
    runner's own engine call, no record: see the module docstring) and ``runner``
    (``tasks``, an ``AsyncRunner`` on the backend)."""

    async def invoke(key: str) -> None:
        out = await agent.invoke({"query": "settle"}, thread_id=key, backend=backend)
        assert out.output == ANSWER, out

    async def stream(key: str) -> None:
        async for _ in agent.stream({"query": "settle"}, thread_id=key, backend=backend):
            pass

    check_types = frozenset({"values", "node_start"})  # what the runner's stop check takes

    async def check(event: Any) -> None:
        return None

    async def sink(key: str) -> None:
        run, driving = agent._start_sinking(
            {"query": "settle"}, check, thread_id=key, backend=backend, sink_types=check_types
        )
        await driving
        run.result_state()

    async def runner(key: str) -> None:
        record = await tasks.submit({"query": "settle"}, thread_id=key)
        done = await tasks.await_run(record.run_id)
        assert done.status == "succeeded", done

    return {"invoke": invoke, "stream": stream, "sink": sink, "runner": runner}


async def measure(store: str, runs: int, rounds: int) -> dict[str, dict[str, float]]:
    from tensorsketch.runs import AsyncRunner

    prefix = f"ts-bench-rc-{uuid.uuid4().hex[:8]}"
    agent, backend = _agent(), _backend(store, prefix)
    tasks = AsyncRunner(agent, backend=backend, concurrency=CONCURRENCY)
    await tasks.start()

    every = _ways(agent, backend, tasks)
    ways = {way: every[way] for way in ("invoke", "runner")}
    units = Units(store)
    totals = {way: {"cpu": 0.0, "units": 0.0} for way in ways}
    try:
        for way, run in ways.items():  # warm-up
            await _drive(run, [f"warm-{way}-{i}" for i in range(CONCURRENCY)])
        for r in range(rounds):
            order = list(ways) if r % 2 == 0 else list(reversed(ways))
            for way in order:
                units.count = 0
                started = time.process_time()
                await _drive(ways[way], [f"{way}-{r}-{i}" for i in range(runs)])
                totals[way]["cpu"] += time.process_time() - started
                totals[way]["units"] += units.count
    finally:
        await tasks.aclose()
        await backend.aclose()
        if store == "redis":
            await _delete_keys(prefix)
    n = runs * rounds
    return {way: {"cpu": 1000 * t["cpu"] / n, "units": t["units"] / n} for way, t in totals.items()}


@contextlib.asynccontextmanager
async def _warm_ways(
    store: str, names: tuple[str, ...]
) -> AsyncIterator[AsyncIterator[tuple[str, Run]]]:
    """Each of ``names``'s ways on a fresh backend and runner, warmed up (imports, caches,
    prepared statements: ten runs) just before it is handed out; each run takes a fresh
    thread. Closed, and Redis's keys deleted, on leaving."""
    from tensorsketch.runs import AsyncRunner

    prefix = f"ts-bench-rc-{uuid.uuid4().hex[:8]}"
    agent, backend = _agent(), _backend(store, prefix)
    tasks = AsyncRunner(agent, backend=backend, concurrency=CONCURRENCY)
    await tasks.start()
    tag = uuid.uuid4().hex[:8]
    ways = _ways(agent, backend, tasks)

    async def warmed(way: str) -> Run:
        run = ways[way]
        for i in range(10):
            await run(f"warm-{tag}-{way}-{i}")
        return lambda key: run(f"{tag}-{way}-{key}")

    async def each() -> AsyncIterator[tuple[str, Run]]:
        for way in names:
            yield way, await warmed(way)

    try:
        yield each()
    finally:
        await tasks.aclose()
        await backend.aclose()
        if store == "redis":
            await _delete_keys(prefix)


async def count_calls(store: str, runs: int) -> dict[str, float]:
    """Python calls per run, each way (cProfile over ``runs`` runs one at a time)."""
    import cProfile
    import pstats

    calls: dict[str, float] = {}
    async with _warm_ways(store, ("invoke", "runner")) as ways:
        async for way, run in ways:
            profile = cProfile.Profile()
            profile.enable()
            for i in range(runs):
                await run(str(i))
            profile.disable()
            calls[way] = pstats.Stats(profile).total_calls / runs  # type: ignore[attr-defined]
    return calls


async def count_opcodes(store: str, runs: int) -> dict[str, collections.Counter[str]]:
    """Python bytecodes executed per run, by function, each of ``invoke``, ``sink`` and
    ``runner`` (``sys.settrace`` with opcode events over ``runs`` runs one at a time, in the
    event loop's thread: SQLite's worker thread is not counted). Deterministic, and finer
    than ``--calls``: where a Python-level rewrite of the runner would save its steps."""
    counted: dict[str, collections.Counter[str]] = {}
    async with _warm_ways(store, ("invoke", "sink", "runner")) as ways:
        async for way, run in ways:
            seen = counted[way] = collections.Counter[str]()

            def trace(frame: Any, event: str, arg: Any, seen: Any = seen) -> Any:
                frame.f_trace_opcodes = True
                if event == "opcode":
                    code = frame.f_code
                    seen[f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_name}"] += 1
                return trace

            sys.settrace(trace)
            try:
                for i in range(runs):
                    await run(str(i))
            finally:
                sys.settrace(None)
    return counted


async def one_way(store: str, way: str, runs: int, prefix: str) -> None:
    """``runs`` runs of one way after a warm-up, nothing measured: what ``--instructions``
    runs under valgrind (a process per count). What it leaves in Redis under ``prefix`` is
    the caller's to delete, outside the count."""
    from tensorsketch.runs import AsyncRunner

    agent, backend = _agent(), _backend(store, prefix)
    tasks = AsyncRunner(agent, backend=backend, concurrency=CONCURRENCY)
    await tasks.start()

    run = _ways(agent, backend, tasks)[way]
    try:
        await _drive(run, [f"warm-{prefix}-{i}" for i in range(WARM_UP)])
        await _drive(run, [f"{prefix}-{i}" for i in range(runs)])
    finally:
        await tasks.aclose()
        await backend.aclose()


async def _delete_keys(prefix: str) -> None:
    """Delete what the benchmark left in Redis under ``prefix``."""
    import redis.asyncio as redis

    client = redis.Redis.from_url(REDIS_URL)
    async for key in client.scan_iter(match=f"{prefix}*", count=1000):
        await client.delete(key)
    await client.aclose()


#: Runs before the counted ones in ``--instructions`` (caches, prepared statements, imports).
WARM_UP = 200
_COLLECTED = re.compile(r"Collected : (\d+)")


def _instructions(store: str, way: str, runs: int) -> int:
    """Instructions of a process running ``runs`` of ``way`` after the warm-up (callgrind)."""
    prefix = f"ts-bench-rc-{uuid.uuid4().hex[:8]}"
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        __file__,
        "--one-way",
        store,
        way,
        str(runs),
        prefix,
    ]
    # A fixed hash seed: the same dict layouts, so the same instructions, run after run.
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if store == "redis":  # not counted: deleting the keys is a Redis call per key
        asyncio.run(_delete_keys(prefix))
    found = _COLLECTED.search(done.stderr)
    if done.returncode or found is None:
        raise SystemExit(f"valgrind failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return int(found.group(1))


def count_instructions(store: str, runs: int) -> dict[str, float]:
    """Instructions per run, each way: (warm-up + ``runs``) minus the warm-up alone."""
    return {
        way: (_instructions(store, way, runs) - _instructions(store, way, 0)) / runs
        for way in ("invoke", "stream", "sink", "runner")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--store", choices=("sqlite", "redis", "postgres"), nargs="+", default=None)
    parser.add_argument("--calls", type=int, default=0, help="count Python calls over N runs")
    parser.add_argument(
        "--instructions", type=int, default=0, help="count instructions over N runs (valgrind)"
    )
    parser.add_argument(
        "--opcodes", type=int, default=0, help="count Python bytecodes over N runs, by function"
    )
    parser.add_argument(
        "--one-way", nargs=4, metavar=("STORE", "WAY", "RUNS", "PREFIX"), help=argparse.SUPPRESS
    )
    parser.add_argument("--runs", type=int, default=40 if QUICK else 200)
    parser.add_argument("--rounds", type=int, default=2 if QUICK else 4)
    args = parser.parse_args()
    if args.one_way:
        store, way, runs, prefix = args.one_way
        asyncio.run(one_way(store, way, int(runs), prefix))
        return
    if args.instructions:
        n = args.instructions
        print(f"\n## Instructions per run (callgrind, {n} runs after {WARM_UP} of warm-up)\n")
        print(
            "| store | invoke | stream | sink | runner | runner/invoke | stream/invoke "
            "| sink/invoke | runner/sink |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for store in args.store or ("sqlite",):
            c = count_instructions(store, n)
            i, st, sk, r = c["invoke"], c["stream"], c["sink"], c["runner"]
            print(
                f"| {store} | {i:,.0f} | {st:,.0f} | {sk:,.0f} | {r:,.0f} | {r / i:.2f}x "
                f"| {st / i:.2f}x | {sk / i:.2f}x | {r / sk:.2f}x |"
            )
        return
    if args.opcodes:
        n = args.opcodes
        for store in args.store or ("sqlite",):
            ops = asyncio.run(count_opcodes(store, n))
            total = {way: sum(c.values()) / n for way, c in ops.items()}
            print(f"\n## Python bytecodes per run, {store} ({n} runs one at a time)\n")
            print("| invoke | sink | runner | runner/invoke | runner - sink |")
            print("|---:|---:|---:|---:|---:|")
            i, sk, r = total["invoke"], total["sink"], total["runner"]
            print(f"| {i:,.0f} | {sk:,.0f} | {r:,.0f} | {r / i:.2f}x | {r - sk:,.0f} |")
            extra = ops["runner"].copy()
            extra.subtract(ops["sink"])
            print("\n| the runner's most over the sink, by function | bytecodes per run |")
            print("|---|---:|")
            for name, count in extra.most_common(15):
                print(f"| `{name}` | {count / n:,.0f} |")
        return
    if args.calls:
        print(f"\n## Python calls per run (cProfile, {args.calls} runs one at a time)\n")
        print("| store | invoke | runner | runner/invoke |")
        print("|---|---:|---:|---:|")
        for store in args.store or ("sqlite", "postgres", "redis"):
            c = asyncio.run(count_calls(store, args.calls))
            ratio = c["runner"] / c["invoke"]
            print(f"| {store} | {c['invoke']:,.0f} | {c['runner']:,.0f} | {ratio:.2f}x |")
        return
    if "postgres" in (args.store or ()):
        parser.error("timed rounds on PostgreSQL: bench_durable_runs.py (with the server's CPU)")
    print(
        f"\n## One agent turn, {args.runs} runs x {args.rounds} rounds, {CONCURRENCY} at a time\n"
    )
    print(
        "| store | invoke CPU ms/run | runner CPU ms/run | CPU runner/invoke | units/run "
        "(invoke, runner) | units runner/invoke |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for store in args.store or ("sqlite", "redis"):
        r = asyncio.run(measure(store, args.runs, args.rounds))
        i, w = r["invoke"], r["runner"]
        print(
            f"| {store} | {i['cpu']:.2f} | {w['cpu']:.2f} | {w['cpu'] / i['cpu']:.2f}x "
            f"| {i['units']:.1f}, {w['units']:.1f} | {w['units'] / i['units']:.2f}x |"
        )


if __name__ == "__main__":
    main()
