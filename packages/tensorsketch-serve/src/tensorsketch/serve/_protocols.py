"""``serve(graph, protocols=[...])``: several protocol apps on one Starlette app.

Protocols are named: the first-party ones (``openai``, ``a2a``, ``agui``) and any a plugin adds
through the ``tensorsketch_serve_protocols`` hook come from one :data:`protocols` registry, so
``serve(graph, protocols=["openai", "acme"])`` and ``tensorsketch serve --protocol acme`` treat
them alike.

Each protocol is mounted at its :attr:`Protocol.path`. Several protocols may share ``/`` when
their routes do not overlap (OpenAI's ``/v1/...`` beside A2A's ``/`` and ``/.well-known/...``):
a request goes to the app with a route that matches it, so every app keeps its own error shape.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tensorsketch.registry import Registry

if TYPE_CHECKING:
    from tensorsketch.pregel.compiled import CompiledGraph

__all__ = ["Protocol", "protocols", "register_protocol", "serve"]

#: ``factory(graph, **options) -> ASGI app``.
AppFactory = Callable[..., ASGIApp]


@dataclass(frozen=True, slots=True)
class Protocol:
    """A serving protocol: how to build its app, and where :func:`serve` mounts it.

    :param factory: ``factory(graph, **options) -> ASGI app`` (``openai_app``, ...).
    :param path: the mount path (``"/"`` for protocols whose paths are fixed by their
        specification, such as ``/v1/chat/completions`` or ``/.well-known/agent-card.json``).
    :param endpoints: the paths under ``path`` a client calls, for ``tensorsketch serve``'s
        startup banner (none: the mount path itself).
    """

    factory: AppFactory
    path: str = "/"
    endpoints: tuple[str, ...] = ()

    def __call__(self, graph: CompiledGraph[Any], **options: Any) -> ASGIApp:
        return self.factory(graph, **options)


#: Every protocol name known to :func:`serve`: plugins' (the hook), entry points in the
#: ``tensorsketch.serve_protocols`` group, and :func:`register_protocol` calls.
protocols: Registry[ASGIApp] = Registry(
    "protocol", "tensorsketch_serve_protocols", "tensorsketch.serve_protocols"
)


def register_protocol(name: str, protocol: Protocol | AppFactory | str) -> None:
    """Add (or override) a protocol by name: a :class:`Protocol`, a bare factory (mounted at
    ``/<name>``), or a ``"module:attribute"`` string naming either."""
    protocols.register(name, protocol)


def _path_of(name: str, protocol: Any) -> str:
    path = protocol.path if isinstance(protocol, Protocol) else f"/{name}"
    if not path.startswith("/"):
        msg = f"protocol {name!r} has mount path {path!r}; a path starts with '/'."
        raise ValueError(msg)
    return path.rstrip("/") or "/"


def accepted_options(factory: Callable[..., Any]) -> set[str] | None:
    """The keyword options a factory takes (``None``: it takes ``**options``)."""
    target = factory.factory if isinstance(factory, Protocol) else factory
    names: set[str] = set()
    for index, param in enumerate(inspect.signature(target).parameters.values()):
        if param.kind is param.VAR_KEYWORD:
            return None
        if index and param.kind in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD):
            names.add(param.name)
    return names


def _names(requested: str | Iterable[str]) -> list[str]:
    names = [requested] if isinstance(requested, str) else list(requested)
    if "all" in names:
        names = protocols.names()
    if not names:
        msg = "serve(protocols=...) needs at least one protocol name, e.g. ['openai']."
        raise ValueError(msg)
    seen: list[str] = []
    for name in names:
        if name not in seen:
            seen.append(name)
    return seen


def serve(
    graph: CompiledGraph[Any],
    protocols: str | Sequence[str] = ("openai",),
    **options: Any,
) -> Starlette:
    """One Starlette app serving ``graph`` over each named protocol (``"all"``: every one).

    Each protocol's factory gets only the ``options`` its signature names, so
    ``serve(agent, ["openai", "a2a"], model="bot", card=AgentCard(...), backend=backend)``
    gives ``model`` to OpenAI, ``card`` to A2A and ``backend`` to both. An option no protocol
    takes is an error rather than silently ignored.
    """
    names = _names(protocols)
    built: list[tuple[str, str, ASGIApp]] = []
    used: set[str] = set()
    for name in names:
        factory = _registry().resolve(name)
        accepted = accepted_options(factory)
        mine = {k: v for k, v in options.items() if accepted is None or k in accepted}
        used |= set(mine)
        built.append((name, _path_of(name, factory), factory(graph, **mine)))
    unused = sorted(set(options) - used)
    if unused:
        msg = (
            f"serve(): no protocol of {names} takes {', '.join(repr(u) for u in unused)}; "
            "check the spelling against the protocol factories' options."
        )
        raise TypeError(msg)
    return _assemble(built)


def _registry() -> Registry[ASGIApp]:
    return protocols


def _assemble(built: list[tuple[str, str, ASGIApp]]) -> Starlette:
    by_path: dict[str, list[ASGIApp]] = {}
    for _, path, app in built:
        by_path.setdefault(path, []).append(app)
    routes: list[BaseRoute] = []
    for path in sorted(by_path, key=len, reverse=True):  # longest prefix first
        apps = by_path[path]
        target = apps[0] if len(apps) == 1 else _FirstMatch(apps)
        if path != "/":
            # ``POST /agui`` reaches the app mounted at ``/agui`` as ``/`` (a ``Mount`` alone
            # only matches ``/agui/...``, and the root app would answer 404).
            routes.append(Route(path, endpoint=_AtMountRoot(path, target)))
        routes.append(Mount("" if path == "/" else path, app=target))
    apps = [app for _, _, app in built]
    return Starlette(routes=routes, lifespan=_lifespans(apps))


def _lifespans(apps: Sequence[ASGIApp]) -> Callable[[Starlette], Any]:
    """Run each mounted Starlette app's own lifespan (``Mount`` does not)."""

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            for app in apps:
                router = getattr(app, "router", None)
                context = getattr(router, "lifespan_context", None)
                if context is not None:
                    await stack.enter_async_context(context(app))
            yield

    return lifespan


class _AtMountRoot:
    """Send a request for exactly ``prefix`` to the app mounted there, as its ``/``."""

    def __init__(self, prefix: str, app: ASGIApp) -> None:
        self.prefix = prefix.rstrip("/")
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        root = scope.get("root_path", "") + self.prefix
        inner = {**scope, "root_path": root, "path": root + "/"}
        await self.app(inner, receive, send)


class _FirstMatch:
    """Route a request to the first app with a route matching it fully (path and method),
    else to one matching the path only (so it answers 405), else to the first app (404)."""

    def __init__(self, apps: Sequence[ASGIApp]) -> None:
        self.apps = list(apps)

    def _pick(self, scope: Scope) -> ASGIApp:
        partial: ASGIApp | None = None
        for app in self.apps:
            for route in getattr(app, "routes", ()):
                match, _ = route.matches(scope)
                if match is Match.FULL:
                    return app
                if match is Match.PARTIAL and partial is None:
                    partial = app
        return partial or self.apps[0]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # the outer app runs the lifespans
            return
        await self._pick(scope)(scope, receive, send)
