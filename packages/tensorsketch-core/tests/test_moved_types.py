"""Data written before the engine and durability became packages still decodes: a type tag
names the module a class was defined in then, and each such tag finds the class at its new
home (through the old module's re-export, or the serializer's table of renamed modules)."""

from __future__ import annotations

import importlib
import time
from typing import Any

import pytest

from tensorsketch.durable import Checkpoint, CheckpointInfo, NeedsLoop, Opened, Position, Restored
from tensorsketch.executors import SendCall, Superstep, TaskOutcome
from tensorsketch.interrupts import PendingInterrupt
from tensorsketch.pregel.replay import ReplayedTask
from tensorsketch.runtime.backends.sql_query import Query
from tensorsketch.serializers import JsonSerializer

_PENDING = PendingInterrupt(id="call_1", kind="approval", value={"tool": "refund"})

#: ``(value, the module its class was defined in before the move)``.
MOVED: list[tuple[Any, str]] = [
    (
        Checkpoint("c1", "t", None, 2, {"n": 1}, (("A", None),), time.time(), joins=()),
        "tensorsketch.durable",
    ),
    (
        CheckpointInfo("c1", "t", None, 2, (("A", None),), 1.0, changed=("n",)),
        "tensorsketch.durable",
    ),
    (Position({"n": 1}, 3, 4), "tensorsketch.durable"),
    (Restored({"n": 1}, 1, 2, "c1", "c1", [_PENDING], [("A", None)]), "tensorsketch.durable"),
    (Opened(created="c1"), "tensorsketch.durable"),
    (NeedsLoop.NEEDS_LOOP, "tensorsketch.durable"),
    (_PENDING, "tensorsketch.interrupts"),
    (SendCall(0, "Square", "#0", {"n": 3}), "tensorsketch.executors"),
    (
        Superstep(
            "g",
            1,
            {"n": 1},
            [],
            {},
            "r",
            None,
            (),
            durable=False,
            streaming=False,
            max_concurrency=None,
        ),
        "tensorsketch.executors",
    ),
    (TaskOutcome(0, "done", {"n": 9}), "tensorsketch.executors"),
    (ReplayedTask("#1", {"n": 2}), "tensorsketch.node_replay"),
    (Query("select 1", (1,)), "tensorsketch.runtime.backends.sql"),
]


@pytest.mark.parametrize(("value", "old_module"), MOVED, ids=lambda v: type(v).__name__)
def test_a_tag_written_under_the_old_module_decodes(value: Any, old_module: str) -> None:
    importlib.import_module("tensorsketch.runtime.backends.sql")  # the old home is imported
    serializer = JsonSerializer()
    cls = type(value)
    new_tag = f"{cls.__module__}:{cls.__qualname__}".encode()
    old_tag = f"{old_module}:{cls.__qualname__}".encode()
    assert old_tag != new_tag, "the class did not move; take it out of MOVED"
    written = serializer.dumps({"v": value})
    assert new_tag in written
    assert serializer.loads(written.replace(new_tag, old_tag)) == {"v": value}
