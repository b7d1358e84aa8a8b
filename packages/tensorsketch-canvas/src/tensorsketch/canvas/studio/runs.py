"""Running the opened graph from the canvas: the run panel's form and chat start a run, the
page answers its approvals and questions, and reads an agent thread's messages.

A run is one ``invoke`` of the file's compiled graph on a thread: on the ``--backend`` the
Studio was started with (durable: the debugger lists the thread like any other), else on an
in-memory backend of this launch. Its spans go straight into the Studio's trace tail, so the
live overlay shows the run as it goes. What the page sends is data only: input values are
validated as the state's fields, answers are JSON values handed to ``resume=`` — nothing the
page types is evaluated. The endpoints sit behind the same guards as the edit endpoints
(localhost, the page's origin, the launch token).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic

from tensorsketch.canvas._pyparse import parse_python
from tensorsketch.canvas.studio.app import ApiError, Studio
from tensorsketch.canvas.studio.debug import Debugger, _interrupt_view, preview
from tensorsketch.canvas.studio.debug_source import GraphSource
from tensorsketch.canvas.studio.sse import EventHub
from tensorsketch.canvas.studio.state_values import checked_values
from tensorsketch.canvas.studio.trace import parse_spans
from tensorsketch.interrupts import run_info
from tensorsketch.observability.export import span_json
from tensorsketch.observability.tracing import RecordingTracer, Span, new_trace_id
from tensorsketch.pregel.compiled import MAX_THREAD_ID, CompiledGraph
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.memory import InMemoryBackend

__all__ = ["MAX_MESSAGE", "Runs"]

_log = logging.getLogger("tensorsketch.canvas.studio")

#: The longest chat message accepted (characters).
MAX_MESSAGE = 100_000
#: The most messages a thread's messages view returns (the newest).
MAX_MESSAGES = 500
#: Supersteps a run may take unless the page asks for another limit.
DEFAULT_STEPS = 25
_RUN_KEYS = frozenset({"input", "message", "thread_id", "max_steps"})
_RESUME_KEYS = frozenset({"action", "value", "interrupt_id"})


class _Sink(RecordingTracer):
    """Hands each finished span of one run to the trace tail and tells the page."""

    def __init__(self, runs: Runs, trace_id: str) -> None:
        super().__init__()
        self.trace_id = trace_id
        self._runs = runs
        self._loop = asyncio.get_running_loop()

    def _record(self, span: Span) -> None:
        try:
            spans = parse_spans({"spans": [json.loads(span_json(span))]})
        except ValueError:  # a span the tail cannot hold is not worth failing the run for
            return
        runs = self._runs.studio.trace.add(spans)  # the tail takes a lock of its own
        if not runs:
            return
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        # the event hub's queues belong to the server's loop: a span closed on a worker
        # thread (a node's executor) hands its event over to it
        if on_loop:
            self._announce(runs)
        else:
            self._loop.call_soon_threadsafe(self._announce, runs)

    def _announce(self, runs: list[str]) -> None:
        for run in runs:
            self._runs.hub.publish("trace", {"run": run})


@dataclass
class _Thread:
    """What the panel knows of a thread it ran: its status and the latest run's trace id."""

    thread_id: str
    status: str = "running"
    run: str | None = None
    error: str | None = None
    waiting: list[dict[str, Any]] = field(default_factory=list)


