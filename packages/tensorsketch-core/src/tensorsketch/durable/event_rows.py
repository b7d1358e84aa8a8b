"""How a run's stream events are stored: one row per commit, keyed by its last event's seq.

A commit's events (a barrier's, or those flushed as a run ends) share a row::

    [2, run_id, first_seq, takes, type, node, namespace, step, ts, data, type, node, ...]

six items per event after a four-item head: the thread and each ``seq`` are not repeated
(the row's thread; ``first_seq`` counts on), and the run id is written once. A list with
the events inline is one container for the encoder to walk, not a mapping per event. The
row is stored under the seq of its *last* event, so the store's ``read_events(since)``
still returns every row holding an event at or after ``since`` (the reader drops the
events before it) and its last seq is still the thread's highest event seq.

``takes`` is the index (in the row) of a ``run_end`` whose state is the ``values`` event's
just before it — the same fields holding the same objects, as the engine emits them — or
``None``: that ``run_end``'s data slot is left empty and its reader copies the state. It
was the third copy of the whole state written per run (the checkpoint, ``values``,
``run_end``).

A commit whose events are not one run's consecutive events of this thread (none the
engine writes) is stored as rows written before this form were: an ``Event.to_dict()``
mapping per event, under its own seq. Those rows read back as they always did.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Final

from tensorsketch.errors import CheckpointDecodeError
from tensorsketch.events import Event
from tensorsketch.runtime.backends.base import Backend, StoredEvent
from tensorsketch.serializers import Serializer, shared_encoding

__all__ = ["decode_row", "encode_events", "read_stored_events", "stored_run_id"]

#: The first item of a commit's row: the form's version.
BATCH: Final = 2
#: Items in a row's head, and per event.
_HEAD, _STRIDE = 4, 6


def encode_events(
    serializer: Serializer, thread_id: str, events: Sequence[Event], *, shared: bool = False
) -> list[StoredEvent]:
    """The row(s) of one commit's events (``shared``: inside the commit's
    :func:`shared_encoding` block already, whose encodings they reuse). Called for every
    commit that holds events, so its checks are inline (a function call each added up)."""
    if not events:
        return []
    if not shared:
        with shared_encoding(serializer):
            return encode_events(serializer, thread_id, events, shared=True)
    first = events[0]
    run_id, seq = first.run_id, first.seq
    for i, e in enumerate(events):  # one run's consecutive events of this thread?
        if e.seq != seq + i or e.run_id != run_id or e.thread_id != thread_id:
            return [StoredEvent(seq=e.seq, payload=serializer.dumps(e.to_dict())) for e in events]
    row: list[Any] = [BATCH, run_id, seq, None]
    before: Event | None = None
    for i, e in enumerate(events):
        data = e.data
        if e.type == "run_end" and row[3] is None and before and before.type == "values":
            # Whether it carries the state of the `values` event right before it: the same
            # fields holding the same objects (no value is compared).
            prior = before.data
            if (
                type(data) is dict
                and type(prior) is dict
                and data.keys() == prior.keys()
                and all(map(operator.is_, data.values(), map(prior.__getitem__, data)))
            ):
                row[3], data = i, None
        row += (e.type, e.node, list(e.namespace) if e.namespace else [], e.step, e.ts, data)
        before = e
    return [StoredEvent(seq=events[-1].seq, payload=serializer.dumps(row))]


def _undecodable(seq: int, thread_id: str) -> CheckpointDecodeError:
    return CheckpointDecodeError(f"event {seq} of thread {thread_id!r} is not a stored event.")


def decode_row(raw: Any, seq: int, thread_id: str) -> list[Event]:
    """The events of a row stored under ``seq`` (``raw``: its payload, decoded), either form."""
    if type(raw) is dict:
        return [Event.from_dict(raw)]
    if (
        type(raw) is not list
        or len(raw) < _HEAD + _STRIDE
        or (len(raw) - _HEAD) % _STRIDE
        or raw[0] != BATCH
    ):
        raise _undecodable(seq, thread_id)
    _, run_id, first, takes, *flat = raw
    count = len(flat) // _STRIDE
    if not isinstance(first, int) or first + count - 1 != seq:
        raise _undecodable(seq, thread_id)
    events: list[Event] = []
    for i in range(count):
        kind, node, namespace, step, ts, data = flat[i * _STRIDE : (i + 1) * _STRIDE]
        if i == takes and i and isinstance(events[-1].data, dict):
            data = dict(events[-1].data)  # a mapping of its own, as the live stream sent
        events.append(
            Event(
                seq=first + i,
                type=str(kind),
                node=node,
                run_id=str(run_id),
                thread_id=thread_id,
                data=data,
                namespace=tuple(namespace or ()),
                step=step,
                ts=float(ts or 0.0),
            )
        )
    return events


async def read_stored_events(backend: Backend, thread_id: str, since: int = 0) -> list[Event]:
    """The thread's events with ``seq >= since``, decoded (one read)."""
    loads = backend.serializer.loads
    events: list[Event] = []
    for row in await backend.read_events(thread_id, since):
        found = decode_row(loads(row.payload), row.seq, thread_id)
        if found[0].seq < since:  # a row that began before ``since``
            found = [e for e in found if e.seq >= since]
        events.extend(found)
    return events


def stored_run_id(raw: Any) -> str | None:
    """The run a decoded row belongs to, either form (``None``: not an event row)."""
    if type(raw) is dict:
        run_id = raw.get("run_id")
    elif type(raw) is list and len(raw) > _HEAD and raw[0] == BATCH:
        run_id = raw[1]
    else:
        return None
    return run_id if isinstance(run_id, str) else None
