"""A tally file: a child process appends a line each time something happens (a sweep, a
delivery), and a test waits for a count instead of sleeping for a while.

The child writes with :func:`mark`; the test reads with :func:`count` and waits with
:func:`wait_for`. A missing file counts zero (nothing happened yet).
"""

from __future__ import annotations

import time
from pathlib import Path

__all__ = ["count", "mark", "wait_for"]


def mark(path: str | Path, note: object = "") -> None:
    """Append one line (``note``) to the tally at ``path``."""
    with open(path, "a", encoding="utf-8") as tally:
        tally.write(f"{note}\n")


def count(path: str | Path) -> int:
    """How many lines the tally at ``path`` holds."""
    try:
        return len(Path(path).read_text(encoding="utf-8").splitlines())
    except FileNotFoundError:
        return 0


def wait_for(path: str | Path, at_least: int, timeout: float = 30) -> int:
    """Wait until the tally at ``path`` holds ``at_least`` lines; fail the test after
    ``timeout`` seconds, saying how many it saw. Returns the count."""
    deadline = time.monotonic() + timeout
    while (seen := count(path)) < at_least:
        assert time.monotonic() < deadline, f"{path} counted {seen}, not {at_least}, in {timeout}s"
        time.sleep(0.02)
    return seen
