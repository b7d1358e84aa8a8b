"""``task_app(runner)``: the HTTP task API over an :class:`~tensorsketch.runs.AsyncRunner`.

Routes (every answer is JSON; errors are ``{"error": {"message", "type", "param", "code"}}``)::

    POST /runs                    run and wait (or, with Accept: text/event-stream, stream it);
                                  Idempotency-Key as for POST /tasks
    POST /tasks                   submit (Idempotency-Key header) -> 202 + the record
    GET  /tasks                   list: ?status=&label=key=value&thread_id=&limit=&cursor=
    GET  /tasks/{id}              the record
    GET  /tasks/{id}/events       SSE of the run's events; Last-Event-ID resumes after a seq
    POST /tasks/{id}/approve      {"decisions": {"call_1": true}}
    POST /tasks/{id}/events       {"event_id"?, "type", "payload"}
    POST /tasks/{id}/steer        {"content": "..."}: the running agent reads it at its next
                                  model call
    POST /tasks/{id}/resume       continue a run stopped at a breakpoint (no body, or {})
    POST /tasks/{id}/cancel       (no body, or {})
    GET  /healthz                 unauthenticated; 200 also while draining
    GET  /metrics                 unauthenticated; Prometheus text (prometheus_client)
    GET  /openapi.json            this API's OpenAPI 3.1 description

The assistant routes (``/assistants...``, :mod:`._assistants_http`) and the schedule routes
(``/schedules...``, :mod:`._schedules_http`) are always served.
With ``memory=`` and/or ``sessions=``, the memory item and session routes of
:mod:`._memory_http` too (``/memory/...``, ``/sessions...``).

A query parameter a route does not document (:data:`QUERY`), or a single-valued one given
twice, is a 400, as is a body field a route does not use (/healthz, /metrics and
/openapi.json ignore parameters: probes and scrapers add their own).

``authenticate`` runs before any body is read (not for /healthz and /metrics); bodies over
``max_body_bytes`` get 413; more than ``max_concurrent_runs`` open ``POST /runs`` requests, a
full runner queue or an unreachable store get 503 with ``Retry-After``. An SSE client that
stops reading is cut off once ``sse_max_buffered_bytes`` wait for it (the run goes on; the
client reconnects with ``Last-Event-ID``). Shutting the app down drains the runner.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_json
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, get_name
from starlette.types import Receive, Scope, Send

from tensorsketch.durable.modes import DURABILITY_MODES
from tensorsketch.errors import (
    AssistantNotFoundError,
    BackendUnavailableError,
    QueueFullError,
    RunConflictError,
    RunNotFoundError,
)
from tensorsketch.events import Event
from tensorsketch.interrupts import parse_approval
from tensorsketch.memory import MemoryStore, SessionStore
from tensorsketch.pregel.compiled import CompiledGraph
from tensorsketch.runs import MULTITASK_STRATEGIES, AsyncRunner, RunRecord
from tensorsketch.runtime.backends.base import Backend
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.serve._assistants_http import ASSISTANT_QUERY, AssistantRoutes, assistant_paths
from tensorsketch.serve._authorization import Authorization, Gatekeeper
from tensorsketch.serve._http import (
    DEFAULT_MAX_BODY_BYTES,
    Authenticate,
    EventStream,
    Guard,
    ServeError,
    read_json,
)
from tensorsketch.serve._memory_http import MEMORY_QUERY, MemoryRoutes
from tensorsketch.serve._memory_openapi import memory_paths
from tensorsketch.serve._metrics import RunMetrics
from tensorsketch.serve._protocols import Protocol
from tensorsketch.serve._run_webhooks import ALLOW_HINT, RunWebhooks, RunWebhookSender
from tensorsketch.serve._schedules_http import SCHEDULE_QUERY, ScheduleRoutes, schedule_paths
from tensorsketch.serve._steering_http import SteeringRoutes, steering_paths
from tensorsketch.serve._tasks_openapi import TASK_SCHEMA, answers, openapi
from tensorsketch.serve._webhooks import webhook_problem

__all__ = ["PROTOCOL", "task_app"]

log = logging.getLogger("tensorsketch.serve.tasks")

#: Unauthenticated paths (probes and scrapers carry no credentials).
OPEN_PATHS = frozenset({"/healthz", "/metrics"})
DEFAULT_SSE_MAX_BUFFERED_BYTES = 8 << 20
#: Longest a ``POST /runs`` waits for its run before answering 202 with the record.
MAX_WAIT_SECONDS = 300.0
_CREATE_KEYS = frozenset(
    {
        "input",
        "thread_id",
        "labels",
        "multitask_strategy",
        "webhook",
        "assistant_id",
        "durability",
    }
)
#: The query parameters each route takes (the OpenAPI description lists the same), and those
#: of them that may be repeated. Anything else is refused, so a typo is never ignored.
QUERY: dict[str, frozenset[str]] = {
    "POST /runs": frozenset({"wait"}),
    "GET /tasks": frozenset({"status", "label", "thread_id", "limit", "cursor"}),
    "GET /tasks/{id}/events": frozenset({"since"}),
    **MEMORY_QUERY,
    **ASSISTANT_QUERY,
    **SCHEDULE_QUERY,
}
_REPEATABLE = frozenset({"status", "label", "namespace", "metadata"})
#: Routes for probes, scrapers and tooling, which may add parameters of their own: not checked.
_OPERATIONAL = frozenset({"GET /healthz", "GET /metrics", "GET /openapi.json"})
#: What ``parse_approval`` (tensorsketch.interrupts) reads a decision from.
DECISION_HELP = (
    'true | false | "approve" | "approved" | "yes" | "allow" | "reject" | "rejected" | "no" | '
    '"deny" | "denied" (words in any case) | {"approved": bool, "reason": str} (with '
    '"digest", "call_id" and "args" to bind it to one call)'
)


def _record_json(record: RunRecord) -> dict[str, Any]:
    data = record.to_dict()
    data["id"] = data.pop("run_id")
    if record.terminal:  # a finished run's owner is its webhook sender's claim: internal
        data["owner"] = data["lease_expires_at"] = None
    return data


def _plain(value: Any) -> Any:
    """JSON for what state and events carry (pydantic models, dataclasses, ...)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


