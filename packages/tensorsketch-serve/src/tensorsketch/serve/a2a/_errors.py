"""A2A's JSON-RPC errors: the code a client maps to an exception, and a message for people.

Every bad request is answered with one of these (HTTP 200, as JSON-RPC over HTTP does), never
with a server error: the codes are JSON-RPC's own (-32700 … -32603) and A2A's (-32001 …).
Each error's ``data`` is the list of typed details A2A 1.0 asks for: a ``google.rpc.ErrorInfo``
naming the reason (``TASK_NOT_FOUND``, …) in the ``a2a-protocol.org`` domain, its ``metadata``
the values a client needs (the a2a-sdk client hands them over as the exception's ``data``).
The 0.3 surface sends the same list (0.3 leaves ``data`` free-form).
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


ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
A2A_DOMAIN = "a2a-protocol.org"
#: The ErrorInfo ``reason`` of each code, as the a2a-sdk's server spells them (a parse error
#: is an invalid request there too).
REASONS = {
    -32700: "INVALID_REQUEST",
    -32600: "INVALID_REQUEST",
    -32601: "METHOD_NOT_FOUND",
    -32602: "INVALID_PARAMS",
    -32603: "INTERNAL_ERROR",
    -32001: "TASK_NOT_FOUND",
    -32002: "TASK_NOT_CANCELABLE",
    -32003: "PUSH_NOTIFICATION_NOT_SUPPORTED",
    -32004: "UNSUPPORTED_OPERATION",
    -32005: "CONTENT_TYPE_NOT_SUPPORTED",
    -32006: "INVALID_AGENT_RESPONSE",
    -32007: "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    -32008: "EXTENSION_SUPPORT_REQUIRED",
    -32009: "VERSION_NOT_SUPPORTED",
}


class A2AError(Exception):
    """A JSON-RPC error object waiting to be sent: ``{"code", "message", "data"}``.

    :param metadata: what the ErrorInfo's ``metadata`` carries (string values, as
        ``google.rpc.ErrorInfo`` has them), e.g. ``{"taskId": ...}``.
    """

    def __init__(self, code: int, message: str, metadata: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.metadata = metadata or {}

    @property
    def reason(self) -> str:
        return REASONS.get(self.code, "UNKNOWN_ERROR")

    def to_json(self) -> dict[str, Any]:
        info = {
            "@type": ERROR_INFO_TYPE,
            "reason": self.reason,
            "domain": A2A_DOMAIN,
            "metadata": self.metadata,
        }
        return {"code": self.code, "message": self.message, "data": [info]}


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
    return A2AError(
        -32001, f"task {task_id!r:.80} does not exist on this agent.", {"taskId": task_id[:80]}
    )


def task_not_cancelable(task_id: str, state: str) -> A2AError:
    return A2AError(
        -32002,
        f"task {task_id!r} is {state_word(state)} and can no longer be canceled.",
        {"taskId": task_id, "state": state},
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