class Runs:
    """The runs one Studio launch starts, on the debugger's backend or in memory."""

    def __init__(self, studio: Studio, hub: EventHub, debugger: Debugger | None) -> None:
        self.studio = studio
        self.hub = hub
        self.durable = debugger is not None
        self.backend: Backend = debugger.backend if debugger is not None else InMemoryBackend()
        self.label = debugger.label if debugger is not None else "in memory"
        self.source = (
            debugger.source if debugger is not None else GraphSource(studio.path, studio.graph)
        )
        self.threads: dict[str, _Thread] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # -- the graph -----------------------------------------------------------------------------

    async def _graph(self) -> CompiledGraph[Any]:
        """The file's compiled graph; 409 while the file does not parse or import."""
        text = await asyncio.to_thread(self.studio.path.read_text, encoding="utf-8-sig")
        try:
            parse_python(text)
        except (SyntaxError, ValueError) as exc:
            raise ApiError(
                409,
                f"the file does not parse ({exc}); the canvas is read-only and nothing runs "
                "until it parses again.",
            ) from None
        loaded = await asyncio.to_thread(self.source.get)
        if loaded.graph is None:
            raise ApiError(
                409,
                f"the graph of {self.studio.path.name} could not be loaded, so it cannot run: "
                f"{loaded.error}",
                graph_error=loaded.error,
            )
        return loaded.graph

    async def form(self) -> dict[str, Any]:
        """``GET /api/run``: what the run panel builds its form (or chat) from."""
        graph = await self._graph()
        schema = graph.state_schema
        try:
            json_schema = schema.model_json_schema()
        except Exception:  # a field type pydantic cannot describe: every field as JSON text
            json_schema = {"properties": {name: {} for name in schema.model_fields}}
        fields = []
        props = json_schema.get("properties", {})
        for name, info in schema.model_fields.items():
            fields.append(
                {
                    "name": name,
                    "schema": props.get(name, {}),
                    "required": info.is_required(),
                    "description": info.description,
                }
            )
        return {
            "graph": graph.name,
            "state": schema.__name__,
            "agent": "messages" in schema.model_fields,
            "chat_field": "query" if _is_str(schema, "query") else "messages",
            "durable": self.durable,
            "backend": self.label,
            "fields": fields,
            "defs": json_schema.get("$defs", {}),
            "threads": [self._view(t) for t in reversed(self.threads.values())],
        }

    # -- starting and resuming -----------------------------------------------------------------

    async def start(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /api/run``: validate the input, start the run, answer at once (202)."""
        unknown = sorted(set(body) - _RUN_KEYS)
        if unknown:
            raise ApiError(
                400,
                f"unknown key(s) {unknown}; a run takes 'input' (state fields) or 'message' "
                "(a chat turn), and optionally 'thread_id' and 'max_steps'.",
            )
        if ("input" in body) == ("message" in body):
            raise ApiError(400, "send either 'input' (an object of state fields) or 'message'.")
        max_steps = body.get("max_steps", DEFAULT_STEPS)
        if type(max_steps) is not int or not 1 <= max_steps <= 10_000:
            raise ApiError(400, "'max_steps' must be an int from 1 to 10000.")
        thread_id = body.get("thread_id")
        if thread_id is None:
            thread_id = f"studio-{uuid.uuid4().hex[:10]}"
        thread_id = _check_id(thread_id, "thread_id")
        graph = await self._graph()
        fresh = await self.backend.latest_checkpoint(thread_id) is None
        if "message" in body:
            values = self._chat_input(graph, body["message"], fresh=fresh)
        else:
            values = checked_values(
                graph, body["input"], body_key="input", name_key="field", require=fresh
            )
        self._claim(thread_id)
        return self._launch(graph, thread_id, values, None, max_steps)

    async def resume(self, thread_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /api/run/threads/{id}/resume``: approve, reject or answer what the thread
        waits on, and run on (202)."""
        unknown = sorted(set(body) - _RESUME_KEYS)
        if unknown:
            raise ApiError(400, f"unknown key(s) {unknown}; resume takes {sorted(_RESUME_KEYS)}.")
        action = body.get("action")
        if action not in ("approve", "reject", "answer"):
            raise ApiError(400, "'action' must be 'approve', 'reject' or 'answer'.")
        thread_id = _check_id(thread_id, "thread id")
        graph = await self._graph()
        state = await graph.aget_state(thread_id, self.backend)
        if state is None:
            raise ApiError(404, f"no thread {thread_id!r} in the {self.label} backend.")
        pending = [p.to_dict() for p in run_info(state).interrupts]
        if not pending:
            raise ApiError(409, f"thread {thread_id!r} is not waiting for anything.")
        wanted = body.get("interrupt_id")
        if wanted is not None and not isinstance(wanted, str):
            raise ApiError(400, "'interrupt_id' must be a string (an id the thread waits on).")
        target = next((p for p in pending if wanted is None or p.get("id") == wanted), None)
        if target is None:
            ids = [p.get("id") for p in pending]
            raise ApiError(404, f"thread {thread_id!r} waits on {ids}, not {wanted!r}.")
        kind = target.get("kind")
        decision: Any
        if action in ("approve", "reject"):
            if kind != "approval":
                raise ApiError(
                    400, f"{target.get('id')!r} is a {kind}, not an approval; answer it instead."
                )
            decision = action == "approve"
            reason = body.get("value")
            if not decision and isinstance(reason, str) and reason.strip():
                decision = {"approved": False, "reason": reason}
        else:
            if kind != "interrupt":
                raise ApiError(
                    400, f"{target.get('id')!r} is a {kind}: approve or reject it instead."
                )
            if "value" not in body:
                raise ApiError(400, "an answer needs 'value' (the answer, as JSON data).")
            decision = body["value"]
        self._claim(thread_id)
        return self._launch(graph, thread_id, None, {str(target.get("id")): decision}, 25)

    def _claim(self, thread_id: str) -> None:
        known = self.threads.get(thread_id)
        if known is not None and known.status == "running":
            raise ApiError(409, f"thread {thread_id!r} is running; wait for it to stop first.")

    def _chat_input(
        self, graph: CompiledGraph[Any], message: Any, *, fresh: bool
    ) -> dict[str, Any]:
        if "messages" not in graph.state_schema.model_fields:
            raise ApiError(
                400,
                f"{graph.state_schema.__name__} has no 'messages' field, so the graph takes no "
                "chat turn; send 'input' (its fields) instead.",
            )
        if not isinstance(message, str) or not message.strip():
            raise ApiError(400, "'message' must be a non-empty string.")
        if len(message) > MAX_MESSAGE:
            raise ApiError(400, f"'message' is over {MAX_MESSAGE} characters.")
        if _is_str(graph.state_schema, "query"):
            return checked_values(
                graph, {"query": message}, body_key="input", name_key="field", require=fresh
            )
        turn = {"messages": [{"role": "user", "content": message}]}
        return checked_values(graph, turn, body_key="input", name_key="field", require=fresh)

    def _launch(
        self,
        graph: CompiledGraph[Any],
        thread_id: str,
        values: dict[str, Any] | None,
        resume: dict[str, Any] | None,
        max_steps: int,
    ) -> dict[str, Any]:
        trace_id = new_trace_id()
        record = self.threads.pop(thread_id, None) or _Thread(thread_id)
        record.status, record.run, record.error, record.waiting = "running", trace_id, None, []
        self.threads[thread_id] = record  # newest last
        call = graph.invoke(
            values,
            thread_id=thread_id,
            backend=self.backend,
            max_steps=max_steps,
            resume=resume,
            tracer=_Sink(self, trace_id),
        )
        task = asyncio.get_running_loop().create_task(self._drive(record, call))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self.hub.publish("run", self._view(record))
        return self._view(record)

    async def _drive(self, record: _Thread, call: Any) -> None:
        try:
            state = await call
        except Exception as exc:  # the user's graph failed: the panel shows why
            record.status, record.error = "failed", f"{type(exc).__name__}: {exc}"
        else:
            info = run_info(state)
            record.status = info.status
            record.waiting = [_interrupt_view(p.to_dict()) for p in info.interrupts]
            if info.error:
                record.error = f"{info.error.get('node')}: {info.error.get('message')}"
        self.hub.publish("run", self._view(record))

    # -- reading -------------------------------------------------------------------------------

    @staticmethod
    def _view(record: _Thread) -> dict[str, Any]:
        return {
            "thread_id": record.thread_id,
            "status": record.status,
            "run": record.run,
            "error": record.error,
            "waiting": record.waiting,
        }

    async def thread(self, thread_id: str) -> dict[str, Any]:
        """``GET /api/run/threads/{id}``: the thread's status, what it waits on, and (for an
        agent graph) its messages."""
        thread_id = _check_id(thread_id, "thread id")
        graph = await self._graph()
        record = self.threads.get(thread_id)
        state = await graph.aget_state(thread_id, self.backend)
        if state is None and record is None:
            raise ApiError(404, f"no thread {thread_id!r} in the {self.label} backend.")
        view = self._view(record) if record is not None else self._view(_Thread(thread_id))
        if state is not None and (record is None or record.status != "running"):
            info = run_info(state)
            view["status"] = info.status
            view["waiting"] = [_interrupt_view(p.to_dict()) for p in info.interrupts]
        messages = getattr(state, "messages", None) if state is not None else None
        view["messages"] = (
            [_message_view(m) for m in messages[-MAX_MESSAGES:]]
            if isinstance(messages, list)
            else None
        )
        stopped = state is not None and view["status"] != "running"
        view["state"] = _state_view(state) if stopped else None
        return view


def _state_view(state: Any) -> list[dict[str, Any]]:
    """Where the thread stands, field by field (what a form-started run answered): each
    state field's name and a bounded JSON preview of its value."""
    fields = getattr(type(state), "model_fields", None) or {}
    view = []
    for name in fields:
        value, truncated = preview(getattr(state, name, None))
        view.append({"name": name, "value": value, "truncated": truncated})
    return view


def _is_str(schema: type[pydantic.BaseModel], name: str) -> bool:
    info = schema.model_fields.get(name)
    return info is not None and info.annotation is str


def _check_id(value: object, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_THREAD_ID or "\x00" in value:
        raise ApiError(400, f"{what} must be a non-empty string of at most {MAX_THREAD_ID} chars.")
    return value


def _message_view(message: Any) -> dict[str, Any]:
    """One message as the messages view shows it: role, text, tool calls, tool results."""
    content = getattr(message, "content", "")
    if isinstance(content, str):
        text = content
    else:
        parts = []
        for block in content or ():
            kind = getattr(block, "type", "")
            parts.append(getattr(block, "text", "") if kind == "text" else f"[{kind}]")
        text = "\n".join(parts)
    calls = [
        {"id": c.id, "name": c.name, "args": preview(c.args)[0]}
        for c in getattr(message, "tool_calls", None) or ()
    ]
    return {
        "role": str(getattr(message, "role", "?")),
        "text": text,
        "name": getattr(message, "name", None),
        "tool_calls": calls,
        "tool_call_id": getattr(message, "tool_call_id", None),
        "is_error": bool(getattr(message, "is_error", False)),
    }
