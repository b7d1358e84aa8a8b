"""``MemoryHydration``: middleware that puts what the run's memory store knows about the user
into each model call's prompt — the "hydration" half of agent memory (``memory_tools`` is the
half the model drives itself).

It runs inside the agent's journaled model step, so a resumed run replays the recorded call
instead of searching again; it reads the store directly (``ctx.memory.store``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorsketch.agents.memory_tools import fill_namespace
from tensorsketch.memory.item import Item
from tensorsketch.messages import system
from tensorsketch.middleware import Middleware, ModelHandler, ModelRequest
from tensorsketch.provider import Completion

__all__ = ["MemoryHydration"]


class MemoryHydration(Middleware):
    """Before every model call, search the namespace and add the hits as a system message.

    :param namespace: the namespace template, as :func:`memory_tools` takes it
        (``("users", "{user_id}", "notes")``; ``{fields}`` come from the run's ``deps``).
    :param limit: the most items to add.
    :param by_query: rank by the latest user message (the store needs an embedder);
        ``False`` takes the newest items.
    :param field: the value field shown for each item (the whole value when missing).
    :param heading: the line above the items.
    """

    def __init__(
        self,
        namespace: Sequence[str],
        *,
        limit: int = 5,
        by_query: bool = True,
        field: str = "content",
        heading: str = "What you remember about this user (from earlier conversations):",
    ) -> None:
        self.namespace = tuple(namespace)
        if not self.namespace or not all(isinstance(x, str) and x for x in self.namespace):
            msg = (
                "MemoryHydration(namespace=...) must be a tuple of non-empty strings, "
                f"got {namespace!r}."
            )
            raise ValueError(msg)
        if not isinstance(limit, int) or not 1 <= limit <= 100:
            msg = f"MemoryHydration(limit=...) must be an int from 1 to 100, got {limit!r}."
            raise ValueError(msg)
        self.limit = limit
        self.by_query = by_query
        self.field = field
        self.heading = heading

    async def wrap_model(self, request: ModelRequest, call_next: ModelHandler) -> Completion:
        ns = fill_namespace(self.namespace, request.ctx)
        query = None
        if self.by_query:
            query = next((m.text for m in reversed(request.messages) if m.role == "user"), None)
        store = request.ctx.memory.store
        hits: list[Item] = await store.search(ns, query or None, limit=self.limit)
        if hits:
            lines = [self.heading, *(f"- {self._shown(hit)}" for hit in hits)]
            at = sum(1 for _ in _leading_system(request.messages))
            request.messages.insert(at, system("\n".join(lines)))
        return await call_next(request)

    def _shown(self, item: Item) -> str:
        value: Any = item.value
        if isinstance(value, dict) and self.field in value:
            value = value[self.field]
        return value if isinstance(value, str) else repr(value)


def _leading_system(messages: Sequence[Any]) -> list[Any]:
    found = []
    for message in messages:
        if message.role != "system":
            break
        found.append(message)
    return found
