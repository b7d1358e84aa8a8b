"""``openai_app(graph, model=...)``: a graph behind the OpenAI Chat Completions API.

``POST /v1/chat/completions`` (streaming and not), ``GET /v1/models`` and ``POST /v1/responses``
(the Responses API, :mod:`._openai_responses`). The whole history in the request goes to the
graph; the answer is ``to_reply(final state)``, streamed as the provider's real token deltas.

Conversations are durable threads on ``backend``: the ``X-Conversation-Id`` header (or
``metadata.conversation_id``) names the thread. Without one a request is one-shot (the client
holds the history), unless the graph may stop to wait (approval tools, nodes of the user's
own): then it runs on a new thread, whose id the response's ``X-Conversation-Id`` header
carries. ``user`` is not used as a conversation id: it names a person, who has many.

Approvals go through the protocol as tool calls. A run that suspends on tools needing approval
answers with those calls (``finish_reason: "tool_calls"``); the client continues the same
conversation with one ``tool`` message per call whose content is the decision (``approve``,
``reject``, ``reject: <reason>``, or ``{"approved": bool, "reason": str}``). A node that asks
a question (``interrupt()``) answers with the question as text, and the next user message on
the conversation is the answer. Tools the agent runs itself are not shown as ``tool_calls``:
the client must not run them. ``response_format`` (and the Responses API's ``text.format``)
is honoured through the answering agent's structured-output path (:mod:`._openai_format`).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, cast

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tensorsketch.interrupts import PendingInterrupt
from tensorsketch.messages import Message
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.serve._adapter import ChatAdapter, ToInput, ToReply, new_turn
from tensorsketch.serve._http import (
    DEFAULT_MAX_BODY_BYTES,
    Authenticate,
    EventStream,
    Guard,
    ServeError,
    dumps,
    json_error,
    read_json,
)
from tensorsketch.serve._openai_format import ResponseFormat, formatted_graph, formatted_reply
from tensorsketch.serve._openai_responses import responses_endpoint
from tensorsketch.serve._openai_wire import (
    CONVERSATION_HEADER,
    ChatRequest,
    TurnJoiner,
    chat_usage,
    decision,
    failure,
    parse_chat_request,
    question,
    tool_calls,
)
from tensorsketch.serve._protocols import Protocol
from tensorsketch.serve._threads import approval_tools, may_suspend, thread_info
from tensorsketch.serve.events import (
    RunFailed,
    RunFinished,
    RunSuspended,
    ServeEvent,
    TextDelta,
    ToolCallArgs,
    ToolCallStarted,
    run_events,
    run_once,
    with_first,
)

if TYPE_CHECKING:
    from tensorsketch.pregel.compiled import CompiledGraph
    from tensorsketch.runtime.backends.base import Backend

__all__ = ["CONVERSATION_HEADER", "PROTOCOL", "openai_app"]

_FINISH = {"max_iterations": "length", "budget_exceeded": "length"}


def _what(pending: PendingInterrupt) -> str:
    value = pending.value
    return str(value.get("tool", pending.kind)) if isinstance(value, Mapping) else pending.kind


class _Chat:
    """The endpoints of one app: the graph, its adapter and its backend."""

    def __init__(
        self,
        graph: CompiledGraph[Any],
        model: str,
        adapter: ChatAdapter,
        backend: Backend,
        *,
        any_model: bool = False,
        deps: Any = None,
    ) -> None:
        self.graph = graph
        #: What every run's nodes and tools read as ``ctx.deps``.
        self.deps = deps
        self.model = model
        #: No ``model=`` was given: any name a client sends is this graph (clients and SDKs
        #: always send one, and the app's owner never chose it), and the reply repeats it.
        self.any_model = any_model
        self.adapter = adapter
        self.backend = backend
        self.created = int(time.time())
        #: Whether a request without a conversation id still runs on a (new) durable thread:
        #: only when the graph may stop to wait, since a thread costs a checkpoint per step.
        self.threads = may_suspend(graph)
        #: The tools whose calls the client decides on: streamed as ``tool_calls`` deltas.
        self.approvals = approval_tools(graph)

    def run(
        self,
        thread: str | None,
        plan: dict[str, Any],
        graph: CompiledGraph[Any] | None = None,
    ) -> AsyncIterator[ServeEvent]:
        """The request's run as neutral events (durable on ``backend`` when on a thread);
        ``graph`` is the request's variant of the app's graph, if it has one."""
        graph = graph or self.graph
        if thread is not None:
            return run_events(
                graph,
                self.adapter,
                thread_id=thread,
                backend=self.backend,
                deps=self.deps,
                **plan,
            )
        return _one_shot(run_events(graph, self.adapter, deps=self.deps, **plan))

    async def finish(
        self,
        thread: str | None,
        plan: dict[str, Any],
        graph: CompiledGraph[Any] | None = None,
    ) -> ServeEvent:
        """The request's run to its end, unstreamed: its last event."""
        backend = self.backend if thread is not None else None
        graph = graph or self.graph
        last = await run_once(
            graph, self.adapter, thread_id=thread, backend=backend, deps=self.deps, **plan
        )
        if thread is None and isinstance(last, RunSuspended):
            return _unresumable(last)
        return last

    # -- models ------------------------------------------------------------------------------

    def model_card(self, model: str | None = None) -> dict[str, Any]:
        return {
            "id": model or self.model,
            "object": "model",
            "created": self.created,
            "owned_by": "tensorsketch",
        }

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [self.model_card()]})

    async def model_info(self, request: Request) -> Response:
        model = self.check_model(request.path_params["model"])
        return JSONResponse(self.model_card(model))

    def check_model(self, model: str) -> str:
        """The model id to answer with: the client's own, or a 404 when the app was given a
        ``model=`` and this is another one."""
        if model != self.model and not self.any_model:
            msg = (
                f"the model {model!r} does not exist; this server serves {self.model!r} "
                f"(send model={self.model!r})."
            )
            raise ServeError(404, msg, param="model", code="model_not_found")
        return model

    # -- a run -------------------------------------------------------------------------------

    async def plan(
        self, messages: list[Message], conversation: str | None
    ) -> tuple[str | None, dict[str, Any]]:
        """The thread (``None``: a one-shot run) and the ``run_events`` arguments (the input,
        or the decisions for a suspended thread) for a request."""
        if conversation is None:
            fresh = {"input": self.adapter.input_for(messages)}
            if not self.threads:  # the client holds the history: nothing to keep
                return None, fresh
            return f"conv_{uuid.uuid4().hex}", fresh
        thread = conversation
        found = await thread_info(self.graph, thread, self.backend)
        if found is None:
            return thread, {"input": self.adapter.input_for(messages)}
        turn = new_turn(messages)
        info = found[1]
        if not info.suspended or not info.awaiting:
            return thread, {"input": self.adapter.input_for(turn)}
        waiting = {p.id: p for p in info.interrupts if p.kind != "timer"}
        answers = {m.tool_call_id: m for m in turn if m.role == "tool"}
        resume = {i: decision(waiting[i], m) for i, m in answers.items() if i in waiting}
        if not resume and all(p.kind == "interrupt" for p in waiting.values()) and turn:
            last = turn[-1]
            if last.role == "user":  # the answer to the question the run asked
                resume = dict.fromkeys(waiting, last.text)
        if not resume:
            listed = ", ".join(f"{p.id!r} ({_what(p)})" for p in waiting.values())
            msg = (
                f"conversation {thread!r} is waiting for a decision on {listed}; continue it "
                "with a `tool` message per call (content 'approve' or 'reject: <reason>')."
            )
            raise ServeError(409, msg, param="messages", code="decision_required")
        return thread, {"resume": resume}

    async def completions(self, request: Request) -> Response:
        chat = parse_chat_request(
            await read_json(request), conversation_header=request.headers.get(CONVERSATION_HEADER)
        )
        model = self.check_model(chat.model)
        fmt = chat.response_format
        graph = None
        if fmt is not None:
            graph = formatted_graph(self.graph, self.adapter, fmt, "response_format")
        thread, plan = await self.plan(chat.messages, chat.conversation_id)
        headers = {CONVERSATION_HEADER: thread} if thread else {}
        head = _Head(f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), model)
        if not chat.stream:
            last = await self.finish(thread, plan, graph)
            if isinstance(last, RunFailed):
                raise failure(last)
            return JSONResponse(_completion(head, _answer(last, fmt)), headers=headers)
        events = self.run(thread, plan, graph)
        first = await anext(events)  # a run that fails at once gets its own status code
        if isinstance(first, RunFailed):
            raise failure(first)
        stream = _chunks(head, first, events, chat, self.approvals)
        return EventStream(stream, headers=headers)


