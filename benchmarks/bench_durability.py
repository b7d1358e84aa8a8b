"""Durability benchmarks: what a checkpoint costs per superstep, and how many bytes it writes.

1. The 10-node chain with a checkpoint committed at every superstep: TensorSketch's
   ``SqliteBackend`` beside LangGraph's SQLite checkpointers with ``durability="sync"`` (each
   checkpoint is written before the next step starts) — ``SqliteSaver`` driven by the sync
   ``invoke`` (no thread hops: the caller's thread does the I/O) and ``AsyncSqliteSaver`` driven
   by ``ainvoke`` (like TensorSketch, it keeps the event loop free) — all on a file in WAL mode,
   at SQLite's default ``synchronous=FULL`` (an fsync per commit) and at ``NORMAL``. The same
   chain without any checkpointer gives each framework's floor, so the table also shows the
   *overhead* a checkpoint adds to a step.
2. The same chain on TensorSketch's PostgreSQL and Redis backends (the servers on 127.0.0.1).
3. Bytes written per superstep for a state whose message list starts at 10,000 messages and
   grows by one per step: TensorSketch's stored payloads beside LangGraph's checkpoint and
   write rows, with LangGraph's default reducer channel and with its beta ``DeltaChannel``.
4. Long threads (2,000 and 20,000 supersteps): reading the latest state back, and the bytes
   writing them cost; then the 2,000-step read beside LangGraph's with both threads in one
   process, read in random turns (``pair:long-*``), the fairest comparison on a small VM.

5. The durability modes (``--only modes``): the chain with ``durability="sync"``,
   ``"async"`` and ``"exit"`` beside LangGraph's same three modes (``AsyncSqliteSaver``), the
   modes taking turns within one process, and the ratios (a minute or two).

Every measurement runs in a fresh interpreter (``--worker NAME``), in rounds that alternate
between the implementations; a figure is the best round's median. Results are checked (the
chain must count to 10, the message list must hold every message), so nothing is timed that
did nothing. Run ``python benchmarks/bench_durability.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from chains import CHAIN_LEN, inc, lg_chain, ts_chain

IMPLS = ("ts", "lg", "lga")  # TensorSketch, LangGraph sync, LangGraph async
HISTORY = 10_000
PG_DSN = os.environ.get("TS_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("TS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
QUICK = os.environ.get("TS_BENCH_QUICK") == "1"


def _settings(quick: bool) -> dict[str, int]:
    if quick:
        return {"invokes": 30, "rounds": 1, "steps": 20, "mode_invokes": 10, "mode_rounds": 1}
    return {"invokes": 200, "rounds": 3, "steps": 100, "mode_invokes": 40, "mode_rounds": 2}


def _messages() -> list[dict[str, str]]:
    return [{"role": "user", "content": f"message number {i}"} for i in range(HISTORY)]


# -- TensorSketch -------------------------------------------------------------------------------


def _ts_backend(kind: str, workdir: Path) -> Any:
    if kind == "memory":
        return None
    if kind.startswith("sqlite"):
        from tensorsketch.runtime.backends import SqliteBackend

        level = "NORMAL" if kind.startswith("sqlite-normal") else "FULL"
        threaded = not kind.endswith("-inline")
        return SqliteBackend(workdir / "ts.db", synchronous=level, threaded=threaded)
    if kind == "postgres":
        from tensorsketch.runtime.backends import PostgresBackend

        return PostgresBackend(PG_DSN, schema=f"ts_bench_{uuid.uuid4().hex[:8]}")
    if kind == "redis":
        from tensorsketch.runtime.backends import RedisBackend

        return RedisBackend(REDIS_URL, prefix=f"ts_bench_{uuid.uuid4().hex[:8]}")
    msg = f"unknown backend kind {kind!r}"
    raise ValueError(msg)


async def _ts_cleanup(kind: str, backend: Any) -> None:
    if backend is None:
        return
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


async def _ts_chain_samples(
    kind: str, invokes: int, workdir: Path, durability: str = "sync"
) -> list[float]:
    app = ts_chain()
    backend = _ts_backend(kind, workdir)
    samples: list[float] = []
    try:
        for i in range(invokes + 5):
            thread = f"t{i}" if backend is not None else None
            start = time.perf_counter()
            out = await app.invoke(
                {"x": 0}, thread_id=thread, backend=backend, durability=durability
            )
            took = time.perf_counter() - start
            if out.x != CHAIN_LEN:
                msg = f"the chain counted to {out.x}"
                raise AssertionError(msg)
            if i >= 5:  # warm-up: imports, prepared statements, pool
                samples.append(took / CHAIN_LEN)
        if backend is not None:
            history = await app.aget_history(f"t{invokes}", backend)
            expected = 2 if durability == "exit" else CHAIN_LEN + 1  # exit: input, end
            if len(history) != expected:
                msg = f"expected {expected} checkpoints, found {len(history)}"
                raise AssertionError(msg)
    finally:
        await _ts_cleanup(kind, backend)
    return samples


async def _ts_bytes(steps: int, workdir: Path) -> tuple[list[int], float]:
    from tensorsketch import START, Context, Graph, Node, Reducer, Schema
    from tensorsketch.runtime.backends import SqliteBackend

    class ChatState(Schema):
        messages: Annotated[list[dict[str, str]], Reducer(operator.add)] = []
        turns: int = 0
        limit: int = 0

    class Chat(Node):
        class In(Schema):
            turns: int

        class Out(Schema):
            messages: list[dict[str, str]]
            turns: int

        async def run(self, ctx: Context, inp: Any) -> Any:
            reply = {"role": "assistant", "content": f"reply number {inp.turns}"}
            return self.Out(messages=[reply], turns=inp.turns + 1)

    app = (
        Graph(ChatState)
        .add(Chat)
        .edge(START, "Chat")
        .loop("Chat", until=lambda s: s.turns >= s.limit)
        .compile()
    )
    backend = SqliteBackend(workdir / "bytes.db")
    out = await app.invoke(
        {"messages": _messages(), "limit": steps},
        thread_id="chat",
        backend=backend,
        max_steps=steps + 1,
    )
    if len(out.messages) != HISTORY + steps:
        msg = f"expected {HISTORY + steps} messages, got {len(out.messages)}"
        raise AssertionError(msg)
    stored = await backend.list_checkpoints("chat")
    # The run journals no effects and (not streaming) persists no events: the checkpoint
    # payloads are everything it wrote. The first one is the input snapshot.
    sizes = [len(s.payload) for s in stored[1:]]
    reads = []
    for _ in range(7):
        start = time.perf_counter()
        state = await app.aget_state("chat", backend)
        reads.append(time.perf_counter() - start)
        assert state is not None and len(state.messages) == HISTORY + steps
    await backend.aclose()
    return sizes, statistics.median(reads)


# -- long threads: reading state back --------------------------------------------------------------

LONG_STEPS = 2_000
LONG_OVERWRITE_STEPS = 20_000
MESSAGE_BYTES = 200
READS = 21
PAIRED_READS = 400  # each, in the paired run (both threads in one process)


def _content(i: int) -> str:
    """A 200-character message body, distinct per step."""
    head = f"message {i} "
    return head + "x" * (MESSAGE_BYTES - len(head))


def _ts_long_app(overwrite: bool) -> Any:
    from tensorsketch import START, Context, Graph, Node, Reducer, Schema

    class LongState(Schema):
        messages: Annotated[list[dict[str, str]], Reducer(operator.add)] = []
        note: str = ""
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

    class Overwrite(Node):
        class In(Schema):
            turns: int

        class Out(Schema):
            note: str
            turns: int

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(note=_content(inp.turns), turns=inp.turns + 1)

    node = Overwrite if overwrite else Append
    name = node.__name__
    return (
        Graph(LongState)
        .add(node)
        .edge(START, name)
        .loop(name, until=lambda s: s.turns >= s.limit)
        .compile()
    )


async def _ts_long(shape: str, workdir: Path) -> dict[str, Any]:
    """One long thread on a SQLite file: run it, then time reading its latest state back.

    ``append`` / ``append-20k``: every step appends a 200-byte message (2,000 / 20,000 steps).
    ``overwrite``: the state starts with the 2,000 messages the ``append`` thread ends with,
    then 20,000 steps each overwrite a 200-byte field, so the state stays the size of the
    2,000-step thread's while its history is 10x longer.
    """
    from tensorsketch.runtime.backends import SqliteBackend

    overwrite = shape == "overwrite"
    serializer = _long_serializer(shape)
    steps = {"append": LONG_STEPS, "append-20k": 10 * LONG_STEPS}.get(
        shape.removesuffix("-msgpack"), LONG_OVERWRITE_STEPS
    )
    app = _ts_long_app(overwrite)
    backend = SqliteBackend(workdir / "long.db", serializer=serializer)
    seed: list[dict[str, str]] = []
    if overwrite:
        seed = [{"role": "assistant", "content": _content(i)} for i in range(LONG_STEPS)]
    start = time.perf_counter()
    out = await app.invoke(
        {"messages": seed, "limit": steps}, thread_id="long", backend=backend, max_steps=steps + 1
    )
    run = time.perf_counter() - start
    expected = len(seed) + (0 if overwrite else steps)
    if len(out.messages) != expected or out.turns != steps:
        msg = f"expected {expected} messages after {steps} steps, got {len(out.messages)}"
        raise AssertionError(msg)
    stored = await backend.list_checkpoints("long")
    sizes = [len(s.payload) for s in stored[1:]]  # the first row is the input snapshot
    chain = await backend.read_chain("long")
    # The default backend (statements on its worker thread) and, like LangGraph's
    # SqliteSaver, one that runs them on the caller's thread; the two take turns.
    inline = SqliteBackend(workdir / "long.db", threaded=False, serializer=serializer)
    reads, inline_reads = [], []
    for _ in range(READS):
        for where, times in ((backend, reads), (inline, inline_reads)):
            t0 = time.perf_counter()
            state = await app.aget_state("long", where)
            times.append(time.perf_counter() - t0)
            assert state is not None and state == out
    await backend.aclose()
    await inline.aclose()
    return {
        "bytes": sizes,
        "read": statistics.median(reads),
        "read_inline": statistics.median(inline_reads),
        "expected": expected,
        "run": run,
        "steps": steps,
        "rows": len(stored),
        "chain_rows": len(chain),
        "state_bytes": len(json.dumps(out.model_dump()).encode()),
    }


def _long_serializer(shape: str) -> str:
    """``append-msgpack``: the 2k append thread stored by ``MsgpackSerializer`` (the default);
    the other shapes store JSON (``serializer="json"``), as every shape did before."""
    return "msgpack" if shape.endswith("-msgpack") else "json"


def _ts_long_sync_read(shape: str, workdir: Path, expected: int) -> float:
    """The sync ``get_state`` helper called from plain code (a private event loop per call,
    the statements on the caller's thread), as LangGraph's ``get_state`` is called."""
    from tensorsketch.runtime.backends import SqliteBackend

    app = _ts_long_app(shape == "overwrite")
    backend = SqliteBackend(workdir / "long.db", serializer=_long_serializer(shape))
    reads = []
    for _ in range(READS):
        t0 = time.perf_counter()
        state = app.get_state("long", backend)
        reads.append(time.perf_counter() - t0)
        assert state is not None and len(state.messages) == expected
    return statistics.median(reads)


def _lg_long(workdir: Path) -> dict[str, Any]:
    """LangGraph's reducer channel on the ``append`` shape (2,000 steps, 200-byte messages)."""
    app, config, saver, run = _lg_long_thread(workdir)
    steps = LONG_STEPS
    reads = []
    for _ in range(READS):
        t0 = time.perf_counter()
        snapshot = app.get_state(config)
        reads.append(time.perf_counter() - t0)
        assert len(snapshot.values["messages"]) == steps
    conn = saver.conn
    rows = conn.execute(
        "SELECT length(checkpoint) + coalesce(length(metadata), 0) FROM checkpoints "
        "WHERE thread_id = 'long'"
    ).fetchall()
    (writes,) = conn.execute(
        "SELECT coalesce(sum(length(value)), 0) FROM writes WHERE thread_id = 'long'"
    ).fetchone()
    conn.close()
    total = sum(r[0] for r in rows) + writes
    return {"total": total, "read": statistics.median(reads), "run": run, "steps": steps}


def _lg_long_thread(workdir: Path) -> tuple[Any, Any, Any, float]:
    """The ``append`` thread written by LangGraph: its app, config, saver and run time."""
    from langgraph.graph import END, START, StateGraph

    class LongState(TypedDict):
        messages: Annotated[list[dict[str, str]], operator.add]
        turns: int
        limit: int

    def append(s: Any) -> dict[str, Any]:
        reply = {"role": "assistant", "content": _content(s["turns"])}
        return {"messages": [reply], "turns": s["turns"] + 1}

    graph = StateGraph(LongState)
    graph.add_node("append", append)
    graph.add_edge(START, "append")
    graph.add_conditional_edges("append", lambda s: END if s["turns"] >= s["limit"] else "append")
    saver = _lg_saver(workdir / "lg-long.db", "FULL")
    app = graph.compile(checkpointer=saver)
    steps = LONG_STEPS
    config: Any = {"configurable": {"thread_id": "long"}, "recursion_limit": steps + 10}
    start = time.perf_counter()
    out = app.invoke({"messages": [], "turns": 0, "limit": steps}, config, durability="sync")
    run = time.perf_counter() - start
    if len(out["messages"]) != steps:
        msg = f"expected {steps} messages, got {len(out['messages'])}"
        raise AssertionError(msg)
    return app, config, saver, run


def _paired_long_reads(serializer: str, workdir: Path) -> dict[str, Any]:
    """Both 2,000-step threads in one process, read back in turns: each round reads
    TensorSketch's (the sync ``get_state``) and LangGraph's once, in a random order, so both
    meet the same load and neither always reads right after the other (on a small VM that
    order alone moves a read by 10 %)."""
    import random

    from tensorsketch.runtime.backends import SqliteBackend

    app = _ts_long_app(False)
    writer = SqliteBackend(workdir / "long.db", serializer=serializer)
    asyncio.run(
        app.invoke(
            {"messages": [], "limit": LONG_STEPS},
            thread_id="long",
            backend=writer,
            max_steps=LONG_STEPS + 1,
        )
    )
    asyncio.run(writer.aclose())
    backend = SqliteBackend(workdir / "long.db", serializer=serializer)
    lg_app, config, saver, _ = _lg_long_thread(workdir)

    def ours() -> int:
        state = app.get_state("long", backend)
        return len(state.messages) if state is not None else -1

    def theirs() -> int:
        return len(lg_app.get_state(config).values["messages"])

    ways: dict[str, Callable[[], int]] = {"ts": ours, "lg": theirs}
    times: dict[str, list[float]] = {name: [] for name in ways}
    for read in ways.values():  # warm up; both must hold every message
        assert read() == LONG_STEPS
    order = list(ways)
    rng = random.Random(12)
    for _ in range(PAIRED_READS):
        rng.shuffle(order)
        for name in order:
            t0 = time.perf_counter()
            ways[name]()
            times[name].append(time.perf_counter() - t0)
    saver.conn.close()
    asyncio.run(backend.aclose())
    return {
        "reads": PAIRED_READS,
        **{name: statistics.median(v) for name, v in times.items()},
        **{f"{name}_p25": statistics.quantiles(v, n=4)[0] for name, v in times.items()},
    }


# -- LangGraph ----------------------------------------------------------------------------------


def _lg_saver(path: Path, synchronous: str) -> Any:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()  # WAL, as LangGraph sets it up
    conn.execute(f"PRAGMA synchronous={synchronous}")
    return saver


async def _lg_async_chain_samples(
    kind: str, invokes: int, workdir: Path, durability: str = "sync"
) -> list[float]:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    graph = lg_chain(inc)
    saver: Any = None
    if kind == "memory":
        app = graph.compile()
    else:
        level = "NORMAL" if kind == "sqlite-normal" else "FULL"
        conn = await aiosqlite.connect(workdir / "lg-async.db")
        saver = AsyncSqliteSaver(conn)
        await saver.setup()  # WAL, as LangGraph sets it up
        await conn.execute(f"PRAGMA synchronous={level}")
        app = graph.compile(checkpointer=saver)
    samples: list[float] = []
    for i in range(invokes + 5):
        start = time.perf_counter()
        if saver is None:
            out = await app.ainvoke({"x": 0})
        else:
            config = {"configurable": {"thread_id": f"t{i}"}}
            out = await app.ainvoke({"x": 0}, config, durability=durability)
        took = time.perf_counter() - start
        if out["x"] != CHAIN_LEN:
            msg = f"the chain counted to {out['x']}"
            raise AssertionError(msg)
        if i >= 5:
            samples.append(took / CHAIN_LEN)
    if saver is not None:
        await saver.conn.close()
    return samples


def _lg_chain_samples(
    kind: str, invokes: int, workdir: Path, durability: str = "sync"
) -> list[float]:
    graph = lg_chain(inc)
    if kind == "memory":
        app, saver = graph.compile(), None
    else:
        level = "NORMAL" if kind == "sqlite-normal" else "FULL"
        saver = _lg_saver(workdir / "lg.db", level)
        app = graph.compile(checkpointer=saver)
    samples: list[float] = []
    for i in range(invokes + 5):
        start = time.perf_counter()
        if saver is None:
            out = app.invoke({"x": 0})
        else:
            config = {"configurable": {"thread_id": f"t{i}"}}
            out = app.invoke({"x": 0}, config, durability=durability)
        took = time.perf_counter() - start
        if out["x"] != CHAIN_LEN:
            msg = f"the chain counted to {out['x']}"
            raise AssertionError(msg)
        if i >= 5:
            samples.append(took / CHAIN_LEN)
    if saver is not None:
        found = list(saver.list({"configurable": {"thread_id": f"t{invokes}"}}))
        if durability == "sync" and len(found) != CHAIN_LEN + 2:  # input, each node, end
            msg = f"LangGraph stored {len(found)} checkpoints for one chain run"
            if len(found) < CHAIN_LEN:
                raise AssertionError(msg)
        saver.conn.close()
    return samples


def _lg_bytes(steps: int, workdir: Path, delta: bool) -> tuple[list[int], float]:
    from langgraph.graph import END, START, StateGraph

    channel: Any = operator.add
    if delta:
        from langgraph.channels import DeltaChannel

        def concat(state: list[Any], batches: list[list[Any]]) -> list[Any]:
            out = list(state)
            for batch in batches:
                out.extend(batch)
            return out

        channel = DeltaChannel(concat)

    # Built functionally: the annotation must see the local `channel` object at runtime.
    ChatState = TypedDict(  # noqa: UP013
        "ChatState",
        {"messages": Annotated[list[dict[str, str]], channel], "turns": int, "limit": int},
    )

    def chat(s: Any) -> dict[str, Any]:
        reply = {"role": "assistant", "content": f"reply number {s['turns']}"}
        return {"messages": [reply], "turns": s["turns"] + 1}

    graph = StateGraph(ChatState)
    graph.add_node("chat", chat)
    graph.add_edge(START, "chat")
    graph.add_conditional_edges("chat", lambda s: END if s["turns"] >= s["limit"] else "chat")
    path = workdir / ("lg-delta.db" if delta else "lg-bytes.db")
    saver = _lg_saver(path, "FULL")
    app = graph.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "chat"}, "recursion_limit": steps + 10}
    out = app.invoke(
        {"messages": _messages(), "turns": 0, "limit": steps}, config, durability="sync"
    )
    if len(out["messages"]) != HISTORY + steps:
        msg = f"expected {HISTORY + steps} messages, got {len(out['messages'])}"
        raise AssertionError(msg)
    reads = []
    for _ in range(7):
        start = time.perf_counter()
        snapshot = app.get_state(config)
        reads.append(time.perf_counter() - start)
        assert len(snapshot.values["messages"]) == HISTORY + steps
    conn = saver.conn
    rows = conn.execute(
        "SELECT checkpoint_id, parent_checkpoint_id, "
        "length(checkpoint) + coalesce(length(metadata), 0) FROM checkpoints "
        "WHERE thread_id = 'chat' ORDER BY checkpoint_id"
    ).fetchall()
    writes = dict(
        conn.execute(
            "SELECT checkpoint_id, sum(coalesce(length(value), 0)) FROM writes "
            "WHERE thread_id = 'chat' GROUP BY checkpoint_id"
        ).fetchall()
    )
    conn.close()
    # A step writes its new checkpoint row plus the task writes saved under its parent.
    per_step = [size + writes.get(parent, 0) for _, parent, size in rows]
    # Rows: the empty start, the input step, then one per chat step: keep the chat steps.
    return per_step[-steps:], statistics.median(reads)


