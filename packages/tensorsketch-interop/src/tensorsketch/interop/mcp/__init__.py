"""MCP interop: use any MCP server's tools in an agent, serve tools and graphs over MCP.

Built on the official ``mcp`` SDK (2.x), imported only when this module is::

    pip install "tensorsketch-interop[mcp]"     # or: pip install "tensorsketch-core[mcp]"

Client: :func:`stdio_session` / :func:`http_session` / :func:`memory_session` connect,
:func:`mcp_tools` wraps the server's tools, :func:`read_resource`, :func:`watch_resource`,
:func:`get_prompt` and :func:`complete` fetch the rest. Server: :func:`build_mcp_server`,
:func:`serve_stdio`, :func:`mcp_app` (streamable HTTP) serve tools, :func:`resource` and
:func:`prompt` functions; :func:`graph_tool` exposes a whole graph as one tool and
:func:`thread_state_resource` its durable threads' state, :func:`memory_resources` a memory
namespace's items; tools report with
:func:`report_progress` and :func:`log`.
"""

from __future__ import annotations

try:
    import mcp as _sdk
    from mcp import Client as _Client
except ImportError as _exc:  # pragma: no cover - exercised in a venv without the extra
    _found = getattr(_exc, "name", None)
    _msg = (
        "tensorsketch.interop.mcp needs the official MCP SDK 2.x (`mcp>=2`), "
        + ("which is not installed" if _found == "mcp" else f"which failed to import ({_exc})")
        + '. Install it with `pip install "tensorsketch-interop[mcp]"` '
        '(or `pip install "tensorsketch[all]"` for everything).'
    )
    raise ModuleNotFoundError(_msg, name="mcp") from _exc

from tensorsketch.interop.mcp._errors import (
    MCPConnectionError,
    MCPError,
    MCPTimeoutError,
    MCPToolError,
)
from tensorsketch.interop.mcp._graph import (
    THREAD_STATE_URI,
    GraphTool,
    graph_tool,
    thread_state_resource,
)
from tensorsketch.interop.mcp._memory import memory_resources
from tensorsketch.interop.mcp._notify import LEVELS, log, report_progress
from tensorsketch.interop.mcp._resources import (
    complete,
    get_prompt,
    list_prompts,
    list_resource_templates,
    list_resources,
    read_resource,
    watch_resource,
)
from tensorsketch.interop.mcp._served import Completer, MCPPrompt, MCPResource, prompt, resource
from tensorsketch.interop.mcp._server import (
    MCPApp,
    build_mcp_server,
    mcp_app,
    mcp_session_id,
    notify_resource_updated,
    serve_stdio,
)
from tensorsketch.interop.mcp._session import (
    DEFAULT_TIMEOUT,
    MCPSession,
    http_session,
    memory_session,
    stdio_session,
)
from tensorsketch.interop.mcp._tools import (
    ATTR_MCP_METHOD,
    ATTR_MCP_PROTOCOL,
    ATTR_MCP_SERVER,
    ATTR_MCP_TOOL,
    DEFAULT_MAX_RESULT_CHARS,
    MCPTool,
    mcp_tools,
)

del _sdk

__all__ = [
    "ATTR_MCP_METHOD",
    "ATTR_MCP_PROTOCOL",
    "ATTR_MCP_SERVER",
    "ATTR_MCP_TOOL",
    "DEFAULT_MAX_RESULT_CHARS",
    "DEFAULT_TIMEOUT",
    "LEVELS",
    "THREAD_STATE_URI",
    "Completer",
    "GraphTool",
    "MCPApp",
    "MCPConnectionError",
    "MCPError",
    "MCPPrompt",
    "MCPResource",
    "MCPSession",
    "MCPTimeoutError",
    "MCPTool",
    "MCPToolError",
    "build_mcp_server",
    "complete",
    "get_prompt",
    "graph_tool",
    "http_session",
    "list_prompts",
    "list_resource_templates",
    "list_resources",
    "log",
    "mcp_app",
    "mcp_session_id",
    "mcp_tools",
    "memory_resources",
    "memory_session",
    "notify_resource_updated",
    "prompt",
    "read_resource",
    "report_progress",
    "resource",
    "serve_stdio",
    "stdio_session",
    "thread_state_resource",
    "watch_resource",
]
