"""The OpenAPI paths of the task API's memory and session routes (:mod:`._memory_http`),
added to ``/openapi.json`` when the app serves a memory or session store."""

from __future__ import annotations

from typing import Any

__all__ = ["memory_paths"]

_ERROR_REF = {"type": "object", "required": ["error"]}
_LABELS = {"type": "array", "items": {"type": "string", "minLength": 1}}
_NAMESPACE_QUERY = {
    "name": "namespace",
    "in": "query",
    "required": True,
    "description": "The namespace's labels, in order: repeat the parameter for each.",
    "schema": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    "style": "form",
    "explode": True,
}
_KEY_QUERY = {"name": "key", "in": "query", "required": True, "schema": {"type": "string"}}
_ITEM = {
    "type": "object",
    "required": ["namespace", "key", "value", "rev"],
    "properties": {
        "namespace": _LABELS,
        "key": {"type": "string"},
        "value": {},
        "rev": {"type": "integer"},
        "created_at": {"type": "number"},
        "updated_at": {"type": "number"},
        "expires_at": {"type": ["number", "null"]},
        "score": {"type": ["number", "null"]},
    },
}
_MESSAGE = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"type": "string", "enum": ["system", "user", "assistant", "tool"]},
        "content": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}]},
        "tool_calls": {"type": "array", "items": {"type": "object"}},
        "tool_call_id": {"type": ["string", "null"]},
        "name": {"type": ["string", "null"]},
        "is_error": {"type": "boolean"},
        "id": {"type": ["string", "null"]},
    },
}
_SESSION_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1, "maxLength": 512},
}
_DESCRIBED = {
    400: "the body or a parameter is wrong (the message says which)",
    401: "not authenticated",
    403: (
        "outside the caller's memory or sessions (task_app(authorize=...)): the message "
        "names the caller's scope"
    ),
    404: "no such item",
    409: "a conditional write lost: the message names the current revision",
    413: "the body is too large",
    503: "the store is unavailable; retry after Retry-After seconds",
}


def _json(schema: Any) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _answers(schema: Any, *errors: int) -> dict[str, Any]:
    out: dict[str, Any] = {"200": {"description": "done", **_json(schema)}}
    for status in (400, 401, 403, 503, *errors):
        out[str(status)] = {"description": _DESCRIBED[status], **_json(_ERROR_REF)}
    return out


def _body(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": list(required),
        "properties": properties,
    }
    return {"required": True, **_json(schema)}


def _obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def memory_paths(*, memory: bool, sessions: bool) -> dict[str, Any]:
    """The paths for the stores an app serves."""
    paths: dict[str, Any] = {}
    if memory:
        prefix = {"namespace_prefix": _LABELS}
        paths["/memory/items"] = {
            "put": {
                "summary": "Store an item (conditionally with if_rev)",
                "requestBody": _body(
                    {
                        "namespace": {**_LABELS, "minItems": 1},
                        "key": {"type": "string", "minLength": 1},
                        "value": {},
                        "if_rev": {"type": "integer", "minimum": 0},
                        "ttl": {"type": "number", "exclusiveMinimum": 0},
                    },
                    "namespace",
                    "key",
                    "value",
                ),
                "responses": _answers(_obj(rev={"type": "integer"}), 409, 413),
            },
            "get": {
                "summary": "Read an item",
                "parameters": [_NAMESPACE_QUERY, _KEY_QUERY],
                "responses": _answers(_ITEM, 404),
            },
            "delete": {
                "summary": "Delete an item (conditionally with if_rev)",
                "parameters": [
                    _NAMESPACE_QUERY,
                    _KEY_QUERY,
                    {"name": "if_rev", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                ],
                "responses": _answers(_obj(deleted={"type": "boolean"}), 409),
            },
        }
        paths["/memory/list"] = {
            "post": {
                "summary": "Items under a namespace prefix, a page at a time",
                "requestBody": _body(
                    {
                        **prefix,
                        "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
                        "cursor": {"type": "string"},
                    }
                ),
                "responses": _answers(
                    _obj(
                        items={"type": "array", "items": _ITEM},
                        next_cursor={"type": ["string", "null"]},
                    ),
                    413,
                ),
            }
        }
        paths["/memory/search"] = {
            "post": {
                "summary": "Items under a prefix, ranked by a query (or newest first)",
                "requestBody": _body(
                    {
                        **prefix,
                        "query": {"type": "string"},
                        "filter": {"type": "object"},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
                    }
                ),
                "responses": _answers(_obj(items={"type": "array", "items": _ITEM}), 413),
            }
        }
        paths["/memory/namespaces"] = {
            "post": {
                "summary": "Namespaces holding live items under a prefix",
                "requestBody": _body(prefix),
                "responses": _answers(_obj(namespaces={"type": "array", "items": _LABELS}), 413),
            }
        }
    if sessions:
        paths["/sessions"] = {
            "get": {
                "summary": "Session ids, in order, a page at a time",
                "parameters": [
                    {"name": "prefix", "in": "query", "schema": {"type": "string"}},
                    {"name": "after", "in": "query", "schema": {"type": "string"}},
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                    },
                ],
                "responses": _answers(
                    _obj(sessions={"type": "array", "items": {"type": "string"}})
                ),
            }
        }
        entry = _obj(seq={"type": "integer"}, turn={"type": ["string", "null"]}, message=_MESSAGE)
        paths["/sessions/{id}"] = {
            "get": {
                "summary": "A session's messages in order (the last ones with ?last=)",
                "parameters": [
                    _SESSION_ID,
                    {"name": "last", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                ],
                "responses": _answers(
                    _obj(
                        session_id={"type": "string"},
                        entries={"type": "array", "items": entry},
                    )
                ),
            },
            "post": {
                "summary": "Append messages (a turn already appended adds nothing)",
                "parameters": [_SESSION_ID],
                "requestBody": _body(
                    {
                        "messages": {"type": "array", "items": _MESSAGE},
                        "turn": {"type": "string", "minLength": 1, "maxLength": 512},
                    },
                    "messages",
                ),
                "responses": _answers(_obj(length={"type": "integer"}), 413),
            },
            "delete": {
                "summary": "Forget a session's history",
                "parameters": [_SESSION_ID],
                "responses": _answers(_obj(removed={"type": "integer"})),
            },
        }
    return paths
