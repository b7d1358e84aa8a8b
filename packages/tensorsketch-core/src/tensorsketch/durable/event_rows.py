"""How a run's stream events are stored: one row per event, in a compact form.

A row is ``[1, type, node, run_id, namespace, step, ts, data]``: the ``seq`` and the thread
are the row's own, so they are not repeated inside it, and a list has no key names to write
or walk. A ``run_end`` whose state is the ``values`` event just before it (the same commit,
the same fields; it always is, but after a resumed ``interrupt_after`` stop) is stored
without it (seven items): its reader takes the state from that row. It was the third copy
of the whole state written per run (the checkpoint, ``values``, ``run_end``).

Rows written before this form are ``Event.to_dict()`` mappings; they read the same.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Sequence
from typing import Any, Final

from tensorsketch.errors import CheckpointDecodeError
from tensorsketch.events import Event
from tensorsketch.runtime.backends.base import Backend, StoredEvent
from tensorsketch.serializers import Serializer, shared_encoding

__all__ = ["decode_event", "encode_events", "read_stored_events", "stored_run_id"]

#: The first item of a compact row: the form's version.
COMPACT: Final = 1
#: A compact row's length, and a ``run_end``'s that takes the ``values`` row's state.
_FULL, _SAME_STATE = 8, 7
_NO_SHARING = contextlib.nullcontext()


def _same_state(event: Event, before: Event) -> bool:
    """Whether the ``run_end`` ``event`` carries the state of ``before``, the ``values`` event
    right before it: the same fields holding the same objects (no value is compared)."""
    if before.type != "values" or before.seq != event.seq - 1:
        return False
    state, prior = event.data, before.data
    if type(state) is not dict or type(prior) is not dict or state.keys() != prior.keys():
        return False
    return all(map(operator.is_, state.values(), map(prior.__getitem__, state)))


def encode_events(
    serializer: Serializer, thread_id: str, events: Sequence[Event], *, shared: bool = False
) -> list[StoredEvent]:
    """The rows of one commit's events (``shared``: inside the commit's
    :func:`shared_encoding` block already, whose encodings they reuse)."""
    rows = [
        [
            COMPACT,
            e.type,
            e.node,
            e.run_id,
            list(e.namespace) if e.namespace else [],
            e.step,
            e.ts,
            e.data,
        ]
        for e in events
    ]
    for i, e in enumerate(events):
        if e.type == "run_end" and i and _same_state(e, events[i - 1]):
            rows[i].pop()
    dumps = serializer.dumps
    with shared_encoding(serializer) if len(events) > 1 and not shared else _NO_SHARING:
        return [
            StoredEvent(seq=e.seq, payload=dumps(row if e.thread_id == thread_id else e.to_dict()))
            for e, row in zip(events, rows, strict=True)
        ]


def _undecodable(seq: int, thread_id: str) -> CheckpointDecodeError:
    return CheckpointDecodeError(f"event {seq} of thread {thread_id!r} is not a stored event.")


def decode_event(raw: Any, seq: int, thread_id: str, before: Event | None = None) -> Event:
    """The event a row decoded to (``raw``), in either form; ``before`` is the event of the
    row before it, which a ``run_end`` stored without its state takes it from."""
    if type(raw) is dict:
        return Event.from_dict(raw)
    if type(raw) is not list or len(raw) not in (_FULL, _SAME_STATE) or raw[0] != COMPACT:
        raise _undecodable(seq, thread_id)
    _, kind, node, run_id, namespace, step, ts, *rest = raw
    if rest:
        data = rest[0]
    elif before is not None and before.type == "values" and before.seq == seq - 1:
        data = dict(before.data) if isinstance(before.data, dict) else before.data
    else:
        msg = f"event {seq} of thread {thread_id!r} refers to a values event {seq - 1} not found."
        raise CheckpointDecodeError(msg)
    return Event(
        seq=seq,
        type=str(kind),
        node=node,
        run_id=str(run_id),
        thread_id=thread_id,
        data=data,
        namespace=tuple(namespace or ()),
        step=step,
        ts=float(ts or 0.0),
    )


def _takes_state(raw: Any) -> bool:
    return type(raw) is list and len(raw) == _SAME_STATE


async def read_stored_events(backend: Backend, thread_id: str, since: int = 0) -> list[Event]:
    """The thread's events with ``seq >= since``, decoded (one read; two when the first is
    a ``run_end`` whose state is in the row before ``since``: read again from that one)."""
    rows = await backend.read_events(thread_id, since)
    loads = backend.serializer.loads
    decoded = [loads(row.payload) for row in rows]
    if rows and rows[0].seq == since > 0 and _takes_state(decoded[0]):
        rows = await backend.read_events(thread_id, since - 1)
        decoded = [loads(row.payload) for row in rows]
    before: Event | None = None
    events: list[Event] = []
    for row, raw in zip(rows, decoded, strict=True):
        before = decode_event(raw, row.seq, thread_id, before)
        if row.seq >= since:
            events.append(before)
    return events


def stored_run_id(raw: Any) -> str | None:
    """The run a decoded row belongs to, in either form (``None``: not an event row)."""
    if type(raw) is dict:
        run_id = raw.get("run_id")
        return run_id if isinstance(run_id, str) else None
    if type(raw) is list and len(raw) in (_FULL, _SAME_STATE) and raw[0] == COMPACT:
        return raw[3] if isinstance(raw[3], str) else None
    return None
