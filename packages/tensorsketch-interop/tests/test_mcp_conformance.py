"""The official MCP conformance suite (``@modelcontextprotocol/conformance``, pinned in
tests/js) against our server on a real uvicorn: every scenario passes except those listed,
each with its reason, in tests/js/conformance-skipped.json — and a listed scenario that
passes fails the test too, so the list only shrinks.

The server (mcp_servers/conformance_server.py) holds the fixtures the scenarios name, built
with TensorSketch's public serving API only. The suite is pinned at 0.1.13, the newest release
that runs on Node 20 (0.1.14 and later import ``fs.globSync``, which needs Node 22)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tensorsketch.testing.live_server import serving

HERE = Path(__file__).resolve().parent
SKIPPED = HERE / "js" / "conformance-skipped.json"
_RESULT_DIR = re.compile(r"server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z")
CONFORMANCE = Path("@modelcontextprotocol", "conformance", "dist", "index.js")


def _server_app() -> Any:
    spec = importlib.util.spec_from_file_location(
        "conformance_server", HERE / "mcp_servers" / "conformance_server.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.app


def _outcomes(results: Path) -> dict[str, list[dict[str, Any]]]:
    """Each scenario's checks, from the suite's ``server-<scenario>-<time>/checks.json``."""
    found: dict[str, list[dict[str, Any]]] = {}
    for checks in sorted(results.glob("server-*/checks.json")):
        matched = _RESULT_DIR.fullmatch(checks.parent.name)
        assert matched is not None, f"unexpected result folder {checks.parent.name}"
        scenario = matched["scenario"]
        found[scenario] = json.loads(checks.read_text(encoding="utf-8"))
    return found


@pytest.mark.slow
async def test_conformance_suite(js_modules: Path, tmp_path: Path) -> None:
    skipped: dict[str, str] = {
        k: v for k, v in json.loads(SKIPPED.read_text(encoding="utf-8")).items() if k != "_doc"
    }
    async with serving(_server_app()) as base:
        suite = await asyncio.create_subprocess_exec(
            "node",
            str(js_modules / CONFORMANCE),
            "server",
            "--url",
            f"{base}/mcp",
            "--suite",
            "all",
            "-o",
            str(tmp_path),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await asyncio.wait_for(suite.communicate(), 300)
    log = output.decode(errors="replace")
    outcomes = _outcomes(tmp_path)
    assert len(outcomes) >= 30, f"the suite ran only {sorted(outcomes)}:\n{log[-4000:]}"
    failed = {
        name: [c.get("errorMessage") or c["id"] for c in checks if c["status"] == "FAILURE"]
        for name, checks in outcomes.items()
    }
    failing = {name: why for name, why in failed.items() if why}
    unexpected = {name: why for name, why in failing.items() if name not in skipped}
    passing_but_listed = sorted(name for name in skipped if name in outcomes and not failed[name])
    unknown = sorted(name for name in skipped if name not in outcomes)
    print(
        f"conformance: {len(outcomes) - len(failing)} scenarios passed, {len(failing)} failed "
        f"({len(skipped)} listed as not offered)"
    )
    assert not unexpected, f"conformance scenarios failed: {json.dumps(unexpected, indent=1)}"
    assert not passing_but_listed, f"{passing_but_listed} pass now: take them off {SKIPPED.name}"
    assert not unknown, f"{SKIPPED.name} names scenarios the suite does not have: {unknown}"
