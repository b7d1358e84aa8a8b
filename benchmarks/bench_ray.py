"""The run table worked by a Ray worker pool, beside the same runs on the in-process runner.

Workload: ``RUNS`` simulated agent runs (``packages/tensorsketch-ray/tests/fleet_app.py``: the
fake model thinks 50 ms, calls the ``settle`` tool — a real, keyed write to PostgreSQL — thinks
50 ms again and answers), every run durable on PostgreSQL: its record (queued, running,
succeeded), its thread's checkpoints and journal. Measured three ways:

* **in-process** — ``AsyncRunner(agent, backend=PostgresBackend(...), concurrency=100)``: one
  process submits and executes (the run table's one-process runner);
* **Ray, 1 worker** / **Ray, 2 workers** — ``tensorsketch worker fleet_app:agent --actors N
  --concurrency 100`` on a local two-node Ray cluster inside a private network namespace
  (``tensorsketch.ray.testing``; PostgreSQL through its Unix socket), runs submitted into the
  table by this process (``tensorsketch.ray.enqueue``) and read back from it.

Throughput is runs finished per second from the first submit to the last finish; every run must
have succeeded and applied its effect exactly once, or the benchmark fails. Footprint is the
proportional set size (PSS, so shared pages are not counted twice) of the idle cluster's
processes, then of the pool's actors, from ``/proc/<pid>/smaps_rollup``.

Needs root or unprivileged user namespaces (``unshare -n``), PostgreSQL at
``TS_TEST_POSTGRES_DSN`` (default ``postgresql://postgres@127.0.0.1:5432/test``) and
``tensorsketch-ray`` installed. ``TS_BENCH_QUICK=1``: 300 runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
APP_DIR = ROOT / "packages" / "tensorsketch-ray" / "tests"
sys.path.insert(0, str(APP_DIR))

QUICK = os.environ.get("TS_BENCH_QUICK") == "1"
RUNS = 300 if QUICK else 2000
CONCURRENCY = 100
PG_DSN = os.environ.get("TS_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def _pss(pids: list[int]) -> int:
    """Bytes of proportional set size over ``pids`` (processes that vanished count 0)."""
    total = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1]) * 1024
    return total


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds ``pids`` used so far (processes that vanished count 0)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / tick


def _postgres_pids() -> list[int]:
    """This machine's PostgreSQL processes (the server the benchmark writes to is local)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _mib(size: int) -> str:
    return f"{size / 2**20:,.0f} MiB"


def _sql(statement: str) -> None:
    import psycopg

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(statement)


def _effects_ok(schema: str, tag: str) -> tuple[int, int]:
    """(threads with exactly one applied effect, attempts) of one measurement."""
    import psycopg

    with psycopg.connect(PG_DSN) as conn:
        once = conn.execute(
            f"SELECT count(*) FROM (SELECT thread_id FROM {schema}.applied WHERE thread_id "
            "LIKE %s GROUP BY thread_id HAVING count(*) = 1) AS t",
            (f"b_{tag}_%",),
        ).fetchone()
        tries = conn.execute(
            f"SELECT count(*) FROM {schema}.attempts WHERE thread_id LIKE %s", (f"b_{tag}_%",)
        ).fetchone()
    return int(once[0] if once else 0), int(tries[0] if tries else 0)


async def _wait(store: Any, count: int, timeout: float = 900) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while True:
        counts: dict[str, int] = await store.counts()
        done = sum(counts.get(s, 0) for s in ("succeeded", "failed", "cancelled"))
        if done >= count or time.monotonic() > deadline:
            return counts
        await asyncio.sleep(0.1)


async def in_process(schema: str, effects: str) -> tuple[float, float, float]:
    """The same runs submitted to and executed by one process's AsyncRunner: runs/s, and
    the CPU milliseconds per run this process and the PostgreSQL server spent."""
    from fleet_app import agent

    from tensorsketch.runs import AsyncRunner
    from tensorsketch.runtime.backends.postgres import PostgresBackend

    os.environ["TS_FLEET_EFFECTS_DSN"] = PG_DSN
    os.environ["TS_FLEET_EFFECTS_SCHEMA"] = effects
    backend = PostgresBackend(PG_DSN, schema=schema, pool_kwargs={"min_size": 1, "max_size": 8})
    tag = uuid.uuid4().hex[:8]
    try:
        async with AsyncRunner(agent, backend=backend, concurrency=CONCURRENCY) as runner:
            await runner.store.counts()  # tables and connections exist before the clocks start
            server = _postgres_pids()
            cpu, server_cpu = time.process_time(), _cpu_seconds(server)
            started = time.perf_counter()
            for start in range(0, RUNS, 100):
                await asyncio.gather(
                    *(
                        runner.submit({"query": "settle"}, thread_id=f"b_{tag}_{i}")
                        for i in range(start, min(RUNS, start + 100))
                    )
                )
            counts = await _wait(runner.store, RUNS)
            elapsed = time.perf_counter() - started
            cpu = time.process_time() - cpu
            server_cpu = _cpu_seconds(server) - server_cpu
    finally:
        await backend.aclose()
    _check(counts, effects, tag)
    return RUNS / elapsed, 1000 * cpu / RUNS, 1000 * server_cpu / RUNS


def _check(counts: dict[str, int], effects: str, tag: str) -> None:
    once, _ = _effects_ok(effects, tag)
    if counts.get("succeeded") != RUNS or once != RUNS:
        msg = f"not every run succeeded exactly once: {counts}, {once} effects applied once"
        raise SystemExit(msg)


