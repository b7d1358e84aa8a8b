"""The two pseudo-nodes every graph has: ``START`` and ``END``."""

from __future__ import annotations

from typing import Any, Final

__all__ = ["END", "START"]

#: Where a run enters the graph: ``edge(START, "First")``.
START: Final = "__start__"
#: Where a branch of the run stops: ``edge("Last", END)``.
END: Final = "__end__"


def __getattr__(name: str) -> Any:
    # ``Send`` lived here before it got its own module (:mod:`tensorsketch.send`); the old
    # path still resolves, so code and saved type references that name it keep working.
    if name == "Send":
        from tensorsketch.send import Send

        return Send
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
