"""The task API's schedule routes: cron, interval and one-off schedules of the served graph
(:class:`tensorsketch.runs.Scheduler`) created, listed, read, stopped and followed over HTTP::

    POST   /schedules               {"cron", "timezone"?} | {"every"} | {"at"}, with "input"?,
                                    "name"?, "labels"?, "max_in_flight"? -> 201 (200: the
                                    stored schedule of the same name or the same arguments)
    GET    /schedules               ?limit=&cursor=&label=key=value (repeatable)
    GET    /schedules/{id}          the schedule's record (its ``schedule`` field: the spec,
                                    how often it fired, its recent runs)
    DELETE /schedules/{id}          stop it (runs it started go on); the cancelled record
    GET    /schedules/{id}/runs     the runs it submitted, oldest first (?limit=&cursor=)

Under ``task_app(authorize=...)`` a schedule is its creator's (the ``owner`` label, which its
runs inherit) and goes through the ``schedules`` handlers: another user's schedule answers
404, like a missing one; a schedule ``name`` is the creator's own.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from tensorsketch.runs import AsyncRunner, RunRecord, ScheduleHandle, Scheduler
from tensorsketch.serve._authorization import Gatekeeper
from tensorsketch.serve._http import ServeError

__all__ = ["SCHEDULE_QUERY", "ScheduleRoutes", "schedule_paths"]

#: The query parameters each route takes (the task app refuses others).
SCHEDULE_QUERY: Final[dict[str, frozenset[str]]] = {
    "GET /schedules": frozenset({"limit", "cursor", "label"}),
    "GET /schedules/{id}/runs": frozenset({"limit", "cursor"}),
}
_WHEN = ("cron", "every", "at")
_FIELDS = frozenset({*_WHEN, "timezone", "input", "name", "labels", "max_in_flight"})
_SHAPE = (
    '{"cron": "30 9 * * mon-fri", "timezone"?: "Europe/Berlin"} or {"every": <seconds>} or '
    '{"at": <unix time>}, with "input"?: {...}, "name"?: "...", "labels"?: {...}, '
    '"max_in_flight"?: <int >= 1, or null for no limit>'
)
#: The longest interval and the latest one-off time accepted (ten years; year 5138).
_MAX_EVERY = 10 * 366 * 86400.0
_MAX_AT = 1e11

Endpoint = Callable[[Request], Awaitable[Response]]


def _limit(raw: str | None) -> int:
    raw = raw or "50"
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise ServeError(400, f"`limit` must be an int from 1 to 1000, got {raw!r}.", param="limit")
    return int(raw)


def _seconds(value: Any, name: str, highest: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ServeError(400, f"`{name}` must be a number of seconds.", param=name)
    if not math.isfinite(value) or not 0 < value <= highest:
        raise ServeError(400, f"`{name}` must be above 0 and at most {highest:g}.", param=name)
    return float(value)


class ScheduleRoutes:
    """The schedule routes of a task app over ``Scheduler(runner)``.

    :param call: awaits runner work, turning its errors into HTTP ones.
    :param body: reads a request's JSON object body.
    :param respond: JSON data as the app answers it, with a status code.
    :param record_json: a run record as the app answers it.
    """

    def __init__(
        self,
        runner: AsyncRunner,
        gatekeeper: Gatekeeper,
        call: Callable[[Awaitable[Any]], Awaitable[Any]],
        body: Callable[[Request], Awaitable[dict[str, Any]]],
        respond: Callable[..., Response],
        record_json: Callable[[RunRecord], dict[str, Any]],
    ) -> None:
        self.runner = runner
        self.scheduler = Scheduler(runner)
        self.gatekeeper = gatekeeper
        self.call = call
        self.body = body
        self.respond = respond
        self.record_json = record_json

    async def _schedule(self, request: Request, action: str) -> RunRecord:
        """The schedule the path names, if the caller may ``action`` it (else a 404)."""
        schedule_id = request.path_params["id"]
        record: RunRecord | None = await self.call(self.runner.store.get(schedule_id))
        missing = ServeError(
            404,
            f"no schedule {schedule_id!r}; take ids from POST /schedules or GET /schedules.",
            code="schedule_not_found",
        )
        if record is None or record.kind != "schedule":
            raise missing
        if not await self.gatekeeper.owns(request, "schedules", action, record):
            raise missing
        return record

    async def create(self, request: Request) -> Response:
        started = time.time()
        body = await self.body(request)
        extra = sorted(set(body) - _FIELDS)
        if extra:
            raise ServeError(
                400, f"unknown field(s) {extra}; the body is {_SHAPE}.", param=extra[0]
            )
        when = [k for k in _WHEN if k in body]
        if len(when) != 1:
            raise ServeError(
                400,
                f"a schedule needs exactly one of `cron`, `every` or `at` (got {when or 'none'}); "
                f"the body is {_SHAPE}.",
                param=when[1] if len(when) > 1 else "cron",
            )
        if "timezone" in body and when != ["cron"]:
            raise ServeError(400, "`timezone` goes with `cron` only.", param="timezone")
        data = body.get("input")
        if data is not None and not isinstance(data, dict):
            raise ServeError(400, "`input` must be an object of state fields.", param="input")
        name = body.get("name")
        if name is not None and (not isinstance(name, str) or not 0 < len(name) <= 128):
            raise ServeError(400, "`name` must be a string of 1 to 128 characters.", param="name")
        labels = body.get("labels")
        if labels is not None and not isinstance(labels, dict):
            raise ServeError(400, "`labels` must be an object of strings.", param="labels")
        if labels is not None and "schedule" in labels:
            raise ServeError(
                400,
                "the `schedule` label is set on each run a schedule submits (to its id); "
                "leave it out.",
                param="labels.schedule",
            )
        limit = body.get("max_in_flight", 1)
        if limit is not None and (type(limit) is not int or limit < 1):
            raise ServeError(
                400,
                "`max_in_flight` must be an int >= 1 (how many of its runs may be unfinished "
                "before a firing is skipped), or null for no limit.",
                param="max_in_flight",
            )
        labels = await self.gatekeeper.stamp_owner(request, "schedules", dict(labels or {}))
        common: dict[str, Any] = {
            "name": self.gatekeeper.idempotency_key(request, name),
            "labels": labels,
        }
        in_flight = math.inf if limit is None else limit
        if "cron" in body:
            timezone = body.get("timezone", "UTC")
            if not isinstance(body["cron"], str) or not isinstance(timezone, str):
                raise ServeError(
                    400, "`cron` and `timezone` are strings ('30 9 * * *', 'UTC').", param="cron"
                )
            work = self.scheduler.cron(
                body["cron"], data, timezone=timezone, max_in_flight=in_flight, **common
            )
        elif "every" in body:
            every = _seconds(body["every"], "every", _MAX_EVERY)
            work = self.scheduler.every(every, data, max_in_flight=in_flight, **common)
        else:
            at = _seconds(body["at"], "at", _MAX_AT)
            work = self.scheduler.at(at, data, **common)
        handle = await self.call(work)
        record = await self.call(self.runner.store.get(handle.id))
        created = record is not None and record.created_at >= started
        headers = {"Location": f"/schedules/{handle.id}"}
        if not created:
            headers["Idempotent-Replayed"] = "true"
        return self.respond(self.record_json(record), 201 if created else 200, headers)

    async def listing(self, request: Request) -> Response:
        params = request.query_params
        labels: dict[str, str] = {}
        for item in params.getlist("label"):
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ServeError(400, f"label filter {item!r} is not key=value.", param="label")
            labels[key] = value
        labels = await self.gatekeeper.listing_labels(request, "schedules", labels)
        page = await self.call(
            self.runner.store.list(
                kind="schedule",
                labels=labels or None,
                limit=_limit(params.get("limit")),
                cursor=params.get("cursor") or None,
            )
        )
        shown = [
            r for r in page.records if await self.gatekeeper.owns(request, "schedules", "read", r)
        ]
        return self.respond(
            {"schedules": [self.record_json(r) for r in shown], "next_cursor": page.cursor}, 200
        )

    async def get(self, request: Request) -> Response:
        return self.respond(self.record_json(await self._schedule(request, "read")), 200)

    async def delete(self, request: Request) -> Response:
        record = await self._schedule(request, "delete")
        await self.call(self.scheduler_handle(record).cancel())
        stopped = await self.call(self.runner.store.get(record.run_id))
        return self.respond(self.record_json(stopped), 200)

    def scheduler_handle(self, record: RunRecord) -> ScheduleHandle:
        return ScheduleHandle(record.run_id, self.runner)

    async def runs(self, request: Request) -> Response:
        record = await self._schedule(request, "read")
        params = request.query_params
        page = await self.call(
            self.scheduler_handle(record).history(
                limit=_limit(params.get("limit")), cursor=params.get("cursor") or None
            )
        )
        shown = await self.gatekeeper.visible_runs(request, page.records)
        return self.respond(
            {"tasks": [self.record_json(r) for r in shown], "next_cursor": page.cursor}, 200
        )

    def endpoints(self) -> list[tuple[str, str, Endpoint]]:
        return [
            ("POST", "/schedules", self.create),
            ("GET", "/schedules", self.listing),
            ("GET", "/schedules/{id}", self.get),
            ("DELETE", "/schedules/{id}", self.delete),
            ("GET", "/schedules/{id}/runs", self.runs),
        ]


def schedule_paths(answers: Callable[..., dict[str, Any]], task: Any) -> dict[str, Any]:
    """The OpenAPI paths of the schedule routes (``answers``: the task description's
    responses builder; ``task``: its run record schema)."""
    ident = {
        "name": "id",
        "in": "path",
        "required": True,
        "description": "The schedule's id (schedule_...).",
        "schema": {"type": "string"},
    }
    paging = [
        {
            "name": "limit",
            "in": "query",
            "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
        },
        {"name": "cursor", "in": "query", "schema": {"type": "string"}},
    ]
    labels = {
        "type": "object",
        "maxProperties": 15,
        "additionalProperties": {"type": "string", "maxLength": 128},
    }
    create = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "cron": {"type": "string", "description": "Five fields: '30 9 * * mon-fri'."},
            "timezone": {"type": "string", "description": "An IANA name (default UTC)."},
            "every": {"type": "number", "exclusiveMinimum": 0, "maximum": _MAX_EVERY},
            "at": {"type": "number", "exclusiveMinimum": 0, "maximum": _MAX_AT},
            "input": {"type": ["object", "null"], "description": "State fields of the graph."},
            "name": {"type": "string", "minLength": 1, "maxLength": 128},
            "labels": labels,
            "max_in_flight": {"type": ["integer", "null"], "minimum": 1},
        },
        "oneOf": [{"required": ["cron"]}, {"required": ["every"]}, {"required": ["at"]}],
    }

    def page_of(field: str) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                field: {"type": "array", "items": task},
                "next_cursor": {"type": ["string", "null"]},
            },
        }

    missing = {"description": "no such schedule (or not the caller's)"}
    with_404 = {
        "404": {**missing, **answers(200, 404)["404"]},
    }
    return {
        "/schedules": {
            "post": {
                "summary": "Create a cron, interval or one-off schedule of the graph",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": create}},
                },
                "responses": {
                    **answers(200, 400, 401, 403, 413, 503),
                    "200": {
                        "description": "the stored schedule of the same name or arguments",
                        "content": {"application/json": {"schema": task}},
                    },
                    "201": {
                        "description": "the schedule's record",
                        "content": {"application/json": {"schema": task}},
                    },
                },
            },
            "get": {
                "summary": "List schedules, oldest first",
                "parameters": [
                    *paging,
                    {
                        "name": "label",
                        "in": "query",
                        "description": "key=value; repeatable (all of them must match).",
                        "style": "form",
                        "explode": True,
                        "schema": {
                            "type": "array",
                            "items": {"type": "string", "pattern": "^[^=]+=.*$"},
                        },
                    },
                ],
                "responses": answers(200, 400, 401, 403, 503, schema=page_of("schedules")),
            },
        },
        "/schedules/{id}": {
            "get": {
                "summary": "One schedule",
                "parameters": [ident],
                "responses": {**answers(200, 400, 401, 503, schema=task), **with_404},
            },
            "delete": {
                "summary": "Stop a schedule (the runs it started go on)",
                "parameters": [ident],
                "responses": {**answers(200, 400, 401, 503, schema=task), **with_404},
            },
        },
        "/schedules/{id}/runs": {
            "get": {
                "summary": "The runs a schedule submitted, oldest first",
                "parameters": [ident, *paging],
                "responses": {
                    **answers(200, 400, 401, 503, schema=page_of("tasks")),
                    **with_404,
                },
            }
        },
    }
