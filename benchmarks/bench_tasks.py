"""The task server under load: 2,000 submitted runs of a small agent on the fake model, with 100
SSE followers attached, against a real uvicorn process on a SQLite store.

The 32 submitters speak plain HTTP/1.1 over keep-alive connections (:class:`_Submitter`), so
the load client costs a fraction of the server it measures; the followers, the ``/healthz``
polls and the listing use httpx.

Reports throughput (runs finished per second, first submit to last finish: the latest record's
``finished_at`` or the last follower's final frame, whichever is later — the listing that reads
the records back afterwards is not timed), submit-to-done latency p50/p99 (from the records' own
``created_at``/``finished_at``), the server's peak memory (VmHWM), and — as the floor — the same
runs invoked directly with ``asyncio`` on the same kind of store with the same concurrency (no
HTTP, no run records, no followers), so the ratio is what the durable task layer costs on top of
running the graph. CPU seconds per run are counted too — the server process's (its event loop
and its SQLite thread), the load client's, and the floor's — because on a shared 2-core machine
the wall-time ratio moves with whatever else runs, and the client competes with the server.

A third row runs the same load on an in-process ``AsyncRunner`` (run records and followers, no
HTTP): the server minus it is what the HTTP layer costs.

``TS_BENCH_QUICK=1``: 200 runs, 10 followers. ``TS_BENCH_COUNT=1`` also counts, on both sides,
the SQLite transactions (``BEGIN`` plus writes outside one) and trips to the database (units of
work, each ending in one ``commit()`` call): deterministic where the times are not, at the price of
a trace callback per statement (so the CPU numbers of a counting run are not comparable).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

QUICK = os.environ.get("TS_BENCH_QUICK") == "1"
RUNS = 200 if QUICK else 2000
FOLLOWERS = 10 if QUICK else 100
CONCURRENCY = 32
SUBMITTERS = 32


COUNT = os.environ.get("TS_BENCH_COUNT") == "1"
#: ``TS_BENCH_PROFILE=out.prof``: the server runs the load under cProfile (start-up excluded)
#: and writes the stats there when the load ends.
PROFILE = os.environ.get("TS_BENCH_PROFILE")
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "WITH")


def _count_sqlite(counts: dict[str, int]) -> None:
    """Count every SQLite connection's transactions and trips in ``counts`` (TS_BENCH_COUNT)."""
    import sqlite3

    class Counting(sqlite3.Connection):
        def commit(self) -> None:
            counts["trips"] += 1
            super().commit()

    def trace(conn: sqlite3.Connection) -> Any:
        def seen(sql: str) -> None:
            counts["statements"] += 1
            head = sql.lstrip()[:7].upper()
            if head.startswith("BEGIN") or (not conn.in_transaction and head.startswith(_WRITES)):
                counts["transactions"] += 1

        return seen

    real = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real(*args, factory=Counting, **kwargs)
        conn.set_trace_callback(trace(conn))
        return conn

    counts.update(trips=0, statements=0, transactions=0)
    sqlite3.connect = connect  # type: ignore[assignment]


def _agent() -> Any:
    from tensorsketch.agents import create_agent
    from tensorsketch.fake import FakeProvider

    return create_agent(FakeProvider(), name="echo")


