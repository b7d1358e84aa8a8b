"""The npm clients the tests run (``tests/js``): installed from the committed lockfile, on demand.

``installed()`` runs ``npm ci --no-audit --no-fund`` when ``node_modules`` is missing or was
installed from another ``package-lock.json`` (a stamp file holds the lockfile's hash), under a
file lock so two pytest-xdist workers never install at once. Without ``node`` or ``npm`` it
returns the reason to skip, naming the missing tool; a user's ``pip install`` never needs them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).resolve().parent / "js"
STAMP = FOLDER / "node_modules" / ".tensorsketch-lock-sha256"


def missing_tool() -> str | None:
    """Why the npm clients cannot run here (a tool not on PATH), or ``None``."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return (
                f"`{tool}` is not on PATH: the AG-UI TypeScript client tests need Node.js and npm"
            )
    return None


def installed() -> str | None:
    """Install ``tests/js`` from its lockfile if needed; the reason to skip, or ``None``."""
    missing = missing_tool()
    if missing is not None:
        return missing
    digest = hashlib.sha256((FOLDER / "package-lock.json").read_bytes()).hexdigest()
    with (FOLDER / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if STAMP.exists() and STAMP.read_text() == digest:
            return None
        done = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=FOLDER,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            msg = f"npm ci failed in {FOLDER}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            raise RuntimeError(msg)
        STAMP.write_text(digest)
    return None


def run_node(script: str, plan: Any, *, timeout: float = 120) -> Any:
    """Run ``tests/js/<script>`` with ``plan`` as JSON on stdin; its stdout, parsed."""
    done = subprocess.run(
        ["node", str(FOLDER / script)],
        input=json.dumps(plan),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=FOLDER,
        check=False,
    )
    if done.returncode != 0:
        msg = f"node {script} exited {done.returncode}:\n{done.stderr[-4000:]}"
        raise AssertionError(msg)
    return json.loads(done.stdout)
