"""``MCPSession``: one server connection that survives the server dying.

The SDK's ``Client`` is an async context manager whose task groups belong to the task that
entered it, while an agent calls tools from tasks of its own (parallel tool calls, per-call
timeouts). So each connection lives in a background task of its own — entered and exited
there — and requests from any task go through it. When the server goes away the session says
so clearly (:class:`MCPConnectionError`) and the next request connects again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shlex
import shutil
import sys
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

import anyio
import httpx2
import mcp_types as types
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.exceptions import MCPError as SDKError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from tensorsketch.interop.mcp._errors import (
    MCPConnectionError,
    MCPError,
    MCPTimeoutError,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "MCPSession",
    "RemoteSession",
    "http_session",
    "memory_session",
    "stdio_session",
]

_log = logging.getLogger("tensorsketch.interop.mcp")
#: Where a server's log messages go unless ``MCPSession.on_log`` is set.
_server_log = logging.getLogger("tensorsketch.interop.mcp.server")
_PY_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": logging.CRITICAL,
    "emergency": logging.CRITICAL,
}
T = TypeVar("T")

#: Seconds to wait for a server to answer one request (and to finish connecting).
DEFAULT_TIMEOUT = 30.0

#: An SDK connection we did not open: a ``Client`` or an initialized ``ClientSession``.
RemoteSession = Client | ClientSession

#: How a timeout error tells the caller to wait longer: the ``timeout=`` argument, or the
#: option of the command that made the session (``tensorsketch mcp tools`` sets ``--timeout``).
TIMEOUT_KNOB: ContextVar[str] = ContextVar("TIMEOUT_KNOB", default="`timeout=`")

#: The longest label a stdio server gets in messages (the command line, shortened).
LABEL_LIMIT = 60


def _mode(protocol: str) -> str:
    """The SDK's ``Client(mode=...)`` for a ``protocol=`` value."""
    if protocol in ("auto", "legacy") or protocol in MODERN_PROTOCOL_VERSIONS:
        return protocol
    if protocol in HANDSHAKE_PROTOCOL_VERSIONS:
        return "legacy"
    known = ["auto", "legacy", *MODERN_PROTOCOL_VERSIONS, *HANDSHAKE_PROTOCOL_VERSIONS]
    msg = f"protocol={protocol!r} is not an MCP protocol choice; use one of {known}."
    raise ValueError(msg)


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups: the SDK's task groups wrap it."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class _Connection:
    """One connected ``Client``, entered and exited inside its own task."""

    def __init__(self) -> None:
        self.client: Client | None = None
        self.broken = False
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def open(self, make: Callable[[], Client], timeout: float | None, label: str) -> None:
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._run(make, ready), name=f"mcp:{label}")
        try:
            async with asyncio.timeout(timeout):
                self.client = await asyncio.shield(ready)
        except TimeoutError:
            await self._abandon(ready)
            msg = (
                f"the MCP server `{label}` did not finish connecting within {timeout}s; check "
                f"that the command or URL starts an MCP server, or pass a larger "
                f"{TIMEOUT_KNOB.get()}."
            )
            raise MCPTimeoutError(msg, server=label) from None
        except Exception as exc:
            await self._abandon(ready)
            leaf = _leaf(exc)
            msg = (
                f"could not connect to the MCP server `{label}` ({type(leaf).__name__}: "
                f"{leaf}): it exited, refused the connection, or is not an MCP server."
            )
            raise MCPConnectionError(msg, server=label) from exc
        except BaseException:
            await self._abandon(ready)
            raise

    async def _abandon(self, ready: asyncio.Future[Client]) -> None:
        """Stop a connection nobody waits for any more, and take what its task left in
        ``ready`` (a failure stored there would be logged as never retrieved)."""
        await self.close()
        if ready.done() and not ready.cancelled():
            ready.exception()

    async def _run(self, make: Callable[[], Client], ready: asyncio.Future[Client]) -> None:
        try:
            async with make() as client:
                ready.set_result(client)
                await self._stop.wait()
        except asyncio.CancelledError:
            pass  # closed; a `ready` still waiting is cancelled below (not failed: unread)
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                _log.debug("MCP connection ended with %r", exc)
        finally:
            self.broken = True
            if not ready.done():
                ready.cancel()

    async def close(self) -> None:
        self.broken = True
        self._stop.set()
        task = self._task
        if task is None or task.done():
            return
        # The SDK shuts a stdio server down in bounded steps (close stdin, wait, kill);
        # cancel only a connection still stuck in its handshake.
        if self.client is None:
            task.cancel()
        with contextlib.suppress(BaseException):
            await task


