"""The OpenAPI 3.1 description of the task API (served at ``/openapi.json``).

Written out by hand from the routes in :mod:`._tasks`, so clients (and schemathesis, which
the test suite points at it) see every endpoint, parameter, body and status the app answers.
"""

from __future__ import annotations

from typing import Any

from tensorsketch.durable.modes import DURABILITY_MODES
from tensorsketch.runs import MULTITASK_STRATEGIES

__all__ = ["TASK_SCHEMA", "answers", "openapi"]

_STATUS = ["queued", "running", "suspended", "succeeded", "failed", "cancelled"]

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}

_TASK = {
    "type": "object",
    "required": ["id", "thread_id", "status", "created_at", "version"],
    "properties": {
        "id": {"type": "string"},
        "thread_id": {"type": "string"},
        "graph": {"type": "string"},
        "status": {"type": "string", "enum": _STATUS},
        "kind": {"type": "string", "enum": ["run", "schedule", "assistant"]},
        "waiting_for": {
            "type": ["string", "null"],
            "enum": ["approval", "timer", "input", "event", "breakpoint", None],
        },
        "wake_at": {"type": ["number", "null"]},
        "interrupts": {"type": "array", "items": {"type": "object"}},
        "decisions": {"type": "object"},
        "events": {"type": "array", "items": {"type": "object"}},
        "idempotency_key": {"type": ["string", "null"]},
        "owner": {"type": ["string", "null"]},
        "lease_expires_at": {"type": ["number", "null"]},
        "created_at": {"type": "number"},
        "started_at": {"type": ["number", "null"]},
        "finished_at": {"type": ["number", "null"]},
        "error": {"type": ["object", "null"]},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "input": {},
        "output": {},
        "multitask_strategy": {"type": ["string", "null"]},
        "stop_requested": {"type": ["string", "null"]},
        "stopped_by": {"type": ["string", "null"]},
        "webhook": {"type": ["string", "null"]},
        "webhook_delivery": {"type": ["object", "null"]},
        "steering": {"type": "array", "items": {"type": "object"}},
        "steering_taken": {"type": "integer"},
        "assistant": {"type": ["object", "null"]},
        "durability": {"type": "string", "enum": list(DURABILITY_MODES)},
        "version": {"type": "integer"},
    },
}

#: A run record as the routes answer it (the schedule routes reuse it).
TASK_SCHEMA = _TASK

_CREATE_FIELDS: dict[str, Any] = {
    "input": {"type": ["object", "null"], "description": "State fields of the graph."},
    "thread_id": {"type": "string", "minLength": 1},
    "labels": {
        "type": "object",
        "maxProperties": 16,
        "additionalProperties": {"type": "string", "maxLength": 128},
    },
    "multitask_strategy": {
        "type": "string",
        "enum": list(MULTITASK_STRATEGIES),
        "description": "What this input does while the thread has a run queued or running: "
        "reject (409), enqueue (run after it), interrupt (stop it at its next superstep "
        "barrier, keep what it did, run on top) or rollback (stop it and discard its "
        "checkpoints). Default: the runner's (AsyncRunner(multitask_strategy=...)).",
    },
    "durability": {
        "type": "string",
        "enum": list(DURABILITY_MODES),
        "description": "When the run's checkpoints commit: sync (each superstep's before the "
        "next starts; the default), async (while the next runs, at most one behind) or exit "
        "(only when the run ends, suspends or fails). Kept in the record: a resume or a "
        "takeover by another instance uses the same mode.",
    },
    "assistant_id": {
        "type": "string",
        "minLength": 1,
        "description": "Run with this assistant's current version (its id or name); the "
        "record's `assistant` says which version.",
    },
    "webhook": {
        "type": "string",
        "maxLength": 2048,
        "description": "An http(s) URL the run's terminal record is POSTed to, signed "
        "(X-TensorSketch-Signature: sha256=HMAC-SHA256(secret, '<X-TensorSketch-Timestamp>.' "
        "+ body)); a 400 where the server sends no webhooks or the address is not public.",
    },
}

#: ``POST /tasks``: no ``stream`` (that is ``POST /runs``; a 400 says so).
_CREATE = {"type": "object", "additionalProperties": False, "properties": _CREATE_FIELDS}

