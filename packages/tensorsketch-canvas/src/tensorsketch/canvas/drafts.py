"""Drafts: candidates that did not pass, kept beside their file with what failed.

``graph.py`` → ``graph.py.holes.json``: per node, the last candidate method, its failures and
the run that produced it. A node with a draft is a hole still — ``tensorsketch holes`` and the
Studio show it as *unverified* — and a fill that passes removes its draft.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["draft_path", "read_drafts", "remove_draft", "write_draft"]


def draft_path(source: str | os.PathLike[str]) -> Path:
    """The drafts sidecar of a source file: ``graph.py`` → ``graph.py.holes.json``."""
    path = Path(source)
    return path.with_name(path.name + ".holes.json")


def read_drafts(source: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The drafts of ``source`` by node name; ``{}`` when there are none (or the sidecar is
    unreadable: a draft is a convenience, never a reason to fail)."""
    try:
        data = json.loads(draft_path(source).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, dict)}


def _save(source: str | os.PathLike[str], drafts: dict[str, dict[str, Any]]) -> None:
    sidecar = draft_path(source)
    if not drafts:
        sidecar.unlink(missing_ok=True)
        return
    fd, tmp = tempfile.mkstemp(dir=sidecar.parent, prefix=sidecar.name, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(drafts, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, sidecar)


def write_draft(source: str | os.PathLike[str], node: str, draft: dict[str, Any]) -> Path:
    """Keep ``draft`` (``code``, ``failures``, ...) as ``node``'s; returns the sidecar."""
    drafts = read_drafts(source)
    drafts[node] = draft
    _save(source, drafts)
    return draft_path(source)


def remove_draft(source: str | os.PathLike[str], node: str) -> None:
    """Forget ``node``'s draft (its hole was filled)."""
    drafts = read_drafts(source)
    if drafts.pop(node, None) is not None:
        _save(source, drafts)
