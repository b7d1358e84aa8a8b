"""The npm clients the tests run (``tests/js``): installed from the committed lockfile, on demand.

``installed()`` runs ``npm ci --no-audit --no-fund`` when ``node_modules`` is missing or was
installed from another ``package-lock.json`` (a stamp file holds the lockfile's hash), under a
file lock so two pytest-xdist workers never install at once. Without ``node`` or ``npm`` it
returns the reason to skip, naming the missing tool; a user's ``pip install`` never needs them.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tensorsketch.testing.npm import missing_node, npm_ci

FOLDER = Path(__file__).resolve().parent / "js"


def installed() -> str | None:
    """Install ``tests/js`` from its lockfile if needed; the reason to skip, or ``None``."""
    missing = missing_node("the AG-UI TypeScript client tests")
    if missing is not None:
        return missing
    npm_ci(FOLDER)
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
