"""The interop distribution's plugin module (registered under the ``tensorsketch`` group)."""

from __future__ import annotations

from collections.abc import Mapping

from tensorsketch.hookspecs import hookimpl


@hookimpl
def tensorsketch_tracers() -> Mapping[str, str]:
    return {"otel": "tensorsketch.observability.otel:OTelTracer"}
