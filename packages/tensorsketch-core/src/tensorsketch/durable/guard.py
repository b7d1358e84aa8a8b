"""Store outages, said in one way: a lost connection becomes a ``BackendUnavailableError``."""

from __future__ import annotations

from types import TracebackType

from tensorsketch.errors import BackendUnavailableError
from tensorsketch.runtime.backends.base import Backend

__all__ = ["store_guard"]


class _StoreGuard:
    """:func:`store_guard`'s context manager: a plain class, not a generator-based one (each of
    those is an async generator the event loop tracks, and half a dozen calls; a run makes a
    few store writes through here)."""

    __slots__ = ("backend", "what")

    def __init__(self, backend: Backend, what: str) -> None:
        self.backend = backend
        self.what = what

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None or not isinstance(exc, (OSError, ConnectionError, TimeoutError)):
            return
        if isinstance(exc, BackendUnavailableError):
            return
        msg = (
            f"{self.backend.name} backend unavailable while {self.what}: "
            f"{type(exc).__name__}: {exc}. The run stopped at its last checkpoint; invoke the "
            "same thread_id again once the store is back to resume."
        )
        raise BackendUnavailableError(msg) from exc


def store_guard(backend: Backend, what: str) -> _StoreGuard:
    """Turn a lost connection into ``BackendUnavailableError`` saying how to resume."""
    return _StoreGuard(backend, what)
