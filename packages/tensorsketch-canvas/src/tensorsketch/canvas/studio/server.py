"""Launching the Studio: bind 127.0.0.1 (falling back to a free port), print the URL with the
launch token, serve with uvicorn until Ctrl-C."""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
import time
import webbrowser
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from tensorsketch.canvas.studio.app import Studio
from tensorsketch.canvas.studio.debug import Debugger
from tensorsketch.canvas.studio.debug_source import open_backend
from tensorsketch.canvas.studio.fill_routes import FillSettings
from tensorsketch.canvas.studio.optimize_routes import OptimizeSettings
from tensorsketch.canvas.studio.routes import create_app
from tensorsketch.canvas.studio.safety import new_token
from tensorsketch.canvas.studio.sse import EventHub
from tensorsketch.runtime.backends.base import Backend

__all__ = ["DEFAULT_PORT", "HOST", "StudioServer", "bind", "launch_line"]

HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def bind(port: int) -> tuple[socket.socket, bool]:
    """A listening socket on 127.0.0.1:``port``, or on a free port when it is taken
    (``True`` as the second value then)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((HOST, port))
        fell_back = False
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
            sock.close()
            raise
        sock.close()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((HOST, 0))
        fell_back = True
    # accepted connections inherit it: no Nagle delay between a response's headers and body
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.listen(128)
    sock.setblocking(False)
    return sock, fell_back


def launch_line(url: str, file: str, *, wanted: int | None = None) -> str:
    """``TensorSketch Studio → URL   (editing FILE)``, noting a port fallback."""
    note = f"; port {wanted} was taken" if wanted is not None else ""
    return f"TensorSketch Studio → {url}   (editing {file}{note})"


class _Server(uvicorn.Server):
    hub: EventHub | None = None

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.hub is not None:
            self.hub.stopping.set()  # end the event streams so shutdown does not wait on them
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # serving from a thread (tests, embedding): no signal handlers
            return
        with super().capture_signals():
            yield


@dataclass
class StudioServer:
    """One running Studio: ``start()`` in the background or ``serve()`` in the foreground."""

    path: Path
    port: int = DEFAULT_PORT
    graph: str | None = None
    project: Path | None = None
    token: str = field(default_factory=new_token)
    log_level: str = "warning"
    #: ``--backend``: a URL or registry name, or a backend object (tests, embedding).
    backend: str | Backend | None = None
    #: the URL a backend object was opened from (for the label the page shows)
    backend_url: str | None = None
    #: ``--fill-provider``/``--fill-model``: the model the "fill this hole" action asks.
    fill: FillSettings | None = None
    #: the proposers the "Optimize" action offers besides the registered providers
    optimize: OptimizeSettings | None = None

    def __post_init__(self) -> None:
        self.studio = Studio(
            path=Path(self.path), token=self.token, graph=self.graph, project=self.project
        )
        self.hub = EventHub(self.studio.path)
        self.debugger: Debugger | None = None
        if self.backend is not None:
            if isinstance(self.backend, Backend):
                store, url = self.backend, self.backend_url
            else:
                store, url = open_backend(self.backend), self.backend
            self.debugger = Debugger(store, path=self.studio.path, graph=self.graph, url=url)
        self.app = create_app(
            self.studio,
            hub=self.hub,
            debugger=self.debugger,
            fill=self.fill,
            optimize=self.optimize,
        )
        self.sock, self.fell_back = bind(self.port)
        self.bound_port: int = self.sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level=self.log_level,
            lifespan="off",
            timeout_graceful_shutdown=2,
            access_log=False,
        )
        self.server = _Server(config)
        self.server.hub = self.hub
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.bound_port}"

    @property
    def url(self) -> str:
        return f"{self.base_url}/?token={self.token}"

    def line(self, file: str | None = None) -> str:
        return launch_line(
            self.url, file or str(self.path), wanted=self.port if self.fell_back else None
        )

    def serve(self, *, open_browser: bool = False) -> None:
        """Serve in the foreground until Ctrl-C."""
        if open_browser:
            threading.Timer(0.3, webbrowser.open, args=(self.url,)).start()
        try:
            self.server.run(sockets=[self.sock])
        finally:
            self.sock.close()

    def start(self, timeout: float = 10.0) -> StudioServer:
        """Serve on a background thread; returns once the server accepts connections."""
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                msg = "the Studio server did not start"
                raise RuntimeError(msg)
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.hub.stopping.set()
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self.sock.close()

    def __enter__(self) -> StudioServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
