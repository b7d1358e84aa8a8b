"""What a served tool tells the client while it runs: progress and log messages.

Inside a call served by :func:`~tensorsketch.interop.mcp.build_mcp_server`, a tool reports
with :func:`report_progress` / :func:`log`, or through the ``ctx`` it is handed (a tool with
a ``ctx`` parameter): ``await ctx.emit("progress", {"progress": 1, "total": 3})`` and
``await ctx.emit("log", {"level": "info", "data": "..."})``; any other event goes out as an
``info`` log message from logger ``<event type>``. Outside an MCP call both are no-ops, so
the same tool runs unchanged in an agent.
"""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, get_args

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning

from tensorsketch.context import NO_DEPS, Context
from tensorsketch.effects import EffectLog
from tensorsketch.observability.tracing import Tracer

__all__ = [
    "LEVELS",
    "MCPRunHandle",
    "current_request",
    "forward_event",
    "log",
    "report_progress",
    "tool_context",
]

#: The MCP log levels, least severe first.
LEVELS: tuple[str, ...] = get_args(types.LoggingLevel)
_LEVEL_KEY = "tensorsketch.mcp_log_level"

current_request: ContextVar[ServerRequestContext[Any, Any] | None] = ContextVar(
    "tensorsketch_mcp_request", default=None
)


def _connection_state(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any] | None:
    # The SDK's per-connection scratch dict (see `mcp_session_id`).
    connection = getattr(ctx.session, "_connection", None)
    state = getattr(connection, "state", None)
    return state if isinstance(state, dict) else None


def set_level(ctx: ServerRequestContext[Any, Any], level: str) -> None:
    """Remember the client's ``logging/setLevel`` for this connection."""
    state = _connection_state(ctx)
    if state is not None:
        state[_LEVEL_KEY] = level


async def report_progress(
    progress: float, total: float | None = None, message: str | None = None
) -> None:
    """Tell the client how far the tool call being served has got (``notifications/progress``).

    Sent only when the client asked for progress (a ``progressToken``); a no-op otherwise and
    outside an MCP call. ``progress`` should grow with each report.
    """
    ctx = current_request.get()
    if ctx is None:
        return
    await ctx.session.report_progress(progress, total, message)


async def log(level: str, data: Any, logger: str | None = None) -> None:
    """Send the client a log message (``notifications/message``) from the call being served.

    ``level`` is one of :data:`LEVELS`; messages below the level the client set with
    ``logging/setLevel`` are dropped (on the 2026-07-28 revision the SDK applies the
    request's own opt-in instead). A no-op outside an MCP call.
    """
    if level not in LEVELS:
        msg = f"log level {level!r} is not an MCP level; use one of {list(LEVELS)}."
        raise ValueError(msg)
    ctx = current_request.get()
    if ctx is None:
        return
    state = _connection_state(ctx)
    floor = state.get(_LEVEL_KEY) if state is not None else None
    if isinstance(floor, str) and floor in LEVELS and LEVELS.index(level) < LEVELS.index(floor):
        return
    with warnings.catch_warnings():
        # Deprecated on the 2026-07-28 revision, still what handshake-era clients read.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await ctx.session.send_log_message(level, data, logger, related_request_id=ctx.request_id)  # type: ignore[arg-type]


async def forward_event(type: str, data: Any) -> None:
    """A tool's ``ctx.emit`` event, as the MCP notification it stands for."""
    if type == "progress":
        fields = data if isinstance(data, dict) else {"progress": data}
        await report_progress(
            float(fields.get("progress", 0)), fields.get("total"), fields.get("message")
        )
    elif type == "log":
        fields = data if isinstance(data, dict) else {"data": data}
        await log(str(fields.get("level", "info")), fields.get("data"), fields.get("logger"))
    else:
        await log("info", data, logger=type)


class MCPRunHandle:
    """The run a served tool's ``ctx`` belongs to: one MCP call. Its events go to the client
    as notifications; its effects are kept in memory for the call."""

    namespace: tuple[str, ...] = ()
    thread_id: str | None = None

    def __init__(self, run_id: str, tracer: Tracer, deps: Any = NO_DEPS) -> None:
        self.run_id = run_id
        self.tracer = tracer
        self.deps = deps
        self.effects = EffectLog(None, {})

    @property
    def sink(self) -> Callable[..., Awaitable[None]] | None:
        return forward_event

    async def emit(
        self, type: str, *, node: str | None = None, data: Any = None, step: int | None = None
    ) -> None:
        await forward_event(type, data)


def tool_context(tool_name: str, request_id: Any, tracer: Tracer) -> Context[Any]:
    """The ``ctx`` a served tool with a ``ctx`` parameter is handed."""
    return Context(MCPRunHandle(f"mcp-{request_id}", tracer), tool_name, 0)
