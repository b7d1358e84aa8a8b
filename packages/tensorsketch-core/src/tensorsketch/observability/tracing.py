"""The vendor-neutral tracer: spans, the ``Tracer`` interface, and the span lifecycle.

A :class:`Span` is one timed unit of work (a run, a node, a model or tool call, or anything
marked with ``ctx.span``). Spans nest through a ``ContextVar``, so nesting is right across
``await`` and across parallel asyncio tasks (each task starts from a copy of its creator's
context). :class:`NoopTracer` is the default and costs one attribute check per node.
:class:`RecordingTracer` owns the lifecycle (ids, timing, status, nesting) and hands each
finished span to ``_record``; sinks only implement that one method.

Tracing never changes a run's outcome: an exception raised by a sink is logged on the
``tensorsketch.observability`` logger and the run goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import re
import sys
import time
from abc import ABC, abstractmethod
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, NamedTuple

__all__ = [
    "ATTR_AGENT_NAME",
    "ATTR_COST_USD",
    "ATTR_ERROR_TYPE",
    "ATTR_GRAPH",
    "ATTR_INPUT",
    "ATTR_INPUT_MESSAGES",
    "ATTR_INPUT_TOKENS",
    "ATTR_NAMESPACE",
    "ATTR_NODE",
    "ATTR_OUTPUT_MESSAGES",
    "ATTR_OUTPUT_TOKENS",
    "ATTR_PROVIDER",
    "ATTR_REQUEST_MODEL",
    "ATTR_RESPONSE_MODEL",
    "ATTR_STEP",
    "ATTR_SYSTEM_INSTRUCTIONS",
    "ATTR_TOOL_ARGUMENTS",
    "ATTR_TOOL_CALL_ID",
    "ATTR_TOOL_DEFINITIONS",
    "ATTR_TOOL_NAME",
    "ATTR_TOOL_RESULT",
    "NOOP_TRACER",
    "NoopTracer",
    "RecordingTracer",
    "RemoteParent",
    "Span",
    "Tracer",
    "current_span",
    "new_span_id",
    "new_trace_id",
    "parse_traceparent",
    "remote_parent",
    "set_end_status",
]

_log = logging.getLogger("tensorsketch.observability")

# -- the attribute vocabulary --------------------------------------------------------------
# The engine and the agent layer write these keys; the report, ``Trace.summary()`` and the
# OpenTelemetry bridge read them. Names follow the OpenTelemetry GenAI conventions where one
# exists; ``gen_ai.usage.cost_usd`` and ``tensorsketch.*`` are TensorSketch's own.

#: Graph name on the ``run`` span.
ATTR_GRAPH = "tensorsketch.graph"
#: The run's input as capped JSON, on the ``run`` span (content: the OTel bridge exports it
#: only with ``capture_content=True``); ``Case.from_trace`` turns a recorded run into a case.
ATTR_INPUT = "tensorsketch.input"
#: Node name on ``node`` spans (the Studio overlay keys off it).
ATTR_NODE = "tensorsketch.node"
#: Superstep number on ``node`` spans.
ATTR_STEP = "tensorsketch.step"
#: Where a ``run`` or ``node`` span sits when its graph runs inside another graph's node: the
#: run's namespace path, outermost first (``["Research:subgraph"]``); absent at the top level.
#: The Studio's overlay places a subgraph's nodes by it while their parents are still open.
ATTR_NAMESPACE = "tensorsketch.namespace"
#: Agent name (on an ``agent`` span, or on the node span that runs an agent).
ATTR_AGENT_NAME = "gen_ai.agent.name"
#: Provider of a ``model`` span (``"anthropic"``, ``"openai"``, ``"fake"``, ...).
ATTR_PROVIDER = "gen_ai.provider.name"
#: Model asked for, and model that answered, on ``model`` spans.
ATTR_REQUEST_MODEL = "gen_ai.request.model"
ATTR_RESPONSE_MODEL = "gen_ai.response.model"
#: Token usage on ``model`` spans.
ATTR_INPUT_TOKENS = "gen_ai.usage.input_tokens"
ATTR_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
#: Estimated cost of a ``model`` span in USD; absent (or ``None``) when the model is unpriced.
ATTR_COST_USD = "gen_ai.usage.cost_usd"
#: Content of a ``model`` span as JSON text in the GenAI conventions' shapes: the messages
#: sent (``[{"role", "parts": [...]}]``, system messages left out), the reply
#: (``[{"role": "assistant", "parts", "finish_reason"}]``), the system prompt
#: (``[{"type": "text", "content"}]``) and the tools offered
#: (``[{"type": "function", "name", "description", "parameters"}]``). Written only when the
#: tracer's ``capture_content`` is true (they may hold personal data, and a transcript resent on
#: every call would make traces grow quadratically).
ATTR_INPUT_MESSAGES = "gen_ai.input.messages"
ATTR_OUTPUT_MESSAGES = "gen_ai.output.messages"
ATTR_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
ATTR_TOOL_DEFINITIONS = "gen_ai.tool.definitions"
#: Tool name and the model's tool-call id on ``tool`` spans.
ATTR_TOOL_NAME = "gen_ai.tool.name"
ATTR_TOOL_CALL_ID = "gen_ai.tool.call.id"
#: Tool arguments and result on ``tool`` spans (size-capped by the agent layer).
ATTR_TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
ATTR_TOOL_RESULT = "gen_ai.tool.call.result"
#: The exception class of a failed span.
ATTR_ERROR_TYPE = "error.type"


# Ids come from a private generator seeded from the OS: twice as fast as ``os.urandom`` per
# span, and unaffected by user code calling ``random.seed()``. Reseeded in forked children.
_ids = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _ids.seed(os.urandom(32)))


def new_trace_id() -> str:
    """A W3C-compatible 128-bit trace id as 32 hex digits (never all zeros)."""
    return f"{_ids.getrandbits(128) or 1:032x}"


def new_span_id() -> str:
    """A W3C-compatible 64-bit span id as 16 hex digits (never all zeros)."""
    return f"{_ids.getrandbits(64) or 1:016x}"


@dataclass(slots=True)
class Span:
    """One timed unit of work with a status and free-form attributes.

    ``status`` is ``"ok"``, ``"error"`` (the block raised), ``"cancelled"`` (the block was
    cancelled, e.g. a parallel sibling failed) or ``"suspended"`` (the run suspended there to
    wait for a decision or a time). ``start``/``end`` are ``perf_counter`` readings
    for precise durations; ``started_at`` is the wall-clock start (epoch seconds).
    """

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
        self.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        self.attributes.setdefault(ATTR_ERROR_TYPE, type(exc).__qualname__)

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


class RemoteParent(NamedTuple):
    """A span in another process (from a W3C ``traceparent``) that a run's root span joins."""

    trace_id: str
    span_id: str
    sampled: bool = True


