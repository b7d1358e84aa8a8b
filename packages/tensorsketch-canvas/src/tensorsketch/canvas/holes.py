"""Finding holes across a project: every node class whose ``run`` is still ``raise Hole(...)``.

The same syntactic reading as extraction, over many files. A file that cannot be read or
parsed is skipped with a :class:`~tensorsketch.canvas.exceptions.CanvasWarning` naming it, so
one broken file never hides the holes in the others.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorsketch.canvas._classes import find_node_classes
from tensorsketch.canvas._source import parse_source
from tensorsketch.canvas.drafts import read_drafts
from tensorsketch.canvas.exceptions import CanvasWarning, SourceParseError

__all__ = ["HoleRef", "HoleSearch", "find_holes", "search_holes"]

#: Directories never worth walking into.
_SKIP_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "build", "dist"})


@dataclass(frozen=True)
class HoleRef:
    """A node that still needs code: where it is and what its Hole says it should do."""

    file: str
    node: str
    spec: str
    line: int | None
    #: The draft a fill left for this hole (``tensorsketch holes fill`` could not verify a
    #: body): ``{"failures": [...], "attempts": n, ...}``, else ``None``.
    draft: dict[str, Any] | None = None

    @property
    def status(self) -> str:
        """``"unverified"`` when a draft body waits beside the file, else ``"needs code"``."""
        return "unverified" if self.draft is not None else "needs code"

    def to_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "node": self.node,
            "spec": self.spec,
            "line": self.line,
            "status": self.status,
            "draft": self.draft,
        }


def _python_files(path: Path) -> Iterator[Path]:
    if path.is_file():
        yield path
        return
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
        for name in sorted(files):
            if name.endswith(".py"):
                yield Path(root) / name


@dataclass(frozen=True)
class HoleSearch:
    """What :func:`search_holes` found: the holes, and ``(path, message)`` for every path it
    skipped (missing, unreadable, or not valid Python) — what :func:`find_holes` warns about."""

    holes: list[HoleRef]
    skipped: list[tuple[str, str]]


def find_holes(*paths: str | os.PathLike[str]) -> list[HoleRef]:
    """Every hole under ``paths`` (files or directories, walked recursively for ``*.py``).

    Without arguments, the current directory is searched. Results are sorted by file and line.
    A path that does not exist, or a file that cannot be read or parsed, is skipped with a
    :class:`~tensorsketch.canvas.exceptions.CanvasWarning` naming it.
    """
    found = search_holes(*paths)
    for _, message in found.skipped:
        warnings.warn(message, CanvasWarning, stacklevel=2)
    return found.holes


def search_holes(*paths: str | os.PathLike[str]) -> HoleSearch:
    """:func:`find_holes`, with the skipped paths returned instead of warned about (so a
    caller such as ``tensorsketch holes --check`` can fail on them)."""
    holes: list[HoleRef] = []
    skipped: list[tuple[str, str]] = []
    for raw in paths or (".",):
        path = Path(raw)
        if not path.exists():
            skipped.append((str(path), f"skipping {str(path)!r}: no such file or directory."))
            continue
        for file in _python_files(path):
            holes.extend(_holes_in(file, skipped))
    return HoleSearch(sorted(holes, key=lambda h: (h.file, h.line or 0, h.node)), skipped)


def _holes_in(file: Path, skipped: list[tuple[str, str]]) -> list[HoleRef]:
    try:
        text = file.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        skipped.append((str(file), f"skipping {str(file)!r}: cannot read it ({exc})."))
        return []
    try:
        src = parse_source(text, filename="it")  # the message names the file once, below
    except SourceParseError as exc:
        skipped.append((str(file), f"skipping {str(file)!r}: {exc}"))
        return []
    drafts = read_drafts(file)
    return [
        HoleRef(
            file=str(file),
            node=cls.name,
            spec=cls.hole or "",
            line=cls.line,
            draft=drafts.get(cls.name),
        )
        for cls in find_node_classes(src).values()
        if cls.has_hole
    ]
