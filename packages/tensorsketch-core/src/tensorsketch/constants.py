"""The two pseudo-nodes every graph has: ``START`` and ``END``."""

from __future__ import annotations

from typing import Final

# ``Send`` lived here before it got its own module (:mod:`tensorsketch.send`); the old path
# still resolves, so code and saved type references that name it keep working.
from tensorsketch.send import Send as Send

__all__ = ["END", "START"]

#: Where a run enters the graph: ``edge(START, "First")``.
START: Final = "__start__"
#: Where a branch of the run stops: ``edge("Last", END)``.
END: Final = "__end__"
