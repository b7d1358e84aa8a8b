"""``graph_tool``: a whole graph (or agent) as one tool an MCP client can call.

The tool's input schema is the part of the state the graph starts from (the fields its
entry nodes read), its output schema the rest of the final state; each call is one run of
the graph; its nodes' ``ctx.emit("progress", ...)`` and ``ctx.emit("log", ...)`` reach the
MCP client as notifications. With a ``backend`` the runs are durable, one thread per MCP
session, so a client that calls an agent twice in one session continues the same
conversation.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Literal

from tensorsketch.interop.mcp._notify import current_request, forward_event
from tensorsketch.interop.mcp._served import MCPResource, resource
from tensorsketch.interop.mcp._server import mcp_session_id, serving_tracer
from tensorsketch.interrupts import run_info
from tensorsketch.observability.tracing import Tracer
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.tools import Tool

__all__ = ["THREAD_STATE_URI", "GraphTool", "graph_tool", "thread_state_resource"]

#: Where :func:`thread_state_resource` serves a thread's state by default.
THREAD_STATE_URI = "tensorsketch://threads/{thread_id}/state"


class GraphTool(Tool):
    """A :class:`~tensorsketch.Tool` that runs a graph; ``output_schema`` describes its
    result, which :func:`build_mcp_server` advertises and returns as structured content."""

    __slots__ = ("graph", "inputs", "output_schema", "outputs")

    graph: CompiledGraph[Any]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    output_schema: dict[str, Any]


def graph_tool(
    graph: CompiledGraph[Any],
    name: str | None = None,
    description: str | None = None,
    *,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    backend: Backend | None = None,
    thread_prefix: str = "mcp",
    tracer: Tracer | None = None,
    max_steps: int = 25,
    deps: Any = None,
) -> GraphTool:
    """Expose ``graph`` as one tool: the arguments seed its state, the result is its state.

    :param inputs: the state fields a caller passes (default: what the entry nodes read).
    :param outputs: the state fields returned (default: every other field).
    :param backend: make each call a durable run, in thread ``{thread_prefix}-{session}``
        for the calling MCP session (outside an MCP server, every call gets a new thread).
    :param tracer: trace each run (inside :func:`build_mcp_server`'s ``tracer`` span when
        given there instead).
    :param deps: what every call's run reads as ``ctx.deps`` (a pool, a client).
    """
    if not isinstance(graph, CompiledGraph):
        msg = f"graph_tool() needs a compiled graph (`graph.compile()`), got {graph!r}."
        raise TypeError(msg)
    spec = graph.spec
    fields = spec.field_names
    chosen_in = tuple(inputs) if inputs is not None else _entry_reads(graph)
    chosen_out = (
        tuple(outputs) if outputs is not None else tuple(f for f in fields if f not in chosen_in)
    )
    for label, chosen in (("inputs", chosen_in), ("outputs", chosen_out)):
        unknown = [f for f in chosen if f not in spec.field_set]
        if unknown:
            msg = f"graph_tool({label}=...) names {unknown}, not fields of the state {fields}."
            raise ValueError(msg)
    input_schema = _schema(graph, chosen_in, "validation", required=spec.required)
    output_schema = _schema(graph, chosen_out, "serialization", required=chosen_out)
    doc = description or _state_summary(graph)
    tool_name = name or graph.name

    async def run(args: dict[str, Any]) -> dict[str, Any]:
        thread_id: str | None = None
        if backend is not None:
            session = mcp_session_id()
            thread_id = f"{thread_prefix}-{session or _fresh()}"
        options: dict[str, Any] = {
            "thread_id": thread_id,
            "backend": backend,
            "tracer": tracer if tracer is not None else serving_tracer(),
            "max_steps": max_steps,
            "deps": deps,
        }
        if current_request.get() is None:
            state = await graph.invoke(args, **options)
            info = run_info(state)
            waiting = [f"{i.kind} {i.id!r}" for i in info.interrupts]
            if info.status != "suspended":
                waiting = []
            values: dict[str, Any] | None = state.model_dump(mode="json", include=set(chosen_out))
        else:
            waiting, values = await _stream_forwarding(graph, args, options, chosen_out)
        if waiting or values is None:
            msg = (
                f"the graph {graph.name!r} suspended waiting for {', '.join(waiting)} (thread "
                f"{thread_id!r}); it needs a decision an MCP call cannot give."
            )
            raise RuntimeError(msg)
        return values

    tool = GraphTool.from_schema(
        tool_name, doc or f"Run the {graph.name} graph.", input_schema, run
    )
    assert isinstance(tool, GraphTool)
    tool.graph = graph
    tool.inputs = chosen_in
    tool.outputs = chosen_out
    tool.output_schema = output_schema
    return tool


async def _stream_forwarding(
    graph: CompiledGraph[Any],
    args: dict[str, Any],
    options: dict[str, Any],
    chosen_out: Sequence[str],
) -> tuple[list[str], dict[str, Any] | None]:
    """Run ``graph`` for the MCP call being served, sending its nodes' ``ctx.emit("progress",
    ...)`` and ``ctx.emit("log", ...)`` events (nested graphs' too) to the client as they
    happen. Returns what the run waits for (empty when it finished) and its output fields."""
    waiting: list[str] = []
    final: dict[str, Any] | None = None
    async for event in graph.stream(args, **options):
        if event.type in ("progress", "log"):
            await forward_event(event.type, event.data)
        elif event.namespace:
            continue
        elif event.type == "interrupt":
            found = event.data.get("interrupts", []) if isinstance(event.data, dict) else []
            waiting += [f"{i.get('kind')} {i.get('id')!r}" for i in found]
        elif event.type == "run_end" and isinstance(event.data, dict):
            final = event.data
    if waiting or final is None:
        return waiting, None
    state = graph.state_schema.model_validate(final)
    dumped: dict[str, Any] = state.model_dump(mode="json", include=set(chosen_out))
    return [], dumped


def _state_summary(graph: CompiledGraph[Any]) -> str:
    """The first paragraph of the user's state docstring (not a framework state's, such as
    an agent's ``AgentState``, which would describe TensorSketch rather than the tool)."""
    state = graph.state_schema
    if state.__module__.startswith("tensorsketch."):
        return ""
    return (state.__doc__ or "").strip().split("\n\n")[0]


def _entry_reads(graph: CompiledGraph[Any]) -> tuple[str, ...]:
    spec = graph.spec
    entries = list(spec.entry) or list(spec.nodes)
    reads = {field for node in entries for field, _ in spec.nodes[node].reads}
    ordered = tuple(f for f in spec.field_names if f in reads)
    return ordered or spec.field_names


def _schema(
    graph: CompiledGraph[Any],
    chosen: Sequence[str],
    mode: Literal["validation", "serialization"],
    required: Sequence[str],
) -> dict[str, Any]:
    try:
        full = graph.state_schema.model_json_schema(mode=mode)
    except Exception as exc:
        msg = (
            f"the state of graph {graph.name!r} has a field with no JSON schema ({exc}); "
            "pass graph_tool(inputs=..., outputs=...) naming JSON-friendly fields."
        )
        raise TypeError(msg) from exc
    props = full.get("properties", {})
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {f: props[f] for f in chosen},
        "additionalProperties": False,
    }
    needed = [f for f in chosen if f in required]
    if needed:
        schema["required"] = needed
    if "$defs" in full:
        schema["$defs"] = full["$defs"]
    return schema


