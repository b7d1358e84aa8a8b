"""TensorSketch Studio: the canvas in a browser, served from the file it edits.

``python -m tensorsketch.canvas FILE`` (or ``tensorsketch studio FILE``) serves a page and a
small JSON API on 127.0.0.1: the page draws the file's graph, every gesture is an edit the
server writes back into the file (atomically, in the file's own style), and spans posted by
``http_span_sink`` light up the nodes they ran in. The file stays the single source of truth.

This subpackage needs ``starlette`` and ``uvicorn``; nothing else in ``tensorsketch`` or
``tensorsketch.canvas`` imports it. The API is documented in ``docs/studio.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tensorsketch.canvas.studio.app import Studio as Studio
    from tensorsketch.canvas.studio.routes import create_app as create_app
    from tensorsketch.canvas.studio.server import StudioServer as StudioServer

_LAZY = {
    "Studio": "tensorsketch.canvas.studio.app",
    "create_app": "tensorsketch.canvas.studio.routes",
    "StudioServer": "tensorsketch.canvas.studio.server",
}

__all__ = ["Studio", "StudioServer", "create_app"]


def __getattr__(name: str) -> Any:
    import importlib  # noqa: PLC0415 - the server loads on first use of a name

    module = _LAZY.get(name)
    if module is None:
        msg = f"module 'tensorsketch.canvas.studio' has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(module), name)
