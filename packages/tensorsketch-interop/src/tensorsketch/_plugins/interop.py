"""The interop distribution's plugin module (registered under the ``tensorsketch`` group):
the ``otel`` tracer, the ``tensorsketch mcp`` command and the ``mcp`` serving protocol."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from tensorsketch.cli import CliCommand, port, seconds
from tensorsketch.hookspecs import hookimpl

MCP_HELP = "serve tools or a graph over MCP (`mcp serve`), or list a server's tools (`mcp tools`)"


@hookimpl
def tensorsketch_tracers() -> Mapping[str, str]:
    return {"otel": "tensorsketch.observability.otel:OTelTracer"}


@hookimpl
def tensorsketch_serve_protocols() -> Mapping[str, str]:
    """``mcp``: the graph as one MCP tool at ``/mcp`` (only where the ``mcp`` extra is
    installed, so ``serve(graph, "all")`` never names a protocol that cannot load)."""
    if importlib.util.find_spec("mcp") is None:
        return {}
    return {"mcp": "tensorsketch.interop.mcp._protocol:mcp_protocol"}


# The arguments live here and the MCP SDK loads only when the command runs, so building the
# `tensorsketch` parser (for any subcommand) never imports it, even where it is not installed.
def _configure_mcp(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="mcp_command", metavar="ACTION")
    serve = sub.add_parser("serve", help="serve tools or a graph as an MCP server")
    serve.add_argument("target", help="what to serve: `module:attr` or `path/to/file.py:attr`")
    serve.add_argument("--name", help="the server's name (default: the attribute's name)")
    serve.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP host (default 127.0.0.1)")
    serve.add_argument("--port", type=port, default=8000, help="HTTP port (default 8000)")
    serve.add_argument("--path", default="/mcp", help="HTTP endpoint path (default /mcp)")
    tools = sub.add_parser("tools", help="list the tools of an MCP server")
    tools.add_argument(
        "--url", type=_http_url, help="a streamable-HTTP endpoint instead of a command"
    )
    tools.add_argument("--json", action="store_true", help="print the tool list as JSON")
    tools.add_argument("--timeout", type=seconds, default=30.0, help="seconds to wait (30)")
    tools.add_argument("server", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")


def _http_url(text: str) -> str:
    """An ``argparse`` ``type=`` for ``--url``: an ``http://`` or ``https://`` URL with a host."""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        msg = f"must be an http:// or https:// URL such as http://127.0.0.1:8000/mcp, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return text


def _run_mcp(args: argparse.Namespace) -> int:
    try:
        from tensorsketch.interop.mcp._cli import run  # noqa: PLC0415 - a command's module loads when it runs
    except ModuleNotFoundError as exc:  # the `mcp` extra is not installed
        print(f"tensorsketch mcp: {exc}", file=sys.stderr)
        return 2
    return run(args)


@hookimpl
def tensorsketch_cli_commands() -> Sequence[CliCommand]:
    """``tensorsketch mcp serve module:attr [--http]`` and ``tensorsketch mcp tools -- CMD``."""
    return [CliCommand(name="mcp", help=MCP_HELP, configure=_configure_mcp, run=_run_mcp)]
