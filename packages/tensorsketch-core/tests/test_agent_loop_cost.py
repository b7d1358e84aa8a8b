"""What one turn of the agent loop costs an agent that uses none of the optional features.

Handoffs, guardrails, the stuck-loop stop, output modes, tool search, steering, budget caps
and fork bookkeeping each need a little work per turn — but only for an agent (or a run)
that uses them. The loop decides once per run which of them a turn runs, and these tests
hold it to that with counts, not times: the feature code paths are wrapped with counters
(and shown to count when the feature is on), and the Python calls a turn makes inside
TensorSketch are counted with ``sys.setprofile``. A change that adds per-turn work for
everyone fails here; gate it on its feature, decided when the agent or the run starts.
"""

from __future__ import annotations

import inspect
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import tensorsketch
from tensorsketch import ChatProvider, Completion, InMemoryBackend, Schema, create_agent, tool
from tensorsketch.agents import loop, tool_calls, turn
from tensorsketch.agents.handoffs import Routing
from tensorsketch.agents.loop import Agent
from tensorsketch.agents.stuck import RepeatWatch
from tensorsketch.budget import Budget
from tensorsketch.guardrails import max_size
from tensorsketch.messages import ToolCall, assistant
from tensorsketch.steering import bound_inbox
from tensorsketch.toolsets import ToolSearch

#: The most Python calls inside TensorSketch one tool-calling turn of a plain in-memory agent
#: makes (the model turn, one tool call, the loop). Measured, not guessed: lower it when the
#: loop gets cheaper; raise it only for work every agent needs, and say why in the commit.
CALLS_PER_TURN = 67


class Scripted(ChatProvider):
    """Asks for ``add`` with new arguments on each of the first ``k`` turns, then answers."""

    model = "scripted"
    provider_name = "scripted"

    def __init__(self, k: int, answer: str = "done") -> None:
        self.k = k
        self.answer = answer
        self.turn = 0

    async def complete(self, messages: Any, **_: Any) -> Completion:
        self.turn += 1
        if self.turn <= self.k:
            call = ToolCall(id=f"c{self.turn}", name="add", args={"a": self.turn, "b": 2})
            return Completion(message=assistant(tool_calls=[call]), model="scripted")
        return Completion(message=assistant(self.answer), model="scripted")


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


