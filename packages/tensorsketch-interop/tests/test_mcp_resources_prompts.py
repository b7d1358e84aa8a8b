"""Resources, prompts, completions, subscriptions, logging and progress served from plain
Python (mcp_servers/notes_server.py), used by the official Python SDK ``Client`` in both
protocol eras (in memory and over uvicorn), by TensorSketch's own client helpers, and a
graph's durable thread state read as a resource."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import warnings
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.exceptions import MCPError as SDKError

from tensorsketch import END, START, Context, Graph, InMemoryBackend, Node, Schema, tool
from tensorsketch.interop.mcp import (
    build_mcp_server,
    complete,
    get_prompt,
    graph_tool,
    http_session,
    list_resource_templates,
    log,
    mcp_app,
    mcp_tools,
    memory_session,
    notify_resource_updated,
    prompt,
    read_resource,
    report_progress,
    resource,
    thread_state_resource,
    watch_resource,
)

HERE = Path(__file__).resolve().parent
PROTOCOLS = [("auto", "2026-07-28"), ("legacy", "2025-11-25")]


def load_notes() -> Any:
    """A fresh copy of the notes server module (its NOTES dict is per test)."""
    spec = importlib.util.spec_from_file_location("notes", HERE / "mcp_servers" / "notes_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def notes() -> Any:
    return load_notes()


@pytest.mark.parametrize(("mode", "version"), PROTOCOLS)
async def test_the_sdk_client_lists_and_reads_resources(
    notes: Any, mode: str, version: str
) -> None:
    async with Client(notes.build(), mode=mode) as client:
        assert client.protocol_version == version
        caps = client.server_capabilities
        assert caps is not None and caps.resources is not None and caps.prompts is not None
        listed = (await client.list_resources()).resources
        assert [(r.uri, r.mime_type, r.description) for r in listed] == [
            ("notes://index", "text/markdown", "Every note topic, one a line."),
            ("notes://logo.png", "image/png", "The notes logo."),
        ]
        templates = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["notes://topics/{topic}"]
        index = (await client.read_resource("notes://index")).contents
        assert index == [
            types.TextResourceContents(
                uri="notes://index", mime_type="text/markdown", text="- paris\n- parsley\n- python"
            )
        ]
        (logo,) = (await client.read_resource("notes://logo.png")).contents
        assert isinstance(logo, types.BlobResourceContents)
        assert base64.b64decode(logo.blob) == notes.LOGO
        (one,) = (await client.read_resource("notes://topics/paris")).contents
        assert isinstance(one, types.TextResourceContents) and one.text == "Capital of France."
        with pytest.raises(SDKError) as missing:
            await client.read_resource("notes://topics/rome")
        assert missing.value.code == -32002 and "no note about 'rome'" in missing.value.message
        with pytest.raises(SDKError) as unknown:
            await client.read_resource("other://x")
        assert unknown.value.code == -32002
        assert "notes://topics/{topic}" in unknown.value.message


@pytest.mark.parametrize(("mode", "version"), PROTOCOLS)
async def test_the_sdk_client_renders_prompts_and_gets_completions(
    notes: Any, mode: str, version: str
) -> None:
    async with Client(notes.build(), mode=mode) as client:
        (listed,) = (await client.list_prompts()).prompts
        assert listed.name == "summarize"
        assert listed.description == "Ask for a summary of one note."
        assert [(a.name, a.required) for a in listed.arguments or []] == [
            ("topic", True),
            ("style", False),
        ]
        got = await client.get_prompt("summarize", {"topic": "paris", "style": "detailed"})
        assert [(m.role, m.content) for m in got.messages] == [
            (
                "user",
                types.TextContent(
                    type="text",
                    text="Summarize the note about paris (detailed): Capital of France.",
                ),
            ),
            ("assistant", types.TextContent(type="text", text="Here is the summary:")),
        ]
        with pytest.raises(SDKError, match=r"missing \['topic'\]") as bad:
            await client.get_prompt("summarize", {})
        assert bad.value.code == types.INVALID_PARAMS
        with pytest.raises(SDKError, match="Unknown prompt 'nope'"):
            await client.get_prompt("nope", {})
        by_prompt = await client.complete(
            types.PromptReference(type="ref/prompt", name="summarize"),
            {"name": "topic", "value": "pa"},
        )
        assert by_prompt.completion.values == ["paris", "parsley"]
        assert by_prompt.completion.total == 2 and by_prompt.completion.has_more is False
        styles = await client.complete(
            types.PromptReference(type="ref/prompt", name="summarize"),
            {"name": "style", "value": "d"},
        )
        assert styles.completion.values == ["detailed"]
        by_template = await client.complete(
            types.ResourceTemplateReference(type="ref/resource", uri="notes://topics/{topic}"),
            {"name": "topic", "value": "py"},
        )
        assert by_template.completion.values == ["python"]
        unlisted = await client.complete(
            types.PromptReference(type="ref/prompt", name="summarize"),
            {"name": "nope", "value": ""},
        )
        assert unlisted.completion.values == []
        with pytest.raises(SDKError, match=r"no prompt 'nope'; this server has \['summarize'\]"):
            await client.complete(
                types.PromptReference(type="ref/prompt", name="nope"),
                {"name": "topic", "value": ""},
            )


@pytest.mark.parametrize(("mode", "version"), PROTOCOLS)
async def test_a_tools_progress_reaches_the_sdk_client(notes: Any, mode: str, version: str) -> None:
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    async with Client(notes.build(), mode=mode) as client:
        done = await client.call_tool(
            "write_note",
            {"topic": "rome", "text": "Capital of Italy."},
            progress_callback=on_progress,
        )
    assert not done.is_error
    assert reports == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


async def test_log_messages_reach_the_sdk_client_at_the_level_it_set(notes: Any, h: Any) -> None:
    logs: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    app = mcp_app([notes.write_note], "notes", resources=[notes.note], prompts=[notes.summarize])
    async with (
        h.serving(app) as base,
        Client(f"{base}/mcp", mode="legacy", logging_callback=on_log) as client,
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await client.set_logging_level("debug")
        await client.call_tool("write_note", {"topic": "a", "text": "x"})
        seen = [(p.level, p.logger, p.data) for p in logs]
        assert seen == [("debug", None, "writing a"), ("warning", "notes", "a overwritten")]
        logs.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await client.set_logging_level("warning")
        await client.call_tool("write_note", {"topic": "b", "text": "y"})
        assert [(p.level, p.data) for p in logs] == [("warning", "b overwritten")]


async def test_the_sdk_client_is_told_when_a_subscribed_resource_changes(
    notes: Any, h: Any
) -> None:
    updates: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.append(message.params.uri)

    server = notes.build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        async with Client(server, mode="legacy", message_handler=on_message) as client:
            await client.subscribe_resource("notes://topics/paris")
            await client.call_tool("write_note", {"topic": "paris", "text": "Ville lumiere."})
            await client.call_tool("write_note", {"topic": "python", "text": "Not watched."})
            for _ in range(50):
                if updates:
                    break
                await asyncio.sleep(0.02)
            assert updates == ["notes://topics/paris"]
            await client.unsubscribe_resource("notes://topics/paris")
            await notify_resource_updated("notes://topics/paris", server=server)
            await asyncio.sleep(0.1)
            assert updates == ["notes://topics/paris"]
            with pytest.raises(SDKError) as unknown:
                await client.subscribe_resource("nowhere://x")
            assert unknown.value.code == -32002
    async with Client(server) as modern:
        async with modern.listen(resource_subscriptions=["notes://topics/paris"]) as stream:
            await modern.call_tool("write_note", {"topic": "paris", "text": "Again."})
            event = await asyncio.wait_for(anext(aiter(stream)), 5)
        assert getattr(event, "uri", None) == "notes://topics/paris"


@pytest.mark.parametrize(("protocol", "version"), PROTOCOLS)
async def test_our_client_helpers_consume_resources_prompts_and_updates(
    notes: Any, h: Any, protocol: str, version: str
) -> None:
    app = mcp_app(
        [notes.write_note],
        "notes",
        resources=[notes.index, notes.logo, notes.note],
        prompts=[notes.summarize],
    )
    async with h.serving(app) as base, http_session(f"{base}/mcp", protocol=protocol) as session:
        assert session.protocol_version == version
        (template,) = await list_resource_templates(session)
        assert template.uri_template == "notes://topics/{topic}"
        assert await complete(session, "topic", "par", prompt="summarize") == ["paris", "parsley"]
        assert await complete(session, "topic", "p", resource="notes://topics/{topic}") == [
            "paris",
            "parsley",
            "python",
        ]
        assert await read_resource(session, "notes://logo.png") == notes.LOGO
        rendered = await get_prompt(session, "summarize", {"topic": "python"})
        assert [m.role for m in rendered] == ["user", "assistant"]
        watching = watch_resource(session, "notes://topics/python")
        assert await anext(watching) == "A language."
        (write,) = await mcp_tools(session)
        assert await write.run({"topic": "python", "text": "A snake."}) == "saved python"
        assert await asyncio.wait_for(anext(watching), 10) == "A snake."
        await watching.aclose()
        with pytest.raises(ValueError, match="exactly one of prompt="):
            await complete(session, "topic")


class Saved(Schema):
    """What the remote tool answered."""

    saved: str = ""


class Write(Node):
    """Call the notes server's tool from inside a run."""

    class In(Schema):
        saved: str

    class Out(Schema):
        saved: str

    async def run(self, ctx: Context, inp: In) -> Out:
        remote = ctx.deps
        return self.Out(saved=await remote.run({"topic": "t", "text": "x"}, ctx))


