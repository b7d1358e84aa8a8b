"""``tensorsketch serve module:attr --protocol NAME --host --port``: run :func:`serve` on uvicorn.

Bound to 127.0.0.1 unless ``--host`` says otherwise: exposing a graph (and the tools it may
run) to the network is a choice to make explicitly.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from tensorsketch.compiled import CompiledGraph
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


def load_graph(target: str) -> CompiledGraph[Any]:
    """Import ``module:attr`` (the working directory is importable, as with uvicorn)."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        msg = f"{target!r} is not MODULE:ATTR; name the module and the graph, e.g. `app:agent`."
        raise ValueError(msg)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name.split(".")[0] and exc.name != module_name:
            raise
        msg = f"cannot import module {module_name!r} from {os.getcwd()}; check the name or cd."
        raise ValueError(msg) from None
    graph: Any = module
    for part in attr.split("."):
        if not hasattr(graph, part):
            msg = f"module {module_name!r} has no attribute {attr!r}."
            raise ValueError(msg)
        graph = getattr(graph, part)
    if not isinstance(graph, CompiledGraph):
        msg = (
            f"{target} is a {type(graph).__name__}, not a compiled graph; point at the result "
            "of `create_agent(...)` or `Graph(...).compile()`."
        )
        raise ValueError(msg)
    return graph


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
