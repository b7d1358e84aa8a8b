"""Assistants: stored, versioned configurations of the runner's graph, chosen per run.

An assistant is a record of ``kind="assistant"`` in the run store (beside the runs, on every
backend that has one), named uniquely per graph. Each change stores a new version and makes it
the one runs use; :meth:`Assistants.rollback` makes an earlier version current again. A run
submitted with ``assistant=`` (an id or a name) carries that version's configuration in its
record (``record.assistant``: ``{"id", "name", "version", "config"}``), so it, and a resume of
it after a crash, executes with what it was submitted with, whatever changes after.

A configuration holds (every key optional): ``model``, ``system_prompt``, ``tools`` (names of
the graph's agents' tools to offer), ``max_iterations``, ``max_tokens`` — applied to the
graph's top-level agents (``Agent.configured``) — ``multitask_strategy`` (the double-texting
policy of its runs that name none) and ``context`` (an object any node reads with
:func:`tensorsketch.assistant_config.current_assistant`).

``metadata`` (short strings, stored as the record's labels, so listing filters on it in the
store) is where a deployment keeps who owns an assistant.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tensorsketch.agents import Agent
from tensorsketch.errors import AssistantNotFoundError, RunConflictError
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runs.multitask import check_strategy
from tensorsketch.runtime.backends.runs import RunRecord, RunStore, check_labels

__all__ = [
    "CONFIG_KEYS",
    "MAX_VERSIONS",
    "Assistant",
    "AssistantNotFoundError",
    "Assistants",
    "check_config",
]

#: What a configuration may hold.
CONFIG_KEYS: Final = (
    "model",
    "system_prompt",
    "tools",
    "max_iterations",
    "max_tokens",
    "multitask_strategy",
    "context",
)
#: Versions kept per assistant (the oldest, unless current, are dropped past it).
MAX_VERSIONS: Final = 100
_ID_PREFIX = "asst_"
_MAX_NAME = 128
_MAX_CONTEXT_BYTES = 65536


@dataclass(frozen=True, slots=True)
class Assistant:
    """One assistant as stored: ``version`` is the one runs use now, ``latest_version``
    the newest stored, ``config`` the current version's."""

    assistant_id: str
    name: str
    graph: str
    version: int
    latest_version: int
    config: dict[str, Any]
    description: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0

    @classmethod
    def from_record(cls, record: RunRecord) -> Assistant:
        data = record.assistant or {}
        current = int(data.get("current", 1))
        versions = list(data.get("versions") or [])
        config: dict[str, Any] = next(
            (v["config"] for v in versions if v["version"] == current), {}
        )
        return cls(
            assistant_id=record.run_id,
            name=str(data.get("name", "")),
            graph=record.graph,
            version=current,
            latest_version=max((int(v["version"]) for v in versions), default=current),
            config=dict(config),
            description=str(data.get("description", "")),
            metadata=dict(record.labels),
            created_at=record.created_at,
            updated_at=record.updated_at,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data (what the HTTP API answers)."""
        return {
            "id": self.assistant_id,
            "name": self.name,
            "graph": self.graph,
            "version": self.version,
            "latest_version": self.latest_version,
            "config": self.config,
            "description": self.description,
            "metadata": self.metadata,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }

    def pin(self) -> dict[str, Any]:
        """What a run submitted with this assistant records: which version, and its config."""
        return {
            "id": self.assistant_id,
            "name": self.name,
            "version": self.version,
            "config": self.config,
        }


def _tool_names(graph: CompiledGraph[Any]) -> set[str] | None:
    """The tools the graph's top-level agents have (``None``: it has no agent)."""
    agents = [spec.node for spec in graph.spec.nodes.values() if isinstance(spec.node, Agent)]
    if not agents:
        return None
    return {name for agent in agents for name in agent.tools_by_name}


def check_config(config: Any, graph: CompiledGraph[Any]) -> dict[str, Any]:
    """``config`` checked against what :data:`CONFIG_KEYS` allow and what ``graph`` has, or a
    ``ValueError`` naming the key that is wrong and what it takes."""
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        msg = f"an assistant's `config` must be an object, got {type(config).__name__}."
        raise ValueError(msg)
    extra = sorted(set(config) - set(CONFIG_KEYS))
    if extra:
        takes = ", ".join(CONFIG_KEYS)
        msg = f"unknown config key(s) {extra}; an assistant's config takes {takes}."
        raise ValueError(msg)
    checked: dict[str, Any] = {}
    for key, value in config.items():
        if key in ("model", "system_prompt"):
            checked[key] = _text(key, value, 256 if key == "model" else 65536)
        elif key in ("max_iterations", "max_tokens"):
            checked[key] = _count(key, value, 1000 if key == "max_iterations" else 1_000_000)
        elif key == "tools":
            checked[key] = _tools(value, graph)
        elif key == "multitask_strategy":
            checked[key] = check_strategy(value, "config.multitask_strategy")
        else:
            checked[key] = _context(value)
    return checked


def _text(key: str, value: Any, limit: int) -> str:
    if not isinstance(value, str) or not value or len(value) > limit:
        msg = f"config `{key}` must be a non-empty string of at most {limit} characters."
        raise ValueError(msg)
    return value


def _count(key: str, value: Any, high: int) -> int:
    if type(value) is not int or not 1 <= value <= high:
        msg = f"config `{key}` must be an int from 1 to {high}, got {value!r:.40}."
        raise ValueError(msg)
    return value


def _tools(tools: Any, graph: CompiledGraph[Any]) -> list[str]:
    if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
        msg = "config `tools` must be a list of tool names."
        raise ValueError(msg)
    known = _tool_names(graph)
    if known is None:
        msg = f"graph {graph.name!r} has no agent, so config `tools` has nothing to choose."
        raise ValueError(msg)
    unknown = sorted(set(tools) - known)
    if unknown:
        msg = (
            f"config `tools` names {unknown}, which no agent of {graph.name!r} has; it has "
            f"{sorted(known)}."
        )
        raise ValueError(msg)
    return sorted(set(tools))


def _context(context: Any) -> dict[str, Any]:
    try:
        size = len(json.dumps(context)) if isinstance(context, Mapping) else -1
    except (TypeError, ValueError):
        size = -1
    if not 0 <= size <= _MAX_CONTEXT_BYTES:
        msg = (
            f"config `context` must be a JSON object of at most {_MAX_CONTEXT_BYTES} "
            "characters (what the run's nodes read with current_assistant())."
        )
        raise ValueError(msg)
    return dict(context)


def _check_description(description: Any) -> None:
    if not isinstance(description, str) or len(description) > 4096:
        msg = "an assistant's `description` must be a string of at most 4096 characters."
        raise ValueError(msg)


def _check_name(name: Any) -> str:
    if (
        not isinstance(name, str)
        or not name.strip()
        or len(name) > _MAX_NAME
        or name.startswith(_ID_PREFIX)
    ):
        msg = (
            f"an assistant's `name` must be a non-empty string of at most {_MAX_NAME} "
            f"characters, not starting with {_ID_PREFIX!r} (ids do); got {name!r:.60}."
        )
        raise ValueError(msg)
    return name


class Assistants:
    """The assistants of one graph in one run store (``runner.assistants``)."""

    def __init__(self, store: RunStore, graph: CompiledGraph[Any]) -> None:
        self.store = store
        self.graph = graph

    def _thread(self, name: str) -> str:
        """The thread id an assistant's record is filed under: one per graph and name, so a
        name is found through the store's thread index."""
        digest = hashlib.sha256(f"{self.graph.name}\0{name}".encode()).hexdigest()[:32]
        return f"assistant_{digest}"

    async def _record(self, assistant: str) -> RunRecord:
        if not isinstance(assistant, str) or not assistant:
            msg = f"name an assistant by its id or name (a string), got {assistant!r:.60}."
            raise ValueError(msg)
        record: RunRecord | None
        if assistant.startswith(_ID_PREFIX):
            record = await self.store.get(assistant)
        else:
            page = await self.store.list(
                thread_id=self._thread(assistant), kind="assistant", limit=1
            )
            record = page.records[0] if page.records else None
        if record is None or record.kind != "assistant" or record.graph != self.graph.name:
            msg = (
                f"no assistant {assistant!r} for graph {self.graph.name!r}; create it first, "
                "or list the ones there are."
            )
            raise AssistantNotFoundError(msg)
        return record

    async def create(
        self,
        name: str,
        config: Mapping[str, Any] | None = None,
        *,
        description: str = "",
        metadata: Mapping[str, str] | None = None,
    ) -> Assistant:
        """Store a new assistant (version 1); a name already taken is a
        :class:`RunConflictError` (add a version with :meth:`update` instead)."""
        _check_name(name)
        checked = check_config(config, self.graph)
        _check_description(description)
        at = time.time()
        record = RunRecord(
            run_id=f"{_ID_PREFIX}{uuid.uuid4().hex}",
            thread_id=self._thread(name),
            graph=self.graph.name,
            kind="assistant",
            status="succeeded",  # a stored configuration: never executed, never taken over
            idempotency_key=f"assistant:{self.graph.name}:{name}",
            labels=check_labels(metadata),
            assistant={
                "name": name,
                "description": description,
                "current": 1,
                "versions": [{"version": 1, "config": checked, "created_at": at}],
            },
        )
        # The name is the idempotency key: a second create of it gets the first's record.
        stored, created = await self.store.create(record)
        if not created:
            msg = (
                f"an assistant named {name!r} already exists ({stored.run_id}); update it to "
                "store a new version."
            )
            raise RunConflictError(msg)
        return Assistant.from_record(stored)

    async def get(self, assistant: str) -> Assistant:
        """The assistant with that id or name (:class:`AssistantNotFoundError` if none)."""
        return Assistant.from_record(await self._record(assistant))

    async def list(
        self,
        *,
        metadata: Mapping[str, str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[builtins.list[Assistant], str | None]:
        """This graph's assistants, oldest first, a page at a time (``metadata``: only those
        with these metadata values); returns the page and the next page's cursor."""
        page = await self.store.list(kind="assistant", labels=metadata, limit=limit, cursor=cursor)
        found = [Assistant.from_record(r) for r in page.records if r.graph == self.graph.name]
        return found, page.cursor

    async def update(
        self,
        assistant: str,
        config: Mapping[str, Any],
        *,
        description: str | None = None,
    ) -> Assistant:
        """Store ``config`` as a new version and make it current; earlier ones are kept
        (the latest :data:`MAX_VERSIONS`) for :meth:`rollback`."""
        checked = check_config(config, self.graph)
        if description is not None and (
            not isinstance(description, str) or len(description) > 4096
        ):
            msg = "an assistant's `description` must be a string of at most 4096 characters."
            raise ValueError(msg)
        record = await self._record(assistant)

        def add(current: RunRecord) -> RunRecord:
            data = dict(current.assistant or {})
            versions = list(data.get("versions") or [])
            number = max(int(v["version"]) for v in versions) + 1
            versions.append({"version": number, "config": checked, "created_at": time.time()})
            data["versions"] = versions[-MAX_VERSIONS:]
            data["current"] = number
            if description is not None:
                data["description"] = description
            return current.replace(assistant=data)

        stored = await self.store.transition(record.run_id, add)
        assert stored is not None
        return Assistant.from_record(stored)

    async def versions(self, assistant: str) -> builtins.list[dict[str, Any]]:
        """Its stored versions, oldest first: ``{"version", "config", "created_at"}`` each."""
        record = await self._record(assistant)
        return [dict(v) for v in (record.assistant or {}).get("versions", [])]

    async def rollback(self, assistant: str, version: int) -> Assistant:
        """Make ``version`` current again (runs submitted from now on use it); nothing is
        deleted, and a later :meth:`update` stores the next number."""
        if type(version) is not int or version < 1:
            msg = f"`version` must be a positive int, got {version!r:.40}."
            raise ValueError(msg)
        record = await self._record(assistant)

        def pick(current: RunRecord) -> RunRecord:
            data = dict(current.assistant or {})
            kept = [int(v["version"]) for v in data.get("versions", [])]
            if version not in kept:
                msg = (
                    f"assistant {current.run_id!r} has no version {version}; it keeps "
                    f"{kept[0]} to {kept[-1]}."
                )
                raise AssistantNotFoundError(msg)
            data["current"] = version
            return current.replace(assistant=data)

        stored = await self.store.transition(record.run_id, pick)
        assert stored is not None
        return Assistant.from_record(stored)
