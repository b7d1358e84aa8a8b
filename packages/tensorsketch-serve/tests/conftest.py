"""Fixtures: a real uvicorn server on 127.0.0.1 (a free port) for any ASGI app.

The server (the test kit's :class:`~tensorsketch.testing.live_server.LiveServer`) runs on its
own event loop in a thread, as in production; tests talk to it over HTTP with real clients.
``server.call(coro)`` runs a coroutine on the server's loop (to read a backend the app writes,
say). The providers' wire server is loaded from its test folder, so a real vendor SDK can play
the model.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tensorsketch.testing.live_server import LiveServer, live_servers

PROVIDER_TESTS = Path(__file__).resolve().parents[2] / "tensorsketch-providers" / "tests"


def load_helper(name: str, folder: Path = PROVIDER_TESTS) -> Any:
    """Import a test helper module by path (pytest's importlib mode hides test folders)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# Registered under their plain names, so test modules can ``import wire_server, vendor_plays``
# (and ``import a2a_agents`` / ``import agui_client``, the A2A tests' agents and the AG-UI
# test client, from this folder).
load_helper("wire_server")
load_helper("vendor_plays")
load_helper("a2a_agents", Path(__file__).parent)
load_helper("agui_client", Path(__file__).parent)
load_helper("task_graphs", Path(__file__).resolve().parent)
js_clients = load_helper("js_clients", Path(__file__).resolve().parent)
load_helper("authz_servers", Path(__file__).resolve().parent)


@pytest.fixture
def live() -> Iterator[Callable[[Any], LiveServer]]:
    """``live(app)`` starts uvicorn for ``app``; every server is stopped after the test."""
    yield from live_servers()


@pytest.fixture(scope="module")
def live_module() -> Iterator[Callable[[Any], LiveServer]]:
    """``live``, for servers a whole module shares (property tests run many examples)."""
    yield from live_servers()


@pytest.fixture(scope="session")
def npm_clients() -> Any:
    """The npm clients of ``tests/js`` (``npm ci`` from the lockfile when needed); the test
    skips, naming the missing tool, where Node.js or npm is absent."""
    reason = js_clients.installed()
    if reason is not None:
        pytest.skip(reason)
    return js_clients
