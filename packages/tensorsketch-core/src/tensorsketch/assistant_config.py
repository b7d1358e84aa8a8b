"""The assistant configuration a run executes with, readable by the nodes of the run.

An assistant (:mod:`tensorsketch.runs.assistants`) is a stored, versioned configuration of a
graph. A run submitted with one carries the version's configuration in its record; while the
runner executes it, the configuration is bound here: the graph's top-level agents apply it
(model, system prompt, tools, limits), and any node reads it with :func:`current_assistant`
(its free-form ``context``, say).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

__all__ = ["CONFIG", "bound_assistant", "current_assistant"]

#: The configuration bound here (:func:`bound_assistant`); the runner sets and resets it
#: itself, once a segment, with the run's other bindings.
CONFIG: ContextVar[Mapping[str, Any] | None] = ContextVar("tensorsketch_assistant", default=None)


def current_assistant() -> Mapping[str, Any] | None:
    """The configuration of the assistant version this run executes with (``None``: none)."""
    return CONFIG.get()


@contextlib.contextmanager
def bound_assistant(config: Mapping[str, Any] | None) -> Iterator[None]:
    """Bind ``config`` for the code (and the tasks it starts) inside the block."""
    token = CONFIG.set(config)
    try:
        yield
    finally:
        CONFIG.reset(token)
