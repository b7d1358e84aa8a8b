"""Fan one span lifecycle out to several sinks: ``MultiTracer(collector, file, callback)``.

Opening a span through several tracers at once would give each its own ids, timings and
nesting, so destinations would disagree. ``MultiTracer`` instead runs the lifecycle once (one
trace id, one span id per span, one timing) and hands the same finished :class:`Span` to
every sink, so the tree in memory, in the file and in a live viewer is identical.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Union

from tensorsketch.observability.tracing import RecordingTracer, Span, Tracer

__all__ = ["MultiTracer", "Sink"]

_log = logging.getLogger("tensorsketch.observability")

#: A destination for finished spans: a recording tracer, or any ``callable(span)``.
Sink = Union[RecordingTracer, Callable[[Span], None]]  # noqa: UP007 - a runtime alias


class MultiTracer(RecordingTracer):
    """One span lifecycle, fanned out to every sink as each span closes.

    A sink is another :class:`RecordingTracer` (only its ``_record`` half is used: the spans
    carry this tracer's ids) or a plain ``Callable[[Span], None]`` such as
    ``http_span_sink(url)``. Sinks are called in order; one that raises is logged and skipped
    for that span, and the others still receive it.

    :param traceparent: join a caller's trace (see :class:`RecordingTracer`).
    :param capture_content: record model calls' prompts and replies; also on when any sink
        tracer asks for them (every sink gets the same spans).
    """

    def __init__(
        self, *sinks: Sink, traceparent: str | None = None, capture_content: bool = False
    ) -> None:
        wanted = capture_content or any(
            isinstance(sink, Tracer) and sink.capture_content for sink in sinks
        )
        super().__init__(traceparent=traceparent, capture_content=wanted)
        if not sinks:
            msg = (
                "MultiTracer() needs at least one sink, e.g. "
                "`MultiTracer(InMemoryTracer(), FileTracer('run.jsonl'))`."
            )
            raise ValueError(msg)
        recorders: list[Callable[[Span], None]] = []
        for position, sink in enumerate(sinks):
            if isinstance(sink, RecordingTracer):
                recorders.append(sink._record)
            elif isinstance(sink, Tracer):
                msg = (
                    f"MultiTracer sink #{position} is a {type(sink).__name__}, which drives its "
                    "own span lifecycle and cannot take finished spans; pass RecordingTracer "
                    "subclasses (InMemoryTracer, FileTracer) or callables `fn(span)`. To fan "
                    "OpenTelemetry out, add exporters to your OTel tracer provider instead."
                )
                raise TypeError(msg)
            elif callable(sink):
                recorders.append(sink)
            else:
                msg = (
                    f"MultiTracer sink #{position} is {sink!r}; a sink is a RecordingTracer "
                    "(InMemoryTracer, FileTracer) or a callable taking a finished `Span`."
                )
                raise TypeError(msg)
        self._sinks: tuple[Sink, ...] = tuple(sinks)
        self._recorders = tuple(recorders)

    @property
    def sinks(self) -> tuple[Sink, ...]:
        """The sinks, in the order they receive each span."""
        return self._sinks

    def _record(self, span: Span) -> None:
        for sink, record in zip(self._sinks, self._recorders):
            if isinstance(sink, RecordingTracer) and sink.trace_id is None:
                sink.trace_id = span.trace_id
            try:
                record(span)
            except Exception:  # one broken sink never starves the others
                _log.exception("MultiTracer sink %r failed to record span %r", sink, span.name)
