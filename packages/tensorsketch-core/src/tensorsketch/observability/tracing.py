"""The vendor-neutral tracer: spans, the ``Tracer`` interface, and the span lifecycle.

A :class:`Span` is one timed unit of work (a run, a node, a model or tool call, or anything
marked with ``ctx.span``). Spans nest through a ``ContextVar``, so nesting is right across
``await`` and across parallel asyncio tasks. :class:`NoopTracer` is the default and costs one
attribute check per node. :class:`RecordingTracer` owns the lifecycle (ids, timing, status,
nesting) and hands each finished span to ``_record``; sinks only implement that one method.
"""

from __future__ import annotations

import contextlib
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "NOOP_TRACER",
    "NoopTracer",
    "RecordingTracer",
    "Span",
    "Tracer",
    "current_span",
    "new_span_id",
    "new_trace_id",
]


def new_trace_id() -> str:
    """A W3C-compatible 128-bit trace id as 32 hex digits."""
    return os.urandom(16).hex()


def new_span_id() -> str:
    """A W3C-compatible 64-bit span id as 16 hex digits."""
    return os.urandom(8).hex()


@dataclass(slots=True)
class Span:
    """One timed unit of work with a status and free-form attributes."""

    name: str
    kind: str = "custom"
    trace_id: str = ""
    span_id: str = ""
    parent_id: str | None = None
    start: float = 0.0
    end: float | None = None
    started_at: float = 0.0
    status: str = "ok"
    error: str | None = None
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_ms(self) -> float:
        """Elapsed milliseconds (up to now for an open span)."""
        end = self.end if self.end is not None else time.perf_counter()
        return (end - self.start) * 1000.0

    def set_attribute(self, key: str, value: Any) -> None:
        """Attach or overwrite one attribute."""
        self.attributes[key] = value

    def set_attributes(self, **attributes: Any) -> None:
        """Attach several attributes at once."""
        self.attributes.update(attributes)

    def record_error(self, exc: BaseException) -> None:
        """Mark the span as failed with the exception's class and message."""
        self.status = "error"
        self.error = f"{type(exc).__name__}: {exc}"
        self.attributes.setdefault("error.type", type(exc).__qualname__)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict: one line of a trace file."""
        return {
            "name": self.name,
            "kind": self.kind,
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_id": self.parent_id,
            "started_at": self.started_at,
            "duration_ms": round(self.duration_ms, 3),
            "status": self.status,
            "error": self.error,
            "attributes": dict(self.attributes),
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Span:
        """Rebuild a span written by :meth:`to_dict` (timing is kept as a duration)."""
        duration = float(raw.get("duration_ms") or 0.0) / 1000.0
        return cls(
            name=str(raw["name"]),
            kind=str(raw.get("kind", "custom")),
            trace_id=str(raw.get("trace_id", "")),
            span_id=str(raw.get("span_id", "")),
            parent_id=raw.get("parent_id"),
            start=0.0,
            end=duration,
            started_at=float(raw.get("started_at") or 0.0),
            status=str(raw.get("status", "ok")),
            error=raw.get("error"),
            attributes=dict(raw.get("attributes") or {}),
        )


#: The innermost open span of the current task (or ``None``).
current_span: ContextVar[Span | None] = ContextVar("tensorsketch_current_span", default=None)


class Tracer(ABC):
    """Where spans go. One method: a context manager around a unit of work."""

    #: ``False`` only for tracers that record nothing; the engine skips span bookkeeping.
    enabled: bool = True

    @abstractmethod
    def span(
        self, name: str, *, kind: str = "custom", **attributes: Any
    ) -> contextlib.AbstractContextManager[Span]:
        """Open a span nested under the current one; close it when the block exits."""


class _NoopSpanContext(contextlib.AbstractContextManager[Span]):
    __slots__ = ("_span",)

    def __init__(self) -> None:
        self._span = Span(name="noop")

    def __enter__(self) -> Span:
        return self._span

    def __exit__(self, *exc: object) -> None:
        return None


class NoopTracer(Tracer):
    """Records nothing; the default when ``invoke`` is given no tracer."""

    enabled = False

    def __init__(self) -> None:
        self._context = _NoopSpanContext()

    def span(
        self, name: str, *, kind: str = "custom", **attributes: Any
    ) -> contextlib.AbstractContextManager[Span]:
        return self._context


NOOP_TRACER = NoopTracer()


class RecordingTracer(Tracer):
    """A tracer that owns the span lifecycle and hands every finished span to ``_record``.

    Subclass it and implement ``_record(span)`` to build a sink (a file, a buffer, a socket).
    Each tracer instance starts a new trace id per root span, unless a parent span is open in
    the current context (then the child joins that trace).
    """

    def __init__(self) -> None:
        self.trace_id: str | None = None

    @abstractmethod
    def _record(self, span: Span) -> None:
        """Consume one finished span (called once per span, children before parents)."""

    def _start(self, name: str, kind: str, attributes: dict[str, Any]) -> Span:
        parent = current_span.get()
        if parent is not None and parent.trace_id:
            trace_id = parent.trace_id
        else:
            trace_id = self.trace_id or new_trace_id()
        if self.trace_id is None:
            self.trace_id = trace_id
        return Span(
            name=name,
            kind=kind,
            trace_id=trace_id,
            span_id=new_span_id(),
            parent_id=parent.span_id if parent is not None else None,
            start=time.perf_counter(),
            started_at=time.time(),
            attributes=attributes,
        )

    @contextlib.contextmanager
    def span(self, name: str, *, kind: str = "custom", **attributes: Any) -> Iterator[Span]:
        span = self._start(name, kind, attributes)
        token = current_span.set(span)
        try:
            yield span
        except BaseException as exc:
            span.record_error(exc)
            raise
        finally:
            span.end = time.perf_counter()
            current_span.reset(token)
            self._record(span)
