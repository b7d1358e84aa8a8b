"""A graph run as protocol-neutral events: every protocol app re-encodes the same stream.

:func:`run_events` drives ``graph.stream(...)`` and yields, in order:

===================  ===========================================================================
event                when, and what it carries
===================  ===========================================================================
``RunStarted``       the engine started (``run_id``, ``thread_id``)
``StepStarted``      a node task starts (``node``, ``step``) — ``StepFinished`` when it ends
``TextStarted``      a model begins a run of text (``message_id``, ``node``)
``TextDelta``        a real token delta from the provider's stream, as it arrives (``text``)
``TextEnded``        that text run ended (a tool call, the node ending, or the run ending)
``ReasoningStarted`` a model begins a run of reasoning (``message_id``, ``node``), streamed as
                     ``ReasoningDelta`` (``text``) and closed by ``ReasoningEnded`` when
                     anything else happens (its text, a tool call, the node ending)
``ToolCallStarted``  a model asks for a tool call (``id``, ``name``): as its first argument
                     fragment streams, or when the agent runs it (a provider that streamed none)
``ToolCallArgs``     a fragment of its JSON arguments (``delta``), in the order the model
                     streamed them (the whole JSON in one when nothing was streamed)
``ToolCallEnded``    the arguments are complete (the model's turn ended)
``ToolCallResult``   the tool answered (``content`` text, ``is_error``)
``StateUpdated``     after every superstep (``values``: the merged state; ``to_json()``)
``Custom``           a node or tool's ``ctx.emit(name, value)`` (``name``, ``value``, ``node``)
``RunSuspended``     the run waits (``interrupts``: approvals, questions, timers) — last event
``RunFinished``      the run completed (``reply`` via ``to_reply``, ``usage``, ``state``) — last
``RunFailed``        the run raised (``error``, ``status``: the HTTP status it maps to) — last
===================  ===========================================================================

Exactly one of ``RunSuspended`` / ``RunFinished`` / ``RunFailed`` ends the stream;
:func:`run_once` returns just that last event, without streaming (for non-streaming answers).
Events of nested runs (sub-graphs, sub-agents) carry their ``namespace`` (``()`` at the top
level), so a protocol can show or drop them. A graph whose model streamed no text still gets
its reply as text: ``RunFinished`` is preceded by one
``TextStarted``/``TextDelta``/``TextEnded`` holding ``to_reply(state)``. Closing the iterator
(a client that went away) cancels the run at once; a durable thread keeps its last checkpoint
and is resumed by the next request.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from pydantic import ValidationError as PydanticValidationError
from pydantic_core import to_jsonable_python

from tensorsketch.errors import TensorSketchError, ThreadBusyError, ValidationError
from tensorsketch.events import BUILTIN_EVENT_TYPES
from tensorsketch.interrupts import PendingInterrupt, run_info
from tensorsketch.provider import ProviderError, RateLimitError, Usage
from tensorsketch.serve._adapter import ChatAdapter, usage_of

if TYPE_CHECKING:
    from tensorsketch.events import Event
    from tensorsketch.pregel.compiled import CompiledGraph
    from tensorsketch.runtime.backends.base import Backend

__all__ = [
    "Custom",
    "ReasoningDelta",
    "ReasoningEnded",
    "ReasoningStarted",
    "RunFailed",
    "RunFinished",
    "RunStarted",
    "RunSuspended",
    "ServeEvent",
    "StateUpdated",
    "StepFinished",
    "StepStarted",
    "TextDelta",
    "TextEnded",
    "TextStarted",
    "ToolCallArgs",
    "ToolCallEnded",
    "ToolCallResult",
    "ToolCallStarted",
    "error_status",
    "jsonable",
    "run_events",
    "run_once",
    "with_first",
]

logger = logging.getLogger("tensorsketch.serve")

Namespace = tuple[str, ...]


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (pydantic models dumped, unknown objects as ``str``)."""
    return to_jsonable_python(value, fallback=str)


@dataclass(frozen=True, slots=True)
class RunStarted:
    run_id: str
    thread_id: str | None


@dataclass(frozen=True, slots=True)
class StepStarted:
    node: str
    step: int | None
    namespace: Namespace = ()


@dataclass(frozen=True, slots=True)
class StepFinished:
    node: str
    step: int | None
    namespace: Namespace = ()


@dataclass(frozen=True, slots=True)
class TextStarted:
    message_id: str
    node: str | None
    namespace: Namespace = ()


@dataclass(frozen=True, slots=True)
class TextDelta:
    message_id: str
    text: str
    namespace: Namespace = ()


