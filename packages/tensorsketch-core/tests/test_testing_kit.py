"""The shared test kit's driver-free parts: names private to a run and its xdist worker, and
free ports. (The server, uvicorn and browser helpers are exercised by the suites using them.)"""

from __future__ import annotations

import re
import socket

import pytest

from tensorsketch.testing import services
from tensorsketch.testing.ports import bound_socket, free_port


def test_the_run_id_joins_the_run_and_the_xdist_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TS_TEST_RUN_ID", "nox-1234/A")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert services._run_id() == "nox1234agw1"
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    assert services._run_id() == "nox1234agw0"  # two workers of one run never share names


def test_without_a_run_id_each_process_gets_a_random_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TS_TEST_RUN_ID", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    first, second = services._run_id(), services._run_id()
    assert re.fullmatch(r"[0-9a-f]{6}", first) and first != second


def test_private_names_are_fresh_lower_case_identifiers() -> None:
    names = {services.private_name("Pg") for _ in range(100)}
    assert len(names) == 100
    for name in names:
        assert re.fullmatch(r"ts_[a-z0-9]+_pg_[0-9a-f]{8}", name), name
        assert len(name) < 64  # PostgreSQL truncates identifiers past 63 bytes


def test_a_bound_socket_holds_its_port_and_a_free_port_is_bindable() -> None:
    sock = bound_socket()
    try:
        host, port = sock.getsockname()
        assert host == "127.0.0.1" and port > 0
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))  # taken until the server closes it
    finally:
        sock.close()
    with socket.socket() as again:
        again.bind(("127.0.0.1", free_port()))
