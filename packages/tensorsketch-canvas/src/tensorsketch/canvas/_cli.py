"""Command-line front ends: ``tensorsketch holes`` and ``python -m tensorsketch.canvas``.

Kept free of core imports so the engine's own CLI works even while the runtime is broken;
``tensorsketch._plugins.canvas`` wraps these functions into the ``tensorsketch`` console command.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from tensorsketch.canvas._extract import extract, extract_all
from tensorsketch.canvas.exceptions import CanvasError
from tensorsketch.canvas.holes import find_holes

__all__ = ["configure_holes", "main", "run_holes"]

HOLES_HELP = "list the nodes that still need code (bodies that are `raise Hole(...)`)"


def configure_holes(parser: argparse.ArgumentParser) -> None:
    """Arguments of the ``holes`` command."""
    parser.add_argument(
        "paths", nargs="*", default=["."], help="files or directories to search (default: .)"
    )
    parser.add_argument("--json", action="store_true", help="print the holes as a JSON list")
    parser.add_argument(
        "--check", action="store_true", help="exit with status 1 when any hole is found (for CI)"
    )


def run_holes(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Print the holes under ``args.paths``; skipped files are reported on stderr."""
    out = out or sys.stdout
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        holes = find_holes(*args.paths)
    for warning in caught:
        print(f"warning: {warning.message}", file=sys.stderr)
    if args.json:
        print(json.dumps([h.to_dict() for h in holes], indent=2), file=out)
    else:
        for hole in holes:
            where = f"{hole.file}:{hole.line}" if hole.line is not None else hole.file
            print(f"{where}  {hole.node} — {hole.spec}", file=out)
        count = len(holes)
        if count == 0:
            print("no holes: every node has code", file=out)
        else:
            print(
                f"{count} node{'s' if count != 1 else ''} need{'' if count != 1 else 's'} code",
                file=out,
            )
    return 1 if args.check and holes else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tensorsketch.canvas``: print a file's graph IR, or list holes."""
    parser = argparse.ArgumentParser(
        prog="python -m tensorsketch.canvas",
        description=(
            "Print the graph IR (JSON) of a Python file, or with --holes list the nodes that "
            "still need code."
        ),
    )
    parser.add_argument("--holes", action="store_true", help=HOLES_HELP)
    parser.add_argument("--graph", help="which graph of the file (its variable name)")
    parser.add_argument("--all", action="store_true", help="print every graph of the file")
    parser.add_argument("--json", action="store_true", help="with --holes: print JSON")
    parser.add_argument("--check", action="store_true", help="with --holes: exit 1 if any hole")
    parser.add_argument("paths", nargs="*", help="the file to read (with --holes: files/dirs)")
    args = parser.parse_args(argv)
    if args.holes:
        args.paths = args.paths or ["."]
        return run_holes(args)
    if len(args.paths) != 1:
        parser.error("give exactly one Python file to read, or --holes [paths] to list holes")
    path = Path(args.paths[0])
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        print(f"error: cannot read {str(path)!r}: {exc}", file=sys.stderr)
        return 2
    try:
        if args.all:
            data: object = [ir.to_dict() for ir in extract_all(source)]
        else:
            data = extract(source, args.graph).to_dict()
    except CanvasError as exc:
        print(f"error: {path}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(data, indent=2))
    return 0
