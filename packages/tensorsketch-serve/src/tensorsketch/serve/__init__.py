"""Serving TensorSketch graphs over standard protocols, as mountable Starlette apps.

- :func:`openai_app` — the OpenAI-compatible API (``/v1/chat/completions``, ``/v1/models``).
- :func:`task_app` — the durable task API over an ``AsyncRunner`` (``/runs``, ``/tasks``,
  SSE events, approvals, signals, cancel, ``/healthz``, ``/metrics`` via :class:`RunMetrics`).
- :func:`serve` — several protocols on one app; protocols are named in :data:`protocols`
  (first-party ones and plugins' ``tensorsketch_serve_protocols``).
- :class:`ChatAdapter` (``to_input`` / ``to_reply``) — how a graph that is not an agent maps
  to chat messages.
- The foundation every protocol is built on: :mod:`tensorsketch.serve.events` (a run as
  protocol-neutral events), :class:`EventStream` (SSE that never buffers and cancels the run
  on disconnect), :class:`Guard` (``authenticate`` before the body is read, the body limit),
  :class:`ServeError` / :func:`json_error`.

Importing this package imports Starlette; ``import tensorsketch`` never does, and uvicorn and
the vendor SDKs are not imported here at all.
"""

from __future__ import annotations

from tensorsketch.serve._adapter import ChatAdapter, agent_input, agent_reply, new_turn
from tensorsketch.serve._http import (
    DEFAULT_MAX_BODY_BYTES,
    Authenticate,
    EventStream,
    Guard,
    ServeError,
    json_error,
    read_json,
    sse,
)
from tensorsketch.serve._metrics import RunMetrics
from tensorsketch.serve._openai import CONVERSATION_HEADER, openai_app
from tensorsketch.serve._protocols import Protocol, protocols, register_protocol, serve
from tensorsketch.serve._tasks import task_app
from tensorsketch.serve._threads import thread_info
from tensorsketch.serve.events import run_events

__all__ = [
    "CONVERSATION_HEADER",
    "DEFAULT_MAX_BODY_BYTES",
    "Authenticate",
    "ChatAdapter",
    "EventStream",
    "Guard",
    "Protocol",
    "RunMetrics",
    "ServeError",
    "agent_input",
    "agent_reply",
    "json_error",
    "new_turn",
    "openai_app",
    "protocols",
    "read_json",
    "register_protocol",
    "run_events",
    "serve",
    "sse",
    "task_app",
    "thread_info",
]
