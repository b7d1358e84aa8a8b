"""``tensorsketch holes fill``: fill the holes under the given paths, one run per hole.

Prints, per hole, whether its body was written (with the diff) or kept as a draft (with what
failed), the run's thread (to resume it) and its trace, and what the model calls cost.
Exit status 0 when every hole was filled, 1 when any was kept as a draft, 2 on bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from pathlib import Path
from typing import TextIO

from tensorsketch.canvas.exceptions import CanvasError
from tensorsketch.canvas.fill.run import FillError, FillResult, fill_hole, state_dir
from tensorsketch.canvas.fill.spec import Example
from tensorsketch.canvas.holes import HoleRef, search_holes

__all__ = ["run_fill"]


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _cost(result: FillResult) -> str:
    if result.cost_usd is None:
        return f"cost: unknown (the model is not in the price table), {result.tokens} tokens"
    return f"cost: ${result.cost_usd:.4f} ({result.tokens} tokens)"


def _report(result: FillResult, hole: HoleRef, trace: Path, out: TextIO) -> None:
    where = f"{hole.file}:{hole.line}" if hole.line is not None else hole.file
    tries = f"{result.attempts} attempt{'s' if result.attempts != 1 else ''}"
    if result.ok:
        print(f"{where}  {hole.node}: written after {tries}", file=out)
        print(f"  passed: {', '.join(result.passed)}", file=out)
        print(result.diff.rstrip("\n"), file=out)
        if result.tests is not None:
            print(f"  contract tests written to {result.tests}", file=out)
    else:
        print(f"{where}  {hole.node}: unverified after {tries}; the file is unchanged", file=out)
        print(f"  draft kept in {result.draft}; what failed:", file=out)
        for failure in result.failures:
            print("  - " + failure.replace("\n", "\n    "), file=out)
    print(f"  {_cost(result)}; run {result.thread_id} (trace {trace})", file=out)


def _targets(args: argparse.Namespace) -> list[HoleRef] | str:
    paths = args.paths[1:] or ["."]
    found = search_holes(*paths)
    for _, message in found.skipped:
        print(f"warning: {message}", file=sys.stderr)
    holes = found.holes
    if args.node:
        holes = [h for h in holes if h.node == args.node]
        if not holes:
            where = ", ".join(paths)
            return f"no hole called {args.node!r} under {where} (`tensorsketch holes` lists them)"
    if args.resume and len(holes) != 1:
        return "--resume continues one fill: name its node with --node"
    return holes


def run_fill(args: argparse.Namespace, out: TextIO) -> int:
    """Fill every hole ``args`` selects; see the module docstring for the exit status."""
    from tensorsketch.observability.export import FileTracer  # noqa: PLC0415 - as above
    from tensorsketch.registry import create_provider  # noqa: PLC0415 - providers load when a fill runs

    if not args.provider or not args.model:
        print("error: holes fill needs --provider NAME and --model MODEL", file=sys.stderr)
        return 2
    try:
        examples = [Example.parse(raw) for raw in args.example]
    except ValueError as exc:
        print(f"error: --example: {exc}", file=sys.stderr)
        return 2
    targets = _targets(args)
    if isinstance(targets, str):
        print(f"error: {targets}", file=sys.stderr)
        return 2
    if not targets:
        print("no holes: every node has code", file=out)
        return 0
    try:
        provider = create_provider(args.provider, model=args.model)
    except Exception as exc:  # an unknown name, a missing SDK or key: say so, not a traceback
        print(f"error: --provider {args.provider}: {exc}", file=sys.stderr)
        return 2
    status = 0
    for hole in targets:
        file = Path(hole.file)
        home = state_dir(file)
        thread = args.resume or None
        trace = Path(args.trace) if args.trace else home / "traces" / f"{hole.node}.jsonl"
        trace.parent.mkdir(parents=True, exist_ok=True)
        tests = None
        if args.write_tests is not None:
            tests = args.write_tests or str(
                home.parent / "tests" / f"test_{_snake(hole.node)}_contract.py"
            )
        try:
            with FileTracer(trace, append=True) as tracer:
                result = asyncio.run(
                    fill_hole(
                        file,
                        hole.node,
                        provider,
                        examples=examples,
                        max_attempts=args.attempts,
                        budget_usd=args.budget_usd,
                        max_total_tokens=args.max_tokens,
                        thread_id=thread,
                        tracer=tracer,
                        timeout=args.timeout,
                        write_tests=tests,
                    )
                )
        except (FillError, CanvasError) as exc:
            print(f"error: {hole.node}: {exc}", file=sys.stderr)
            return 2
        _report(result, hole, trace, out)
        if not result.ok:
            status = 1
    return status
