"""``a2a_app(graph, card=AgentCard(...))``: a graph as an A2A agent, 1.0 and 0.3 at once.

Routes (relative to where the app is mounted):

- ``GET /.well-known/agent-card.json`` — the A2A 1.0 card (with 0.3's top-level fields too);
- ``GET /.well-known/agent.json`` — the 0.3 card, for older clients;
- ``POST /`` — JSON-RPC: ``SendMessage``, ``SendStreamingMessage``, ``GetTask``, ``ListTasks``,
  ``CancelTask``, ``SubscribeToTask`` and the push notification config methods (1.0), and
  ``message/send``, ``message/stream``, ``tasks/get``, ``tasks/cancel``,
  ``tasks/resubscribe``, ``tasks/pushNotificationConfig/*`` (0.3). Streams are SSE.

Both cards carry an ``ETag`` and ``Cache-Control`` and answer ``If-None-Match`` with 304.

Tasks are kept in ``backend`` (see :mod:`._store`); the default in-memory backend forgets
them when the process ends, so pass a durable one (``SqliteBackend("tasks.db")``, PostgreSQL,
Redis) to keep tasks across restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.serve._adapter import ChatAdapter, ToInput, ToReply, check_graph
from tensorsketch.serve._http import (
    DEFAULT_MAX_BODY_BYTES,
    Authenticate,
    EventStream,
    Guard,
    ServeError,
    sse,
)
from tensorsketch.serve._protocols import Protocol
from tensorsketch.serve.a2a import _errors as errors
from tensorsketch.serve.a2a._card import AgentCard
from tensorsketch.serve.a2a._parts import ToArtifacts
from tensorsketch.serve.a2a._push import PushNotifications, PushSender
from tensorsketch.serve.a2a._rpc import Dispatcher, error_response
from tensorsketch.serve.a2a._tasks import TaskService

__all__ = ["PROTOCOL", "a2a_app"]

_NAMESPACE = re.compile(r"[^A-Za-z0-9_.-]+")
_PUSH = PushNotifications()


def a2a_app(
    graph: CompiledGraph[Any],
    *,
    card: AgentCard | None = None,
    backend: Backend | None = None,
    to_input: ToInput | None = None,
    to_reply: ToReply | None = None,
    authenticate: Authenticate | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_steps: int = 25,
    namespace: str | None = None,
    card_max_age: int = 300,
    push: PushNotifications | None = _PUSH,
    to_artifacts: ToArtifacts | None = None,
    message_replies: bool = False,
    deps: Any = None,
) -> Starlette:
    """Serve ``graph`` as the A2A agent ``card`` describes.

    :param card: the agent's :class:`AgentCard` (name, description, skills, ...); by default
        one named after the graph (what ``tensorsketch serve --protocol a2a`` serves).
    :param backend: where tasks and their runs live (default: in memory, for one process).
    :param to_input: / :param to_reply: map messages to a non-agent graph's input and its
        final state to the reply text (see :class:`~tensorsketch.serve.ChatAdapter`).
    :param authenticate: ``request -> bool``, run before the body is read (401 when false).
    :param max_body_bytes: larger request bodies are refused with 413.
    :param namespace: the task store's key prefix in ``backend`` (default ``a2a/<name>``):
        two agents sharing a backend need different ones.
    :param card_max_age: how long clients may cache the card (``Cache-Control: max-age``,
        seconds); the card also carries an ``ETag`` and answers ``If-None-Match`` with 304.
    :param push: how push notifications are delivered (:class:`PushNotifications`: which
        non-public webhook hosts are allowed, retries); ``None`` offers none.
    :param to_artifacts: ``final state -> {name: value}``, a finished task's artifacts
        besides its ``answer`` (and an agent's structured ``output``): text, bytes (a file),
        an ``ImageBlock``, or anything JSON (a data part).
    :param message_replies: answer a blocking ``SendMessage`` that starts and completes a task
        with the agent's ``Message`` (naming the task) instead of the ``Task``.
    :param deps: what every task's run reads as ``ctx.deps`` (a pool, a client).
    """
    check_graph(graph, "a2a_app")  # before the default card reads its name
    if card is None:
        card = AgentCard(name=graph.name, description=f"The TensorSketch graph {graph.name!r}.")
    if not isinstance(card, AgentCard):
        msg = (
            f"a2a_app(card=...) needs an AgentCard, got {type(card).__name__}; pass "
            "`card=AgentCard(name='my-agent', description='What it does.')`."
        )
        raise TypeError(msg)
    adapter = ChatAdapter.for_graph(graph, to_input, to_reply, where="a2a_app")
    store_backend = backend if backend is not None else InMemoryBackend()
    if not isinstance(store_backend, Backend):
        msg = f"a2a_app(backend=...) must be a tensorsketch Backend, got {type(backend).__name__}."
        raise TypeError(msg)
    prefix = namespace or f"a2a/{_NAMESPACE.sub('-', card.name)[:64]}"
    if push is not None and not isinstance(push, PushNotifications):
        msg = (
            f"a2a_app(push=...) needs PushNotifications or None, got {type(push).__name__}; "
            "e.g. `push=PushNotifications(allowed_hosts=['127.0.0.1'])`."
        )
        raise TypeError(msg)
    sender = PushSender(push) if push is not None else None
    pushes = sender is not None
    service = TaskService(
        graph,
        store_backend,
        adapter,
        namespace=prefix,
        max_steps=max_steps,
        push=sender,
        to_artifacts=to_artifacts,
        message_replies=message_replies,
        deps=deps,
    )
    dispatcher = Dispatcher(service, streaming=card.streaming)

    def url_of(request: Request) -> str:
        return card.url or str(request.base_url)

    async def card_v1(request: Request) -> Response:
        document = card.to_compatible(url_of(request), push_notifications=pushes)
        return _cacheable(request, document, card_max_age)

    async def card_v03(request: Request) -> Response:
        document = card.to_v03(url_of(request), push_notifications=pushes)
        return _cacheable(request, document, card_max_age)

    async def rpc(request: Request) -> Response:
        try:
            body = await request.body()
        except ClientDisconnect:
            return Response(status_code=400)
        answer = await dispatcher.dispatch(body, request.headers.get("a2a-version"))
        if isinstance(answer, dict):
            return JSONResponse(answer)
        return EventStream(_frames(answer))

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        sweeper = None
        if sender is not None:  # owed notifications a server died before sending go out
            sweeper = asyncio.get_running_loop().create_task(
                service.sweeping(sender.options.sweep_every)
            )
        yield
        if sweeper is not None:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
        service.close()
        if sender is not None:  # queued notifications get a moment to go out
            await sender.aclose()

    app = Starlette(
        lifespan=lifespan,
        routes=[
            Route("/.well-known/agent-card.json", card_v1, methods=["GET"]),
            Route("/.well-known/agent.json", card_v03, methods=["GET"]),
            Route("/", rpc, methods=["POST"]),
        ],
        middleware=[
            Guard.middleware(
                authenticate=authenticate, max_body_bytes=max_body_bytes, render=_render
            )
        ],
    )
    app.state.a2a = service
    return app


def _cacheable(request: Request, document: dict[str, Any], max_age: int) -> Response:
    """The card with a strong ``ETag`` (a hash of its bytes) and ``Cache-Control``, or a 304
    when the client's ``If-None-Match`` already names it: clients poll cards, and a card only
    changes when the app is redeployed."""
    body = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
    etag = f'"{hashlib.sha256(body).hexdigest()[:32]}"'
    headers = {"ETag": etag, "Cache-Control": f"public, max-age={max_age}"}
    asked = request.headers.get("if-none-match", "")
    if etag in (tag.strip().removeprefix("W/") for tag in asked.split(",")) or asked == "*":
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


async def _frames(items: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """SSE frames of JSON-RPC responses; an error one is also named ``event: error``."""
    async for item in items:
        yield sse(item, event="error" if "error" in item else None)


def _render(error: ServeError) -> Response:
    """A refused request (401, 413, ...) as a JSON-RPC error with the HTTP status kept."""
    code = -32600
    body = error_response(None, errors.A2AError(code, error.message))
    return JSONResponse(body, status_code=error.status, headers=error.headers)


PROTOCOL = Protocol(a2a_app, path="/", endpoints=("/", "/.well-known/agent-card.json"))
