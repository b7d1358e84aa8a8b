"""``a2a_tool(url, name=...)``: a remote A2A agent as a TensorSketch ``Tool``.

The other side of :func:`a2a_app`: the tool sends the model's message to the agent at
``url`` with the a2a-sdk's client (which reads the agent's card and speaks 1.0 or 0.3, as the
card says) and returns the remote answer's text. Inside an agent a tool call is journaled
like any other, so a resumed run reads the recorded answer instead of asking again.

A remote task that stops on ``input-required`` is not an error: the tool returns the question
with the remote ``task_id`` / ``context_id``, and the model answers by calling the tool again
with them.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import A2AClientError, AgentCardResolutionError
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict

from tensorsketch.serve.a2a._parts import message_text
from tensorsketch.tools import Tool

__all__ = ["A2AToolError", "a2a_tool"]

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "What to ask or tell the remote agent."},
        "task_id": {
            "type": "string",
            "description": "Only to answer a remote task that asked for input: its task_id.",
        },
        "context_id": {
            "type": "string",
            "description": "To continue an earlier conversation with the remote agent.",
        },
    },
    "required": ["message"],
    "additionalProperties": False,
}
#: States in which a remote task waits for us rather than working.
_WAITING = {"TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"}
_FAILED = {"TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"}
_POLL_SECONDS = 0.5


class A2AToolError(RuntimeError):
    """The remote agent could not be reached, refused the message, or its task failed."""


def a2a_tool(
    url: str,
    *,
    name: str | None = None,
    description: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 300.0,
    card_path: str | None = None,
) -> Tool:
    """A :class:`~tensorsketch.tools.Tool` that hands a message to the A2A agent at ``url``.

    :param url: the agent's base URL (its card is read from ``/.well-known/agent-card.json``,
        or ``/.well-known/agent.json`` for a 0.3 agent without the newer path).
    :param name: the tool's name as the model sees it (default ``a2a_<host>``).
    :param headers: sent with every request (credentials, for example).
    :param timeout: seconds to wait for the remote task to finish.
    :param card_path: a card path other than the well-known ones.
    """
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        msg = f"a2a_tool() needs the agent's http(s) URL, got {url!r}."
        raise ValueError(msg)
    host = urlsplit(url).hostname or "agent"
    tool_name = name or "a2a_" + re.sub(r"[^A-Za-z0-9_-]+", "_", host)[:56]
    remote = _Remote(url, dict(headers or {}), float(timeout), card_path)
    text = description or (
        f"Ask the remote agent at {url} (over the A2A protocol) and return its answer."
    )
    return Tool.from_schema(tool_name, text, _SCHEMA, remote.ask)


class _Remote:
    """The connection details and the card, read once per tool."""

    def __init__(
        self, url: str, headers: dict[str, str], timeout: float, card_path: str | None
    ) -> None:
        self.url = url
        self.headers = headers
        self.timeout = timeout
        self.card_path = card_path
        self._card: Any = None

    async def _card_for(self, http: httpx.AsyncClient) -> Any:

        if self._card is not None:
            return self._card
        resolver = A2ACardResolver(http, self.url)
        paths = [self.card_path] if self.card_path else [None, "/.well-known/agent.json"]
        problem: Exception | None = None
        for path in paths:
            try:
                self._card = await resolver.get_agent_card(relative_card_path=path)
                return self._card
            except (AgentCardResolutionError, httpx.HTTPError) as exc:
                problem = exc
        msg = f"could not read the agent card of {self.url}: {problem}"
        raise A2AToolError(msg)

    async def ask(self, args: dict[str, Any]) -> str:

        deadline = time.monotonic() + self.timeout
        async with httpx.AsyncClient(timeout=self.timeout, headers=self.headers) as http:
            card = await self._card_for(http)
            client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
            message = pb.Message(
                message_id=uuid.uuid4().hex,
                role=pb.ROLE_USER,
                parts=[pb.Part(text=str(args["message"]))],
                task_id=args.get("task_id") or "",
                context_id=args.get("context_id") or "",
            )
            try:
                answer: Any = None
                async for response in client.send_message(pb.SendMessageRequest(message=message)):
                    answer = response
                if answer is None:
                    msg = f"the agent at {self.url} sent no answer."
                    raise A2AToolError(msg)
                if answer.HasField("message"):
                    return _text(answer.message.parts)
                task = answer.task
                while not _settled(task):
                    if time.monotonic() > deadline:
                        msg = f"the agent at {self.url} did not finish within {self.timeout}s."
                        raise A2AToolError(msg)
                    await asyncio.sleep(_POLL_SECONDS)
                    task = await client.get_task(pb.GetTaskRequest(id=task.id))
            except (A2AClientError, A2AError, httpx.HTTPError) as exc:
                msg = f"the agent at {self.url} refused the message: {exc}"
                raise A2AToolError(msg) from exc
            finally:
                await client.close()
        return _render(task)


def _settled(task: Any) -> bool:
    state = pb.TaskState.Name(task.status.state)
    return state in _WAITING or state in _FAILED or state == "TASK_STATE_COMPLETED"


def _render(task: Any) -> str:
    state = pb.TaskState.Name(task.status.state)
    said = _text(task.status.message.parts) if task.status.HasField("message") else ""
    if state in _FAILED:
        word = state.removeprefix("TASK_STATE_").lower()
        msg = f"the remote task {task.id} {word}" + (f": {said}" if said else ".")
        raise A2AToolError(msg)
    if state in _WAITING:
        return (
            f"The remote agent needs more input (task_id={task.id}, "
            f"context_id={task.context_id}): {said}\n"
            "Call this tool again with that task_id and context_id to answer."
        )
    answer = "\n".join(_text(a.parts) for a in task.artifacts if a.parts)
    return answer or said


def _text(parts: Any) -> str:
    return message_text({"parts": [MessageToDict(p) for p in parts]})
