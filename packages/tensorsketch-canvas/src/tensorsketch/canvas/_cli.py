"""Command-line front ends: ``python -m tensorsketch.canvas`` (the Studio, ``--ir``,
``--holes``, ``--export``), ``tensorsketch studio`` and ``tensorsketch holes``.

Kept free of core imports so the engine's own CLI works even while the runtime is broken;
``tensorsketch._plugins.canvas`` wraps these functions into the ``tensorsketch`` console command.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from tensorsketch.canvas._extract import extract, extract_all
from tensorsketch.canvas.exceptions import CanvasError, SourceParseError
from tensorsketch.canvas.holes import search_holes

__all__ = ["configure_holes", "configure_studio", "main", "run_holes", "run_studio"]

HOLES_HELP = "list the nodes that still need code (bodies that are `raise Hole(...)`)"
CHECK_HELP = (
    "for CI: exit with status 1 when any hole is found, 2 when a path is missing or a file "
    "cannot be read or parsed"
)
STUDIO_HELP = "open a graph file in TensorSketch Studio (the canvas in your browser)"
_INSTALL_HINT = (
    "TensorSketch Studio needs starlette and uvicorn; install them with "
    "`pip install tensorsketch-canvas` (or `pip install starlette uvicorn`)."
)


_FILL_ONLY = ("node", "provider", "model", "example", "budget_usd", "max_tokens", "resume", "trace")


def configure_holes(parser: argparse.ArgumentParser) -> None:
    """Arguments of the ``holes`` command."""
    parser.add_argument(
        "paths", nargs="*", default=["."], help="files or directories to search (default: .)"
    )
    parser.add_argument("--json", action="store_true", help="print the holes as a JSON list")
    parser.add_argument("--check", action="store_true", help=CHECK_HELP)
    fill = parser.add_argument_group(
        "filling holes",
        "`tensorsketch holes fill [PATH...] --provider NAME --model M`: ask a model for each "
        "hole's body, write it only once it passes mypy and the contract tests",
    )
    fill.add_argument("--node", help="fill only this node (its class name)")
    fill.add_argument("--provider", help="the provider's registered name (openai, anthropic, ...)")
    fill.add_argument("--model", help="the model to ask")
    fill.add_argument(
        "--example",
        action="append",
        default=[],
        metavar="JSON",
        help='an input and what it must give: \'{"in": {...}, "out": {...}}\' (repeatable)',
    )
    fill.add_argument(
        "--attempts", type=int, default=3, help="candidates to try, repairs included (3)"
    )
    fill.add_argument("--budget-usd", type=float, help="stop repairing once the calls cost this")
    fill.add_argument("--max-tokens", type=int, help="stop repairing after this many tokens")
    fill.add_argument(
        "--timeout", type=float, default=120.0, help="seconds for each check's subprocess (120)"
    )
    fill.add_argument("--resume", metavar="THREAD", help="resume an interrupted fill (its thread)")
    fill.add_argument(
        "--write-tests",
        nargs="?",
        const="",
        metavar="PATH",
        help="also write the contract tests into the project's tests (default: "
        "tests/test_<node>_contract.py)",
    )
    fill.add_argument("--trace", metavar="PATH", help="write the fill's trace here (JSON Lines)")


def run_holes(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Print the holes under ``args.paths``; skipped paths are reported on stderr.

    Exit status: 0, or with ``--check`` 1 when any hole is found and 2 when a path could not
    be checked (it does not exist, or a file cannot be read or parsed), so a typo or a broken
    file never passes a CI gate.
    """
    out = out or sys.stdout
    if args.paths[:1] == ["fill"] and hasattr(args, "provider"):
        from tensorsketch.canvas.fill.command import run_fill  # noqa: PLC0415 - the fill loads the runtime; listing holes does not

        return run_fill(args, out)
    given = [f"--{n.replace('_', '-')}" for n in _FILL_ONLY if getattr(args, n, None)]
    if given:
        print(
            f"error: {', '.join(given)} only apply to `tensorsketch holes fill`; add `fill` "
            "before the paths.",
            file=sys.stderr,
        )
        return 2
    found = search_holes(*args.paths)
    holes, skipped = found.holes, found.skipped
    for _, message in skipped:
        print(f"warning: {message}", file=sys.stderr)
    many = len(skipped) != 1
    unchecked = (
        f"{len(skipped)} path{'s' if many else ''} could not be checked (see the "
        f"warning{'s' if many else ''} above)"
    )
    if args.json:
        print(json.dumps([h.to_dict() for h in holes], indent=2), file=out)
    else:
        for hole in holes:
            where = f"{hole.file}:{hole.line}" if hole.line is not None else hole.file
            print(f"{where}  {hole.node} — {hole.spec}", file=out)
            if hole.draft is not None:
                failed = len(hole.draft.get("failures") or [])
                checks = "check" if failed == 1 else "checks"
                print(
                    f"    unverified: a draft body failed {failed} {checks}"
                    f" (see {hole.file}.holes.json; `tensorsketch holes fill` tries again)",
                    file=out,
                )
        count = len(holes)
        if count == 0 and not skipped:
            summary = "no holes: every node has code"
        elif count == 0:
            summary = f"no holes in the files that were read, but {unchecked}"
        else:
            summary = f"{count} nodes need code" if count != 1 else "1 node needs code"
            if skipped:
                summary += f"; {unchecked}"
        print(summary, file=out)
    if args.check and skipped:
        names = ", ".join(repr(path) for path, _ in skipped)
        print(
            f"error: --check failed: could not check {names} (missing, unreadable or not valid "
            f"Python); fix {'them' if many else 'it'} (a typo in a path? a syntax error?) so the "
            "check reads every file it is given.",
            file=sys.stderr,
        )
        return 2
    return 1 if args.check and holes else 0


