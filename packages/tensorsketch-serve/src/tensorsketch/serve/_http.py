"""What every protocol app needs from HTTP: errors, a guard, a body reader, and SSE.

- :class:`ServeError` — a client-facing failure with its HTTP status; :func:`json_error`
  renders one as ``{"error": {"message", "type", "param", "code"}}`` (OpenAI's shape, which
  most HTTP clients understand).
- :class:`Guard` — ASGI middleware that runs the ``authenticate`` hook before anything reads
  the body, and refuses bodies larger than ``max_body_bytes`` with 413 (by ``Content-Length``
  up front, and by counting for chunked bodies).
- :func:`read_json` — the request body as JSON, or a 400 that says what was wrong (a lone
  UTF-16 surrogate escape included).
- :class:`EventStream` — an SSE response that sends each chunk the moment it is produced and
  cancels the producer when the client disconnects.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tensorsketch._lone_surrogates import has_lone_surrogate

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "Authenticate",
    "EventStream",
    "Guard",
    "ServeError",
    "json_error",
    "read_json",
    "sse",
]

#: The default request-body limit: 1 MiB (long chat histories fit; pass more if yours do not).
DEFAULT_MAX_BODY_BYTES = 1 << 20

#: ``authenticate(request) -> bool`` (sync or async), called with the headers only. ``False``
#: answers 401; raising :class:`ServeError` answers with its status (403, say).
Authenticate = Callable[[Request], bool | Awaitable[bool]]

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def _retry_hint(status: int) -> dict[str, str]:
    """``x-should-retry: false`` on a 4xx the same request can only meet again: the OpenAI
    SDKs otherwise retry a 408/409 (a decision the conversation waits for) with backoff. A 429
    keeps the client's own policy: it is worth retrying once the ``Retry-After`` has passed."""
    return {"x-should-retry": "false"} if 400 <= status < 500 and status != 429 else {}


class ServeError(Exception):
    """A request the server answers with ``status`` and a message that says how to fix it.

    :param code: a short machine-readable reason (``"model_not_found"``).
    :param param: the request field at fault (``"messages[2].role"``).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.headers = {**_retry_hint(status), **dict(headers or {})}

    @property
    def type(self) -> str:
        """The error's category (``invalid_request_error``, ``server_error``, ...)."""
        fallback = "server_error" if self.status >= 500 else "invalid_request_error"
        return _TYPES.get(self.status, fallback)

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def json_error(
    status: int,
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """``{"error": {"message", "type", "param", "code"}}`` with ``status``."""
    error = ServeError(status, message, code=code, param=param, headers=headers)
    return JSONResponse(error.body(), status_code=status, headers=error.headers or None)


def _render(error: ServeError) -> Response:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers or None)


class _TooLarge(ServeError):
    def __init__(self, limit: int) -> None:
        super().__init__(
            413,
            f"the request body is larger than this server's limit of {limit} bytes; send a "
            "shorter request (or raise `max_body_bytes=` when building the app).",
            code="request_too_large",
        )


def _check_options(authenticate: Any, max_body_bytes: Any) -> None:
    if authenticate is not None and not callable(authenticate):
        msg = f"authenticate= must be a function request -> bool, got {authenticate!r}."
        raise TypeError(msg)
    if (
        not isinstance(max_body_bytes, int)
        or isinstance(max_body_bytes, bool)
        or max_body_bytes < 1
    ):
        msg = f"max_body_bytes= must be a positive number of bytes, got {max_body_bytes!r}."
        raise ValueError(msg)


