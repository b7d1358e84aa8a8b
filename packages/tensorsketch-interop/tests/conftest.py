"""Fixtures for the MCP tests: the server scripts, a call log, uvicorn on a free port (the
test kit's :func:`~tensorsketch.testing.live_server.serving`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tensorsketch.testing.live_server import serving
from tensorsketch.testing.npm import missing_node, npm_ci
from tensorsketch.testing.ports import free_port

SERVERS = Path(__file__).resolve().parent / "mcp_servers"
#: The pinned npm packages the tests run (package.json + package-lock.json, committed).
JS = Path(__file__).resolve().parent / "js"


@pytest.fixture
def call_log(tmp_path: Path) -> Path:
    """The file the SDK weather server appends each call to (see mcp_servers/sdk_weather.py)."""
    return tmp_path / "calls.log"


def calls(log: Path, name: str | None = None) -> list[str]:
    if not log.exists():
        return []
    lines = log.read_text(encoding="utf-8").splitlines()
    return [ln for ln in lines if name is None or ln.split()[0] == name]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); read its state.
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


class Helpers:
    """What the tests share (a fixture: test modules cannot import conftest)."""

    servers = SERVERS
    python = sys.executable
    calls = staticmethod(calls)
    pid_alive = staticmethod(pid_alive)
    free_port = staticmethod(free_port)
    serving: Callable[[Any], Any] = staticmethod(serving)


@pytest.fixture
def h() -> type[Helpers]:
    return Helpers


@pytest.fixture(scope="session")
def js_modules() -> Path:
    """``tests/js/node_modules``, installed with ``npm ci`` from the committed lockfile when it
    is missing or stale; skips, naming the missing tool, without node or npm."""
    reason = missing_node("the official MCP JS suites")
    if reason is not None:
        pytest.skip(reason)
    try:
        return npm_ci(JS)
    except RuntimeError as exc:
        pytest.fail(str(exc))