_RUN = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        **_CREATE_FIELDS,
        "stream": {"type": "boolean", "description": "Answer with SSE of the run's events."},
    },
}

#: The words ``parse_approval`` reads (in any case, surrounding spaces ignored).
_APPROVE_WORDS = ["approve", "approved", "yes", "allow"]
_REJECT_WORDS = ["reject", "rejected", "no", "deny", "denied"]

_DECISION = {
    "oneOf": [
        {"type": "boolean"},
        {
            "type": "string",
            "enum": _APPROVE_WORDS + _REJECT_WORDS,
            "description": (
                f"approve: {', '.join(_APPROVE_WORDS)}; reject: {', '.join(_REJECT_WORDS)} "
                "(any case)"
            ),
        },
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["approved"],
            "properties": {
                "approved": {"type": "boolean"},
                "reason": {"type": "string"},
                "digest": {"type": "string", "description": "the pending call's, to bind to it"},
                "call_id": {"type": "string"},
                "args": {"type": "object"},
            },
        },
    ]
}

_EVENT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["type"],
    "properties": {
        "event_id": {"type": "string", "minLength": 1, "maxLength": 256},
        "type": {"type": "string", "minLength": 1, "maxLength": 128},
        "payload": {"type": "string", "maxLength": 65536},
    },
}


def _json(schema: Any) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def answers(ok: int, *errors: int, schema: Any = None) -> dict[str, Any]:
    described = {
        200: "the record",
        202: "accepted",
        400: "the body or a parameter is wrong (the message says which)",
        401: "not authenticated",
        403: "refused by authorization (task_app(authorize=...)): the thread belongs to another "
        "user, a label only the server sets, or a listing of someone else's runs",
        404: "no such task (also a run that is not the caller's, under task_app(authorize=...))",
        409: "the task's state does not allow it (or, submitting, the thread has a run in "
        "flight and multitask_strategy is reject)",
        413: "the body is too large",
        503: "busy or the store is unavailable; retry after Retry-After seconds",
    }
    out: dict[str, Any] = {str(ok): {"description": described[ok], **_json(schema or _TASK)}}
    for status in errors:
        out[str(status)] = {"description": described[status], **_json(_ERROR)}
    return out


_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}

#: Submitting with an ``assistant_id`` that names no assistant.
_NO_ASSISTANT = {
    "404": {"description": "no assistant of that `assistant_id`", **_json(_ERROR)},
}

#: ``resume`` and ``cancel`` use no body: none, or an empty object (anything else is a 400).
_NO_BODY = {
    "required": False,
    "description": "Nothing: leave the body out, or send {}.",
    **_json({"type": "object", "maxProperties": 0}),
}


def openapi(extra_paths: dict[str, Any] | None = None) -> dict[str, Any]:
    """The description as a JSON-ready dict (with ``extra_paths``: the memory routes')."""
    sse = {"text/event-stream": {"schema": {"type": "string"}}}
    description = _description(sse)
    description["paths"].update(extra_paths or {})
    return description


