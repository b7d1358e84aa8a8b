"""``tensorsketch serve``'s refusals and targets, run in-process (uvicorn is never started)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from tensorsketch.cli import main

AGENT = (
    "from tensorsketch import FakeProvider, create_agent\n"
    "agent = create_agent(FakeProvider(), name='echo')\n"  # echoes the user
)


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """What ``uvicorn.run`` was asked to serve, from ``tmp_path`` (which has ``bots.py`` and
    ``apps/bots_in_a_folder.py``)."""
    (tmp_path / "bots.py").write_text(AGENT)
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps" / "bots_in_a_folder.py").write_text(AGENT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append({"app": app, **kw}))
    before = set(sys.modules)
    yield calls
    for name in set(sys.modules) - before:
        if "bots" in name:
            del sys.modules[name]


def test_an_unknown_protocol_is_one_line_naming_the_known_ones(
    served: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "bots:agent", "--protocol", "zzz"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tensorsketch serve: unknown protocol 'zzz'; --protocol takes one of ")
    assert "openai" in err and "tasks" in err and "or all." in err
    assert err.count("\n") == 1, err
    assert main(["serve", "bots:agent", "--protocol", "openai", "--protocol", "opnai"]) == 2
    assert "unknown protocol 'opnai' (did you mean 'openai'?)" in capsys.readouterr().err
    assert served == []


@pytest.mark.parametrize("bad", ["70000", "-5", "65536", "http"])
def test_a_port_out_of_range_is_a_usage_error(
    bad: str, served: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "bots:agent", "--port", bad])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "tensorsketch serve: error: argument --port: must be" in err
    assert "0-65535, got" in err and bad in err
    assert "Traceback" not in err and served == []


async def test_a_file_path_target_is_served(served: list[dict[str, Any]]) -> None:
    assert main(["serve", "apps/bots_in_a_folder.py:agent", "--port", "18999"]) == 0
    [call] = served
    assert (call["host"], call["port"]) == ("127.0.0.1", 18999)
    transport = httpx.ASGITransport(app=call["app"])
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        reply = await client.post(
            "/v1/chat/completions",
            json={"model": "echo", "messages": [{"role": "user", "content": "ping"}]},
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"] == "ping"
        garbage = await client.post("/v1/chat/completions", content=b"not json")
        assert 400 <= garbage.status_code < 500


def test_a_bad_file_target_says_what_is_wrong(
    served: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "apps/nope.py:agent"]) == 2
    assert "no Python file 'apps/nope.py'" in capsys.readouterr().err
    assert main(["serve", "apps/bots_in_a_folder:agent"]) == 2
    assert "`apps/bots_in_a_folder.py:agent`" in capsys.readouterr().err
    assert served == []
