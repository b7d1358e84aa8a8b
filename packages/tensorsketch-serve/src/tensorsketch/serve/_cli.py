"""``tensorsketch serve module:attr --protocol NAME --host --port``: run :func:`serve` on uvicorn.

Bound to 127.0.0.1 unless ``--host`` says otherwise: exposing a graph (and the tools it may
run) to the network is a choice to make explicitly.
"""

from __future__ import annotations

import argparse
import sys

from tensorsketch.cli import load_graph
from tensorsketch.serve._protocols import protocols, serve

__all__ = ["configure", "load_graph", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="MODULE:ATTR", help="the compiled graph, e.g. app:agent")
    parser.add_argument(
        "--protocol",
        action="append",
        metavar="NAME",
        help=f"a protocol to mount, repeatable ({', '.join(protocols.names())}, or all); "
        "default: openai",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--model", help="the model id the OpenAI-compatible API reports")


def run(args: argparse.Namespace) -> int:
    import uvicorn

    try:
        graph = load_graph(args.target)
        options = {"model": args.model} if args.model else {}
        app = serve(graph, args.protocol or ["openai"], **options)
    except (ValueError, TypeError) as exc:
        print(f"tensorsketch serve: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0
