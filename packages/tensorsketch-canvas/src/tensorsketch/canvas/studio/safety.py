"""The Studio's request checks: the ``Host`` header, the ``Origin`` header, the launch token
and body sizes.

The server binds 127.0.0.1 only, but a web page the user visits can still reach it: through
DNS rebinding (a hostile name resolving to 127.0.0.1, caught by the ``Host`` check), through a
cross-site form or ``fetch`` (caught by the ``Origin`` check and the token, which a foreign
page cannot read). Non-browser clients — the documented span sink — send no ``Origin`` and may
POST spans without the token.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.requests import Request

__all__ = [
    "ALLOWED_HOSTS",
    "MAX_BODY",
    "BodyTooLarge",
    "HostCheckMiddleware",
    "host_name",
    "new_token",
    "origin_ok",
    "read_body",
    "token_ok",
]

#: Host names a request may address (any port).
ALLOWED_HOSTS = frozenset({"127.0.0.1", "localhost"})
#: The largest request body accepted (edits, layout).
MAX_BODY = 1024 * 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def new_token() -> str:
    """A fresh per-launch token (URL-safe, 192 bits)."""
    return secrets.token_urlsafe(24)


def host_name(host: str | None) -> str | None:
    """The host name of a ``Host`` header without its port (``None`` when malformed)."""
    if not host:
        return None
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end > 0 else None
    name, _, port = host.partition(":")
    if port and not port.isdigit():
        return None
    return name or None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


class HostCheckMiddleware:
    """Rejects (403) any HTTP request whose ``Host`` is not localhost/127.0.0.1."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and host_name(_header(scope, b"host")) not in ALLOWED_HOSTS:
            body = json.dumps(
                {
                    "error": "the Studio answers only requests addressed to 127.0.0.1 or "
                    "localhost (Host header); open the URL the command printed."
                }
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 403,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def origin_ok(request: Request) -> bool:
    """No ``Origin`` (a non-browser client or a same-origin GET), or exactly the page's own
    origin (the scheme and ``Host`` this request was sent to)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin.lower() in (f"http://{host}".lower(), f"https://{host}".lower())


def token_ok(request: Request, token: str) -> bool:
    """The launch token, from ``X-Studio-Token`` or ``?token=``, compared in constant time."""
    given = request.headers.get("x-studio-token") or request.query_params.get("token") or ""
    return hmac.compare_digest(given.encode(), token.encode())


class BodyTooLarge(ValueError):
    """The body exceeds the route's limit: HTTP 413."""


async def read_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The request body, refusing (:class:`BodyTooLarge`) beyond ``limit`` bytes without
    reading the rest."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        msg = f"request body is {int(declared)} bytes; the limit is {limit} bytes."
        raise BodyTooLarge(msg)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            msg = f"request body exceeds the limit of {limit} bytes."
            raise BodyTooLarge(msg)
        chunks.append(chunk)
    return b"".join(chunks)
