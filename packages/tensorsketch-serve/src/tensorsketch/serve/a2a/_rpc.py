"""A2A's JSON-RPC surface, both versions, over one :class:`TaskService`.

Requests are read with the a2a-sdk's own wire types — A2A 1.0's protobuf messages (parsed
from JSON the way the spec's JSON mapping says) and 0.3's pydantic models, converted to 1.0
with the SDK's conversions — so what is accepted, and how answers are spelled, is what the
reference implementation does, while the dispatch, the task store and the run mapping are
ours. The method name picks the version (``SendMessage`` is 1.0, ``message/send`` is 0.3); an
``A2A-Version`` header naming a version this server does not serve is refused with -32009.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3 import types as v03
from a2a.types import a2a_pb2 as pb
from google.protobuf.descriptor import Descriptor
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message as ProtoMessage
from pydantic import ValidationError

from tensorsketch._lone_surrogates import has_lone_surrogate
from tensorsketch.serve._http import LONE_SURROGATE
from tensorsketch.serve.a2a import _errors as errors
from tensorsketch.serve.a2a._tasks import TaskService

__all__ = ["Answer", "Dispatcher"]

#: What a call produces: one JSON-RPC response object, or a stream of them (SSE).
Answer = dict[str, Any] | AsyncIterator[dict[str, Any]]
log = logging.getLogger("tensorsketch.serve.a2a")
_Handler = Callable[[dict[str, Any]], Awaitable[Any]]

V1_METHODS: dict[str, type[ProtoMessage]] = {
    "SendMessage": pb.SendMessageRequest,
    "SendStreamingMessage": pb.SendMessageRequest,
    "GetTask": pb.GetTaskRequest,
    "ListTasks": pb.ListTasksRequest,
    "CancelTask": pb.CancelTaskRequest,
    "SubscribeToTask": pb.SubscribeToTaskRequest,
    "CreateTaskPushNotificationConfig": pb.TaskPushNotificationConfig,
    "GetTaskPushNotificationConfig": pb.GetTaskPushNotificationConfigRequest,
    "ListTaskPushNotificationConfigs": pb.ListTaskPushNotificationConfigsRequest,
    "DeleteTaskPushNotificationConfig": pb.DeleteTaskPushNotificationConfigRequest,
}
V03_METHODS: dict[str, tuple[type[Any], Callable[[Any], ProtoMessage]]] = {
    "message/send": (v03.SendMessageRequest, conversions.to_core_send_message_request),
    "message/stream": (v03.SendStreamingMessageRequest, conversions.to_core_send_message_request),
    "tasks/get": (v03.GetTaskRequest, conversions.to_core_get_task_request),
    "tasks/cancel": (v03.CancelTaskRequest, conversions.to_core_cancel_task_request),
    "tasks/resubscribe": (
        v03.TaskResubscriptionRequest,
        conversions.to_core_subscribe_to_task_request,
    ),
    "tasks/pushNotificationConfig/set": (
        v03.SetTaskPushNotificationConfigRequest,
        conversions.to_core_create_task_push_notification_config_request,
    ),
    "tasks/pushNotificationConfig/get": (
        v03.GetTaskPushNotificationConfigRequest,
        conversions.to_core_get_task_push_notification_config_request,
    ),
    "tasks/pushNotificationConfig/list": (
        v03.ListTaskPushNotificationConfigRequest,
        conversions.to_core_list_task_push_notification_config_request,
    ),
    "tasks/pushNotificationConfig/delete": (
        v03.DeleteTaskPushNotificationConfigRequest,
        conversions.to_core_delete_task_push_notification_config_request,
    ),
}
_STREAMING = {"SendStreamingMessage", "SubscribeToTask", "message/stream", "tasks/resubscribe"}


class Dispatcher:
    """Turns one JSON-RPC request body into a response object or a stream of them."""

    def __init__(self, service: TaskService, *, streaming: bool = True) -> None:
        self.service = service
        self.streaming = streaming
        self._handlers: dict[str, _Handler] = {
            "SendMessage": service.send,
            "SendStreamingMessage": service.send_stream,
            "GetTask": service.get,
            "ListTasks": service.list,
            "CancelTask": service.cancel,
            "SubscribeToTask": service.subscribe,
            "CreateTaskPushNotificationConfig": service.create_push,
            "GetTaskPushNotificationConfig": service.get_push,
            "ListTaskPushNotificationConfigs": service.list_push,
            "DeleteTaskPushNotificationConfig": service.delete_push,
        }
        # 0.3 methods run the same operations; what a 0.3 client registers or sends is
        # marked as 0.3's, so its push notifications come in 0.3's shape
        self._v03_handlers: dict[str, _Handler] = {
            "message/send": partial(service.send, surface="0.3"),
            "message/stream": partial(service.send_stream, surface="0.3"),
            "tasks/get": service.get,
            "tasks/cancel": service.cancel,
            "tasks/resubscribe": service.subscribe,
            "tasks/pushNotificationConfig/set": partial(service.create_push, surface="0.3"),
            "tasks/pushNotificationConfig/get": service.get_push,
            "tasks/pushNotificationConfig/list": service.list_push,
            "tasks/pushNotificationConfig/delete": service.delete_push,
        }

    async def dispatch(self, body: bytes, version: str | None) -> Answer:
        """The response object, or the stream of them; a failure is a JSON-RPC error object,
        never raised."""
        request_id: str | int | None = None
        try:
            payload = _decode(body)
            request_id = _readable_id(payload)
            if payload.get("jsonrpc") != "2.0":
                raise errors.invalid_request('`jsonrpc` must be "2.0".')
            _request_id(payload)
            method = payload.get("method")
            if not isinstance(method, str) or not method:
                raise errors.invalid_request("`method` must be a non-empty string.")
            _check_version(version)
            if method in _STREAMING and not self.streaming:
                raise errors.unsupported(f"this agent does not stream; call {_plain(method)}.")
            if method in V1_METHODS:
                params = _v1_params(method, payload.get("params"))
                result = await self._handlers[method](params)
                if method in _STREAMING:
                    return _v1_stream(request_id, result)
                return _result(request_id, result)
            if method in V03_METHODS:
                params = _v03_params(method, payload)
                result = await self._v03_handlers[method](params)
                if method in _STREAMING:
                    return _v03_stream(request_id, result)
                return _result(request_id, _to_v03(method, result))
            if method in ("GetExtendedAgentCard", "agent/getAuthenticatedExtendedCard"):
                raise errors.A2AError(-32007, "this agent has no extended agent card.")
            raise errors.method_not_found(method, [*V1_METHODS, *V03_METHODS])
        except errors.A2AError as exc:
            return error_response(request_id, exc)
        except Exception:  # a real fault (the store is down, ...): logged, answered in JSON-RPC
            log.exception("A2A request %r failed", request_id)
            fault = errors.internal_error("the request failed; the server log has the details.")
            return error_response(request_id, fault)


def error_response(request_id: str | int | None, exc: errors.A2AError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": exc.to_json()}


def _result(request_id: str | int | None, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _plain(method: str) -> str:
    return {"SendStreamingMessage": "SendMessage", "message/stream": "message/send"}.get(
        method, "GetTask"
    )


def _decode(body: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise errors.parse_error(str(exc)[:200]) from None
    if has_lone_surrogate(body, payload):
        raise errors.invalid_request(LONE_SURROGATE)
    if isinstance(payload, list):
        raise errors.invalid_request("batch requests are not supported; send one object.")
    if not isinstance(payload, dict):
        raise errors.invalid_request("the body must be a JSON object.")
    return payload


def _no_constant(name: str) -> Any:
    msg = f"{name} is not a JSON value"
    raise ValueError(msg)


def _readable_id(payload: dict[str, Any]) -> str | int | None:
    """The request's id when it is one JSON-RPC allows, so even an invalid request's error
    names the request it answers; ``None`` otherwise."""
    rid = payload.get("id")
    if isinstance(rid, str | int) and not isinstance(rid, bool):
        return rid
    return None


def _request_id(payload: dict[str, Any]) -> str | int | None:
    rid = payload.get("id")
    if rid is None or (isinstance(rid, str | int) and not isinstance(rid, bool)):
        return rid
    raise errors.invalid_request("`id` must be a string, an integer or null.")


def _check_version(version: str | None) -> None:
    if not version:
        return  # no header: a 0.3 client, or a 1.0 client that does not send it
    parts = version.strip().split(".")
    try:
        major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        raise errors.version_not_supported(version) from None
    if major == 1 or (major, minor) == (0, 3):
        return
    raise errors.version_not_supported(version)


def _v1_params(method: str, params: Any) -> dict[str, Any]:
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise errors.invalid_params("`params` must be an object.")
    proto_type = V1_METHODS[method]
    bad = _unknown_enum_value(params, proto_type.DESCRIPTOR)
    if bad is not None:
        where, value, known = bad
        raise errors.invalid_params(
            f"`{where}` {value!r} is not one of {', '.join(known)} ({method})."
        )
    try:
        proto = ParseDict(params, proto_type(), ignore_unknown_fields=True)
    except Exception as exc:  # ParseError, and the TypeErrors/ValueErrors it lets through
        raise errors.invalid_params(f"{method} params do not match A2A 1.0: {exc}") from None
    return _canonical(method, proto)


def _unknown_enum_value(
    value: Any, descriptor: Descriptor, where: str = ""
) -> tuple[str, str, list[str]] | None:
    """The first enum field spelled with a name its enum does not have, as ``(path, value,
    known names)``: protobuf's ``ignore_unknown_fields`` (kept so newer clients' extra fields
    do no harm) would otherwise drop such a value silently, turning a typo into no filter."""
    if not isinstance(value, dict):
        return None
    for name, item in value.items():
        field = descriptor.fields_by_camelcase_name.get(name) or descriptor.fields_by_name.get(name)
        if field is None:
            continue
        path = f"{where}.{name}" if where else name
        items = item if isinstance(item, list) else [item]
        for one in items:
            if field.enum_type is not None and isinstance(one, str):
                known = field.enum_type.values_by_name
                if one not in known:
                    return path, one, [n for n in known if not n.endswith("_UNSPECIFIED")]
            elif field.message_type is not None and not field.message_type.GetOptions().map_entry:
                found = _unknown_enum_value(one, field.message_type, path)
                if found is not None:
                    return found
    return None


def _v03_params(method: str, payload: dict[str, Any]) -> dict[str, Any]:
    model, convert = V03_METHODS[method]
    try:
        request = model.model_validate(payload)
        proto = convert(request)
    except ValidationError as exc:
        raise errors.invalid_params(
            f"{method} params do not match A2A 0.3: {_brief(exc)}"
        ) from None
    except Exception as exc:
        raise errors.invalid_params(f"{method} params do not match A2A 0.3: {exc}") from None
    return _canonical(method, proto)


def _canonical(method: str, proto: ProtoMessage) -> dict[str, Any]:
    try:
        out: dict[str, Any] = MessageToDict(proto)
    except Exception as exc:  # what parsed but has no JSON form (a NaN in a Struct, ...)
        raise errors.invalid_params(f"{method} params cannot be stored as JSON: {exc}") from None
    return out


def _brief(exc: ValidationError) -> str:
    first = exc.errors()[:3]
    return "; ".join(f"{'.'.join(str(x) for x in e['loc']) or 'body'}: {e['msg']}" for e in first)


def _to_v03(method: str, result: Any) -> Any:
    """A 1.0 answer (``{"task": …}``, a ``Task``, a push config) in 0.3's spelling."""
    if method.startswith("tasks/pushNotificationConfig/"):
        return _push_to_v03(result)
    if method == "message/send" and "message" in result:  # a direct reply, not a task
        message = ParseDict(result["message"], pb.Message(), ignore_unknown_fields=True)
        return _dump(conversions.to_compat_message(message))
    task = result.get("task", result) if method == "message/send" else result
    return _dump(conversions.to_compat_task(ParseDict(task, pb.Task(), ignore_unknown_fields=True)))


def _push_to_v03(result: Any) -> Any:
    """A push config (or the list of them, or a delete's ``None``) as 0.3 spells it."""
    if result is None:
        return None
    configs = result.get("configs", [result])
    out = [
        _dump(
            conversions.to_compat_task_push_notification_config(
                ParseDict(config, pb.TaskPushNotificationConfig(), ignore_unknown_fields=True)
            )
        )
        for config in configs
    ]
    return out if "configs" in result else out[0]


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def _v1_stream(
    request_id: str | int | None, items: AsyncIterator[dict[str, Any]]
) -> AsyncIterator[dict[str, Any]]:
    async for item in items:
        yield _result(request_id, item)


async def _v03_stream(
    request_id: str | int | None, items: AsyncIterator[dict[str, Any]]
) -> AsyncIterator[dict[str, Any]]:
    async for item in items:
        response = ParseDict(item, pb.StreamResponse(), ignore_unknown_fields=True)
        yield _dump(conversions.to_compat_stream_response(response, request_id))
