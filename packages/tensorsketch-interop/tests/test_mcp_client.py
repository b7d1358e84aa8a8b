"""Consuming MCP servers: a real SDK-built server subprocess (``MCPServer``, not ours) over
stdio, used by agents on the fake provider; its faults; journaling, tracing and approvals."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import MCPServer
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tensorsketch import FakeProvider, InMemoryBackend, create_agent, run_info
from tensorsketch.interop.mcp import (
    ATTR_MCP_SERVER,
    MCPConnectionError,
    MCPSession,
    MCPTimeoutError,
    MCPTool,
    MCPToolError,
    get_prompt,
    http_session,
    list_prompts,
    list_resources,
    mcp_tools,
    memory_session,
    read_resource,
    stdio_session,
)
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.observability.memory import InMemoryTracer
from tensorsketch.observability.otel import OTelTracer

PROTOCOLS = [("auto", "2026-07-28"), ("legacy", "2025-11-25")]


def weather(h: Any, log: Path, **kw: Any) -> Any:
    env = {"CALL_LOG": str(log), **kw.pop("env", {})}
    return stdio_session("python", str(h.servers / "sdk_weather.py"), env=env, **kw)


def tool_messages(messages: list[Message]) -> list[Message]:
    return [m for m in messages if m.role == "tool"]


@pytest.mark.parametrize(("protocol", "version"), PROTOCOLS)
async def test_an_agent_uses_a_third_party_server_over_stdio(
    h: Any, call_log: Path, protocol: str, version: str
) -> None:
    async with weather(h, call_log, protocol=protocol) as session:
        assert session.name == "weather" and session.protocol_version == version
        tools = await mcp_tools(session)
        by_name = {t.name: t for t in tools}
        assert set(by_name) == {"get_weather", "forecast", "divide", "slow", "big", "crash"}
        schema = by_name["get_weather"].json_schema()
        assert schema["properties"]["city"]["type"] == "string"
        assert schema["required"] == ["city"]
        provider = FakeProvider(
            [
                assistant(
                    tool_calls=[ToolCall(id="c1", name="get_weather", args={"city": "Paris"})]
                ),
                assistant("It is sunny in Paris."),
            ]
        )
        agent = create_agent(provider, tools=tools)
        result = await agent.invoke({"query": "what's the weather in Paris?"})
    assert result.output == "It is sunny in Paris."
    (reply,) = tool_messages(result.messages)
    assert reply.content == "sunny, 21°C" and not reply.is_error
    # the model was offered the server's own schema
    offered = {t.name: t.json_schema() for t in provider.calls[0].tools}
    assert offered["get_weather"] == schema
    assert [ln.split()[0] for ln in h.calls(call_log)] == ["get_weather"]


async def test_structured_content_comes_back_as_a_dict(h: Any, call_log: Path) -> None:
    async with weather(h, call_log) as session:
        (forecast,) = await mcp_tools(session, include=["forecast"], prefix="wx_")
        assert forecast.name == "wx_forecast"
        assert isinstance(forecast, MCPTool) and forecast.remote_name == "forecast"
        assert forecast.output_schema is not None
        value = await forecast.run({"city": "Oslo", "days": 2})
    assert value == {"city": "Oslo", "days": 2, "high_c": [20, 21]}


async def test_a_tool_error_is_a_result_the_model_reads(h: Any, call_log: Path) -> None:
    async with weather(h, call_log) as session:
        tools = await mcp_tools(session)
        (divide,) = [t for t in tools if t.name == "divide"]
        with pytest.raises(MCPToolError, match="divide"):
            await divide.run({"a": 1, "b": 0})
        agent = create_agent(
            FakeProvider(
                [
                    assistant(tool_calls=[ToolCall(id="c1", name="divide", args={"a": 1, "b": 0})]),
                    assistant("I cannot divide by zero."),
                ]
            ),
            tools=tools,
        )
        result = await agent.invoke({"query": "1/0?"})
    assert result.status == "completed" and result.output == "I cannot divide by zero."
    (reply,) = tool_messages(result.messages)
    # the SDK server keeps an unexpected exception's text to itself; the tool is named
    assert reply.is_error and "MCPToolError" in reply.text and "'divide'" in reply.text


async def test_malformed_arguments_never_reach_the_server(h: Any, call_log: Path) -> None:
    async with weather(h, call_log) as session:
        agent = create_agent(
            FakeProvider(
                [
                    assistant(tool_calls=[ToolCall(id="c1", name="get_weather", args={"town": 5})]),
                    assistant(
                        tool_calls=[ToolCall(id="c2", name="get_weather", args={"city": "Oslo"})]
                    ),
                    assistant("Snow in Oslo."),
                ]
            ),
            tools=await mcp_tools(session),
        )
        result = await agent.invoke({"query": "weather?"})
    first, second = tool_messages(result.messages)
    assert first.is_error
    assert "invalid arguments for tool 'get_weather'" in first.text
    assert "`city`: missing required argument" in first.text
    assert second.text == "snow, -3°C" and not second.is_error
    assert len(h.calls(call_log, "get_weather")) == 1  # only the corrected call was sent


async def test_a_hung_call_times_out_and_the_session_stays_usable(h: Any, call_log: Path) -> None:
    async with weather(h, call_log) as session:
        tools = {t.name: t for t in await mcp_tools(session, timeout=1.5)}
        with pytest.raises(MCPTimeoutError, match=r"did not answer tools/call 'slow' within 1.5s"):
            await tools["slow"].run({})
        agent = create_agent(
            FakeProvider(
                [
                    assistant(tool_calls=[ToolCall(id="c1", name="slow", args={})]),
                    assistant("The slow tool timed out."),
                ]
            ),
            tools=list(tools.values()),
        )
        result = await agent.invoke({"query": "go"})
        (reply,) = tool_messages(result.messages)
        assert reply.is_error and "MCPTimeoutError" in reply.text
        assert result.status == "completed"


async def test_a_server_that_never_answers_times_out_and_is_stopped(h: Any, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with pytest.raises(MCPTimeoutError, match=r"did not finish connecting within 1\.0s"):
        async with stdio_session(
            "python", str(h.servers / "silent.py"), env={"PID_FILE": str(pid_file)}, timeout=1.0
        ):
            pytest.fail("connected to a server that never answers")
    pid = int(pid_file.read_text())
    for _ in range(200):
        if not h.pid_alive(pid):
            break
        await asyncio.sleep(0.05)
    assert not h.pid_alive(pid), "the silent server process was left running"


async def test_a_crash_mid_call_is_reported_and_the_next_call_reconnects(
    h: Any, call_log: Path
) -> None:
    async with weather(h, call_log) as session:
        tools = {t.name: t for t in await mcp_tools(session)}
        agent = create_agent(
            FakeProvider(
                [
                    assistant(tool_calls=[ToolCall(id="c1", name="crash", args={})]),
                    assistant(
                        tool_calls=[ToolCall(id="c2", name="get_weather", args={"city": "Paris"})]
                    ),
                    assistant("Recovered."),
                ]
            ),
            tools=list(tools.values()),
        )
        result = await agent.invoke({"query": "go"})
        assert session.connections == 2
    crashed, after = tool_messages(result.messages)
    assert crashed.is_error and "MCPConnectionError" in crashed.text
    assert "the server exited or went away; it reconnects on the next call" in crashed.text
    assert after.text == "sunny, 21°C" and not after.is_error
    pids = {ln.split()[1] for ln in h.calls(call_log)}
    assert len(pids) == 2  # the call after the crash reached a new server process


async def test_a_direct_call_after_a_crash_raises_then_reconnects(h: Any, call_log: Path) -> None:
    async with weather(h, call_log) as session:
        tools = {t.name: t for t in await mcp_tools(session)}
        with pytest.raises(MCPConnectionError, match="ended during tools/call 'crash'"):
            await tools["crash"].run({})
        assert await tools["get_weather"].run({"city": "Oslo"}) == "snow, -3°C"


async def test_oversized_results_are_cut_with_a_note(h: Any, call_log: Path) -> None:
    async with weather(h, call_log) as session:
        tools = await mcp_tools(session, max_result_chars=1_000)
        backend = InMemoryBackend()
        agent = create_agent(
            FakeProvider(
                [
                    assistant(
                        tool_calls=[ToolCall(id="c1", name="big", args={"chars": 3_000_000})]
                    ),
                    assistant("That was long."),
                ]
            ),
            tools=tools,
        )
        result = await agent.invoke({"query": "go"}, thread_id="big", backend=backend)
    (reply,) = tool_messages(result.messages)
    assert reply.text.startswith("x" * 1_000)
    assert reply.text.endswith(
        "[truncated: the result has 3000000 characters; only the first 1000 are shown]"
    )
    assert len(reply.text) < 1_200
    # nothing durable holds the 3 MB either: every journaled value stays small
    state = await agent.aget_state("big", backend)
    assert state is not None
    assert max(len(m.text) for m in state.messages) < 1_200


async def test_the_subprocess_is_stopped_with_the_session(h: Any, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    async with stdio_session(
        "python", str(h.servers / "sdk_weather.py"), env={"PID_FILE": str(pid_file)}
    ) as session:
        await session.list_tools()
        pid = int(pid_file.read_text())
        assert h.pid_alive(pid)
    assert not h.pid_alive(pid)


async def test_a_resumed_run_does_not_call_the_server_again(h: Any, call_log: Path) -> None:
    backend = InMemoryBackend()
    async with weather(h, call_log) as session:
        tools = await mcp_tools(session)
        crashing = create_agent(
            FakeProvider(
                [
                    assistant(
                        tool_calls=[ToolCall(id="c1", name="get_weather", args={"city": "Paris"})]
                    ),
                    RuntimeError("the process died after the tool call"),
                ]
            ),
            tools=tools,
        )
        with pytest.raises(RuntimeError, match="process died"):
            await crashing.invoke({"query": "weather?"}, thread_id="t1", backend=backend)
        assert len(h.calls(call_log, "get_weather")) == 1
        resumed = create_agent(FakeProvider(["Sunny in Paris."]), tools=tools)
        result = await resumed.invoke(None, thread_id="t1", backend=backend)
    assert result.output == "Sunny in Paris."
    assert len(h.calls(call_log, "get_weather")) == 1  # replayed from the journal
    (reply,) = tool_messages(result.messages)
    assert reply.text == "sunny, 21°C"


async def test_calls_are_traced_with_the_server_name(h: Any, call_log: Path) -> None:
    tracer = InMemoryTracer()
    async with weather(h, call_log) as session:
        agent = create_agent(
            FakeProvider(
                [
                    assistant(
                        tool_calls=[ToolCall(id="c1", name="get_weather", args={"city": "Oslo"})]
                    ),
                    assistant("Snow."),
                ]
            ),
            tools=await mcp_tools(session),
        )
        await agent.invoke({"query": "weather?"}, tracer=tracer)
    (span,) = [s for s in tracer.spans if s.kind == "tool"]
    assert span.attributes["gen_ai.tool.name"] == "get_weather"
    assert span.attributes[ATTR_MCP_SERVER] == "weather"
    assert span.attributes["mcp.method.name"] == "tools/call"
    assert span.attributes["mcp.protocol.version"] == "2026-07-28"
    assert span.attributes["network.transport"] == "pipe"
    assert span.attributes["gen_ai.tool.call.result"] == "snow, -3°C"


async def test_requires_approval_suspends_before_the_server_is_called(
    h: Any, call_log: Path
) -> None:
    backend = InMemoryBackend()
    async with weather(h, call_log) as session:
        tools = await mcp_tools(session, requires_approval={"get_weather"})
        assert {t.name for t in tools if t.requires_approval} == {"get_weather"}
        agent = create_agent(
            FakeProvider(
                [
                    assistant(
                        tool_calls=[ToolCall(id="c1", name="get_weather", args={"city": "Oslo"})]
                    ),
                    assistant("Snow in Oslo."),
                ]
            ),
            tools=tools,
        )
        first = await agent.invoke({"query": "weather?"}, thread_id="a1", backend=backend)
        assert run_info(first).status == "suspended"
        assert h.calls(call_log) == []
        done = await agent.invoke(None, thread_id="a1", backend=backend, resume={"c1": True})
    assert done.output == "Snow in Oslo."
    assert len(h.calls(call_log, "get_weather")) == 1


async def test_approval_can_follow_the_servers_annotations(h: Any, call_log: Path) -> None:
    async with weather(h, call_log) as session:
        tools = await mcp_tools(session, requires_approval=lambda t: t.name.startswith("c"))
    assert {t.name for t in tools if t.requires_approval} == {"crash"}


async def test_resources_and_prompts_as_plain_values(h: Any, call_log: Path) -> None:
    async with weather(h, call_log) as session:
        (resource,) = await list_resources(session)
        assert str(resource.uri) == "weather://cities"
        assert await read_resource(session, "weather://cities") == "Paris\nOslo"
        (prompt,) = await list_prompts(session)
        assert prompt.name == "weather_report"
        messages = await get_prompt(session, "weather_report", {"city": "Oslo"})
    assert [(m.role, m.text) for m in messages] == [
        ("user", "Write a short weather report for Oslo.")
    ]


async def test_an_sdk_client_opened_by_hand_works_too(h: Any, call_log: Path) -> None:
    params = StdioServerParameters(
        command=h.python,
        args=[str(h.servers / "sdk_weather.py")],
        env={"CALL_LOG": str(call_log)},
    )
    async with Client(params) as client:
        tools = await mcp_tools(client)
        (weather_tool,) = [t for t in tools if t.name == "get_weather"]
        assert await weather_tool.run({"city": "Paris"}) == "sunny, 21°C"
        assert isinstance(weather_tool, MCPTool)
        assert weather_tool.session.name == "weather"
        assert await read_resource(client.session, "weather://cities") == "Paris\nOslo"


async def test_bad_inputs_say_what_to_do(h: Any) -> None:
    with pytest.raises(FileNotFoundError, match="'no-such-mcp-server' was not found on PATH"):
        async with stdio_session("no-such-mcp-server"):
            pass
    with pytest.raises(ValueError, match="protocol='2024-01-01' is not an MCP protocol"):
        async with stdio_session("python", "x.py", protocol="2024-01-01"):
            pass
    with pytest.raises(MCPConnectionError, match="could not connect to the MCP server"):
        async with stdio_session("python", "-c", "import sys; sys.exit(2)", timeout=30):
            pass
    with pytest.raises(MCPConnectionError, match=r"\(ConnectError: .*is not an MCP server"):
        async with http_session(f"http://127.0.0.1:{h.free_port()}/mcp", timeout=30):
            pass
    with pytest.raises(TypeError, match="expected an MCP session"):
        await mcp_tools("http://example.com")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected an MCP session"):
        MCPSession.of(object())  # type: ignore[arg-type]


def test_importing_without_the_sdk_names_the_extra() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["mcp"] = None  # what a venv without the `mcp` extra looks like
        try:
            import tensorsketch.interop.mcp
        except ModuleNotFoundError as exc:
            print(exc)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert 'pip install "tensorsketch-interop[mcp]"' in out.stdout
    assert "is installed but has no module" not in out.stdout
    assert os.path.basename(sys.executable)  # the child ran this interpreter


async def test_an_mcp_call_exports_as_an_otel_execute_tool_span() -> None:
    sdk_server = MCPServer("clock")

    @sdk_server.tool()
    def now() -> str:
        """The time."""
        return "12:00"

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with memory_session(sdk_server) as session:
        agent = create_agent(
            FakeProvider(
                [assistant(tool_calls=[ToolCall(id="c1", name="now", args={})]), assistant("Noon.")]
            ),
            tools=await mcp_tools(session),
        )
        await agent.invoke({"query": "time?"}, tracer=OTelTracer(tracer_provider=provider))
    spans = {s.name: s for s in exporter.get_finished_spans()}
    tool_span = spans["execute_tool now"]
    assert tool_span.attributes is not None
    assert tool_span.attributes["mcp.server.name"] == "clock"
    assert tool_span.attributes["mcp.method.name"] == "tools/call"
    assert tool_span.attributes["gen_ai.operation.name"] == "execute_tool"
