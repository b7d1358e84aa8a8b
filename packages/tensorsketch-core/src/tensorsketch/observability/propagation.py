"""W3C trace context: join a caller's trace, and hand the current span to outbound requests.

A service that receives ``traceparent: 00-<trace id>-<span id>-01`` runs the graph inside
:func:`use_traceparent`, so the run's root span becomes a child of the caller's span and the
whole run shows up in the caller's trace. Going the other way, :func:`current_traceparent`
(or :func:`inject`) gives the header for an outbound HTTP call made inside a node or tool, so
the downstream service can attach its spans to the exact span that called it.

Header values come off the wire, so the lenient helpers here never raise on a malformed one:
a missing or invalid ``traceparent`` simply starts a new trace (correlation must not turn a
request into an error). Only the explicit ``RecordingTracer(traceparent=...)`` argument is
checked strictly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, MutableMapping

from tensorsketch.observability.tracing import (
    RemoteParent,
    current_span,
    parse_traceparent,
    remote_parent,
)

__all__ = [
    "TRACEPARENT",
    "RemoteParent",
    "current_traceparent",
    "format_traceparent",
    "inject",
    "parse_traceparent",
    "use_traceparent",
]

#: The header name (lower case, as HTTP/2 sends it).
TRACEPARENT = "traceparent"


def format_traceparent(trace_id: str, span_id: str, *, sampled: bool = True) -> str:
    """Build a version-00 ``traceparent`` value."""
    return f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}"


def current_traceparent() -> str | None:
    """The ``traceparent`` of the innermost open span, for an outbound request.

    Outside any span it falls back to the caller's context set by :func:`use_traceparent`,
    and returns ``None`` when there is neither (or when tracing is off: the ``NoopTracer``
    opens no spans).
    """
    span = current_span.get()
    if span is not None and span.trace_id and span.span_id:
        return format_traceparent(span.trace_id, span.span_id)
    remote = remote_parent.get()
    if remote is not None:
        return format_traceparent(remote.trace_id, remote.span_id, sampled=remote.sampled)
    return None


def inject(headers: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Add ``traceparent`` for the current span to ``headers`` (unchanged outside a span)."""
    value = current_traceparent()
    if value is not None:
        headers[TRACEPARENT] = value
    return headers


@contextlib.contextmanager
def use_traceparent(value: str | RemoteParent | None) -> Iterator[RemoteParent | None]:
    """Run the block as part of the caller's trace.

    Root spans opened inside the block (a run's ``run`` span) get the caller's trace id and
    the caller's span as their parent, with every tracer (the OpenTelemetry bridge included).
    A missing or malformed header is ignored: the run starts a trace of its own. Yields the
    parsed parent (or ``None``).
    """
    parsed = value if isinstance(value, RemoteParent) else parse_traceparent(value)
    token = remote_parent.set(parsed)
    try:
        yield parsed
    finally:
        remote_parent.reset(token)
