"""Toolsets: named groups of tools — filtered, prefixed, approved, chosen per run, searched."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from tensorsketch import FakeProvider, InMemoryBackend, as_tool, create_agent, tool
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.toolsets import Toolset

ran: list[str] = []


@tool
def get_weather(city: str) -> str:
    """Get the weather forecast for a city."""
    ran.append(f"weather:{city}")
    return f"{city}: sunny"


@tool
def search(query: str) -> str:
    """Search the web."""
    ran.append(f"search:{query}")
    return "found"


@tool
def delete_file(path: str) -> str:
    """Delete a file from the disk."""
    ran.append(f"delete:{path}")
    return "deleted"


@tool
def send_invoice(order: str) -> str:
    """Send the invoice of an order by e-mail."""
    ran.append(f"invoice:{order}")
    return "sent"


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def call(name: str, turn: int = 0, **args: object) -> Message:
    return assistant(tool_calls=[ToolCall(id=f"c{turn}", name=name, args=dict(args))])


def test_a_toolset_filters_prefixes_and_flattens() -> None:
    web = Toolset([get_weather, search], name="web")
    assert [t.name for t in web.filtered(["search"]).tools] == ["search"]
    assert [t.name for t in web.filtered(lambda t: "weather" in t.name).tools] == ["get_weather"]
    prefixed = web.prefixed("web")
    assert [t.name for t in prefixed.tools] == ["web_get_weather", "web_search"]
    assert prefixed.tools[1].json_schema() == search.json_schema()
    assert [t.name for t in web.tools] == ["get_weather", "search"], "the original is unchanged"
    both = Toolset([web.prefixed("a"), web.prefixed("b"), delete_file], name="all")
    assert len(both.tools) == 5
    with pytest.raises(ValueError, match="no tool named 'nope'; it has get_weather, search"):
        web.filtered(["nope"])
    with pytest.raises(ValueError, match="two tools named 'search'"):
        Toolset([web, search], name="dup")
    with pytest.raises(ValueError, match="not usable by model APIs"):
        web.prefixed("bad prefix")


async def test_prefixed_tools_run_under_their_new_name() -> None:
    provider = FakeProvider([call("web_search", query="tea"), assistant("done")])
    agent = create_agent(provider, tools=[Toolset([search], name="web").prefixed("web")])
    result = await agent.invoke({"query": "q"})
    assert result.output == "done" and ran == ["search:tea"]
    assert provider.calls[0].tool_names == ["web_search"]


async def test_an_approved_toolset_waits_for_a_person_on_each_call() -> None:
    danger = Toolset([delete_file], name="files").approved()
    provider = FakeProvider([call("delete_file", path="/tmp/x"), assistant("ok")])
    agent = create_agent(provider, tools=[get_weather, danger])
    backend = InMemoryBackend()
    first = await agent.invoke({"query": "clean"}, thread_id="t", backend=backend)
    assert first.status == "suspended" and ran == []
    assert first.pending[0].value["tool"] == "delete_file"
    assert not get_weather.requires_approval and not delete_file.requires_approval
    done = await agent.invoke(thread_id="t", backend=backend, resume={"c0": True})
    assert done.output == "ok" and ran == ["delete:/tmp/x"]


@dataclass
class Plan:
    pro: bool


async def test_when_swaps_a_toolset_per_run_from_the_deps() -> None:
    billing = Toolset([send_invoice], name="billing").when(lambda ctx: ctx.deps.pro)
    provider = FakeProvider(["a", "b"])
    agent = create_agent(provider, tools=[get_weather, billing], deps_type=Plan)
    await agent.invoke({"query": "q"}, deps=Plan(pro=False))
    await agent.invoke({"query": "q"}, deps=Plan(pro=True))
    assert [c.tool_names for c in provider.calls] == [
        ["get_weather"],
        ["get_weather", "send_invoice"],
    ]


async def test_a_toolset_of_another_agent() -> None:
    helper = create_agent(FakeProvider(["the helper's answer"]), name="helper")
    team = Toolset([as_tool(helper, name="ask_helper", description="Ask the helper.")], name="team")
    provider = FakeProvider([call("ask_helper", request="hi"), assistant("relayed")])
    result = await create_agent(provider, tools=[team]).invoke({"query": "q"})
    assert result.output == "relayed"
    assert any(m.role == "tool" and m.text == "the helper's answer" for m in result.messages)


def searcher(messages: list[Message], tools: list[Any]) -> Message:
    """Search for the weather tool, then call it, then answer."""
    names = [t.name for t in tools]
    last = messages[-1]
    if last.role == "user":
        return call("search_tools", turn=0, query="weather forecast")
    if last.name == "search_tools":
        assert "get_weather" in names  # loaded by the search
        return call("get_weather", turn=1, city="Oslo")
    return assistant(f"answer: {last.text}")


async def test_deferred_tools_are_named_only_until_a_search_loads_them() -> None:
    provider = FakeProvider(policy=searcher)
    catalog = Toolset([get_weather, delete_file, send_invoice], name="catalog", deferred=True)
    agent = create_agent(provider, tools=[search, catalog])
    backend = InMemoryBackend()
    result = await agent.invoke({"query": "weather in Oslo?"}, thread_id="t", backend=backend)
    assert result.output == "answer: Oslo: sunny" and ran == ["weather:Oslo"]
    first, second, _ = provider.calls
    assert first.tool_names == ["search", "search_tools"]
    described = first.tools[1].description
    assert all(n in described for n in ["get_weather", "delete_file", "send_invoice"])
    assert second.tool_names == ["search", "search_tools", "get_weather"]
    answer = json.loads(next(m.text for m in result.messages if m.name == "search_tools"))
    assert answer["loaded"][0] == {
        "name": "get_weather",
        "description": "Get the weather forecast for a city.",
    }
    # The transcript remembers what was loaded: the next run on the thread offers it at once.
    again = FakeProvider(["fine"])
    agent2 = create_agent(again, tools=[search, catalog])
    await agent2.invoke({"query": "and tomorrow?"}, thread_id="t", backend=backend)
    assert again.calls[0].tool_names == ["search", "search_tools", "get_weather"]


async def test_a_search_that_finds_nothing_says_what_is_known() -> None:
    provider = FakeProvider([call("search_tools", query="teleport"), assistant("sorry")])
    catalog = Toolset([get_weather], name="catalog", deferred=True)
    result = await create_agent(provider, tools=[catalog]).invoke({"query": "q"})
    answer = json.loads(next(m.text for m in result.messages if m.name == "search_tools"))
    assert answer["loaded"] == [] and "get_weather" in answer["note"]
    assert provider.calls[1].tool_names == ["search_tools"]


def test_clashing_names_across_toolsets_are_refused() -> None:
    catalog = Toolset([search], name="catalog", deferred=True)
    with pytest.raises(ValueError, match="two tools named 'search'"):
        create_agent(FakeProvider(["x"]), tools=[search, catalog])