@dataclass(frozen=True, slots=True)
class TextEnded:
    message_id: str
    namespace: Namespace = ()


@dataclass(frozen=True, slots=True)
class ReasoningStarted:
    message_id: str
    node: str | None
    namespace: Namespace = ()


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    message_id: str
    text: str
    namespace: Namespace = ()


@dataclass(frozen=True, slots=True)
class ReasoningEnded:
    message_id: str
    namespace: Namespace = ()


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    id: str
    name: str
    node: str | None
    namespace: Namespace = ()


@dataclass(frozen=True, slots=True)
class ToolCallArgs:
    id: str
    delta: str
    namespace: Namespace = ()


@dataclass(frozen=True, slots=True)
class ToolCallEnded:
    id: str
    namespace: Namespace = ()


@dataclass(frozen=True, slots=True)
class ToolCallResult:
    id: str
    name: str
    content: str
    is_error: bool
    namespace: Namespace = ()


@dataclass(frozen=True, slots=True)
class StateUpdated:
    """The merged state after a superstep (raw values; :meth:`to_json` for the wire)."""

    values: Mapping[str, Any]
    step: int | None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = jsonable(dict(self.values))
        return data


@dataclass(frozen=True, slots=True)
class Custom:
    """An event of the graph's own: ``ctx.emit(name, value)`` in a node, tool or middleware
    (progress, a partial result, ...), as JSON data (:func:`jsonable`)."""

    name: str
    value: Any
    node: str | None
    namespace: Namespace = ()


@dataclass(frozen=True, slots=True)
class RunSuspended:
    """The run stopped to wait; answer ``interrupts`` (by id) to resume the thread."""

    interrupts: tuple[PendingInterrupt, ...]
    thread_id: str | None
    values: Mapping[str, Any] = field(default_factory=dict)

    @property
    def approvals(self) -> tuple[PendingInterrupt, ...]:
        """The tool calls waiting for a yes/no (``value`` has ``tool``, ``args``, ``call_id``)."""
        return tuple(p for p in self.interrupts if p.kind == "approval")


@dataclass(frozen=True, slots=True)
class RunFinished:
    """The run completed: ``reply`` is ``to_reply(state)``; ``usage`` the run's tokens."""

    reply: str
    usage: Usage | None
    state: Any
    thread_id: str | None


@dataclass(frozen=True, slots=True)
class RunFailed:
    """The run raised ``error``; ``status`` is the HTTP status it maps to (see
    :func:`error_status`) and ``message`` a sentence safe to show a client."""

    error: BaseException
    status: int
    message: str


ServeEvent = (
    RunStarted
    | StepStarted
    | StepFinished
    | TextStarted
    | TextDelta
    | TextEnded
    | ReasoningStarted
    | ReasoningDelta
    | ReasoningEnded
    | ToolCallStarted
    | ToolCallArgs
    | ToolCallEnded
    | ToolCallResult
    | StateUpdated
    | Custom
    | RunSuspended
    | RunFinished
    | RunFailed
)


def error_status(exc: BaseException) -> int:
    """The HTTP status a run failure maps to.

    400: the request's input or decisions did not fit the graph (validation errors,
    ``ValueError``/``TypeError`` raised before any node ran are reported by the caller).
    409: the thread is busy with another run. 429: the model provider rate-limited us.
    502: the model provider failed. 500: anything else — a real fault, logged.
    """
    if isinstance(exc, ThreadBusyError):
        return 409
    if isinstance(exc, RateLimitError):
        return 429
    if isinstance(exc, ProviderError):
        return 502
    if isinstance(exc, ValidationError | PydanticValidationError):
        return 400
    return 500


def _message(exc: BaseException, status: int) -> str:
    if status == 500 and not isinstance(exc, TensorSketchError):
        return f"the graph failed with {type(exc).__name__}; the server log has the details."
    return str(exc) or type(exc).__name__