async def test_a_remote_tools_progress_becomes_the_calling_runs_events(notes: Any) -> None:
    graph = Graph(Saved, name="writer").add(Write).edge(START, "Write").edge("Write", END)
    async with memory_session(notes.build()) as session:
        (write,) = await mcp_tools(session)
        events = [e async for e in graph.compile().stream({}, deps=write) if e.type == "progress"]
    assert [(e.data["tool"], e.data["progress"], e.data["total"]) for e in events] == [
        ("write_note", 1, 3),
        ("write_note", 2, 3),
        ("write_note", 3, 3),
    ]


class Tally(Schema):
    """Add to a running total."""

    add: int = 0
    total: int = 0


class Count(Node):
    class In(Schema):
        add: int
        total: int

    class Out(Schema):
        total: int

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(total=inp.total + inp.add)


async def test_a_durable_graphs_thread_state_is_a_resource(h: Any) -> None:
    compiled = Graph(Tally, name="tally").add(Count).edge(START, "Count").edge("Count", END)
    graph = compiled.compile()
    backend = InMemoryBackend()
    await graph.invoke({"add": 5}, thread_id="private", backend=backend)
    app = mcp_app(
        [graph_tool(graph, backend=backend, inputs=["add"])],
        resources=[thread_state_resource(graph, backend)],
    )
    async with h.serving(app) as base, Client(f"{base}/mcp", mode="legacy") as client:
        await client.call_tool("tally", {"add": 2})
        await client.call_tool("tally", {"add": 3})
        (template,) = (await client.list_resource_templates()).resource_templates
        assert template.uri_template == "tensorsketch://threads/{thread_id}/state"
        assert template.mime_type == "application/json"
        (thread,) = await backend.list_threads(prefix="mcp-")
        (state,) = (await client.read_resource(f"tensorsketch://threads/{thread}/state")).contents
        assert isinstance(state, types.TextResourceContents)
        assert json.loads(state.text) == {"add": 3, "total": 5}
        with pytest.raises(SDKError) as refused:
            await client.read_resource("tensorsketch://threads/private/state")
        assert refused.value.code == -32002
        assert "only threads named 'mcp-...'" in refused.value.message
        with pytest.raises(SDKError, match="has no thread 'mcp-none'"):
            await client.read_resource("tensorsketch://threads/mcp-none/state")


