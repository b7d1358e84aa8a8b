"""``Event``: one typed item of a run's stream."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["BUILTIN_EVENT_TYPES", "Event", "new_event"]

#: Types the runtime itself emits; anything else comes from ``ctx.emit``.
BUILTIN_EVENT_TYPES: Final = frozenset(
    {
        "run_start",
        "node_start",
        "node_end",
        "node_retry",
        "values",
        "run_end",
        "token",
        "tool_call_delta",
        "reasoning_delta",
        "tool",
        "interrupt",
        "effect_in_doubt",
    }
)


@dataclass(frozen=True, slots=True)
class Event:
    """One event of a run.

    :param seq: strictly increasing per thread, also across resumes (the replay cursor).
    :param type: ``run_start``, ``node_start``, ``node_end``, ``node_retry`` (an attempt
        failed and will run again: ``attempt``, ``error``, ``delay``), ``values`` (merged
        state after a superstep), ``run_end`` (success only), ``token`` (model text delta),
        ``tool_call_delta`` (a fragment of a tool call's arguments), ``reasoning_delta`` (a
        piece of the model's reasoning or its summary: ``text``),
        ``tool`` (an agent's tool call: ``phase`` ``start`` with ``id``/``name``/``args``,
        then ``end`` with ``result``/``is_error``), ``interrupt`` (the run suspended;
        ``data["interrupts"]`` lists what it waits on), ``effect_in_doubt`` (a resumed run
        found an effect started but never recorded: ``key``, ``effect``, ``args``,
        ``policy`` and the ``action`` taken — ``retry``, ``ask``, ``fail`` or ``settled``)
        or a custom type.
    :param node: the node that produced it (``None`` for run-level events).
    :param namespace: the path of nested runs (sub-graphs, sub-agents) the event came from.
    """

    seq: int
    type: str
    node: str | None
    run_id: str
    thread_id: str | None
    data: Any = None
    namespace: tuple[str, ...] = ()
    step: int | None = None
    ts: float = field(default=0.0, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (``data`` is passed through as is)."""
        return {
            "seq": self.seq,
            "type": self.type,
            "node": self.node,
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "namespace": list(self.namespace),
            "step": self.step,
            "ts": self.ts,
            "data": self.data,
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Event:
        """Rebuild an event stored with :meth:`to_dict`."""
        return cls(
            seq=int(raw["seq"]),
            type=str(raw["type"]),
            node=raw.get("node"),
            run_id=str(raw.get("run_id", "")),
            thread_id=raw.get("thread_id"),
            data=raw.get("data"),
            namespace=tuple(raw.get("namespace") or ()),
            step=raw.get("step"),
            ts=float(raw.get("ts") or 0.0),
        )


class _Draft:
    """:class:`Event`'s slots, in its order, without the frozen ``__setattr__``: an event is
    built as one and handed the frozen class (``__class__`` may move between classes of one
    layout), where :class:`Event`'s own ``__init__`` calls ``object.__setattr__`` per field —
    nine calls for each of the events a streamed run emits."""

    __slots__ = Event.__slots__  # the same layout (new_event below sets each field)


def new_event(
    seq: int,
    type: str,
    node: str | None,
    run_id: str,
    thread_id: str | None,
    data: Any,
    namespace: tuple[str, ...],
    step: int | None,
    ts: float,
) -> Event:
    """An :class:`Event` of these fields, all given, in their order: the same object
    ``Event(...)`` makes (frozen, equal, pickled alike), built at about a fifth of the cost
    (the fields are stored directly, then the draft takes the frozen class)."""
    event: Any = _Draft()
    event.seq = seq
    event.type = type
    event.node = node
    event.run_id = run_id
    event.thread_id = thread_id
    event.data = data
    event.namespace = namespace
    event.step = step
    event.ts = ts
    event.__class__ = Event
    return event  # type: ignore[no-any-return]
