"""The error classification's own rules (the conformance suite covers real SDK exceptions).

The exceptions here are small stand-ins carrying the attributes the SDKs document
(``status_code``, ``response.headers``, ``body``): the classifier reads exactly those, so this
checks its decision table without a server.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from typing import Any

import pytest

from tensorsketch.provider import (
    AuthenticationError,
    BadRequestError,
    ProviderConnectionError,
    ProviderError,
    ProviderServerError,
    ProviderTimeoutError,
    RateLimitError,
)
from tensorsketch.providers._errors import classify, parse_retry_after, reraise


class _Response:
    def __init__(self, headers: dict[str, str]) -> None:
        self.headers = headers


class StatusError(Exception):
    def __init__(self, status: int, headers: dict[str, str] | None = None, body: Any = None):
        super().__init__(f"HTTP {status}")
        self.status_code = status
        self.response = _Response(headers or {})
        self.body = body


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (400, BadRequestError, False),
        (401, AuthenticationError, False),
        (403, AuthenticationError, False),
        (404, BadRequestError, False),
        (408, ProviderTimeoutError, True),
        (409, ProviderError, True),
        (413, BadRequestError, False),
        (422, BadRequestError, False),
        (429, RateLimitError, True),
        (500, ProviderServerError, True),
        (503, ProviderServerError, True),
        (529, ProviderServerError, True),
    ],
)
def test_status_codes(status: int, kind: type[ProviderError], retryable: bool) -> None:
    error = classify(StatusError(status), provider="acme", model="m1")
    assert type(error) is kind
    assert error.retryable is retryable
    assert error.status_code == status
    assert (error.provider, error.model) == ("acme", "m1")
    assert "acme model 'm1'" in str(error)


def test_body_type_decides_when_the_status_is_200() -> None:
    # Anthropic reports an overload inside an open (HTTP 200) SSE stream.
    exc = StatusError(
        200, body={"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    )
    error = classify(exc, provider="anthropic", model=None)
    assert isinstance(error, ProviderServerError)
    assert error.status_code is None
    assert str(error).endswith("busy")


def test_transport_failures() -> None:
    assert isinstance(classify(TimeoutError(), provider="p", model=None), ProviderTimeoutError)
    assert isinstance(
        classify(ConnectionRefusedError(), provider="p", model=None), ProviderConnectionError
    )

    class ReadTimeout(Exception):  # the name httpx / httpx2 use
        pass

    class ConnectError(Exception):
        pass

    assert isinstance(classify(ReadTimeout(), provider="p", model=None), ProviderTimeoutError)
    assert isinstance(classify(ConnectError(), provider="p", model=None), ProviderConnectionError)


def test_bugs_and_cancellation_are_not_api_failures() -> None:
    assert classify(KeyError("oops"), provider="p", model=None) is None
    assert classify(asyncio.CancelledError(), provider="p", model=None) is None
    with pytest.raises(KeyError):
        reraise(KeyError("oops"), provider="p", model=None)


def test_reraise_chains_the_sdk_error() -> None:
    original = StatusError(500)
    with pytest.raises(ProviderServerError) as caught:
        reraise(original, provider="p", model=None)
    assert caught.value.__cause__ is original


def test_retry_after_forms() -> None:
    assert parse_retry_after({"retry-after": "12"}) == 12.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    soon = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= (parse_retry_after({"retry-after": soon}) or 0) <= 31
    body = {
        "error": {
            "code": 429,
            "details": [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure"},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "41s"},
            ],
        }
    }
    assert parse_retry_after({}, body) == 41.0
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "soon-ish"}) is None


def test_rate_limit_message_names_the_wait() -> None:
    error = classify(StatusError(429, {"retry-after": "20"}), provider="openai", model="gpt-4o")
    assert isinstance(error, RateLimitError)
    assert error.retry_after == 20.0
    assert "retry after 20s" in str(error)