class Pool:
    """A ``tensorsketch worker`` started inside the cluster's network."""

    def __init__(self, cluster: Any, socket_dsn: str, schema: str, actors: int) -> None:
        tool = Path(sys.executable).parent / "tensorsketch"
        self.lines: queue.Queue[str] = queue.Queue()
        self.process = cluster.driver(
            [
                str(tool),
                "worker",
                "fleet_app:agent",
                f"--ray={cluster.address}",
                f"--backend={socket_dsn}",
                f"--schema={schema}",
                f"--actors={actors}",
                f"--concurrency={CONCURRENCY}",
                "--actor-cpus=0",
                "--pool-size=6",
                f"--name=b{uuid.uuid4().hex[:8]}",
                "--node-ip-address=127.0.0.1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        self.ready = self._read("ready", 240)

    def _pump(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.strip())

    def _read(self, key: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            if line.startswith("{") and key in line:
                found: dict[str, Any] = json.loads(line)
                return found
        msg = f"the worker pool printed no {key!r} line"
        raise SystemExit(msg)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self._read("stopped", 60)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(timeout=30)


async def on_ray(
    cluster: Any, socket_dsn: str, schema: str, effects: str, actors: int
) -> tuple[float, int]:
    """Runs/s of a pool of ``actors`` worker processes, and the actors' idle PSS."""
    from tensorsketch.ray import enqueue
    from tensorsketch.runtime.backends.postgres import PostgresBackend

    backend = PostgresBackend(PG_DSN, schema=schema, pool_kwargs={"min_size": 1, "max_size": 8})
    store = backend.run_store()
    assert store is not None
    await store.counts()  # the tables exist before the pool's processes look
    pool = Pool(cluster, socket_dsn, schema, actors)
    idle = _pss([a["pid"] for a in pool.ready["actors"]])
    tag = uuid.uuid4().hex[:8]
    try:
        started = time.perf_counter()
        for start in range(0, RUNS, 100):
            await asyncio.gather(
                *(
                    enqueue(store, {"query": "settle"}, graph="agent", thread_id=f"b_{tag}_{i}")
                    for i in range(start, min(RUNS, start + 100))
                )
            )
        counts = await _wait(store, RUNS)
        elapsed = time.perf_counter() - started
    finally:
        pool.stop()
        await backend.aclose()
    _check(counts, effects, tag)
    return RUNS / elapsed, idle


def main() -> None:
    import psycopg
    from fleet_app import SCHEMA_SQL

    from tensorsketch.ray.testing import LocalRayCluster, PrivateNetwork, unix_socket_dsn

    with psycopg.connect(PG_DSN) as conn:
        row = conn.execute("SHOW unix_socket_directories").fetchone()
    socket_dsn = unix_socket_dsn(PG_DSN, str(row[0] if row else "").split(",")[0].strip())
    run = uuid.uuid4().hex[:6]
    effects = f"ts_bench_{run}_fx"
    schemas = [f"ts_bench_{run}_{kind}" for kind in ("inproc", "ray1", "ray2")]
    _sql(f"CREATE SCHEMA {effects}")
    _sql(SCHEMA_SQL.format(schema=effects))
    rows: list[tuple[str, str, str]] = []
    try:
        rate, cpu, server_cpu = asyncio.run(in_process(schemas[0], effects))
        rows.append(("in-process AsyncRunner (concurrency 100)", f"{rate:,.0f} runs/s", "-"))
        env = {
            "PYTHONPATH": str(APP_DIR),
            "TS_FLEET_EFFECTS_DSN": socket_dsn,
            "TS_FLEET_EFFECTS_SCHEMA": effects,
        }
        with PrivateNetwork() as network, LocalRayCluster(network, env=env) as cluster:
            cluster.start_head(num_cpus=2)
            cluster.add_node("b", num_cpus=2)
            time.sleep(3)  # let the nodes settle before weighing them
            head = _pss(cluster.processes("head"))
            node = _pss(cluster.processes("b"))
            for actors, schema in ((1, schemas[1]), (2, schemas[2])):
                rate, idle = asyncio.run(on_ray(cluster, socket_dsn, schema, effects, actors))
                rows.append(
                    (
                        f"Ray pool, {actors} worker process{'es' if actors > 1 else ''}",
                        f"{rate:,.0f} runs/s",
                        f"{_mib(idle)} for the actor{'s' if actors > 1 else ''}",
                    )
                )
        rows.append(("idle Ray head node (GCS, raylet, agents)", "-", _mib(head)))
        rows.append(("idle Ray worker node (raylet, agents)", "-", _mib(node)))
    finally:
        for schema in [effects, *schemas]:
            _sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    print(f"\n{RUNS} durable agent runs on PostgreSQL, {CONCURRENCY} at once per process\n")
    print(f"| {'setup':<44} | {'throughput':>12} | footprint (PSS) |")
    print(f"|{'-' * 46}|{'-' * 14}|-----------------|")
    for name, rate, size in rows:
        print(f"| {name:<44} | {rate:>12} | {size} |")
    cores = os.cpu_count() or 1
    print(
        f"\nCPU per run on the in-process runner: {cpu:.2f} ms in the runner's process, "
        f"{server_cpu:.2f} ms in PostgreSQL; {cores} cores can finish at most "
        f"{cores * 1000 / (cpu + server_cpu):,.0f} such runs/s"
    )


if __name__ == "__main__":
    main()