#: Where each optional feature's per-turn work lives.
FEATURE_PATHS: list[tuple[Any, str]] = [
    (loop, "_steered"),  # steering: the run's inbox
    (Agent, "_guard_reply"),  # output and tool-call guardrails
    (Agent, "_journaled"),
    (Agent, "_tool_turn"),  # handoffs and tool search around a turn's calls
    (loop, "_run_with_handoffs"),
    (Routing, "request"),
    (Routing, "after"),
    (ToolSearch, "offered"),
    (ToolSearch, "read"),
    (turn, "shape_request"),  # output modes
    (turn, "take_answer"),
    (RepeatWatch, "add"),  # the stuck-loop stop
    (Budget, "exceeded"),  # max_total_tokens / max_cost_usd
    (tool_calls, "tool_call_digest"),  # a journaled run's fork bookkeeping and intents
    (tool_calls, "calling"),
    (tool_calls, "EffectCall"),
]


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every feature path above, wrapped to count its calls."""
    counts: Counter[str] = Counter()
    for owner, name in FEATURE_PATHS:
        original = getattr(owner, name)
        if inspect.iscoroutinefunction(original):

            async def wrapper(*a: Any, __o: Any = original, __n: str = name, **kw: Any) -> Any:
                counts[__n] += 1
                return await __o(*a, **kw)

        else:

            def wrapper(*a: Any, __o: Any = original, __n: str = name, **kw: Any) -> Any:
                counts[__n] += 1
                return __o(*a, **kw)

        monkeypatch.setattr(owner, name, wrapper)
    return counts


async def test_a_plain_agent_runs_no_feature_code_in_its_turns(counted: Counter[str]) -> None:
    agent = create_agent(Scripted(5), tools=[add], max_iterations=50, stuck_after=None)
    out = await agent.invoke({"query": "go"})
    assert out.output == "done" and out.iterations == 6
    assert dict(counted) == {}


async def test_the_stuck_watch_is_the_only_default_feature_a_turn_runs(
    counted: Counter[str],
) -> None:
    out = await create_agent(Scripted(5), tools=[add], max_iterations=50).invoke({"query": "go"})
    assert out.output == "done"
    assert dict(counted) == {"add": 5}  # RepeatWatch.add, once per tool-calling turn


class Answer(Schema):
    text: str


class Inbox:
    async def pending(self) -> list[dict[str, Any]]:
        return []

    async def taken(self, messages: list[dict[str, Any]]) -> None:
        return None


async def test_the_counters_count_when_the_features_are_on(counted: Counter[str]) -> None:
    # The wrapped paths are the live ones: an agent using the features goes through them.
    provider = Scripted(3)
    agent = create_agent(
        provider,
        tools=[add],
        max_iterations=50,
        max_total_tokens=10_000,
        guardrails=[max_size(10_000, "output")],
        handoffs=[Agent(Scripted(0), name="other")],
    )
    with bound_inbox(Inbox()):
        out = await agent.invoke({"query": "go"}, thread_id="t", backend=InMemoryBackend())
    assert out.output == "done"
    turns, tool_turns = 4, 3
    assert counted["_steered"] == turns
    assert counted["exceeded"] == 2 * turns
    assert counted["_guard_reply"] == turns
    assert counted["_tool_turn"] == counted["_run_with_handoffs"] == tool_turns
    assert counted["request"] == turns and counted["after"] == tool_turns
    assert counted["add"] == tool_turns
    assert counted["tool_call_digest"] == counted["calling"] == counted["EffectCall"] == 3
    answer = Scripted(0, answer='{"text": "done"}')
    shaped = create_agent(answer, output_schema=Answer, output_mode="prompted")
    assert (await shaped.invoke({"query": "go"})).parsed == Answer(text="done")
    assert counted["shape_request"] == counted["take_answer"] == 1


def _calls_inside_tensorsketch(k: int) -> int:
    """Python calls (generator resumptions included) into TensorSketch's own code during
    one in-memory run of ``k`` tool-calling turns."""
    import asyncio

    root = str(Path(tensorsketch.__file__).parent)
    provider = Scripted(k)
    agent = create_agent(provider, tools=[add], max_iterations=1_000)

    async def run() -> int:
        await agent.invoke({"query": "go"})  # warm: first-call caches and imports
        provider.turn = 0
        seen = 0

        def profile(frame: FrameType, event: str, arg: Any) -> None:
            nonlocal seen
            if event == "call" and frame.f_code.co_filename.startswith(root):
                seen += 1

        sys.setprofile(profile)
        try:
            out = await agent.invoke({"query": "go"})
        finally:
            sys.setprofile(None)
        assert out.output == "done" and out.iterations == k + 1
        return seen

    return asyncio.run(run())


def test_a_tool_calling_turn_makes_a_bounded_number_of_calls() -> None:
    # The difference between runs of 10 and 5 turns is five turns' worth, without the run's
    # own setup; deterministic, so it is compared exactly against the ceiling.
    per_turn = (_calls_inside_tensorsketch(10) - _calls_inside_tensorsketch(5)) / 5
    assert per_turn <= CALLS_PER_TURN, (
        f"one turn of a plain agent now makes {per_turn} Python calls inside TensorSketch "
        f"(ceiling {CALLS_PER_TURN}): something added per-turn work every agent pays. Run it "
        "only for the agents or runs that use its feature (decided once per run, see "
        "Agent._loop), or raise CALLS_PER_TURN if every agent needs it."
    )


async def test_a_steered_turn_with_nothing_to_take_looks_its_key_up_once() -> None:
    """On a thread that already has a history (every journal look-up a store round trip),
    a turn of a run with a steering inbox asks for its steering key once: the peek that
    misses, with nothing waiting, is followed by neither a second look-up of the key and
    its intent nor a record of the empty take."""
    backend = InMemoryBackend()
    asked: list[str] = []
    one, many = backend.lookup_effect, backend.lookup_effects

    async def lookup_effect(thread_id: str, key: str) -> Any:
        asked.append(key)
        return await one(thread_id, key)

    async def lookup_effects(thread_id: str, keys: list[str]) -> Any:
        asked.extend(keys)
        return await many(thread_id, keys)

    backend.lookup_effect = lookup_effect  # type: ignore[method-assign]
    backend.lookup_effects = lookup_effects  # type: ignore[method-assign]
    with bound_inbox(Inbox()):
        first = await create_agent(Scripted(1), tools=[add]).invoke(
            {"query": "go"}, thread_id="t", backend=backend
        )
        asked.clear()
        again = await create_agent(Scripted(1), tools=[add]).invoke(
            {"query": "again"}, thread_id="t", backend=backend
        )
    assert first.output == again.output == "done"
    steering = [key for key in asked if key.endswith(":steer")]
    assert steering == ["1:agent:agent:0:steer", "1:agent:agent:1:steer"]
