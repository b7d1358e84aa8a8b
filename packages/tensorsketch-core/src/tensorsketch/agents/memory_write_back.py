"""``MemoryWriteBack``: middleware that writes what a finished turn taught into the run's
memory store — the write-back half of agent memory (``MemoryHydration`` is the read half,
``memory_tools`` the part the model drives itself).

It runs inside the agent's journaled model step, as ``SessionHistory`` does: a resumed run
replays the recorded call instead of writing again, and every item it writes is keyed by the
turn (thread or run, superstep, node), so a call re-run after a crash between the write and
its journal record rewrites the same items instead of adding new ones.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from tensorsketch.agents.memory_tools import fill_namespace
from tensorsketch.agents.session_history import this_turns_questions
from tensorsketch.memory.store import PutRequest
from tensorsketch.messages import Message
from tensorsketch.middleware import Middleware, ModelHandler, ModelRequest
from tensorsketch.provider import Completion

__all__ = ["MemoryWriteBack"]

#: ``extract(questions, answer) -> {key: value}`` (sync or async): the items a finished turn
#: leaves in memory (an empty mapping: none). ``questions`` are the turn's user messages.
Extract = Callable[[list[Message], Message], Mapping[str, Any] | Awaitable[Mapping[str, Any]]]


def whole_turn(questions: list[Message], answer: Message) -> dict[str, Any]:
    """The default policy: the turn itself, one item (``content`` is what search embeds)."""
    asked = "\n".join(m.text for m in questions)
    return {
        "turn": {
            "content": f"User: {asked}\nAssistant: {answer.text}",
            "question": asked,
            "answer": answer.text,
        }
    }


class MemoryWriteBack(Middleware):
    """When a turn ends with an answer (a reply that calls no tool), write its items.

    :param namespace: the namespace template, as :func:`memory_tools` takes it
        (``("users", "{user_id}", "turns")``; ``{fields}`` come from the run's ``deps``, else
        its labels).
    :param extract: what to keep of the turn (:data:`Extract`); the default keeps the whole
        turn as one item. Each key is prefixed with the turn's own key, so turns never
        overwrite each other and a re-run turn overwrites only itself.
    :param ttl: seconds the items live (``None``: the store's default).

    Failed turns, and turns that end on a tool call or an approval, write nothing.
    """

    def __init__(
        self,
        namespace: Sequence[str],
        *,
        extract: Extract | None = None,
        ttl: float | None = None,
    ) -> None:
        self.namespace = tuple(namespace)
        if not self.namespace or not all(isinstance(x, str) and x for x in self.namespace):
            msg = (
                "MemoryWriteBack(namespace=...) must be a tuple of non-empty strings, "
                f"got {namespace!r}."
            )
            raise ValueError(msg)
        if extract is not None and not callable(extract):
            msg = (
                "MemoryWriteBack(extract=...) must be a function (questions, answer) -> "
                f"{{key: value}}, got {extract!r}."
            )
            raise TypeError(msg)
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float)):
            msg = f"MemoryWriteBack(ttl=...) must be a number of seconds, got {ttl!r}."
            raise ValueError(msg)
        self.extract: Extract = extract or whole_turn
        self.ttl = ttl

    async def wrap_model(self, request: ModelRequest, call_next: ModelHandler) -> Completion:
        asked = this_turns_questions(request.messages)
        completion = await call_next(request)
        if completion.message.tool_calls or not asked:
            return completion
        ctx = request.ctx
        found = self.extract(asked, completion.message)
        items = await found if inspect.isawaitable(found) else found
        if not isinstance(items, Mapping):
            msg = (
                f"MemoryWriteBack(extract=...) returned {type(items).__name__}; it returns a "
                "mapping {key: value} of the items to keep ({} for none)."
            )
            raise TypeError(msg)
        if not items:
            return completion
        ns = fill_namespace(self.namespace, ctx)
        turn = f"{ctx.thread_id or ctx.run_id}:{ctx.superstep}:{ctx.node}{ctx.instance}"
        await ctx.memory.store.put_many(
            [
                PutRequest(ns, f"{turn}:{key}", value, ttl=self.ttl, index=_content(value))
                for key, value in items.items()
            ]
        )
        return completion


def _content(value: Any) -> list[str] | None:
    """Embed a value's ``content`` when it has one (the namespace's own choice otherwise)."""
    return ["content"] if isinstance(value, Mapping) and "content" in value else None