def serve(db: str, port: int) -> None:
    """The server process: the agent behind task_app on uvicorn."""
    import uvicorn

    from tensorsketch.runs import AsyncRunner
    from tensorsketch.runtime.backends.sqlite import SqliteBackend
    from tensorsketch.serve import task_app

    counts: dict[str, int] = {}
    if COUNT:
        _count_sqlite(counts)
    runner = AsyncRunner(_agent(), backend=SqliteBackend(db), concurrency=CONCURRENCY)
    app = task_app(runner, max_concurrent_runs=CONCURRENCY)
    # A loaded 2-core machine can hold a keep-alive connection idle past uvicorn's default 5 s
    # before the client's next request is read; the server then closes it under the client.
    profile = None
    if PROFILE:
        import cProfile

        profile = cProfile.Profile()
        signal.signal(signal.SIGUSR2, lambda *_: profile.enable())

    def done(*_: Any) -> None:
        Path(db + ".counts").write_text(json.dumps(counts))
        if profile is not None:
            profile.disable()
            profile.dump_stats(PROFILE)

    # The load says when it starts and ends (uvicorn's exit skips atexit).
    signal.signal(signal.SIGUSR1, done)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=60)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _stat_cpu(path: str) -> float:
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` so far (all its threads)."""
    return _stat_cpu(f"/proc/{pid}/stat")


def _loop_cpu_seconds(pid: int) -> float:
    """CPU of process ``pid``'s main thread (the event loop; the rest is SQLite's thread)."""
    return _stat_cpu(f"/proc/{pid}/task/{pid}/stat")


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Submitter:
    """One keep-alive HTTP/1.1 connection that POSTs /tasks with plain asyncio streams.

    httpx spends ~5 ms of CPU per request here, more than the server it measures: on a 2-core
    machine the client then sets the pace, the server holds a few runs at a time and commits
    them one by one. The submitters use this instead (the followers, the polls and the listing
    stay on httpx, as a user's client would be)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(
        self, path: str, body: bytes, headers: dict[str, str]
    ) -> tuple[int, dict[str, str], bytes]:
        if self.writer is None or self.reader is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.writer.write(
            f"POST {path} HTTP/1.1\r\nhost: {self.host}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n{extra}\r\n".encode()
            + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        fields = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                fields[name.strip().lower()] = value.strip()
        data = await self.reader.readexactly(int(fields.get("content-length", "0")))
        if fields.get("connection", "").lower() == "close":
            self.writer.close()
            self.reader = self.writer = None
        return status, fields, data

    async def aclose(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _load(url: str, server_pid: int) -> dict[str, Any]:
    import httpx
    from httpx_sse import aconnect_sse

    limits = httpx.Limits(max_connections=SUBMITTERS + FOLLOWERS + 8)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        queue: asyncio.Queue[int] = asyncio.Queue()
        for n in range(RUNS):
            queue.put_nowait(n)
        ids: list[str] = []
        retries = 0
        followed: list[int] = []

        last_frame = 0.0

        async def follow(task_id: str) -> None:
            nonlocal last_frame
            frames = 0
            async with aconnect_sse(client, "GET", f"/tasks/{task_id}/events") as sse:
                async for _ in sse.aiter_sse():
                    frames += 1
            last_frame = max(last_frame, time.time())
            followed.append(frames)

        followers: list[asyncio.Task[None]] = []

        host, port = url.removeprefix("http://").rsplit(":", 1)

        async def submitter() -> None:
            nonlocal retries
            connection = _Submitter(host, int(port))
            try:
                while not queue.empty():
                    n = queue.get_nowait()
                    body = json.dumps({"input": {"query": f"question {n}"}}).encode()
                    while True:
                        status, fields, data = await connection.post(
                            "/tasks", body, {"Idempotency-Key": f"load-{n}"}
                        )
                        if status != 503:
                            break
                        retries += 1
                        await asyncio.sleep(float(fields.get("retry-after", "1")) / 10)
                    assert status in (200, 202), (status, data[:200])
                    task_id = json.loads(data)["id"]
                    ids.append(task_id)
                    if len(followers) < FOLLOWERS and n % (RUNS // FOLLOWERS) == 0:
                        followers.append(asyncio.create_task(follow(task_id)))
            finally:
                await connection.aclose()

        started = time.time()  # the records' times are the same machine's wall clock
        await asyncio.gather(*(submitter() for _ in range(SUBMITTERS)))
        submitted = time.time() - started
        while True:
            health = (await client.get("/healthz")).json()
            finished = sum(health["runs"].get(s, 0) for s in ("succeeded", "failed", "cancelled"))
            if finished >= RUNS:
                break
            await asyncio.sleep(0.2)
        await asyncio.gather(*followers)
        load_cpu, server_cpu = _own_cpu_seconds(), _cpu_seconds(server_pid)
        server_loop_cpu = _loop_cpu_seconds(server_pid)
        os.kill(server_pid, signal.SIGUSR1)
        latencies = []
        finished_at = 0.0
        cursor = None
        statuses: dict[str, int] = {}
        while True:
            params: dict[str, Any] = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
            page = (await client.get("/tasks", params=params)).json()
            for task in page["tasks"]:
                statuses[task["status"]] = statuses.get(task["status"], 0) + 1
                latencies.append(task["finished_at"] - task["created_at"])
                finished_at = max(finished_at, task["finished_at"])
            if not (cursor := page["next_cursor"]):
                break
        return {
            "wall": max(finished_at, last_frame) - started,
            "load_cpu": load_cpu,
            "server_cpu": server_cpu,
            "server_loop_cpu": server_loop_cpu,
            "submitted_s": submitted,
            "statuses": statuses,
            "latencies": sorted(latencies),
            "retries": retries,
            "followers": len(followed),
            "frames": sum(followed),
        }


async def _floor(db: str, counts: dict[str, int]) -> tuple[float, float, float]:
    """The same runs invoked directly: a semaphore of CONCURRENCY, one thread per run."""
    from tensorsketch.runtime.backends.sqlite import SqliteBackend

    if COUNT:
        _count_sqlite(counts)

    agent = _agent()
    backend = SqliteBackend(db)
    slots = asyncio.Semaphore(CONCURRENCY)

    async def one(n: int) -> None:
        async with slots:
            async for _ in agent.stream(
                {"query": f"question {n}"}, thread_id=f"floor-{n}", backend=backend
            ):
                pass

    pid = os.getpid()
    started, cpu, loop = time.perf_counter(), _own_cpu_seconds(), _loop_cpu_seconds(pid)
    await asyncio.gather(*(one(n) for n in range(RUNS)))
    took, cpu = time.perf_counter() - started, _own_cpu_seconds() - cpu
    loop = _loop_cpu_seconds(pid) - loop
    await backend.aclose()
    return took, cpu, loop


async def _in_process(db: str) -> tuple[float, float, float]:
    """The same load on an in-process :class:`AsyncRunner` (records, followers, no HTTP):
    the server minus this is what the HTTP layer costs."""
    from tensorsketch.runs import AsyncRunner
    from tensorsketch.runtime.backends.sqlite import SqliteBackend

    runner = AsyncRunner(_agent(), backend=SqliteBackend(db), concurrency=CONCURRENCY)
    await runner.start()
    queue = list(range(RUNS))
    followers: list[asyncio.Task[None]] = []

    async def follow(run_id: str) -> None:
        async for _ in runner.events(run_id):
            pass
        await runner.get(run_id)  # the SSE stream's closing `task` frame reads the record

    async def submitter() -> None:
        while queue:
            n = queue.pop()
            record, _ = await runner.enqueue(
                input={"query": f"question {n}"}, idempotency_key=f"load-{n}"
            )
            if len(followers) < FOLLOWERS and n % (RUNS // FOLLOWERS) == 0:
                followers.append(asyncio.create_task(follow(record.run_id)))

    pid = os.getpid()
    started, cpu, loop = time.perf_counter(), _own_cpu_seconds(), _loop_cpu_seconds(pid)
    await asyncio.gather(*(submitter() for _ in range(SUBMITTERS)))
    while True:
        counts = (await runner.health())["runs"]
        if sum(counts.get(s, 0) for s in ("succeeded", "failed", "cancelled")) >= RUNS:
            break
        await asyncio.sleep(0.2)
    await asyncio.gather(*followers)
    took, cpu = time.perf_counter() - started, _own_cpu_seconds() - cpu
    loop = _loop_cpu_seconds(pid) - loop
    await runner.aclose()
    return took, cpu, loop


def _split(total: float, loop: float) -> str:
    per = 1000 / RUNS
    return f"{total * per:.2f} ms ({loop * per:.2f} + {(total - loop) * per:.2f})"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]))
        return
    import httpx

    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "tasks.db")
        port = _port()
        server = subprocess.Popen([sys.executable, __file__, "--serve", db, str(port)])
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(300):
                try:
                    if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            if PROFILE:
                os.kill(server.pid, signal.SIGUSR2)
            server_cpu, client_cpu = _cpu_seconds(server.pid), _own_cpu_seconds()
            loop_cpu = _loop_cpu_seconds(server.pid)
            try:
                result = asyncio.run(_load(url, server.pid))
            except Exception:
                print(f"the load failed; the server's exit code: {server.poll()}", file=sys.stderr)
                raise
            wall = result["wall"]
            # CPU up to the end of the load, before the records are listed back.
            server_cpu = result["server_cpu"] - server_cpu
            loop_cpu = result["server_loop_cpu"] - loop_cpu
            client_cpu = result["load_cpu"] - client_cpu
            peak = _peak_rss_mb(server.pid)
        finally:
            server.terminate()
            server.wait(60)
        counted = Path(db + ".counts")
        server_counts = json.loads(counted.read_text()) if counted.exists() else {}
        floor_counts: dict[str, int] = {}
        floor, floor_cpu, floor_loop = asyncio.run(
            _floor(str(Path(tmp) / "floor.db"), floor_counts)
        )
        inner, inner_cpu, inner_loop = asyncio.run(_in_process(str(Path(tmp) / "runner.db")))
    lat = result["latencies"]
    p50 = statistics.median(lat)
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    rows = [
        ("runs", f"{RUNS} ({json.dumps(result['statuses'])})"),
        ("SSE followers", f"{result['followers']} ({result['frames']} frames)"),
        ("503 retries while submitting", str(result["retries"])),
        ("wall time, first submit to last finish", f"{wall:.2f} s"),
        ("throughput", f"{RUNS / wall:.0f} runs/s"),
        ("all submitted after", f"{result['submitted_s']:.2f} s"),
        ("submit-to-done p50 / p99", f"{p50 * 1000:.0f} ms / {p99 * 1000:.0f} ms"),
        ("server peak memory (VmHWM)", f"{peak:.0f} MB"),
        ("floor: agent.stream, no HTTP", f"{floor:.2f} s ({RUNS / floor:.0f} runs/s)"),
        ("task server / floor (time)", f"{wall / floor:.2f}x"),
        ("server CPU per run (event loop + rest)", _split(server_cpu, loop_cpu)),
        ("load client CPU per run", f"{client_cpu / RUNS * 1000:.2f} ms"),
        ("floor CPU per run (event loop + rest)", _split(floor_cpu, floor_loop)),
        ("server CPU / floor CPU", f"{server_cpu / floor_cpu:.2f}x"),
        ("in-process AsyncRunner, same load", f"{inner:.2f} s ({RUNS / inner:.0f} runs/s)"),
        ("in-process runner CPU per run", _split(inner_cpu, inner_loop)),
        ("server CPU / in-process runner CPU", f"{server_cpu / inner_cpu:.2f}x"),
    ]
    for what in ("transactions", "trips", "statements") if COUNT else ():
        server_n, floor_n = server_counts.get(what, 0) / RUNS, floor_counts[what] / RUNS
        rows.append((f"SQLite {what} per run, server / floor", f"{server_n:.2f} / {floor_n:.2f}"))
    width = max(len(k) for k, _ in rows)
    print(f"\n## Task server under load ({'quick' if QUICK else 'full'})\n")
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
