"""``tensorsketch mcp``: serve tools or a graph over MCP, or list a server's tools.

``tensorsketch mcp serve module:attr [--http --port N]`` serves what ``attr`` names: a list of
tools (with any ``@resource``/``@prompt`` functions among them), one tool, a compiled graph
(as one :func:`graph_tool`), or a ready ``mcp.server.Server``.
``tensorsketch mcp tools -- COMMAND ...`` (or ``--url URL``) connects to a server and prints
its tools: a quick check before wiring a server into an agent. The arguments are declared in
the plugin module (``tensorsketch._plugins.interop``), so building the CLI never imports the SDK.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import uvicorn
from mcp.server import Server
from mcp.server.stdio import stdio_server

from tensorsketch.cli import load_target
from tensorsketch.interop.mcp._errors import MCPError
from tensorsketch.interop.mcp._graph import graph_tool
from tensorsketch.interop.mcp._served import MCPPrompt, MCPResource
from tensorsketch.interop.mcp._server import MCPApp, build_mcp_server
from tensorsketch.interop.mcp._session import (
    TIMEOUT_KNOB,
    MCPSession,
    http_session,
    stdio_session,
)
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.tools import Tool

__all__ = ["load_target", "run"]


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "mcp_command", None)
    if action == "serve":
        return _serve(args)
    if action == "tools":
        return _tools(args)
    print("usage: tensorsketch mcp {serve,tools} ... (see `tensorsketch mcp -h`)", file=sys.stderr)
    return 2


# -- serve ------------------------------------------------------------------------------------


def _as_server(target: Any, name: str) -> Server[Any]:
    if isinstance(target, Server):
        return target
    if isinstance(target, CompiledGraph):
        return build_mcp_server([graph_tool(target, name=_tool_name(name))], name)
    if isinstance(target, Tool):
        return build_mcp_server([target], name)
    if isinstance(target, list | tuple) and target:
        resources = [t for t in target if isinstance(t, MCPResource)]
        prompts = [t for t in target if isinstance(t, MCPPrompt)]
        tools = [t for t in target if not isinstance(t, MCPResource | MCPPrompt)]
        return build_mcp_server(tools, name, resources=resources, prompts=prompts)
    msg = (
        f"cannot serve {target!r}: point at a list of tools, a tool, a compiled graph or an "
        "`mcp.server.Server`."
    )
    raise TypeError(msg)


def _tool_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:64] or "graph"


def _serve(args: argparse.Namespace) -> int:
    try:
        target = load_target(args.target)
        name = args.name or args.target.rpartition(":")[2]
        server = _as_server(target, name)
    except (ValueError, TypeError, AttributeError, ImportError, OSError) as exc:
        print(f"tensorsketch mcp serve: {exc}", file=sys.stderr)
        return 2
    if not args.http:
        asyncio.run(_serve_stdio(server))
        return 0
    app = MCPApp(server, server.streamable_http_app(streamable_http_path=args.path))
    print(f"serving MCP at http://{args.host}:{args.port}{args.path}", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


async def _serve_stdio(server: Server[Any]) -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


# -- tools ------------------------------------------------------------------------------------


def _tools(args: argparse.Namespace) -> int:
    command = list(args.server)
    if command[:1] == ["--"]:
        command = command[1:]
    if bool(command) == bool(args.url):
        print(
            "tensorsketch mcp tools: give a server command after `--` "
            "(`tensorsketch mcp tools -- python server.py`) or `--url URL`.",
            file=sys.stderr,
        )
        return 2
    knob = TIMEOUT_KNOB.set("--timeout")  # what a timeout error tells the user to raise
    try:
        return asyncio.run(_list(args, command))
    except (MCPError, OSError) as exc:
        print(f"tensorsketch mcp tools: {exc}", file=sys.stderr)
        return 1
    finally:
        TIMEOUT_KNOB.reset(knob)


async def _list(args: argparse.Namespace, command: list[str]) -> int:
    if args.url:
        async with http_session(args.url, timeout=args.timeout) as session:
            return await _print_tools(session, args.json)
    async with stdio_session(command[0], *command[1:], timeout=args.timeout) as session:
        return await _print_tools(session, args.json)


async def _print_tools(session: MCPSession, as_json: bool) -> int:
    tools = await session.list_tools()
    if as_json:
        dumped = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
        print(json.dumps(dumped, indent=2, sort_keys=True))
        return 0
    print(f"{session.name} (MCP {session.protocol_version}): {len(tools)} tools")
    for found in tools:
        props = found.input_schema.get("properties") or {}
        required = set(found.input_schema.get("required") or ())
        params = ", ".join(
            f"{key}{'' if key in required else '?'}: {_type_of(value)}"
            for key, value in props.items()
        )
        summary = (found.description or "").strip().splitlines()
        print(f"  {found.name}({params})" + (f"  {summary[0]}" if summary else ""))
    return 0


def _type_of(schema: Any) -> str:
    """A parameter's type in a word: its JSON type, a union, or the name a ``$ref`` points
    at (``#/$defs/Point`` -> ``Point``: a model argument)."""
    if not isinstance(schema, dict):
        return "any"
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref:
        return ref.rsplit("/", 1)[-1]
    if "allOf" in schema and len(schema["allOf"]) == 1:  # pydantic's wrapper of a ref
        return _type_of(schema["allOf"][0])
    kind = schema.get("type")
    if isinstance(kind, list):
        return "|".join(str(k) for k in kind)
    if kind:
        return str(kind)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return "|".join(_type_of(s) for s in schema[key])
    return "any"
