"""Write-back phase 2: diff the old wiring items against the plan, per stream.

The result is a set of :class:`Slots`: which old items go, and next to which surviving item
each new one is written, so new wiring lands beside its neighbours in the file. A new item
that replaces exactly one old item inherits that item's comments.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from tensorsketch.canvas._render import Fresh
from tensorsketch.canvas._wiring import GraphModel, Item

__all__ = ["Slots", "diff"]


@dataclass
class Slots:
    """Where new items go, relative to existing ones."""

    before: dict[int, list[Fresh]] = field(default_factory=dict)
    after: dict[int, list[Fresh]] = field(default_factory=dict)
    deleted: set[int] = field(default_factory=set)
    inherit: dict[int, Item] = field(default_factory=dict)
    chain_start: list[Fresh] = field(default_factory=list)
    chain_end: list[Fresh] = field(default_factory=list)
    after_creation: list[Fresh] = field(default_factory=list)


def diff(
    slots: Slots,
    model: GraphModel,
    old: list[Item],
    plan: list[Fresh],
    *,
    stream: str,
    last_node: Item | None = None,
) -> None:
    """Record in ``slots`` how ``old`` (one stream of ``model``'s items) becomes ``plan``.

    ``last_node`` is the last node declaration, where edges go when the file has none yet.
    """
    a = [("old", id(item)) for item in old]
    b = [("old", id(p.origin)) if p.origin is not None else ("new", k) for k, p in enumerate(plan)]
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        slots.deleted.update(id(item) for item in old[i1:i2])
        new = plan[j1:j2]
        if not new:
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            for fresh, item in zip(new, old[i1:i2], strict=True):
                if fresh.origin is None:
                    slots.inherit[id(fresh)] = item
        elif tag == "replace" and i2 - i1 == 1 and new[0].origin is None:
            # one item became several (a node spliced into an edge): the first keeps its
            # comments, so none is lost
            slots.inherit[id(new[0])] = old[i1]
        if tag == "replace":
            slots.before.setdefault(id(old[i1]), []).extend(new)
        elif i1 > 0:
            slots.after.setdefault(id(old[i1 - 1]), []).extend(new)
        elif old:
            slots.before.setdefault(id(old[0]), []).extend(new)
        elif stream == "edges" and last_node is not None:
            slots.after.setdefault(id(last_node), []).extend(new)
        elif model.style == "fluent" or model.var is None:
            (slots.chain_start if stream == "nodes" else slots.chain_end).extend(new)
        else:
            slots.after_creation.extend(new)
