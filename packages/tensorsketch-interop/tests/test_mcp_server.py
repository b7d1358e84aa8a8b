"""Serving over MCP: our server consumed by the SDK's own ``Client`` over stdio and over
streamable HTTP on a real uvicorn, an agent calling our tools through HTTP, a graph exposed as
one tool, and the ``tensorsketch mcp`` command."""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
import uvicorn
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError as SDKError
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from tensorsketch import (
    END,
    START,
    Context,
    FakeProvider,
    Graph,
    InMemoryBackend,
    Node,
    Schema,
    create_agent,
    tool,
)
from tensorsketch.interop.mcp import (
    MCPApp,
    MCPConnectionError,
    build_mcp_server,
    graph_tool,
    http_session,
    mcp_app,
    mcp_tools,
    memory_session,
)
from tensorsketch.messages import ImageBlock, ToolCall, assistant
from tensorsketch.observability.memory import InMemoryTracer

#: The console script of this environment (what `pip install` puts on PATH).
TENSORSKETCH = str(Path(sys.executable).with_name("tensorsketch"))
PROTOCOLS = [("auto", "2026-07-28"), ("legacy", "2025-11-25")]


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def fail(reason: str) -> str:
    """Always fails, with the reason."""
    raise RuntimeError(reason)


def text(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


@pytest.mark.parametrize(("mode", "version"), PROTOCOLS)
async def test_the_sdk_client_uses_our_server_over_stdio(h: Any, mode: str, version: str) -> None:
    params = StdioServerParameters(command=h.python, args=[str(h.servers / "ts_tools.py")])
    async with Client(params, mode=mode) as client:
        assert client.protocol_version == version
        assert client.server_info is not None and client.server_info.name == "ts-tools"
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == {"add", "lookup", "fail", "echo"}
        assert listed["add"].input_schema["required"] == ["a", "b"]
        assert listed["add"].description == "Add two integers."
        added = await client.call_tool("add", {"a": 2, "b": 40})
        assert not added.is_error and text(added) == "42"
        looked = await client.call_tool("lookup", {"key": "k"})
        assert looked.structured_content == {"key": "k", "value": "K"}
        failed = await client.call_tool("fail", {"reason": "disk full"})
        assert failed.is_error and text(failed) == "RuntimeError: disk full"
        invalid = await client.call_tool("add", {"a": "two"})
        assert invalid.is_error
        assert "invalid arguments for tool 'add'" in text(invalid)
        assert "`b`: missing required argument" in text(invalid)
        with pytest.raises(SDKError, match="Unknown tool 'nope'"):
            await client.call_tool("nope", {})
        echoed = await client.call_tool("echo", {"query": "hello"})
        assert echoed.structured_content is not None
        assert echoed.structured_content["output"] == "echo: hello"


@pytest.mark.parametrize(("mode", "version"), PROTOCOLS)
async def test_the_sdk_client_uses_our_server_over_streamable_http(
    h: Any, mode: str, version: str
) -> None:
    app = mcp_app([add, fail], name="calc")
    async with h.serving(app) as base, Client(f"{base}/mcp", mode=mode) as client:
        assert client.protocol_version == version
        assert [t.name for t in (await client.list_tools()).tools] == ["add", "fail"]
        assert text(await client.call_tool("add", {"a": 1, "b": 2})) == "3"
        failed = await client.call_tool("fail", {"reason": "no"})
        assert failed.is_error and text(failed) == "RuntimeError: no"


async def test_bad_http_requests_get_4xx_not_5xx(h: Any) -> None:
    app = mcp_app([add], name="calc")
    async with h.serving(app) as base, httpx2.AsyncClient() as http:
        accept = {"accept": "application/json, text/event-stream"}
        garbage = await http.post(f"{base}/mcp", content=b"{not json", headers=accept)
        assert 400 <= garbage.status_code < 500
        wrong_host = await http.post(
            f"{base}/mcp", json={}, headers={**accept, "host": "evil.example"}
        )
        assert 400 <= wrong_host.status_code < 500
        missing = await http.get(f"{base}/nope")
        assert missing.status_code == 404


async def test_mounted_in_a_starlette_app_without_lifespan_wiring(h: Any) -> None:
    tools_app = mcp_app([add], name="calc")

    async def health(request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    parent = Starlette(routes=[Route("/health", health), Mount("/tools", app=tools_app)])
    async with h.serving(parent) as base:
        async with http_session(f"{base}/tools/mcp") as session:
            (remote_add,) = await mcp_tools(session)
            assert await remote_add.run({"a": 20, "b": 22}) == "42"  # text, as MCP sends it
        await tools_app.aclose()


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_an_agent_calls_our_tools_over_http(h: Any, protocol: str) -> None:
    app = mcp_app([add, fail], name="calc")
    async with h.serving(app) as base, http_session(f"{base}/mcp", protocol=protocol) as session:
        assert session.name == "calc"
        agent = create_agent(
            FakeProvider(
                [
                    assistant(
                        tool_calls=[
                            ToolCall(id="c1", name="calc_add", args={"a": 2, "b": 3}),
                            ToolCall(id="c2", name="calc_fail", args={"reason": "nope"}),
                        ]
                    ),
                    assistant("2 + 3 = 5"),
                ]
            ),
            tools=await mcp_tools(session, prefix="calc_"),
        )
        tracer = InMemoryTracer()
        result = await agent.invoke({"query": "2+3?"}, tracer=tracer)
    assert result.output == "2 + 3 = 5"
    added, failed = [m for m in result.messages if m.role == "tool"]
    assert added.text == "5" and not added.is_error
    assert failed.is_error and "RuntimeError: nope" in failed.text
    spans = [s for s in tracer.spans if s.kind == "tool"]
    assert {s.attributes["mcp.server.name"] for s in spans} == {"calc"}
    assert {s.attributes["network.transport"] for s in spans} == {"tcp"}


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_an_http_server_that_goes_away_is_reported_then_reconnected(
    h: Any, protocol: str
) -> None:
    port = h.free_port()

    async def start() -> tuple[uvicorn.Server, asyncio.Task[None]]:
        app = mcp_app([add], name="calc")
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical")
        )
        task = asyncio.create_task(server.serve())
        while not server.started:
            assert not task.done(), "uvicorn did not start"
            await asyncio.sleep(0.02)
        return server, task

    server, task = await start()
    url = f"http://127.0.0.1:{port}/mcp"
    async with http_session(url, protocol=protocol) as session:
        (remote_add,) = await mcp_tools(session)
        assert await remote_add.run({"a": 1, "b": 2}) == "3"
        server.should_exit = True
        await task
        with pytest.raises(MCPConnectionError, match="it reconnects on the next call"):
            await remote_add.run({"a": 1, "b": 2})
        server, task = await start()  # the server is back (a deploy, a restart)
        assert await remote_add.run({"a": 1, "b": 5}) == "6"
        assert session.connections == 2
    server.should_exit = True
    await task


async def test_http_headers_reach_the_server(h: Any) -> None:
    seen: list[str | None] = []

    @tool
    def whoami() -> str:
        """Say who is calling."""
        return "ok"

    inner = mcp_app([whoami], name="auth")

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append(dict(scope["headers"]).get(b"authorization", b"").decode() or None)
        await inner(scope, receive, send)

    async with (
        h.serving(app) as base,
        http_session(f"{base}/mcp", headers={"Authorization": "Bearer t0k"}) as s,
    ):
        (who,) = await mcp_tools(s)
        assert await who.run({}) == "ok"
    assert seen and set(seen) == {"Bearer t0k"}


class Order(Schema):
    """Price an order."""

    item: str = ""
    quantity: int = 1
    total: float = 0.0
    note: str = ""


class Price(Node):
    class In(Schema):
        item: str
        quantity: int

    class Out(Schema):
        total: float
        note: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(total=2.5 * inp.quantity, note=f"{inp.quantity} x {inp.item}")


def order_graph() -> Any:
    return Graph(Order, name="pricing").add(Price).edge(START, "Price").edge("Price", END).compile()


async def test_a_graph_as_one_tool_called_from_the_sdk_client(h: Any) -> None:
    priced = graph_tool(order_graph(), name="price_order")  # inputs: what Price reads
    assert priced.description == "Price an order."
    tracer = InMemoryTracer()
    server = build_mcp_server([priced], name="shop", tracer=tracer)
    async with h.serving(mcp_app_of(server)) as base, Client(f"{base}/mcp") as client:
        (listed,) = (await client.list_tools()).tools
        assert set(listed.input_schema["properties"]) == {"item", "quantity"}
        assert listed.output_schema is not None
        assert set(listed.output_schema["properties"]) == {"total", "note"}
        result = await client.call_tool("price_order", {"item": "tea", "quantity": 4})
        assert not result.is_error
        assert result.structured_content == {"total": 10.0, "note": "4 x tea"}
        assert json.loads(text(result)) == {"note": "4 x tea", "total": 10.0}
        bad = await client.call_tool("price_order", {"item": "tea", "quantity": "lots"})
        assert bad.is_error and "`quantity`" in text(bad)
    tool_span, _bad = [s for s in tracer.spans if s.kind == "tool"]
    (run_span,) = [s for s in tracer.spans if s.kind == "run"]  # the bad call never ran
    assert run_span.parent_id == tool_span.span_id  # each call is a run, inside the tool span
    assert tool_span.attributes["mcp.server.name"] == "shop"
    assert run_span.attributes["tensorsketch.graph"] == "pricing"


async def test_serve_mounts_mcp_beside_the_openai_protocol(h: Any) -> None:
    """``serve(graph, ["openai", "mcp"])``: one app, the graph as an MCP tool at ``/mcp``."""
    serve = pytest.importorskip("tensorsketch.serve").serve
    agent = create_agent(FakeProvider(lambda messages, tools: "pong"), name="pinger")
    app = serve(agent, ["openai", "mcp"])
    async with h.serving(app) as base, Client(f"{base}/mcp") as client:
        (listed,) = (await client.list_tools()).tools
        assert listed.name == "pinger"
        answer = await client.call_tool("pinger", {"query": "ping"})
        assert answer.structured_content is not None
        assert answer.structured_content["output"] == "pong"
        async with httpx2.AsyncClient(base_url=base) as http:
            models = (await http.get("/v1/models")).json()
    assert models["object"] == "list", "the OpenAI routes answer on the same app"


async def test_serve_with_a_backend_offers_the_thread_state_as_a_resource(h: Any) -> None:
    serve = pytest.importorskip("tensorsketch.serve").serve
    backend = InMemoryBackend()
    agent = create_agent(FakeProvider(lambda messages, tools: "pong"), name="pinger")
    app = serve(agent, ["mcp"], backend=backend)
    async with h.serving(app) as base, Client(f"{base}/mcp", mode="legacy") as client:
        await client.call_tool("pinger", {"query": "ping"})
        (template,) = (await client.list_resource_templates()).resource_templates
        assert template.uri_template == "tensorsketch://threads/{thread_id}/state"
        (thread,) = await backend.list_threads(prefix="mcp-")
        (state,) = (await client.read_resource(f"tensorsketch://threads/{thread}/state")).contents
    assert isinstance(state, types.TextResourceContents)
    assert json.loads(state.text)["output"] == "pong"


def mcp_app_of(server: Any) -> MCPApp:
    return MCPApp(server, server.streamable_http_app())


async def test_an_agent_as_a_durable_tool_keeps_one_thread_per_mcp_session(h: Any) -> None:
    backend = InMemoryBackend()
    agent = create_agent(
        FakeProvider(lambda messages, tools: f"turn {sum(m.role == 'user' for m in messages)}")
    )
    chat = graph_tool(agent, name="chat", backend=backend)
    assert chat.description.startswith("Run the ")  # not AgentState's own docstring
    assert set(chat.json_schema()["properties"]) == {"query", "messages"}
    assert "output" in chat.output_schema["properties"]
    server = build_mcp_server([chat], name="chat")
    async with h.serving(mcp_app_of(server)) as base:
        async with Client(f"{base}/mcp", mode="legacy") as client:
            first = await client.call_tool("chat", {"query": "hi"})
            second = await client.call_tool("chat", {"query": "again"})
        async with Client(f"{base}/mcp", mode="legacy") as other:
            fresh = await other.call_tool("chat", {"query": "hello"})
    assert first.structured_content is not None and second.structured_content is not None
    assert first.structured_content["output"] == "turn 1"
    assert second.structured_content["output"] == "turn 2"  # same thread: the history grew
    assert fresh.structured_content is not None
    assert fresh.structured_content["output"] == "turn 1"  # a new session, a new thread


@pytest.mark.parametrize(("mode", "second"), [("legacy", "turn 2"), ("auto", "turn 1")])
async def test_a_connection_without_http_sessions_is_one_thread(mode: str, second: str) -> None:
    """Over a handshake-era connection (stdio, in-memory) the connection is the session; on
    2026-07-28 every request stands alone, so every call is a new thread."""
    agent = create_agent(
        FakeProvider(lambda messages, tools: f"turn {sum(m.role == 'user' for m in messages)}")
    )
    server = build_mcp_server([graph_tool(agent, name="chat", backend=InMemoryBackend())])
    async with Client(server, mode=mode) as client:
        first = await client.call_tool("chat", {"query": "hi"})
        again = await client.call_tool("chat", {"query": "again"})
    assert first.structured_content is not None and again.structured_content is not None
    assert first.structured_content["output"] == "turn 1"
    assert again.structured_content["output"] == second


async def test_graph_tool_refuses_what_it_cannot_describe() -> None:
    with pytest.raises(TypeError, match="needs a compiled graph"):
        graph_tool(Graph(Order))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"names \['nope'\], not fields of the state"):
        graph_tool(order_graph(), inputs=["nope"])


