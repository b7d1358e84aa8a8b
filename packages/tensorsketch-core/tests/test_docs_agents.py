"""The documentation's Tools, Providers, Agents, Multi-agent, Composition patterns and Middleware
examples, as written, running offline on ``FakeProvider``.

Where the docs use a real vendor provider (``AnthropicProvider(model=...)``) or an undefined
helper (``http_get``, ``llm_summarize``, ``payment_api``), the test supplies a ``FakeProvider``
or a local stand-in; the TensorSketch calls themselves are copied verbatim.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pytest

from tensorsketch import (
    END,
    START,
    ChatProvider,
    Completion,
    Context,
    FakeProvider,
    Graph,
    Llm,
    Message,
    Middleware,
    Node,
    ObservabilityMiddleware,
    RetryMiddleware,
    Schema,
    SqliteBackend,
    Tool,
    ValidationError,
    as_tool,
    create_agent,
    gather_map,
    generate_structured,
    parallel,
    run_subgraph,
    tool,
)
from tensorsketch.messages import Message as Msg
from tensorsketch.messages import ToolCall, assistant, system
from tensorsketch.provider import ProviderServerError


def calls(*pairs: tuple[str, dict[str, Any]]) -> Message:
    return assistant(
        tool_calls=[ToolCall(id=f"call_{i}", name=n, args=a) for i, (n, a) in enumerate(pairs)]
    )


# -- Tools ------------------------------------------------------------------------------------


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def http_get(url: str) -> str:  # stand-in for the docs' undefined helper
    return f"<html>{url}</html>"


@tool
async def fetch(url: str) -> str:
    """Fetch a URL."""
    return await http_get(url)


async def test_tools_add_is_a_tool() -> None:
    assert isinstance(add, Tool)
    assert add.name == "add"
    assert add.description == "Add two numbers."
    schema = add.json_schema()
    assert schema["properties"] == {"a": {"type": "integer"}, "b": {"type": "integer"}}
    assert schema["required"] == ["a", "b"]


async def test_tools_calling_a_tool() -> None:
    assert await add.run({"a": 2, "b": 3}) == 5
    with pytest.raises(ValidationError):
        await add.run({"a": "oops", "b": 3})


async def test_tools_sync_or_async() -> None:
    assert await fetch.run({"url": "https://example.com"}) == "<html>https://example.com</html>"


async def test_tools_using_tools() -> None:
    provider = FakeProvider(
        [
            calls(("add", {"a": 2, "b": 3}), ("fetch", {"url": "u"})),
            assistant("5, and the page says hi"),
        ]
    )
    from tensorsketch import create_agent

    agent = create_agent(provider, tools=[add, fetch])
    result = await agent.invoke({"query": "add and fetch"})
    assert result.output == "5, and the page says hi"
    tool_messages = [m for m in provider.calls[1].messages if m.role == "tool"]
    assert [(m.name, m.text) for m in tool_messages] == [("add", "5"), ("fetch", "<html>u</html>")]


async def test_tools_context_aware() -> None:
    seen: list[str] = []

    @tool
    def remember(ctx: Context, note: str) -> str:
        """Persist a note."""
        seen.append(f"{ctx.node}:{note}")  # the model only sees `note`; `ctx` is injected
        return "saved"

    assert list(remember.json_schema()["properties"]) == ["note"]
    provider = FakeProvider([calls(("remember", {"note": "milk"})), assistant("ok")])
    await create_agent(provider, tools=[remember]).invoke({"query": "remember milk"})
    assert seen == ["agent:milk"]


# -- Providers --------------------------------------------------------------------------------


async def test_providers_fake_scripted_and_policy() -> None:
    provider = FakeProvider([assistant("hello there")])  # scripted
    completion = await provider.complete([Msg(role="user", content="hi")])
    assert completion.message.text == "hello there"

    provider = FakeProvider(policy=lambda msgs, tools: assistant("..."))  # dynamic
    completion = await provider.complete([Msg(role="user", content="hi")])
    assert completion.message.text == "..."
    assert provider.calls[0].messages[0].text == "hi"


class EchoProvider(ChatProvider):
    async def complete(self, messages, *, tools=None, output_schema=None, max_tokens=1024, **opts):  # type: ignore[no-untyped-def]
        last_user = next(m.content for m in reversed(messages) if m.role == "user")
        return Completion(message=Msg(role="assistant", content=f"You said: {last_user}"))


async def test_providers_custom_provider_works_with_agents_and_llm() -> None:
    assert issubclass(EchoProvider, ChatProvider)
    _ = (Sequence, Schema, Tool)  # the docs' example imports these too
    result = await create_agent(EchoProvider()).invoke({"query": "ping"})
    assert result.output == "You said: ping"

    class State(Schema):
        query: str
        output: str = ""

    graph = Graph(State)
    graph.add(Llm(EchoProvider(), system="Summarize the input."))
    app = graph.edge(START, "Llm").edge("Llm", END).compile()
    assert (await app.invoke({"query": "pong"})).output == "You said: pong"


# -- Agents -----------------------------------------------------------------------------------


async def test_agents_quick_path() -> None:
    provider = FakeProvider([calls(("add", {"a": 2, "b": 3})), assistant("2 + 3 = 5")])
    agent = create_agent(
        provider,  # the docs use AnthropicProvider(model="claude-sonnet-4-6")
        tools=[add],
        system="You are a careful calculator.",
        max_iterations=8,
    )

    result = await agent.invoke({"query": "what is 2 + 3?"})
    assert result.output == "2 + 3 = 5"
    assert [m.role for m in result.messages] == ["system", "user", "assistant", "tool", "assistant"]


async def test_agents_durability_comes_for_free(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    provider = FakeProvider([calls(("add", {"a": 1, "b": 1})), assistant("2")])
    agent = create_agent(provider, tools=[add])
    result = await agent.invoke({"query": "..."}, thread_id="chat-1", backend=SqliteBackend("a.db"))
    assert result.output == "2"
    assert (tmp_path / "a.db").exists()
    state = await agent.aget_state("chat-1", SqliteBackend("a.db"))
    assert state is not None and state.output == "2"


async def test_agents_budget_returns_best_answer() -> None:
    # New arguments each turn: a model repeating one call would stop earlier, as stuck.
    provider = FakeProvider(policy=lambda msgs, tools: calls(("add", {"a": len(msgs), "b": 1})))
    agent = create_agent(provider, tools=[add], max_iterations=3)
    result = await agent.invoke({"query": "loop"})
    assert result.status == "max_iterations"
    assert len(provider.calls) == 3


class Sentiment(Schema):
    label: Literal["positive", "negative", "neutral"]
    confidence: float


async def test_agents_generate_structured() -> None:
    provider = FakeProvider([assistant('{"label": "positive", "confidence": 0.9}')])

    class State(Schema):
        text: str
        label: str = ""

    class Classify(Node):
        class In(Schema):
            text: str

        class Out(Schema):
            label: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            result = await generate_structured(provider, Sentiment, "I loved it!", ctx=ctx)
            # result is a validated Sentiment
            assert isinstance(result, Sentiment)
            return self.Out(label=result.label)

    app = Graph(State).add(Classify).edge(START, "Classify").edge("Classify", END).compile()
    assert (await app.invoke({"text": "I loved it!"})).label == "positive"


# -- Multi-agent coordination -----------------------------------------------------------------


@tool
def lookup_invoice(order: int) -> str:
    """Look up the invoice of an order."""
    return f"invoice for #{order}: $40, paid"


@tool
def search_kb(topic: str) -> str:
    """Search the knowledge base."""
    return f"KB: restart the router ({topic})"


def _router(msgs: list[Message], tools: list[Tool]) -> Message:
    names = {t.name for t in tools}
    last = msgs[-1]
    if "billing" in names:  # the supervisor
        if last.role == "tool":
            return assistant(f"Specialist says: {last.text}")
        return assistant(
            tool_calls=[ToolCall(id="s1", name="billing", args={"request": last.text})]
        )
    if "lookup_invoice" in names:  # the billing specialist
        if last.role == "tool":
            return assistant(f"Refund approved. {last.text}")
        return assistant(tool_calls=[ToolCall(id="b1", name="lookup_invoice", args={"order": 7})])
    return assistant("tech answer")


async def test_multi_agent_supervisor() -> None:
    provider = FakeProvider(policy=_router)
    billing = create_agent(provider, tools=[lookup_invoice], system="You handle billing.")
    tech = create_agent(provider, tools=[search_kb], system="You debug technical issues.")

    supervisor = create_agent(
        provider,
        tools=[
            as_tool(billing, name="billing", description="Answer billing questions."),
            as_tool(tech, name="tech", description="Debug technical problems."),
        ],
        system="Route each request to the right specialist, then relay the answer.",
    )

    result = await supervisor.invoke({"query": "I want a refund for order #7"})
    assert result.output == "Specialist says: Refund approved. invoice for #7: $40, paid"
    assert provider.calls[0].tool_names == ["billing", "tech"]
    assert provider.calls[1].messages[1].text == "I want a refund for order #7"


async def test_multi_agent_shaping_the_call() -> None:
    graph = create_agent(FakeProvider([assistant("summary of tides")]))
    research = as_tool(
        graph,
        name="research",
        description="Research a topic and return a summary.",
        input_key="query",  # the state field the sub-agent reads
        output_key="output",  # the state field to return as text
        arg="request",  # the tool argument the caller fills
        arg_description="What to research.",
    )
    assert research.json_schema()["properties"] == {
        "request": {"description": "What to research.", "type": "string"}
    }
    assert await research.run({"request": "tides"}) == "summary of tides"

    class WriterState(Schema):
        topic: str = ""
        draft: str = ""

    class Write(Node):
        class In(Schema):
            topic: str

        class Out(Schema):
            draft: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(draft=f"A section about {inp.topic}.")

    writer = Graph(WriterState).add(Write).edge(START, "Write").edge("Write", END).compile()
    # a writer graph with state {topic, draft}
    tool_ = as_tool(
        writer, name="writer", description="Draft a section.", input_key="topic", output_key="draft"
    )
    assert await tool_.run({"request": "owls"}) == "A section about owls."


# -- Composition patterns ---------------------------------------------------------------------


async def llm_summarize(doc: str) -> str:  # a real model/tool call in the docs
    return doc[:5]


class Summarize(Node):
    class In(Schema):
        docs: list[str]

    class Out(Schema):
        summaries: list[str]

    async def run(self, ctx, inp):  # type: ignore[no-untyped-def]
        async def summarize(doc: str) -> str:
            return await llm_summarize(doc)  # a real model/tool call

        summaries = await gather_map(ctx, inp.docs, summarize, max_concurrency=5)
        return self.Out(summaries=summaries)


async def test_patterns_gather_map() -> None:
    class State(Schema):
        docs: list[str]
        summaries: list[str] = []

    app = Graph(State).add(Summarize).edge(START, "Summarize").edge("Summarize", END).compile()
    out = await app.invoke({"docs": ["alpha beta", "gamma delta", "epsilon"]})
    assert out.summaries == ["alpha", "gamma", "epsil"]


async def test_patterns_parallel_and_run_subgraph() -> None:
    async def get_weather(city: str) -> str:
        return f"sunny in {city}"

    async def get_news(city: str) -> str:
        return f"news from {city}"

    class ResearchState(Schema):
        topic: str
        summary: str = ""

    class Research(Node):
        class In(Schema):
            topic: str

        class Out(Schema):
            summary: str

        async def run(self, ctx: Context, inp: Any) -> Any:
            return self.Out(summary=f"all about {inp.topic}")

    research_graph = (
        Graph(ResearchState).add(Research).edge(START, "Research").edge("Research", END).compile()
    )

    class State(Schema):
        city: str
        topic: str
        weather: str = ""
        news: str = ""
        report: str = ""

    class Brief(Node):
        class In(Schema):
            city: str
            topic: str

        class Out(Schema):
            weather: str
            news: str
            report: str

        async def run(self, ctx, inp):  # type: ignore[no-untyped-def]
            weather, news = await parallel(
                ctx,
                lambda: get_weather(inp.city),
                lambda: get_news(inp.city),
            )
            result = await run_subgraph(research_graph, {"topic": inp.topic}, ctx=ctx)
            return self.Out(weather=weather, news=news, report=result.summary)

    app = Graph(State).add(Brief).edge(START, "Brief").edge("Brief", END).compile()
    out = await app.invoke({"city": "Oslo", "topic": "fjords"})
    assert (out.weather, out.news, out.report) == (
        "sunny in Oslo",
        "news from Oslo",
        "all about fjords",
    )


# -- Middleware -------------------------------------------------------------------------------


async def test_middleware_example_and_builtins() -> None:
    @tool
    def weather(city: str) -> str:
        """Weather for a city."""
        return f"cold in {city}"

    tools = [weather]
    provider = FakeProvider(
        [
            ProviderServerError("rate limited (503)"),
            calls(("weather", {"city": "Oslo"})),
            assistant("It is cold."),
        ]
    )
    agent = create_agent(
        provider,
        tools=tools,
        middleware=[RetryMiddleware(attempts=3), ObservabilityMiddleware()],
    )
    events = [(e.type, e.data) async for e in agent.stream({"query": "weather?"})]
    seen = [
        (t, d.get("phase") or d.get("target"))
        for t, d in events
        if t in {"model_call", "tool_call", "retry"}
    ]
    assert seen == [
        ("model_call", "start"),
        ("model_call", "error"),
        ("retry", "model"),
        ("model_call", "start"),
        ("model_call", "end"),
        ("tool_call", "start"),
        ("tool_call", "end"),
        ("model_call", "start"),
        ("model_call", "end"),
    ]
    retry = next(d for t, d in events if t == "retry")
    assert retry == {"target": "model", "attempt": 1, "error": "rate limited (503)"}
    end = next(d for t, d in events if t == "model_call" and d["phase"] == "end")
    assert end["node"] == "agent" and end["output_tokens"] > 0 and "duration_ms" in end


async def test_middleware_writing_one() -> None:
    class Guardrail(Middleware):
        async def wrap_model(self, request, call_next):  # type: ignore[no-untyped-def]
            request.messages.append(system("Answer in one short sentence."))
            return await call_next(request)  # ← the rest of the stack, then the real model call

    provider = FakeProvider([assistant("Short.")])
    result = await create_agent(provider, middleware=[Guardrail()]).invoke({"query": "explain"})
    assert provider.calls[0].messages[-1].text == "Answer in one short sentence."
    assert [m.role for m in result.messages] == ["user", "assistant"]  # the transcript is untouched


def test_middleware_retry_signature() -> None:
    retry = RetryMiddleware(attempts=3, backoff=0.5, retry_on=(TimeoutError, ConnectionError))
    assert (retry.attempts, retry.backoff, retry.retry_on) == (
        3,
        0.5,
        (TimeoutError, ConnectionError),
    )
