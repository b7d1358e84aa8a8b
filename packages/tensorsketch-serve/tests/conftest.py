"""Fixtures: a real uvicorn server on 127.0.0.1 (a free port) for any ASGI app.

The server runs on its own event loop in a thread, as in production; tests talk to it over
HTTP with real clients. ``server.call(coro)`` runs a coroutine on the server's loop (to read a
backend the app writes, say). The providers' wire server is loaded from its test folder, so a
real vendor SDK can play the model.
"""

from __future__ import annotations

import asyncio
import importlib.util
import socket
import sys
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvicorn

T = TypeVar("T")

PROVIDER_TESTS = Path(__file__).resolve().parents[2] / "tensorsketch-providers" / "tests"


def load_helper(name: str, folder: Path = PROVIDER_TESTS) -> Any:
    """Import a test helper module by path (pytest's importlib mode hides test folders)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# Registered under their plain names, so test modules can ``import wire_server, vendor_plays``
# (and ``import a2a_agents`` / ``import agui_client``, the A2A tests' agents and the AG-UI
# test client, from this folder).
load_helper("wire_server")
load_helper("vendor_plays")
load_helper("a2a_agents", Path(__file__).parent)
load_helper("agui_client", Path(__file__).parent)
load_helper("task_graphs", Path(__file__).resolve().parent)


class LiveServer:
    """uvicorn serving ``app`` on 127.0.0.1 at a free port, in a background thread."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        config = uvicorn.Config(
            app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5
        )
        self.server = uvicorn.Server(config)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.serve(sockets=[self.sock]))

    def start(self) -> LiveServer:
        self.thread.start()
        for _ in range(500):
            if self.server.started:
                return self
            if not self.thread.is_alive():
                break
            threading.Event().wait(0.02)
        msg = "uvicorn did not start"
        raise RuntimeError(msg)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run ``coro`` on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


def _servers() -> Iterator[Callable[[Any], LiveServer]]:
    started: list[LiveServer] = []

    def start(app: Any) -> LiveServer:
        server = LiveServer(app).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def live() -> Iterator[Callable[[Any], LiveServer]]:
    """``live(app)`` starts uvicorn for ``app``; every server is stopped after the test."""
    yield from _servers()


@pytest.fixture(scope="module")
def live_module() -> Iterator[Callable[[Any], LiveServer]]:
    """``live``, for servers a whole module shares (property tests run many examples)."""
    yield from _servers()
