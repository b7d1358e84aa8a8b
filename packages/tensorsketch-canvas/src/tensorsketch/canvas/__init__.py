"""TensorSketch canvas: the code ⇄ canvas engine.

The code is the source of truth; the canvas is a projection of it. :func:`extract` reads a
graph's wiring and typed interfaces from source without running it, :func:`reconstruct`
writes an edited :class:`GraphIR` back touching only the wiring, :func:`find_holes` lists the
nodes that still need code, and the layout sidecar keeps hand-arranged positions out of the
code.
"""

from importlib.metadata import PackageNotFoundError, version

from tensorsketch.canvas import edits
from tensorsketch.canvas._extract import extract, extract_all, graph_names
from tensorsketch.canvas._reconstruct import reconstruct
from tensorsketch.canvas.exceptions import (
    CanvasError,
    CanvasWarning,
    GraphNotFoundError,
    IRError,
    SourceParseError,
    WriteBackError,
)
from tensorsketch.canvas.holes import HoleRef, find_holes
from tensorsketch.canvas.ir import END, START, EdgeIR, GraphIR, NodeIR, Port
from tensorsketch.canvas.layout import Position, layout_path, read_layout, write_layout

try:
    __version__ = version("tensorsketch-canvas")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without metadata
    __version__ = "0.0.0"

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
