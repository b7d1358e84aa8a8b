"""Memory store benchmarks: TensorSketch's stores beside LangGraph's on one put/get/search
workload, and exact-search latency as a namespace grows.

1. In memory, semantic: ``InMemoryStore`` with ``HashingEmbedder`` beside LangGraph's
   ``InMemoryStore`` indexed with the *same* embedding function (so both pay the same for
   embedding and only the stores differ): ``N`` puts one at a time, ``N`` gets, and ``Q``
   searches (top 10) over the namespace. Neither has numpy here, so both cosines are Python.
2. SQLite file, no index: ``SqliteStore`` beside LangGraph's ``AsyncSqliteStore``
   (``langgraph-checkpoint-sqlite``): ``N`` puts, ``N`` gets.
3. PostgreSQL, no index: ``PostgresStore`` beside LangGraph's ``AsyncPostgresStore``
   (``langgraph-checkpoint-postgres``), each in a database of its own made for the run on
   ``TS_TEST_POSTGRES_DSN``'s server: ``N`` puts, ``N`` gets (skipped, and said so, where
   PostgreSQL is not reachable).
4. Exact search latency of ``InMemoryStore`` and ``SqliteStore`` at 10,000 items (and 100,000
   without ``--quick``): one query's time, top 10.

Every workload checks its results (each get finds its item, the top search hit is the item the
query was made from), runs in rounds alternating between the implementations, and reports the
best round, after an untimed warm-up of both. Run ``python benchmarks/bench_memory.py``
(``--quick`` for a smoke run) with the benchmarks' interpreter (``nox -s bench``), where
LangGraph is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
from langgraph.store.memory import InMemoryStore as LgInMemoryStore
from langgraph.store.postgres.aio import AsyncPostgresStore as LgPostgresStore
from langgraph.store.sqlite.aio import AsyncSqliteStore as LgSqliteStore
from psycopg import sql

from tensorsketch.memory import HashingEmbedder, InMemoryStore, PutRequest
from tensorsketch.memory.postgres import PostgresStore
from tensorsketch.memory.sqlite import SqliteStore

QUICK = os.environ.get("TS_BENCH_QUICK") == "1"
PG_DSN = os.environ.get("TS_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
DIMS = 256
WORDS = [
    "tea",
    "coffee",
    "dark",
    "mode",
    "font",
    "editor",
    "flight",
    "window",
    "seat",
    "hotel",
    "station",
    "python",
    "review",
    "dinner",
    "vegetarian",
    "peanuts",
    "allergy",
    "morning",
    "evening",
    "music",
    "jazz",
    "running",
    "bike",
    "train",
    "lisbon",
    "berlin",
    "budget",
    "invoice",
    "meeting",
    "calendar",
    "reminder",
    "birthday",
    "garden",
    "dog",
    "cat",
    "book",
    "novel",
    "chess",
]


def _text(i: int) -> str:
    return " ".join(WORDS[(i * k + k) % len(WORDS)] for k in (1, 3, 7, 11, 13)) + f" item{i}"


EMBEDDER = HashingEmbedder(DIMS)


def _embed_sync(texts: list[str]) -> list[list[float]]:
    return [EMBEDDER.embed_one(t) for t in texts]


async def _timed(fn: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def ts_memory_workload(n: int, q: int) -> dict[str, float]:
    store = InMemoryStore(embedder=EMBEDDER, index={("bench",): ["text"]})
    ns = ("bench", "u1")

    async def puts() -> None:
        for i in range(n):
            await store.put(ns, f"k{i}", {"text": _text(i)})

    async def gets() -> None:
        for i in range(n):
            item = await store.get(ns, f"k{i}")
            assert item is not None and item.value["text"] == _text(i)

    async def searches() -> None:
        for i in range(q):
            hits = await store.search(("bench",), _text(i), limit=10)
            assert hits[0].key == f"k{i}", (hits[0].key, i)

    return {"put": await _timed(puts), "get": await _timed(gets), "search": await _timed(searches)}


async def lg_memory_workload(n: int, q: int) -> dict[str, float]:
    store = LgInMemoryStore(index={"dims": DIMS, "embed": _embed_sync, "fields": ["text"]})
    ns = ("bench", "u1")

    async def puts() -> None:
        for i in range(n):
            await store.aput(ns, f"k{i}", {"text": _text(i)})

    async def gets() -> None:
        for i in range(n):
            item = await store.aget(ns, f"k{i}")
            assert item is not None and item.value["text"] == _text(i)

    async def searches() -> None:
        for i in range(q):
            hits = await store.asearch(("bench",), query=_text(i), limit=10)
            assert hits[0].key == f"k{i}", (hits[0].key, i)

    return {"put": await _timed(puts), "get": await _timed(gets), "search": await _timed(searches)}


async def ts_sqlite_workload(n: int, path: Path) -> dict[str, float]:
    store = SqliteStore(path)
    ns = ("bench", "u1")

    async def puts() -> None:
        for i in range(n):
            await store.put(ns, f"k{i}", {"text": _text(i)})

    async def gets() -> None:
        for i in range(n):
            item = await store.get(ns, f"k{i}")
            assert item is not None and item.value["text"] == _text(i)

    result = {"put": await _timed(puts), "get": await _timed(gets)}
    await store.aclose()
    return result


async def lg_sqlite_workload(n: int, path: Path) -> dict[str, float]:
    async with LgSqliteStore.from_conn_string(str(path)) as store:
        await store.setup()
        ns = ("bench", "u1")

        async def puts() -> None:
            for i in range(n):
                await store.aput(ns, f"k{i}", {"text": _text(i)})

        async def gets() -> None:
            for i in range(n):
                item = await store.aget(ns, f"k{i}")
                assert item is not None and item.value["text"] == _text(i)

        return {"put": await _timed(puts), "get": await _timed(gets)}


async def ts_postgres_workload(n: int, dsn: str) -> dict[str, float]:
    store = PostgresStore(dsn)
    ns = ("bench", "u1")
    await store.put(("warm",), "up", {"text": "x"})  # the pool opens and the table exists

    async def puts() -> None:
        for i in range(n):
            await store.put(ns, f"k{i}", {"text": _text(i)})

    async def gets() -> None:
        for i in range(n):
            item = await store.get(ns, f"k{i}")
            assert item is not None and item.value["text"] == _text(i)

    result = {"put": await _timed(puts), "get": await _timed(gets)}
    await store.aclose()
    return result


async def lg_postgres_workload(n: int, dsn: str) -> dict[str, float]:
    async with LgPostgresStore.from_conn_string(dsn) as store:
        await store.setup()
        ns = ("bench", "u1")
        await store.aput(("warm",), "up", {"text": "x"})

        async def puts() -> None:
            for i in range(n):
                await store.aput(ns, f"k{i}", {"text": _text(i)})

        async def gets() -> None:
            for i in range(n):
                item = await store.aget(ns, f"k{i}")
                assert item is not None and item.value["text"] == _text(i)

        return {"put": await _timed(puts), "get": await _timed(gets)}


def _database(name: str, *, drop: bool = False) -> str | None:
    """Create (or drop) database ``name`` on ``PG_DSN``'s server; ``None`` if unreachable."""
    try:
        with psycopg.connect(PG_DSN, autocommit=True, connect_timeout=5) as admin:
            if drop:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
            else:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.OperationalError:
        return None
    return f"{PG_DSN.rsplit('/', 1)[0]}/{name}"


