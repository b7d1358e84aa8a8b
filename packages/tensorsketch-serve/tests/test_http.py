"""The HTTP foundation over a real uvicorn server: the guard, the body limit, SSE streaming."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tensorsketch.serve import EventStream, Guard, ServeError, read_json, sse


def _raw(port: int, head: str, timeout: float = 10) -> str:
    """Send raw request bytes (headers only, no body) and read the response head."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(head.encode())
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        top, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in top.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        while len(body) < length:
            body += conn.recv(65536)
        return (top + b"\r\n\r\n" + body).decode(errors="replace")


def _guarded(**guard: Any) -> tuple[Starlette, list[Any]]:
    bodies: list[Any] = []

    async def echo(request: Request) -> Response:
        bodies.append(await read_json(request))
        return JSONResponse({"ok": True})

    async def handle(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ServeError)
        return JSONResponse(exc.body(), status_code=exc.status)

    app = Starlette(
        routes=[Route("/echo", echo, methods=["POST"])],
        middleware=[Middleware(Guard, **guard)],
        exception_handlers={ServeError: handle},
    )
    return app, bodies


def test_authenticate_runs_before_the_body_is_read(live: Any) -> None:
    seen: list[str | None] = []

    async def authenticate(request: Request) -> bool:
        seen.append(request.headers.get("authorization"))
        return request.headers.get("authorization") == "Bearer right"

    app, bodies = _guarded(authenticate=authenticate)
    server = live(app)
    # The client announces a body and never sends it: only an answer that does not wait for
    # the body can arrive.
    head = _raw(
        server.port,
        "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"
        "Content-Type: application/json\r\nContent-Length: 50\r\n\r\n",
    )
    assert head.startswith("HTTP/1.1 401"), head
    assert "www-authenticate: Bearer" in head
    assert '"type":"authentication_error"' in head.replace(" ", "")
    ok = httpx.post(f"{server.url}/echo", json={"a": 1}, headers={"Authorization": "Bearer right"})
    assert ok.status_code == 200 and bodies == [{"a": 1}]
    assert seen == ["Bearer wrong", "Bearer right"]


def test_an_authenticate_hook_may_refuse_with_its_own_status(live: Any) -> None:
    def authenticate(request: Request) -> bool:
        raise ServeError(403, "this key may not call the agent", code="forbidden")

    app, _ = _guarded(authenticate=authenticate)
    response = httpx.post(f"{live(app).url}/echo", json={})
    assert response.status_code == 403
    assert response.json()["error"] == {
        "message": "this key may not call the agent",
        "type": "permission_error",
        "param": None,
        "code": "forbidden",
    }


def test_a_body_over_the_limit_is_413_by_length_and_by_counting(live: Any) -> None:
    app, bodies = _guarded(max_body_bytes=100)
    server = live(app)
    head = _raw(
        server.port,
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 5000\r\n\r\n",
    )
    assert head.startswith("HTTP/1.1 413"), head

    def chunked() -> Any:  # no Content-Length: the guard has to count
        yield b'{"text": "'
        for _ in range(20):
            yield b"x" * 10
        yield b'"}'

    response = httpx.post(f"{server.url}/echo", content=chunked())
    assert response.status_code == 413
    assert "larger than this server's limit of 100 bytes" in response.json()["error"]["message"]
    small = httpx.post(f"{server.url}/echo", json={"t": "fits"})
    assert small.status_code == 200 and bodies == [{"t": "fits"}]


def test_bad_json_is_a_400_that_says_why(live: Any) -> None:
    app, _ = _guarded()
    server = live(app)
    response = httpx.post(f"{server.url}/echo", content=b"{nope")
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("the request body is not valid JSON")
    empty = httpx.post(f"{server.url}/echo")
    assert empty.status_code == 400 and "no body" in empty.json()["error"]["message"]


def test_sse_chunks_arrive_as_produced_and_a_disconnect_cancels_the_producer(live: Any) -> None:
    release = threading.Event()
    cancelled = threading.Event()
    closed = threading.Event()

    async def produce() -> AsyncIterator[bytes]:
        try:
            yield sse({"n": 1})
            # The second chunk waits until the client has seen the first: a buffering
            # response would never deliver it.
            await asyncio.to_thread(release.wait, 10)
            yield sse({"n": 2}, event="second")
            await asyncio.sleep(3600)  # the client leaves while we wait
            yield sse("never")
        except asyncio.CancelledError:
            cancelled.set()
            raise
        finally:
            closed.set()

    async def stream(request: Request) -> Response:
        return EventStream(produce())

    server = live(Starlette(routes=[Route("/stream", stream)]))
    with httpx.Client(timeout=10) as client, client.stream("GET", f"{server.url}/stream") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-cache"
        lines = r.iter_lines()
        assert next(lines) == 'data: {"n":1}'
        release.set()
        assert [next(lines), next(lines), next(lines)] == ["", "event: second", 'data: {"n":2}']
    assert cancelled.wait(10), "the producer was cancelled when the client went away"
    assert closed.is_set()