async def test_report_progress_and_log_are_no_ops_outside_an_mcp_call() -> None:
    await report_progress(1, 2, "outside")
    await log("info", "outside")
    with pytest.raises(ValueError, match="not an MCP level"):
        await log("loud", "x")


def test_bad_resource_and_prompt_definitions_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="needs a URI such as"):
        resource("readme")
    with pytest.raises(TypeError, match=r"has no parameter for \['topic'\]"):

        @resource("notes://{topic}")
        def wrong() -> str:
            return ""

    with pytest.raises(ValueError, match=r"complete= names \['nope'\]"):

        @prompt(complete={"nope": ["x"]})
        def ask(topic: str) -> str:
            return topic

    @resource("a://x")
    def first() -> str:
        return "1"

    @resource("a://x")
    def second() -> str:
        return "2"

    with pytest.raises(ValueError, match="two resources have the URI 'a://x'"):
        build_mcp_server([], resources=[first, second])
    with pytest.raises(TypeError, match="resources= takes functions decorated with @resource"):
        build_mcp_server([], resources=[first.fn])  # type: ignore[list-item]


async def test_a_prompt_or_resource_returning_the_wrong_type_is_an_invalid_params_error() -> None:
    @prompt
    def broken() -> int:
        """Returns a number."""
        return 3

    @resource("a://n")
    def number() -> int:
        return 3

    async with Client(build_mcp_server([], resources=[number], prompts=[broken])) as client:
        with pytest.raises(SDKError, match="return str") as bad_prompt:
            await client.get_prompt("broken", {})
        assert bad_prompt.value.code == types.INVALID_PARAMS
        with pytest.raises(SDKError, match="return str") as bad_resource:
            await client.read_resource("a://n")
        assert bad_resource.value.code == types.INVALID_PARAMS


