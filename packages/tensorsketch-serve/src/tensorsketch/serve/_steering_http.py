"""``POST /tasks/{id}/steer``: a message into a run that executes (``AsyncRunner.steer``).

Kept apart from :mod:`._tasks` so the task app's factory only lists the route; the run it
touches is the ``{id}`` of the path, as for the other ``/tasks/{id}/...`` routes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from tensorsketch.runs import AsyncRunner, RunRecord
from tensorsketch.runs.steering import MAX_STEERING_CHARS
from tensorsketch.serve._http import ServeError

__all__ = ["ACTIONS", "SteeringRoutes", "steering_paths"]

#: The route's ``(resource, action)``: what a per-resource authorization handler keys on (the
#: run is the path's ``{id}``; its thread, and so its owner, is in the run's record).
ACTIONS: Final[dict[str, tuple[str, str]]] = {"POST /tasks/{id}/steer": ("runs", "steer")}

_SHAPE = '{"content": "<what the agent reads at its next model call>"}'


class SteeringRoutes:
    """The steering route of a task app.

    :param call: awaits runner work, turning its errors into HTTP ones (404, 409, 400).
    :param body: reads a request's JSON object body.
    :param respond: a run record as the app answers it, with a status code.
    """

    def __init__(
        self,
        runner: AsyncRunner,
        call: Callable[[Awaitable[Any]], Awaitable[Any]],
        body: Callable[[Request], Awaitable[dict[str, Any]]],
        respond: Callable[[RunRecord, int], Response],
    ) -> None:
        self.runner = runner
        self.call = call
        self.body = body
        self.respond = respond

    async def steer(self, request: Request) -> Response:
        body = await self.body(request)
        extra = sorted(set(body) - {"content"})
        if extra:
            raise ServeError(
                400, f"unknown field(s) {extra}; the body is {_SHAPE}.", param=extra[0]
            )
        content = body.get("content")
        if not isinstance(content, str) or not content.strip():
            raise ServeError(
                400,
                f"`content` must be a non-empty string; the body is {_SHAPE}.",
                param="content",
            )
        record = await self.call(self.runner.steer(request.path_params["id"], content))
        return self.respond(record, 202)

    def endpoints(self) -> list[tuple[str, str, Callable[[Request], Awaitable[Response]]]]:
        return [("POST", "/tasks/{id}/steer", self.steer)]


def steering_paths(answers: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """The route's OpenAPI path (``answers``: the task description's responses builder)."""
    schema = {
        "type": "object",
        "required": ["content"],
        "additionalProperties": False,
        "properties": {
            "content": {"type": "string", "minLength": 1, "maxLength": MAX_STEERING_CHARS}
        },
    }
    return {
        "/tasks/{id}/steer": {
            "post": {
                "summary": "Send a message into a queued or running run: its agent reads it "
                "at its next model call (409 for a suspended or finished run)",
                "parameters": [
                    {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": schema}},
                },
                "responses": answers(202, 400, 401, 404, 409, 413),
            }
        }
    }
