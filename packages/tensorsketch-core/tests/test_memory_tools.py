"""remember / recall / forget: the run's memory store as agent tools, scoped per user."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tensorsketch import END, START, Agent, FakeProvider, Graph, InMemoryBackend, create_agent
from tensorsketch.agents import AgentState, MemoryHydration, memory_tools
from tensorsketch.memory import HashingEmbedder, InMemoryStore
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.runs import AsyncRunner


def _tool_answers(messages: list[Message]) -> list[str]:
    return [m.text for m in messages if m.role == "tool"]


def _script(*calls: tuple[str, dict[str, Any]]) -> FakeProvider:
    return FakeProvider(
        [
            *(
                assistant(tool_calls=[ToolCall(id=f"c{i}", name=name, args=args)])
                for i, (name, args) in enumerate(calls)
            ),
            assistant("done"),
        ]
    )


async def test_remember_recall_forget_in_the_users_namespace() -> None:
    store = InMemoryStore(embedder=HashingEmbedder())
    await store.put(("users", "u2", "notes"), "other", {"content": "u2 likes green tea"})
    model = _script(
        ("remember", {"content": "prefers green tea in the morning"}),
        ("remember", {"content": "uses dark mode", "key": "theme"}),
        ("recall", {"query": "what tea does the user drink"}),
        ("forget", {"key": "theme"}),
        ("forget", {"key": "theme"}),
    )
    agent = create_agent(model, tools=memory_tools(("users", "{user_id}", "notes")))
    out = await agent.invoke({"query": "hi"}, memory=store, deps={"user_id": "u1"})
    answers = _tool_answers(out.messages)
    assert answers[0].startswith("Remembered as 'note-")
    assert answers[1] == "Remembered as 'theme'."
    recalled = json.loads(answers[2])
    assert recalled[0]["content"] == "prefers green tea in the morning"
    assert all("u2" not in r["content"] for r in recalled)  # another user's notes stay out
    assert answers[3:] == ["Forgot 'theme'.", "Nothing was remembered under 'theme'."]
    keys = [i.key for i in (await store.list(("users", "u1"))).items]
    assert len(keys) == 1 and keys[0].startswith("note-")


async def test_a_missing_namespace_field_names_the_fix() -> None:
    model = _script(("recall", {"query": "x"}))
    agent = create_agent(model, tools=memory_tools(("users", "{user_id}")))
    out = await agent.invoke({"query": "hi"}, memory=InMemoryStore())
    assert "invoke(..., deps={'user_id': ...})" in _tool_answers(out.messages)[0]


async def test_remembering_in_a_durable_agent_is_written_once_across_a_resume() -> None:
    store = InMemoryStore(embedder=HashingEmbedder())
    backend = InMemoryBackend()
    model = _script(("remember", {"content": "allergic to peanuts", "key": "allergy"}))
    agent = create_agent(model, tools=memory_tools(("users", "{user_id}")))
    out = await agent.invoke(
        {"query": "hi"}, thread_id="t", backend=backend, memory=store, deps={"user_id": "u1"}
    )
    assert out.status == "completed"
    item = await store.get(("users", "u1"), "allergy")
    assert item is not None and item.rev == 1


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="names"):
        memory_tools(("users",), names=["remember", "reminisce"])
    with pytest.raises(ValueError, match="tuple of non-empty strings"):
        memory_tools(())
    assert [t.name for t in memory_tools(("a",), names=["recall"])] == ["recall"]


async def test_hydration_puts_the_users_memories_into_the_prompt() -> None:
    store = InMemoryStore(embedder=HashingEmbedder())
    await store.put(("users", "u1"), "lang", {"content": "prefers answers in Portuguese"})
    await store.put(("users", "u1"), "pet", {"content": "has a dog called Bolt"})
    await store.put(("users", "u2"), "lang", {"content": "prefers answers in German"})
    model = FakeProvider([assistant("Olá!")])
    agent = create_agent(
        model,
        system="Be brief.",
        middleware=[MemoryHydration(("users", "{user_id}"), limit=1)],
    )
    out = await agent.invoke(
        {"query": "which answers language do I prefer"}, memory=store, deps={"user_id": "u1"}
    )
    assert out.output == "Olá!"
    sent = model.calls[0].messages
    assert [m.role for m in sent] == ["system", "system", "user"]
    assert sent[0].text == "Be brief."
    assert sent[1].text.endswith("\n- prefers answers in Portuguese")  # ranked, limited, u1's
    assert all("Portuguese" not in m.text for m in out.messages)  # the transcript is untouched


async def test_a_runner_fills_the_namespace_from_the_runs_labels() -> None:
    """The run's labels (its submit-time config) fill a namespace the deps do not: each run
    of one runner reaches its own user's memories."""
    store = InMemoryStore(embedder=HashingEmbedder())
    model = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="c1", name="remember", args={"content": "tea"})]),
            assistant("noted"),
            assistant(tool_calls=[ToolCall(id="c2", name="recall", args={"query": ""})]),
            assistant("nothing yet"),
        ]
    )
    agent = create_agent(model, tools=memory_tools(("users", "{user_id}")))
    async with AsyncRunner(agent, backend=InMemoryBackend(), memory=store) as runner:
        ana = await runner.submit({"query": "hi"}, labels={"user_id": "ana"})
        assert (await runner.await_run(ana.run_id, timeout=30)).status == "succeeded"
        bob = await runner.submit({"query": "hi"}, labels={"user_id": "bob"})
        assert (await runner.await_run(bob.run_id, timeout=30)).status == "succeeded"
    assert [i.value for i in (await store.list(("users", "ana"))).items] == [{"content": "tea"}]
    assert (await store.list(("users", "bob"))).items == []
    recalled = model.calls[3].messages[-1]
    assert recalled.role == "tool" and json.loads(recalled.text) == []