async def search_latency(size: int) -> dict[str, float]:
    """One top-10 query over ``size`` items, in memory and in SQLite (best of 3)."""
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, store in (
            ("memory", InMemoryStore(embedder=EMBEDDER)),
            ("sqlite", SqliteStore(Path(tmp) / "s.db", embedder=EMBEDDER)),
        ):
            for start in range(0, size, 1000):
                await store.put_many(
                    [
                        PutRequest(("big",), f"k{i}", {"text": _text(i)})
                        for i in range(start, min(size, start + 1000))
                    ]
                )
            best = float("inf")
            for _ in range(3):
                began = time.perf_counter()
                hits = await store.search(("big",), _text(7), limit=10)
                best = min(best, time.perf_counter() - began)
                assert hits[0].key == "k7"
            out[label] = best
            await store.aclose()
    return out


def _best(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {op: min(r[op] for r in rounds) for op in rounds[0]}


async def main(quick: bool) -> None:
    n, q, rounds = (300, 10, 1) if quick else (2000, 50, 3)
    mem_ts, mem_lg, sql_ts, sql_lg, pg_ts, pg_lg = [], [], [], [], [], []
    stamp = f"{os.getpid()}_{int(time.time())}"
    with tempfile.TemporaryDirectory() as tmp:
        await ts_memory_workload(50, 2)  # warm up both (imports, first-call caches): not timed
        await lg_memory_workload(50, 2)
        for r in range(rounds):
            mem_ts.append(await ts_memory_workload(n, q))
            mem_lg.append(await lg_memory_workload(n, q))
            sql_ts.append(await ts_sqlite_workload(n, Path(tmp) / f"ts{r}.db"))
            sql_lg.append(await lg_sqlite_workload(n, Path(tmp) / f"lg{r}.db"))
            for side, workload, out in (
                ("ts", ts_postgres_workload, pg_ts),
                ("lg", lg_postgres_workload, pg_lg),
            ):
                name = f"bench_memory_{side}{r}_{stamp}"
                dsn = _database(name)
                if dsn is None:
                    continue
                try:
                    out.append(await workload(n, dsn))
                finally:
                    _database(name, drop=True)
    print(f"## Memory stores: {n} puts, {n} gets, {q} searches (best of {rounds} rounds)\n")
    print("| store | op | TensorSketch | LangGraph | LangGraph / TensorSketch |")
    print("|---|---|---:|---:|---:|")
    pairs = [("in memory", mem_ts, mem_lg), ("SQLite", sql_ts, sql_lg)]
    if pg_ts and pg_lg:
        pairs.append(("PostgreSQL", pg_ts, pg_lg))
    for label, ts, lg in pairs:
        ts_best, lg_best = _best(ts), _best(lg)
        for op, ts_s in ts_best.items():
            per = n if op != "search" else q
            ts_us, lg_us = ts_s / per * 1e6, lg_best[op] / per * 1e6
            print(f"| {label} | {op} | {ts_us:,.0f} µs | {lg_us:,.0f} µs | {lg_us / ts_us:.2f}x |")
    if not (pg_ts and pg_lg):
        print(f"\nPostgreSQL not measured: no server answered at {PG_DSN}.")
    print("\n## Exact search latency, one top-10 query\n")
    print("| items | InMemoryStore | SqliteStore |")
    print("|---:|---:|---:|")
    for size in (10_000,) if quick else (10_000, 100_000):
        lat = await search_latency(size)
        print(f"| {size:,} | {lat['memory'] * 1e3:,.0f} ms | {lat['sqlite'] * 1e3:,.0f} ms |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer items and rounds")
    args = parser.parse_args()
    asyncio.run(main(args.quick or QUICK))
