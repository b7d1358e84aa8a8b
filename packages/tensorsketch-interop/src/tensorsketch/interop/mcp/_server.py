"""Serving TensorSketch tools as an MCP server: stdio, streamable HTTP, or in-process.

:func:`build_mcp_server` returns the SDK's low-level ``mcp.server.Server``, configured from
the tools: each tool's own JSON schema is advertised as is (no re-derivation from a
signature, so a raw-schema tool or a :func:`graph_tool` keeps its exact schema) and a call
runs ``tool.run(args)``, which validates first. A tool's failure is a result with
``isError`` the client's model can read; only a request for a tool that does not exist is
a protocol error.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import uuid
import warnings
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextvars import ContextVar
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.exceptions import MCPError as SDKError
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from tensorsketch.agents.options import as_tools
from tensorsketch.errors import ValidationError
from tensorsketch.interop.mcp._catalog import Catalog
from tensorsketch.interop.mcp._notify import current_request, set_level, tool_context
from tensorsketch.interop.mcp._served import MCPPrompt, MCPResource
from tensorsketch.interop.mcp._tools import ATTR_MCP_METHOD, ATTR_MCP_PROTOCOL, ATTR_MCP_SERVER
from tensorsketch.messages import ImageBlock, TextBlock, render_result
from tensorsketch.observability.tracing import (
    ATTR_TOOL_ARGUMENTS,
    ATTR_TOOL_NAME,
    NOOP_TRACER,
    Tracer,
)
from tensorsketch.tools import Tool

__all__ = [
    "MCPApp",
    "build_mcp_server",
    "mcp_app",
    "mcp_session_id",
    "notify_resource_updated",
    "serve_stdio",
    "serving_tracer",
    "to_result",
]

_ATTR_SESSION = "mcp.session.id"
_current = current_request
_tracer: ContextVar[Tracer] = ContextVar("tensorsketch_mcp_tracer", default=NOOP_TRACER)


def mcp_session_id() -> str | None:
    """The MCP session of the tool call being served (``None`` outside one).

    The transport's session id (``Mcp-Session-Id`` on streamable HTTP), otherwise an id kept
    for the life of the connection (a stdio server has one connection per process). On the
    2026-07-28 revision every request is its own connection, so every call gets a new id.
    """
    ctx = _current.get()
    if ctx is None:
        return None
    headers = getattr(ctx.request, "headers", None)
    found = headers.get("mcp-session-id") if headers is not None else None
    if found:
        return str(found)
    # The SDK hands handlers the connection only through the session's private attribute;
    # its `state` dict is documented as per-connection scratch that persists across requests.
    connection = getattr(ctx.session, "_connection", None)
    if connection is None:
        return None
    if connection.session_id:
        return str(connection.session_id)
    state: dict[str, Any] = connection.state
    known: str = state.setdefault("tensorsketch.mcp_session_id", uuid.uuid4().hex)
    return known


def serving_tracer() -> Tracer:
    """The tracer of the MCP server serving this call (the no-op tracer outside one)."""
    return _tracer.get()


def installed_version() -> str:
    """This distribution's version: what a server reports as ``serverInfo.version`` unless
    told otherwise (``"0+unknown"`` when it runs from sources that were never installed)."""
    try:
        return importlib.metadata.version("tensorsketch-interop")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - never installed
        return "0+unknown"


#: Each server's catalog, for :func:`notify_resource_updated`.
_catalogs: weakref.WeakKeyDictionary[Server[Any], Catalog] = weakref.WeakKeyDictionary()


_serving: ContextVar[Catalog | None] = ContextVar("tensorsketch_mcp_catalog", default=None)


async def notify_resource_updated(uri: str, *, server: Server[Any] | None = None) -> None:
    """Tell the clients subscribed to ``uri`` that it changed, so they read it again:
    ``resources/subscribe`` subscribers (up to the 2025-11-25 revision) and
    ``subscriptions/listen`` streams (2026-07-28). Clients that went away are forgotten.

    :param server: the server (a :func:`build_mcp_server`, or ``MCPApp.server``); inside a
        tool call it defaults to the server serving the call.
    """
    catalog = _serving.get() if server is None else _catalogs.get(server)
    if catalog is None:
        msg = (
            "notify_resource_updated() needs server= (a server made by build_mcp_server()) "
            "outside a tool call it serves."
        )
        raise TypeError(msg)
    await catalog.updated(uri)


def build_mcp_server(
    tools: Iterable[Tool | Callable[..., Any]],
    name: str = "tensorsketch",
    *,
    resources: Iterable[MCPResource] = (),
    prompts: Iterable[MCPPrompt] = (),
    version: str | None = None,
    instructions: str | None = None,
    tracer: Tracer | None = None,
) -> Server[Any]:
    """An MCP server (the SDK's low-level ``mcp.server.Server``) that serves ``tools``, and
    the ``resources`` and ``prompts`` made with :func:`resource` / :func:`prompt`.

    Run it over any transport: :func:`serve_stdio`, :func:`mcp_app` (streamable HTTP), the
    SDK's in-memory ``Client(server)``, or ``server.run(read, write, options)`` yourself.
    Clients may set a log level, subscribe to resources (:func:`notify_resource_updated`
    tells them of a change) and ask for completions of prompt and template arguments.

    :param version: ``serverInfo.version`` (default: this distribution's version).
    :param tracer: each call opens a ``tool`` span on it (``execute_tool`` in OpenTelemetry);
        a :func:`graph_tool`'s run nests under it.
    """
    served = as_tools(tools)
    by_name = {t.name: t for t in served}
    listing = [_describe(t) for t in served]
    trace = tracer if tracer is not None else NOOP_TRACER
    catalog = Catalog(resources, prompts)

    async def on_list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listing)

    async def on_call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        found = by_name.get(params.name)
        if found is None:
            msg = f"Unknown tool {params.name!r}; this server has {sorted(by_name)}."
            raise SDKError(types.INVALID_PARAMS, msg)
        token, traced, serving = _current.set(ctx), _tracer.set(trace), _serving.set(catalog)
        try:
            return await _call(found, params.arguments or {}, ctx, trace, name)
        finally:
            _serving.reset(serving)
            _tracer.reset(traced)
            _current.reset(token)

    async def on_set_logging_level(
        ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        set_level(ctx, params.level)
        return types.EmptyResult()

    def input_schema(tool_name: str) -> dict[str, Any] | None:
        found = by_name.get(tool_name)
        return None if found is None else found.json_schema()

    with warnings.catch_warnings():
        # Logging is deprecated on the 2026-07-28 revision; handshake-era clients still use it.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server: Server[Any] = Server(
            name,
            version=installed_version() if version is None else version,
            instructions=instructions,
            get_tool_input_schema=input_schema,
            on_list_tools=on_list_tools,
            on_call_tool=on_call_tool,
            on_set_logging_level=on_set_logging_level,
            **catalog.handlers(),
        )
    _catalogs[server] = catalog
    return server


def _describe(tool: Tool) -> types.Tool:
    output_schema = getattr(tool, "output_schema", None)
    annotations = getattr(tool, "annotations", None)
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.json_schema(),
        output_schema=output_schema if isinstance(output_schema, dict) else None,
        annotations=annotations if isinstance(annotations, types.ToolAnnotations) else None,
    )


async def _call(
    tool: Tool,
    arguments: dict[str, Any],
    ctx: ServerRequestContext[Any, Any],
    tracer: Tracer,
    server: str,
) -> types.CallToolResult:
    attributes: dict[str, Any] = {}
    if tracer.enabled:
        attributes = {
            ATTR_TOOL_NAME: tool.name,
            ATTR_TOOL_ARGUMENTS: json.dumps(arguments, default=str)[:4_000],
            ATTR_MCP_SERVER: server,
            ATTR_MCP_METHOD: "tools/call",
            ATTR_MCP_PROTOCOL: ctx.protocol_version,
        }
        session = mcp_session_id()
        if session is not None:
            attributes[_ATTR_SESSION] = session
    with tracer.span("tool_call", kind="tool", **attributes) as span:
        try:
            value = await tool.run(arguments, tool_context(tool.name, ctx.request_id, tracer))
        except ValidationError as exc:
            return _error(str(exc))
        except Exception as exc:
            span.record_error(exc)
            text = str(exc)
            return _error(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)
    return to_result(value, structured=getattr(tool, "output_schema", None) is not None)


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def to_result(value: Any, *, structured: bool = False) -> types.CallToolResult:
    """A tool's return value as an MCP result: a dict or pydantic model also goes out as
    structured content (with its JSON as text, for clients that read only text). Content
    blocks (``TextBlock``/``ImageBlock``, or the SDK's own, e.g. ``mcp_types.AudioContent``
    and ``EmbeddedResource``) go out as those blocks; a ``CallToolResult`` goes out as is."""
    if isinstance(value, types.CallToolResult):
        return value
    if _is_blocks(value):
        items = value if isinstance(value, list) else [value]
        return types.CallToolResult(content=[_block(item) for item in items])
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, dict) or structured:
        data = json.loads(json.dumps(value, default=str))
        if isinstance(data, dict):
            text = json.dumps(data, sort_keys=True)
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=text)], structured_content=data
            )
    rendered = render_result(value)
    if isinstance(rendered, str):
        return types.CallToolResult(content=[types.TextContent(type="text", text=rendered)])
    return types.CallToolResult(content=[_block(block) for block in rendered])


_SDK_BLOCKS = (
    types.TextContent,
    types.ImageContent,
    types.AudioContent,
    types.EmbeddedResource,
    types.ResourceLink,
)


def _is_blocks(value: Any) -> bool:
    kinds = (TextBlock, ImageBlock, *_SDK_BLOCKS)
    if isinstance(value, list):
        return bool(value) and all(isinstance(v, kinds) for v in value)
    return isinstance(value, kinds)


def _block(item: Any) -> types.ContentBlock:
    if isinstance(item, _SDK_BLOCKS):
        return item
    if isinstance(item, TextBlock):
        return types.TextContent(type="text", text=item.text)
    assert isinstance(item, ImageBlock)
    if item.data is not None:
        return types.ImageContent(
            type="image", data=item.data, mime_type=item.media_type or "image/png"
        )
    return types.TextContent(type="text", text=f"[image {item.url}]")


async def serve_stdio(
    tools: Iterable[Tool | Callable[..., Any]],
    name: str = "tensorsketch",
    *,
    resources: Iterable[MCPResource] = (),
    prompts: Iterable[MCPPrompt] = (),
    version: str | None = None,
    instructions: str | None = None,
    tracer: Tracer | None = None,
) -> None:
    """Serve ``tools`` over this process's stdin/stdout until the client closes it.

    What an MCP client that launches servers (Claude Desktop, an IDE, another agent's
    :func:`stdio_session`) expects. While serving, stray ``print`` output goes to stderr so
    it cannot corrupt the protocol stream.
    """
    server = build_mcp_server(
        tools,
        name,
        resources=resources,
        prompts=prompts,
        version=version,
        instructions=instructions,
        tracer=tracer,
    )
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


# -- streamable HTTP --------------------------------------------------------------------------


class MCPApp:
    """The streamable-HTTP MCP endpoint as an ASGI app (what :func:`mcp_app` returns).

    Run it directly (``uvicorn module:app``) or mount it in a Starlette app
    (``Mount("/tools", app=app)``). Its session manager starts with the ASGI lifespan when
    there is one, and on the first request otherwise (a mounted app gets no lifespan), so
    both work without wiring. :attr:`server` is the underlying MCP server.
    """

    def __init__(self, server: Server[Any], app: Any) -> None:
        self.server = server
        self._app = app
        self._manager = server.session_manager
        self._stop = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._started: asyncio.Future[None] | None = None

    async def _start(self) -> None:
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            self._runner = asyncio.create_task(self._run(self._started), name="mcp-http")
        await asyncio.shield(self._started)

    async def _run(self, started: asyncio.Future[None]) -> None:
        try:
            async with self._manager.run():
                started.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            raise

    async def aclose(self) -> None:
        """Stop the session manager (ends every open MCP session)."""
        self._stop.set()
        if self._runner is not None:
            with contextlib.suppress(BaseException):
                await self._runner

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any = None) -> AsyncIterator[None]:
        """For a parent app that runs lifespans: ``Starlette(..., lifespan=mcp.lifespan)``."""
        await self._start()
        try:
            yield
        finally:
            await self.aclose()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        await self._start()
        await self._app(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self._start()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


def mcp_app(
    tools: Iterable[Tool | Callable[..., Any]],
    name: str = "tensorsketch",
    *,
    path: str = "/mcp",
    resources: Iterable[MCPResource] = (),
    prompts: Iterable[MCPPrompt] = (),
    version: str | None = None,
    instructions: str | None = None,
    tracer: Tracer | None = None,
    stateless: bool = False,
    json_response: bool = False,
    allowed_hosts: Sequence[str] | None = None,
) -> MCPApp:
    """Serve ``tools`` over streamable HTTP at ``path`` (an ASGI app; see :class:`MCPApp`).

    :param stateless: a fresh server session per request (no ``Mcp-Session-Id``), for
        deployments behind a load balancer.
    :param allowed_hosts: ``Host`` values to accept (``"example.com:*"``). By default only
        localhost names are, which protects a local server from DNS rebinding; list your
        public host names when you deploy it.
    """
    server = build_mcp_server(
        tools,
        name,
        resources=resources,
        prompts=prompts,
        version=version,
        instructions=instructions,
        tracer=tracer,
    )
    if allowed_hosts is None:
        security = None  # the SDK's localhost-only default
    else:
        hosts = list(allowed_hosts)
        origins = [f"{scheme}://{host}" for host in hosts for scheme in ("http", "https")]
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
        )
    app = server.streamable_http_app(
        streamable_http_path=path,
        stateless_http=stateless,
        json_response=json_response,
        transport_security=security,
    )
    return MCPApp(server, app)
