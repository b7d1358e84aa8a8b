"""Round trips of one durable agent turn on PostgreSQL: how many transactions, and what for.

The workload is #49's: a scripted model asks for one tool call, the tool's result is
journaled, the model answers — ``agent.invoke(thread_id=..., backend=PostgresBackend)`` on a
new thread each run, one run at a time. Two independent counters:

* **the server's**: ``xact_commit + xact_rollback`` of the benchmark's own database in
  ``pg_stat_database``. The counters are flushed when a session ends, so each measurement
  opens a backend, runs ``n`` invokes and closes it; two measurements (``n`` = ``WARM`` and
  ``WARM + RUNS``) are subtracted, which cancels the backend's set-up and the stats query;
* **the client's**: every unit of work the backend sends (``PostgresBackend.submit``: one
  transaction each) and its statements, labelled by what the unit is for.

Run it on a tree to count that tree: ``uv run python benchmarks/bench_durable_round_trips.py``
(``--runs``, ``--dsn``; PostgreSQL at ``TS_TEST_POSTGRES_DSN`` or 127.0.0.1:5432). Run the
same file from another checkout (``uv run --directory OTHER python THIS_FILE``) to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import time
import uuid
from typing import Any

import psycopg

DEFAULT_DSN = os.environ.get(
    "TS_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
WARM = 10


def _agent() -> tuple[Any, dict[str, int]]:
    from tensorsketch import ChatProvider, Completion, Usage, create_agent, tool
    from tensorsketch.messages import ToolCall, assistant

    calls = {"tool": 0}
    usage = Usage(input_tokens=50, output_tokens=10)

    class Scripted(ChatProvider):
        model = "scripted"
        provider_name = "scripted"

        async def complete(self, messages: Any, **_: Any) -> Completion:
            if not any(getattr(m, "role", None) == "tool" for m in messages):
                call = ToolCall(id="c1", name="add", args={"a": 1, "b": 2})
                return Completion(message=assistant(tool_calls=[call]), model="s", usage=usage)
            return Completion(message=assistant("done"), model="s", usage=usage)

    @tool
    async def add(a: int, b: int) -> int:
        """Add two numbers."""
        calls["tool"] += 1
        return a + b

    return create_agent(Scripted(), tools=[add]), calls


def _label(sql: str, params: Any) -> str:
    """What a statement is for, from its table, verb and (for the journal) its key."""
    text = " ".join(sql.split())
    verb = text.split()[0].upper()
    table = next((w.split(".")[-1] for w in text.split() if "tensorsketch_" in w), "?")
    table = table.replace("tensorsketch_", "").strip('"(')
    if table == "effects" and verb in ("SELECT", "INSERT"):
        rows = params if isinstance(params, list) else [params]
        keys = [str(r[1]) for r in rows if isinstance(r, tuple) and len(r) > 1]
        kinds = sorted({"intent" if k.startswith("intent:") else "result" for k in keys})
        what = "lookup" if verb == "SELECT" else "+".join(kinds)
        return f"journal {what}"
    if text.startswith("WITH f AS"):
        return "fence"
    return f"{verb.lower()} {table}"


async def _measure(dsn: str, schema: str, runs: int) -> dict[str, Any]:
    from tensorsketch.runtime.backends.postgres import PostgresBackend

    backend = PostgresBackend(dsn, schema=schema)
    agent, calls = _agent()
    units: list[list[str]] = []
    submit = backend.submit

    async def counted(queries: Any, **kw: Any) -> Any:
        units.append([_label(q.sql, q.params) for q in queries])
        return await submit(queries, **kw)

    backend.submit = counted  # type: ignore[method-assign]
    started = time.perf_counter()
    for _ in range(runs):
        out = await agent.invoke({"query": "go"}, thread_id=uuid.uuid4().hex, backend=backend)
        assert out.output == "done", out
    elapsed = time.perf_counter() - started
    await backend.aclose()
    assert calls["tool"] == runs, calls  # every tool call ran exactly once
    return {"units": units, "elapsed": elapsed}


def _server_xacts(admin: psycopg.Connection[Any], db: str) -> int:
    admin.execute("SELECT pg_stat_clear_snapshot()")
    row = admin.execute(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s", (db,)
    ).fetchone()
    return int(row[0]) if row else 0


def _settled(admin: psycopg.Connection[Any], db: str) -> int:
    """The counter once every ended session's stats have arrived."""
    last, same = -1, 0
    while same < 3:
        time.sleep(0.3)
        now = _server_xacts(admin, db)
        same = same + 1 if now == last else 0
        last = now
    return last


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    args = parser.parse_args()
    db = f"bench_rt_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(args.dsn, autocommit=True)
    admin.execute(f'CREATE DATABASE "{db}"')
    dsn = f"{args.dsn.rsplit('/', 1)[0]}/{db}"
    try:
        await _measure(dsn, "bench", WARM)  # tables, prepared statements
        base = _settled(admin, db)
        short = await _measure(dsn, "bench", WARM)
        mid = _settled(admin, db)
        long = await _measure(dsn, "bench", WARM + args.runs)
        end = _settled(admin, db)
        server = ((end - mid) - (mid - base)) / args.runs
        units = long["units"][len(short["units"]) :]
        per_run = collections.Counter(" + ".join(u) for u in units)
        statements = sum(len(u) for u in units)
        result = {
            "runs": args.runs,
            "server_transactions_per_run": round(server, 2),
            "client_units_per_run": round(len(units) / args.runs, 2),
            "statements_per_run": round(statements / args.runs, 2),
            "runs_per_s_sequential": round((WARM + args.runs) / long["elapsed"], 1),
            "units": {k: round(v / args.runs, 2) for k, v in per_run.most_common()},
        }
        print(json.dumps(result, indent=2))
    finally:
        admin.execute(f'DROP DATABASE "{db}" WITH (FORCE)')
        admin.close()


if __name__ == "__main__":
    asyncio.run(main())