class _Translator:
    """Engine events in, :data:`ServeEvent` out (the state a stream needs between events)."""

    def __init__(self, thread_id: str | None) -> None:
        self.thread_id = thread_id
        self.text: TextStarted | None = None  # the text run in progress
        self.reasoning: ReasoningStarted | None = None  # the reasoning run in progress
        self.texts = 0  # top-level text runs so far
        self.started = False
        self.suspended: RunSuspended | None = None
        self.values: Mapping[str, Any] = {}
        #: The call each (node, namespace, index) of the model turn streaming now is.
        self.streaming: dict[tuple[str | None, tuple[str, ...], int], str] = {}
        self.open_calls: list[ToolCallEnded] = []  # streamed calls not yet ended
        self.streamed: set[str] = set()  # calls already announced from their fragments

    def end_calls(self) -> list[ServeEvent]:
        """End the streamed calls: their model turn is over once anything else happens."""
        if not self.open_calls:
            return []
        ended, self.open_calls = self.open_calls, []
        self.streaming.clear()
        return list(ended)

    def end_reasoning(self) -> list[ServeEvent]:
        run, self.reasoning = self.reasoning, None
        return [] if run is None else [ReasoningEnded(run.message_id, run.namespace)]

    def end_text(self) -> list[ServeEvent]:
        text, self.text = self.text, None
        return [] if text is None else [TextEnded(text.message_id, text.namespace)]

    def feed(self, event: Event) -> list[ServeEvent]:
        if event.type == "reasoning_delta":
            return [*self.end_text(), *self.end_calls(), *self._reasoning(event)]
        if event.type == "token":
            return [*self.end_reasoning(), *self.end_calls(), *self._token(event)]
        if event.type == "tool_call_delta":
            return [*self.end_reasoning(), *self._call_delta(event)]
        out = [*self.end_reasoning(), *self.end_text(), *self.end_calls()]
        data, ns = event.data, event.namespace
        if event.type == "tool":
            if data["phase"] == "start" and data["id"] in self.streamed:
                pass  # announced, argument by argument, while the model streamed it
            elif data["phase"] == "start":
                out += [
                    ToolCallStarted(data["id"], data["name"], event.node, ns),
                    ToolCallArgs(data["id"], _json_text(data["args"]), ns),
                    ToolCallEnded(data["id"], ns),
                ]
            else:
                result = (data["id"], data["name"], data["result"], bool(data["is_error"]), ns)
                out.append(ToolCallResult(*result))
        elif event.type in ("node_start", "node_end") and event.node is not None:
            step = StepStarted if event.type == "node_start" else StepFinished
            out.append(step(event.node, event.step, ns))
        elif event.type not in BUILTIN_EVENT_TYPES or event.type == "effect_in_doubt":
            # ctx.emit (a nested run's too), and an effect found in doubt: no protocol has
            # an event of its own for it, and a client deciding about it needs to see it
            out.append(Custom(event.type, jsonable(data), event.node, ns))
        elif ns:
            pass  # a nested run's own run-level events: its parent's stand for it
        elif event.type == "values":
            self.values = data
            out.append(StateUpdated(data, event.step))
        elif event.type == "run_start":
            self.started = True
            out.append(RunStarted(event.run_id, event.thread_id))
        elif event.type == "interrupt":  # reported once the stream ends: the checkpoint
            # that makes the thread resumable is written after this event
            pending = tuple(PendingInterrupt.from_dict(p) for p in data["interrupts"])
            self.suspended = RunSuspended(pending, self.thread_id, self.values)
        elif event.type == "run_end":
            self.values = data
        return out

    def _reasoning(self, event: Event) -> list[ServeEvent]:
        key = (event.node, event.namespace)
        out: list[ServeEvent] = []
        if self.reasoning is not None and (self.reasoning.node, self.reasoning.namespace) != key:
            out += self.end_reasoning()
        if self.reasoning is None:
            self.reasoning = ReasoningStarted(f"rsn_{event.run_id}_{event.seq}", *key)
            out.append(self.reasoning)
        out.append(ReasoningDelta(self.reasoning.message_id, event.data["text"], event.namespace))
        return out

    def _token(self, event: Event) -> list[ServeEvent]:
        key = (event.node, event.namespace)
        out: list[ServeEvent] = []
        if self.text is not None and (self.text.node, self.text.namespace) != key:
            out += self.end_text()
        if self.text is None:
            self.text = TextStarted(f"msg_{event.run_id}_{event.seq}", *key)
            self.texts += not event.namespace
            out.append(self.text)
        out.append(TextDelta(self.text.message_id, event.data["text"], event.namespace))
        return out

    def _call_delta(self, event: Event) -> list[ServeEvent]:
        """A fragment of a tool call as the model streams it: the call starts with its first
        fragment (which names it); a call whose provider gave no id is announced whole when
        it runs instead."""
        data, ns = event.data, event.namespace
        key = (event.node, ns, int(data["index"]))
        out = self.end_text()
        call_id = data.get("id")
        if call_id and self.streaming.get(key) != call_id:
            self.streaming[key] = call_id
            self.streamed.add(call_id)
            out.append(ToolCallStarted(call_id, str(data.get("name") or ""), event.node, ns))
            self.open_calls.append(ToolCallEnded(call_id, ns))
        known = self.streaming.get(key)
        if known is not None and data.get("arguments"):
            out.append(ToolCallArgs(known, data["arguments"], ns))
        return out

    def failed(self, exc: Exception, graph: str) -> list[ServeEvent]:
        ended = [*self.end_reasoning(), *self.end_text(), *self.end_calls()]
        return [*ended, _failed(exc, self.started, graph)]


