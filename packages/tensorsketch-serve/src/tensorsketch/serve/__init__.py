"""Serving TensorSketch graphs over standard protocols, as mountable Starlette apps.

- :func:`openai_app` — the OpenAI-compatible API (``/v1/chat/completions``, ``/v1/models``).
- :func:`a2a_app` + :class:`AgentCard` — an A2A agent (1.0 and 0.3), with
  :class:`PushNotifications` to its clients' webhooks; :func:`a2a_tool` — a
  remote A2A agent as a tool (both need the ``a2a`` extra, and load the a2a-sdk on first use).
- :func:`agui_app` — AG-UI (a ``RunAgentInput`` in, the run's UI events out as SSE); it loads
  the ``ag-ui-protocol`` models on first use, not with this package.
- :func:`task_app` — the durable task API over an ``AsyncRunner`` (``/runs``, ``/tasks``,
  SSE events, approvals, signals, cancel, ``/healthz``, ``/metrics`` via :class:`RunMetrics`;
  completion webhooks via :class:`RunWebhooks`, checked by receivers with :func:`sign_webhook`).
- :class:`Authorization` — per-user authorization of the task API: handlers per resource
  and action over :class:`Identity` (what ``authenticate`` returns) and :class:`Access`,
  ownership (:func:`owner_or_admin`) by default.
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

import importlib
from typing import TYPE_CHECKING, Any

from tensorsketch.serve._adapter import ChatAdapter, agent_input, agent_reply, new_turn
from tensorsketch.serve._authorization import (
    Access,
    Authorization,
    Identity,
    owner_or_admin,
    read_by_all_changed_by_admins,
)
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
from tensorsketch.serve._openai import CONVERSATION_HEADER, openai_app
from tensorsketch.serve._protocols import Protocol, protocols, register_protocol, serve
from tensorsketch.serve._threads import thread_info
from tensorsketch.serve.events import run_events

if TYPE_CHECKING:
    from tensorsketch.serve._agui import agui_app as agui_app
    from tensorsketch.serve._metrics import RunMetrics as RunMetrics
    from tensorsketch.serve._run_webhooks import RunWebhooks as RunWebhooks
    from tensorsketch.serve._run_webhooks import sign as sign_webhook
    from tensorsketch.serve._tasks import task_app as task_app

__all__ = [
    "CONVERSATION_HEADER",
    "DEFAULT_MAX_BODY_BYTES",
    "A2AToolError",
    "Access",
    "AgentCard",
    "AgentSkill",
    "Authenticate",
    "Authorization",
    "ChatAdapter",
    "EventStream",
    "Guard",
    "Identity",
    "Protocol",
    "PushNotifications",
    "RunMetrics",
    "RunWebhooks",
    "ServeError",
    "a2a_app",
    "a2a_tool",
    "agent_input",
    "agent_reply",
    "agui_app",
    "json_error",
    "new_turn",
    "openai_app",
    "owner_or_admin",
    "protocols",
    "read_by_all_changed_by_admins",
    "read_json",
    "register_protocol",
    "run_events",
    "serve",
    "sign_webhook",
    "sse",
    "task_app",
    "thread_info",
]

#: Names whose module (and the SDK it needs) loads on first use: ``name -> "module:attribute"``.
_LAZY = {
    "A2AToolError": "tensorsketch.serve.a2a:A2AToolError",
    "AgentCard": "tensorsketch.serve.a2a:AgentCard",
    "AgentSkill": "tensorsketch.serve.a2a:AgentSkill",
    "PushNotifications": "tensorsketch.serve.a2a:PushNotifications",
    "a2a_app": "tensorsketch.serve.a2a:a2a_app",
    "a2a_tool": "tensorsketch.serve.a2a:a2a_tool",
    "agui_app": "tensorsketch.serve._agui:agui_app",
    # prometheus_client loads with the task API, not with this package.
    "RunMetrics": "tensorsketch.serve._metrics:RunMetrics",
    "task_app": "tensorsketch.serve._tasks:task_app",
    "RunWebhooks": "tensorsketch.serve._run_webhooks:RunWebhooks",
    "sign_webhook": "tensorsketch.serve._run_webhooks:sign",
}


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        msg = f"module 'tensorsketch.serve' has no attribute {name!r}"
        raise AttributeError(msg)
    module, attribute = target.split(":")
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value
