"""Store outages, said in one way: a lost connection becomes a ``BackendUnavailableError``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from tensorsketch.errors import BackendUnavailableError
from tensorsketch.runtime.backends.base import Backend

__all__ = ["store_guard"]


@contextlib.asynccontextmanager
async def store_guard(backend: Backend, what: str) -> AsyncIterator[None]:
    """Turn a lost connection into ``BackendUnavailableError`` saying how to resume."""
    try:
        yield
    except (OSError, ConnectionError, TimeoutError) as exc:
        if isinstance(exc, BackendUnavailableError):
            raise
        msg = (
            f"{backend.name} backend unavailable while {what}: {type(exc).__name__}: {exc}. "
            "The run stopped at its last checkpoint; invoke the same thread_id again once "
            "the store is back to resume."
        )
        raise BackendUnavailableError(msg) from exc
