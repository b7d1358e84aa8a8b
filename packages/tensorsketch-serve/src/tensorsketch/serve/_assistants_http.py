"""The task API's assistant routes: versioned configurations of the served graph
(:mod:`tensorsketch.runs.assistants`), created, listed, updated and rolled back over HTTP::

    POST  /assistants                  {"name", "config"?, "description"?, "metadata"?} -> 201
    GET   /assistants                  ?limit=&cursor=&metadata=key=value (repeatable)
    GET   /assistants/{id}             by id or name
    PATCH /assistants/{id}             {"config", "description"?}: a new version, made current
    GET   /assistants/{id}/versions    every kept version, oldest first
    POST  /assistants/{id}/rollback    {"version": n}: that version is current again

A run names one with ``"assistant_id"`` (an id or a name) on ``POST /tasks`` or ``POST /runs``.

For authorization, :data:`ACTIONS` says which resource and action each route is, and an
assistant's owner belongs in its ``metadata`` (stored as the record's labels: a list filtered
on it is filtered in the store).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from tensorsketch.errors import AssistantNotFoundError
from tensorsketch.runs import AsyncRunner
from tensorsketch.runs.assistants import CONFIG_KEYS, Assistant
from tensorsketch.serve._http import ServeError

__all__ = ["ACTIONS", "ASSISTANT_QUERY", "AssistantRoutes", "assistant_paths"]

#: Each route's ``(resource, action)``: what a per-resource authorization handler keys on.
ACTIONS: Final[dict[str, tuple[str, str]]] = {
    "POST /assistants": ("assistants", "create"),
    "GET /assistants": ("assistants", "search"),
    "GET /assistants/{id}": ("assistants", "read"),
    "PATCH /assistants/{id}": ("assistants", "update"),
    "GET /assistants/{id}/versions": ("assistants", "read"),
    "POST /assistants/{id}/rollback": ("assistants", "update"),
}
#: The query parameters each route takes (the task app refuses others).
ASSISTANT_QUERY: Final[dict[str, frozenset[str]]] = {
    "GET /assistants": frozenset({"limit", "cursor", "metadata"}),
}

Endpoint = Callable[[Request], Awaitable[Response]]


class AssistantRoutes:
    """The assistant routes of a task app over ``runner.assistants``.

    :param call: awaits runner work, turning its errors into HTTP ones.
    :param body: reads a request's JSON object body.
    :param respond: JSON data as the app answers it, with a status code.
    """

    def __init__(
        self,
        runner: AsyncRunner,
        call: Callable[[Awaitable[Any]], Awaitable[Any]],
        body: Callable[[Request], Awaitable[dict[str, Any]]],
        respond: Callable[[Any, int], Response],
    ) -> None:
        self.assistants = runner.assistants
        self.call = call
        self.body = body
        self.respond = respond

    async def _do(self, work: Awaitable[Any]) -> Any:
        try:
            return await self.call(work)
        except AssistantNotFoundError as exc:
            raise ServeError(404, str(exc), code="assistant_not_found") from None

    async def _fields(self, request: Request, allowed: set[str], shape: str) -> dict[str, Any]:
        body = await self.body(request)
        extra = sorted(set(body) - allowed)
        if extra:
            raise ServeError(400, f"unknown field(s) {extra}; the body is {shape}.", param=extra[0])
        return body

    def _answer(self, assistant: Assistant, status: int = 200) -> Response:
        return self.respond(assistant.to_dict(), status)

    async def create(self, request: Request) -> Response:
        body = await self._fields(
            request,
            {"name", "config", "description", "metadata"},
            '{"name": "...", "config"?: {...}, "description"?: "...", "metadata"?: {...}}',
        )
        if "name" not in body:
            raise ServeError(400, "an assistant needs a `name`.", param="name")
        metadata = body.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise ServeError(400, "`metadata` must be an object of strings.", param="metadata")
        created = await self._do(
            self.assistants.create(
                body["name"],
                body.get("config"),
                description=body.get("description", ""),
                metadata=metadata,
            )
        )
        return self._answer(created, 201)

    async def search(self, request: Request) -> Response:
        params = request.query_params
        metadata: dict[str, str] = {}
        for item in params.getlist("metadata"):
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ServeError(
                    400, f"metadata filter {item!r} is not key=value.", param="metadata"
                )
            metadata[key] = value
        raw = params.get("limit", "50")
        if not raw.isdigit() or not 1 <= int(raw) <= 1000:
            raise ServeError(
                400, f"`limit` must be an int from 1 to 1000, got {raw!r}.", param="limit"
            )
        found, cursor = await self._do(
            self.assistants.list(
                metadata=metadata or None, limit=int(raw), cursor=params.get("cursor") or None
            )
        )
        return self.respond(
            {"assistants": [a.to_dict() for a in found], "next_cursor": cursor}, 200
        )

    async def get(self, request: Request) -> Response:
        return self._answer(await self._do(self.assistants.get(request.path_params["id"])))

    async def update(self, request: Request) -> Response:
        body = await self._fields(
            request, {"config", "description"}, '{"config": {...}, "description"?: "..."}'
        )
        if "config" not in body:
            raise ServeError(
                400,
                "a new version needs its whole `config` (it replaces the current one; send "
                "{} for none).",
                param="config",
            )
        updated = await self._do(
            self.assistants.update(
                request.path_params["id"], body["config"], description=body.get("description")
            )
        )
        return self._answer(updated)

    async def versions(self, request: Request) -> Response:
        found = await self._do(self.assistants.versions(request.path_params["id"]))
        return self.respond({"versions": found}, 200)

    async def rollback(self, request: Request) -> Response:
        body = await self._fields(request, {"version"}, '{"version": <a kept version number>}')
        version = body.get("version")
        if type(version) is not int or version < 1:
            raise ServeError(400, "`version` must be a positive int.", param="version")
        done = await self._do(self.assistants.rollback(request.path_params["id"], version))
        return self._answer(done)

    def endpoints(self) -> list[tuple[str, str, Endpoint]]:
        return [
            ("POST", "/assistants", self.create),
            ("GET", "/assistants", self.search),
            ("GET", "/assistants/{id}", self.get),
            ("PATCH", "/assistants/{id}", self.update),
            ("GET", "/assistants/{id}/versions", self.versions),
            ("POST", "/assistants/{id}/rollback", self.rollback),
        ]


_CONFIG = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "model": {"type": "string", "minLength": 1, "maxLength": 256},
        "system_prompt": {"type": "string", "minLength": 1, "maxLength": 65536},
        "tools": {"type": "array", "items": {"type": "string"}},
        "max_iterations": {"type": "integer", "minimum": 1, "maximum": 1000},
        "max_tokens": {"type": "integer", "minimum": 1, "maximum": 1000000},
        "multitask_strategy": {
            "type": "string",
            "enum": ["reject", "enqueue", "interrupt", "rollback"],
        },
        "context": {"type": "object"},
    },
    "description": f"Every key optional: {', '.join(CONFIG_KEYS)}.",
}
_ASSISTANT = {
    "type": "object",
    "required": ["id", "name", "version", "latest_version", "config"],
    "properties": {
        "id": {"type": "string"},
        "name": {"type": "string"},
        "graph": {"type": "string"},
        "version": {"type": "integer"},
        "latest_version": {"type": "integer"},
        "config": {"type": "object"},
        "description": {"type": "string"},
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
        "created_at": {"type": "number"},
        "updated_at": {"type": "number"},
    },
}
_ERROR = {"type": "object", "required": ["error"]}
_DESCRIBED = {
    200: "the assistant",
    201: "created",
    400: "the body or a parameter is wrong (the message says which)",
    401: "not authenticated",
    403: (
        "the caller may not do this to assistants (task_app(authorize=...): by default only "
        "an admin creates, changes or rolls one back)"
    ),
    404: "no such assistant (or version)",
    409: "an assistant with that name exists",
    413: "the body is too large",
    503: "the store is unavailable; retry after Retry-After seconds",
}


def _answers(ok: int, schema: Any, *errors: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        str(ok): {
            "description": _DESCRIBED[ok],
            "content": {"application/json": {"schema": schema}},
        }
    }
    for status in (400, 401, 403, 503, *errors):
        out[str(status)] = {
            "description": _DESCRIBED[status],
            "content": {"application/json": {"schema": _ERROR}},
        }
    return out


def _body(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": list(required),
        "properties": properties,
    }
    return {"required": True, "content": {"application/json": {"schema": schema}}}


_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "The assistant's id (asst_...) or name.",
    "schema": {"type": "string"},
}


def assistant_paths() -> dict[str, Any]:
    """The OpenAPI paths of the assistant routes."""
    metadata = {"type": "object", "additionalProperties": {"type": "string", "maxLength": 128}}
    return {
        "/assistants": {
            "post": {
                "summary": "Create an assistant (version 1)",
                "requestBody": _body(
                    {
                        "name": {"type": "string", "minLength": 1, "maxLength": 128},
                        "config": _CONFIG,
                        "description": {"type": "string", "maxLength": 4096},
                        "metadata": {**metadata, "maxProperties": 16},
                    },
                    "name",
                ),
                "responses": _answers(201, _ASSISTANT, 409, 413),
            },
            "get": {
                "summary": "List the graph's assistants, oldest first",
                "parameters": [
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                    },
                    {"name": "cursor", "in": "query", "schema": {"type": "string"}},
                    {
                        "name": "metadata",
                        "in": "query",
                        "description": "key=value; repeat for more (all must match).",
                        "schema": {"type": "array", "items": {"type": "string"}},
                        "style": "form",
                        "explode": True,
                    },
                ],
                "responses": _answers(
                    200,
                    {
                        "type": "object",
                        "properties": {
                            "assistants": {"type": "array", "items": _ASSISTANT},
                            "next_cursor": {"type": ["string", "null"]},
                        },
                    },
                ),
            },
        },
        "/assistants/{id}": {
            "get": {
                "summary": "Read an assistant (its current version's config)",
                "parameters": [_ID],
                "responses": _answers(200, _ASSISTANT, 404),
            },
            "patch": {
                "summary": "Store a new version (the whole config) and make it current",
                "parameters": [_ID],
                "requestBody": _body(
                    {"config": _CONFIG, "description": {"type": "string", "maxLength": 4096}},
                    "config",
                ),
                "responses": _answers(200, _ASSISTANT, 404, 413),
            },
        },
        "/assistants/{id}/versions": {
            "get": {
                "summary": "Every kept version, oldest first",
                "parameters": [_ID],
                "responses": _answers(
                    200,
                    {
                        "type": "object",
                        "properties": {"versions": {"type": "array", "items": {"type": "object"}}},
                    },
                    404,
                ),
            }
        },
        "/assistants/{id}/rollback": {
            "post": {
                "summary": "Make a kept version current again",
                "parameters": [_ID],
                "requestBody": _body({"version": {"type": "integer", "minimum": 1}}, "version"),
                "responses": _answers(200, _ASSISTANT, 404, 413),
            }
        },
    }