async def test_a_missing_field_names_both_deps_and_labels() -> None:
    model = _script(("recall", {"query": "x"}))
    agent = create_agent(model, tools=memory_tools(("users", "{user_id}")))
    out = await agent.invoke({"query": "hi"}, memory=InMemoryStore())
    assert "labels={'user_id': ...}" in _tool_answers(out.messages)[0]


class _UserChat(AgentState):
    """An agent's state that carries who the conversation is with."""

    user_id: str = ""


def _chat_graph(model: FakeProvider, template: tuple[str, ...]) -> Any:
    agent = Agent(model, tools=memory_tools(template), name="chat")
    return Graph(_UserChat).add(agent).edge(START, "chat").edge("chat", END).compile()


async def test_the_namespace_is_filled_from_the_runs_input_state() -> None:
    """A field of the run's state (``invoke({"user_id": ...})``) fills the template when
    neither deps nor labels name it; a later turn on the thread keeps the user its state
    holds."""
    store = InMemoryStore(embedder=HashingEmbedder())
    model = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="c1", name="remember", args={"content": "tea"})]),
            assistant("noted"),
            assistant(tool_calls=[ToolCall(id="c2", name="recall", args={"query": "tea"})]),
            assistant("you like tea"),
        ]
    )
    graph = _chat_graph(model, ("users", "{user_id}", "prefs"))
    threads = InMemoryBackend()
    on = {"thread_id": "t-ana", "backend": threads, "memory": store}
    await graph.invoke({"query": "hi", "user_id": "ana"}, **on)
    assert [i.value for i in (await store.list(("users", "ana"))).items] == [{"content": "tea"}]
    later = await graph.invoke({"query": "what do I drink?"}, **on)  # no user_id passed
    assert json.loads(_tool_answers(later.messages)[-1])[0]["content"] == "tea"
    # deps win over the state (the caller's word over the input's)
    model = _script(("remember", {"content": "likes coffee", "key": "drink"}))
    graph = _chat_graph(model, ("users", "{user_id}", "prefs"))
    await graph.invoke({"query": "hi", "user_id": "ana"}, memory=store, deps={"user_id": "bo"})
    assert (await store.get(("users", "bo", "prefs"), "drink")).value == {"content": "likes coffee"}
    assert (await store.get(("users", "ana", "prefs"), "drink")) is None


async def test_a_state_field_left_empty_or_missing_is_named() -> None:
    graph = _chat_graph(_script(("recall", {"query": "x"})), ("users", "{user_id}"))
    out = await graph.invoke({"query": "hi"}, memory=InMemoryStore())
    assert "'user_id' fills a memory namespace" in _tool_answers(out.messages)[0]
    graph = _chat_graph(_script(("recall", {"query": "x"})), ("users", "{tenant}"))
    answer = _tool_answers((await graph.invoke({"query": "hi"}, memory=InMemoryStore())).messages)
    assert "a field 'tenant' of the run's input state" in answer[0]
