"""Turn any vendor SDK's exception into the core taxonomy, the same way for every vendor.

The retry and fallback machinery only reads :class:`tensorsketch.provider.ProviderError`, so each
provider wraps its SDK call in :func:`classify`::

    HTTP 429 (or a "rate_limit" error type)     -> RateLimitError(retry_after=...)
    HTTP 5xx / 529 / "overloaded" / "api_error" -> ProviderServerError
    HTTP 408 or a client-side timeout           -> ProviderTimeoutError
    the connection failed                       -> ProviderConnectionError
    HTTP 401 / 403                              -> AuthenticationError
    HTTP 400 / 404 / 413 / 422 / other 4xx      -> BadRequestError
    HTTP 409 (a conflict that clears itself)    -> ProviderError(retryable=True)

The SDKs do not share exception classes (and their transport library varies between
releases: httpx, httpx2, aiohttp), so the duck-typed checks below read the attributes the SDKs
document — ``status_code`` / ``code``, ``response.headers``, ``body`` / ``details`` — and the
exception class *names* of the transport layer rather than importing any of them.
"""

from __future__ import annotations

import asyncio
import email.utils
import re
import time
from collections.abc import Mapping
from typing import Any, NoReturn

from tensorsketch.provider import (
    AuthenticationError,
    BadRequestError,
    ProviderConnectionError,
    ProviderError,
    ProviderServerError,
    ProviderTimeoutError,
    RateLimitError,
)

__all__ = ["classify", "parse_retry_after", "reraise"]

_TIMEOUT_NAMES = {"APITimeoutError", "TimeoutException", "ServerTimeoutError", "ReadTimeout"}
_CONNECTION_NAMES = {
    "APIConnectionError",
    "TransportError",
    "NetworkError",
    "ConnectError",
    "RemoteProtocolError",
    "ClientConnectionError",
    "ClientConnectorError",
    "ServerDisconnectedError",
}
# Error ``type`` strings in vendor bodies (Anthropic's SSE ``error`` events arrive on a 200).
_BODY_TYPES: dict[str, type[ProviderError]] = {
    "rate_limit_error": RateLimitError,
    "overloaded_error": ProviderServerError,
    "api_error": ProviderServerError,
    "timeout_error": ProviderTimeoutError,
    "authentication_error": AuthenticationError,
    "permission_error": AuthenticationError,
    "invalid_request_error": BadRequestError,
    "not_found_error": BadRequestError,
    "request_too_large": BadRequestError,
    "RESOURCE_EXHAUSTED": RateLimitError,
    "UNAVAILABLE": ProviderServerError,
    "INTERNAL": ProviderServerError,
    "DEADLINE_EXCEEDED": ProviderTimeoutError,
    "UNAUTHENTICATED": AuthenticationError,
    "PERMISSION_DENIED": AuthenticationError,
    "INVALID_ARGUMENT": BadRequestError,
    "NOT_FOUND": BadRequestError,
    "FAILED_PRECONDITION": BadRequestError,
}


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _status(exc: BaseException) -> int | None:
    for attr in ("status_code", "code", "status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int) and 100 <= value <= 599:
            return value
    response = getattr(exc, "response", None)
    value = getattr(response, "status_code", None)
    return value if isinstance(value, int) else None


def _headers(exc: BaseException) -> Mapping[str, str]:
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return {}
    try:
        return {str(k).lower(): str(v) for k, v in dict(headers).items()}
    except (TypeError, ValueError):
        return {}


def _body(exc: BaseException) -> Any:
    for attr in ("body", "details"):
        value = getattr(exc, attr, None)
        if isinstance(value, Mapping | list):
            return value
    return None


def _error_obj(body: Any) -> Mapping[str, Any]:
    if isinstance(body, list) and body:
        body = body[0]
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping):
            return inner
        return body
    return {}


def _body_kind(body: Any) -> type[ProviderError] | None:
    err = _error_obj(body)
    for key in ("type", "status", "code"):
        value = err.get(key)
        if isinstance(value, str) and value in _BODY_TYPES:
            return _BODY_TYPES[value]
    return None


def _api_message(exc: BaseException, body: Any) -> str:
    err = _error_obj(body)
    message = err.get("message")
    if isinstance(message, str) and message:
        return message
    text = str(exc).strip()
    return text or type(exc).__name__


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


def parse_retry_after(headers: Mapping[str, str], body: Any = None) -> float | None:
    """Seconds to wait, from ``retry-after-ms``, ``retry-after`` (seconds or an HTTP date), or
    a Google ``RetryInfo`` detail (``"retryDelay": "7s"``)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(float(raw_ms) / 1000.0, 0.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw:
        try:
            return max(float(raw), 0.0)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(raw)
            except (TypeError, ValueError):
                when = None
            if when is not None:
                return max(when.timestamp() - time.time(), 0.0)
    details = _error_obj(body).get("details")
    if isinstance(details, list):
        for item in details:
            if isinstance(item, Mapping) and str(item.get("@type", "")).endswith("RetryInfo"):
                match = _DURATION.match(str(item.get("retryDelay", "")))
                if match:
                    return float(match.group(1))
    return None


def classify(exc: BaseException, *, provider: str, model: str | None) -> ProviderError | None:
    """The core error for a vendor exception, or None when it is not an API failure (a bug in
    our mapping, a cancellation) and should propagate unchanged."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, asyncio.CancelledError):
        return None
    names = _names(exc)
    where = f"{provider} model {model!r}" if model else provider
    status = _status(exc)
    body = _body(exc)
    kind = _body_kind(body) if status is None or status < 400 else None
    if kind is None and status is not None and status >= 400:
        kind = _kind_for_status(status)
    if kind is None and (names & _TIMEOUT_NAMES or isinstance(exc, TimeoutError)):
        kind = ProviderTimeoutError
    if kind is None and (names & _CONNECTION_NAMES or isinstance(exc, ConnectionError)):
        kind = ProviderConnectionError
    if kind is None:
        return None
    detail = _api_message(exc, body)
    if kind is RateLimitError:
        retry_after = parse_retry_after(_headers(exc), body)
        hint = f" (retry after {retry_after:g}s)" if retry_after is not None else ""
        return RateLimitError(
            f"{where} is rate limited{hint}: {detail}",
            retry_after=retry_after,
            status_code=status or 429,
            provider=provider,
            model=model,
        )
    prefix = {
        ProviderServerError: "failed on the server side",
        ProviderTimeoutError: "did not answer in time",
        ProviderConnectionError: "could not be reached",
        AuthenticationError: "rejected the credentials (check the API key)",
        BadRequestError: "rejected the request",
    }.get(kind, "failed")
    status_text = f" (HTTP {status})" if status is not None and status >= 400 else ""
    return kind(
        f"{where} {prefix}{status_text}: {detail}",
        status_code=status if status is not None and status >= 400 else None,
        provider=provider,
        model=model,
        retryable=True if kind is ProviderError else None,
    )


def reraise(exc: BaseException, *, provider: str, model: str | None) -> NoReturn:
    """Raise the classified error (chained to ``exc``), or ``exc`` itself when it is not an
    API failure."""
    error = classify(exc, provider=provider, model=model)
    if error is None or error is exc:
        raise exc
    raise error from exc


def _kind_for_status(status: int) -> type[ProviderError]:
    if status == 429:
        return RateLimitError
    if status in (401, 403):
        return AuthenticationError
    if status == 408:
        return ProviderTimeoutError
    if status >= 500:
        return ProviderServerError
    if status == 409:  # a conflict (e.g. a lock timeout) clears on its own
        return ProviderError
    return BadRequestError
