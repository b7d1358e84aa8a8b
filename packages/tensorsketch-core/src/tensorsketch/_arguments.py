"""``argparse`` types for the command line's numbers: a bad value is a usage error naming the
argument (status 2), never a traceback from inside the command or a value silently taken.

Below the engine, so any command's ``configure`` may use them (``tensorsketch.cli`` re-exports
them for plugins).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

__all__ = ["count", "port", "seconds"]

#: What :func:`_parsed` converts to.
_N = TypeVar("_N", int, float)


def _parsed(text: str, convert: Callable[[str], _N], what: str) -> _N:
    """``convert(text)``, or the usage error that says what the argument must be."""
    try:
        return convert(text)
    except ValueError:
        msg = f"must be {what}, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None


def port(text: str) -> int:
    """An ``argparse`` ``type=`` for a TCP port: an int in 0-65535 (0: any free port), so a
    bad ``--port`` is a usage error at parse time rather than a server's traceback."""
    value = _parsed(text, int, "a number 0-65535")
    if not 0 <= value <= 65535:
        msg = f"must be 0-65535, got {text}"
        raise argparse.ArgumentTypeError(msg)
    return value


def seconds(text: str) -> float:
    """An ``argparse`` ``type=`` for a wait: a finite number of seconds above 0."""
    value = _parsed(text, float, "a number of seconds")
    if not 0 < value < float("inf"):
        msg = f"must be more than 0 seconds, got {text}"
        raise argparse.ArgumentTypeError(msg)
    return value


def count(text: str) -> int:
    """An ``argparse`` ``type=`` for how many: a whole number, 1 or more."""
    value = _parsed(text, int, "a whole number")
    if value < 1:
        msg = f"must be 1 or more, got {text}"
        raise argparse.ArgumentTypeError(msg)
    return value