def configure_studio(parser: argparse.ArgumentParser, *, with_file: bool = True) -> None:
    """Arguments of the Studio (``tensorsketch studio`` and ``python -m tensorsketch.canvas``)."""
    if with_file:
        parser.add_argument("file", help="the Python file whose graph to open")
    parser.add_argument("--port", type=int, default=8765, help="port on 127.0.0.1 (default 8765)")
    parser.add_argument("--graph", help="which graph of the file (its variable name)")
    parser.add_argument(
        "--project",
        help="folder searched for holes (default: the file's git repository root, else its folder)",
    )
    parser.add_argument("--open", action="store_true", help="open the page in a web browser")
    parser.add_argument(
        "--backend",
        help="turn on the debugger over this durable backend: a URL (sqlite:///runs.db, "
        "postgresql://..., redis://...) or a backend name; it stays in the server process",
    )
    parser.add_argument(
        "--backend-option",
        action="append",
        metavar="KEY=VALUE",
        help="a keyword argument for the backend (repeatable): schema=NAME for PostgreSQL, "
        "prefix=NAME for Redis, table_prefix=...",
    )
    parser.add_argument(
        "--export",
        choices=("mermaid", "svg"),
        help="print (or with -o write) the graph as Mermaid or SVG and exit, without a server",
    )
    parser.add_argument("-o", "--output", help="with --export: the file to write")
    parser.add_argument(
        "--fill-provider",
        metavar="NAME",
        help='turn on the Studio\'s "fill this hole" action with this provider (its name)',
    )
    parser.add_argument("--fill-model", metavar="MODEL", help="with --fill-provider: the model")
    parser.add_argument(
        "--proposer",
        action="append",
        metavar="NAME=FILE.py:ATTR",
        help="a proposer the Studio's Optimize action offers besides the registered providers "
        "(a chat provider defined in a file, e.g. a scripted one; repeatable)",
    )


def _error(path: Path, exc: CanvasError) -> None:
    """Report a file the engine cannot read: a parse error names the file itself."""
    where = "" if isinstance(exc, SourceParseError) else f"{path}: "
    print(f"error: {where}{exc}", file=sys.stderr)


