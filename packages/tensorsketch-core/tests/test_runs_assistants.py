"""``runner.assistants`` on the in-memory store: a run pins the version it was submitted with,
an assistant's ``multitask_strategy`` is its runs' double-texting policy, ``context`` reaches
any node, and ``Agent.configured`` applies the model and limits (the HTTP routes on SQLite,
PostgreSQL and Redis: tensorsketch-serve's tests/test_tasks_assistants.py)."""

from __future__ import annotations

import asyncio

import pytest

from tensorsketch import Context, Graph, Node, Schema
from tensorsketch.agents import create_agent
from tensorsketch.assistant_config import current_assistant
from tensorsketch.constants import END, START
from tensorsketch.fake import FakeProvider
from tensorsketch.runs import AssistantNotFoundError, AsyncRunner, RunConflictError
from tensorsketch.runtime.backends.memory import InMemoryBackend
from tensorsketch.testing.runs import hang_graph


class Greeting(Schema):
    out: str = ""


class Greet(Node):
    """Greets in the language its assistant's ``context`` names."""

    class In(Schema):
        out: str

    class Out(Schema):
        out: str

    async def run(self, ctx: Context, inp: In) -> Out:
        config = current_assistant() or {}
        return self.Out(out=f"hello in {config.get('context', {}).get('language', 'none')}")


def _greeter() -> object:
    g = Graph(Greeting, name="greeter")
    g.add(Greet)
    g.edge(START, "Greet").edge("Greet", END)
    return g.compile()


async def test_a_run_keeps_the_version_it_was_submitted_with() -> None:
    async with AsyncRunner(_greeter(), backend=InMemoryBackend()) as runner:  # type: ignore[arg-type]
        made = await runner.assistants.create("fr", {"context": {"language": "french"}})
        first = await runner.submit({"out": ""}, assistant="fr")
        await runner.assistants.update("fr", {"context": {"language": "german"}})
        second = await runner.submit({"out": ""}, assistant=made.assistant_id)
        one = await runner.await_run(first.run_id, timeout=30)
        two = await runner.await_run(second.run_id, timeout=30)
        plain = await runner.await_run((await runner.submit({"out": ""})).run_id, timeout=30)
    assert one.assistant is not None and one.assistant["version"] == 1
    assert one.output["out"] == "hello in french"
    assert two.assistant is not None and two.assistant["version"] == 2
    assert two.output["out"] == "hello in german"
    assert plain.output["out"] == "hello in none" and plain.assistant is None


@pytest.mark.parametrize("strategy", ["enqueue", "reject", "interrupt", "rollback"])
async def test_a_run_on_a_named_thread_keeps_its_assistant_under_every_policy(
    strategy: str,
) -> None:
    """The pin travels through the double-texting path too (a ``thread_id``), whatever the
    policy — under ``enqueue``, the runner's default, it was once dropped."""
    async with AsyncRunner(_greeter(), backend=InMemoryBackend()) as runner:  # type: ignore[arg-type]
        await runner.assistants.create("fr", {"context": {"language": "french"}})
        record = await runner.submit(
            {"out": ""}, thread_id=f"t-{strategy}", assistant="fr", multitask_strategy=strategy
        )
        assert record.assistant is not None and record.assistant["name"] == "fr"
        done = await runner.await_run(record.run_id, timeout=30)
    assert done.output["out"] == "hello in french"
    assert done.assistant is not None and done.assistant["version"] == 1


async def test_an_assistants_multitask_strategy_is_its_runs_policy() -> None:
    async with AsyncRunner(hang_graph(), backend=InMemoryBackend()) as runner:
        await runner.assistants.create("strict", {"multitask_strategy": "reject"})
        first = await runner.submit({"n": 30}, thread_id="t")
        with pytest.raises(RunConflictError, match="'reject'"):
            await runner.submit({"n": 1}, thread_id="t", assistant="strict")
        queued = await runner.submit({"n": 1}, thread_id="t")  # the runner's default: enqueue
        assert queued.status == "queued"
        with pytest.raises(AssistantNotFoundError):
            await runner.submit({"n": 1}, thread_id="t", assistant="lenient")
        await runner.cancel(first.run_id)
        await runner.cancel(queued.run_id)


async def test_configured_agents_call_the_model_and_limits_the_version_names() -> None:
    provider = FakeProvider()
    graph = create_agent(provider, name="helper")
    agent = graph.spec.nodes["helper"].node
    configured = agent.configured({"model": "big-model", "max_tokens": 77, "max_iterations": 3})  # type: ignore[attr-defined]
    assert configured.provider.model == "big-model" and provider.model == "fake-model"
    assert configured.options["max_tokens"] == 77 and configured.max_iterations == 3
    async with AsyncRunner(graph, backend=InMemoryBackend()) as runner:
        await runner.assistants.create("big", {"model": "big-model", "max_tokens": 77})
        done = await runner.await_run(
            (await runner.submit({"query": "hi"}, assistant="big")).run_id, timeout=30
        )
    assert done.status == "succeeded"
    assert provider.calls[-1].max_tokens == 77


async def test_names_are_unique_and_rollback_needs_a_kept_version() -> None:
    async with AsyncRunner(hang_graph(), backend=InMemoryBackend()) as runner:
        await runner.assistants.create("a")
        results = await asyncio.gather(
            runner.assistants.create("b"), runner.assistants.create("b"), return_exceptions=True
        )
        assert sum(isinstance(r, RunConflictError) for r in results) == 1
        with pytest.raises(RunConflictError, match="already exists"):
            await runner.assistants.create("a")
        with pytest.raises(AssistantNotFoundError, match="no version 2"):
            await runner.assistants.rollback("a", 2)
        with pytest.raises(ValueError, match="has no agent"):
            await runner.assistants.update("a", {"tools": ["x"]})
        found, _ = await runner.assistants.list()
        assert [a.name for a in found] == ["a", "b"]