class MCPSession:
    """A connection to one MCP server, used by :func:`mcp_tools` and the resource helpers.

    Made by :func:`stdio_session`, :func:`http_session` or :func:`memory_session` (which
    reconnect after the server dies), or by :meth:`of` around an SDK ``Client`` /
    ``ClientSession`` you opened yourself (which cannot reconnect). ``name`` is the name the
    server gave itself, and names it in errors and on trace spans.
    """

    def __init__(
        self,
        connect: Callable[..., Client] | None,
        *,
        label: str,
        timeout: float | None = DEFAULT_TIMEOUT,
        remote: RemoteSession | None = None,
        transport: str = "",
    ) -> None:
        self._connect = connect
        self._label = label
        self.timeout = timeout
        self._remote = remote
        self.transport = transport
        self._live: _Connection | None = None
        self._lock = asyncio.Lock()
        self._closed = False
        self._server_name: str | None = None
        self._protocol: str | None = None
        self.connections = 0  #: how many times this session has connected (reconnects count)
        #: Called with each log message the server sends (``notifications/message``); by
        #: default they go to the ``tensorsketch.interop.mcp.server`` logger.
        self.on_log: Callable[[types.LoggingMessageNotificationParams], Awaitable[None]] | None
        self.on_log = None
        self._watchers: dict[str, set[asyncio.Queue[None]]] = {}

    @classmethod
    def of(cls, source: MCPSession | RemoteSession) -> MCPSession:
        """The session for ``source``: itself, or a wrapper around an SDK client/session."""
        if isinstance(source, MCPSession):
            return source
        if isinstance(source, Client | ClientSession):
            session = cls(None, label="mcp", remote=source)
            session._learn(source)
            return session
        msg = (
            f"expected an MCP session (from `stdio_session`/`http_session`, or an SDK "
            f"`mcp.Client`/`mcp.ClientSession`), got {type(source).__name__}."
        )
        raise TypeError(msg)

    # -- what the server told us ------------------------------------------------------------

    @property
    def name(self) -> str:
        """The server's name (from its ``serverInfo``), else what was launched."""
        return self._server_name or self._label

    @property
    def protocol_version(self) -> str | None:
        """The negotiated MCP protocol version (``None`` before the first connection)."""
        return self._protocol

    def _learn(self, remote: RemoteSession) -> None:
        info = remote.server_info
        if info is not None and info.name:
            self._server_name = info.name
        self._protocol = remote.protocol_version

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> MCPSession:
        await self._client()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection (a stdio server process is stopped)."""
        self._closed = True
        async with self._lock:
            if self._live is not None:
                await self._live.close()
                self._live = None

    async def _client(self) -> RemoteSession:
        if self._remote is not None:
            return self._remote
        if self._closed:
            msg = f"the MCP session to {self.name} is closed; open a new one."
            raise MCPConnectionError(msg, server=self.name)
        async with self._lock:
            live = self._live
            if live is not None and not live.broken and live.client is not None:
                return live.client
            if live is not None:
                await live.close()
                self._live = None
            assert self._connect is not None
            live = _Connection()
            make = functools.partial(
                self._connect, message_handler=self._on_message, logging_callback=self._on_log
            )
            await live.open(make, self.timeout, self.name)
            assert live.client is not None
            self._live = live
            self.connections += 1
            self._learn(live.client)
            return live.client

    def _mark_broken(self) -> None:
        if self._live is not None:
            self._live.broken = True

    # -- what the server sends unasked --------------------------------------------------------

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.resource_changed(message.params.uri)

    def resource_changed(self, uri: str) -> None:
        """Wake every :meth:`watch` of ``uri`` (the server said it changed)."""
        for queue in self._watchers.get(uri, ()):
            queue.put_nowait(None)

    async def _on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        if self.on_log is not None:
            await self.on_log(params)
            return
        level = _PY_LEVELS.get(params.level, logging.INFO)
        origin = f"{self.name}/{params.logger}" if params.logger else self.name
        _server_log.log(level, "[%s] %s", origin, params.data)

    @contextlib.asynccontextmanager
    async def watch(self, uri: str) -> AsyncIterator[asyncio.Queue[None]]:
        """Subscribe to ``uri``: the queue gets an item each time the server says it changed.

        ``resources/subscribe`` up to the 2025-11-25 revision; a ``subscriptions/listen``
        stream on 2026-07-28.
        """
        remote = await self._client()
        queue: asyncio.Queue[None] = asyncio.Queue()
        if isinstance(remote, Client) and self._protocol in MODERN_PROTOCOL_VERSIONS:
            async with remote.listen(resource_subscriptions=[uri]) as stream:
                pump = asyncio.create_task(self._pump(stream, queue))
                try:
                    yield queue
                finally:
                    pump.cancel()
                    with contextlib.suppress(BaseException):
                        await pump
            return
        if self._remote is not None:
            msg = (
                "watching a resource on a 2025-11-25 server needs a session made by "
                "stdio_session/http_session/memory_session (an SDK client you opened "
                "yourself does not pass its notifications on)."
            )
            raise MCPError(msg, server=self.name)
        self._watchers.setdefault(uri, set()).add(queue)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await self.request(
                    f"resources/subscribe {uri!r}",
                    lambda r: r.subscribe_resource(uri),
                    self.timeout,
                )
            try:
                yield queue
            finally:
                with contextlib.suppress(MCPError), warnings.catch_warnings():
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await self.request(
                        f"resources/unsubscribe {uri!r}",
                        lambda r: r.unsubscribe_resource(uri),
                        self.timeout,
                    )
        finally:
            self._watchers[uri].discard(queue)

    @staticmethod
    async def _pump(stream: Any, queue: asyncio.Queue[None]) -> None:
        async for _event in stream:
            queue.put_nowait(None)

    # -- requests ---------------------------------------------------------------------------

    async def request(
        self, what: str, send: Callable[[RemoteSession], Awaitable[T]], timeout: float | None
    ) -> T:
        """Send one request, turning the SDK's failures into this module's errors."""
        remote = await self._client()
        try:
            return await send(remote)
        except SDKError as exc:
            if exc.code == types.REQUEST_TIMEOUT:
                msg = (
                    f"the MCP server {self.name} did not answer {what} within {timeout}s; "
                    f"the request was abandoned (pass a larger {TIMEOUT_KNOB.get()} if it is just "
                    "slow)."
                )
                raise MCPTimeoutError(msg, code=exc.code, server=self.name) from exc
            if exc.code == types.CONNECTION_CLOSED:
                self._mark_broken()
                raise self._gone(what) from exc
            msg = f"the MCP server {self.name} refused {what}: {exc.message} (code {exc.code})."
            raise MCPError(msg, code=exc.code, data=exc.data, server=self.name) from exc
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            self._mark_broken()
            raise self._gone(what) from exc
        except httpx2.TransportError as exc:
            self._mark_broken()
            raise self._gone(what, f" ({type(exc).__name__}: {exc})") from exc

    def _gone(self, what: str, detail: str = "") -> MCPConnectionError:
        again = "it reconnects on the next call" if self._connect else "open a new session"
        msg = (
            f"the connection to the MCP server {self.name} ended during {what}{detail}: the "
            f"server exited or went away; {again}."
        )
        return MCPConnectionError(msg, code=types.CONNECTION_CLOSED, server=self.name)

    async def _every_page(self, method: str, pick: Callable[[Any], list[T]]) -> list[T]:
        """Walk a paginated ``*/list`` method to the end (``pick`` takes a page's items)."""
        found: list[T] = []
        cursor: str | None = None
        while True:
            page = await self.request(
                method, functools.partial(_list_page, method, cursor=cursor), self.timeout
            )
            found.extend(pick(page))
            cursor = page.next_cursor
            if not cursor:
                return found

    async def list_tools(self) -> list[types.Tool]:
        """Every tool the server offers (all pages)."""
        return await self._every_page("tools/list", lambda page: page.tools)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        timeout: float | None,
        progress: ProgressFnT | None = None,
    ) -> types.CallToolResult:
        """Call one tool; ``timeout`` bounds the wait for its answer, ``progress`` is called
        with each progress report (``progress, total, message``) the tool sends."""
        return await self.request(
            f"tools/call {name!r}",
            lambda r: r.call_tool(
                name, dict(arguments), read_timeout_seconds=timeout, progress_callback=progress
            ),
            timeout,
        )

    async def list_resource_templates(self) -> list[types.ResourceTemplate]:
        """Every resource template the server lists (all pages)."""
        return await self._every_page(
            "resources/templates/list", lambda page: page.resource_templates
        )

    async def complete(
        self,
        ref: types.PromptReference | types.ResourceTemplateReference,
        argument: str,
        value: str,
    ) -> types.Completion:
        """The server's completions of one prompt or resource-template argument."""
        result = await self.request(
            "completion/complete",
            lambda r: r.complete(ref, {"name": argument, "value": value}),
            self.timeout,
        )
        return result.completion

    async def set_logging_level(self, level: types.LoggingLevel) -> None:
        """Ask the server for log messages at ``level`` and above (up to the 2025-11-25
        revision; 2026-07-28 servers take the level per request)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await self.request(
                "logging/setLevel", lambda r: r.set_logging_level(level), self.timeout
            )

    async def list_resources(self) -> list[types.Resource]:
        """Every resource the server lists (all pages)."""
        return await self._every_page("resources/list", lambda page: page.resources)

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        """Read one resource by URI."""
        return await self.request(
            f"resources/read {uri!r}", lambda r: r.read_resource(uri), self.timeout
        )

    async def list_prompts(self) -> list[types.Prompt]:
        """Every prompt template the server offers (all pages)."""
        return await self._every_page("prompts/list", lambda page: page.prompts)

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None = None
    ) -> types.GetPromptResult:
        """Render one prompt template with its arguments."""
        args = dict(arguments) if arguments else None
        return await self.request(
            f"prompts/get {name!r}", lambda r: r.get_prompt(name, args), self.timeout
        )

    def __repr__(self) -> str:
        return f"MCPSession({self.name!r}, protocol={self._protocol!r})"


async def _list_page(method: str, remote: RemoteSession, *, cursor: str | None) -> Any:
    """One page of ``tools/list``, ``resources/list`` or ``prompts/list``: ``Client`` takes
    the cursor itself, a bare ``ClientSession`` takes it inside ``params``."""
    kind = "resource_templates" if method == "resources/templates/list" else method.split("/")[0]
    fetch = getattr(remote, f"list_{kind}")
    if isinstance(remote, Client):
        return await fetch(cursor=cursor)
    return await fetch(params=types.PaginatedRequestParams(cursor=cursor))


# -- the transports ---------------------------------------------------------------------------


def _child_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """The server's extra environment: this interpreter's scripts first on ``PATH`` (as an
    activated virtualenv has them), so ``python`` and console scripts are the ones that see
    the packages installed here; then the caller's ``env``."""
    here = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "")
    extra: dict[str, str] = {}
    if path.split(os.pathsep)[0] != here:
        extra["PATH"] = here + os.pathsep + path if path else here
    extra.update(env or {})
    return extra