class Guard:
    """ASGI middleware: ``authenticate`` first, then a body-size limit, for every HTTP request.

    :param render: turns a :class:`ServeError` into the protocol's error response
        (default: :func:`json_error`'s shape).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        authenticate: Authenticate | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        render: Callable[[ServeError], Response] = _render,
    ) -> None:
        _check_options(authenticate, max_body_bytes)
        self.app = app
        self.authenticate = authenticate
        self.max_body_bytes = max_body_bytes
        self.render = render

    @classmethod
    def middleware(
        cls,
        *,
        authenticate: Authenticate | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        render: Callable[[ServeError], Response] = _render,
    ) -> Middleware:
        """The guard as Starlette ``middleware=[...]``, its options checked now (Starlette
        builds middleware at the first request, too late to report a bad option well)."""
        _check_options(authenticate, max_body_bytes)
        return Middleware(
            cls, authenticate=authenticate, max_body_bytes=max_body_bytes, render=render
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            declared = await self._check(scope)
        except ServeError as error:
            await self.render(error)(scope, receive, send)
            return
        if declared:
            # The server frames the body by its Content-Length, which is within the limit:
            # nothing to count, so no wrapped receive and send on every message.
            await self.app(scope, receive, send)
            return
        limit = self.max_body_bytes
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge(limit)
            return message

        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except _TooLarge as error:  # an app without a ServeError handler
            if started:
                raise
            await self.render(error)(scope, receive, send)

    async def _check(self, scope: Scope) -> bool:
        """Authenticate, and check a declared ``Content-Length``: whether one was declared
        (within the limit) and the body is not chunked, so it needs no counting."""
        if self.authenticate is not None:
            allowed = self.authenticate(Request(scope))
            if inspect.isawaitable(allowed):
                allowed = await allowed
            if not allowed:
                raise ServeError(
                    401,
                    "the request was not authenticated; send the credentials this server "
                    "expects (for example `Authorization: Bearer <key>`).",
                    code="invalid_api_key",
                    headers={"WWW-Authenticate": "Bearer"},
                )
        declared = chunked = False
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    raise ServeError(400, f"Content-Length {value!r} is not a number.") from None
                if length > self.max_body_bytes:
                    raise _TooLarge(self.max_body_bytes)
                declared = True
            elif name == b"transfer-encoding":
                chunked = True
        return declared and not chunked


async def read_json(request: Request) -> Any:
    """The body as JSON; a :class:`ServeError` (400/413) when it is not."""
    try:
        body = await request.body()
    except ClientDisconnect:
        raise ServeError(400, "the client disconnected before sending the whole body.") from None
    if not body:
        raise ServeError(400, "the request has no body; send a JSON object.")
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ServeError(400, f"the request body is not valid JSON: {exc}.") from None
    if has_lone_surrogate(body, data):
        raise ServeError(400, LONE_SURROGATE)
    return data


#: What a body with a lone surrogate is told.
LONE_SURROGATE = (
    "the request body holds a lone UTF-16 surrogate escape (such as \\ud800) in a string, "
    "which is not Unicode text and cannot be stored or sent back: escape a character beyond "
    "U+FFFF as its high and low surrogates together, or send the character itself."
)


def dumps(data: Any) -> str:
    """Compact JSON, as every protocol app writes it."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def sse(data: Any, *, event: str | None = None) -> bytes:
    """One SSE frame: ``event: <name>`` (optional) and ``data: <json>`` (a ``str`` as is)."""
    text = data if isinstance(data, str) else dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


class EventStream(Response):
    """A ``text/event-stream`` response over ``chunks``, never buffered.

    Each chunk is sent as soon as the iterator yields it. The client going away (an
    ``http.disconnect``, or a failed send) cancels the iterator — for a run, that cancels the
    run — and the iterator is closed, so its ``finally`` blocks run before the response ends.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        *,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.chunks = chunks
        self.status_code = status_code
        self.background = None
        self.init_headers(
            {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **dict(headers or {})}
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pump = asyncio.ensure_future(self._pump(send))
        watch = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait((pump, watch), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (pump, watch):
                task.cancel()
            for task in (pump, watch):
                try:
                    await task
                except (asyncio.CancelledError, OSError, ClientDisconnect):
                    pass
            close = getattr(self.chunks, "aclose", None)
            if close is not None:
                await close()

    async def _pump(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async for chunk in self.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnected(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
