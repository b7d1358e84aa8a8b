"""MemoryWriteBack: what a finished turn taught, written into the run's memory store."""

from __future__ import annotations

from typing import Any

import pytest

from tensorsketch import FakeProvider, InMemoryBackend, create_agent
from tensorsketch.agents import MemoryHydration, MemoryWriteBack
from tensorsketch.memory import HashingEmbedder, InMemoryStore
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.tools import tool


async def test_a_finished_turn_is_kept_and_found_by_a_later_thread() -> None:
    store = InMemoryStore(embedder=HashingEmbedder())
    model = FakeProvider([assistant("Noted: oat milk."), assistant("Oat milk, as you said.")])
    agent = create_agent(
        model,
        middleware=[
            MemoryHydration(("users", "{user_id}", "turns")),
            MemoryWriteBack(("users", "{user_id}", "turns")),
        ],
    )
    backend = InMemoryBackend()
    await agent.invoke(
        {"query": "I take oat milk in my coffee."},
        thread_id="mon",
        backend=backend,
        memory=store,
        deps={"user_id": "ana"},
    )
    (item,) = (await store.list(("users", "ana"))).items
    assert item.key.startswith("mon:") and item.key.endswith(":turn")
    assert item.value["question"] == "I take oat milk in my coffee."
    assert item.value["answer"] == "Noted: oat milk."
    await agent.invoke(
        {"query": "Which milk do I take?"},
        thread_id="tue",
        backend=backend,
        memory=store,
        deps={"user_id": "ana"},
    )
    prompt = model.calls[1].messages
    assert "oat milk" in prompt[0].text  # hydrated from the written-back turn
    assert len((await store.list(("users", "ana"))).items) == 2
    assert (await store.list(("users", "bob"))).items == []


async def test_a_custom_policy_keeps_what_it_extracts_and_tool_steps_write_nothing() -> None:
    @tool
    async def lookup(name: str) -> str:
        """Look a customer up."""
        return f"{name}: gold tier"

    async def facts(questions: list[Message], answer: Message) -> dict[str, Any]:
        return {"tier": {"content": answer.text}} if "gold" in answer.text else {}

    store = InMemoryStore()
    model = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="c1", name="lookup", args={"name": "ana"})]),
            assistant("Ana is gold tier."),
            assistant("Hello."),
        ]
    )
    agent = create_agent(
        model, tools=[lookup], middleware=[MemoryWriteBack(("crm", "{user_id}"), extract=facts)]
    )
    await agent.invoke({"query": "who is ana?"}, memory=store, deps={"user_id": "ana"})
    items = (await store.list(("crm",))).items
    assert [(i.key.rsplit(":", 1)[1], i.value) for i in items] == [
        ("tier", {"content": "Ana is gold tier."})
    ]
    await agent.invoke({"query": "hi"}, memory=store, deps={"user_id": "ana"})
    assert len((await store.list(("crm",))).items) == 1  # {} keeps nothing


class _DiesAfterWriting(InMemoryStore):
    """Writes, then fails once: the process died after the write, before its journal record."""

    died = False

    async def put_many(self, requests: Any) -> list[int]:
        revs = await super().put_many(requests)
        if not self.died:
            self.died = True
            raise ConnectionError("the process died right after the write")
        return revs


async def test_a_turn_re_run_after_dying_past_its_write_rewrites_the_same_item() -> None:
    store = _DiesAfterWriting()
    backend = InMemoryBackend()
    model = FakeProvider([assistant("Noted."), assistant("Noted.")])
    agent = create_agent(model, middleware=[MemoryWriteBack(("users", "{user_id}"))])
    run: dict[str, Any] = {
        "thread_id": "t",
        "backend": backend,
        "memory": store,
        "deps": {"user_id": "ana"},
    }
    with pytest.raises(ConnectionError):
        await agent.invoke({"query": "I am vegetarian"}, **run)
    await agent.invoke(None, **run)  # resume: the model step runs again
    (item,) = (await store.list(("users", "ana"))).items
    assert item.value["question"] == "I am vegetarian" and item.rev == 2


def test_bad_options_say_what_to_pass() -> None:
    with pytest.raises(ValueError, match="tuple of non-empty strings"):
        MemoryWriteBack(())
    with pytest.raises(TypeError, match=r"\(questions, answer\)"):
        MemoryWriteBack(("u",), extract="turn")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seconds"):
        MemoryWriteBack(("u",), ttl="1h")  # type: ignore[arg-type]


async def test_an_extract_that_returns_no_mapping_is_named() -> None:
    model = FakeProvider([assistant("ok")])
    bad = MemoryWriteBack(("u",), extract=lambda q, a: ["x"])  # type: ignore[arg-type,return-value]
    agent = create_agent(model, middleware=[bad])
    with pytest.raises(TypeError, match="returned list"):
        await agent.invoke({"query": "hi"}, memory=InMemoryStore())
