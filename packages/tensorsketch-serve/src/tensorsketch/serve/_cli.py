"""``tensorsketch serve module:attr --protocol NAME --host --port``: run :func:`serve` on uvicorn.

The graph is named as ``module:attr`` or ``path/to/file.py:attr`` (:func:`load_graph`). Bound
to 127.0.0.1 unless ``--host`` says otherwise: exposing a graph (and the tools it may run) to
the network is a choice to make explicitly.
"""

from __future__ import annotations

import argparse
import difflib
import sys

from tensorsketch.cli import load_graph, port
from tensorsketch.errors import RegistryError
from tensorsketch.serve._protocols import protocols, serve

__all__ = ["configure", "load_graph", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "target",
        metavar="MODULE:ATTR",
        help="the compiled graph: `module:attr` or `path/to/file.py:attr`, e.g. app:agent",
    )
    parser.add_argument(
        "--protocol",
        action="append",
        metavar="NAME",
        help=f"a protocol to mount, repeatable ({', '.join(protocols.names())}, or all); "
        "default: openai",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1)")
    parser.add_argument("--port", type=port, default=8000, help="port 0-65535 (default 8000)")
    parser.add_argument("--model", help="the model id the OpenAI-compatible API reports")


def _unknown_protocol(requested: list[str]) -> str | None:
    """What is wrong with the ``--protocol`` names, before the graph is imported."""
    known = protocols.names()
    for name in requested:
        if name != "all" and name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return (
                f"unknown protocol {name!r}{hint}; --protocol takes one of "
                f"{', '.join(known)}, or all."
            )
    return None


def run(args: argparse.Namespace) -> int:
    import uvicorn  # noqa: PLC0415 - uvicorn loads when the server starts

    requested = args.protocol or ["openai"]
    problem = _unknown_protocol(requested)
    if problem is not None:
        print(f"tensorsketch serve: {problem}", file=sys.stderr)
        return 2
    try:
        graph = load_graph(args.target)
        options = {"model": args.model} if args.model else {}
        app = serve(graph, requested, **options)
    except (ValueError, TypeError, RegistryError) as exc:
        print(f"tensorsketch serve: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0