#: The innermost open span of the current task (or ``None``).
current_span: ContextVar[Span | None] = ContextVar("tensorsketch_current_span", default=None)

#: The caller's span that root spans opened in this context join (set by ``use_traceparent``).
remote_parent: ContextVar[RemoteParent | None] = ContextVar(
    "tensorsketch_remote_parent", default=None
)


class Tracer(ABC):
    """Where spans go. One method: a context manager around a unit of work."""

    #: ``False`` only for tracers that record nothing; the engine skips span bookkeeping.
    enabled: bool = True
    #: Whether model spans carry prompts and replies (``gen_ai.input.messages``,
    #: ``gen_ai.output.messages``, ``gen_ai.system_instructions``, ``gen_ai.tool.definitions``).
    #: Off by default; ``OTelTracer(capture_content=True)`` turns it on, and any other tracer
    #: opts in with ``tracer.capture_content = True``.
    capture_content: bool = False

    @abstractmethod
    def span(
        self, name: str, *, kind: str = "custom", **attributes: Any
    ) -> contextlib.AbstractContextManager[Span]:
        """Open a span nested under the current one; close it when the block exits."""


class _NoopSpan(Span):
    """The span a :class:`NoopTracer` hands out: it is shared, so it keeps nothing."""

    __slots__ = ()

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def set_attributes(self, **attributes: Any) -> None:
        return None

    def record_error(self, exc: BaseException) -> None:
        return None


class _NoopSpanContext(contextlib.AbstractContextManager[Span]):
    __slots__ = ("_span",)

    def __init__(self) -> None:
        self._span = _NoopSpan(name="noop")

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


def set_end_status(span: Span, exc: BaseException | None) -> None:
    """Set a closing span's status from the exception that ended its block (if any).

    For tracers that run their own lifecycle (the OpenTelemetry bridge), so every tracer
    agrees on what ``error`` and ``cancelled`` mean.
    """
    if exc is None:
        return
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        span.status = "cancelled"
        span.error = type(exc).__name__
        return
    interrupts = sys.modules.get("tensorsketch.interrupts")  # loaded by anything that suspends
    if interrupts is not None and isinstance(exc, interrupts.Interrupt):
        span.status = "suspended"  # waiting for a person or a time: not a failure
        return
    span.record_error(exc)