# -- workers and rounds -------------------------------------------------------------------------


def worker(name: str, quick: bool) -> dict[str, Any]:
    settings = _settings(quick)
    with tempfile.TemporaryDirectory(prefix="ts-bench-") as tmp:
        workdir = Path(tmp)
        impl, _, kind = name.partition(":")
        if impl == "ts" and kind.startswith("long-"):
            shape = kind.removeprefix("long-")
            result = asyncio.run(_ts_long(shape, workdir))
            result["sync_read"] = _ts_long_sync_read(shape, workdir, result.pop("expected"))
            return result
        if impl == "lg" and kind == "long-append":
            return _lg_long(workdir)
        if impl == "pair" and kind.startswith("long-"):
            return _paired_long_reads(kind.removeprefix("long-"), workdir)
        if impl == "ts" and kind == "bytes":
            sizes, read = asyncio.run(_ts_bytes(settings["steps"], workdir))
            return {"bytes": sizes, "read": read}
        if impl == "lg" and kind in ("bytes", "bytes-delta"):
            sizes, read = _lg_bytes(settings["steps"], workdir, kind == "bytes-delta")
            return {"bytes": sizes, "read": read}
        if kind.endswith("@modes"):  # every durability mode, in turns, in one process
            return {"modes": asyncio.run(_mode_samples(impl, kind, settings, workdir))}
        invokes = settings["invokes"]
        if impl == "ts":
            return {"step": asyncio.run(_ts_chain_samples(kind, invokes, workdir))}
        if impl == "lg":
            return {"step": _lg_chain_samples(kind, invokes, workdir)}
        if impl == "lga":
            samples = asyncio.run(_lg_async_chain_samples(kind, invokes, workdir))
            return {"step": samples}
    msg = f"unknown worker {name!r}"
    raise ValueError(msg)


