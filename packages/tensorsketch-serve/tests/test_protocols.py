"""``serve()``: protocols from the registry (plugins included) mounted side by side."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tensorsketch import FakeProvider, InMemoryBackend, create_agent, hookimpl
from tensorsketch.errors import RegistryError
from tensorsketch.plugins import get_plugin_manager, reset_plugin_manager
from tensorsketch.serve import Protocol, protocols, serve

LIFESPAN: list[str] = []


def acme_app(graph: Any, *, greeting: str = "hello", backend: Any = None) -> Starlette:
    """A third party's protocol: ``GET /acme/info`` and ``POST /`` (root-mounted)."""

    async def info(request: Request) -> Response:
        return JSONResponse({"graph": graph.name, "greeting": greeting, "backend": repr(backend)})

    async def root(request: Request) -> Response:
        return JSONResponse({"protocol": "acme"})

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        LIFESPAN.append("acme up")
        yield
        LIFESPAN.append("acme down")

    return Starlette(
        routes=[Route("/acme/info", info), Route("/", root, methods=["POST"])], lifespan=lifespan
    )


def bare_app(graph: Any, **options: Any) -> Starlette:
    """A bare factory (no ``Protocol``): mounted at ``/<name>``; takes every option."""

    async def root(request: Request) -> Response:
        return JSONResponse({"protocol": "bare", "options": sorted(options)})

    return Starlette(routes=[Route("/", root)])


def other_root_app(graph: Any, *, backend: Any = None) -> Starlette:
    async def card(request: Request) -> Response:
        return JSONResponse({"protocol": "other"})

    return Starlette(routes=[Route("/.well-known/other.json", card)])


class AcmePlugin:
    """What a third-party distribution's plugin module contains."""

    @hookimpl
    def tensorsketch_serve_protocols(self) -> dict[str, Any]:
        return {
            "acme": Protocol(acme_app, path="/"),
            "other": Protocol(other_root_app),
            "bare": bare_app,
        }


@pytest.fixture
def plugin() -> Iterator[None]:
    reset_plugin_manager()
    protocols.refresh()
    get_plugin_manager().register(AcmePlugin(), name="acme-plugin")
    try:
        yield
    finally:
        reset_plugin_manager()
        protocols.refresh()


def test_a_plugin_protocol_mounts_beside_others_on_one_app(plugin: None, live: Any) -> None:
    assert {"openai", "acme", "other", "bare"} <= set(protocols.names())
    assert protocols.origin("acme") == "plugin 'acme-plugin'"
    assert protocols.origin("openai") == "plugin 'serve'", "first-party, through the same hook"
    graph = create_agent(FakeProvider(["hi"]))
    LIFESPAN.clear()
    backend = InMemoryBackend()
    app = serve(graph, ["openai", "acme", "other", "bare"], greeting="hey", backend=backend)
    server = live(app)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    reply = client.chat.completions.create(
        model=graph.name, messages=[{"role": "user", "content": "hello"}]
    )
    assert reply.choices[0].message.content == "hi", "openai_app answers beside the plugin's"
    assert client.models.retrieve("any-name").id == "any-name", "no model=: any name is served"
    missing = httpx.get(f"{server.url}/v1/nothing")
    assert (
        missing.status_code == 404 and "/v1/chat/completions" in missing.json()["error"]["message"]
    )
    info = httpx.get(f"{server.url}/acme/info").json()
    assert info == {"graph": graph.name, "greeting": "hey", "backend": repr(backend)}
    assert httpx.post(f"{server.url}/").json() == {"protocol": "acme"}
    assert httpx.get(f"{server.url}/.well-known/other.json").json() == {"protocol": "other"}
    bare = httpx.get(f"{server.url}/bare/").json()
    assert bare == {"protocol": "bare", "options": ["backend", "greeting"]}
    assert httpx.get(f"{server.url}/v1/models").json()["data"][0]["id"] == graph.name
    assert httpx.get(f"{server.url}/").status_code == 405, "the path's owner answers"
    assert httpx.get(f"{server.url}/nowhere").status_code == 404
    assert LIFESPAN == ["acme up"], "a mounted app's lifespan runs"


def test_an_option_no_protocol_takes_is_an_error(plugin: None) -> None:
    graph = create_agent(FakeProvider(["hi"]))
    with pytest.raises(TypeError, match=r"no protocol of \['acme'\] takes 'gretting'"):
        serve(graph, ["acme"], gretting="typo")


def test_an_unknown_protocol_names_the_known_ones(plugin: None) -> None:
    graph = create_agent(FakeProvider(["hi"]))
    with pytest.raises(RegistryError, match=r"unknown protocol 'acmee'. Did you mean 'acme'\?"):
        serve(graph, ["acmee"])
    with pytest.raises(ValueError, match="at least one protocol"):
        serve(graph, [])


