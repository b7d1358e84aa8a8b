"""TensorSketch canvas: the code ⇄ canvas engine.

The code is the source of truth; the canvas is a projection of it. :func:`extract` reads a
graph's wiring and typed interfaces from source without running it, :func:`reconstruct`
writes an edited :class:`GraphIR` back touching only the wiring, :func:`find_holes` lists the
nodes that still need code, and the layout sidecar keeps hand-arranged positions out of the
code.
"""

import importlib
from typing import TYPE_CHECKING, Any

from tensorsketch.canvas import edits
from tensorsketch.canvas.exceptions import (
    CanvasError,
    CanvasWarning,
    GraphNotFoundError,
    IRError,
    SourceParseError,
    WriteBackError,
)
from tensorsketch.canvas.ir import END, START, EdgeIR, GraphIR, NodeIR, Port
from tensorsketch.canvas.layout import Position, layout_path, read_layout, write_layout

# The parts built on libcst load on first use, so the plugin manager (which imports this
# package to reach its plugin module) and ``tensorsketch plugins`` never pay for libcst.
_LAZY = {
    "extract": "tensorsketch.canvas._extract",
    "extract_all": "tensorsketch.canvas._extract",
    "graph_names": "tensorsketch.canvas._extract",
    "reconstruct": "tensorsketch.canvas._reconstruct",
    "find_holes": "tensorsketch.canvas.holes",
    "HoleRef": "tensorsketch.canvas.holes",
}

if TYPE_CHECKING:
    from tensorsketch.canvas._extract import extract as extract
    from tensorsketch.canvas._extract import extract_all as extract_all
    from tensorsketch.canvas._extract import graph_names as graph_names
    from tensorsketch.canvas._reconstruct import reconstruct as reconstruct
    from tensorsketch.canvas.holes import HoleRef as HoleRef
    from tensorsketch.canvas.holes import find_holes as find_holes


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 - package metadata, only for __version__

        try:
            return version("tensorsketch-canvas")
        except PackageNotFoundError:  # pragma: no cover - a source tree without metadata
            return "0.0.0"
    module = _LAZY.get(name)
    if module is None:
        msg = f"module 'tensorsketch.canvas' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "END",
    "START",
    "CanvasError",
    "CanvasWarning",
    "EdgeIR",
    "GraphIR",
    "GraphNotFoundError",
    "HoleRef",
    "IRError",
    "NodeIR",
    "Port",
    "Position",
    "SourceParseError",
    "WriteBackError",
    "__version__",
    "edits",
    "extract",
    "extract_all",
    "find_holes",
    "graph_names",
    "layout_path",
    "read_layout",
    "reconstruct",
    "write_layout",
]
