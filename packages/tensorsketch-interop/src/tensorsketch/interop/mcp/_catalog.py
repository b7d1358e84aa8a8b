"""The request handlers for a server's resources, prompts, subscriptions and completions.

:func:`~tensorsketch.interop.mcp.build_mcp_server` hands the SDK's ``Server`` only the
handlers of what it serves, so a server without prompts does not claim the ``prompts``
capability (and a client asking for them gets "method not found").
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

import mcp_types as types
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPError as SDKError
from mcp.shared.subscriptions import ResourceUpdated

from tensorsketch.interop.mcp._notify import current_request
from tensorsketch.interop.mcp._served import MCPPrompt, MCPResource, complete_values

__all__ = ["RESOURCE_NOT_FOUND", "Catalog"]

#: The JSON-RPC error code the MCP spec gives a read of a resource the server does not have.
RESOURCE_NOT_FOUND = -32002

Ctx = ServerRequestContext[Any, Any]


class Catalog:
    """A server's resources (fixed and templated) and prompts, and who subscribed to what."""

    def __init__(self, resources: Iterable[MCPResource], prompts: Iterable[MCPPrompt]) -> None:
        self.fixed: dict[str, MCPResource] = {}
        self.templates: list[MCPResource] = []
        self.prompts: dict[str, MCPPrompt] = {}
        #: The connections subscribed to each resource URI (``resources/subscribe``, up to
        #: the 2025-11-25 revision).
        self.subscribed: dict[str, weakref.WeakSet[Connection]] = {}
        #: Where resource changes go for ``subscriptions/listen`` streams (2026-07-28).
        self.bus = InMemorySubscriptionBus()
        for item in resources:
            self._add_resource(item)
        for entry in prompts:
            if not isinstance(entry, MCPPrompt):
                msg = f"prompts= takes functions decorated with @prompt, got {entry!r}."
                raise TypeError(msg)
            if entry.name in self.prompts:
                msg = f"two prompts are named {entry.name!r}."
                raise ValueError(msg)
            self.prompts[entry.name] = entry

    def _add_resource(self, item: MCPResource) -> None:
        if not isinstance(item, MCPResource):
            msg = f"resources= takes functions decorated with @resource(uri), got {item!r}."
            raise TypeError(msg)
        known = [t.uri for t in self.templates] if item.is_template else list(self.fixed)
        if item.uri in known:
            msg = f"two resources have the URI {item.uri!r}."
            raise ValueError(msg)
        if item.is_template:
            self.templates.append(item)
        else:
            self.fixed[item.uri] = item

    def handlers(self) -> dict[str, Any]:
        """The ``Server(...)`` handler arguments for what this catalog holds."""
        found: dict[str, Any] = {}
        if self.fixed or self.templates:
            found.update(
                on_list_resources=self.list_resources,
                on_list_resource_templates=self.list_templates,
                on_read_resource=self.read,
                on_subscribe_resource=self.subscribe,
                on_unsubscribe_resource=self.unsubscribe,
                on_subscriptions_listen=ListenHandler(self.bus),
            )
        if self.prompts:
            found.update(on_list_prompts=self.list_prompts, on_get_prompt=self.get_prompt)
        if any(r.complete for r in self.templates) or any(
            p.complete for p in self.prompts.values()
        ):
            found["on_completion"] = self.complete
        return found

    def find(self, uri: str) -> tuple[MCPResource, dict[str, str]]:
        """The resource serving ``uri`` and its placeholder values (an MCP error if none)."""
        if uri in self.fixed:
            return self.fixed[uri], {}
        for template in self.templates:
            values = template.match(uri)
            if values is not None:
                return template, values
        known = sorted([*self.fixed, *(t.uri for t in self.templates)])
        msg = f"Unknown resource {uri!r}; this server has {known}."
        raise SDKError(RESOURCE_NOT_FOUND, msg)

    # -- handlers -----------------------------------------------------------------------------

    async def list_resources(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[r.describe() for r in self.fixed.values()])

    async def list_templates(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[t.describe_template() for t in self.templates]
        )

    async def read(
        self, ctx: Ctx, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        found, values = self.find(uri)
        token = current_request.set(ctx)
        try:
            return await found.read(uri, values)
        except LookupError as exc:
            raise SDKError(RESOURCE_NOT_FOUND, f"resource {uri!r}: {exc}") from exc
        except (ValueError, TypeError) as exc:
            raise SDKError(types.INVALID_PARAMS, f"resource {uri!r}: {exc}") from exc
        finally:
            current_request.reset(token)

    async def subscribe(self, ctx: Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        uri = str(params.uri)
        self.find(uri)
        self.subscribed.setdefault(uri, weakref.WeakSet()).add(_connection(ctx))
        return types.EmptyResult()

    async def unsubscribe(
        self, ctx: Ctx, params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        sessions = self.subscribed.get(str(params.uri))
        if sessions is not None:
            sessions.discard(_connection(ctx))
        return types.EmptyResult()

    async def list_prompts(
        self, ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[p.describe() for p in self.prompts.values()])

    async def get_prompt(
        self, ctx: Ctx, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        found = self.prompts.get(params.name)
        if found is None:
            msg = f"Unknown prompt {params.name!r}; this server has {sorted(self.prompts)}."
            raise SDKError(types.INVALID_PARAMS, msg)
        token = current_request.set(ctx)
        try:
            return await found.render(dict(params.arguments or {}))
        except (ValueError, TypeError) as exc:
            raise SDKError(types.INVALID_PARAMS, str(exc)) from exc
        finally:
            current_request.reset(token)

    async def complete(self, ctx: Ctx, params: types.CompleteRequestParams) -> types.CompleteResult:
        ref = params.ref
        owner: MCPPrompt | MCPResource | None
        if isinstance(ref, types.PromptReference):
            owner = self.prompts.get(ref.name)
            known = sorted(self.prompts)
            asked = f"prompt {ref.name!r}"
        else:
            owner = next((t for t in self.templates if t.uri == ref.uri), None)
            known = [t.uri for t in self.templates]
            asked = f"resource template {ref.uri!r}"
        if owner is None:
            msg = f"completion/complete: no {asked}; this server has {known}."
            raise SDKError(types.INVALID_PARAMS, msg)
        completer = owner.complete.get(params.argument.name)
        if completer is None:
            return types.CompleteResult(completion=types.Completion(values=[]))
        return types.CompleteResult(
            completion=await complete_values(completer, params.argument.value)
        )

    async def updated(self, uri: str) -> int:
        """Tell every subscriber of ``uri`` it changed; returns how many connections were
        told directly (``subscriptions/listen`` streams are told through the bus)."""
        await self.bus.publish(ResourceUpdated(uri=uri))
        connections = self.subscribed.get(uri)
        told = 0
        for connection in list(connections or ()):
            try:
                await connection.send_resource_updated(uri)
                told += 1
            except Exception:
                if connections is not None:
                    connections.discard(connection)
        return told


def _connection(ctx: Ctx) -> Connection:
    """The client connection a request came on (the SDK hands handlers the per-request
    session; its connection outlives the request, as a subscription must)."""
    connection = getattr(ctx.session, "_connection", None)
    if not isinstance(connection, Connection):  # pragma: no cover - an SDK change
        msg = "this MCP SDK version does not expose the request's connection"
        raise SDKError(types.INTERNAL_ERROR, msg)
    return connection