class _SpanScope(contextlib.AbstractContextManager[Span]):
    """One open span of a :class:`RecordingTracer` (a class, not a generator: it is hot)."""

    __slots__ = ("_attributes", "_kind", "_name", "_span", "_token", "_tracer")

    def __init__(
        self, tracer: RecordingTracer, name: str, kind: str, attributes: dict[str, Any]
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._kind = kind
        self._attributes = attributes

    def __enter__(self) -> Span:
        span = self._tracer._start(self._name, self._kind, self._attributes)
        self._span = span
        self._token: Token[Span | None] = current_span.set(span)
        return span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self._span
        span.end = time.perf_counter()
        set_end_status(span, exc)
        try:
            current_span.reset(self._token)
        except ValueError:  # closed from another context (an abandoned async generator)
            pass
        tracer = self._tracer
        try:
            tracer._record(span)
        except Exception:  # a sink never changes the run's outcome
            _log.exception(
                "trace sink %s failed to record span %r", type(tracer).__name__, span.name
            )


class RecordingTracer(Tracer):
    """A tracer that owns the span lifecycle and hands every finished span to ``_record``.

    Subclass it and implement ``_record(span)`` to build a sink (a file, a buffer, a socket).
    A span opened inside another joins its trace; a root span joins the caller's trace when
    one was passed in (``traceparent=`` here, or ``use_traceparent(...)`` around the call),
    and otherwise uses this tracer's own trace id (made on first use), so every span one
    tracer records outside a caller's trace shares one id.

    :param traceparent: a W3C ``traceparent`` header value; root spans become children of
        that remote span, so the run shows up inside the caller's trace.
    :param capture_content: also record model calls' prompts and replies on their spans
        (:attr:`Tracer.capture_content`; off by default: they may hold personal data).
    """

    def __init__(self, *, traceparent: str | None = None, capture_content: bool = False) -> None:
        self.trace_id: str | None = None
        if capture_content:  # else the class's value (a subclass may turn it on for all)
            self.capture_content = True
        self._remote: RemoteParent | None = None
        if traceparent is not None:
            remote = parse_traceparent(traceparent)
            if remote is None:
                msg = (
                    f"traceparent={traceparent!r} is not a valid W3C traceparent; pass a value "
                    "like '00-<32 hex trace id>-<16 hex span id>-01', or None to start a new "
                    "trace."
                )
                raise ValueError(msg)
            self._remote = remote
            self.trace_id = remote.trace_id

    @abstractmethod
    def _record(self, span: Span) -> None:
        """Consume one finished span (called once per span, children before parents)."""

    def _start(self, name: str, kind: str, attributes: dict[str, Any]) -> Span:
        parent = current_span.get()
        parent_id: str | None
        if parent is not None:
            trace_id = parent.trace_id
            parent_id = parent.span_id
        else:
            remote = self._remote or remote_parent.get()
            if remote is not None:
                trace_id = remote.trace_id
                parent_id = remote.span_id
            else:
                trace_id = self.trace_id or new_trace_id()
                parent_id = None
        if self.trace_id is None:
            self.trace_id = trace_id
        return Span(
            name=name,
            kind=kind,
            trace_id=trace_id,
            span_id=new_span_id(),
            parent_id=parent_id,
            start=time.perf_counter(),
            started_at=time.time(),
            attributes=attributes,
        )

    def span(
        self, name: str, *, kind: str = "custom", **attributes: Any
    ) -> contextlib.AbstractContextManager[Span]:
        return _SpanScope(self, name, kind, attributes)


_HEADER = re.compile(
    r"^(?P<version>[0-9a-f]{2})-(?P<trace>[0-9a-f]{32})-(?P<span>[0-9a-f]{16})-"
    r"(?P<flags>[0-9a-f]{2})(?P<rest>-.*)?$"
)


def parse_traceparent(value: str | None) -> RemoteParent | None:
    """Parse a ``traceparent`` header; ``None`` when it is missing or invalid.

    Follows the W3C Trace Context rules: version ``ff`` and all-zero ids are invalid, and
    version ``00`` has exactly four fields (later versions may append more, which are ignored).
    """
    if not value:
        return None
    match = _HEADER.match(value.strip().lower())
    if match is None:
        return None
    version = match["version"]
    if version == "ff" or (version == "00" and match["rest"]):
        return None
    trace_id, span_id = match["trace"], match["span"]
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return RemoteParent(trace_id, span_id, sampled=bool(int(match["flags"], 16) & 0x01))
