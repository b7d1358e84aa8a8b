"""Double-texting under load: 1,000 threads, 5 inputs each, POSTed racing to a real uvicorn
task server, once per policy (``reject``, ``enqueue``, ``interrupt``, ``rollback``), each on
a fresh store; then every thread's runs and final state are checked against what the policy
promises (``tensorsketch.testing.runs.check_double_texting``: no two runs of a thread at
once; reject/enqueue run every accepted input in order; interrupt keeps a stopped run's
prefix, rollback none).

Each input ticks three supersteps of ``multitask_graph`` (a short sleep each), so later
inputs land while the thread's run is in flight. The five inputs of a thread go out together
(``asyncio.gather``), and up to ``IN_FLIGHT`` requests are open at once over all threads.

``--store sqlite`` (default), ``--store postgres`` (127.0.0.1:5432, a private schema,
dropped after) or ``--store redis`` (127.0.0.1:6379, a private key prefix, deleted after).
``TS_BENCH_QUICK=1``: 100 threads; ``--threads N`` any other count.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

QUICK = os.environ.get("TS_BENCH_QUICK") == "1"
THREADS = 100 if QUICK else 1000
INPUTS = 5
IN_FLIGHT = 64
CONCURRENCY = 32
PAUSE = 0.02
POLICIES = ("reject", "enqueue", "interrupt", "rollback")
PG_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_URL = "redis://127.0.0.1:6379/0"


def _backend(store: str, where: str) -> Any:
    if store == "postgres":
        from tensorsketch.runtime.backends.postgres import PostgresBackend

        return PostgresBackend(PG_DSN, schema=where)
    if store == "redis":
        from tensorsketch.runtime.backends.redis import RedisBackend

        return RedisBackend(REDIS_URL, prefix=where)
    from tensorsketch.runtime.backends.sqlite import SqliteBackend

    return SqliteBackend(where)


def serve(store: str, where: str, port: int) -> None:
    """The server process: ``multitask_graph`` behind task_app on uvicorn."""
    import uvicorn

    from tensorsketch.runs import AsyncRunner
    from tensorsketch.serve import task_app
    from tensorsketch.testing.runs import multitask_graph

    runner = AsyncRunner(
        multitask_graph(PAUSE),
        backend=_backend(store, where),
        concurrency=CONCURRENCY,
        poll_interval=0.05,
    )
    app = task_app(runner, max_concurrent_runs=CONCURRENCY, drain_timeout=5.0)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=60)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _load(url: str, policy: str) -> dict[str, Any]:
    import httpx

    from tensorsketch.testing.runs import check_double_texting, ticks_of

    limits = httpx.Limits(max_connections=IN_FLIGHT + 8)
    gate = asyncio.Semaphore(IN_FLIGHT)
    answers: dict[int, int] = {}
    retries = 0
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:

        async def post(thread: str, tag: str) -> None:
            nonlocal retries
            body = {"input": {"tag": tag}, "thread_id": thread, "multitask_strategy": policy}
            async with gate:
                while True:
                    answer = await client.post("/tasks", json=body)
                    if answer.status_code != 503:
                        break
                    retries += 1
                    await asyncio.sleep(0.1)
            answers[answer.status_code] = answers.get(answer.status_code, 0) + 1

        threads = [f"t{n}" for n in range(THREADS)]
        started = time.perf_counter()
        await asyncio.gather(*(post(t, tag) for t in threads for tag in "abcde"[:INPUTS]))
        submitted = time.perf_counter() - started
        accepted = answers.get(202, 0)
        while True:
            health = (await client.get("/healthz")).json()["runs"]
            if sum(health.get(s, 0) for s in ("succeeded", "failed", "cancelled")) >= accepted:
                break
            await asyncio.sleep(0.25)
        drained = time.perf_counter() - started
        statuses: dict[str, int] = {}
        broken: list[str] = []
        raced: list[str] = []
        for thread in threads:
            page = await client.get("/tasks", params={"thread_id": thread, "limit": 50})
            runs = page.json()["tasks"]
            for run in runs:
                statuses[run["status"]] = statuses.get(run["status"], 0) + 1
            try:
                assert runs, "no run at all"
                if policy != "reject":
                    assert len(runs) == INPUTS, f"{len(runs)} runs of {INPUTS} inputs"
                last = max(runs, key=lambda r: (r["created_at"], r["id"]))
                check_double_texting(policy, runs, ticks_of(last["output"]))
            except AssertionError as exc:
                if _ended_before_the_stop(policy, runs):
                    raced.append(thread)
                    continue
                fields = (
                    "id",
                    "status",
                    "input",
                    "created_at",
                    "started_at",
                    "finished_at",
                    "stop_requested",
                    "stopped_by",
                    "error",
                    "attempts",
                )
                shown = [{k: r.get(k) for k in fields} for r in runs]
                last = max(runs, key=lambda r: (r["created_at"], r["id"])) if runs else {}
                ticks = ticks_of(last.get("output"))
                broken.append(f"{thread}: {exc}\n    ticks {ticks}\n    runs {json.dumps(shown)}")
    return {
        "answers": answers,
        "retries": retries,
        "statuses": statuses,
        "submitted_s": submitted,
        "drained_s": drained,
        "broken": broken,
        "raced": raced,
    }


def _ended_before_the_stop(policy: str, runs: list[dict[str, Any]]) -> bool:
    """Whether the only thing ``check_double_texting`` refused is a run that succeeded after
    the next input's record was created but *before* that submit's stop request reached it:
    its record carries no ``stop_requested`` (a run that had one ends ``cancelled``), and
    the thread's ticks are still every succeeded run's three, in order, with nothing of a
    stopped run left behind under rollback. The stop is asked right after the new run is
    stored, so a run finishing in between is finished, not stopped; the checker's proxy
    (``finished_at <= next created_at``) cannot see that moment."""
    from tensorsketch.testing.runs import check_double_texting, ticks_of

    if policy not in ("interrupt", "rollback"):
        return False
    ordered = sorted(runs, key=lambda r: (r["created_at"], r["id"]))
    late = [
        r
        for r, nxt in itertools.pairwise(ordered)
        if r["status"] == "succeeded" and r["finished_at"] > nxt["created_at"]
    ]
    if not late or any(r.get("stop_requested") for r in late):
        return False
    # Seen as if those runs' successors had come a moment later: the rest must hold.
    shifted = [
        {**nxt, "created_at": max(nxt["created_at"], r["finished_at"])} if r in late else nxt
        for r, nxt in itertools.pairwise(ordered)
    ]
    last = max(runs, key=lambda r: (r["created_at"], r["id"]))
    try:
        check_double_texting(policy, [ordered[0], *shifted], ticks_of(last["output"]))
    except AssertionError:
        return False
    return True


def _one(store: str, policy: str, tmp: str) -> dict[str, Any]:
    import httpx

    where = (
        f"bench_dt_{policy}_{uuid.uuid4().hex[:8]}"
        if store in ("postgres", "redis")
        else str(Path(tmp) / f"{policy}.db")
    )
    port = _port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", store, where, str(port)])
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        return asyncio.run(_load(url, policy))
    finally:
        server.terminate()
        server.wait(60)
        if store == "postgres":
            from tensorsketch.testing import postgres_server

            postgres_server.drop_schema(PG_DSN, where)
        elif store == "redis":
            from tensorsketch.testing import redis_server

            redis_server.delete_prefix(REDIS_URL, where)


def main() -> None:
    global THREADS
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("sqlite", "postgres", "redis"), default="sqlite")
    parser.add_argument("--policy", choices=POLICIES, action="append")
    parser.add_argument("--threads", type=int, default=THREADS, help="threads (default 1000)")
    args = parser.parse_args()
    THREADS = args.threads
    print(
        f"\n## Double-texting under load ({args.store}, {THREADS} threads x {INPUTS} inputs, "
        f"{'full' if THREADS == 1000 else 'reduced'})\n"
    )
    print(
        "| policy | answers | runs by status | submit all | all finished | runs/s | "
        "threads keeping the promise | of them: a run ended before the stop reached it |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for policy in args.policy or POLICIES:
            r = _one(args.store, policy, tmp)
            failed |= bool(r["broken"])
            for line in r["broken"][:5]:
                print(f"  {policy} broke its promise on {line}", file=sys.stderr)
            finished = sum(r["statuses"].values())
            kept = THREADS - len(r["broken"])
            print(  # a row as each policy ends: a long run reports what it has
                f"| {policy} | {dict(sorted(r['answers'].items()))} "
                f"| {dict(sorted(r['statuses'].items()))} "
                f"| {r['submitted_s']:.1f} s | {r['drained_s']:.1f} s | "
                f"{finished / r['drained_s']:.0f} | {kept} / {THREADS} | {len(r['raced'])} |",
                flush=True,
            )
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