def test_import_tensorsketch_serve_pulls_starlette_but_no_server_or_sdk() -> None:
    code = (
        "import json, sys\n"
        "import tensorsketch\n"
        "before = 'starlette' in sys.modules\n"
        "import tensorsketch.serve\n"
        "print(json.dumps([before] + [m in sys.modules for m in "
        "('starlette', 'uvicorn', 'openai', 'anthropic', 'google.genai', 'a2a', 'ag_ui', "
        "'jsonpatch', 'prometheus_client')]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, starlette, *others = json.loads(out.stdout)
    assert (before, starlette) == (False, True)
    # Servers, vendor SDKs, protocol models and the metrics client load on first use.
    assert not any(others), others


def test_the_serve_command_runs_a_graph_module_on_uvicorn(tmp_path: Any) -> None:
    """``tensorsketch serve bots:agent --protocol openai --port P`` as a user runs it."""
    import socket
    import time

    (tmp_path / "bots.py").write_text(
        "from tensorsketch import FakeProvider, create_agent\n"
        "agent = create_agent(FakeProvider(), name='echo')\n"  # echoes the user
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "tensorsketch.cli", "serve", "bots:agent"]
    proc = subprocess.Popen(
        [*command, "--protocol", "openai", "--port", str(port), "--model", "echo-bot"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        for _ in range(300):
            try:
                models = client.models.list()
                break
            except openai.APIConnectionError:
                assert proc.poll() is None, proc.communicate()[0]
                time.sleep(0.1)
        else:
            pytest.fail("`tensorsketch serve` did not start")
        assert [m.id for m in models.data] == ["echo-bot"]
        reply = client.chat.completions.create(
            model="echo-bot", messages=[{"role": "user", "content": "ping"}]
        )
        assert reply.choices[0].message.content == "ping"
    finally:
        proc.terminate()
        output = proc.communicate(timeout=30)[0]
    assert "Uvicorn running on http://127.0.0.1:" in output, output


def test_the_serve_command_reports_a_bad_target_and_exits_2(tmp_path: Any) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tensorsketch.cli", "serve", "nothere:agent"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "cannot import module 'nothere'" in out.stderr
    helped = subprocess.run(
        [sys.executable, "-m", "tensorsketch.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "openai" in helped.stdout and "127.0.0.1" in helped.stdout


def test_all_names_every_registered_protocol(plugin: None) -> None:
    graph = create_agent(FakeProvider(["hi"]))
    app = serve(graph, "all", greeting="hey")
    mounted = {getattr(route, "path", None) for route in app.routes}
    # The interop distribution adds `mcp` (at /mcp) where the MCP SDK is installed.
    beside = {"/mcp"} if "mcp" in protocols.names() else set()
    assert mounted == {"", "/agui", "/bare", *beside}, "root-mounted protocols share one dispatcher"
    [root] = [route for route in app.routes if route.path == ""]  # type: ignore[attr-defined]
    assert len(root.app.apps) == 5, "openai, a2a, tasks, acme and other answer at /"  # type: ignore[attr-defined]


def test_the_serve_command_runs_the_task_api(tmp_path: Any) -> None:
    """``tensorsketch serve bots:agent --protocol tasks --port P``: submit over HTTP, see the
    run complete, and read /healthz and /metrics — the command as a user runs it."""
    import socket
    import time

    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    (tmp_path / "bots.py").write_text(
        "from tensorsketch import FakeProvider, create_agent\n"
        "agent = create_agent(FakeProvider(), name='echo')\n"  # echoes the user
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "tensorsketch.cli", "serve", "bots:agent"]
    proc = subprocess.Popen(
        [*command, "--protocol", "tasks", "--port", str(port)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            for _ in range(300):
                try:
                    health = client.get("/healthz")
                    break
                except httpx.TransportError:
                    assert proc.poll() is None, proc.communicate()[0]
                    time.sleep(0.1)
            else:
                pytest.fail("`tensorsketch serve --protocol tasks` did not start")
            assert health.status_code == 200 and health.json()["draining"] is False
            created = client.post(
                "/tasks", json={"input": {"query": "ping"}}, headers={"Idempotency-Key": "k1"}
            )
            assert created.status_code in (200, 201, 202), created.text
            task_id = created.json()["id"]
            for _ in range(300):
                task = client.get(f"/tasks/{task_id}").json()
                if task["status"] == "succeeded":
                    break
                time.sleep(0.1)
            assert task["status"] == "succeeded", task
            assert task["output"]["messages"][-1]["content"] == "ping"
            again = client.post(
                "/tasks", json={"input": {"query": "ping"}}, headers={"Idempotency-Key": "k1"}
            )
            assert again.json()["id"] == task_id
            assert client.get("/tasks/nope").status_code == 404
            text = client.get("/metrics").text
    finally:
        proc.terminate()
        output = proc.communicate(timeout=30)[0]
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("tensorsketch_runs_finished_total", (("status", "succeeded"),))] == 1.0
    assert samples[("tensorsketch_runs", (("status", "succeeded"),))] == 1.0
    assert "Uvicorn running on http://127.0.0.1:" in output, output
