"""A2A's JSON-RPC errors: the code a client maps to an exception, and a message for people.

Every bad request is answered with one of these (HTTP 200, as JSON-RPC over HTTP does), never
with a server error: the codes are JSON-RPC's own (-32700 … -32603) and A2A's (-32001 …).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "A2AError",
    "internal_error",
    "invalid_params",
    "invalid_request",
    "method_not_found",
    "parse_error",
    "task_not_cancelable",
    "task_not_found",
    "unsupported",
    "version_not_supported",
]


class A2AError(Exception):
    """A JSON-RPC error object waiting to be sent: ``{"code", "message", "data"?}``."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def parse_error(detail: str) -> A2AError:
    return A2AError(
        -32700, f"the request body is not valid JSON ({detail}); send one JSON-RPC 2.0 object."
    )


def invalid_request(what: str) -> A2AError:
    return A2AError(-32600, f"invalid JSON-RPC request: {what}")


def method_not_found(method: str, known: list[str]) -> A2AError:
    return A2AError(
        -32601,
        f"method {method!r} does not exist here; this agent answers {', '.join(known)}.",
    )


def invalid_params(what: str) -> A2AError:
    return A2AError(-32602, f"invalid params: {what}")


def internal_error(what: str) -> A2AError:
    return A2AError(-32603, f"internal error: {what}")


def task_not_found(task_id: str) -> A2AError:
    return A2AError(-32001, f"task {task_id!r:.80} does not exist on this agent.")


def task_not_cancelable(task_id: str, state: str) -> A2AError:
    return A2AError(
        -32002, f"task {task_id!r} is {state_word(state)} and can no longer be canceled."
    )


def unsupported(what: str) -> A2AError:
    return A2AError(-32004, f"unsupported operation: {what}")


def version_not_supported(version: str) -> A2AError:
    return A2AError(
        -32009,
        f"A2A-Version {version!r} is not served here; send `A2A-Version: 1.0` (or 0.3 for the "
        "0.3 methods).",
    )


def state_word(state: str) -> str:
    """``TASK_STATE_INPUT_REQUIRED`` -> ``input-required`` (how people and 0.3 spell it)."""
    return state.removeprefix("TASK_STATE_").lower().replace("_", "-")
