"""Open a node's class in the user's editor (``POST /api/open``).

The page names a node; the server looks up the file and the line itself (the class's
``NodeIR.line`` in the opened file) and starts ``$VISUAL`` or ``$EDITOR`` from the Studio's own
environment on that place. Nothing the page sends reaches the command line but a node name,
which must be a node of the graph. Without an editor configured the answer says so, and the
page offers the ``vscode://`` link it always shows.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path

__all__ = ["editor_command", "open_in_editor"]

#: Editors that take ``-g FILE:LINE`` rather than ``+LINE FILE``.
_GOTO_EDITORS = frozenset({"code", "code-insiders", "codium", "cursor", "windsurf"})


def editor_command(environ: Mapping[str, str], path: Path, line: int) -> list[str] | None:
    """The command that opens ``path`` at ``line`` in the configured editor (``None``: no
    ``$VISUAL``/``$EDITOR``)."""
    raw = environ.get("VISUAL") or environ.get("EDITOR") or ""
    argv = shlex.split(raw)
    if not argv:
        return None
    if Path(argv[0]).name in _GOTO_EDITORS:
        return [*argv, "-g", f"{path}:{line}"]
    return [*argv, f"+{line}", str(path)]


def open_in_editor(path: Path, line: int, environ: Mapping[str, str] | None = None) -> list[str]:
    """Start the editor on ``path`` at ``line``, detached; the command it ran.

    :raises LookupError: no editor is configured.
    :raises OSError: the editor could not be started.
    """
    command = editor_command(os.environ if environ is None else environ, path, line)
    if command is None:
        msg = (
            "no editor configured: set $VISUAL or $EDITOR where the Studio runs (e.g. "
            "EDITOR='code' or EDITOR=vim), or use the vscode:// link in the panel."
        )
        raise LookupError(msg)
    # the user's own editor, on a path and line the server chose
    subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return command
