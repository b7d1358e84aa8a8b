"""Free TCP ports on 127.0.0.1 for test servers.

Tests never use fixed ports: several runs (and pytest-xdist workers) share the machine. Where
the test starts the server in this process, prefer :func:`bound_socket` and hand the socket
to the server: a port only looked up by :func:`free_port` can be taken by someone else before
the server binds it. :func:`free_port` is for a server in a child process, which needs a
number on its command line.
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def bound_socket() -> socket.socket:
    """A TCP socket bound to 127.0.0.1 on a free port (not listening yet); the caller closes
    it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock
