"""How a run's stream events are stored: one row per commit, keyed by its last event's seq.

A commit's events (a barrier's, or those flushed as a run ends) share a row::

    [3, run_id, first_seq, takes, lent, type, node, namespace, step, ts, data, type, ...]

six items per event after a five-item head: the thread and each ``seq`` are not repeated
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

``lent`` lists the ``node_end`` events (their indexes) whose ``writes`` are fields of the
next ``values`` event in the row: each field the same object, or a list of the same
objects (an agent writes its whole transcript back). Their ``writes`` are stored as the
list of those field names, and the reader takes the values (a list copied) from that
``values`` event; ``None``: none. A node that writes back its state held it twice in the
row: about 40 % of an agent turn's bytes.

Rows of the form before ``lent`` (``2``, a four-item head) read as they did. A commit whose
events are not one run's consecutive events of this thread (none the engine writes) is
stored as rows written before either form were: an ``Event.to_dict()`` mapping per event,
under its own seq. Those rows read back as they always did.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, Final

from tensorsketch.errors import CheckpointDecodeError
from tensorsketch.events import Event, new_event
from tensorsketch.runtime.backends.base import Backend, StoredEvent
from tensorsketch.serializers import Serializer, shared_encoding

__all__ = ["decode_row", "encode_events", "read_stored_events", "stored_run_id"]

#: The first item of a commit's row: the form's version (``2``: written before ``lent``).
BATCH: Final = 3
#: Items in a row's head, by version, and per event.
_HEADS: Final = {3: 5, 2: 4}
_HEAD, _STRIDE = 5, 6
#: A field missing from a ``values`` event's state.
_ABSENT: Final = object()
#: The namespace slot of a top-level event (nearly all of them): the row is only packed,
#: so its slots share this one list, not a new empty list each.
_NO_NAMESPACE: Final[list[str]] = []


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
    row: list[Any] = [BATCH, run_id, seq, None, None]
    before: Event | None = None
    # The `node_end` events since the last `values`: (index, where its data is, writes).
    ended: list[tuple[int, int, dict[str, Any]]] = []
    for i, e in enumerate(events):
        if e.seq != seq + i or e.run_id != run_id or e.thread_id != thread_id:
            # Not one run's consecutive events of this thread: the old form, a row each.
            return [StoredEvent(seq=e.seq, payload=serializer.dumps(e.to_dict())) for e in events]
        data, kind = e.data, e.type
        if kind == "node_end":
            if type(data) is dict and type(writes := data.get("writes")) is dict and writes:
                ended.append((i, len(row) + 5, writes))
        elif kind == "values":
            if ended and type(data) is dict:
                # Which of them wrote only fields this state holds as they were written: the
                # same object, or a list of the same objects (no value is compared).
                for index, at, writes in ended:
                    for name, written in writes.items():
                        held = data.get(name, _ABSENT)
                        if written is not held and not (
                            type(written) is list
                            and type(held) is list
                            and len(written) == len(held)
                            and all(map(operator.is_, written, held))
                        ):
                            break
                    else:
                        row[at] = {**row[at], "writes": list(writes)}
                        if row[4] is None:
                            row[4] = []
                        row[4].append(index)
            ended = []
        elif kind == "run_end" and row[3] is None and before and before.type == "values":
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
        namespace = list(e.namespace) if e.namespace else _NO_NAMESPACE
        row += (kind, e.node, namespace, e.step, e.ts, data)
        before = e
    return [StoredEvent(seq=events[-1].seq, payload=serializer.dumps(row))]


def _undecodable(seq: int, thread_id: str) -> CheckpointDecodeError:
    return CheckpointDecodeError(f"event {seq} of thread {thread_id!r} is not a stored event.")


def decode_row(raw: Any, seq: int, thread_id: str) -> list[Event]:
    """The events of a row stored under ``seq`` (``raw``: its payload, decoded), any form."""
    if type(raw) is dict:
        return [Event.from_dict(raw)]
    head = _HEADS.get(raw[0]) if type(raw) is list and raw else None
    if head is None or len(raw) < head + _STRIDE or (len(raw) - head) % _STRIDE:
        raise _undecodable(seq, thread_id)
    run_id, first, takes = str(raw[1]), raw[2], raw[3]
    lent = raw[4] if head == 5 else None
    count = (len(raw) - head) // _STRIDE
    if not isinstance(first, int) or first + count - 1 != seq:
        raise _undecodable(seq, thread_id)
    events: list[Event] = []
    for i in range(count):
        at = head + i * _STRIDE
        kind, node, namespace, step, ts, data = raw[at : at + _STRIDE]
        if i == takes and i and isinstance(events[-1].data, dict):
            data = dict(events[-1].data)  # a mapping of its own, as the live stream sent
        events.append(
            new_event(
                first + i,
                str(kind),
                node,
                run_id,
                thread_id,
                data,
                tuple(namespace) if namespace else (),
                step,
                float(ts or 0.0),
            )
        )
    if lent:
        _lend_writes(events, lent, seq, thread_id)
    return events


def _lend_writes(events: list[Event], lent: Any, seq: int, thread_id: str) -> None:
    """Give each ``node_end`` of ``lent`` its ``writes`` back, from the next ``values``."""
    if type(lent) is not list:
        raise _undecodable(seq, thread_id)
    try:
        for index in lent:
            data = events[index].data
            state = next(e.data for e in events[index + 1 :] if e.type == "values")
            data["writes"] = {
                name: list(held) if type(held := state[name]) is list else held
                for name in data["writes"]
            }
    except (IndexError, KeyError, StopIteration, TypeError):
        raise _undecodable(seq, thread_id) from None


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
    elif type(raw) is list and len(raw) > _HEAD and raw[0] in _HEADS:
        run_id = raw[1]
    else:
        return None
    return run_id if isinstance(run_id, str) else None
