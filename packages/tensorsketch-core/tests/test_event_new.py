"""``new_event`` builds the events a run emits without the frozen dataclass's ``__init__``
(an ``object.__setattr__`` per field): the object it returns is an :class:`Event` like any
other — frozen, equal, hashed, pickled and printed alike."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from tensorsketch.events import Event, new_event

FIELDS: dict[str, Any] = {
    "seq": 4,
    "type": "node_end",
    "node": "A",
    "run_id": "r1",
    "thread_id": "t1",
    "data": {"writes": {"n": 1}},
    "namespace": ("sub:1",),
    "step": 2,
    "ts": 1796609073.5,
}


def test_new_event_is_the_event_the_constructor_makes() -> None:
    made, built = new_event(*FIELDS.values()), Event(**FIELDS)
    assert type(made) is Event
    assert made == built and repr(made) == repr(built)
    assert made.to_dict() == built.to_dict()
    assert pickle.loads(pickle.dumps(made)) == built
    assert dataclasses.replace(made, seq=5) == dataclasses.replace(built, seq=5)
    plain = new_event(1, "values", None, "r", None, None, (), None, 0.5)
    assert hash(plain) == hash(Event(1, "values", None, "r", None, None, (), None, 0.5))


def test_new_event_is_frozen() -> None:
    made = new_event(*FIELDS.values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.seq = 5  # type: ignore[misc]


def test_new_event_takes_every_field_in_order() -> None:
    # A field added to Event must be added here too, or its events would lack it.
    names = [f.name for f in dataclasses.fields(Event)]
    assert list(inspect.signature(new_event).parameters) == names
    assert names == list(FIELDS)
