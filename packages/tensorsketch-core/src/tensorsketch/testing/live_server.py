"""A real uvicorn serving an ASGI app on 127.0.0.1, for tests that talk HTTP to it.

Tests of the HTTP surfaces (serve's OpenAI/A2A/AG-UI/task apps, interop's MCP server) run
the app the way production does, behind uvicorn on a real socket, and use real clients. Two
shapes: :class:`LiveServer` runs uvicorn on an event loop of its own in a thread (for sync
tests, and async tests whose clients must not share the server's loop), :func:`serving` runs
it inside the test's own event loop. Both bind a free port before uvicorn starts, so parallel
runs never race for one, and run the app's lifespan (``lifespan="on"``: a failing startup
fails the test rather than serving a half-started app).

Imports uvicorn: only tests of distributions that depend on it import this module.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import uvicorn

from tensorsketch.testing.ports import bound_socket

T = TypeVar("T")

#: How long a server may take to start (uvicorn's own startup plus the app's lifespan), and
#: how often to look whether it has.
START_TIMEOUT = 10.0
POLL = 0.02


def _server(app: Any) -> uvicorn.Server:
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    return uvicorn.Server(config)


def _port(sock: socket.socket) -> int:
    port: int = sock.getsockname()[1]
    return port


class LiveServer:
    """uvicorn serving ``app`` on 127.0.0.1 at a free port, on its own loop in a thread.

    ``call(coro)`` runs a coroutine on the server's loop (to read or close a backend the app
    holds, whose connections belong to that loop).
    """

    def __init__(self, app: Any) -> None:
        self.sock = bound_socket()
        self.port = _port(self.sock)
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = _server(app)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.serve(sockets=[self.sock]))

    def start(self) -> LiveServer:
        """Start serving; raises when uvicorn has not started within :data:`START_TIMEOUT`."""
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and self.thread.is_alive():
            if self.server.started:
                return self
            time.sleep(POLL)
        self.stop()
        msg = "uvicorn did not start"
        raise RuntimeError(msg)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run ``coro`` on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        """Shut down gracefully (open connections get 5 s); safe to call twice."""
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(30)
        self.sock.close()


def live_servers() -> Iterator[Callable[[Any], LiveServer]]:
    """For ``yield from`` in a fixture: yields ``start(app) -> LiveServer`` and stops every
    server it started once the fixture ends."""
    started: list[LiveServer] = []

    def start(app: Any) -> LiveServer:
        server = LiveServer(app).start()
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn in the running event loop; yields the base URL
    (``http://127.0.0.1:<port>``) and shuts the server down on exit."""
    sock = bound_socket()
    server = _server(app)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        for _ in range(int(START_TIMEOUT / POLL)):
            if server.started or task.done():
                break
            await asyncio.sleep(POLL)
        if not server.started:
            msg = "uvicorn did not start"
            raise RuntimeError(msg)
        yield f"http://127.0.0.1:{_port(sock)}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)
        sock.close()