async def test_in_memory_round_trip_both_eras() -> None:
    server = build_mcp_server([add], name="calc")
    for protocol, version in PROTOCOLS:
        async with memory_session(server, protocol=protocol) as session:
            assert session.protocol_version == version
            (remote_add,) = await mcp_tools(session)
            assert await remote_add.run({"a": 1, "b": 1}) == "2"


RED_PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)


@pytest.mark.parametrize(("mode", "version"), PROTOCOLS)
async def test_a_tool_returning_one_image_sends_an_image_block(mode: str, version: str) -> None:
    @tool
    def snapshot() -> ImageBlock:
        """A 1x1 picture."""
        return ImageBlock(data=RED_PIXEL, media_type="image/png")

    async with Client(build_mcp_server([snapshot]), mode=mode) as client:
        result = await client.call_tool("snapshot", {})
    assert result.structured_content is None
    assert result.content == [
        types.ImageContent(type="image", data=RED_PIXEL, mime_type="image/png")
    ]


async def test_server_version_defaults_to_the_installed_distribution() -> None:
    installed = importlib.metadata.version("tensorsketch-interop")
    assert installed
    async with Client(build_mcp_server([add])) as client:
        assert client.server_info is not None
        assert client.server_info.version == installed
    async with Client(build_mcp_server([add], version="7.1")) as client:
        assert client.server_info is not None and client.server_info.version == "7.1"


