"""The delta ladder against a plain model: whatever sequence of sets, appends and unsets a
thread goes through, and wherever it is resumed, every checkpoint reads back exactly, through
a bounded chain of rows."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tensorsketch.durable import ladder as durable
from tensorsketch.durable import load_chain, read_checkpoint
from tensorsketch.durable.ladder import LadderWriter, Position, rebuild
from tensorsketch.runtime.backends.memory import InMemoryBackend

FIELDS = ("a", "b", "c")

# One barrier's change to one field: append items, set a value (a list or not), or unset.
change = st.one_of(
    st.tuples(st.just("append"), st.lists(st.integers(0, 9), max_size=3)),
    st.tuples(st.just("set"), st.one_of(st.integers(), st.lists(st.integers(0, 9), max_size=3))),
    st.tuples(st.just("unset")),
)
barrier = st.dictionaries(st.sampled_from(FIELDS), change, max_size=3)
#: A barrier, and whether the runner stops after it (the next one resumes the thread).
steps = st.lists(st.tuples(barrier, st.booleans()), min_size=1, max_size=150)


def _apply(values: dict[str, Any], changes: dict[str, tuple[Any, ...]]) -> dict[str, Any]:
    """The engine's side: fold one barrier, report it as ``Run._fold`` does."""
    changed: dict[str, list[Any] | None] = {}
    for name, op in changes.items():
        if op[0] == "append" and isinstance(values.get(name, []), list):
            values[name] = [*values.get(name, []), *op[1]]
            changed[name] = list(op[1])
        elif op[0] in ("append", "set"):
            values[name] = op[1]
            changed[name] = None
        else:
            values.pop(name, None)
            changed[name] = None
    return changed


def _at(run: Any) -> Position:
    return Position(values=run.values, step=run.step, seq=run.seq)


def _most_rows(fanout: int, checkpoints: int) -> int:
    """The longest chain a read may fold: the snapshot and ``fanout - 1`` rows per level."""
    levels = 1
    while fanout**levels <= checkpoints:
        levels += 1
    return 1 + (fanout - 1) * levels


async def _drive(plan: list[tuple[dict[str, Any], bool]], fanouts: tuple[int, ...] = ()) -> None:
    """Write ``plan``, every stop reopening the thread (with the next of ``fanouts``, as a
    release with another fan-out would), then read every checkpoint back."""
    backend = InMemoryBackend()
    used = {durable.FANOUT}
    reopened = 0
    run: Any = SimpleNamespace(values={"a": [1]}, step=0, seq=0, checkpoint_id=None)
    writer = LadderWriter("t", backend.serializer, None)
    expected = [dict(run.values)]
    first, ladder = writer.encode(_at(run), None, [], source="input", parent_id=None)
    await backend.save_checkpoint(first)
    run.checkpoint_id, writer.ladder = first.checkpoint_id, ladder
    for changes, stop in plan:
        run.step += 1
        changed = _apply(run.values, changes)
        stored, ladder = writer.encode(
            _at(run), changed, [], source="loop", parent_id=run.checkpoint_id
        )
        await backend.save_checkpoint(stored)
        run.checkpoint_id, writer.ladder = stored.checkpoint_id, ladder
        expected.append({k: (list(v) if isinstance(v, list) else v) for k, v in run.values.items()})
        if stop:  # a new runner opens the thread: the ladder comes back from the store
            if fanouts:
                durable.FANOUT = fanouts[reopened % len(fanouts)]
                used.add(durable.FANOUT)
                reopened += 1
            writer = LadderWriter("t", backend.serializer, None)
            rebuilt = rebuild(backend, await backend.read_chain("t"), None, ladder=True)
            assert rebuilt.checkpoint is not None and not rebuilt.incomplete
            assert rebuilt.checkpoint.values == expected[-1]
            writer.ladder = rebuilt.ladder
    stored_all = await backend.list_checkpoints("t")
    history = load_chain(backend, stored_all)
    assert [c.values for c in history] == expected
    for checkpoint, values in zip(history, expected, strict=True):
        chain = await backend.read_chain("t", checkpoint.id)
        assert len(chain) <= max(_most_rows(f, len(stored_all)) for f in used), len(chain)
        found = await read_checkpoint(backend, "t", checkpoint.id)
        assert found is not None and found.values == values


@settings(max_examples=60, deadline=None)
@given(plan=steps)
def test_every_checkpoint_reads_back_exactly(plan: list[tuple[dict[str, Any], bool]]) -> None:
    asyncio.run(_drive(plan))


@settings(max_examples=40, deadline=None)
@given(plan=steps)
def test_every_checkpoint_reads_back_exactly_across_epochs(
    plan: list[tuple[dict[str, Any], bool]],
) -> None:
    saved = durable.MIN_CHAIN_BYTES, durable.SNAPSHOT_RATIO
    durable.MIN_CHAIN_BYTES, durable.SNAPSHOT_RATIO = 0, 2.0  # epochs end within the thread
    try:
        asyncio.run(_drive(plan))
    finally:
        durable.MIN_CHAIN_BYTES, durable.SNAPSHOT_RATIO = saved


@settings(max_examples=40, deadline=None)
@given(plan=steps, fanouts=st.lists(st.sampled_from([2, 4, 8]), min_size=1, max_size=4))
def test_every_checkpoint_reads_back_exactly_when_the_fanout_changes(
    plan: list[tuple[dict[str, Any], bool]], fanouts: list[int]
) -> None:
    """A thread written with another fan-out (earlier builds used 8) reads back,
    and continues: on the old ladder where its anchors line up, else from a new snapshot."""
    saved = durable.FANOUT
    try:
        asyncio.run(_drive(plan, tuple(fanouts)))
    finally:
        durable.FANOUT = saved
