"""Toolsets: named groups of tools an agent takes as one.

A :class:`Toolset` gathers tools from anywhere — ``@tool`` functions, an MCP server's tools
(``await mcp_tools(...)``), other agents wrapped with ``as_tool`` — under a name, and derives
new groups from it: :meth:`~Toolset.filtered`, :meth:`~Toolset.prefixed`,
:meth:`~Toolset.approved` (every call waits for a person) and :meth:`~Toolset.when` (offered
only on runs a predicate of the run's context allows, e.g. by ``ctx.deps``). Pass toolsets in
an agent's ``tools=[...]`` next to single tools.

A toolset made with ``deferred=True`` is not sent to the model: the agent gets one
``search_tools`` tool instead, whose description names the deferred tools; the model searches,
and the tools found are offered from the next turn on. What was found is read back from the
transcript, so a resumed or later run offers the same tools.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tensorsketch.messages import Message
from tensorsketch.tools import Tool

if TYPE_CHECKING:
    from tensorsketch.context import Context

__all__ = ["SEARCH_TOOL", "ToolSearch", "Toolset"]

#: The tool an agent with deferred toolsets gets.
SEARCH_TOOL = "search_tools"

#: How many tools one search loads at most.
SEARCH_LIMIT = 5


class Toolset:
    """A named group of tools.

    :param tools: ``@tool`` objects, plain functions (wrapped) or other toolsets (flattened).
    :param name: what the group is called (in errors, and in the search tool's listing).
    :param deferred: send only the tools' names until the model searches for them.
    """

    __slots__ = ("_tools", "deferred", "enabled", "name")

    def __init__(
        self,
        tools: Iterable[Tool | Callable[..., Any] | Toolset] = (),
        *,
        name: str,
        deferred: bool = False,
    ) -> None:
        if not isinstance(name, str) or not name:
            msg = f"Toolset(name=...) must be a non-empty string, got {name!r}."
            raise TypeError(msg)
        self.name = name
        self.deferred = deferred
        #: Offered only on runs this allows (``None``: every run).
        self.enabled: Callable[[Context], bool] | None = None
        found: list[Tool] = []
        for item in tools:
            if isinstance(item, Toolset):
                found.extend(item.tools)
            elif isinstance(item, Tool):
                found.append(item)
            elif callable(item):
                found.append(Tool.from_function(item))
            else:
                msg = f"Toolset {name!r}: tools must be @tool functions or toolsets, got {item!r}."
                raise TypeError(msg)
        names = [t.name for t in found]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            msg = (
                f"Toolset {name!r} has two tools named {twice[0]!r}; rename one or use "
                "`.prefixed(...)` on one of the groups."
            )
            raise ValueError(msg)
        self._tools: tuple[Tool, ...] = tuple(found)

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The group's tools, in order."""
        return self._tools

    def _derived(self, tools: Iterable[Tool]) -> Toolset:
        made = copy.copy(self)
        made._tools = tuple(tools)
        return made

    def filtered(self, keep: Iterable[str] | Callable[[Tool], bool]) -> Toolset:
        """The tools named in ``keep`` (each must exist), or those ``keep(tool)`` accepts."""
        if callable(keep):
            return self._derived(t for t in self._tools if keep(t))
        wanted = [keep] if isinstance(keep, str) else list(keep)
        have = {t.name for t in self._tools}
        missing = [n for n in wanted if n not in have]
        if missing:
            msg = (
                f"Toolset {self.name!r} has no tool named {missing[0]!r}; it has "
                f"{', '.join(sorted(have)) or 'none'}."
            )
            raise ValueError(msg)
        return self._derived(t for t in self._tools if t.name in wanted)

    def prefixed(self, prefix: str) -> Toolset:
        """Every tool renamed ``<prefix>_<name>`` (two servers' ``search`` tools side by side)."""
        return self._derived(_renamed(t, f"{prefix}_{t.name}") for t in self._tools)

    def approved(self) -> Toolset:
        """Every call to these tools waits for a person's approval (``requires_approval``)."""
        return self._derived(_with(t, requires_approval=True) for t in self._tools)

    def when(self, enabled: Callable[[Context], bool]) -> Toolset:
        """This group, offered only on runs where ``enabled(ctx)`` is true (read once when a
        run starts; ``ctx.deps`` holds what the caller passed as ``invoke(..., deps=...)``)."""
        if not callable(enabled):
            msg = f"Toolset.when() needs a function of the run's context, got {enabled!r}."
            raise TypeError(msg)
        made = self._derived(self._tools)
        made.enabled = enabled
        return made

    def __repr__(self) -> str:
        names = ", ".join(t.name for t in self._tools)
        flags = (", deferred=True" if self.deferred else "") + (
            ", when=..." if self.enabled else ""
        )
        return f"Toolset(name={self.name!r}, tools=[{names}]{flags})"


def _with(tool: Tool, **changes: Any) -> Tool:
    made = copy.copy(tool)
    for key, value in changes.items():
        setattr(made, key, value)
    return made


def _renamed(tool: Tool, name: str) -> Tool:
    # The constructor checks the name the way model APIs want it.
    return Tool(
        tool.fn,
        name=name,
        description=tool.description,
        schema=tool.json_schema(),
        args_model=tool._args_model,
        passes_ctx=tool._passes_ctx,
        raw_args=tool._raw_args,
        requires_approval=tool.requires_approval,
    )


# -- tool search ------------------------------------------------------------------------------


class ToolSearch:
    """The deferred tools of an agent and which of them a run's searches loaded, read from
    the transcript (the search tool's answers list what they loaded)."""

    __slots__ = ("deferred", "loaded")

    def __init__(self, deferred: Mapping[str, Tool], transcript: Sequence[Message]) -> None:
        self.deferred = deferred
        self.loaded: dict[str, Tool] = {}
        self.read(transcript)

    def read(self, messages: Sequence[Message]) -> None:
        """Note the tools the search answers among ``messages`` loaded."""
        for message in messages:
            if message.role != "tool" or message.name != SEARCH_TOOL or message.is_error:
                continue
            for name in _loaded_names(message.text):
                found = self.deferred.get(name)
                if found is not None:
                    self.loaded.setdefault(name, found)

    def offered(self, base: tuple[Tool, ...]) -> tuple[Tool, ...]:
        """What the model is sent: ``base`` and the tools loaded so far."""
        if not self.loaded:
            return base
        return (*base, *self.loaded.values())


def _loaded_names(text: str) -> list[str]:
    try:
        data = json.loads(text)
    except ValueError:
        return []
    found = data.get("loaded") if isinstance(data, dict) else None
    if not isinstance(found, list):
        return []
    return [item["name"] for item in found if isinstance(item, dict) and "name" in item]


def search_tool(deferred: Mapping[str, Tool]) -> Tool:
    """The ``search_tools`` tool over ``deferred``: its description lists their names; a
    search answers with (and loads) the best matches."""
    listing = ", ".join(sorted(deferred))
    description = (
        "Find and load more tools. Only the names of these tools are known so far: "
        f"{listing}. Search by name or by what you need done; the tools found can be called "
        "from your next turn on."
    )

    def search(args: dict[str, Any]) -> dict[str, Any]:
        query = str(args.get("query", ""))
        ranked = _rank(query, deferred)
        if not ranked:
            return {"loaded": [], "note": f"no tool matches {query!r}; known: {listing}."}
        return {
            "loaded": [
                {"name": t.name, "description": t.description} for t in ranked[:SEARCH_LIMIT]
            ]
        }

    return Tool.from_schema(
        SEARCH_TOOL,
        description,
        {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "a tool name or words for the task"}
            },
            "required": ["query"],
        },
        search,
    )


def _rank(query: str, deferred: Mapping[str, Tool]) -> list[Tool]:
    """The deferred tools matching ``query``: an exact name first, then by words shared with
    the name and description (ties in name order)."""
    words = set(re.findall(r"[a-z0-9]+", query.lower()))
    scored: list[tuple[int, str, Tool]] = []
    for name, found in deferred.items():
        if name == query.strip():
            scored.append((1_000, name, found))
            continue
        text = set(re.findall(r"[a-z0-9]+", f"{name} {found.description}".lower()))
        score = len(words & text)
        if score:
            scored.append((score, name, found))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [found for _, _, found in scored]
