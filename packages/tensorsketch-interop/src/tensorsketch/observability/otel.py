"""``OTelTracer``: every TensorSketch span becomes an OpenTelemetry span, in GenAI conventions.

TensorSketch traces itself with its own tracer; this module is the optional bridge for teams
that run OpenTelemetry. Each span is started as a live OTel span (so it nests under whatever
span is current, e.g. an instrumented web request, and anything instrumented inside a node
nests under it), and is named and attributed after the OpenTelemetry GenAI semantic
conventions (the ``open-telemetry/semantic-conventions-genai`` repository):

========================  =============================  ======================================
TensorSketch span          OTel span name                 ``gen_ai.operation.name`` / kind
========================  =============================  ======================================
``run``                    ``invoke_workflow {graph}``    ``invoke_workflow`` / INTERNAL
agent (or agent node)      ``invoke_agent {agent}``       ``invoke_agent`` / INTERNAL
``model``                  ``chat {request model}``       ``chat`` / CLIENT
``tool``                   ``execute_tool {tool}``        ``execute_tool`` / INTERNAL
``evaluation`` (a grade)   ``gen_ai.evaluation.result``   none / INTERNAL + that event
``node`` and custom        the span's own name            none / INTERNAL
========================  =============================  ======================================

Content (prompts, completions, tool arguments and results) is exported only with
``capture_content=True``. ``gen_ai.usage.cost_usd``, which the conventions do not define, is
exported as ``tensorsketch.usage.cost_usd``.
"""

from __future__ import annotations

import contextlib
import json
import time
from contextvars import Token
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from types import TracebackType
from typing import Any, NamedTuple

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace import (
        NonRecordingSpan,
        SpanContext,
        SpanKind,
        Status,
        StatusCode,
        TraceFlags,
    )

    if find_spec("opentelemetry.sdk") is None:
        raise ImportError("opentelemetry-sdk is not installed")
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    _msg = (
        "`tensorsketch.observability.otel` needs the OpenTelemetry SDK, which is not installed. "
        'Install it with `pip install "tensorsketch-interop[otel]"`.'
    )
    raise ImportError(_msg) from exc

from tensorsketch.observability.propagation import parse_traceparent
from tensorsketch.observability.tracing import (
    ATTR_AGENT_NAME,
    ATTR_COST_USD,
    ATTR_ERROR_TYPE,
    ATTR_GRAPH,
    ATTR_REQUEST_MODEL,
    ATTR_RESPONSE_MODEL,
    ATTR_TOOL_NAME,
    RemoteParent,
    Span,
    Tracer,
    current_span,
    remote_parent,
    set_end_status,
)

__all__ = ["CONTENT_ATTRIBUTES", "EVALUATION_EVENT", "SEMCONV", "OTelTracer", "OTelView", "to_otel"]

#: Which GenAI conventions the mapping follows (see ``docs/observability.md``).
SEMCONV = "semantic-conventions-genai (development, split from semantic-conventions v1.41)"

#: Attributes that carry prompts, completions or tool payloads: exported only on opt-in.
CONTENT_ATTRIBUTES = frozenset(
    {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.definitions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.retrieval.query.text",
        "gen_ai.retrieval.documents",
        "tensorsketch.input",
    }
)

#: TensorSketch attribute names and their names on export: the conventions' spelling where
#: one exists, ``tensorsketch.*`` where the conventions define nothing.
_RENAMED = {
    ATTR_COST_USD: "tensorsketch.usage.cost_usd",
    "gen_ai.usage.cache_read_tokens": "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_write_tokens": "gen_ai.usage.cache_creation.input_tokens",
}

_OPERATION = "gen_ai.operation.name"
#: The event a grade carries (``kind="evaluation"`` spans, written by ``tensorsketch.eval``).
EVALUATION_EVENT = "gen_ai.evaluation.result"
_MISSING = object()


class OTelView(NamedTuple):
    """How one TensorSketch span looks as an OTel span."""

    name: str
    kind: SpanKind
    attributes: dict[str, Any]


def _primitive(value: Any) -> bool:
    return isinstance(value, str | bool | int | float)


