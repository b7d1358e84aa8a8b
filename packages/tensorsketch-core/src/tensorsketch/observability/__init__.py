"""Tracing and observability: spans, tracers and exporters.

Other distributions contribute submodules here (``tensorsketch.observability.otel`` comes with
``tensorsketch-interop``), so this package joins the namespace across distributions.
"""

__path__ = __import__("pkgutil").extend_path(__path__, __name__)

from tensorsketch.observability.tracing import (
    NOOP_TRACER,
    NoopTracer,
    RecordingTracer,
    Span,
    Tracer,
    current_span,
)

__all__ = ["NOOP_TRACER", "NoopTracer", "RecordingTracer", "Span", "Tracer", "current_span"]
