"""Fixtures for the real PostgreSQL and Redis servers, and a TCP proxy to cut them off.

Addresses, reachability and private names come from the shared test kit
(:mod:`tensorsketch.testing.services`): every test gets its own PostgreSQL schema / Redis key
prefix, dropped afterwards, so runs (and pytest-xdist workers) never see each other's data.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import pytest

from tensorsketch.testing import postgres_server, redis_server
from tensorsketch.testing.ports import free_port


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    return postgres_server.reachable()


@pytest.fixture(scope="session")
def redis_url() -> str:
    return redis_server.reachable()


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A schema name private to this test (the backend creates it; it is dropped after)."""
    yield from postgres_server.private_schema("pg", pg_dsn)


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix private to this test (its keys are deleted after)."""
    yield from redis_server.private_prefix("rd", redis_url)


# -- a TCP proxy in its own process, to make a server "go away" --------------------------------

_PROXY = r"""
import asyncio, sys

async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except Exception:
        pass
    finally:
        writer.close()

async def handle(client_reader, client_writer):
    try:
        reader, writer = await asyncio.open_connection(sys.argv[2], int(sys.argv[3]))
    except OSError:
        client_writer.close()
        return
    await asyncio.gather(pipe(client_reader, writer), pipe(reader, client_writer))

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]), reuse_address=True)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


@dataclass
class TcpProxy:
    """Forwards 127.0.0.1:``port`` to a server; :meth:`kill` cuts every connection at once."""

    port: int
    target_host: str
    target_port: int
    process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        args = [str(self.port), self.target_host, str(self.target_port)]
        self.process = subprocess.Popen(
            [sys.executable, "-c", _PROXY, *args], stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "ready"

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a frozen process dies on SIGKILL anyway
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # make sure the port refuses connections now
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
            except OSError:
                return
            time.sleep(0.05)

    def freeze(self) -> None:
        """Black-hole every connection: the proxy stops reading and forwarding (SIGSTOP), while
        the kernel still accepts new connections and buffers what is sent; nothing errors."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """Undo :meth:`freeze`: the held connections carry on where they stopped."""
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def via(self, url: str) -> str:
        """``url`` rewritten to go through the proxy."""
        parts = urlsplit(url)
        auth = parts.netloc.rpartition("@")
        netloc = f"{auth[0]}@127.0.0.1:{self.port}" if auth[1] else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))


def _proxy_for(url: str) -> Iterator[TcpProxy]:
    parts = urlsplit(url)
    proxy = TcpProxy(free_port(), parts.hostname or "127.0.0.1", parts.port or 0)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.kill()


@pytest.fixture
def pg_proxy(pg_dsn: str) -> Iterator[TcpProxy]:
    yield from _proxy_for(pg_dsn)


@pytest.fixture
def redis_proxy(redis_url: str) -> Iterator[TcpProxy]:
    yield from _proxy_for(redis_url)