def _answer(last: ServeEvent, fmt: ResponseFormat | None) -> ServeEvent:
    """The run's last event, its reply as the validated JSON when a format was asked for."""
    if fmt is None or not isinstance(last, RunFinished):
        return last
    return dataclasses.replace(last, reply=formatted_reply(last.reply, fmt))


def _unresumable(suspended: RunSuspended) -> RunFailed:
    """A run without a thread that stopped to wait cannot be continued: say so, and how."""
    ids = ", ".join(f"{p.id!r} ({_what(p)})" for p in suspended.interrupts)
    msg = (
        f"the run stopped to wait for {ids}, but this request names no conversation, so it "
        f"cannot be continued; send the `{CONVERSATION_HEADER}` header (or "
        "`metadata.conversation_id`) to run it on a durable thread."
    )
    error = ServeError(409, msg, param="metadata.conversation_id", code="conversation_required")
    return RunFailed(error, 409, msg)


async def _one_shot(events: AsyncIterator[ServeEvent]) -> AsyncIterator[ServeEvent]:
    async with aclosing(cast("AsyncGenerator[ServeEvent, None]", events)) as stream:
        async for event in stream:
            yield _unresumable(event) if isinstance(event, RunSuspended) else event


class _Head:
    """What every chunk of one completion repeats."""

    def __init__(self, id: str, created: int, model: str) -> None:
        self.id, self.created, self.model = id, created, model
        fields = {"id": id, "object": "chat.completion.chunk", "created": created, "model": model}
        self.prefix = dumps(fields)[:-1] + ","  # the fields every chunk starts with


def _finish_reason(last: ServeEvent) -> str:
    if isinstance(last, RunSuspended):
        return "tool_calls" if last.approvals else "stop"
    status = getattr(getattr(last, "state", None), "status", None)
    return _FINISH.get(str(status), "stop")


def _completion(head: _Head, last: ServeEvent) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    usage = None
    if isinstance(last, RunFinished):
        message["content"] = last.reply
        usage = last.usage
    elif isinstance(last, RunSuspended):
        calls = tool_calls(last)
        if calls:
            message["tool_calls"] = calls
        else:
            message["content"] = question(last)
    return {
        "id": head.id,
        "object": "chat.completion",
        "created": head.created,
        "model": head.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _finish_reason(last),
            }
        ],
        "usage": chat_usage(usage),
    }


async def _chunks(
    head: _Head,
    first: ServeEvent,
    events: AsyncIterator[ServeEvent],
    chat: ChatRequest,
    approvals: frozenset[str],
) -> AsyncIterator[bytes]:
    """The SSE body: a role chunk, one chunk per top-level token delta as it arrives (a blank
    line between model turns, see :class:`TurnJoiner`), the ``tool_calls`` deltas of calls
    that wait for the client's decision — each argument fragment as the model streams it, in
    order; calls the model did not stream are sent whole when the run stops — the finish
    chunk, the usage chunk when asked, ``[DONE]``."""
    usage_tail = ',"usage":null}' if chat.include_usage else "}"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return f'data: {head.prefix}"choices":[{dumps(choice)}]{usage_tail}\n\n'.encode()

    yield chunk({"role": "assistant", "content": ""})
    text = TurnJoiner()
    last = first
    fmt = chat.response_format
    streamed: dict[str, int] = {}  # call id -> its index among the tool_calls
    async for event in with_first(first, events):
        last = event
        nested: Any = getattr(event, "namespace", None)
        if fmt is not None or nested:  # a sub-run's event, or an attempt being repaired
            continue
        if isinstance(event, TextDelta) and (piece := text.delta(event)):
            yield chunk({"content": piece})
        elif isinstance(event, ToolCallStarted) and event.name in approvals:
            streamed[event.id] = len(streamed)
            opening = {"index": streamed[event.id], "id": event.id, "type": "function"}
            function = {"name": event.name, "arguments": ""}
            yield chunk({"tool_calls": [{**opening, "function": function}]})
        elif isinstance(event, ToolCallArgs) and event.id in streamed and event.delta:
            fragment = {"index": streamed[event.id], "function": {"arguments": event.delta}}
            yield chunk({"tool_calls": [fragment]})
    if isinstance(last, RunFailed):
        error = failure(last)
        yield f"data: {dumps(error.body())}\n\n".encode()
        return
    usage = None
    if isinstance(last, RunSuspended):
        calls = tool_calls(last)
        for index, call in enumerate(
            (c for c in calls if c["id"] not in streamed), start=len(streamed)
        ):
            opening = {
                **call,
                "index": index,
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            yield chunk({"tool_calls": [opening]})
            yield chunk(
                {
                    "tool_calls": [
                        {"index": index, "function": {"arguments": call["function"]["arguments"]}}
                    ]
                }
            )
        if not calls and (asked := text.then(question(last))):
            yield chunk({"content": asked})
    elif isinstance(last, RunFinished):
        usage = last.usage
        if fmt is not None and (answer := formatted_reply(last.reply, fmt)):
            yield chunk({"content": answer})
    yield chunk({}, _finish_reason(last))
    if chat.include_usage:
        body = f'{head.prefix}"choices":[],"usage":{dumps(chat_usage(usage))}}}'
        yield f"data: {body}\n\n".encode()
    yield b"data: [DONE]\n\n"


def _render(error: ServeError) -> Response:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers or None)


async def _on_serve_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServeError)
    return _render(exc)


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        msg = (
            f"there is no {request.url.path!r} here; this server has /v1/chat/completions, "
            "/v1/responses and /v1/models."
        )
        return json_error(404, msg, code="not_found")
    if exc.status_code == 405:
        msg = f"{request.method} is not allowed on {request.url.path!r}."
        return json_error(405, msg, code="method_not_allowed")
    return json_error(exc.status_code, str(exc.detail))


def openai_app(
    graph: CompiledGraph[Any],
    *,
    model: str | None = None,
    to_input: ToInput | None = None,
    to_reply: ToReply | None = None,
    backend: Backend | None = None,
    authenticate: Authenticate | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    deps: Any = None,
) -> Starlette:
    """The OpenAI-compatible API for ``graph``, as a Starlette app.

    :param model: the one model id clients may name (any other is a 404). Without it, any
        name a client sends is served, and ``/v1/models`` lists the graph's name.
    :param to_input: / :param to_reply: the :class:`ChatAdapter` for a graph that is not an
        agent graph.
    :param backend: where conversations live as durable threads (default: an in-memory
        backend private to this app, which keeps every conversation until the process exits;
        pass a SQLite/PostgreSQL backend to survive restarts).
    :param authenticate: ``request -> bool`` run before the body is read (``False``: 401).
    :param max_body_bytes: larger request bodies are refused with 413.
    :param deps: what every run's nodes and tools read as ``ctx.deps`` (a pool, a client).
    """
    adapter = ChatAdapter.for_graph(graph, to_input, to_reply, where="openai_app")
    name = model if model is not None else graph.name
    if not isinstance(name, str) or not name:
        msg = f"openai_app(model=...) must be a non-empty model id, got {model!r}."
        raise ValueError(msg)
    store = backend if backend is not None else InMemoryBackend()
    chat = _Chat(graph, name, adapter, store, any_model=model is None, deps=deps)
    routes = [
        Route("/v1/chat/completions", chat.completions, methods=["POST"]),
        Route("/v1/responses", responses_endpoint(chat), methods=["POST"]),
        Route("/v1/models", chat.models, methods=["GET"]),
        Route("/v1/models/{model:path}", chat.model_info, methods=["GET"]),
    ]
    return Starlette(
        routes=routes,
        middleware=[
            Guard.middleware(
                authenticate=authenticate, max_body_bytes=max_body_bytes, render=_render
            )
        ],
        exception_handlers={ServeError: _on_serve_error, HTTPException: _on_http_error},
    )


#: How ``serve()`` and ``tensorsketch serve --protocol openai`` find this app: at ``/``, since
#: clients expect the ``/v1/...`` paths at the base URL they are given.
PROTOCOL = Protocol(
    openai_app, path="/", endpoints=("/v1/chat/completions", "/v1/responses", "/v1/models")
)
