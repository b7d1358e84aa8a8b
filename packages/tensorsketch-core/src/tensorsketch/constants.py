"""The two pseudo-nodes every graph has, and the ``Send`` instruction for dynamic fan-out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

__all__ = ["END", "START", "Send"]

#: Where a run enters the graph: ``edge(START, "First")``.
START: Final = "__start__"
#: Where a branch of the run stops: ``edge("Last", END)``.
END: Final = "__end__"


@dataclass(frozen=True, slots=True)
class Send:
    """Run ``node`` once more in the next superstep, with ``payload`` overlaid on the state.

    Returned (usually in a list) from a router's path function. ``payload`` is a dict of state
    fields, or an instance of the target node's ``In`` schema; fields it omits are read from
    the shared state as usual. Each Send is its own task and journals its effects under its
    own key, so a crash halfway through a fan-out replays only the finished workers.
    """

    node: str
    payload: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.node, str) or not self.node:
            msg = f"Send(node=...) needs a node name (a non-empty str), got {self.node!r}."
            raise TypeError(msg)