def _otel_value(value: Any) -> Any:
    """An OTel attribute value: primitives and flat homogeneous lists as they are, anything
    structured as JSON text (the conventions allow JSON strings on spans)."""
    if _primitive(value):
        return value
    flat = isinstance(value, list | tuple) and value and _primitive(value[0])
    if flat and len({type(v) for v in value}) == 1:
        return tuple(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        value = dump(mode="json")
    return json.dumps(value, default=repr, ensure_ascii=False)


def _operation(span: Span) -> tuple[str | None, str, SpanKind]:
    """``(gen_ai.operation.name, span name, span kind)`` for a TensorSketch span."""
    attrs = span.attributes
    explicit = attrs.get(_OPERATION)
    if span.kind == "model":
        operation = str(explicit or "chat")
        model = attrs.get(ATTR_REQUEST_MODEL) or attrs.get(ATTR_RESPONSE_MODEL)
        return operation, f"{operation} {model}" if model else operation, SpanKind.CLIENT
    if span.kind == "tool":
        tool = attrs.get(ATTR_TOOL_NAME) or span.name
        return "execute_tool", f"execute_tool {tool}", SpanKind.INTERNAL
    if span.kind == "agent" or (span.kind == "node" and attrs.get(ATTR_AGENT_NAME)):
        agent = attrs.get(ATTR_AGENT_NAME) or span.name
        return "invoke_agent", f"invoke_agent {agent}", SpanKind.INTERNAL
    if span.kind == "run":
        graph = attrs.get(ATTR_GRAPH)
        name = f"invoke_workflow {graph}" if graph else "invoke_workflow"
        return "invoke_workflow", name, SpanKind.INTERNAL
    return (str(explicit) if explicit else None), span.name, SpanKind.INTERNAL


def to_otel(span: Span, *, capture_content: bool = False) -> OTelView:
    """Map a TensorSketch span onto the OpenTelemetry GenAI conventions."""
    operation, name, kind = _operation(span)
    attributes: dict[str, Any] = {}
    for key, value in span.attributes.items():
        if value is None or (key in CONTENT_ATTRIBUTES and not capture_content):
            continue
        attributes[_RENAMED.get(key, key)] = _otel_value(value)
    if operation is not None:
        attributes[_OPERATION] = operation
    if operation == "invoke_agent":
        attributes.setdefault(ATTR_AGENT_NAME, span.name)
    if operation == "invoke_workflow" and span.attributes.get(ATTR_GRAPH):
        attributes["gen_ai.workflow.name"] = str(span.attributes[ATTR_GRAPH])
    if operation == "execute_tool":
        attributes.setdefault(ATTR_TOOL_NAME, span.name)
    attributes["tensorsketch.span.kind"] = span.kind
    if span.status in ("cancelled", "suspended"):
        attributes["tensorsketch.status"] = span.status
    return OTelView(name, kind, attributes)


def _remote_context(trace_id: str, span_id: str, sampled: bool = True) -> otel_context.Context:
    parent = SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT),
    )
    return otel_trace.set_span_in_context(NonRecordingSpan(parent))


class _OTelSpan(Span):
    """The span code writes to under an ``OTelTracer``: it keeps the exception it was failed
    with (``span.record_error(exc)``, e.g. a tool error the agent handles), so the OTel span
    gets an ``exception`` event with its traceback even when the exception never leaves the
    block."""

    __slots__ = ("_exception",)

    def __init__(self, **fields: Any) -> None:
        super().__init__(**fields)
        self._exception: BaseException | None = None

    def record_error(self, exc: BaseException) -> None:
        super().record_error(exc)
        self._exception = exc


def _record_exception(otel_span: otel_trace.Span, native: _OTelSpan) -> None:
    """Give a failed span its ``exception`` event: from the exception it was failed with
    (raised out of the block, or handed to ``record_error``), else from its error text."""
    if native._exception is not None:
        otel_span.record_exception(native._exception)
        return
    text = native.error or ""
    kind = str(native.attributes.get(ATTR_ERROR_TYPE) or text.split(":", 1)[0] or "Error")
    message = text.split(": ", 1)[1] if text.startswith(f"{kind}: ") else text
    otel_span.add_event(
        "exception",
        {"exception.type": kind, "exception.message": message},
    )


