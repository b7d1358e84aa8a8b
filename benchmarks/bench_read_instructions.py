"""Reading a long thread's state back, counted in instructions instead of timed.

On a small shared VM a read's time moves by ±5 % from run to run, as much as the gap being
measured. Instruction counts under ``valgrind --tool=callgrind`` do not move with the load, so
this counts what one ``get_state`` of the 2,000-step thread costs (``bench_durability.py``'s
``append`` shape, stored with msgpack, the default) for four readers, each in the same kind of
process (both frameworks imported, both threads on disk):

* ``ts``: TensorSketch's sync ``get_state`` on a ``SqliteBackend``.
* ``lg``: LangGraph's ``get_state`` on its ``SqliteSaver``.
* ``ts-floor``: the least any reader of TensorSketch's rows can do: the chain query on a raw
  ``sqlite3`` connection, ``ormsgpack.unpackb`` of each row, the fold, ``model_construct``.
* ``lg-floor``: the same for LangGraph's row: one ``SELECT`` and ``ormsgpack.unpackb``.

A reader's cost is (instructions with 40 more reads - instructions of the same process with
none) / 40 (10 with ``TS_BENCH_QUICK=1``), so start-up, imports and each reader's first read
cancel out. ``PYTHONHASHSEED=0`` keeps dict layouts the same between the processes.

Needs ``valgrind`` on ``PATH``; takes ~6 minutes on 2 cores (five processes under callgrind,
~2 minutes each, as many at once as there are cores).

Run ``python benchmarks/bench_read_instructions.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import operator
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, TypedDict

import bench_durability as bd

READERS = ("ts", "lg", "ts-floor", "lg-floor")
MORE_READS = 10 if bd.QUICK else 40  # TS_BENCH_QUICK=1: a smoke run


def _prepare(workdir: Path) -> None:
    """Write both 2,000-step threads (outside valgrind: writing them is not what is counted)."""
    from tensorsketch.runtime.backends import SqliteBackend

    app = bd._ts_long_app(False)
    backend = SqliteBackend(workdir / "long.db", serializer="msgpack")
    asyncio.run(
        app.invoke(
            {"messages": [], "limit": bd.LONG_STEPS},
            thread_id="long",
            backend=backend,
            max_steps=bd.LONG_STEPS + 1,
        )
    )
    asyncio.run(backend.aclose())
    _, _, saver, _ = bd._lg_long_thread(workdir)
    saver.conn.close()


def _readers(workdir: Path) -> dict[str, Callable[[], int]]:
    """Each reader, returning how many messages it read back."""
    import ormsgpack
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    from tensorsketch.runtime.backends import SqliteBackend

    app = bd._ts_long_app(False)
    backend = SqliteBackend(workdir / "long.db", serializer="msgpack")

    class LongState(TypedDict):
        messages: Annotated[list[dict[str, str]], operator.add]
        turns: int
        limit: int

    graph = StateGraph(LongState)
    graph.add_node("append", lambda s: s)
    graph.add_edge(START, "append")
    graph.add_conditional_edges("append", lambda s: END)
    lg_conn = sqlite3.connect(workdir / "lg-long.db", check_same_thread=False)
    lg_app = graph.compile(checkpointer=SqliteSaver(lg_conn))
    config: Any = {"configurable": {"thread_id": "long"}}

    chain_sql = backend._sql["chain_latest"]  # the backend's own statement
    ts_conn = sqlite3.connect(workdir / "long.db")
    state_type = type(app.get_state("long", backend))

    def ts() -> int:
        state = app.get_state("long", backend)
        return -1 if state is None else len(state.messages)

    def lg() -> int:
        return len(lg_app.get_state(config).values["messages"])

    def ts_floor() -> int:
        values: dict[str, Any] = {}
        for row in ts_conn.execute(chain_sql, ("long",) * 4).fetchall():
            payload = ormsgpack.unpackb(memoryview(row[4])[1:])  # after the format's magic byte
            if payload.get("base"):
                values = {}
            for name, (op, value) in payload["changes"].items():
                if op == "append" and name in values:
                    values[name].extend(value)
                else:
                    values[name] = value
        return len(state_type.model_construct(**values).messages)

    def lg_floor() -> int:
        (blob,) = lg_conn.execute(
            "SELECT checkpoint FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = '' "
            "ORDER BY checkpoint_id DESC LIMIT 1",
            ("long",),
        ).fetchone()
        return len(ormsgpack.unpackb(blob)["channel_values"]["messages"])

    return {"ts": ts, "lg": lg, "ts-floor": ts_floor, "lg-floor": lg_floor}


def count(reader: str, reads: int, workdir: Path) -> None:
    """What runs under callgrind: every reader is built and read once (the same process for
    all four), then one of them ``reads`` more times."""
    readers = _readers(workdir)
    for name, read in readers.items():  # each must read every message back
        if read() != bd.LONG_STEPS:
            msg = f"{name} read {read()} messages, expected {bd.LONG_STEPS}"
            raise AssertionError(msg)
    read = readers[reader]
    for _ in range(reads):
        read()


def _instructions(reader: str, reads: int, workdir: Path) -> int:
    out = workdir / f"callgrind.{reader}.{reads}"
    cmd = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        sys.executable,
        __file__,
        "--count",
        reader,
        str(reads),
        str(workdir),
    ]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        msg = f"callgrind run of {reader} failed:\n{done.stderr[-2000:]}"
        raise RuntimeError(msg)
    out.unlink(missing_ok=True)
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", nargs=3, metavar=("READER", "READS", "DIR"))
    args = parser.parse_args()
    if args.count:
        reader, reads, workdir = args.count
        count(reader, int(reads), Path(workdir))
        return
    if shutil.which("valgrind") is None:
        print("skipped: valgrind is not on PATH (Debian: apt install valgrind)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        _prepare(workdir)
        # Counts do not depend on the load, so the runs share the cores.
        runs = [(READERS[0], 0), *((reader, MORE_READS) for reader in READERS)]
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            counts = list(pool.map(lambda run: _instructions(*run, workdir), runs))
        base = counts[0]
        per_read = {
            reader: (n - base) / MORE_READS for reader, n in zip(READERS, counts[1:], strict=True)
        }
    lg = per_read["lg"]
    print("get_state of the 2,000-step thread (msgpack), instructions per read under callgrind")
    print(f"{'reader':<10} {'instructions':>14} {'vs lg':>7}")
    for reader in READERS:
        n = per_read[reader]
        print(f"{reader:<10} {n / 1e6:>12.2f} M {n / lg:>6.2f}x")
    framework = per_read["ts"] - per_read["ts-floor"]
    print(f"TensorSketch's own work above its floor: {framework / 1e3:.0f} k instructions")


if __name__ == "__main__":
    main()
