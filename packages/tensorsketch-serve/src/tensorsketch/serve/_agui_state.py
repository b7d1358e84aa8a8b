"""AG-UI shared state: the graph's state as JSON, and the JSON Patch between two of them.

A frontend keeps a copy of the agent's state. The first state a run reports travels whole
(``STATE_SNAPSHOT``); every later superstep sends only what changed, as an RFC 6902 patch
(``STATE_DELTA``). The patch comes from ``jsonpatch``, the reference Python implementation,
which compares values by type (``1`` and ``true`` differ, as they do in JSON).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import jsonpatch
from pydantic_core import to_jsonable_python

__all__ = ["StateTracker", "state_json"]


def state_json(values: Mapping[str, Any], exclude: Collection[str] = ()) -> dict[str, Any]:
    """The state as plain JSON data (pydantic models dumped, other objects as their ``str``),
    without the fields in ``exclude`` (the transcript, which travels as messages)."""
    return {
        name: to_jsonable_python(value, fallback=str, inf_nan_mode="null")
        for name, value in values.items()
        if name not in exclude
    }


class StateTracker:
    """Remembers the state last sent to a client and says how to bring it up to date.

    :meth:`update` returns ``("snapshot", state)`` the first time, then ``("delta", patch)``
    for a change, or ``None`` when nothing changed.
    """

    def __init__(self, exclude: Collection[str] = ()) -> None:
        self._exclude = frozenset(exclude)
        self._sent: dict[str, Any] | None = None

    def update(self, values: Mapping[str, Any]) -> tuple[str, Any] | None:
        current = state_json(values, self._exclude)
        previous, self._sent = self._sent, current
        if previous is None:
            return "snapshot", current
        patch: list[dict[str, Any]] = jsonpatch.make_patch(previous, current).patch
        return ("delta", patch) if patch else None