#: One encoder for every answer and frame: ``json.dumps`` with options builds a new
#: ``JSONEncoder`` per call.
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_plain).encode


def _dumps(data: Any) -> str:
    return _encode(data)


#: The same JSON in ASCII, each non-ASCII character as its ``\\u`` escape.
_encode_ascii = json.JSONEncoder(separators=(",", ":"), default=_plain).encode


def _body(data: Any) -> bytes:
    """``data`` as a UTF-8 JSON body. A string holding a lone surrogate (request bodies refuse
    one; the Python API stores what it is given) is written as its ``\\u`` escape, so one
    such record cannot fail every answer that lists it."""
    text = _encode(data)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _encode_ascii(data).encode()


class _JsonResponse(Response):
    """A JSON answer with its header list built in one go: the same bytes Starlette's
    ``Response(..., media_type="application/json")`` sends (the given headers lowercased,
    then ``content-length``, then ``content-type``), without its per-response render,
    header scan and list comprehensions."""

    media_type = "application/json"

    def __init__(self, body: bytes, status: int, raw_headers: list[tuple[bytes, bytes]]) -> None:
        self.status_code = status
        self.background = None
        self.body = body
        raw_headers.append((b"content-length", str(len(body)).encode()))
        raw_headers.append((b"content-type", b"application/json"))
        self.raw_headers = raw_headers


def _submitted_json(record: RunRecord) -> bytes | None:
    """The JSON of a record a submit has just created, by pydantic-core's encoder (a fifth of
    the standard library's time for a record), or ``None`` when the record may hold anything
    but the request's own JSON. Such a record's only free-form data is its ``input``, parsed
    from the request body; the encoder writes the same JSON for JSON-native data (floats below
    1e-4 in exponent form without the exponent's zero padding: ``1e-7`` for ``1e-07``)."""
    if (
        record.output is not None
        or record.assistant is not None
        or record.interrupts
        or record.events
        or record.decisions
        or record.steering
        or record.schedule is not None
        or record.webhook_delivery is not None
    ):
        return None
    try:
        return to_json(_record_json(record))
    except PydanticSerializationError:  # a lone surrogate: _body writes it escaped
        return None


