"""A2A (Agent2Agent): serve a graph as an A2A agent, and call remote agents as tools.

``a2a_app(graph, card=AgentCard(...))`` answers A2A 1.0 and 0.3 clients; ``a2a_tool(url)``
consumes any A2A agent. Needs the ``a2a`` extra (``pip install "tensorsketch-serve[a2a]"``;
``pip install tensorsketch`` includes it).
"""

try:
    import a2a.types  # the a2a-sdk: its wire types and its client
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    msg = (
        "tensorsketch.serve.a2a needs the a2a-sdk; install it with `pip install "
        '"tensorsketch-serve[a2a]"` (`pip install tensorsketch` includes it).'
    )
    raise ImportError(msg) from exc

from tensorsketch.serve.a2a._app import a2a_app
from tensorsketch.serve.a2a._card import AgentCard, AgentSkill
from tensorsketch.serve.a2a._push import PushNotifications
from tensorsketch.serve.a2a._tool import A2AToolError, a2a_tool

__all__ = ["A2AToolError", "AgentCard", "AgentSkill", "PushNotifications", "a2a_app", "a2a_tool"]