def _failed(exc: Exception, started: bool, graph: str) -> RunFailed:
    status = error_status(exc)
    if not started and status == 500 and isinstance(exc, ValueError | TypeError):
        status = 400  # the input or the decisions did not apply: the request's fault
    if status >= 500:
        logger.error("serving graph %r failed", graph, exc_info=exc)
    return RunFailed(exc, status, _message(exc, status))


def _ran(exc: BaseException) -> bool:
    """Whether a node (or a routing function) raised ``exc``: the engine notes where."""
    notes = getattr(exc, "__notes__", ())
    return any(n.startswith(("raised by node ", "while routing out of ")) for n in notes)


async def run_once(
    graph: CompiledGraph[Any],
    adapter: ChatAdapter,
    *,
    input: Any = None,
    resume: Mapping[str, Any] | None = None,
    thread_id: str | None = None,
    backend: Backend | None = None,
    max_steps: int = 25,
    deps: Any = None,
) -> RunFinished | RunSuspended | RunFailed:
    """Run ``graph`` to its end without streaming and return the event that would end
    :func:`run_events`' stream: the cheaper path for a protocol's non-streaming answer (no
    token events are produced at all)."""
    try:
        state = await graph.invoke(
            input,
            thread_id=thread_id,
            backend=backend,
            resume=resume,
            max_steps=max_steps,
            deps=deps,
        )
    except Exception as exc:
        return _failed(exc, _ran(exc), graph.name)
    info = run_info(state)
    if info.suspended:
        return RunSuspended(info.interrupts, thread_id, dict(state))
    try:
        reply = adapter.reply_for(state)
    except Exception as exc:
        logger.error("to_reply failed for graph %r", graph.name, exc_info=exc)
        return RunFailed(exc, 500, _message(exc, 500))
    return RunFinished(reply, usage_of(state), state, thread_id)


async def run_events(
    graph: CompiledGraph[Any],
    adapter: ChatAdapter,
    *,
    input: Any = None,
    resume: Mapping[str, Any] | None = None,
    thread_id: str | None = None,
    backend: Backend | None = None,
    max_steps: int = 25,
    deps: Any = None,
) -> AsyncIterator[ServeEvent]:
    """Run ``graph`` and yield its :data:`ServeEvent` stream (see the module docstring).

    ``input`` is what ``adapter.input_for(messages)`` returned (``None`` to continue a
    thread); ``resume`` the decisions for a suspended thread, keyed by interrupt id; ``deps``
    what the run's nodes and tools read as ``ctx.deps``.
    Failures never raise out of the iterator: they end it with a :class:`RunFailed`.
    """
    translate = _Translator(thread_id)
    # ``stream`` is an async generator; closing it cancels the run at once.
    run = graph.stream(
        input,
        thread_id=thread_id,
        backend=backend,
        resume=resume,
        max_steps=max_steps,
        deps=deps,
    )
    stream = cast("AsyncGenerator[Event, None]", run)
    try:
        async with aclosing(stream) as events:
            async for event in events:
                for item in translate.feed(event):
                    yield item
    except Exception as exc:
        for item in translate.failed(exc, graph.name):
            yield item
        return
    for item in [*translate.end_text(), *translate.end_calls()]:
        yield item
    if translate.suspended is not None:
        yield translate.suspended
        return
    try:
        state = graph.state_schema.model_validate(dict(translate.values))
        reply = adapter.reply_for(state)
    except Exception as exc:
        logger.error("to_reply failed for graph %r", graph.name, exc_info=exc)
        yield RunFailed(exc, 500, _message(exc, 500))
        return
    if not translate.texts and reply:
        message_id = f"msg_{thread_id or 'run'}_reply"
        yield TextStarted(message_id, None)
        yield TextDelta(message_id, reply)
        yield TextEnded(message_id)
    yield RunFinished(reply, usage_of(state), state, thread_id)


def _json_text(value: Any) -> str:
    return json.dumps(jsonable(value), ensure_ascii=False, separators=(",", ":"))


async def with_first(
    first: ServeEvent, rest: AsyncIterator[ServeEvent]
) -> AsyncIterator[ServeEvent]:
    """``first`` (an event already taken, to choose the response's status), then ``rest``;
    closing this closes ``rest`` too, so the run is cancelled at once."""
    try:
        yield first
        async for event in rest:
            yield event
    finally:
        close = getattr(rest, "aclose", None)
        if close is not None:
            await close()
