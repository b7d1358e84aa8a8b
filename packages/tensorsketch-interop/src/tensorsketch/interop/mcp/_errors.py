"""The errors an MCP connection raises, in one place.

::

    MCPError (TensorSketchError, RuntimeError)   the server answered with a protocol error
    ├── MCPToolError                             the tool ran and reported failure (``isError``)
    ├── MCPTimeoutError (TimeoutError)           the server did not answer in time
    └── MCPConnectionError (ConnectionError)     the server went away (the next use reconnects)

Inside an agent every one of them becomes an error result the model reads; the run goes on.
Called directly (``await tool.run(...)``, ``session.read_resource(...)``) they raise.
"""

from __future__ import annotations

from typing import Any

from tensorsketch.errors import TensorSketchError

__all__ = ["MCPConnectionError", "MCPError", "MCPTimeoutError", "MCPToolError"]


class MCPError(TensorSketchError, RuntimeError):
    """An MCP server answered a request with an error.

    ``code`` is the JSON-RPC error code (``None`` when the failure is not a protocol error,
    e.g. a tool that reported ``isError``), ``data`` the error's payload, ``server`` the
    server's name.
    """

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        data: Any = None,
        server: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.data = data
        self.server = server


class MCPToolError(MCPError):
    """The tool ran on the server and reported failure (a result with ``isError: true``)."""


class MCPTimeoutError(MCPError, TimeoutError):
    """The server did not answer within the timeout; the request was abandoned."""


class MCPConnectionError(MCPError, ConnectionError):
    """The connection to the server ended (the process exited, the HTTP endpoint went away).

    A session made by :func:`~tensorsketch.interop.mcp.stdio_session` or
    :func:`~tensorsketch.interop.mcp.http_session` reconnects on its next use.
    """
