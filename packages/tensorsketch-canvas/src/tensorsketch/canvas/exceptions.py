"""Every error and warning the canvas engine raises, in one place.

::

    CanvasError                      base of everything below
    ├── SourceParseError(ValueError)     the file is not valid Python, so nothing can be read
    ├── GraphNotFoundError(LookupError)  no graph builder, or no graph with the asked name
    ├── IRError(ValueError)              a GraphIR is malformed or an edit on it makes no sense
    └── WriteBackError(ValueError)       the edit would need code the canvas never writes
                                         (a node body, a class in another module, ...)

    CanvasWarning(UserWarning)       a file or sidecar entry was skipped; the rest still works

Messages name the offending value and say what to do about it.
"""

from __future__ import annotations

__all__ = [
    "CanvasError",
    "CanvasWarning",
    "GraphNotFoundError",
    "IRError",
    "SourceParseError",
    "WriteBackError",
]


class CanvasError(Exception):
    """Base class of the canvas engine's errors."""


class SourceParseError(CanvasError, ValueError):
    """The source is not valid Python; extraction needs a file that parses.

    Undefined names, missing imports and unfinished node bodies are fine — only a syntax
    error stops extraction.
    """


class GraphNotFoundError(CanvasError, LookupError):
    """The source has no ``Graph(...)`` builder, or none under the requested name."""


class IRError(CanvasError, ValueError):
    """A :class:`~tensorsketch.canvas.ir.GraphIR` is malformed or an edit on it is impossible."""


class WriteBackError(CanvasError, ValueError):
    """The edited IR asks for a change the canvas must not make in code.

    The canvas rewrites wiring and creates stubs; it never edits a node body or a class that
    lives in another module.
    """


class CanvasWarning(UserWarning):
    """A file, or an entry of a layout sidecar, was skipped; everything else was read."""
