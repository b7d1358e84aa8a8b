"""Fixtures: a wire server per test and the vendor plays.

pytest's importlib mode makes helper modules in a test folder non-importable, so the two
helpers are loaded here by path and registered under their plain names (``wire_server``,
``vendor_plays``) before any test module imports them.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

_HERE = Path(__file__).parent

# LiteLLM fetches its price list from GitHub when imported: keep every test on 127.0.0.1.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def _load(name: str) -> Any:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


wire_server = _load("wire_server")
vendor_plays = _load("vendor_plays")


@pytest.fixture
def server() -> Iterator[Any]:
    """A scripted vendor server on 127.0.0.1 (a fresh one per test)."""
    srv = wire_server.WireServer().start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(params=sorted(vendor_plays.PLAYS))
async def play(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """Each vendor in turn: the one conformance suite runs against all three.

    Providers the test built are closed on the test's own event loop afterwards.
    """
    play = vendor_plays.PLAYS[request.param]()
    try:
        yield play
    finally:
        for provider in play.created:
            await provider.aclose()
