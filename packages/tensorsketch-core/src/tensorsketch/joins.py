"""Wait-for-all joins: ``edge(["A", "B"], "C")`` runs ``C`` once after both ``A`` and ``B`` ran.

A join is a barrier, not a route. At every superstep's barrier the engine notes which of the
join's sources ran in it; once all of them have run since the join last fired, the target is
planned for the next superstep and the join starts counting again (so it also works in a
loop). The arrivals are part of the run's position: a checkpoint stores them beside the plan,
so a resume, a fork or an ``update_state`` continues the count exactly where it stood.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Join", "JoinState"]


@dataclass(frozen=True, slots=True, eq=False)
class Join:
    """One join as the engine sees it: its sources in declared order, its target, and its
    position in ``GraphSpec.joins`` (the key of its arrivals in a run)."""

    sources: tuple[str, ...]
    target: str
    index: int


@dataclass(frozen=True, slots=True)
class JoinState:
    """A join that is part-way: which of its ``sources`` have ``arrived`` (run) since it last
    fired. A checkpoint lists one per join with at least one arrival (``Checkpoint.joins``)."""

    target: str
    sources: tuple[str, ...]
    arrived: tuple[str, ...]


Arrivals = dict[int, set[str]]


def snapshot(joins: tuple[Join, ...], arrived: Mapping[int, set[str]]) -> tuple[JoinState, ...]:
    """The part-way joins of a run, in declaration order (arrivals in source order)."""
    return tuple(
        JoinState(j.target, j.sources, tuple(s for s in j.sources if s in got))
        for j in joins
        if (got := arrived.get(j.index))
    )


def restore_arrivals(joins: tuple[Join, ...], stored: Iterable[JoinState]) -> Arrivals:
    """A run's arrivals from what a checkpoint stored.

    A join is matched by its target and its set of sources, so reordering the list in the
    source keeps the count; a stored join the graph no longer has (the graph changed) is
    dropped, since it can never fire.
    """
    by_key = {(j.target, frozenset(j.sources)): j for j in joins}
    out: Arrivals = {}
    for state in stored:
        join = by_key.get((state.target, frozenset(state.sources)))
        if join is None:
            continue
        got = {name for name in state.arrived if name in join.sources}
        if got and len(got) < len(join.sources):
            out[join.index] = got
    return out


def encode(states: tuple[JoinState, ...]) -> list[list[Any]]:
    """Plain JSON for a checkpoint payload: ``[[target, [sources...], [arrived...]], ...]``."""
    return [[s.target, list(s.sources), list(s.arrived)] for s in states]


def decode(raw: Any) -> tuple[JoinState, ...]:
    """The inverse of :func:`encode`; raises ``ValueError`` on anything else."""
    if not isinstance(raw, list):
        msg = f"joins must be a list, got {type(raw).__name__}"
        raise ValueError(msg)
    out: list[JoinState] = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 3):
            msg = f"a join entry must be [target, sources, arrived], got {item!r:.80}"
            raise ValueError(msg)
        target, sources, arrived = item
        names = (sources, arrived)
        if not isinstance(target, str) or not all(
            isinstance(part, list) and all(isinstance(n, str) for n in part) for part in names
        ):
            msg = f"a join entry must hold node names, got {item!r:.80}"
            raise ValueError(msg)
        out.append(JoinState(target, tuple(sources), tuple(arrived)))
    return tuple(out)


def arrive(arrived: Arrivals, joins: tuple[Join, ...], name: str) -> list[str]:
    """Node ``name`` ran: note it at each of its ``joins``; return the targets of those that
    now have every source (they fire, and start counting again)."""
    fired: list[str] = []
    for join in joins:
        got = arrived.get(join.index)
        if got is None:
            got = arrived[join.index] = set()
        got.add(name)
        if len(got) == len(join.sources):
            del arrived[join.index]
            fired.append(join.target)
    return fired