async def test_a_server_without_resources_or_prompts_does_not_claim_them() -> None:
    @tool
    def ping() -> str:
        """Pong."""
        return "pong"

    async with Client(build_mcp_server([ping]), mode="legacy") as client:
        caps = client.server_capabilities
        assert caps is not None
        assert caps.resources is None and caps.prompts is None and caps.completions is None
        assert caps.tools is not None and caps.logging is not None


class Job(Schema):
    """Run a job in steps."""

    steps: int = 1
    done: int = 0


class Work(Node):
    class In(Schema):
        steps: int

    class Out(Schema):
        done: int

    async def run(self, ctx: Context, inp: In) -> Out:
        for step in range(1, inp.steps + 1):
            await ctx.emit("progress", {"progress": step, "total": inp.steps})
        await ctx.emit("log", {"level": "info", "data": "job finished"})
        return self.Out(done=inp.steps)


class Nap(Node):
    class In(Schema):
        steps: int

    class Out(Schema):
        done: int

    async def run(self, ctx: Context, inp: In) -> Out:
        await ctx.sleep(3600)
        return self.Out(done=inp.steps)


@pytest.mark.parametrize(("mode", "version"), PROTOCOLS)
async def test_a_graph_tools_nodes_report_progress_to_the_client(mode: str, version: str) -> None:
    graph = Graph(Job, name="job").add(Work).edge(START, "Work").edge("Work", END).compile()
    reports: list[tuple[float, float | None]] = []
    logs: list[Any] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total))

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    server = build_mcp_server([graph_tool(graph, inputs=["steps"])])
    async with Client(server, mode=mode, logging_callback=on_log) as client:
        result = await client.call_tool("job", {"steps": 3}, progress_callback=on_progress)
    assert result.structured_content == {"done": 3}
    assert reports == [(1, 3), (2, 3), (3, 3)]
    assert logs == (["job finished"] if mode == "legacy" else [])  # 2026-07-28: per-request opt-in


async def test_a_graph_tool_that_suspends_is_an_error_result() -> None:
    graph = Graph(Job, name="napper").add(Nap).edge(START, "Nap").edge("Nap", END).compile()
    async with Client(build_mcp_server([graph_tool(graph, inputs=["steps"])])) as client:
        result = await client.call_tool("napper", {"steps": 1})
    assert result.is_error
    text = "".join(b.text for b in result.content if isinstance(b, types.TextContent))
    assert "the graph 'napper' suspended waiting for timer" in text
    assert "needs a decision an MCP call cannot give" in text
