"""``agui_app(graph)``: a graph behind the AG-UI protocol, for CopilotKit-style frontends.

``POST /`` takes an AG-UI ``RunAgentInput`` and answers with the run as an SSE stream of
AG-UI events (see :mod:`tensorsketch.serve._agui_events` for the mapping). AG-UI's
``threadId`` is the graph's durable thread (in the app's ``backend``): the next request on
the thread continues its transcript, and a run that stopped for approval (``RUN_FINISHED``
with the ``interrupt`` outcome) is continued by a request whose ``resume`` answers it. The
client's own ``tools`` become tools of the graph's agents for the run; calling one suspends the
run until the client resumes it with the tool's result (:mod:`._agui_tools`).

A request that cannot run is answered before the stream starts, with a 4xx and
``{"error": {"message", "type", "param", "code"}}``; once the stream has started, a failure
is a ``RUN_ERROR`` event. A client that disconnects cancels its run; a durable thread keeps
its last checkpoint.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ag_ui import core as agui
from ag_ui.encoder import EventEncoder
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tensorsketch.interrupts import PendingInterrupt
from tensorsketch.messages import Message
from tensorsketch.pregel.compiled import MAX_THREAD_ID
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.serve._adapter import ChatAdapter, ToInput, ToReply
from tensorsketch.serve._agui_events import AguiRun
from tensorsketch.serve._agui_input import (
    new_messages,
    parse_input,
    resume_decisions,
    state_input,
)
from tensorsketch.serve._agui_messages import from_agui
from tensorsketch.serve._agui_tools import frontend_call, frontend_decision, frontend_tools
from tensorsketch.serve._http import (
    DEFAULT_MAX_BODY_BYTES,
    Authenticate,
    EventStream,
    Guard,
    ServeError,
    json_error,
    read_json,
)
from tensorsketch.serve._protocols import Protocol
from tensorsketch.serve._threads import thread_info
from tensorsketch.serve._variants import agents_of, with_agents
from tensorsketch.serve.events import RunFailed, RunSuspended, ServeEvent, run_events

if TYPE_CHECKING:
    from tensorsketch.pregel.compiled import CompiledGraph
    from tensorsketch.runtime.backends.base import Backend

__all__ = ["PROTOCOL", "agui_app"]


def agui_app(
    graph: CompiledGraph[Any],
    *,
    backend: Backend | None = None,
    to_input: ToInput | None = None,
    to_reply: ToReply | None = None,
    messages_key: str | None = "messages",
    authenticate: Authenticate | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_steps: int = 25,
    deps: Any = None,
) -> Starlette:
    """An ASGI app serving ``graph`` over AG-UI at ``POST /``.

    :param backend: where each ``threadId`` lives as a durable thread of the graph, so a
        conversation continues and an approval is answered later (``resume``). The default
        is an in-memory backend private to this app (threads last until the process exits);
        pass a SQLite/PostgreSQL backend to survive restarts or share threads between
        processes.
    :param to_input: / :param to_reply: map messages to the graph's input and its final
        state to the reply (:class:`ChatAdapter`); the default is the agent shape.
    :param messages_key: the state field holding the transcript (sent as messages and left
        out of the shared state); ``None`` if the graph has none.
    :param authenticate: ``authenticate(request) -> bool``, run before the body is read.
    :param max_body_bytes: larger request bodies are refused with 413.
    :param max_steps: the most supersteps one request may run.
    :param deps: what every run's nodes and tools read as ``ctx.deps`` (a pool, a client).
    """
    adapter = ChatAdapter.for_graph(graph, to_input, to_reply, where="agui_app")
    fields = dict(graph.state_schema.model_fields)
    if messages_key is not None and messages_key not in fields:
        msg = (
            f"agui_app(): graph {graph.name!r} has no {messages_key!r} field for the "
            f"transcript; pass `messages_key=` naming it, or `messages_key=None`."
        )
        raise TypeError(msg)
    encoder = EventEncoder()
    store = backend if backend is not None else InMemoryBackend()

    async def run(request: Request) -> Response:
        try:
            body = parse_input(await read_json(request))
            messages = _messages(body)
            graph_input, resume, pending = await _plan(
                graph, adapter, body, messages, store, fields, messages_key
            )
            run_graph = _with_frontend_tools(graph, body.tools or [], pending)
        except ServeError as error:
            return json_error(error.status, error.message, code=error.code, param=error.param)
        events = run_events(
            run_graph,
            adapter,
            input=graph_input,
            resume=resume,
            thread_id=body.thread_id,
            backend=store,
            max_steps=max_steps,
            deps=deps,
        )
        first = await anext(events)
        if isinstance(first, RunFailed):  # nothing ran: the request's input did not apply
            await _close(events)
            return json_error(first.status, first.message, code="run_refused")
        translator = AguiRun(
            body.thread_id,
            body.run_id,
            messages_key=messages_key,
            client_messages=messages,
            announced=_announced(pending, messages) if resume is not None else (),
        )

        async def chunks() -> AsyncIterator[bytes]:
            try:
                event: ServeEvent = first
                while True:
                    if isinstance(event, RunSuspended):
                        event = await _with_checkpoint(graph, body.thread_id, store, event)
                    for out in translator.feed(event):
                        yield encoder.encode(out).encode()
                    event = await anext(events)
            except StopAsyncIteration:
                return
            finally:
                await _close(events)

        return EventStream(chunks())

    async def method_not_allowed(request: Request, exc: Exception) -> Response:
        return json_error(
            405,
            f"{request.method} is not served here; POST an AG-UI RunAgentInput as JSON to "
            f"this URL and read the SSE stream it answers with.",
            headers={"Allow": "POST"},
        )

    app = Starlette(
        routes=[Route("/", run, methods=["POST"])],
        exception_handlers={405: method_not_allowed},
    )
    app.add_middleware(Guard, authenticate=authenticate, max_body_bytes=max_body_bytes)
    return app


async def _plan(
    graph: CompiledGraph[Any],
    adapter: ChatAdapter,
    body: agui.RunAgentInput,
    messages: list[Message],
    backend: Backend,
    fields: dict[str, Any],
    messages_key: str | None,
) -> tuple[Any, dict[str, Any] | None, tuple[PendingInterrupt, ...]]:
    """``(input, resume, what the thread waits on)`` for the run, or a :class:`ServeError`
    saying why it cannot run."""
    _check_thread_id(body.thread_id)
    found = await thread_info(graph, body.thread_id, backend)
    info = found[1] if found is not None else None
    pending = info.interrupts if info is not None else ()
    if body.resume:
        return None, resume_decisions(body.resume, pending), pending
    answered = _tool_results(pending, messages) if info is not None and info.awaiting else None
    if answered:
        return None, answered, pending
    if info is not None and info.awaiting:
        listed = ", ".join(repr(i) for i in info.awaiting)
        msg = (
            f"thread {body.thread_id!r} is waiting on {listed}; answer with `resume: "
            f"[{{interruptId, status, payload}}]` before starting a new run on it."
        )
        raise ServeError(409, msg, param="resume", code="thread_suspended")
    fresh = new_messages(messages, thread_exists=found is not None)
    state = state_input(body.state, fields, messages_key)
    if not fresh:
        if not state:
            msg = (
                "the request has no new message (none after the last assistant message) and no "
                "`state` to run on; send the user's next message."
            )
            raise ServeError(422, msg, param="messages")
        return state, None, pending
    try:
        graph_input = adapter.input_for(fresh)
    except Exception as exc:  # the adapter could not read these messages
        msg = f"to_input() could not turn the messages into the graph's input: {exc}"
        raise ServeError(422, msg, param="messages") from None
    if isinstance(graph_input, dict):
        return {**state, **graph_input}, None, pending
    return graph_input, None, pending


def _tool_results(
    pending: Sequence[PendingInterrupt], messages: Sequence[Message]
) -> dict[str, Any] | None:
    """A new run that answers every frontend tool call the thread waits on with a tool
    message (instead of ``resume``): the results, as the resume decisions; else ``None``."""
    waiting = [p for p in pending if p.kind != "timer"]
    results = {m.tool_call_id: m for m in messages if m.role == "tool" and m.tool_call_id}
    calls = {p.id: frontend_call(p) for p in waiting}
    ids = {p.id: str((calls[p.id] or {}).get("call_id") or p.id) for p in waiting}
    if not waiting or any(calls[i] is None or ids[i] not in results for i in calls):
        return None
    return {
        i: frontend_decision(
            "error" if results[ids[i]].is_error else "resolved", results[ids[i]].text
        )
        for i in calls
    }


def _with_frontend_tools(
    graph: CompiledGraph[Any], declared: Sequence[agui.Tool], pending: Sequence[PendingInterrupt]
) -> CompiledGraph[Any]:
    """The graph whose agents can call the client's tools (the graph itself when it declares
    none or has no agent to give them to)."""
    agents = agents_of(graph)
    if not agents:
        return graph
    try:
        tools = frontend_tools(declared, pending)
        return with_agents(graph, agents, extra_tools=tools) if tools else graph
    except ValueError as exc:
        raise ServeError(422, str(exc), param="tools") from None


def _announced(pending: Sequence[PendingInterrupt], messages: Sequence[Message]) -> set[str]:
    """The tool calls a resuming client knows: those the run waited on, those it holds."""
    known = {call.id for message in messages for call in message.tool_calls}
    for waiting in pending:
        value = waiting.value if isinstance(waiting.value, Mapping) else {}
        known.add(str(value.get("call_id") or waiting.id))
    return known


async def _close(events: AsyncIterator[ServeEvent]) -> None:
    """Close the run's event stream now (cancelling the run if it is still going)."""
    close = getattr(events, "aclose", None)
    if close is not None:
        await close()


def _messages(body: agui.RunAgentInput) -> list[Message]:
    try:
        return from_agui(body.messages)
    except ValueError as exc:
        raise ServeError(422, str(exc), param="messages") from None


def _check_thread_id(thread_id: str) -> None:
    if not thread_id or len(thread_id) > MAX_THREAD_ID or "\x00" in thread_id:
        msg = (
            f"`threadId` must be 1 to {MAX_THREAD_ID} characters without NUL, got "
            f"{thread_id!r:.80}; use a short id such as a UUID."
        )
        raise ServeError(422, msg, param="threadId")


async def _with_checkpoint(
    graph: CompiledGraph[Any], thread_id: str, backend: Backend, event: RunSuspended
) -> RunSuspended:
    """The suspension with the thread's saved state (its ``status``/``pending`` included)."""
    found = await thread_info(graph, thread_id, backend)
    if found is None:
        return event
    return dataclasses.replace(event, values=dict(found[0]))


#: How :func:`~tensorsketch.serve.serve` mounts it (``tensorsketch serve --protocol agui``).
PROTOCOL = Protocol(agui_app, path="/agui")