def _export(args: argparse.Namespace, path: Path, source: str) -> int:
    from tensorsketch.canvas.studio.export import to_mermaid, to_svg  # noqa: PLC0415 - the exporters load when the command runs

    try:
        ir = extract(source, args.graph, filename=str(path))
    except CanvasError as exc:
        _error(path, exc)
        return 1
    text = to_mermaid(ir) if args.export == "mermaid" else to_svg(ir)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def run_studio(args: argparse.Namespace) -> int:
    """Serve the Studio for ``args.file`` until Ctrl-C (or ``--export`` and exit)."""
    path = Path(args.file)
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        print(f"error: cannot read {str(path)!r}: {exc}", file=sys.stderr)
        return 2
    except UnicodeDecodeError:
        source = ""  # a file in another encoding: the Studio reads its coding cookie
    if args.export:
        return _export(args, path, source)
    if not 0 <= args.port <= 65535:
        print(f"error: --port must be 0-65535, got {args.port}", file=sys.stderr)
        return 2
    try:
        from tensorsketch.canvas.studio.server import StudioServer  # noqa: PLC0415 - Starlette and uvicorn load when the Studio starts
    except ImportError as exc:
        print(f"error: {_INSTALL_HINT} ({exc})", file=sys.stderr)
        return 2
    store = None
    if args.backend:
        from tensorsketch.canvas.studio.debug_source import open_backend, parse_options  # noqa: PLC0415 - a store's driver loads when --backend names one

        try:
            store = open_backend(args.backend, parse_options(args.backend_option))
        except Exception as exc:  # say what failed without printing the URL (a password)
            kind = str(args.backend).partition("://")[0]
            text = str(exc).replace(str(args.backend), f"<{kind} URL>")
            print(f"error: --backend ({kind}) could not be opened: {text}", file=sys.stderr)
            return 2
    fill = None
    if args.fill_provider or args.fill_model:
        if not (args.fill_provider and args.fill_model):
            print("error: --fill-provider and --fill-model go together", file=sys.stderr)
            return 2
        from tensorsketch.canvas.studio.fill_routes import FillSettings  # noqa: PLC0415 - with the Studio

        fill = FillSettings(args.fill_provider, args.fill_model)
    proposers: dict[str, str] = {}
    for spec in args.proposer or ():
        name, eq, target = spec.partition("=")
        if not (eq and name.isidentifier() and ".py:" in target):
            print(
                f"error: --proposer takes NAME=FILE.py:ATTR (e.g. scripted=proposer.py:proposer), "
                f"got {spec!r}",
                file=sys.stderr,
            )
            return 2
        proposers[name] = (
            str(Path(target.rpartition(":")[0]).resolve()) + ":" + target.rpartition(":")[2]
        )
    from tensorsketch.canvas.studio.optimize_routes import OptimizeSettings  # noqa: PLC0415 - with the Studio

    server = StudioServer(
        path,
        port=args.port,
        graph=args.graph,
        project=Path(args.project) if args.project else None,
        log_level="warning",
        backend=store,
        backend_url=args.backend,
        fill=fill,
        optimize=OptimizeSettings(proposers=proposers),
    )
    print(server.line(str(args.file)), flush=True)
    try:
        server.serve(open_browser=args.open)
    except KeyboardInterrupt:  # pragma: no cover - uvicorn handles SIGINT itself
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tensorsketch.canvas``: the Studio, or the IR (``--ir``), or holes."""
    parser = argparse.ArgumentParser(
        prog="python -m tensorsketch.canvas",
        description=(
            "Open a Python file's graph in TensorSketch Studio; with --ir print its graph IR "
            "(JSON), with --holes list the nodes that still need code, with --export print it "
            "as Mermaid or SVG."
        ),
    )
    parser.add_argument("--holes", action="store_true", help=HOLES_HELP)
    parser.add_argument("--ir", action="store_true", help="print the graph IR (JSON) and exit")
    parser.add_argument("--all", action="store_true", help="with --ir: print every graph")
    parser.add_argument("--json", action="store_true", help="with --holes: print JSON")
    parser.add_argument("--check", action="store_true", help=f"with --holes: {CHECK_HELP}")
    configure_studio(parser, with_file=False)
    parser.add_argument("paths", nargs="*", help="the file to open (with --holes: files/dirs)")
    args = parser.parse_args(argv)
    if args.holes:
        args.paths = args.paths or ["."]
        return run_holes(args)
    if len(args.paths) != 1:
        parser.error(
            "give exactly one Python file to open (or --ir FILE to print its IR, --holes "
            "[paths] to list holes)"
        )
    if not args.ir:
        args.file = args.paths[0]
        return run_studio(args)
    path = Path(args.paths[0])
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        print(f"error: cannot read {str(path)!r}: {exc}", file=sys.stderr)
        return 2
    # subgraphs imported from other modules of the project are read (and nested) as well
    from tensorsketch.canvas.studio.app import project_root  # noqa: PLC0415 - git runs only here

    where = {"path": path, "root": Path(args.project) if args.project else project_root(path)}
    try:
        if args.all:
            irs = extract_all(source, filename=str(path), **where)
            data: object = [ir.to_dict() for ir in irs]
        else:
            data = extract(source, args.graph, filename=str(path), **where).to_dict()
    except CanvasError as exc:
        _error(path, exc)
        return 1
    print(json.dumps(data, indent=2))
    return 0
