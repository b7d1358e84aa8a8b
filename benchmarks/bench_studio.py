"""Benchmark the Studio server: the edit round trip the page waits on after each gesture.

Run with ``python benchmarks/bench_studio.py [--nodes 300] [--repeat 5]``. A real uvicorn
server on 127.0.0.1 serves a copy of ``examples/support_router.py`` and a generated
``--nodes``-node fluent file (the one ``bench_canvas.py`` generates); each row is one HTTP
request measured from the client: load the graph, an edit (read, check, reconstruct, atomic
write, re-extract, answer with the new IR) and its undo, a layout save. Best and median of
``--repeat`` runs, in milliseconds. The goal is under one second per edit on the 300-node
file; nothing here asserts it. The browser-side numbers (repaint after an edit) are added by
the frontend's own benchmark.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tensorsketch.canvas.studio.server import StudioServer

ROOT = Path(__file__).resolve().parents[1]


def generated(nodes: int) -> str:
    spec = importlib.util.spec_from_file_location(
        "bench_canvas", ROOT / "benchmarks" / "bench_canvas.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.node_classes(nodes) + module.wiring(nodes, "fluent"))


def timed(repeat: int, fn: Callable[[], object]) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return min(times), statistics.median(times)


def bench(
    label: str, path: Path, repeat: int, edges: tuple[str, str], node: str
) -> list[tuple[str, str, float, float]]:
    rows: list[tuple[str, str, float, float]] = []
    with StudioServer(path, port=0, project=path.parent) as server:
        # TCP_NODELAY as browsers set it: without it, Nagle plus delayed ACKs add ~40 ms to
        # every request whose headers and body go out in separate writes.
        transport = httpx.HTTPTransport(
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
        )
        client = httpx.Client(
            base_url=server.base_url,
            headers={"X-Studio-Token": server.token},
            timeout=60,
            transport=transport,
        )

        def version() -> str:
            return str(client.get("/api/graph").json()["version"])

        def post(op: str, **args: Any) -> None:
            r = client.post("/api/edit", json={"version": state["version"], "op": op, "args": args})
            r.raise_for_status()
            state["version"] = r.json()["version"]

        state = {"version": version()}
        rows.append(
            (
                label,
                "GET /api/graph",
                *timed(repeat, lambda: client.get("/api/graph").raise_for_status()),
            )
        )
        src, dst = edges
        rows.append(
            (label, "add_edge", *timed(1, lambda: post("add_edge", source=src, target=dst)))
        )
        rows.append(
            (
                label,
                "remove_edge (undo)",
                *timed(1, lambda: post("remove_edge", source=src, target=dst)),
            )
        )

        def pair() -> None:
            post("add_edge", source=src, target=dst)
            post("remove_edge", source=src, target=dst)

        best, median = timed(repeat, pair)
        rows.append((label, "edit round trip (avg of pair)", best / 2, median / 2))

        def rename() -> None:
            post("rename_node", old=node, new=node + "X")
            post("rename_node", old=node + "X", new=node)

        best, median = timed(repeat, rename)
        rows.append((label, "rename_node", best / 2, median / 2))
        rows.append(
            (
                label,
                "add_node",
                *timed(
                    1,
                    lambda: post(
                        "add_node",
                        name="Bench",
                        inputs={"text": "str"} if "N0" in node else {"query": "str"},
                    ),
                ),
            )
        )
        rows.append(
            (
                label,
                "POST /api/layout",
                *timed(
                    repeat,
                    lambda: client.post(
                        "/api/layout", json={"positions": {node: {"x": 1, "y": 2}}}
                    ).raise_for_status(),
                ),
            )
        )
        client.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows: list[tuple[str, str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "support_router.py"
        shutil.copyfile(ROOT / "examples" / "support_router.py", small)
        # renames Classify: the example's routing function returns the other nodes by name,
        # and the Studio refuses to rename those (the run would fail)
        rows += bench("support_router", small, args.repeat, ("Fallback", "Tech"), "Classify")
        big = Path(tmp) / "generated.py"
        big.write_text(generated(args.nodes), encoding="utf-8")
        last = args.nodes - 1
        rows += bench(f"{args.nodes} nodes", big, args.repeat, (f"N{last}", "N0"), "N0")
    width = max(len(r[1]) for r in rows)
    print(f"{'file':<16} {'request':<{width}} {'best ms':>9} {'median ms':>10}")
    for label, what, best, median in rows:
        print(f"{label:<16} {what:<{width}} {best:>9.1f} {median:>10.1f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
