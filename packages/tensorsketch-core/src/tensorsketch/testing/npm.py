"""npm packages a distribution's tests run (official clients and suites), installed from the
committed lockfile on demand.

A user's ``pip install`` never needs Node.js: only tests call this, and they skip, naming the
missing tool, where ``node`` or ``npm`` is absent.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
from pathlib import Path

__all__ = ["missing_node", "npm_ci"]

#: Holds the lockfile's hash of the last install, inside ``node_modules``.
STAMP = ".tensorsketch-lock-sha256"


def missing_node(purpose: str) -> str | None:
    """Why ``purpose`` cannot run here (``node`` or ``npm`` not on PATH), or ``None``."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not on PATH: {purpose} need Node.js and npm"
    return None


def npm_ci(folder: Path) -> Path:
    """``npm ci --no-audit --no-fund`` in ``folder`` when its ``node_modules`` is missing or
    came from another ``package-lock.json``; return ``node_modules``.

    A file lock keeps two pytest-xdist workers from installing at once.
    :raises RuntimeError: npm failed (its output is in the message).
    """
    modules = folder / "node_modules"
    stamp = modules / STAMP
    digest = hashlib.sha256((folder / "package-lock.json").read_bytes()).hexdigest()
    with (folder / ".install.lock").open("w", encoding="utf-8") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text(encoding="utf-8") == digest:
            return modules
        done = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            msg = f"npm ci failed in {folder}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            raise RuntimeError(msg)
        stamp.write_text(digest, encoding="utf-8")
    return modules