def _run_worker(name: str, quick: bool) -> dict[str, Any] | str:
    cmd = [sys.executable, __file__, "--worker", name] + (["--quick"] if quick else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"failed: {last}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _servers_up() -> dict[str, bool]:
    import socket

    up = {}
    for name, port in (("postgres", 5432), ("redis", 6379)):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            up[name] = True
        except OSError:
            up[name] = False
    return up


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1e6:,.0f} µs"


def _ratio(ours: float | None, theirs: float | None) -> str:
    if not ours or not theirs:
        return ""
    return f"{theirs / ours:.1f}x"


def _kb(n: float) -> str:
    return f"{n / 1024:,.1f} kB" if n >= 1024 else f"{n:,.0f} B"


def _ms(value: float) -> str:
    return f"{value * 1e3:,.2f} ms" if value < 1 else f"{value:,.2f} s"


def _print_long(long: dict[str, dict[str, Any]]) -> None:
    """Reading a long thread's latest state back, and what writing it cost."""
    if not long:
        return
    print()
    print(
        f"Long threads on a SQLite file (synchronous=FULL): {LONG_STEPS:,} steps appending a "
        f"{MESSAGE_BYTES}-byte message; {LONG_OVERWRITE_STEPS:,} steps overwriting a "
        f"{MESSAGE_BYTES}-byte field over the same 2,000 messages"
    )
    columns = [
        ("TS 2k, JSON", "ts:long-append"),
        ("TS 2k, msgpack", "ts:long-append-msgpack"),  # the default serializer
        ("LG 2k append", "lg:long-append"),
        ("TS 20k overwrite", "ts:long-overwrite"),
        ("TS 20k append", "ts:long-append-20k"),
    ]
    columns = [(t, k) for t, k in columns if k in long]
    header = f"{'':34}" + "".join(f"{title:>18}" for title, _ in columns)
    print(header)
    print("-" * len(header))

    def row(label: str, fn: Callable[[dict[str, Any]], str]) -> None:
        cells = []
        for _, key in columns:
            try:
                cells.append(fn(long[key]))
            except KeyError:
                cells.append("")
        print(f"{label:34}" + "".join(f"{c:>18}" for c in cells))

    row("aget_state, median (default backend)", lambda r: _ms(r["read"]))
    row("aget_state, median (threaded=False)", lambda r: _ms(r["read_inline"]))
    row("get_state, median (sync helper)", lambda r: _ms(r["sync_read"]))
    row("LangGraph get_state (sync)", lambda r: _ms(r["read"]) if "total" in r else "")
    row("rows read by get_state", lambda r: f"{r['chain_rows']} of {r['rows']:,}")
    row("state size (JSON)", lambda r: _kb(r["state_bytes"]))
    row("run time", lambda r: _ms(r["run"]))
    row("bytes written, total", lambda r: _kb(r["total"] if "total" in r else sum(r["bytes"])))
    row(
        "  per step, amortized (mean)",
        lambda r: _kb((r.get("total") or sum(r["bytes"])) / r["steps"]),
    )
    row("  per step, typical (median)", lambda r: _kb(statistics.median(r["bytes"])))
    row("  largest single step", lambda r: _kb(max(r["bytes"])))
    row("  steps over 2 kB", lambda r: f"{sum(b > 2048 for b in r['bytes']):,}")
    ts, lg = long.get("ts:long-append"), long.get("lg:long-append")
    # LangGraph's get_state runs its statements on the caller's thread, as TensorSketch's
    # sync helper and a threaded=False backend do; the default backend's aget_state hands
    # them to its worker thread and back (the event loop never waits on the database).
    for name, stored in (
        ("ts:long-append", "JSON"),
        ("ts:long-append-msgpack", "msgpack, the default"),
    ):
        ours = long.get(name)
        if not (ours and lg):
            continue
        for title, key in (
            ("get_state (sync helper)", "sync_read"),
            ("aget_state, threaded=False", "read_inline"),
            ("aget_state, default backend", "read"),
        ):
            verdict = "met" if ours[key] <= lg["read"] else "NOT met"
            print(
                f"target ({stored}): {title} on the {LONG_STEPS:,}-step thread <= "
                f"LangGraph's get_state: {_ms(ours[key])} vs {_ms(lg['read'])} = LG/TS "
                f"{lg['read'] / ours[key]:.2f} — {verdict}"
            )
    over = long.get("ts:long-overwrite")
    if ts and over:
        ratio = over["read"] / ts["read"]
        verdict = "met" if ratio <= 1.3 else "NOT met"
        print(
            f"target: {LONG_OVERWRITE_STEPS:,}-step thread no slower than the "
            f"{LONG_STEPS:,}-step one (same state size): {_ms(over['read'])} vs "
            f"{_ms(ts['read'])} = {ratio:.2f}x — {verdict}"
        )


