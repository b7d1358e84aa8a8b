"""A steering take replayed after a crash: the same messages at the same model call.

An empty take is not journaled (issue 49); a resumed run tells a call that took nothing from
one it never made by the model call's entry, which a non-empty take's entry always precedes.
These tests crash an agent's run at every durable boundary (:class:`CrashingBackend`) on
SQLite, with a message sent while its first tool runs or while the run is down, and check
where the resumed run shows it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tensorsketch import Graph, RetryPolicy, tool
from tensorsketch.agents import Agent, AgentState
from tensorsketch.constants import END, START
from tensorsketch.errors import DepsUnavailableError, ThreadBusyError
from tensorsketch.fake import FakeProvider
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.runtime.backends.sqlite import SqliteBackend
from tensorsketch.steering import bound_inbox
from tensorsketch.testing.crash import CrashingBackend, SimulatedCrash

QUERY = {"query": "plan my trip"}
NOTE = "use metric units"


class ListInbox:
    """A run record's steering, kept in memory (it outlives the crashed attempt, as the
    record does): ``steering`` untaken, ``steering_taken`` the last seq marked."""

    def __init__(self) -> None:
        self.steering: list[dict[str, Any]] = []
        self.steering_taken = 0
        self.sent = 0

    def send(self, content: str) -> None:
        self.sent += 1
        self.steering.append({"seq": self.sent, "content": content})

    async def pending(self) -> list[dict[str, Any]]:
        return [dict(m) for m in self.steering if m["seq"] > self.steering_taken]

    async def taken(self, messages: list[dict[str, Any]]) -> None:
        upto = max(int(m["seq"]) for m in messages)
        if upto > self.steering_taken:
            self.steering = [m for m in self.steering if m["seq"] > upto]
            self.steering_taken = upto


def _agent(on_first_gate: Callable[[], None]) -> Any:
    """An agent graph of :func:`_agent_node`."""

    async def hook() -> None:
        on_first_gate()

    node = _agent_node(hook)
    return (
        Graph(AgentState, name="agent").add(node).edge(START, "agent").edge("agent", END).compile()
    )


def _agent_node(on_first_gate: Callable[[], Awaitable[None]]) -> Agent:
    """Calls ``gate("one")`` (which awaits ``on_first_gate``), then ``gate("two")``, then
    answers."""

    @tool
    async def gate(name: str) -> str:
        """Pass a gate."""
        if name == "one":
            await on_first_gate()
        return f"gate {name} passed"

    def decide(messages: list[Message], tools: Any) -> Message:
        passed = sum(1 for m in messages if m.role == "tool")
        if passed < 2:
            name = ("one", "two")[passed]
            return assistant(
                tool_calls=[ToolCall(id=f"c_{name}", name="gate", args={"name": name})]
            )
        return assistant("done")

    return Agent(FakeProvider(policy=decide), tools=[gate], name="agent")


def _transcript(values: Any) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in values.messages]


async def _resume(agent: Any, store: SqliteBackend, thread: str, started: bool) -> None:
    """Run ``thread`` on, once the crashed attempt's lease has lapsed."""
    deadline = time.monotonic() + 20
    while True:
        try:
            await agent.invoke(None if started else QUERY, thread_id=thread, backend=store)
            return
        except ThreadBusyError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def _crash_and_resume(
    store: SqliteBackend, thread: str, crash_at: int, *, while_down: bool
) -> tuple[ListInbox, list[str], list[tuple[str, str]]]:
    """One attempt crashed at boundary ``crash_at`` (``0``: not at all), the message sent
    while the first tool runs (or, ``while_down``, after the crash), then the resume.
    Returns the inbox, the keys journaled when the attempt ended, and the final transcript."""
    inbox = ListInbox()
    first_gate = (
        (lambda: None) if while_down else (lambda: inbox.send(NOTE) if not inbox.sent else None)
    )
    agent = _agent(first_gate)
    crashing = CrashingBackend(store, crash_at=crash_at, mode="raise")
    with bound_inbox(inbox):
        try:
            await agent.invoke(QUERY, thread_id=thread, backend=crashing)
            crashed = False
        except SimulatedCrash:
            crashed = True
        keys = [key for key, _ in await store.list_effects(thread)]
        if crashed:
            if while_down:
                inbox.send(NOTE)
            started = await store.latest_checkpoint(thread) is not None
            await _resume(agent, store, thread, started)
    state = await agent.aget_state(thread, store)
    return inbox, keys, _transcript(state)


