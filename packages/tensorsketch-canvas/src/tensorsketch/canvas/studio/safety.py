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

from tensorsketch._lone_surrogates import has_lone_surrogate

__all__ = [
    "ALLOWED_HOSTS",
    "MAX_BODY",
    "MAX_JSON_DEPTH",
    "BodyTooLarge",
    "HostCheckMiddleware",
    "NestedTooDeep",
    "NotText",
    "host_name",
    "load_json",
    "new_token",
    "origin_ok",
    "read_body",
    "token_ok",
]

#: Host names a request may address (any port).
ALLOWED_HOSTS = frozenset({"127.0.0.1", "localhost"})
#: The largest request body accepted (edits, layout).
MAX_BODY = 1024 * 1024
#: The deepest nesting of objects and arrays a JSON body may have: the Studio's own bodies
#: nest four or five levels; deeper ones only exist to exhaust the parser's recursion.
MAX_JSON_DEPTH = 64

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
    origin: ``http://`` (the Studio serves plain HTTP on 127.0.0.1, so a page from any other
    scheme, ``https://`` included, is another origin) and the ``Host`` this request was sent
    to."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    if request.url.scheme != "http":
        return False
    host = request.headers.get("host", "")
    return origin.lower() == f"http://{host}".lower()


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


class NestedTooDeep(ValueError):
    """The body nests objects and arrays deeper than :data:`MAX_JSON_DEPTH`: HTTP 400."""


class NotText(ValueError):
    """A string of the body holds a lone UTF-16 surrogate escape: HTTP 400."""


def load_json(raw: bytes, limit: int = MAX_JSON_DEPTH) -> Any:
    """``raw`` parsed as JSON, refusing (:class:`NestedTooDeep`) anything nested deeper than
    ``limit``: the parser recurses once per level, so an unbounded depth is a crash, and a
    parsable but deep value would recurse again wherever it is walked (validation, hashing).

    :raises NotText: a string holds a lone surrogate.
    :raises json.JSONDecodeError: not JSON.
    :raises UnicodeDecodeError: not UTF-8.
    """
    msg = (
        f"the body is nested more than {limit} levels deep (objects and arrays within each "
        "other); the Studio's requests nest a few levels — send a flatter body."
    )
    try:
        data = json.loads(raw)
    except RecursionError:
        raise NestedTooDeep(msg) from None
    if _depth_over(data, limit):
        raise NestedTooDeep(msg)
    if has_lone_surrogate(raw, data):
        msg = (
            "a string of the body holds a lone UTF-16 surrogate escape (such as \\ud800), "
            "which is not text: it could be neither stored nor shown. Send the character itself."
        )
        raise NotText(msg)
    return data


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests containers deeper than ``limit`` (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