def _print_paired(paired: dict[str, dict[str, Any]]) -> None:
    """The read-back target measured with both threads in one process, in turns."""
    if not paired:
        return
    print()
    for name, stored in (("pair:long-json", "JSON"), ("pair:long-msgpack", "msgpack, the default")):
        got = paired.get(name)
        if got is None:
            continue
        ratio = got["ts"] / got["lg"]
        verdict = "met" if ratio <= 1.0 else "NOT met"
        print(
            f"target ({stored}, one process, {got['reads']} reads each in random turns): "
            f"get_state on the {LONG_STEPS:,}-step thread <= LangGraph's: median "
            f"{_ms(got['ts'])} vs {_ms(got['lg'])} = {ratio:.2f}x LangGraph's time "
            f"(first quartile {_ms(got['ts_p25'])} vs {_ms(got['lg_p25'])}) — {verdict}"
        )


def _run_each(names: list[str], quick: bool, errors: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Run each worker once, in order: its result by name, or its failure noted in ``errors``."""
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        got = _run_worker(name, quick)
        if isinstance(got, str):
            errors[name] = got
        else:
            results[name] = got
    return results


def _best_long(
    names: list[str], rounds: int, quick: bool, errors: dict[str, str]
) -> dict[str, dict[str, Any]]:
    """The long threads in alternating rounds (TensorSketch and LangGraph take turns, so
    both see the same load); per thread, the round whose ``get_state`` median was lowest,
    and each other way of reading back at its own best round."""
    best: dict[str, dict[str, Any]] = {}
    for _ in range(rounds):
        for name, got in _run_each(names, quick, errors).items():
            seen = best.get(name)
            if seen is None:
                best[name] = got
                continue
            others = {k: min(got[k], seen[k]) for k in ("sync_read", "read_inline") if k in got}
            best[name] = {**(got if got["read"] < seen["read"] else seen), **others}
    return best


def _timed_names() -> list[str]:
    """The chain measurements: every implementation on each SQLite setting, and the servers
    TensorSketch can use that are up."""
    up = _servers_up()
    timed = [f"{impl}:{kind}" for kind in ("memory", "sqlite", "sqlite-normal") for impl in IMPLS]
    timed += ["ts:sqlite-inline", "ts:sqlite-normal-inline"]
    timed += [f"ts:{k}" for k in ("postgres", "redis") if up[k]]
    return timed


def _best_step_medians(
    names: list[str], settings: dict[str, int], quick: bool, errors: dict[str, str]
) -> dict[str, float | None]:
    """Each measurement's best round (its median step), the rounds alternating between them."""
    medians: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(settings["rounds"]):  # alternate implementations round by round
        for name, got in _run_each(names, quick, errors).items():
            medians[name].append(statistics.median(got["step"]))
    return {n: (min(v) if v else None) for n, v in medians.items()}


MODES = ("sync", "async", "exit")


async def _mode_samples(
    impl: str, kind: str, settings: dict[str, int], workdir: Path
) -> dict[str, list[float]]:
    """The chain in each durability mode on one store, the modes taking turns invoke by
    invoke (a busy moment of the machine hits all three alike), each on a thread of its own;
    then each mode's last thread is checked: all its checkpoints, or (exit) the end (and
    TensorSketch's input)."""
    kind = kind.removesuffix("@modes")
    invoke, count, close = await (_ts_modes(kind, workdir) if impl == "ts" else _lg_modes(workdir))
    samples: dict[str, list[float]] = {mode: [] for mode in MODES}
    try:
        for i in range(settings["mode_invokes"] + 5):
            for mode in MODES:
                start = time.perf_counter()
                x = await invoke(mode, f"{mode}-{i}")
                took = time.perf_counter() - start
                if x != CHAIN_LEN:
                    msg = f"the chain counted to {x} ({mode})"
                    raise AssertionError(msg)
                if i >= 5:  # warm-up: imports, prepared statements, pool
                    samples[mode].append(took / CHAIN_LEN)
        last = settings["mode_invokes"] + 4
        stored = {mode: await count(f"{mode}-{last}") for mode in MODES}
        if (
            stored["exit"] not in (1, 2)
            or stored["sync"] != stored["async"]
            or stored["sync"] < CHAIN_LEN
        ):
            msg = f"checkpoints stored per mode: {stored}"
            raise AssertionError(msg)
    finally:
        await close()
    return samples


async def _ts_modes(kind: str, workdir: Path) -> tuple[Any, Any, Any]:
    app = ts_chain()
    backend = _ts_backend(kind, workdir)

    async def invoke(mode: str, thread: str) -> int:
        out = await app.invoke({"x": 0}, thread_id=thread, backend=backend, durability=mode)
        return int(out.x)

    async def count(thread: str) -> int:
        return len(await app.aget_history(thread, backend))

    async def close() -> None:
        await _ts_cleanup(kind, backend)

    return invoke, count, close


async def _lg_modes(workdir: Path) -> tuple[Any, Any, Any]:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    conn = await aiosqlite.connect(workdir / "lg-modes.db")
    saver = AsyncSqliteSaver(conn)
    await saver.setup()  # WAL, as LangGraph sets it up
    await conn.execute("PRAGMA synchronous=FULL")
    app = lg_chain(inc).compile(checkpointer=saver)

    async def invoke(mode: str, thread: str) -> int:
        config = {"configurable": {"thread_id": thread}}
        out = await app.ainvoke({"x": 0}, config, durability=mode)
        return int(out["x"])

    async def count(thread: str) -> int:
        return len([c async for c in saver.alist({"configurable": {"thread_id": thread}})])

    async def close() -> None:
        await conn.close()

    return invoke, count, close


def _mode_names() -> list[str]:
    """The chain in each durability mode: TensorSketch and LangGraph's AsyncSqliteSaver on
    SQLite (WAL, synchronous=FULL), TensorSketch also on the servers that are up."""
    up = _servers_up()
    return ["ts:sqlite@modes", "lga:sqlite@modes"] + [
        f"ts:{k}@modes" for k in ("postgres", "redis") if up[k]
    ]


def _best_mode_medians(
    settings: dict[str, int], quick: bool, errors: dict[str, str]
) -> dict[str, float | None]:
    """Each (implementation, store, mode)'s best round, the rounds alternating."""
    names = _mode_names()
    medians: dict[str, list[float]] = {}
    for _ in range(settings["mode_rounds"]):
        for name, got in _run_each(names, quick, errors).items():
            for mode, samples in got["modes"].items():
                key = name.replace("@modes", f"@{mode}")
                medians.setdefault(key, []).append(statistics.median(samples))
    return {n: min(v) for n, v in medians.items()}


def _print_modes(best: dict[str, float | None], settings: dict[str, int]) -> None:
    """Per-superstep cost of the chain in each durability mode, and LangGraph's ratio."""
    print(
        f"Durability modes, {CHAIN_LEN}-node chain, {settings['mode_invokes']} invokes per "
        f"mode (median per superstep), best of {settings['mode_rounds']} round(s), the modes "
        "taking turns in one process; SQLite file in WAL mode, synchronous=FULL. TS = await "
        "invoke(durability=...); LG = AsyncSqliteSaver under ainvoke with the same "
        "durability=. Ratio: LangGraph's time over TensorSketch's."
    )
    header = ["mode", "TS SQLite", "LG SQLite", "LG / TS"]
    extra = [k for k in ("postgres", "redis") if f"ts:{k}@sync" in best]
    header += [f"TS {kind}" for kind in extra]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for mode in MODES:
        ts, lga = best.get(f"ts:sqlite@{mode}"), best.get(f"lga:sqlite@{mode}")
        row = [mode, _us(ts), _us(lga), _ratio(ts, lga)]
        row += [_us(best.get(f"ts:{kind}@{mode}")) for kind in extra]
        print("| " + " | ".join(row) + " |")
    for kind in ["sqlite", *extra]:
        sync = best.get(f"ts:{kind}@sync")
        faster = [
            f"{mode} {sync / value:.1f}x"
            for mode in MODES[1:]
            if sync and (value := best.get(f"ts:{kind}@{mode}"))
        ]
        print(f"TS on {kind}, sync's time per superstep over each mode's: " + ", ".join(faster))


def _overhead(best: dict[str, float | None], impl: str, kind: str) -> float | None:
    """What a checkpoint adds to a step: the durable run minus the same chain in memory."""
    durable, plain = best.get(f"{impl}:{kind}"), best.get(f"{impl}:memory")
    return None if durable is None or plain is None else durable - plain


# TS thread: statements on the backend's worker thread (the default; the loop never
# waits), like AsyncSqliteSaver. TS inline: threaded=False, statements on the caller's
# thread, like SqliteSaver under the blocking invoke.
_CHAIN_COLUMNS = (
    ("TS thread", "ts", ""),
    ("TS inline", "ts", "-inline"),
    ("LG sync", "lg", ""),
    ("LG async", "lga", ""),
)
_CHAIN_ROWS = (
    ("no checkpointer", "memory", False),
    ("SQLite (WAL, synchronous=FULL)", "sqlite", False),
    ("  checkpoint overhead per step", "sqlite", True),
    ("SQLite (WAL, synchronous=NORMAL)", "sqlite-normal", False),
    ("  checkpoint overhead per step", "sqlite-normal", True),
)


def _chain_cell(
    best: dict[str, float | None], impl: str, suffix: str, kind: str, minus_floor: bool
) -> str:
    if kind == "memory" and suffix:
        return ""
    value = best.get(f"{impl}:{kind}{suffix}")
    floor = best.get(f"{impl}:memory")
    if minus_floor:
        value = None if value is None or floor is None else value - floor
    return _us(value)


def _print_chain(best: dict[str, float | None], settings: dict[str, int]) -> None:
    """The per-superstep table: SQLite for every implementation, then the servers (TS only)."""
    print(
        f"Per-superstep cost, {CHAIN_LEN}-node chain, {settings['invokes']} invokes "
        f"(median), best of {settings['rounds']} round(s); each checkpoint committed "
        "before the next step"
    )
    header = f"{'':34}" + "".join(f"{title:>12}" for title, _, _ in _CHAIN_COLUMNS)
    print(header)
    print("-" * len(header))
    for label, kind, minus in _CHAIN_ROWS:
        cells = "".join(
            f"{_chain_cell(best, i, sfx, kind, minus):>12}" for _, i, sfx in _CHAIN_COLUMNS
        )
        print(f"{label:34}{cells}")
    for kind in ("postgres", "redis"):
        if f"ts:{kind}" in best:
            label = f"{kind.capitalize()} (TensorSketch only)"
            print(f"{label:34} {_us(best[f'ts:{kind}']):>13}")
            print(f"{'  checkpoint overhead per step':34} {_us(_overhead(best, 'ts', kind)):>13}")
        else:
            print(f"{kind.capitalize():34} {'server not running on 127.0.0.1':>30}")


def _print_bytes(sizes: dict[str, list[int]], steps: int) -> None:
    """Bytes written per superstep, side by side, as a few statistics over the steps."""
    print()
    print(
        f"Bytes written per superstep: {HISTORY:,} messages + 1 per step, {steps} steps "
        "(stored payloads)"
    )
    columns = [
        ("TensorSketch", "ts:bytes"),
        ("LG reducer", "lg:bytes"),
        ("LG DeltaChannel*", "lg:bytes-delta"),
    ]
    header = f"{'':22}" + "".join(f"{title:>18}" for title, _ in columns)
    print(header)
    print("-" * len(header))
    stats: list[tuple[str, Callable[[list[int]], float]]] = [
        ("first step", lambda s: s[0]),
        ("last step", lambda s: s[-1]),
        ("median step", statistics.median),
        ("largest step", max),
        ("mean step", statistics.fmean),
    ]
    for label, fn in stats:
        cells = [_kb(fn(sizes[key])) if key in sizes else "n/a" for _, key in columns]
        print(f"{label:22}" + "".join(f"{c:>18}" for c in cells))
    print("* LangGraph's beta DeltaChannel: deltas, plus a full snapshot every 100 updates.")


def _print_overhead_targets(best: dict[str, float | None]) -> None:
    """TensorSketch's checkpoint overhead against a third of LangGraph's, like for like."""
    # Like for like: the same place for the I/O (caller's thread / a worker thread).
    pairs = (
        ("-inline", "lg", "sync SqliteSaver; both on the caller's thread"),
        ("", "lga", "AsyncSqliteSaver; both on a worker thread"),
        ("", "lg", "sync SqliteSaver; TS on a worker thread"),
    )
    for kind, level in (("sqlite", "FULL"), ("sqlite-normal", "NORMAL")):
        for suffix, impl, title in pairs:
            ours = _overhead(best, "ts", kind + suffix)
            theirs = _overhead(best, impl, kind)
            if ours is None or theirs is None:
                continue
            verdict = "met" if ours <= theirs / 3 else "NOT met"
            print(
                f"target: overhead <= 1/3 of LangGraph's ({level}, {title}): "
                f"{_us(ours)} vs {_us(theirs)} = {ours / theirs:.2f} — {verdict}"
            )


def _print_bytes_target(sizes: list[int]) -> None:
    """TensorSketch's bytes per step: under 2 kB, and flat as the history grows."""
    # Every FANOUT-th step re-stores the last FANOUT appends, every FANOUT**2-th the last
    # FANOUT**2 (the ladder that bounds reads): flat means the typical step does not grow
    # with the history.
    from tensorsketch.durable import FANOUT

    typical = [size for n, size in enumerate(sizes, 1) if n % FANOUT]
    flat = max(typical) - min(typical) < 64
    mean = statistics.fmean(sizes)
    verdict = "met" if mean < 2048 and max(typical) < 2048 and flat else "NOT met"
    print(
        f"target: < 2 kB per step, flat: typical {_kb(statistics.median(sizes))} (spread "
        f"{max(typical) - min(typical)} B), amortized {_kb(mean)}, largest {_kb(max(sizes))} "
        f"over {len(sizes)} steps — {verdict}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats: a smoke run")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument(
        "--only",
        choices=["long", "modes"],
        help="run one part: `long` = the long threads' read-back, `modes` = the durability "
        "modes (sync / async / exit) beside LangGraph's",
    )
    args = parser.parse_args(argv)
    quick = args.quick or QUICK
    if args.worker:
        print(json.dumps(worker(args.worker, quick)))
        return 0

    settings = _settings(quick)
    errors: dict[str, str] = {}
    long_names = ["ts:long-append", "ts:long-append-msgpack", "lg:long-append", "ts:long-overwrite"]
    if not quick:
        long_names.append("ts:long-append-20k")
    paired_names = ["pair:long-json", "pair:long-msgpack"]
    if args.only == "long":
        _print_long(_best_long(long_names, settings["rounds"], quick, errors))
        _print_paired(_run_each(paired_names, quick, errors))
        for name, error in errors.items():
            print(f"{name}: {error}", file=sys.stderr)
        return 1 if errors else 0
    if args.only == "modes":
        _print_modes(_best_mode_medians(settings, quick, errors), settings)
        for name, error in errors.items():
            print(f"{name}: {error}", file=sys.stderr)
        return 1 if errors else 0
    best = _best_step_medians(_timed_names(), settings, quick, errors)
    written = _run_each(["ts:bytes", "lg:bytes", "lg:bytes-delta"], quick, errors)
    sizes: dict[str, list[int]] = {name: got["bytes"] for name, got in written.items()}
    reads: dict[str, float] = {name: got["read"] for name, got in written.items()}
    long = _best_long(long_names, settings["rounds"], quick, errors)
    paired = _run_each(paired_names, quick, errors)

    _print_chain(best, settings)
    steps = settings["steps"]
    _print_bytes(sizes, steps)
    print()
    _print_overhead_targets(best)
    if "ts:bytes" in sizes:
        _print_bytes_target(sizes["ts:bytes"])
    if reads:
        print(
            f"Reading the latest state back after {steps} steps (get_state, median of 7): "
            + ", ".join(f"{name} {_us(value)}" for name, value in reads.items())
        )
    _print_long(long)
    _print_paired(paired)
    for name, error in errors.items():
        print(f"{name}: {error}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
