"""Node positions in a sidecar file next to the code, never in it.

Where a node sits on the canvas is presentation, not graph: it lives in
``<file>.py.layout.json``. Reading is forgiving — a missing sidecar means "use the automatic
layout", a malformed entry is skipped with a warning, an entry for a node that no longer
exists is ignored — so losing or corrupting the sidecar only ever loses the arrangement.
Writing is atomic (temporary file, then rename), so a crash never leaves half a file.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tensorsketch.canvas.exceptions import CanvasWarning

__all__ = ["Position", "layout_path", "read_layout", "write_layout"]

_VERSION = 1


@dataclass(frozen=True)
class Position:
    """Where a node's box sits on the canvas (its top-left corner, in canvas units)."""

    x: float
    y: float


def layout_path(source: str | os.PathLike[str]) -> Path:
    """The sidecar of a source file: ``graph.py`` → ``graph.py.layout.json``."""
    path = Path(source)
    return path.with_name(path.name + ".layout.json")


def read_layout(
    source: str | os.PathLike[str], nodes: Iterable[str] | None = None
) -> dict[str, Position]:
    """Saved positions for the graph in ``source``; ``{}`` when there are none.

    :param nodes: the graph's current node names; entries for other (deleted, renamed) nodes
        are dropped. Without it every well-formed entry is returned.
    """
    sidecar = layout_path(source)
    try:
        raw = sidecar.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        warnings.warn(
            f"ignoring layout sidecar {str(sidecar)!r}: cannot read it ({exc}); the automatic "
            "layout is used.",
            CanvasWarning,
            stacklevel=2,
        )
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        warnings.warn(
            f"ignoring layout sidecar {str(sidecar)!r}: it is not valid JSON ({exc}); delete it "
            "or drag a node to rewrite it.",
            CanvasWarning,
            stacklevel=2,
        )
        return {}
    entries = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        warnings.warn(
            f"ignoring layout sidecar {str(sidecar)!r}: expected an object with a 'nodes' "
            'mapping like {"nodes": {"Classify": {"x": 0, "y": 0}}}.',
            CanvasWarning,
            stacklevel=2,
        )
        return {}
    wanted = None if nodes is None else set(nodes)
    positions: dict[str, Position] = {}
    bad: list[str] = []
    for name, entry in entries.items():
        position = _position(entry)
        if position is None:
            bad.append(name)
        elif wanted is None or name in wanted:
            positions[name] = position
    if bad:
        warnings.warn(
            f"layout sidecar {str(sidecar)!r}: skipped malformed entries for {sorted(bad)!r} "
            '(each needs finite numbers "x" and "y"); those nodes use the automatic layout.',
            CanvasWarning,
            stacklevel=2,
        )
    return positions


def _position(entry: object) -> Position | None:
    if not isinstance(entry, dict):
        return None
    x, y = entry.get("x"), entry.get("y")
    for value in (x, y):
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            return None
    assert isinstance(x, int | float) and isinstance(y, int | float)
    return Position(float(x), float(y))


def write_layout(
    source: str | os.PathLike[str],
    positions: Mapping[str, Position | tuple[float, float]],
) -> Path:
    """Save ``positions`` (replacing the sidecar's content) and return the sidecar's path."""
    entries: dict[str, dict[str, float]] = {}
    for name, value in positions.items():
        x, y = (value.x, value.y) if isinstance(value, Position) else value
        if not (math.isfinite(x) and math.isfinite(y)):
            msg = f"position of {name!r} must be finite numbers, got ({x!r}, {y!r})."
            raise ValueError(msg)
        entries[str(name)] = {"x": float(x), "y": float(y)}
    sidecar = layout_path(source)
    text = json.dumps({"version": _VERSION, "nodes": entries}, indent=2, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=sidecar.name + ".", suffix=".tmp", dir=sidecar.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, sidecar)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return sidecar
