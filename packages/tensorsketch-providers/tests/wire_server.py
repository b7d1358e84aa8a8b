"""A scripted HTTP server on 127.0.0.1 that the real vendor SDKs talk to.

Each test queues the replies the "vendor" should give (a JSON body, an SSE stream, an error, or
a reply that never comes, for timeouts) and afterwards reads back every request the SDK sent:
method, path, query, headers and the decoded JSON body. The server speaks HTTP/1.1 with
keep-alive, and streams SSE with chunked transfer encoding, one chunk per event, the way the
vendors do, so the SDKs' own incremental SSE parsers run.

This module is loaded by ``conftest.py`` (pytest's importlib mode makes test helpers
non-importable otherwise).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Reply:
    """One scripted answer.

    ``events`` makes it an SSE stream: each item is ``(event_name_or_None, json_payload)``, or
    a raw ``str`` written as is (for ``data: [DONE]``). ``hang`` holds the reply back until the
    server stops, so the client's timeout fires first.
    """

    status: int = 200
    body: Any = None
    events: list[tuple[str | None, Any] | str] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False


@dataclass
class Recorded:
    """A request as the server received it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class _Handler(BaseHTTPRequestHandler):
    """Records each request on its :class:`WireServer` and answers with the next scripted reply.

    A server gets its own subclass with ``wire`` set, since the HTTP server builds handlers.
    """

    protocol_version = "HTTP/1.1"
    wire: WireServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def _handle(self) -> None:
        recorded = self._read_request()
        server = self.wire
        with server._lock:
            server.requests.append(recorded)
            reply = server._replies.popleft() if server._replies else None
            if reply is None and server.responder is not None:
                reply = server.responder(recorded)
        if reply is None:
            reply = Reply(
                status=599,
                body={"error": f"no scripted reply for {self.command} {self.path}"},
            )
        if reply.hang:
            server._stopping.wait(30)
            self.close_connection = True
            return
        try:
            if reply.events is not None:
                self._send_stream(reply)
            else:
                self._send_json(reply)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _read_request(self) -> Recorded:
        """The request as received; a body that is not JSON is kept as bytes."""
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        parts = urlsplit(self.path)
        return Recorded(
            method=self.command,
            path=parts.path,
            query=parse_qs(parts.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )

    def _send_json(self, reply: Reply) -> None:
        payload = json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _send_stream(self, reply: Reply) -> None:
        self.send_response(reply.status)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        for item in reply.events or []:
            if isinstance(item, str):
                frame = f"data: {item}\n\n"
            else:
                event, data = item
                head = f"event: {event}\n" if event else ""
                frame = f"{head}data: {json.dumps(data)}\n\n"
            chunk = frame.encode()
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class WireServer:
    """A threaded HTTP server whose replies are queued per test."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._replies: deque[Reply] = deque()
        #: Answers a request when no reply is queued (a vendor that computes its answer).
        self.responder: Callable[[Recorded], Reply] | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        handler = type("Handler", (_Handler,), {"wire": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> WireServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def queue(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._replies)

    @property
    def last(self) -> Recorded:
        assert self.requests, "the SDK sent no request"
        return self.requests[-1]
