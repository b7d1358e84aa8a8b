"""Where A2A tasks live: the graph's durable backend, through the core ``Backend`` API.

A task is three things in the store, all written with operations every backend has:

* its **run** — the graph's own durable thread (``<namespace>/task/<id>``): checkpoints,
  journal and events, so a suspended task resumes exactly where it stopped, and a server that
  restarts finds it;
* its **record** — an append-only log on the thread ``<namespace>/task/<id>/record``: the
  task's creation, every message of its history, each status change and its artifacts, as
  A2A 1.0 JSON. Folding the log gives the task a client reads;
* one line in the **index** — the thread ``<namespace>/tasks`` — so ``ListTasks`` and a
  context's history can find tasks without a query the ``Backend`` API does not have.

Push notifications a task owes (its terminal status, an ``input-required``) are journal
entries of the thread ``<namespace>/push-outbox``, one per webhook (``<delivery>|<config>``),
written before the status they announce and removed once that webhook's POST is done — so
the thread holds only what is still owed, and a sweep reads nothing else.

Appends to one log are serialized in this process (a backend's event ``seq`` must strictly
increase per thread). Two servers writing the same task at once are not supported; two
servers sharing one store and serving different tasks are.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Any

from tensorsketch.runtime.backends.base import Backend, StoredEvent
from tensorsketch.serve.a2a._push import PushNotifications, PushTarget

__all__ = ["TERMINAL", "TaskRecord", "TaskStore", "now_iso"]

#: States after which a task takes no more messages.
TERMINAL = frozenset(
    {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
)


def now_iso() -> str:
    """An RFC 3339 UTC timestamp with milliseconds, as A2A's ``timestamp`` fields carry."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


@dataclass
class TaskRecord:
    """A task folded from its record: the A2A 1.0 ``Task`` fields, plus its run's thread."""

    id: str
    context_id: str
    thread_id: str
    status: dict[str, Any]
    history: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0
    #: the webhooks registered for the task's push notifications, by config id
    push: dict[str, PushTarget] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return str(self.status.get("state", "TASK_STATE_UNSPECIFIED"))

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def to_json(
        self, *, history_length: int | None = None, artifacts: bool = True
    ) -> dict[str, Any]:
        """The A2A 1.0 ``Task`` as JSON; ``history_length`` keeps only the latest messages."""
        history = self.history
        if history_length is not None:
            history = history[-history_length:] if history_length > 0 else []
        task: dict[str, Any] = {"id": self.id, "contextId": self.context_id, "status": self.status}
        if artifacts and self.artifacts:
            task["artifacts"] = self.artifacts
        if history:
            task["history"] = history
        if self.metadata:
            task["metadata"] = self.metadata
        return task


