"""``memory_tools``: remember / recall / forget — the run's memory store (``ctx.memory``) as
tools a model can call, each scoped to one namespace filled in per run.

The namespace is a template, ``("users", "{user_id}", "notes")``: each ``{name}`` is read from
the run's dependencies (``invoke(..., deps={"user_id": "u1"})``, a mapping's key or an
object's attribute), else from the run's labels (``runner.submit(..., labels=...)``, the
``owner`` an authorizing task API stamps), else from a field of the run's input state
(``invoke({"query": ..., "user_id": "u1"})`` on a state that declares ``user_id``), so one
agent serves every user and a model can never reach another user's memories — the namespace
is not an argument it sees.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Mapping, Sequence
from typing import Any

from tensorsketch.context import Context, run_state
from tensorsketch.errors import DepsUnavailableError
from tensorsketch.tools import Tool

__all__ = ["MEMORY_TOOL_NAMES", "fill_namespace", "memory_tools"]

#: The tools :func:`memory_tools` builds, by name.
MEMORY_TOOL_NAMES: tuple[str, ...] = ("remember", "recall", "forget")

_FORMATTER = string.Formatter()


def fill_namespace(template: Sequence[str], ctx: Context[Any]) -> tuple[str, ...]:
    """The namespace ``template`` names for this run: each ``{field}`` taken from
    ``ctx.deps`` (a mapping's key or an object's attribute), else from the run's labels
    (``ctx.labels``: what the run was submitted with, such as the ``owner`` an authorizing
    task API sets to who submitted it), else from a field of the run's state (what its input
    set, kept by its checkpoints: a later turn on the thread keeps its user). The caller's
    word comes first, so an input cannot name another user where deps or labels name one."""
    fields = [f for label in template for _, f, _, _ in _FORMATTER.parse(label) if f]
    if not fields:
        return tuple(template)
    try:
        deps = ctx.deps
    except DepsUnavailableError:
        deps = None
    labels = ctx.labels
    state = run_state(ctx)
    values: dict[str, str] = {}
    for field in fields:
        if isinstance(deps, Mapping) and field in deps:
            value = deps[field]
        elif deps is not None and not isinstance(deps, Mapping) and hasattr(deps, field):
            value = getattr(deps, field)
        elif field in labels:
            value = labels[field]
        elif field in state:
            value = state[field]
        else:
            msg = (
                f"the memory namespace {tuple(template)!r} needs {field!r} from the run's "
                f"dependencies, labels or input state; pass it as "
                f"invoke(..., deps={{{field!r}: ...}}) (or an object with a {field!r} "
                f"attribute), submit the run with labels={{{field!r}: ...}}, or declare "
                f"a field {field!r} of the run's input state and pass it with the input."
            )
            raise LookupError(msg)
        if not isinstance(value, str | int) or isinstance(value, bool) or value == "":
            msg = (
                f"{field!r} fills a memory namespace {tuple(template)!r}: it must be a "
                f"non-empty str or int, got {value!r}."
            )
            raise ValueError(msg)
        values[field] = str(value)
    return tuple(label.format(**values) for label in template)


def memory_tools(
    namespace: Sequence[str],
    *,
    names: Sequence[str] = MEMORY_TOOL_NAMES,
    recall_limit: int = 5,
) -> list[Tool]:
    """Tools over the run's memory store (``invoke(..., memory=store)``), in one namespace.

    - ``remember(content, key=None)`` stores a note (the key defaults to one derived from the
      content, so remembering the same thing twice keeps one note);
    - ``recall(query)`` returns the ``recall_limit`` notes closest in meaning (the store needs
      an embedder), or the newest when ``query`` is empty;
    - ``forget(key)`` removes a note.

    :param namespace: the namespace template, e.g. ``("users", "{user_id}", "notes")``; each
        ``{field}`` comes from the run's ``deps``, labels or input state (:func:`fill_namespace`).
    :param names: which of the three tools to build (a read-only agent takes ``["recall"]``).
    """
    template = tuple(namespace)
    if not template or not all(isinstance(label, str) and label for label in template):
        msg = (
            f"memory_tools(namespace=...) must be a tuple of non-empty strings, got {namespace!r}."
        )
        raise ValueError(msg)
    unknown = sorted(set(names) - set(MEMORY_TOOL_NAMES))
    if unknown:
        msg = f"memory_tools(names=...) knows {list(MEMORY_TOOL_NAMES)}, not {unknown}."
        raise ValueError(msg)
    if not isinstance(recall_limit, int) or not 1 <= recall_limit <= 100:
        msg = f"memory_tools(recall_limit=...) must be an int from 1 to 100, got {recall_limit!r}."
        raise ValueError(msg)

    async def remember(ctx: Context, content: str, key: str | None = None) -> str:
        """Store a fact worth keeping for later conversations with this user.

        :param content: the fact, in one self-contained sentence.
        :param key: a short name to update or forget it by later (optional).
        """
        if not content.strip():
            return "Nothing to remember: content was empty."
        ns = fill_namespace(template, ctx)
        note_key = key or "note-" + hashlib.sha256(content.encode()).hexdigest()[:12]
        await ctx.memory.put(ns, note_key, {"content": content}, index=["content"])
        return f"Remembered as {note_key!r}."

    async def recall(ctx: Context, query: str = "") -> list[dict[str, Any]]:
        """Look up what was remembered about this user, most relevant first.

        :param query: what to look for; empty for the newest notes.
        """
        ns = fill_namespace(template, ctx)
        store = ctx.memory
        hits = await store.search(ns, query or None, limit=recall_limit)
        return [
            {
                "key": hit.key,
                "content": hit.value.get("content") if isinstance(hit.value, dict) else hit.value,
                **({} if hit.score is None else {"score": round(hit.score, 3)}),
            }
            for hit in hits
        ]

    async def forget(ctx: Context, key: str) -> str:
        """Remove a remembered note by its key (as remember or recall named it).

        :param key: the note's key.
        """
        ns = fill_namespace(template, ctx)
        removed = await ctx.memory.delete(ns, key)
        return f"Forgot {key!r}." if removed else f"Nothing was remembered under {key!r}."

    built = {
        "remember": Tool.from_function(remember, name="remember"),
        "recall": Tool.from_function(recall, name="recall"),
        "forget": Tool.from_function(forget, name="forget"),
    }
    return [built[name] for name in MEMORY_TOOL_NAMES if name in names]