class _OTelScope(contextlib.AbstractContextManager[Span]):
    """One open span: a live OTel span plus the TensorSketch span that code writes to."""

    __slots__ = (
        "_attrs",
        "_kind",
        "_name",
        "_native",
        "_otel",
        "_otel_token",
        "_started",
        "_token",
        "_tracer",
    )

    def __init__(self, tracer: OTelTracer, name: str, kind: str, attrs: dict[str, Any]) -> None:
        self._tracer = tracer
        self._name = name
        self._kind = kind
        self._attrs = attrs

    def _parent_context(self) -> otel_context.Context | None:
        native = current_span.get()
        if native is not None:
            live = otel_trace.get_current_span().get_span_context()
            if live.is_valid and otel_trace.format_span_id(live.span_id) == native.span_id:
                return None  # the current OTel span is this span's parent already
            if native.trace_id and native.span_id:
                # opened under another tracer's span: keep the tree in one trace
                return _remote_context(native.trace_id, native.span_id)
            return None
        remote: RemoteParent | None = self._tracer._remote or remote_parent.get()
        if remote is not None:
            return _remote_context(remote.trace_id, remote.span_id, remote.sampled)
        return None  # a root here: whatever OTel span is current (a web request) is the parent

    def __enter__(self) -> Span:
        tracer = self._tracer
        parent_context = self._parent_context()
        native = _OTelSpan(
            name=self._name,
            kind=self._kind,
            start=time.perf_counter(),
            started_at=time.time(),
            attributes=self._attrs,
        )
        view = to_otel(native, capture_content=tracer.capture_content)
        otel_span = tracer._tracer.start_span(
            view.name,
            context=parent_context,
            kind=view.kind,
            attributes=view.attributes,
            record_exception=False,
            set_status_on_exception=False,
        )
        context = otel_span.get_span_context()
        native.trace_id = otel_trace.format_trace_id(context.trace_id)
        native.span_id = otel_trace.format_span_id(context.span_id)
        parent = otel_trace.get_current_span(parent_context).get_span_context()
        if parent.is_valid:
            native.parent_id = otel_trace.format_span_id(parent.span_id)
        self._native: _OTelSpan = native
        self._otel = otel_span
        self._started = view
        self._otel_token = otel_context.attach(
            otel_trace.set_span_in_context(otel_span, parent_context)
        )
        self._token: Token[Span | None] = current_span.set(native)
        return native

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        native, otel_span = self._native, self._otel
        native.end = time.perf_counter()
        set_end_status(native, exc)
        try:
            view = to_otel(native, capture_content=self._tracer.capture_content)
            started = self._started
            if view.name != started.name:  # e.g. the model id was known only at the end
                otel_span.update_name(view.name)
            changed = {
                key: value
                for key, value in view.attributes.items()
                if started.attributes.get(key, _MISSING) != value
            }
            if changed:
                otel_span.set_attributes(changed)
            if native.kind == "evaluation":
                # a grade (tensorsketch.eval): the GenAI conventions' evaluation event
                otel_span.add_event(
                    EVALUATION_EVENT,
                    {
                        k: v
                        for k, v in view.attributes.items()
                        if k.startswith("gen_ai.evaluation.")
                    },
                )
            if native.status == "error":
                otel_span.set_status(Status(StatusCode.ERROR, native.error))
                _record_exception(otel_span, native)
            otel_span.end()
            native._exception = None  # let the traceback's frames go
        finally:
            try:
                current_span.reset(self._token)
                otel_context.detach(self._otel_token)
            except ValueError:  # closed from another context (an abandoned async generator)
                pass


class OTelTracer(Tracer):
    """A tracer that drives OpenTelemetry: ``app.invoke(..., tracer=OTelTracer())``.

    Spans go to the tracer provider you configured (the global one by default), so your
    exporters and processors decide where they end up. It is not a ``MultiTracer`` sink: fan
    out with the OTel SDK's own span processors instead.

    :param tracer_provider: an OTel ``TracerProvider``; ``None`` uses the global provider.
    :param capture_content: also export prompts, completions and tool arguments/results,
        and record the messages, system instructions and tool definitions of each model call
        (off by default: they may hold personal data).
    :param traceparent: join a caller's trace from a W3C ``traceparent`` value; without it,
        a run nests under the current OTel span (or
        :func:`~tensorsketch.observability.propagation.use_traceparent`).
    """

    enabled = True

    def __init__(
        self,
        tracer_provider: otel_trace.TracerProvider | None = None,
        capture_content: bool = False,
        *,
        traceparent: str | None = None,
    ) -> None:
        provider = tracer_provider or otel_trace.get_tracer_provider()
        try:
            own_version = version("tensorsketch-interop")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            own_version = "0.0.0"
        self._tracer = provider.get_tracer("tensorsketch", own_version)
        self.capture_content = bool(capture_content)
        self._remote: RemoteParent | None = None
        if traceparent is not None:
            self._remote = parse_traceparent(traceparent)
            if self._remote is None:
                msg = (
                    f"traceparent={traceparent!r} is not a valid W3C traceparent; pass a value "
                    "like '00-<32 hex trace id>-<16 hex span id>-01', or None."
                )
                raise ValueError(msg)

    def span(
        self, name: str, *, kind: str = "custom", **attributes: Any
    ) -> contextlib.AbstractContextManager[Span]:
        return _OTelScope(self, name, kind, attributes)

    def __repr__(self) -> str:
        return f"OTelTracer(capture_content={self.capture_content})"
