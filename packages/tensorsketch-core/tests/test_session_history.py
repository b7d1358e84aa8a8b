"""SessionHistory: a user's conversation carried across threads through a session store."""

from __future__ import annotations

import pytest

from tensorsketch import FakeProvider, InMemoryBackend, create_agent
from tensorsketch.agents import SessionHistory
from tensorsketch.memory import InMemorySessionStore
from tensorsketch.messages import ToolCall, assistant
from tensorsketch.tools import tool


async def test_a_new_thread_continues_the_users_conversation() -> None:
    sessions = InMemorySessionStore()
    model = FakeProvider([assistant("Nice to meet you, Ana."), assistant("You are Ana.")])
    agent = create_agent(
        model, system="Be brief.", middleware=[SessionHistory(sessions, "user:{user_id}")]
    )
    backend = InMemoryBackend()
    await agent.invoke(
        {"query": "My name is Ana."}, thread_id="t1", backend=backend, deps={"user_id": "u1"}
    )
    out = await agent.invoke(
        {"query": "What is my name?"}, thread_id="t2", backend=backend, deps={"user_id": "u1"}
    )
    assert out.output == "You are Ana."
    sent = model.calls[1].messages
    assert [(m.role, m.text) for m in sent] == [
        ("system", "Be brief."),
        ("user", "My name is Ana."),
        ("assistant", "Nice to meet you, Ana."),
        ("user", "What is my name?"),
    ]
    # The thread's own transcript holds only its own messages.
    assert [m.text for m in out.messages] == ["Be brief.", "What is my name?", "You are Ana."]
    texts = [m.text for m in await sessions.load("user:u1")]
    assert texts == [
        "My name is Ana.",
        "Nice to meet you, Ana.",
        "What is my name?",
        "You are Ana.",
    ]


async def test_a_turn_with_tool_calls_is_appended_once_with_its_answer() -> None:
    @tool
    async def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    sessions = InMemorySessionStore()
    model = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="c1", name="weather", args={"city": "Oslo"})]),
            assistant("It is sunny in Oslo."),
        ]
    )
    agent = create_agent(model, tools=[weather], middleware=[SessionHistory(sessions, "s")])
    await agent.invoke({"query": "Weather in Oslo?"})
    entries = await sessions.read("s")
    assert [(e.message.role, e.message.text) for e in entries] == [
        ("user", "Weather in Oslo?"),
        ("assistant", "It is sunny in Oslo."),
    ]
    assert len({e.turn for e in entries}) == 1


async def test_the_same_thread_does_not_see_its_own_turns_twice() -> None:
    sessions = InMemorySessionStore()
    await sessions.append("s", [assistant("from an older thread")], turn="old-thread:1:agent")
    model = FakeProvider([assistant("one"), assistant("two")])
    agent = create_agent(model, middleware=[SessionHistory(sessions, "s")])
    backend = InMemoryBackend()
    await agent.invoke({"query": "first"}, thread_id="t", backend=backend)
    await agent.invoke({"query": "second"}, thread_id="t", backend=backend)
    sent = [m.text for m in model.calls[1].messages]
    assert sent == ["from an older thread", "first", "one", "second"]
    assert len(await sessions.load("s")) == 5


async def test_a_failed_turn_writes_nothing() -> None:
    sessions = InMemorySessionStore()
    model = FakeProvider([RuntimeError("model down")])
    agent = create_agent(model, middleware=[SessionHistory(sessions, "s")])
    with pytest.raises(RuntimeError, match="model down"):
        await agent.invoke({"query": "hello"})
    assert await sessions.load("s") == []


async def test_last_limits_what_is_put_in_front() -> None:
    sessions = InMemorySessionStore()
    for i in range(5):
        await sessions.append("s", [assistant(f"old {i}")], turn=f"x:{i}")
    model = FakeProvider([assistant("ok")])
    agent = create_agent(model, middleware=[SessionHistory(sessions, "s", last=2)])
    await agent.invoke({"query": "hi"})
    assert [m.text for m in model.calls[0].messages] == ["old 3", "old 4", "hi"]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match="needs a SessionStore"):
        SessionHistory(object(), "s")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty str"):
        SessionHistory(InMemorySessionStore(), "")
    with pytest.raises(ValueError, match="from 1 to 10000"):
        SessionHistory(InMemorySessionStore(), "s", last=0)


async def test_a_template_without_its_field_names_what_to_pass() -> None:
    agent = create_agent(
        FakeProvider([assistant("x")]),
        middleware=[SessionHistory(InMemorySessionStore(), "user:{user_id}")],
    )
    with pytest.raises(LookupError, match="deps="):
        await agent.invoke({"query": "hi"})
