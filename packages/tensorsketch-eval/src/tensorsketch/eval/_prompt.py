"""What an optimizer changes: a :class:`Prompt` — the agent's instructions and its few-shot
:class:`Example` demonstrations — and the one text both become in the agent's system prompt.

The rendered text is what lives in the source (``system="..."``), so an optimized agent stays
plain code; :meth:`Prompt.parse` reads a rendered prompt back into its two parts, so the next
optimization starts from them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["EXAMPLES_HEADING", "Example", "Prompt"]

#: The line that separates the instructions from the examples in a rendered prompt.
EXAMPLES_HEADING = "Examples:"

_SPLIT = f"\n\n{EXAMPLES_HEADING}\n\n"
_EXAMPLE = re.compile(r"Input: (.*?)\nOutput: (.*?)(?=\n\nInput: |\Z)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Example:
    """One demonstration: an input and the answer it should get."""

    input: str
    output: str

    def render(self) -> str:
        return f"Input: {self.input}\nOutput: {self.output}"


@dataclass(frozen=True, slots=True)
class Prompt:
    """Instructions plus few-shot examples, rendered into one system prompt."""

    instructions: str
    examples: tuple[Example, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.instructions, str):
            msg = f"Prompt(instructions) must be a str, got {type(self.instructions).__name__}."
            raise TypeError(msg)
        object.__setattr__(self, "examples", tuple(self.examples))
        for example in self.examples:
            if not isinstance(example, Example):
                msg = f"Prompt(examples=...) takes Example objects, got {example!r:.60}."
                raise TypeError(msg)

    def render(self) -> str:
        """The system prompt: the instructions, then an ``Examples:`` section if any."""
        text = self.instructions.rstrip()
        if not self.examples:
            return text
        shown = "\n\n".join(example.render() for example in self.examples)
        return f"{text}{_SPLIT}{shown}"

    @classmethod
    def parse(cls, text: str) -> Prompt:
        """Read a rendered prompt back (text without an examples section is all instructions)."""
        head, found, tail = text.rpartition(_SPLIT)
        if not found:
            return cls(text)
        matches = list(_EXAMPLE.finditer(tail))
        covered = "\n\n".join(m.group(0) for m in matches)
        if not matches or covered != tail.rstrip("\n"):
            return cls(text)  # not our format: keep it all as instructions, never lose text
        return cls(head, tuple(Example(m.group(1), m.group(2)) for m in matches))
