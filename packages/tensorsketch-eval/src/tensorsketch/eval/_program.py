"""What an optimizer optimizes: a :class:`Program` — the agent's current :class:`Prompt` and
how to build the agent for any other prompt.

:class:`~tensorsketch.eval.PromptSource` makes one from an agent's source file; in code,
``Program(Prompt("Be brief."), lambda p: create_agent(model, system=p.render()))`` is one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tensorsketch.eval._prompt import Prompt

__all__ = ["Program"]


@dataclass(frozen=True, slots=True)
class Program:
    """An agent whose prompt can change.

    :param prompt: the prompt it has now (the optimization's starting point).
    :param build: ``build(prompt)`` returns the agent with that prompt: a compiled graph or a
        factory ``agent(env)``, as :func:`~tensorsketch.eval.evaluate` takes.
    """

    prompt: Prompt
    build: Callable[[Prompt], Any]

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, Prompt):
            msg = f"Program(prompt) must be a Prompt, got {type(self.prompt).__name__}."
            raise TypeError(msg)
        if not callable(self.build):
            msg = f"Program(build) must be a function build(prompt) -> agent, got {self.build!r}."
            raise TypeError(msg)
