"""The task API's memory and session routes (``task_app(runner, memory=..., sessions=...)``).

Routes, behind the app's ``authenticate`` like every other::

    PUT    /memory/items        {"namespace": [...], "key", "value", "if_rev"?, "ttl"?} -> {"rev"}
    GET    /memory/items        ?namespace=a&namespace=b&key=k -> the item (404: none)
    DELETE /memory/items        ?namespace=...&key=...&if_rev=? -> {"deleted": bool}
    POST   /memory/list         {"namespace_prefix"?, "limit"?, "cursor"?} -> a page
    POST   /memory/search       {"namespace_prefix"?, "query"?, "filter"?, "limit"?} -> {"items"}
    POST   /memory/namespaces   {"namespace_prefix"?} -> {"namespaces"}
    GET    /sessions            ?prefix=&after=&limit= -> {"sessions"}
    GET    /sessions/{id}       ?last= -> {"session_id", "entries": [{"seq", "turn", "message"}]}
    POST   /sessions/{id}       {"messages": [...], "turn"?} -> {"length"}
    DELETE /sessions/{id}       -> {"removed"}

A namespace is a list of labels (a repeated ``namespace`` query parameter on GET and DELETE).
A conditional write that loses is a 409 naming the current revision.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pydantic
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tensorsketch.errors import BackendUnavailableError
from tensorsketch.memory import Item, MemoryConflictError, MemoryStore, SessionStore
from tensorsketch.messages import Message
from tensorsketch.serve._authorization import Gatekeeper
from tensorsketch.serve._http import ServeError, read_json

__all__ = ["MEMORY_QUERY", "MemoryRoutes"]

Endpoint = Callable[[Request], Awaitable[Response]]

#: The query parameters each memory route takes; ``namespace`` may be repeated.
MEMORY_QUERY: dict[str, frozenset[str]] = {
    "GET /memory/items": frozenset({"namespace", "key"}),
    "DELETE /memory/items": frozenset({"namespace", "key", "if_rev"}),
    "GET /sessions": frozenset({"prefix", "after", "limit"}),
    "GET /sessions/{id}": frozenset({"last"}),
}
_PUT_KEYS = frozenset({"namespace", "key", "value", "if_rev", "ttl"})
_LIST_KEYS = frozenset({"namespace_prefix", "limit", "cursor"})
_SEARCH_KEYS = frozenset({"namespace_prefix", "query", "filter", "limit"})
_NAMESPACES_KEYS = frozenset({"namespace_prefix"})
_APPEND_KEYS = frozenset({"messages", "turn"})
_MESSAGES = pydantic.TypeAdapter(list[Message])


def item_json(item: Item) -> dict[str, Any]:
    """An item as the API answers it."""
    value = (
        item.value.model_dump(mode="json")
        if isinstance(item.value, pydantic.BaseModel)
        else item.value
    )
    return {
        "namespace": list(item.namespace),
        "key": item.key,
        "value": value,
        "rev": item.rev,
        "created_at": item.created_at,
        "updated_at": item.updated_at,
        "expires_at": item.expires_at,
        "score": item.score,
    }


async def _body(request: Request, route: str, allowed: frozenset[str]) -> dict[str, Any]:
    body = await read_json(request)
    if not isinstance(body, dict):
        raise ServeError(400, f"the body must be a JSON object, got {type(body).__name__}.")
    extra = sorted(set(body) - allowed)
    if extra:
        raise ServeError(
            400,
            f"unknown field(s) {extra}; {route} takes {sorted(allowed)}.",
            param=extra[0],
        )
    return body


def _labels(value: Any, name: str, *, allow_empty: bool) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ServeError(
            400, f'`{name}` must be a list of strings, like ["users", "u1"].', param=name
        )
    if not value and not allow_empty:
        raise ServeError(400, f"`{name}` must name at least one label.", param=name)
    return tuple(value)


def _int(value: Any, name: str) -> int:
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise ServeError(
                400, f"`{name}` must be an integer, got {value!r}.", param=name
            ) from None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ServeError(400, f"`{name}` must be an integer, got {value!r}.", param=name)
    if not -(1 << 63) <= value < 1 << 63:  # what every store's integer columns hold
        raise ServeError(400, f"`{name}` must fit in 64 bits, got {value}.", param=name)
    return value


class MemoryRoutes:
    """The endpoints over one memory store and/or one session store."""

    def __init__(
        self,
        memory: MemoryStore | None,
        sessions: SessionStore | None,
        gatekeeper: Gatekeeper | None = None,
    ) -> None:
        if memory is not None and not isinstance(memory, MemoryStore):
            msg = f"task_app(memory=...) needs a MemoryStore, got {type(memory).__name__}."
            raise TypeError(msg)
        if sessions is not None and not isinstance(sessions, SessionStore):
            msg = f"task_app(sessions=...) needs a SessionStore, got {type(sessions).__name__}."
            raise TypeError(msg)
        self.memory = memory
        self.sessions = sessions
        #: Per-user authorization (``task_app(authorize=...)``); lets all through without.
        self.gatekeeper = gatekeeper or Gatekeeper(None, None)

    def endpoints(self) -> list[tuple[str, str, Endpoint]]:
        """``(method, path, endpoint)`` for each route the configured stores serve."""
        found: list[tuple[str, str, Endpoint]] = []
        if self.memory is not None:
            found += [
                ("PUT", "/memory/items", self.put),
                ("GET", "/memory/items", self.get),
                ("DELETE", "/memory/items", self.delete),
                ("POST", "/memory/list", self.list),
                ("POST", "/memory/search", self.search),
                ("POST", "/memory/namespaces", self.namespaces),
            ]
        if self.sessions is not None:
            found += [
                ("GET", "/sessions", self.list_sessions),
                ("GET", "/sessions/{id}", self.read_session),
                ("POST", "/sessions/{id}", self.append_session),
                ("DELETE", "/sessions/{id}", self.clear_session),
            ]
        return found

    async def _call(self, work: Awaitable[Any]) -> Any:
        try:
            return await work
        except ServeError:
            raise
        except MemoryConflictError as exc:
            raise ServeError(409, str(exc), code="conflict") from None
        except BackendUnavailableError as exc:
            raise ServeError(
                503,
                f"the memory store is unavailable: {exc}",
                code="busy",
                headers={"Retry-After": "1"},
            ) from None
        except (ValueError, TypeError, LookupError) as exc:
            raise ServeError(400, str(exc), code="invalid_request") from None

    def _store(self) -> MemoryStore:
        assert self.memory is not None
        return self.memory

    def _session_store(self) -> SessionStore:
        assert self.sessions is not None
        return self.sessions

    def _address(self, request: Request) -> tuple[tuple[str, ...], str]:
        params = request.query_params
        namespace = _labels(params.getlist("namespace"), "namespace", allow_empty=False)
        keys = params.getlist("key")
        if len(keys) != 1:
            raise ServeError(400, "give the item's `key` once.", param="key")
        return namespace, keys[0]

    # -- memory items ---------------------------------------------------------------------

    async def put(self, request: Request) -> Response:
        body = await _body(request, "PUT /memory/items", _PUT_KEYS)
        for name in ("namespace", "key", "value"):
            if name not in body:
                raise ServeError(400, f"`{name}` is required.", param=name)
        namespace = _labels(body["namespace"], "namespace", allow_empty=False)
        await self.gatekeeper.memory(request, "update", namespace)
        if_rev = None if body.get("if_rev") is None else _int(body["if_rev"], "if_rev")
        ttl = body.get("ttl")
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float)):
            raise ServeError(400, f"`ttl` must be a number of seconds, got {ttl!r}.", param="ttl")
        rev = await self._call(
            self._store().put(namespace, body["key"], body["value"], if_rev=if_rev, ttl=ttl)
        )
        return JSONResponse({"rev": rev})

    async def get(self, request: Request) -> Response:
        namespace, key = self._address(request)
        await self.gatekeeper.memory(request, "read", namespace)
        item = await self._call(self._store().get(namespace, key))
        if item is None:
            raise ServeError(
                404, f"no item {key!r} in namespace {list(namespace)}.", code="not_found"
            )
        return JSONResponse(item_json(item))

    async def delete(self, request: Request) -> Response:
        namespace, key = self._address(request)
        await self.gatekeeper.memory(request, "delete", namespace)
        raw = request.query_params.get("if_rev")
        if_rev = None if raw is None else _int(raw, "if_rev")
        deleted = await self._call(self._store().delete(namespace, key, if_rev=if_rev))
        return JSONResponse({"deleted": deleted})

    async def list(self, request: Request) -> Response:
        body = await _body(request, "POST /memory/list", _LIST_KEYS)
        prefix = _labels(body.get("namespace_prefix", []), "namespace_prefix", allow_empty=True)
        prefix = await self.gatekeeper.memory_prefix(request, prefix)
        limit = _int(body.get("limit", 50), "limit")
        cursor = body.get("cursor")
        if cursor is not None and not isinstance(cursor, str):
            raise ServeError(400, "`cursor` must be the `next_cursor` of a page.", param="cursor")
        page = await self._call(self._store().list(prefix, limit=limit, cursor=cursor))
        shown = await self.gatekeeper.visible_items(request, page.items)
        return JSONResponse(
            {"items": [item_json(i) for i in shown], "next_cursor": page.next_cursor}
        )

    async def search(self, request: Request) -> Response:
        body = await _body(request, "POST /memory/search", _SEARCH_KEYS)
        prefix = _labels(body.get("namespace_prefix", []), "namespace_prefix", allow_empty=True)
        prefix = await self.gatekeeper.memory_prefix(request, prefix)
        query = body.get("query")
        if query is not None and not isinstance(query, str):
            raise ServeError(400, "`query` must be a string.", param="query")
        found = await self._call(
            self._store().search(
                prefix, query, filter=body.get("filter"), limit=_int(body.get("limit", 10), "limit")
            )
        )
        shown = await self.gatekeeper.visible_items(request, found)
        return JSONResponse({"items": [item_json(i) for i in shown]})

    async def namespaces(self, request: Request) -> Response:
        body = await _body(request, "POST /memory/namespaces", _NAMESPACES_KEYS)
        prefix = _labels(body.get("namespace_prefix", []), "namespace_prefix", allow_empty=True)
        prefix = await self.gatekeeper.memory_prefix(request, prefix)
        found = await self._call(self._store().list_namespaces(prefix))
        shown = await self.gatekeeper.visible_namespaces(request, found)
        return JSONResponse({"namespaces": [list(ns) for ns in shown]})

    # -- sessions -----------------------------------------------------------------------------

    async def list_sessions(self, request: Request) -> Response:
        params = request.query_params
        limit = _int(params.get("limit", "100"), "limit")
        prefix = await self.gatekeeper.session_prefix(request, params.get("prefix", ""))
        ids = await self._call(
            self._session_store().sessions(prefix=prefix, after=params.get("after"), limit=limit)
        )
        return JSONResponse({"sessions": await self.gatekeeper.visible_sessions(request, ids)})

    async def read_session(self, request: Request) -> Response:
        session_id = request.path_params["id"]
        await self.gatekeeper.session(request, "read")
        raw = request.query_params.get("last")
        last = None if raw is None else _int(raw, "last")
        entries = await self._call(self._session_store().read(session_id, last=last))
        return JSONResponse(
            {
                "session_id": session_id,
                "entries": [
                    {"seq": e.seq, "turn": e.turn, "message": e.message.model_dump(mode="json")}
                    for e in entries
                ],
            }
        )

    async def append_session(self, request: Request) -> Response:
        body = await _body(request, "POST /sessions/{id}", _APPEND_KEYS)
        await self.gatekeeper.session(request, "update")
        if "messages" not in body:
            raise ServeError(400, "`messages` is required: a list of messages.", param="messages")
        try:
            messages = _MESSAGES.validate_python(body["messages"])
        except pydantic.ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"])
            raise ServeError(
                400,
                f"`messages` is not a list of messages: at {where}: {problem['msg']}.",
                param="messages",
            ) from None
        turn = body.get("turn")
        if turn is not None and not isinstance(turn, str):
            raise ServeError(400, "`turn` must be a string.", param="turn")
        length = await self._call(
            self._session_store().append(request.path_params["id"], messages, turn=turn)
        )
        return JSONResponse({"length": length})

    async def clear_session(self, request: Request) -> Response:
        await self.gatekeeper.session(request, "delete")
        removed = await self._call(self._session_store().clear(request.path_params["id"]))
        return JSONResponse({"removed": removed})
