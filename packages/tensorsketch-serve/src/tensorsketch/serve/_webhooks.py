"""Webhook delivery shared by the A2A push notifications and the task API's completion
webhooks: the guard against calling into the server's own network, and one POST retried
with exponential backoff.

A webhook must be a public ``http(s)`` address: a URL whose host resolves to a loopback,
private, link-local or otherwise non-public address is refused — when it is given and again
before each delivery (the name may have been re-pointed since) — unless the operator's
``allowed_hosts`` names it (a host, an IP address or a network such as ``"10.0.0.0/8"``).

With a deployment secret, a body is signed as Stripe and GitHub sign theirs
(:func:`signed`): ``X-TensorSketch-Timestamp`` (Unix seconds) and
``X-TensorSketch-Signature`` (``sha256=`` and the hex HMAC-SHA256 of
``<timestamp>.<body bytes>``), which a receiver recomputes with :func:`sign`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import ipaddress
import logging
import socket
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

import httpx

__all__ = [
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "Delivery",
    "deliver",
    "longest_delivery",
    "sign",
    "signed",
    "webhook_problem",
]

log = logging.getLogger("tensorsketch.serve.webhooks")

SIGNATURE_HEADER = "X-TensorSketch-Signature"
TIMESTAMP_HEADER = "X-TensorSketch-Timestamp"

#: Answers worth another try besides 5xx.
RETRY_STATUSES = frozenset({408, 425, 429})


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The ``X-TensorSketch-Signature`` value of ``body`` signed at ``timestamp``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def signed(secret: str, body: bytes) -> dict[str, str]:
    """The two headers that sign ``body`` now under ``secret``."""
    stamp = str(int(time.time()))
    return {TIMESTAMP_HEADER: stamp, SIGNATURE_HEADER: sign(secret, stamp, body)}


def _allowed(host: str, address: str | None, allowed: Iterable[str]) -> bool:
    for entry in allowed:
        if entry.lower() == host.lower():
            return True
        if address is None:
            continue
        with contextlib.suppress(ValueError):
            if ipaddress.ip_address(address) in ipaddress.ip_network(entry, strict=False):
                return True
    return False


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def webhook_problem(
    url: str, allowed: Iterable[str] = (), *, what: str = "webhook URL", hint: str = ""
) -> str | None:
    """Why this server must not call ``url`` (not ``http(s)``, no host, a host that does
    not resolve, or one that resolves to a non-public address not ``allowed``), or ``None``.
    ``what`` names the URL in the message; ``hint`` says how an operator allows a host."""
    allowed = tuple(allowed)
    try:
        parsed = urllib.parse.urlsplit(url)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        return f"{what} {url!r:.200} is not a URL."
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return f"{what} {url!r:.200} must be an http(s) URL with a host."
    host = parsed.hostname
    if _allowed(host, None, allowed):
        return None
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return f"{what} {url!r:.200}: the host {host!r} does not resolve."
    for info in infos:
        address = str(info[4][0])
        if not _public(address) and not _allowed(host, address, allowed):
            return f"{what} {url!r:.200} points at {address}, which is not a public address; {hint}"
    return None


@dataclass(frozen=True, slots=True)
class Delivery:
    """How one webhook delivery ended.

    :ivar delivered: a 2xx answer came.
    :ivar attempts: POSTs made (0: refused before any).
    :ivar status: the last HTTP status answered, if any.
    :ivar problem: why it was not delivered (empty when it was).
    """

    delivered: bool
    attempts: int
    status: int | None = None
    problem: str = ""


def longest_delivery(attempts: int, timeout: float, backoff: float) -> float:
    """Seconds :func:`deliver` can take at most: every attempt timing out and every backoff
    (doubling from ``backoff``) waited — what a claim on a delivery must outlast."""
    return attempts * timeout + backoff * float(2 ** (attempts - 1) - 1)


async def deliver(
    client: httpx.AsyncClient,
    url: str,
    *,
    content: bytes,
    headers: Mapping[str, str],
    attempts: int,
    backoff: float,
    timeout: float,
    allowed: Iterable[str] = (),
    what: str = "webhook URL",
    hint: str = "",
    before_retry: Callable[[], Awaitable[bool]] | None = None,
) -> Delivery:
    """POST ``content`` to ``url``, checking the address before each try, retrying a failed
    one (no connection, a timeout, 408/425/429/5xx) after ``backoff`` seconds, doubling.
    ``before_retry`` is awaited before each retry (a sender renewing its claim on the
    delivery); ``False`` stops there, undelivered (another sender has it now)."""
    delay = backoff
    status: int | None = None
    for attempt in range(1, attempts + 1):
        if attempt > 1 and before_retry is not None and not await before_retry():
            return Delivery(False, attempt - 1, status, "the claim on this delivery was lost")
        problem = await webhook_problem(url, allowed, what=what, hint=hint)
        if problem is not None:
            log.warning("webhook to %s refused: %s", url, problem)
            return Delivery(False, attempt - 1, status, problem)
        try:
            response = await client.post(
                url, content=content, headers=dict(headers), timeout=timeout
            )
        except httpx.HTTPError as exc:
            problem, retry = f"{type(exc).__name__}: {exc}", True
        else:
            status = response.status_code
            if response.is_success:
                return Delivery(True, attempt, status)
            problem = f"HTTP {status}"
            retry = status >= 500 or status in RETRY_STATUSES
        if not retry or attempt == attempts:
            log.warning("webhook to %s failed after %d attempt(s): %s", url, attempt, problem)
            return Delivery(False, attempt, status, problem)
        await asyncio.sleep(delay)
        delay *= 2
    return Delivery(False, attempts, status, "no attempt made")  # pragma: no cover
