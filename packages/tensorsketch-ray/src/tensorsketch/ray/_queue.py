"""Putting runs on the table for a fleet: queued, owned by nobody.

``AsyncRunner.submit`` stores a run *owned by the submitting process*, which then executes
it. A fleet's runs are stored without an owner instead, so the pool's dispatcher hands them
to whichever actor has room; any process that can reach the store (a web server, a cron job,
another service) submits this way without running anything itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.runs import RunRecord, RunStore, check_labels, run_store

__all__ = ["enqueue"]


async def enqueue(
    store: RunStore | Backend,
    input: Any = None,
    *,
    graph: CompiledGraph[Any] | str,
    thread_id: str | None = None,
    idempotency_key: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> tuple[RunRecord, bool]:
    """Store a queued run of ``graph`` for a worker pool; return ``(record, created)``.

    :param store: the pool's backend (or its run store).
    :param graph: the graph (or its name) — a pool executes only the runs of its own graph.
    :param thread_id: the thread to run on (default: a new one).
    :param idempotency_key: submitting again with the same key returns the existing run
        (``created`` is ``False``) unless that run failed.
    """
    runs = store if isinstance(store, RunStore) else run_store(store)
    name = graph.name if isinstance(graph, CompiledGraph) else graph
    if not isinstance(name, str) or not name:
        msg = f"`graph` must be a compiled graph or its name, got {graph!r}."
        raise ValueError(msg)
    if thread_id is not None and (not isinstance(thread_id, str) or not thread_id):
        msg = f"`thread_id` must be a non-empty string, got {thread_id!r}."
        raise ValueError(msg)
    if idempotency_key is not None and (
        not isinstance(idempotency_key, str) or not 0 < len(idempotency_key) <= 256
    ):
        msg = f"`idempotency_key` must be 1 to 256 characters, got {idempotency_key!r:.60}."
        raise ValueError(msg)
    if isinstance(input, BaseModel):
        input = input.model_dump(mode="json")
    record = RunRecord(
        run_id=f"run_{uuid.uuid4().hex}",
        thread_id=thread_id or f"thread_{uuid.uuid4().hex}",
        graph=name,
        input=input,
        idempotency_key=idempotency_key,
        labels=check_labels(labels),
    )
    return await runs.create(record)