def _json(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    raw: list[tuple[bytes, bytes]] = []
    if status < 200 or status in (204, 304):  # no content-length there: Starlette's rules
        return Response(_body(data), status_code=status, media_type="application/json")
    if headers:
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        for name, _ in raw:
            if name == b"content-length" or name == b"content-type":  # the caller's own
                return Response(_body(data), status, headers, media_type="application/json")
    return _JsonResponse(_body(data), status, raw)


def _event_frame(event: Event) -> bytes:
    head = f"id: {event.seq}\nevent: {event.type}\n".encode()
    return b"%sdata: %s\n\n" % (head, _body(event.to_dict()))


class _CappedStream(EventStream):
    """An :class:`EventStream` whose producer runs ahead into a buffer of at most ``cap``
    bytes: a client that stops reading is cut off there instead of holding memory."""

    def __init__(
        self, chunks: AsyncIterator[bytes], cap: int, headers: Mapping[str, str] | None = None
    ) -> None:
        self.cap = cap
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.buffered = 0
        self.overflow = asyncio.Event()
        self.source = chunks
        #: Called once when the response is over, however it ended.
        self.on_close: Callable[[], None] | None = None
        super().__init__(self._drain(), headers=headers)

    async def _fill(self) -> None:
        try:
            async for chunk in self.source:
                self.buffered += len(chunk)
                if self.buffered > self.cap:
                    log.warning("an SSE client fell %d bytes behind; cutting it off", self.buffered)
                    self.overflow.set()
                    return
                self.queue.put_nowait(chunk)
        finally:
            self.queue.put_nowait(None)
            close = getattr(self.source, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()

    async def _drain(self) -> AsyncIterator[bytes]:
        # Frames that queued while the last write went out leave in one write (one send
        # through the ASGI stack and one syscall, not one per event).
        queue = self.queue
        while (chunk := await queue.get()) is not None:
            batch = [chunk]
            done = False
            while not queue.empty():
                more = queue.get_nowait()
                if more is None:
                    done = True
                    break
                batch.append(more)
            data = chunk if len(batch) == 1 else b"".join(batch)
            self.buffered -= len(data)
            yield data
            if done:
                return

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        filler = asyncio.ensure_future(self._fill())
        cut = asyncio.ensure_future(self.overflow.wait())
        served = asyncio.ensure_future(super().__call__(scope, receive, send))
        try:
            await asyncio.wait((served, cut), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (served, cut, filler):
                task.cancel()
            for task in (served, cut, filler):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if self.on_close is not None:
                self.on_close()


class _Api:
    def __init__(
        self,
        runner: AsyncRunner,
        metrics: RunMetrics | None,
        max_concurrent_runs: int,
        sse_max_buffered_bytes: int,
        expose_errors: bool,
        retry_after: float,
        webhooks: RunWebhooks | None = None,
        description: dict[str, Any] | None = None,
        gatekeeper: Gatekeeper | None = None,
    ) -> None:
        self.runner = runner
        self.gatekeeper = gatekeeper or Gatekeeper(None, runner)
        self.description = description or openapi()
        self.webhooks = webhooks
        self.metrics = metrics
        self.max_concurrent_runs = max_concurrent_runs
        self.sse_cap = sse_max_buffered_bytes
        self.expose_errors = expose_errors
        self.retry_after = retry_after
        self.open_runs = 0

    # -- helpers ----------------------------------------------------------------------------

    def _busy(self, message: str, retry_after: float | None = None) -> ServeError:
        seconds = max(1, math.ceil(retry_after if retry_after is not None else self.retry_after))
        return ServeError(503, message, code="busy", headers={"Retry-After": str(seconds)})

    async def _call(self, work: Awaitable[Any]) -> Any:
        """Await runner work, turning its errors into HTTP ones."""
        try:
            return await work
        except ServeError:
            raise
        except RunNotFoundError as exc:
            raise ServeError(404, str(exc), code="task_not_found") from None
        except AssistantNotFoundError as exc:
            raise ServeError(404, str(exc), code="assistant_not_found") from None
        except RunConflictError as exc:
            raise ServeError(409, str(exc), code="conflict") from None
        except QueueFullError as exc:
            raise self._busy(str(exc), exc.retry_after) from None
        except BackendUnavailableError as exc:
            raise self._busy(f"the run store is unavailable: {exc}") from None
        except (ValueError, TypeError) as exc:
            raise ServeError(400, str(exc), code="invalid_request") from None

    async def _body(self, request: Request) -> dict[str, Any]:
        body = await read_json(request)
        if not isinstance(body, dict):
            raise ServeError(400, f"the body must be a JSON object, got {type(body).__name__}.")
        return body

    async def _no_body(self, request: Request, route: str, why: str) -> None:
        """Refuse a body on a route that takes none (an empty one, or ``{}``, is fine)."""
        raw = await request.body()
        if not raw.strip():
            return
        body = await self._body(request)
        if body:
            extra = sorted(body)
            raise ServeError(
                400,
                f"unknown field(s) {extra}; {route} takes no body ({why}): send none, or {{}}.",
                param=extra[0],
            )

    def _create_args(self, body: dict[str, Any], *, stream: bool = False) -> dict[str, Any]:
        if "stream" in body and not stream:
            raise ServeError(
                400,
                "`stream` is for POST /runs; POST /tasks answers 202 with the record at once. "
                'Use POST /runs with "stream": true to get the run\'s events as SSE, or follow '
                "this run with GET /tasks/{id}/events.",
                param="stream",
            )
        extra = sorted(set(body) - _CREATE_KEYS - ({"stream"} if stream else set()))
        if extra:
            raise ServeError(
                400,
                f"unknown field(s) {extra}; a run takes input, thread_id, labels, "
                "multitask_strategy, webhook, assistant_id and durability.",
                param=extra[0],
            )
        data = body.get("input")
        if data is not None and not isinstance(data, dict):
            raise ServeError(400, "`input` must be an object of state fields.", param="input")
        thread_id = body.get("thread_id")
        if thread_id is not None and (not isinstance(thread_id, str) or not thread_id):
            raise ServeError(400, "`thread_id` must be a non-empty string.", param="thread_id")
        labels = body.get("labels")
        if labels is not None and not isinstance(labels, dict):
            raise ServeError(400, "`labels` must be an object of strings.", param="labels")
        strategy = body.get("multitask_strategy")
        if strategy is not None and strategy not in MULTITASK_STRATEGIES:
            raise ServeError(
                400,
                f"`multitask_strategy` must be one of {', '.join(MULTITASK_STRATEGIES)} (what "
                "a new input does while the thread has a run in flight); got "
                f"{_dumps(strategy)[:40]}.",
                param="multitask_strategy",
            )
        durability = body.get("durability", "sync")
        if durability not in DURABILITY_MODES:
            raise ServeError(
                400,
                f"`durability` must be one of {', '.join(DURABILITY_MODES)} (when the run's "
                "checkpoints commit: each superstep before the next, while the next runs, or "
                f"only when the run stops); got {_dumps(durability)[:40]}.",
                param="durability",
            )
        assistant = body.get("assistant_id")
        if assistant is not None and (not isinstance(assistant, str) or not assistant):
            raise ServeError(
                400,
                "`assistant_id` must be an assistant's id or name (GET /assistants lists them).",
                param="assistant_id",
            )
        try:  # the runner checks it too, but its words are the Python call's (submit())
            self.runner.graph.check_run_input(
                data, where="`input`", example='{"input": {"query": "..."}}'
            )
        except (TypeError, ValueError) as exc:
            raise ServeError(400, str(exc), code="invalid_request", param="input") from None
        return {
            "input": data,
            "thread_id": thread_id,
            "labels": labels,
            "multitask_strategy": strategy,
            "webhook": body.get("webhook"),
            "assistant": assistant,
            "durability": durability,
        }

    async def _check_webhook(self, args: dict[str, Any]) -> None:
        """Refuse (400) a ``webhook`` this server will not call, before the run is stored."""
        url = args.get("webhook")
        if url is None:
            return
        if not isinstance(url, str) or len(url) > 2048:
            raise ServeError(
                400, "`webhook` must be an http(s) URL (at most 2048 characters).", param="webhook"
            )
        if self.webhooks is None:
            raise ServeError(
                400,
                "this server sends no webhooks: its operator turns them on with "
                "task_app(webhooks=RunWebhooks(secret=...)); drop `webhook`, or poll the task.",
                param="webhook",
            )
        problem = await webhook_problem(
            url, self.webhooks.allowed_hosts, what="webhook", hint=ALLOW_HINT
        )
        if problem is not None:
            raise ServeError(400, problem, param="webhook")

    def _stream(self, chunks: AsyncIterator[bytes]) -> Response:
        return _CappedStream(chunks, self.sse_cap)

    def _release(self) -> None:
        self.open_runs -= 1

    async def _events(
        self, run_id: str, since: int | None, record: RunRecord | None = None
    ) -> AsyncIterator[bytes]:
        async for event in self.runner.events(run_id, since=since, record=record):
            yield _event_frame(event)
        record = await self.runner.get(run_id)
        yield b"event: task\ndata: %s\n\n" % _body(_record_json(record))

    # -- routes -----------------------------------------------------------------------------

    async def run(self, request: Request) -> Response:
        if self.open_runs >= self.max_concurrent_runs:
            raise self._busy(
                f"{self.open_runs} runs are open on this server (max_concurrent_runs="
                f"{self.max_concurrent_runs}); retry shortly."
            )
        body = await self._body(request)
        args = self._create_args(body, stream=True)
        await self._check_webhook(args)
        await self.gatekeeper.create_run(request, args)
        wants_stream = body.get("stream") is True or "text/event-stream" in request.headers.get(
            "accept", ""
        )
        if "stream" in body and not isinstance(body["stream"], bool):
            raise ServeError(400, "`stream` must be true or false.", param="stream")
        wait = _number(request.query_params.get("wait"), "wait", 60.0, MAX_WAIT_SECONDS)
        key = self.gatekeeper.idempotency_key(request, _idempotency_key(request))
        self.open_runs += 1
        try:
            record, created = await self._call(self.runner.enqueue(**args, idempotency_key=key))
        except BaseException:
            self.open_runs -= 1
            raise
        # A retry with the key gets the run it already started: waited on or streamed again
        # from its first event, and marked as a replay.
        headers = {} if created else {"Idempotent-Replayed": "true"}
        if wants_stream:
            stream = _CappedStream(self._events(record.run_id, None), self.sse_cap, headers)
            stream.on_close = self._release  # however the response ends (even unsent)
            return stream
        try:
            done = await self._call(self.runner.await_run(record.run_id, timeout=wait))
        except TimeoutError:
            done = await self._call(self.runner.get(record.run_id))
            return _json(_record_json(done), 202, headers)
        finally:
            self.open_runs -= 1
        return _json(_record_json(done), 200, headers)

    async def submit(self, request: Request) -> Response:
        key = self.gatekeeper.idempotency_key(request, _idempotency_key(request))
        args = self._create_args(await self._body(request))
        await self._check_webhook(args)
        await self.gatekeeper.create_run(request, args)
        record, created = await self._call(self.runner.enqueue(**args, idempotency_key=key))
        location = f"/tasks/{record.run_id}"
        if created and (body := _submitted_json(record)) is not None:
            return _JsonResponse(body, 202, [(b"location", location.encode("latin-1"))])
        headers = {"Location": location}
        if not created:
            headers["Idempotent-Replayed"] = "true"
        return _json(_record_json(record), 202 if created else 200, headers)

    async def list(self, request: Request) -> Response:
        params = request.query_params
        statuses = [s for value in params.getlist("status") for s in value.split(",") if s]
        labels: dict[str, str] = {}
        for item in params.getlist("label"):
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ServeError(400, f"label filter {item!r} is not key=value.", param="label")
            labels[key] = value
        limit = int(_number(params.get("limit"), "limit", 50, 1000, integer=True))
        labels = await self.gatekeeper.run_labels(request, labels)
        page = await self._call(
            self.runner.list(
                status=statuses or None,
                thread_id=params.get("thread_id") or None,
                labels=labels or None,
                limit=limit,
                cursor=params.get("cursor") or None,
            )
        )
        shown = await self.gatekeeper.visible_runs(request, page.records)
        return _json({"tasks": [_record_json(r) for r in shown], "next_cursor": page.cursor})

    async def _path_record(self, request: Request) -> RunRecord:
        """The run the path names: the record the owner check has just read, or a read."""
        record = self.gatekeeper.checked_record(request)
        if record is None:
            record = await self._call(self.runner.get(request.path_params["id"]))
        return record

    async def get(self, request: Request) -> Response:
        return _json(_record_json(await self._path_record(request)))

    async def events(self, request: Request) -> Response:
        run_id = request.path_params["id"]
        record = await self._path_record(request)  # 404 before the stream starts
        since: int | None = None
        resumed = _header_values(request, b"last-event-id")
        last = (resumed[0] if resumed else None) or request.query_params.get("since")
        if last is not None:
            try:
                since = int(last) + (1 if resumed else 0)
            except ValueError:
                raise ServeError(
                    400, f"Last-Event-ID / since {last!r} is not an event seq."
                ) from None
            if since < 0:
                raise ServeError(400, "an event seq is not negative.")
        # The events start from the record just read (one read of it, not two).
        return self._stream(self._events(run_id, since, record))

    async def approve(self, request: Request) -> Response:
        body = await self._body(request)
        shape = f'{{"decisions": {{"<call id>": {DECISION_HELP}}}}}'
        extra = sorted(set(body) - {"decisions"})
        if extra:
            raise ServeError(400, f"unknown field(s) {extra}; the body is {shape}.", param=extra[0])
        decisions = body.get("decisions")
        if not isinstance(decisions, dict) or not decisions:
            raise ServeError(
                400,
                f"`decisions` must be a non-empty object; the body is {shape}.",
                param="decisions",
            )
        for call_id, decision in decisions.items():
            try:
                parse_approval(decision)
            except ValueError as exc:
                raise ServeError(
                    400,
                    f"the decision {_dumps(decision)[:80]} for {call_id!r} is refused: {exc} "
                    f"A decision is {DECISION_HELP}.",
                    param=f"decisions.{call_id}",
                ) from None
        record = await self._call(self.runner.approve(request.path_params["id"], decisions))
        return _json(_record_json(record))

    async def signal(self, request: Request) -> Response:
        body = await self._body(request)
        record = await self._call(self.runner.signal(request.path_params["id"], body))
        return _json(_record_json(record), 202)

    async def resume(self, request: Request) -> Response:
        await self._no_body(
            request, "POST /tasks/{id}/resume", "a breakpoint needs no decision or input"
        )
        record = await self._call(self.runner.resume(request.path_params["id"]))
        return _json(_record_json(record))

    async def cancel(self, request: Request) -> Response:
        await self._no_body(request, "POST /tasks/{id}/cancel", "nothing to say but cancel")
        record = await self._call(self.runner.cancel(request.path_params["id"]))
        return _json(_record_json(record))

    async def healthz(self, request: Request) -> Response:
        try:
            health = await self.runner.health()
        except Exception as exc:  # the store is down: not healthy, and say why
            detail = str(exc) if self.expose_errors else type(exc).__name__
            return _json({"status": "unavailable", "error": detail}, 503, {"Retry-After": "5"})
        health["status"] = "draining" if health["draining"] else "ok"
        return _json(health)

    async def metrics_text(self, request: Request) -> Response:
        if self.metrics is None:
            raise ServeError(404, "metrics are off for this app (task_app(metrics=None)).")
        with contextlib.suppress(Exception):  # a scrape still answers when the store is down
            await self.metrics.refresh(self.runner)
        return Response(self.metrics.render(), media_type=self.metrics.content_type)

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(self.description)


def _header_values(request: Request, name: bytes) -> list[str]:
    """The values of header ``name`` (lowercase, as ASGI servers give header names), read
    from the scope: Starlette's ``request.headers`` builds a ``Headers`` for every request
    that asks, and a submit asks for one header."""
    return [value.decode("latin-1") for key, value in request.scope["headers"] if key == name]


def _idempotency_key(request: Request) -> str | None:
    """The request's ``Idempotency-Key`` header, checked: sent once, 1 to 256 characters."""
    keys = _header_values(request, b"idempotency-key")
    if len(keys) > 1:
        raise ServeError(
            400,
            f"the Idempotency-Key header is given {len(keys)} times; send it once.",
            param="Idempotency-Key",
        )
    key = keys[0] if keys else None
    if key is not None and not 0 < len(key) <= 256:
        got = "an empty one" if not key else f"{len(key)} characters"
        raise ServeError(
            400,
            f"the Idempotency-Key header must be 1 to 256 characters, got {got}; send a "
            "key that names this run (an order id, say), or leave the header out.",
            param="Idempotency-Key",
        )
    return key


def _checked_query(
    route: str, endpoint: Callable[[Request], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    """``endpoint``, refusing query parameters ``route`` does not take (:data:`QUERY`) and
    repeats of the single-valued ones, before anything else is read."""
    allowed = QUERY.get(route, frozenset())
    takes = f"takes {sorted(allowed)}" if allowed else "takes none"

    async def checked(request: Request) -> Response:
        if not request.scope.get("query_string"):  # most requests: nothing to parse
            return await endpoint(request)
        params = request.query_params
        extra = sorted(set(params) - allowed)
        if extra:
            raise ServeError(
                400, f"unknown query parameter(s) {extra}; {route} {takes}.", param=extra[0]
            )
        for name in sorted(set(params) - _REPEATABLE):
            if len(params.getlist(name)) > 1:
                raise ServeError(
                    400, f"query parameter `{name}` is given more than once.", param=name
                )
        return await endpoint(request)

    return checked


class _Endpoint:
    """A route's handler as a plain ASGI app. Starlette wraps a function endpoint in a second
    exception-handling layer of its own (two closures, a wrapped ``send`` and a ``Request``
    per request); the app's exception middleware already turns the same exceptions into the
    same answers with the same handlers, so one layer is enough."""

    __slots__ = ("handler",)

    def __init__(self, handler: Callable[[Request], Awaitable[Response]]) -> None:
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.handler(Request(scope, receive, send))
        await response(scope, receive, send)


def _number(
    raw: str | None, name: str, default: float, highest: float, *, integer: bool = False
) -> float:
    if raw is None:
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        raise ServeError(400, f"`{name}` must be a number, got {raw!r}.", param=name) from None
    if not (0 < value <= highest) or not math.isfinite(value):
        raise ServeError(400, f"`{name}` must be above 0 and at most {highest:g}.", param=name)
    return value


def _webhook_sender(runner: AsyncRunner, webhooks: RunWebhooks | None) -> RunWebhookSender | None:
    """``task_app(webhooks=...)``'s sender, hooked into the runner's records (or ``None``)."""
    if webhooks is None:
        return None
    if not isinstance(webhooks, RunWebhooks):
        msg = f"task_app(webhooks=...) takes a RunWebhooks, got {type(webhooks).__name__}."
        raise TypeError(msg)
    sender = RunWebhookSender(webhooks, runner.store, _record_json, runner.owner)
    runner.listeners.append(sender.observe)
    return sender


def _start_sender(sender: RunWebhookSender | None) -> None:
    """Sweep for webhooks a process died before delivering: now, then every
    ``sweep_every`` seconds."""
    if sender is not None:
        sender.start_sweeping()


async def _close_sender(sender: RunWebhookSender | None) -> None:
    if sender is not None:
        await sender.aclose()


def task_app(
    runner: AsyncRunner,
    *,
    authenticate: Authenticate | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_concurrent_runs: int = 32,
    sse_max_buffered_bytes: int = DEFAULT_SSE_MAX_BUFFERED_BYTES,
    metrics: RunMetrics | bool | None = True,
    expose_errors: bool = False,
    drain_timeout: float = 30.0,
    retry_after: float = 1.0,
    webhooks: RunWebhooks | None = None,
    memory: MemoryStore | None = None,
    sessions: SessionStore | None = None,
    authorize: Authorization | None = None,
) -> Starlette:
    """The HTTP task API for ``runner`` (see the module docs for the routes).

    :param metrics: a :class:`RunMetrics` to fill and serve at ``/metrics``; ``True`` (the
        default) makes one (and hooks it into the runner's records and, when the runner has
        no tracer of its own, its tool and model spans); ``None``/``False`` turns /metrics off.
    :param expose_errors: put an unexpected error's text in its 500 answer (off: a generic
        message; the error is logged either way).
    :param drain_timeout: seconds shutdown waits for in-flight runs before handing them back.
    :param webhooks: turns on completion webhooks (a run's ``webhook`` field): its terminal
        record is POSTed there, signed with ``RunWebhooks.secret`` (see
        :mod:`tensorsketch.serve.tasks` for the headers), retried, and the outcome recorded
        as the run's ``webhook_delivery``; at least once, with a delivery id that stays the
        same (a webhook whose server died before recording it is sent again by the next sweep
        of any server on the store). Off by default: a run naming one is a 400.
    :param memory: serve this long-term memory store at ``/memory/...`` (put, get, delete,
        list, search, namespaces), behind ``authenticate``. The app does not close it.
    :param sessions: serve this session store at ``/sessions...`` (list, read, append,
        clear), behind ``authenticate``. The app does not close it.
    :param authorize: per-user authorization (:class:`Authorization`): ``authenticate``
        then returns who asks (an ``Identity`` or a user id), and each user reaches only
        their own runs, threads, memory and sessions unless its handlers say otherwise.
    """
    if not isinstance(runner, AsyncRunner):
        msg = (
            f"task_app(runner) needs an AsyncRunner, got {type(runner).__name__}: wrap the "
            "graph in one, `task_app(AsyncRunner(agent, backend=backend))`."
        )
        raise TypeError(msg)
    for name, value in (
        ("max_concurrent_runs", max_concurrent_runs),
        ("sse_max_buffered_bytes", sse_max_buffered_bytes),
    ):
        if type(value) is not int or value < 1:
            msg = f"task_app({name}=...) must be a positive int, got {value!r}."
            raise ValueError(msg)
    chosen: RunMetrics | None
    if metrics is True:
        chosen = RunMetrics()
    elif metrics is False or metrics is None:
        chosen = None
    else:
        chosen = metrics
    if chosen is not None:
        runner.listeners.append(chosen.observe)
        if runner.tracer is None:
            runner.tracer = chosen.tracer
    sender = _webhook_sender(runner, webhooks)
    gatekeeper = Gatekeeper.for_app(authorize, authenticate, runner)
    identify = gatekeeper.gate(authenticate)
    stores = MemoryRoutes(memory, sessions, gatekeeper)
    api = _Api(
        runner,
        chosen,
        max_concurrent_runs,
        sse_max_buffered_bytes,
        expose_errors,
        retry_after,
        webhooks,
        openapi(
            {
                **memory_paths(memory=memory is not None, sessions=sessions is not None),
                **steering_paths(answers),
                **assistant_paths(),
                **schedule_paths(answers, TASK_SCHEMA),
            }
        ),
        gatekeeper,
    )
    steering = SteeringRoutes(
        runner, api._call, api._body, lambda record, status: _json(_record_json(record), status)
    )
    assistants = AssistantRoutes(runner, api._call, api._body, _json)
    schedules = ScheduleRoutes(runner, gatekeeper, api._call, api._body, _json, _record_json)

    def gate(request: Request) -> bool | Awaitable[bool]:
        if identify is None or request.url.path in OPEN_PATHS:
            return True
        return identify(request)

    async def on_serve_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ServeError)
        return _json(exc.body(), exc.status, exc.headers or None)

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        error = ServeError(exc.status_code, str(exc.detail), headers=exc.headers)
        return _json(error.body(), error.status, error.headers or None)

    async def on_error(request: Request, exc: Exception) -> Response:
        log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
        message = f"{type(exc).__name__}: {exc}" if expose_errors else "internal server error"
        return _json(ServeError(500, message, code="internal_error").body(), 500)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await runner.start()
        try:
            await runner.resume_pending()
        except Exception as exc:  # the store may come back later; the timers retry
            log.warning("resume_pending at startup failed: %s", exc)
        _start_sender(sender)
        try:
            yield
        finally:
            await runner.drain(timeout=drain_timeout)
            await runner.aclose()
            await _close_sender(sender)

    endpoints: list[tuple[str, str, Callable[[Request], Awaitable[Response]]]] = [
        ("POST", "/runs", api.run),
        ("POST", "/tasks", api.submit),
        ("GET", "/tasks", api.list),
        ("GET", "/tasks/{id}", api.get),
        ("GET", "/tasks/{id}/events", api.events),
        ("POST", "/tasks/{id}/events", api.signal),
        ("POST", "/tasks/{id}/approve", api.approve),
        ("POST", "/tasks/{id}/resume", api.resume),
        ("POST", "/tasks/{id}/cancel", api.cancel),
        ("GET", "/healthz", api.healthz),
        ("GET", "/metrics", api.metrics_text),
        ("GET", "/openapi.json", api.openapi),
        *steering.endpoints(),
        *assistants.endpoints(),
        *schedules.endpoints(),
        *stores.endpoints(),
    ]
    gatekeeper.check_routes(f"{method} {path}" for method, path, _ in endpoints)
    endpoints = [(m, p, gatekeeper.guard(f"{m} {p}", e)) for m, p, e in endpoints]
    handlers_by_route = [
        (
            method,
            path,
            endpoint
            if f"{method} {path}" in _OPERATIONAL
            else _checked_query(f"{method} {path}", endpoint),
        )
        for method, path, endpoint in endpoints
    ]
    routes = [
        Route(path, _Endpoint(handler), methods=[method], name=get_name(handler))
        for method, path, handler in handlers_by_route
    ]
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        ServeError: on_serve_error,
        HTTPException: on_http_error,
        Exception: on_error,
    }
    app = Starlette(
        routes=routes,
        # Without authenticate the guard only counts body bytes (no Request per request).
        middleware=[
            Middleware(
                Guard,
                authenticate=None if identify is None else gate,
                max_body_bytes=max_body_bytes,
            )
        ],
        exception_handlers=handlers,
        lifespan=lifespan,
    )
    app.state.runner = runner
    app.state.metrics = chosen
    return app


def tasks_protocol(
    graph: CompiledGraph[Any],
    *,
    backend: Backend | None = None,
    concurrency: int = 8,
    authenticate: Authenticate | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    deps: Any = None,
) -> Starlette:
    """``serve(graph, protocols=["tasks"])``: a runner for ``graph`` on ``backend`` (an
    in-memory one by default) behind :func:`task_app`; ``deps`` are the runner's
    (``AsyncRunner(deps=...)``)."""
    runner = AsyncRunner(
        graph, backend=backend or InMemoryBackend(), concurrency=concurrency, deps=deps
    )
    return task_app(runner, authenticate=authenticate, max_body_bytes=max_body_bytes)


#: The durable task API (``/runs``, ``/tasks``), at the root beside the other protocols.
PROTOCOL = Protocol(
    tasks_protocol, path="/", endpoints=("/runs", "/tasks", "/healthz", "/metrics", "/openapi.json")
)
