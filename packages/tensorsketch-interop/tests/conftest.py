"""Fixtures for the MCP tests: the server scripts, a call log, uvicorn on a free port."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn

SERVERS = Path(__file__).resolve().parent / "mcp_servers"


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@asynccontextmanager
async def uvicorn_serving(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` with a real uvicorn on 127.0.0.1 in this event loop; yield its base URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="auto")
    )
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started or task.done():
            break
        await asyncio.sleep(0.02)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


class Helpers:
    """What the tests share (a fixture: test modules cannot import conftest)."""

    servers = SERVERS
    python = sys.executable
    calls = staticmethod(calls)
    pid_alive = staticmethod(pid_alive)
    free_port = staticmethod(free_port)
    serving: Callable[[Any], Any] = staticmethod(uvicorn_serving)


@pytest.fixture
def h() -> type[Helpers]:
    return Helpers