def command_label(command: str, args: Sequence[str], limit: int = LABEL_LIMIT) -> str:
    """How messages name a stdio server: its command line, with the program and script
    files as base names (``python server.py``), shortened to ``limit`` characters."""
    words = [os.path.basename(command) or command]
    words += [os.path.basename(a) if os.sep in a and os.path.isfile(a) else a for a in args]
    label = shlex.join(words)
    return label if len(label) <= limit else label[: limit - 3].rstrip() + "..."


def _check_command(command: str, env: Mapping[str, str]) -> None:
    """Fail before spawning, with the fix, when the command does not exist."""
    if shutil.which(command, path=env.get("PATH")) is None:
        msg = (
            f"cannot start the MCP server: command {command!r} was not found on PATH; pass "
            "the full path to the executable, or install it."
        )
        raise FileNotFoundError(msg)


@contextlib.asynccontextmanager
async def stdio_session(
    command: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    protocol: str = "auto",
) -> AsyncIterator[MCPSession]:
    """Launch ``command *args`` as an MCP server subprocess and yield a connected session.

    The server process is stopped when the block exits. If it dies mid-session, the call in
    flight fails with :class:`MCPConnectionError` and the next call starts it again.

    :param env: extra environment variables for the server (on top of the SDK's safe
        defaults; this interpreter's directory is put first on ``PATH``).
    :param timeout: seconds to wait for the server to connect, and for each answer.
    :param protocol: ``"auto"`` (the newest both sides speak), ``"legacy"`` (the
        ``initialize`` handshake of 2025-11-25 and before), or a protocol version.
    """
    child_env = _child_env(env)
    _check_command(command, child_env)
    params = StdioServerParameters(command=command, args=list(args), env=child_env, cwd=cwd)
    mode = _mode(protocol)
    label = command_label(command, args)

    def connect(**hooks: Any) -> Client:
        return Client(params, mode=mode, read_timeout_seconds=timeout, cache=None, **hooks)

    session = MCPSession(connect, label=label, timeout=timeout, transport="pipe")
    async with session:
        yield session