class TaskStore:
    """A2A tasks kept in ``backend`` under ``namespace`` (one namespace per served agent)."""

    def __init__(self, backend: Backend, namespace: str) -> None:
        self.backend = backend
        self.namespace = namespace
        self._index = f"{namespace}/tasks"
        # one lock per log being written (weak: a log nobody writes holds no lock)
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def thread_of(self, task_id: str) -> str:
        """The durable thread the task's graph run lives on."""
        return f"{self.namespace}/task/{task_id}"

    def _record(self, task_id: str) -> str:
        return f"{self.namespace}/task/{task_id}/record"

    # -- owed push notifications -------------------------------------------------------------

    @property
    def _outbox(self) -> str:
        return f"{self.namespace}/push-outbox"

    async def owe(
        self, delivery: str, task_id: str, state: str, position: int, config_ids: list[str]
    ) -> None:
        """Record that each of ``config_ids`` (the task's webhooks) is owed the notification
        ``delivery`` (``task_id``'s ``state``, when its history has ``position`` messages);
        written, in one unit, before the status."""
        entry = json.dumps({"task": task_id, "state": state, "position": position}).encode()
        owed = [(f"{delivery}|{config_id}", entry) for config_id in config_ids]
        await self.backend.record_effects(self._outbox, owed)

    async def owed(self) -> dict[str, tuple[dict[str, Any], list[str]]]:
        """What is still owed: ``{delivery: (entry, config ids)}``. Only entries not yet
        delivered are read — :meth:`delivered` removes them."""
        found: dict[str, tuple[dict[str, Any], list[str]]] = {}
        for key, value in await self.backend.list_effects(self._outbox):
            delivery, _, config_id = key.partition("|")  # a delivery id has no "|"
            _entry, configs = found.setdefault(delivery, (json.loads(value), []))
            configs.append(config_id)
        return found

    async def is_owed(self, delivery: str, config_id: str) -> bool:
        raw = await self.backend.lookup_effect(self._outbox, f"{delivery}|{config_id}")
        return raw is not None

    async def delivered(self, delivery: str, config_ids: list[str]) -> None:
        """Take ``delivery`` to ``config_ids`` out of what is owed: it was POSTed (or given up,
        or it is no longer due). The removal is the record, so the write that says it was
        sent is the one that stops every sweep reading it."""
        keys = [f"{delivery}|{config_id}" for config_id in config_ids]
        await self.backend.forget_effects(self._outbox, keys)

    async def claim_push(
        self, delivery: str, config_id: str, owner: str, options: PushNotifications
    ) -> bool:
        """Take (or keep) one webhook's delivery for one attempt
        (:attr:`PushNotifications.claim_seconds`; ``False``: another sender holds it). A
        sender claims again before each retry, so a dead one blocks a delivery for one
        attempt at most."""
        lease = f"{self._outbox}/{delivery}/{config_id}"
        return await self.backend.acquire_lease(lease, owner, options.claim_seconds)

    async def release_push(self, delivery: str, config_id: str, owner: str) -> None:
        await self.backend.release_lease(f"{self._outbox}/{delivery}/{config_id}", owner)

    # -- writing ---------------------------------------------------------------------------

    async def _append(self, thread_id: str, *entries: dict[str, Any]) -> None:
        lock = self._locks.get(thread_id)
        if lock is None:
            lock = self._locks[thread_id] = asyncio.Lock()
        async with lock:
            last = await self.backend.last_event_seq(thread_id)
            start = 0 if last is None else last + 1
            await self.backend.append_events(
                thread_id,
                [
                    StoredEvent(seq=start + i, payload=json.dumps(entry).encode())
                    for i, entry in enumerate(entries)
                ],
            )

    async def create(self, context_id: str | None, message: dict[str, Any]) -> TaskRecord:
        """A new task (state ``submitted``) whose history starts with ``message``."""
        task_id = uuid.uuid4().hex
        context = context_id or uuid.uuid4().hex
        created = time.time()
        status = {"state": "TASK_STATE_SUBMITTED", "timestamp": now_iso()}
        message = {**message, "taskId": task_id, "contextId": context}
        await self._append(
            self._record(task_id),
            {"op": "create", "contextId": context, "created": created, "status": status},
            {"op": "message", "message": message},
        )
        await self._append(self._index, {"id": task_id, "contextId": context, "created": created})
        return TaskRecord(
            id=task_id,
            context_id=context,
            thread_id=self.thread_of(task_id),
            status=status,
            history=[message],
            created=created,
        )

    async def add_message(self, task: TaskRecord, message: dict[str, Any]) -> None:
        message = {**message, "taskId": task.id, "contextId": task.context_id}
        task.history.append(message)
        await self._append(self._record(task.id), {"op": "message", "message": message})

    async def set_status(
        self, task: TaskRecord, state: str, message: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Record a status change (its ``message``, if any, also joins the history)."""
        status: dict[str, Any] = {"state": state, "timestamp": now_iso()}
        if message is not None:
            message = {**message, "taskId": task.id, "contextId": task.context_id}
            status["message"] = message
        task.status = status
        await self._append(self._record(task.id), {"op": "status", "status": status})
        return status

    async def set_artifact(self, task: TaskRecord, artifact: dict[str, Any]) -> None:
        """Add an artifact, or replace the one with the same ``artifactId``."""
        _put_artifact(task.artifacts, artifact)
        await self._append(self._record(task.id), {"op": "artifact", "artifact": artifact})

    async def set_push(self, task: TaskRecord, target: PushTarget) -> None:
        """Register (or replace, by id) a webhook for the task's push notifications."""
        task.push[target.id] = target
        entry = {"op": "push", "config": target.config, "surface": target.surface}
        await self._append(self._record(task.id), entry)

    async def delete_push(self, task: TaskRecord, config_id: str) -> None:
        task.push.pop(config_id, None)
        await self._append(self._record(task.id), {"op": "push-delete", "id": config_id})

    # -- reading ---------------------------------------------------------------------------

    async def get(self, task_id: str) -> TaskRecord | None:
        """The task folded from its record, or ``None`` for an id this store never issued."""
        if not task_id or len(task_id) > 64 or "\x00" in task_id:
            return None
        rows = await self.backend.read_events(self._record(task_id))
        if not rows:
            return None
        task: TaskRecord | None = None
        for row in rows:
            entry = json.loads(row.payload)
            op = entry.get("op")
            if op == "create":
                task = TaskRecord(
                    id=task_id,
                    context_id=entry["contextId"],
                    thread_id=self.thread_of(task_id),
                    status=entry["status"],
                    created=float(entry.get("created", 0.0)),
                )
            elif task is None:
                continue
            elif op == "message":
                task.history.append(entry["message"])
            elif op == "status":
                task.status = entry["status"]
            elif op == "artifact":
                _put_artifact(task.artifacts, entry["artifact"])
            elif op == "push":
                target = PushTarget(entry["config"], entry.get("surface", "1.0"))
                task.push[target.id] = target
            elif op == "push-delete":
                task.push.pop(entry["id"], None)
        return task

    async def index(self) -> list[dict[str, Any]]:
        """Every task's index line (``id``, ``contextId``, ``created``), newest first."""
        rows = await self.backend.read_events(self._index)
        return [json.loads(row.payload) for row in reversed(rows)]

    async def in_context(self, context_id: str) -> list[TaskRecord]:
        """The tasks of one context, oldest first."""
        lines = [line for line in await self.index() if line["contextId"] == context_id]
        found = [await self.get(line["id"]) for line in reversed(lines)]
        return [task for task in found if task is not None]


def _put_artifact(artifacts: list[dict[str, Any]], artifact: dict[str, Any]) -> None:
    for i, old in enumerate(artifacts):
        if old.get("artifactId") == artifact.get("artifactId"):
            artifacts[i] = artifact
            return
    artifacts.append(artifact)
