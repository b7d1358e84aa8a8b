"""One statement of a unit of work, as the SQL backends and their run store pass it around."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Fetch", "Query"]

Fetch = Literal["none", "one", "all", "rowcount", "fence", "fence_row"]


@dataclass(slots=True)
class Query:
    """One statement of a unit of work, already in the dialect's placeholder style.

    Not frozen, though nothing changes one once built: a run builds a dozen or more, and a
    frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field) costs twice as
    much as a plain one.

    :param many: run it once per row of ``params`` (``executemany``).
    :param fetch: what the unit of work returns for this statement (``"fence"``: nothing, the
        unit fails unless it changed one row; ``"fence_row"``: its one returned row, the unit
        fails when there is none or its first column is ``NULL``).
    :param binary: a hint for drivers with a binary result format (psycopg): rows full of
        payload bytes transfer and decode faster in it than as hex text.
    """

    sql: str
    params: Sequence[Any] = ()
    many: bool = False
    fetch: Fetch = "none"
    binary: bool = False