def _fresh() -> str:
    return uuid.uuid4().hex


def thread_state_resource(
    graph: CompiledGraph[Any],
    backend: Backend,
    *,
    uri: str = THREAD_STATE_URI,
    thread_prefix: str | None = "mcp",
) -> MCPResource:
    """A resource template serving the durable state of ``graph``'s threads as JSON, read
    from ``backend`` (``tensorsketch://threads/{thread_id}/state``).

    Pass it beside a durable :func:`graph_tool` (``resources=[...]``): a client reads the
    conversation its calls built up, in thread ``mcp-<its session id>``. Only threads named
    ``{thread_prefix}-...`` are served (the ones MCP calls made); ``thread_prefix=None``
    serves every thread of the backend, to anyone who can reach the server.
    """
    if "{thread_id}" not in uri:
        msg = f"thread_state_resource(uri=...) must contain '{{thread_id}}', got {uri!r}."
        raise ValueError(msg)

    async def state(thread_id: str) -> str:
        if thread_prefix is not None and not thread_id.startswith(f"{thread_prefix}-"):
            msg = f"this server serves only threads named '{thread_prefix}-...'"
            raise LookupError(msg)
        found = await graph.aget_state(thread_id, backend)
        if found is None:
            msg = f"the graph {graph.name!r} has no thread {thread_id!r}"
            raise LookupError(msg)
        dumped: str = found.model_dump_json()
        return dumped

    described = f"The durable state of a thread of the {graph.name} graph, as JSON."
    return resource(
        uri, name=f"{graph.name}-thread-state", description=described, mime_type="application/json"
    )(state)
