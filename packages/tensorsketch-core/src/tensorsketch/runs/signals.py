"""Signals: the events ``AsyncRunner.signal`` delivers to a suspended run — what one may hold,
how many a run buffers, and how they become the input of the segment they resume."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tensorsketch.errors import RunConflictError
from tensorsketch.messages import user
from tensorsketch.pregel.compiled import CompiledGraph

__all__ = [
    "EVENT_KEYS",
    "MAX_DELIVERED_IDS",
    "MAX_PENDING_EVENTS",
    "EventInput",
    "check_event",
    "segment_input",
]

#: Signals a suspended run buffers before refusing more (until it moves again).
MAX_PENDING_EVENTS = 64
#: Event ids remembered per run for deduplication (oldest forgotten first).
MAX_DELIVERED_IDS = 256
#: The allow-listed keys of a signal.
EVENT_KEYS = frozenset({"event_id", "type", "payload"})

#: Builds the input of a resumed segment from the signals it delivers.
EventInput = Callable[[list[dict[str, Any]]], Mapping[str, Any]]


def check_event(event: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a signal: ``{event_id?, type, payload}`` and nothing else."""
    if not isinstance(event, Mapping):
        msg = (
            f"an event must be an object {{event_id?, type, payload}}, got {type(event).__name__}."
        )
        raise ValueError(msg)
    extra = sorted(set(event) - EVENT_KEYS)
    if extra:
        msg = f"an event takes only event_id, type and payload; remove {extra}."
        raise ValueError(msg)
    kind = event.get("type")
    if not isinstance(kind, str) or not kind or len(kind) > 128:
        msg = (
            "an event needs a `type`: a non-empty string of at most 128 characters, got "
            f"{kind!r:.60}."
        )
        raise ValueError(msg)
    event_id = event.get("event_id")
    if event_id is not None and (
        not isinstance(event_id, str) or not event_id or len(event_id) > 256
    ):
        msg = (
            "`event_id` must be a non-empty string of at most 256 characters, got "
            f"{event_id!r:.60}."
        )
        raise ValueError(msg)
    payload = event.get("payload", "")
    if not isinstance(payload, str):
        msg = (
            f"an event's `payload` must be a string (it enters the run as text), got "
            f"{type(payload).__name__}; serialize structured data yourself, e.g. json.dumps."
        )
        raise ValueError(msg)
    if len(payload) > 65536:
        msg = f"an event's `payload` is at most 65536 characters, got {len(payload)}."
        raise ValueError(msg)
    checked: dict[str, Any] = {"type": kind, "payload": payload}
    if event_id is not None:
        checked["event_id"] = event_id
    return checked


def segment_input(
    graph: CompiledGraph[Any], event_input: EventInput | None, events: list[dict[str, Any]]
) -> Mapping[str, Any]:
    """The input that delivers ``events`` to a run of ``graph``: ``event_input``'s, else each
    as a user message appended to the state's ``messages`` (refused when it has none)."""
    if event_input is not None:
        return event_input(events)
    fields = graph.state_schema.model_fields
    if "messages" not in fields:
        msg = (
            f"graph {graph.name!r} has no `messages` field to deliver events into; "
            "pass AsyncRunner(event_input=lambda events: {...}) to say what they become."
        )
        raise RunConflictError(msg)
    return {"messages": [user(f"[event {e['type']}] {e.get('payload', '')}") for e in events]}