@contextlib.asynccontextmanager
async def http_session(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    protocol: str = "auto",
) -> AsyncIterator[MCPSession]:
    """Connect to an MCP server over streamable HTTP (``url`` is its endpoint, e.g.
    ``http://127.0.0.1:8000/mcp``) and yield a connected session.

    :param headers: sent with every request (an ``Authorization`` header, say).
    """
    if not url.startswith(("http://", "https://")):
        msg = f"http_session() needs an http:// or https:// URL, got {url!r}."
        raise ValueError(msg)
    mode = _mode(protocol)
    fixed = dict(headers or {})

    @contextlib.asynccontextmanager
    async def transport() -> AsyncIterator[Any]:
        # The HTTP client is ours to close (the SDK closes only one it made itself).
        http = httpx2.AsyncClient(headers=fixed, timeout=httpx2.Timeout(30.0, read=300.0))
        async with http, streamable_http_client(url, http_client=http) as streams:
            yield streams

    def connect(**hooks: Any) -> Client:
        return Client(transport(), mode=mode, read_timeout_seconds=timeout, cache=None, **hooks)

    session = MCPSession(connect, label=url, timeout=timeout, transport="tcp")
    async with session:
        yield session


@contextlib.asynccontextmanager
async def memory_session(
    server: Server[Any] | MCPServer,
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    protocol: str = "auto",
) -> AsyncIterator[MCPSession]:
    """Connect to an in-process server (``build_mcp_server(...)`` or an SDK ``MCPServer``)
    over the SDK's in-memory transport: the whole protocol, no process, no network."""
    mode = _mode(protocol)

    def connect(**hooks: Any) -> Client:
        return Client(server, mode=mode, read_timeout_seconds=timeout, cache=None, **hooks)

    session = MCPSession(connect, label=getattr(server, "name", "mcp"), timeout=timeout)
    async with session:
        yield session