def _where(transcript: list[tuple[str, str]]) -> int:
    """The index of the steering message in ``transcript`` (it must be there once)."""
    at = [i for i, entry in enumerate(transcript) if entry == ("user", NOTE)]
    assert len(at) == 1, transcript
    return at[0]


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    backend = SqliteBackend(str(tmp_path / "steer.db"))
    backend.lease_ttl = 0.3
    yield backend
    await backend.aclose()


async def _boundaries(store: SqliteBackend) -> list[str]:
    """The durable boundaries of an uninterrupted run that gets the message at its first
    tool."""
    inbox = ListInbox()
    agent = _agent(lambda: inbox.send(NOTE))
    crashing = CrashingBackend(store, crash_at=0, mode="raise")
    with bound_inbox(inbox):
        await agent.invoke(QUERY, thread_id="baseline", backend=crashing)
    return crashing.boundaries


async def test_a_message_sent_while_a_tool_runs_is_replayed_at_its_call_wherever_it_crashed(
    store: SqliteBackend,
) -> None:
    """The message comes while the first tool runs, after the first model call took nothing:
    wherever the run dies (before its take, after the take was journaled but not marked,
    after it was marked), the resumed run shows it once, right after the first tool's result,
    as the uninterrupted run does — never at the first call, whose journal entry says it took
    nothing."""
    _, _, expected = await _crash_and_resume(store, "whole", 0, while_down=False)
    at = _where(expected)
    assert expected[at - 1] == ("tool", "gate one passed")
    boundaries = await _boundaries(store)
    assert [b for b in boundaries if b.endswith(":1:steer")], boundaries  # a take's own unit
    for n in range(1, len(boundaries) + 1):
        inbox, _, transcript = await _crash_and_resume(store, f"t{n}", n, while_down=False)
        assert transcript == expected, (n, boundaries[n - 1], transcript)
        assert inbox.steering == [] and inbox.steering_taken == 1, (n, boundaries[n - 1])


async def test_a_message_sent_while_the_run_is_down_waits_for_the_next_call_it_makes(
    store: SqliteBackend,
) -> None:
    """The message comes between the crash and the resume: every model call the first
    attempt journaled is replayed without it (each took nothing), and the first call the
    resumed run makes takes it; a run that had ended leaves it untaken."""
    boundaries = await _boundaries(store)
    made = set()
    for n in range(1, len(boundaries) + 1):
        inbox, keys, transcript = await _crash_and_resume(store, f"d{n}", n, while_down=True)
        assert not [key for key in keys if key.endswith(":steer")], keys
        calls = sum(1 for key in keys if key.endswith(":model"))
        made.add(calls)
        if calls == 3:  # the answer too: the run had ended
            assert ("user", NOTE) not in transcript and inbox.steering_taken == 0
            continue
        at = _where(transcript)
        assert sum(1 for role, _ in transcript[:at] if role == "assistant") == calls, (
            n,
            transcript,
        )
        assert inbox.steering == [] and inbox.steering_taken == 1
    assert made >= {0, 1, 2, 3}, made


class _Flaky(DepsUnavailableError):
    """A failure a tool call lets through to its node (as it does a missing ``deps=``)."""


async def test_a_retried_node_in_memory_replays_a_call_that_took_nothing() -> None:
    """In memory, a node its policy retries replays what the failed attempt's model calls got
    (the effect log keeps them for the superstep); a message sent after the first call took
    nothing waits for the second in the retried attempt too."""
    inbox = ListInbox()

    async def first_gate_fails_once() -> None:
        if not inbox.sent:
            inbox.send(NOTE)
            raise _Flaky("the first attempt fails here")

    agent = _agent_node(first_gate_fails_once)
    graph = Graph(AgentState, name="retried")
    retry = RetryPolicy(max_attempts=2, initial_interval=0, retry_on=(_Flaky,))
    graph.add(agent, retry=retry).edge(START, "agent").edge("agent", END)
    with bound_inbox(inbox):
        out = await graph.compile().invoke(QUERY)
    transcript = _transcript(out)
    assert transcript[_where(transcript) - 1] == ("tool", "gate one passed"), transcript
    assert inbox.steering_taken == 1
