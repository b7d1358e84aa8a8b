"""Run every ``benchmarks/bench_*.py`` and print their tables.

Each benchmark runs in its own interpreter (the one running this script), one after another, so
one benchmark's heap, caches and event loop never colour another's numbers. Usage::

    python benchmarks/bench.py                 # all benchmarks
    python benchmarks/bench.py core tracing    # only bench_core.py and bench_tracing.py
    python benchmarks/bench.py --quick         # fewer repeats (sets TS_BENCH_QUICK=1)
    python benchmarks/bench.py --list          # what would run

Run it with the benchmarks' own interpreter (``benchmarks/.venv``, or ``make bench`` / ``nox -s
bench``, which build one): the peers it compares against are installed there and nowhere else.
The exit status is non-zero when any benchmark failed; the others still run.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: The peers' import names, and the requirement line that installs each (requirements.txt).
PEERS = {"langgraph": "langgraph", "pydantic_ai": "pydantic-ai-slim", "dbos": "dbos"}


def discover() -> list[Path]:
    """The benchmark scripts beside this file, in name order (``bench_core`` first)."""
    found = sorted(HERE.glob("bench_*.py"))
    return sorted(found, key=lambda p: (p.stem != "bench_core", p.stem))


def select(scripts: list[Path], names: list[str]) -> list[Path]:
    if not names:
        return scripts
    by_name = {p.stem.removeprefix("bench_"): p for p in scripts}
    chosen: list[Path] = []
    for name in names:
        key = name.removeprefix("bench_").removesuffix(".py")
        if key not in by_name:
            known = ", ".join(by_name) or "none"
            msg = f"no benchmark named {name!r} in {HERE} (known: {known})."
            raise SystemExit(msg)
        chosen.append(by_name[key])
    return chosen


def missing_peers(scripts: list[Path]) -> list[str]:
    """The peers the chosen benchmarks import that this interpreter cannot: measuring without
    them would fail half-way through, so say so before anything runs."""
    wanted = {name for p in scripts for name in PEERS if name in p.read_text(encoding="utf-8")}
    return sorted(PEERS[name] for name in wanted if importlib.util.find_spec(name) is None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the TensorSketch benchmarks.")
    parser.add_argument("names", nargs="*", help="benchmarks to run (e.g. core, durability)")
    parser.add_argument("--quick", action="store_true", help="fewer repeats: a smoke run")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)

    scripts = select(discover(), args.names)
    if args.list:
        for script in scripts:
            print(script.stem.removeprefix("bench_"))
        return 0
    missing = missing_peers(scripts)
    if missing:
        msg = (
            f"{sys.executable} cannot import {', '.join(missing)}, which the benchmarks measure "
            "against. Run them in their own environment: `make bench` (or `nox -s bench`), or "
            "set up benchmarks/.venv as benchmarks/README.md shows, then "
            "`benchmarks/.venv/bin/python benchmarks/bench.py`."
        )
        raise SystemExit(msg)
    env = dict(os.environ)
    if args.quick:
        env["TS_BENCH_QUICK"] = "1"
    failed: list[str] = []
    for script in scripts:
        print(f"\n## {script.name}\n", flush=True)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, str(script)], env=env, cwd=HERE.parent)
        took = time.perf_counter() - start
        if proc.returncode != 0:
            failed.append(script.name)
            print(f"\n{script.name} FAILED (exit {proc.returncode}) after {took:.1f} s", flush=True)
        else:
            print(f"\n({script.name}: {took:.1f} s)", flush=True)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
