"""``mcp_tools``: a server's tools as TensorSketch ``Tool`` objects.

Each remote tool becomes a raw-schema tool (:meth:`Tool.from_schema`): the model sees the
server's own JSON schema, arguments are validated against it before anything is sent (a
mistake comes back to the model as a validation error, and the server is never called), and
the call runs inside the agent's journaled, traced tool step like any local tool — so a
resumed run replays the recorded result instead of calling the server again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

import mcp_types as types

from tensorsketch.context import Context
from tensorsketch.interop.mcp._errors import MCPToolError
from tensorsketch.interop.mcp._session import DEFAULT_TIMEOUT, MCPSession, RemoteSession
from tensorsketch.messages import ImageBlock, TextBlock
from tensorsketch.observability.tracing import current_span
from tensorsketch.tools import Tool

__all__ = [
    "ATTR_MCP_METHOD",
    "ATTR_MCP_PROTOCOL",
    "ATTR_MCP_SERVER",
    "ATTR_MCP_TOOL",
    "DEFAULT_MAX_RESULT_CHARS",
    "MCPTool",
    "mcp_tools",
    "result_value",
]

#: Span attributes an MCP tool call adds to its ``tool`` span (``execute_tool`` in OTel).
#: ``mcp.method.name``/``mcp.protocol.version`` are the OpenTelemetry MCP conventions';
#: ``mcp.server.name`` and ``mcp.tool.name`` (the server's own name for the tool, before
#: any ``prefix``) are TensorSketch's.
ATTR_MCP_SERVER = "mcp.server.name"
ATTR_MCP_METHOD = "mcp.method.name"
ATTR_MCP_PROTOCOL = "mcp.protocol.version"
ATTR_MCP_TOOL = "mcp.tool.name"
_ATTR_TRANSPORT = "network.transport"

#: Results longer than this (in characters) are cut, with a note saying so.
DEFAULT_MAX_RESULT_CHARS = 100_000

_INVALID = re.compile(r"[^A-Za-z0-9_-]")


class MCPTool(Tool):
    """A :class:`~tensorsketch.Tool` that calls a tool on an MCP server.

    Beyond a ``Tool``: ``remote_name`` (the server's name for it, before any prefix),
    ``annotations`` (the server's hints — ``read_only_hint``, ``destructive_hint``, ...),
    ``output_schema`` and ``session``.
    """

    __slots__ = ("annotations", "output_schema", "remote_name", "session")

    annotations: types.ToolAnnotations | None
    output_schema: dict[str, Any] | None
    remote_name: str
    session: MCPSession


async def mcp_tools(
    session: MCPSession | RemoteSession,
    *,
    prefix: str | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    requires_approval: bool | Collection[str] | Callable[[types.Tool], bool] = False,
    include: Collection[str] | None = None,
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
) -> list[Tool]:
    """Wrap every tool of an MCP server as a TensorSketch :class:`~tensorsketch.Tool`.

    :param session: from :func:`stdio_session` / :func:`http_session` /
        :func:`memory_session`, or an SDK ``mcp.Client`` / ``mcp.ClientSession`` you opened.
    :param prefix: prepended to every tool name (``prefix="github_"``), to keep two servers'
        ``search`` tools apart.
    :param timeout: seconds to wait for each call's answer; a server that does not answer
        in time fails the call (the model reads the error, the run goes on).
    :param requires_approval: ``True`` for every tool, a collection of (server-side) tool
        names, or a predicate over the server's tool description.
    :param include: only these (server-side) tool names.
    :param max_result_chars: results longer than this are cut, with a note for the model.

    A result is structured content (a dict) when the server returns one, otherwise the text
    of its content blocks (images stay images). A result the server marks ``isError``
    raises :class:`MCPToolError`, which an agent shows the model as an error result.

    While a call runs, the server's progress reports become ``"progress"`` events of the
    calling run's stream (``{"tool", "progress", "total", "message"}``), and its log messages
    go to the ``tensorsketch.interop.mcp.server`` logger (or ``session.on_log``).
    """
    if max_result_chars < 1:
        msg = f"max_result_chars must be at least 1, got {max_result_chars}."
        raise ValueError(msg)
    connection = MCPSession.of(session)
    listed = await connection.list_tools()
    if include is not None:
        missing = sorted(set(include) - {t.name for t in listed})
        if missing:
            msg = (
                f"include= names tools the MCP server {connection.name} does not have: "
                f"{missing}; it has {sorted(t.name for t in listed)}."
            )
            raise ValueError(msg)
        listed = [t for t in listed if t.name in include]
    tools: list[Tool] = []
    seen: dict[str, str] = {}
    for remote in listed:
        name = _local_name(remote.name, prefix)
        if name in seen:
            msg = (
                f"the MCP server {connection.name} has tools {seen[name]!r} and {remote.name!r}, "
                f"which both become {name!r}; pass include= to pick one."
            )
            raise ValueError(msg)
        seen[name] = remote.name
        approval = _needs_approval(requires_approval, remote)
        tools.append(_wrap(connection, remote, name, timeout, approval, max_result_chars))
    return tools


def _local_name(remote: str, prefix: str | None) -> str:
    name = _INVALID.sub("_", f"{prefix or ''}{remote}")
    return name[:64] or "tool"


def _needs_approval(
    rule: bool | Collection[str] | Callable[[types.Tool], bool], remote: types.Tool
) -> bool:
    if isinstance(rule, bool):
        return rule
    if callable(rule):
        return bool(rule(remote))
    return remote.name in rule


def _wrap(
    session: MCPSession,
    remote: types.Tool,
    name: str,
    timeout: float | None,
    requires_approval: bool,
    limit: int,
) -> MCPTool:
    remote_name = remote.name
    wrapped = remote.output_schema

    async def call(args: dict[str, Any], ctx: Context | None = None) -> Any:
        span = current_span.get()
        if span is not None and span.kind == "tool":
            span.set_attributes(
                **{
                    ATTR_MCP_SERVER: session.name,
                    ATTR_MCP_METHOD: "tools/call",
                    ATTR_MCP_TOOL: remote_name,
                }
            )
            if session.protocol_version:
                span.set_attribute(ATTR_MCP_PROTOCOL, session.protocol_version)
            if session.transport:
                span.set_attribute(_ATTR_TRANSPORT, session.transport)
        on_progress = None
        if ctx is not None and ctx.streaming:
            run = ctx

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                # The server's progress reports, as events of the calling run's stream.
                report = {"tool": name, "progress": progress, "total": total, "message": message}
                await run.emit("progress", report)

        result = await session.call_tool(remote_name, args, timeout=timeout, progress=on_progress)
        return result_value(
            result, limit=limit, server=session.name, tool=remote_name, output_schema=wrapped
        )

    description = remote.description or remote.title or f"The {remote_name} tool."
    tool = MCPTool.from_schema(
        name, description, remote.input_schema, call, requires_approval=requires_approval
    )
    assert isinstance(tool, MCPTool)
    tool.remote_name = remote_name
    tool.annotations = remote.annotations
    tool.output_schema = remote.output_schema
    tool.session = session
    return tool


# -- results ----------------------------------------------------------------------------------


class _Capped:
    """Keeps text up to ``limit`` characters; counts (but drops) the rest, so a huge result
    never becomes a huge string in the transcript, the journal or the trace."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.kept = 0
        self.total = 0

    def add(self, text: str) -> str:
        """Take ``text``; return the part of it that is kept."""
        self.total += len(text)
        piece = text[: max(self.limit - self.kept, 0)]
        if piece:
            self.parts.append(piece)
            self.kept += len(piece)
        return piece

    def note(self) -> str:
        if self.total <= self.kept:
            return ""
        return (
            f"[truncated: the result has {self.total} characters; only the first "
            f"{self.kept} are shown]"
        )

    def text(self) -> str:
        note = self.note()
        return "".join(self.parts) + (f"\n{note}" if note else "")


def result_value(
    result: types.CallToolResult,
    *,
    limit: int = DEFAULT_MAX_RESULT_CHARS,
    server: str = "",
    tool: str = "",
    output_schema: Mapping[str, Any] | None = None,
) -> Any:
    """A tool result as the Python value a TensorSketch tool returns (see :func:`mcp_tools`).

    A result the server wrapped as ``{"result": value}`` because its output is not an object
    (what SDK servers do for a function returning ``str``, ``int``, a list) is unwrapped, when
    the tool's ``output_schema`` says it is that wrapper.
    """
    if result.is_error:
        text = _content_text(result.content, min(limit, 4_000))
        where = f"the MCP tool {tool!r} on {server}" if tool else "the MCP tool"
        raise MCPToolError(f"{where} failed: {text or '(no message)'}", server=server or None)
    structured: Any = result.structured_content
    if structured is not None and _is_wrapper(output_schema) and set(structured) == {"result"}:
        structured = structured["result"]
        if isinstance(structured, str):
            capped = _Capped(limit)
            capped.add(structured)
            return capped.text()
    if structured is not None:
        encoded = json.dumps(structured, sort_keys=True, default=str)
        if len(encoded) <= limit:
            return structured
        capped = _Capped(limit)
        capped.add(encoded)
        return capped.text()
    if any(isinstance(b, types.ImageContent) for b in result.content):
        blocks: list[TextBlock | ImageBlock] = []
        capped = _Capped(limit)
        for block in result.content:
            if isinstance(block, types.ImageContent):
                blocks.append(ImageBlock(data=block.data, media_type=block.mime_type))
            elif piece := capped.add(_block_text(block)):
                blocks.append(TextBlock(text=piece))
        if note := capped.note():
            blocks.append(TextBlock(text=note))
        return blocks
    return _content_text(result.content, limit)


def _is_wrapper(schema: Mapping[str, Any] | None) -> bool:
    """Whether an output schema is the ``{"result": ...}`` wrapper of a non-object output."""
    if not schema:
        return False
    props = schema.get("properties")
    return (
        isinstance(props, Mapping)
        and set(props) == {"result"}
        and schema.get("required") == ["result"]
    )


def _content_text(content: list[types.ContentBlock], limit: int) -> str:
    capped = _Capped(limit)
    for i, block in enumerate(content):
        if i:
            capped.add("\n")
        capped.add(_block_text(block))
    return capped.text()


def _block_text(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.EmbeddedResource):
        inner = block.resource
        if isinstance(inner, types.TextResourceContents):
            return inner.text
        return f"[binary resource {inner.uri} ({inner.mime_type or 'unknown type'})]"
    if isinstance(block, types.ResourceLink):
        return f"[resource {block.uri}" + (f": {block.description}]" if block.description else "]")
    if isinstance(block, types.ImageContent):
        return f"[image ({block.mime_type})]"
    if isinstance(block, types.AudioContent):
        return f"[audio ({block.mime_type})]"
    return json.dumps(_dump(block), sort_keys=True)


def _dump(block: Any) -> Mapping[str, Any]:
    dumped: Mapping[str, Any] = block.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped
