"""``tensorsketch serve``'s refusals, targets, backend, banner and options, run in-process
(uvicorn is never started)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.testclient import TestClient

from tensorsketch import InMemoryBackend
from tensorsketch.backend_urls import open_backend
from tensorsketch.cli import load_graph, main
from tensorsketch.hookspecs import hookimpl
from tensorsketch.plugins import get_plugin_manager, reset_plugin_manager
from tensorsketch.registry import backends, register_backend
from tensorsketch.serve import CONVERSATION_HEADER, protocols, thread_info
from tensorsketch.serve import _cli as serve_cli

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


# -- durable, said out loud: --backend, the banner, --api-key-env, --log-level -------------------


async def _chat(app: Any, text: str, conversation: str, **headers: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.post(
            "/v1/chat/completions",
            headers={CONVERSATION_HEADER: conversation, **headers},
            json={"model": "echo", "messages": [{"role": "user", "content": text}]},
        )


async def test_a_backend_dsn_keeps_conversations_across_a_restart(
    served: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = f"sqlite:///{tmp_path / 'serve.db'}"
    assert main(["serve", "bots:agent", "--backend", dsn]) == 0
    reply = await _chat(served[0]["app"], "ping", "ada")
    assert reply.status_code == 200, reply.text
    err = capsys.readouterr().err
    assert "backend  sqlite (serve.db)" in err and "warning" not in err
    # a "restart": the same command again, on the same file
    assert main(["serve", "bots:agent", "--backend", dsn]) == 0
    graph = load_graph("bots:agent")
    store = open_backend(dsn)
    found = await thread_info(graph, "ada", store)
    assert found is not None, "the conversation was stored in the --backend file"
    assert [m.text for m in found[0].messages][-2:] == ["ping", "ping"]
    await store.aclose()


def test_serving_from_memory_is_a_warning_under_the_banner(
    served: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "bots:agent", "--protocol", "openai", "--protocol", "tasks"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "tensorsketch serve: bots:agent at http://127.0.0.1:8000"
    assert lines[1].split() == ["openai", "/v1/chat/completions", "/v1/responses", "/v1/models"]
    assert lines[2].split()[:3] == ["tasks", "/runs", "/tasks"]
    assert lines[3].split() == ["backend", "memory", "(this", "process", "only)"]
    assert lines[4].startswith("  auth     off: anyone who can reach the server")
    assert lines[5].startswith("tensorsketch serve: warning: serving from memory, so ")
    assert "--backend sqlite:///serve.db" in lines[5]
    assert served[0]["log_level"] == "info"


def test_the_banner_never_shows_a_dsn_password(
    served: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dsn = "postgresql://ada:s3cr3t-pw@127.0.0.1:1/shop"
    # Nothing listens on port 1: the banner is the subject here, not the store's check.
    monkeypatch.setattr(serve_cli, "_probe", _answers)
    assert main(["serve", "bots:agent", "--backend", dsn]) == 0
    err = capsys.readouterr().err
    assert "  backend  postgres (127.0.0.1:1/shop)" in err
    assert "s3cr3t" not in err and "ada" not in err
    assert main(["serve", "bots:agent", "--backend", "mongo://ada:s3cr3t@db/x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tensorsketch serve: --backend (mongo) could not be opened: ")
    assert "unknown backend 'mongo'" in err and "s3cr3t" not in err
    assert main(["serve", "bots:agent", "--backend", dsn, "--backend-option", "nope"]) == 2
    assert "--backend-option takes KEY=VALUE" in capsys.readouterr().err
    assert len(served) == 1


async def _answers(url: str, options: dict[str, Any]) -> None:
    return None


def test_a_backend_that_cannot_be_reached_stops_the_command(
    served: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store that is not there fails the command (status 2, saying why), not every request
    of a server that started anyway (503 each, the log filling with retries)."""
    missing = f"sqlite:///{tmp_path / 'no-such-folder' / 'tasks.db'}"
    assert main(["serve", "bots:agent", "--protocol", "tasks", "--backend", missing]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tensorsketch serve: --backend (sqlite) could not be opened: ")
    assert "unable to open database file" in err and "directory exists" in err
    refused = "postgresql://ada:s3cr3t-pw@127.0.0.1:1/shop"  # nothing listens on port 1
    assert main(["serve", "bots:agent", "--backend", refused]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tensorsketch serve: --backend (postgresql) could not be opened: ")
    assert "Connection refused" in err and "s3cr3t" not in err
    assert served == []  # uvicorn was never started
    assert not (tmp_path / "no-such-folder").exists()


def test_an_unknown_option_prints_serves_usage(
    served: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "bots:agent", "--durable"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: tensorsketch serve ") and "--backend DSN" in err
    assert "tensorsketch serve: error: unrecognized arguments: --durable" in err
    assert served == []


def test_log_level_reaches_uvicorn(served: list[dict[str, Any]]) -> None:
    assert main(["serve", "bots:agent", "--log-level", "warning"]) == 0
    assert served[0]["log_level"] == "warning"
    with pytest.raises(SystemExit):
        main(["serve", "bots:agent", "--log-level", "loud"])


async def test_api_key_env_requires_the_key_on_every_protocol(
    served: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["serve", "bots:agent", "--api-key-env", "BOT_KEY_UNSET"]) == 2
    assert "the environment variable BOT_KEY_UNSET is not set" in capsys.readouterr().err
    monkeypatch.setenv("BOT_KEY", "k-123")
    assert main(["serve", "bots:agent", "--api-key-env", "BOT_KEY"]) == 0
    assert "  auth     on: Authorization: Bearer $BOT_KEY" in capsys.readouterr().err
    app = served[0]["app"]
    assert (await _chat(app, "x", "c1")).status_code == 401
    assert (await _chat(app, "x", "c1", Authorization="Bearer wrong")).status_code == 401
    assert (await _chat(app, "x", "c1", Authorization="Bearer k-123")).status_code == 200


class _Unguarded:
    @hookimpl
    def tensorsketch_serve_protocols(self) -> dict[str, Any]:
        return {"open": lambda graph, *, backend=None: Starlette()}


def test_api_key_env_refuses_a_protocol_it_cannot_guard(
    served: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("BOT_KEY", "k-123")
    reset_plugin_manager()
    protocols.refresh()
    get_plugin_manager().register(_Unguarded(), name="unguarded")
    try:
        argv = ["serve", "bots:agent", "--protocol", "openai", "--protocol", "open"]
        assert main([*argv, "--api-key-env", "BOT_KEY"]) == 2
        assert "protocol 'open' takes no `authenticate=`" in capsys.readouterr().err
        assert main(argv) == 0, "without a key to enforce, it serves"
    finally:
        reset_plugin_manager()
        protocols.refresh()


class _ClosingProbe(InMemoryBackend):
    closed: list[str] = []

    async def aclose(self) -> None:
        self.closed.append("closed")
        await super().aclose()


def test_the_backend_is_closed_when_the_server_shuts_down(served: list[dict[str, Any]]) -> None:
    register_backend("closing-probe", _ClosingProbe)
    try:
        assert (
            main(["serve", "bots:agent", "--protocol", "tasks", "--backend", "closing-probe"]) == 0
        )
    finally:
        backends.unregister("closing-probe")
    _ClosingProbe.closed.clear()
    with TestClient(served[0]["app"]) as client:  # runs the lifespan: startup, then shutdown
        assert client.get("/healthz").status_code == 200
        assert _ClosingProbe.closed == []
    assert _ClosingProbe.closed == ["closed"]


# -- dependencies: --deps -----------------------------------------------------------------------

SHOP = '''
from tensorsketch import Context, FakeProvider, create_agent, tool
from tensorsketch.messages import ToolCall, assistant


class Shop:
    def __init__(self) -> None:
        self.prices = {"tea": 3}


MADE: list[Shop] = []


def make_shop() -> Shop:
    MADE.append(Shop())
    return MADE[-1]


@tool
def price(ctx: Context[Shop], item: str) -> int:
    """The price of an item.

    Args:
        item: the item.
    """
    return ctx.deps.prices[item]


def policy(messages, tools):
    if messages[-1].role == "user":
        return assistant(tool_calls=[ToolCall(id="c1", name="price", args={"item": "tea"})])
    return assistant(f"tea costs {messages[-1].text}")


agent = create_agent(FakeProvider(policy=policy), [price], name="shop", deps_type=Shop)
'''


async def test_deps_reach_every_protocols_runs_from_one_factory_call(
    served: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "shopbot.py").write_text(SHOP)
    argv = ["serve", "shopbot:agent", "--deps", "shopbot:make_shop"]
    assert main([*argv, "--protocol", "openai", "--protocol", "tasks"]) == 0
    assert "deps     shopbot:make_shop() (ctx.deps of every run)" in capsys.readouterr().err
    made = sys.modules["shopbot"].MADE
    assert len(made) == 1  # called once, at startup
    app = served[0]["app"]
    reply = await _chat(app, "price of tea?", "c1")
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == "tea costs 3"
    made[0].prices["tea"] = 4  # the same object serves the task API's background runs
    with TestClient(app) as client:
        done = client.post("/runs?wait=10", json={"input": {"query": "price?"}}).json()
        assert done["status"] == "succeeded", done
        assert done["output"]["output"] == "tea costs 4"


def test_a_deps_target_that_is_not_a_function_is_a_usage_error(
    served: list[dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "shopbot2.py").write_text(SHOP)
    assert main(["serve", "shopbot2:agent", "--deps", "shopbot2:MADE"]) == 2
    assert "--deps shopbot2:MADE is a list, not a function" in capsys.readouterr().err
    assert main(["serve", "shopbot2:agent", "--deps", "shopbot2:price"]) == 2
    assert "must take no arguments" in capsys.readouterr().err
