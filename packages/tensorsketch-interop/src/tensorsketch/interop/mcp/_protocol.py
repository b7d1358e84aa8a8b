"""The ``mcp`` serving protocol: a graph as one MCP tool, beside the other protocols.

``serve(graph, protocols=["openai", "mcp"])`` (or ``tensorsketch serve ... --protocol mcp``)
mounts the graph's streamable-HTTP MCP endpoint at ``/mcp`` on the same app as the others; the
interop plugin registers it when the ``mcp`` extra is installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tensorsketch.interop.mcp._graph import graph_tool, thread_state_resource
from tensorsketch.interop.mcp._server import MCPApp, mcp_app

if TYPE_CHECKING:
    from tensorsketch.observability.tracing import Tracer
    from tensorsketch.pregel.compiled import CompiledGraph
    from tensorsketch.runtime.backends.base import Backend


def mcp_protocol(
    graph: CompiledGraph[Any],
    *,
    backend: Backend | None = None,
    tracer: Tracer | None = None,
    deps: Any = None,
) -> MCPApp:
    """``graph`` as one MCP tool (:func:`graph_tool`) served over streamable HTTP at the
    mount's root; with ``backend=``, the calls of one MCP session share a durable thread,
    whose state the client can read as a resource (:func:`thread_state_resource`)."""
    exposed = graph_tool(graph, backend=backend, tracer=tracer, deps=deps)
    resources = [] if backend is None else [thread_state_resource(graph, backend)]
    return mcp_app([exposed], name=exposed.name, path="/", tracer=tracer, resources=resources)
