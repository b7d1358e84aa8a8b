"""``tensorsketch worker``: what it checks before it joins Ray (no cluster needed).

A wrong graph name, or an address nothing listens on, is reported at once by the command
itself: ``ray.init`` would otherwise retry the GCS for minutes, and the actors would be the
first to find out the graph cannot be imported.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from tensorsketch.ray import _cli

DSN = "postgresql://postgres@127.0.0.1/test"
AGENT = (
    "from tensorsketch import FakeProvider, create_agent\nagent = create_agent(FakeProvider())\n"
)


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder with ``worker_cli_app.py`` (a graph) as the working directory; Ray must not
    be joined (a test that reaches ``ray.init`` fails instead of waiting for a GCS)."""
    (tmp_path / "worker_cli_app.py").write_text(AGENT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))

    def no_ray(*args: Any, **kwargs: Any) -> None:
        pytest.fail("the command joined Ray before checking its input")

    monkeypatch.setattr(ray, "init", no_ray)
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if "worker_cli_app" in name:
            del sys.modules[name]


def worker(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="tensorsketch worker")
    _cli.configure(parser)
    return _cli.run(parser.parse_args(list(argv)))


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (just released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_a_graph_that_cannot_be_imported_is_refused_before_ray(
    app_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    probed: list[tuple[str, int]] = []

    def probe(endpoint: tuple[str, int], timeout: float) -> socket.socket:
        probed.append(endpoint)
        raise ConnectionRefusedError

    monkeypatch.setattr(socket, "create_connection", probe)
    address = f"127.0.0.1:{closed_port()}"
    assert worker("nomod:agent", "--ray", address, "--backend", DSN) == 2
    assert "cannot import module 'nomod'" in capsys.readouterr().err
    assert worker("worker_cli_app:agnet", "--ray", address, "--backend", DSN) == 2
    assert "has no attribute 'agnet'" in capsys.readouterr().err
    assert worker("missing.py:agent", "--ray", address, "--backend", DSN) == 2
    assert "no Python file 'missing.py'" in capsys.readouterr().err
    assert probed == [], "the graph is checked before the cluster is"


def test_an_address_nothing_listens_on_fails_fast_with_the_commands_message(
    app_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    assert worker("worker_cli_app:agent", "--ray", address, "--backend", DSN) == 1
    assert time.monotonic() - started < _cli.PROBE_TIMEOUT
    err = capsys.readouterr().err
    assert f"tensorsketch worker: cannot reach the Ray cluster at '{address}'" in err
    assert "ConnectionRefusedError" in err and "check --ray" in err


def test_a_gcs_that_does_not_answer_in_time_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    def silent(endpoint: tuple[str, int], timeout: float) -> socket.socket:
        raise TimeoutError

    monkeypatch.setattr(socket, "create_connection", silent)
    assert _cli._unreachable("10.1.2.3:6379", 2.0) == "nothing answered on 10.1.2.3:6379 within 2s"


def test_only_host_port_addresses_are_probed() -> None:
    assert _cli._gcs_endpoint("127.0.0.1:6379") == ("127.0.0.1", 6379)
    assert _cli._gcs_endpoint("ray-head:6379") == ("ray-head", 6379)
    assert _cli._gcs_endpoint("[::1]:6379") == ("::1", 6379)
    for resolved_by_ray in ("auto", "local", "ray://127.0.0.1:10001", "ray-head", ""):
        assert _cli._gcs_endpoint(resolved_by_ray) is None
        assert _cli._unreachable(resolved_by_ray) is None
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert _cli._unreachable(f"127.0.0.1:{listening.getsockname()[1]}") is None


def test_a_file_target_reaches_the_actors_as_an_absolute_path(
    app_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served: list[str] = []

    async def serve(pool: Any, keep: bool) -> None:
        served.append(pool.spec.graph)

    monkeypatch.setattr(_cli, "_serve", serve)
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: socket.socket())  # a GCS
    assert worker("worker_cli_app.py:agent", "--ray", "127.0.0.1:1", "--backend", DSN) == 0
    assert worker("worker_cli_app:agent", "--ray", "127.0.0.1:1", "--backend", DSN) == 0
    assert served == [f"{app_dir.resolve() / 'worker_cli_app.py'}:agent", "worker_cli_app:agent"]