def _description(sse: dict[str, Any]) -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "TensorSketch task API",
            "version": "1",
            "description": (
                "Durable runs of one graph: submit, follow, approve, signal, resume, cancel. "
                "A query parameter an operation does not list, a single-valued one given "
                "twice, or a body field it does not take is a 400 that names it."
            ),
        },
        "paths": {
            "/runs": {
                "post": {
                    "summary": "Run and wait for the result (or stream its events)",
                    "parameters": [
                        {
                            "name": "wait",
                            "in": "query",
                            "schema": {"type": "number", "exclusiveMinimum": 0, "maximum": 300},
                        },
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "description": "Sending the same key again waits on (or streams "
                            "from its first event) the run it started, answered with "
                            "`Idempotent-Replayed: true`, unless that run failed; an empty "
                            "key is a 400.",
                            "schema": {"type": "string", "minLength": 1, "maxLength": 256},
                        },
                    ],
                    "requestBody": {"required": True, **_json(_RUN)},
                    "responses": {
                        **answers(200, 400, 401, 403, 409, 413, 503),
                        **_NO_ASSISTANT,
                        "202": {
                            "description": "still running after `wait` seconds",
                            **_json(_TASK),
                        },
                    },
                }
            },
            "/tasks": {
                "post": {
                    "summary": "Submit a run",
                    "parameters": [
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "description": "Submitting the same key again returns that run "
                            "(unless it failed); an empty key is a 400.",
                            "schema": {"type": "string", "minLength": 1, "maxLength": 256},
                        }
                    ],
                    "requestBody": {"required": True, **_json(_CREATE)},
                    "responses": {
                        **answers(202, 400, 401, 403, 409, 413, 503),
                        **_NO_ASSISTANT,
                        "200": {
                            "description": "the existing run of this Idempotency-Key",
                            **_json(_TASK),
                        },
                    },
                },
                "get": {
                    "summary": "List runs, oldest first",
                    "parameters": [
                        {
                            "name": "status",
                            "in": "query",
                            "description": "Repeatable (any of them); a value may also be a "
                            "comma-separated list.",
                            "style": "form",
                            "explode": True,
                            "schema": {
                                "type": "array",
                                "items": {"type": "string", "enum": _STATUS},
                            },
                        },
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
                        {"name": "thread_id", "in": "query", "schema": {"type": "string"}},
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                        },
                        {"name": "cursor", "in": "query", "schema": {"type": "string"}},
                    ],
                    "responses": answers(
                        200,
                        400,
                        401,
                        403,
                        schema={
                            "type": "object",
                            "properties": {
                                "tasks": {"type": "array", "items": _TASK},
                                "next_cursor": {"type": ["string", "null"]},
                            },
                        },
                    ),
                },
            },
            "/tasks/{id}": {
                "get": {
                    "summary": "One run",
                    "parameters": [_ID],
                    "responses": answers(200, 400, 401, 404),
                }
            },
            "/tasks/{id}/events": {
                "get": {
                    "summary": "The run's events as SSE (replay, then live)",
                    "parameters": [
                        _ID,
                        {
                            "name": "Last-Event-ID",
                            "in": "header",
                            "schema": {"type": "string", "pattern": "^[0-9]+$"},
                        },
                        {
                            "name": "since",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 0},
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "frames of id: seq, event: type, data: event",
                            "content": sse,
                        },
                        **{k: v for k, v in answers(200, 400, 401, 404).items() if k != "200"},
                    },
                },
                "post": {
                    "summary": "Deliver an event to a suspended run",
                    "parameters": [_ID],
                    "requestBody": {"required": True, **_json(_EVENT)},
                    "responses": answers(202, 400, 401, 404, 409, 413),
                },
            },
            "/tasks/{id}/approve": {
                "post": {
                    "summary": "Decide the approvals a suspended run waits for",
                    "parameters": [_ID],
                    "requestBody": {
                        "required": True,
                        **_json(
                            {
                                "type": "object",
                                "required": ["decisions"],
                                "additionalProperties": False,
                                "properties": {
                                    "decisions": {
                                        "type": "object",
                                        "minProperties": 1,
                                        "additionalProperties": _DECISION,
                                    }
                                },
                            }
                        ),
                    },
                    "responses": answers(200, 400, 401, 404, 409, 413),
                }
            },
            "/tasks/{id}/resume": {
                "post": {
                    "summary": "Continue a run stopped at a breakpoint (waiting_for: breakpoint)",
                    "parameters": [_ID],
                    "requestBody": _NO_BODY,
                    "responses": answers(200, 400, 401, 404, 409, 413),
                }
            },
            "/tasks/{id}/cancel": {
                "post": {
                    "summary": "Cancel a run",
                    "parameters": [_ID],
                    "requestBody": _NO_BODY,
                    "responses": answers(200, 400, 401, 404, 409, 413),
                }
            },
            "/healthz": {
                "get": {
                    "summary": "Liveness (no authentication)",
                    "responses": {
                        "200": {"description": "ok or draining", **_json({"type": "object"})},
                        "400": {"description": "a query parameter was sent", **_json(_ERROR)},
                        "503": {
                            "description": "the store cannot be reached",
                            **_json({"type": "object"}),
                        },
                    },
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics (no authentication)",
                    "responses": {
                        "200": {
                            "description": "text exposition",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                        "400": {"description": "a query parameter was sent", **_json(_ERROR)},
                    },
                }
            },
        },
    }