def test_build_mcp_server_rejects_duplicate_names() -> None:
    @tool(name="add")
    def other(x: int) -> int:
        """Another add."""
        return x

    with pytest.raises(ValueError, match="two tools are named 'add'"):
        build_mcp_server([add, other])


# -- the CLI ----------------------------------------------------------------------------------


def cli(
    *args: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TENSORSKETCH, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def test_cli_lists_a_servers_tools(h: Any) -> None:
    out = cli("mcp", "tools", "--", h.python, str(h.servers / "sdk_weather.py"))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "weather (MCP 2026-07-28): 6 tools"
    assert "  get_weather(city: string)  Current weather for a city." in lines
    assert "  forecast(city: string, days?: integer)  A multi-day forecast (structured)." in lines
    as_json = cli("mcp", "tools", "--json", "--", h.python, str(h.servers / "sdk_weather.py"))
    assert {t["name"] for t in json.loads(as_json.stdout)} >= {"get_weather", "divide"}


def test_cli_says_what_is_wrong(h: Any, tmp_path: Path) -> None:
    missing = cli("mcp", "tools")
    assert missing.returncode == 2 and "give a server command after `--`" in missing.stderr
    dead = cli("mcp", "tools", "--timeout", "1", "--", h.python, str(h.servers / "silent.py"))
    assert dead.returncode == 1 and "did not finish connecting within 1.0s" in dead.stderr
    bad_target = cli("mcp", "serve", "no_such_module:tools", cwd=tmp_path)
    assert bad_target.returncode == 2 and "no_such_module" in bad_target.stderr
    (tmp_path / "m.py").write_text("tools = 3\n")
    wrong = cli("mcp", "serve", "m:tools", cwd=tmp_path)
    assert wrong.returncode == 2 and "cannot serve 3" in wrong.stderr


async def test_cli_serves_over_stdio_to_the_sdk_client(h: Any) -> None:
    params = StdioServerParameters(
        command=TENSORSKETCH,
        args=["mcp", "serve", f"{h.servers / 'ts_tools.py'}:tools"],
    )
    async with Client(params) as client:
        assert client.server_info is not None and client.server_info.name == "tools"
        assert text(await client.call_tool("add", {"a": 5, "b": 6})) == "11"


KB_MODULE = """
from tensorsketch import tool
from tensorsketch.interop.mcp import prompt, resource

@tool
def add(a: int, b: int) -> int:
    \"\"\"Add.\"\"\"
    return a + b

@resource("kb://readme")
def readme() -> str:
    return "read me"

@prompt
def greet(name: str) -> str:
    \"\"\"Greet someone.\"\"\"
    return f"Say hello to {name}."

served = [add, readme, greet]
"""


async def test_cli_serves_resources_and_prompts_listed_beside_tools(h: Any, tmp_path: Path) -> None:
    (tmp_path / "kb.py").write_text(KB_MODULE)
    params = StdioServerParameters(
        command=TENSORSKETCH, args=["mcp", "serve", "kb:served"], cwd=tmp_path
    )
    async with Client(params) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["add"]
        (readme,) = (await client.read_resource("kb://readme")).contents
        assert isinstance(readme, types.TextResourceContents) and readme.text == "read me"
        greeting = await client.get_prompt("greet", {"name": "Ada"})
        assert greeting.messages[0].content == types.TextContent(
            type="text", text="Say hello to Ada."
        )


async def test_cli_serves_a_graph_over_http(h: Any, tmp_path: Path) -> None:
    (tmp_path / "shop.py").write_text(
        "from tensorsketch import FakeProvider, create_agent\n"
        "assistant = create_agent(FakeProvider(lambda m, t: 'hi ' + m[-1].text))\n"
    )
    port = h.free_port()
    proc = subprocess.Popen(  # noqa: ASYNC220 - a server process the test talks to
        [TENSORSKETCH, "mcp", "serve", "shop:assistant", "--http", "--port", str(port)],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stderr is not None
        line = await asyncio.to_thread(proc.stderr.readline)
        assert f"serving MCP at http://127.0.0.1:{port}/mcp" in line
        for _ in range(200):
            try:
                async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                    result = await client.call_tool("assistant", {"query": "there"})
                    break
            except Exception:
                await asyncio.sleep(0.1)
        else:
            pytest.fail("the HTTP server never answered")
        assert result.structured_content is not None
        assert result.structured_content["output"] == "hi there"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
