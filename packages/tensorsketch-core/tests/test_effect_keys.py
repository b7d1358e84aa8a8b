"""Effect keys: each kind's exact spelling, pinned (threads journaled by an earlier release
resume by these strings), and the parser reading every spelling back."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import tensorsketch.effects as effects
from tensorsketch import FakeProvider, InMemoryBackend, RetryLater, create_agent, tool
from tensorsketch.durable import RunJournal
from tensorsketch.effect_keys import (
    AgentTurnKey,
    CallKey,
    DecisionKey,
    DeferralKey,
    EffectKey,
    IdempotencyKey,
    LlmAttemptKey,
    NodeEffectKey,
    Scope,
    ToolCallKey,
    WritesKey,
    agent_shown_key,
    agent_turn_key,
    decision_key,
    decisions_prefix,
    deferral_key,
    idempotency_key,
    llm_attempt_key,
    parse_effect_key,
    part_name,
    step_key,
    superstep_prefix,
    tool_effect_key,
    writes_key,
    writes_prefix,
)
from tensorsketch.messages import ToolCall, assistant
from tensorsketch.pregel.spec import Task

AGENT = Scope(0, "agent")
FANNED = Scope(7, "worker", "#2[1.0]")
TOOL = ToolCallKey(AGENT, 1, 0, "c1")


def test_each_writer_spells_its_key_as_released() -> None:
    assert step_key(3, "fetch", "#2", 1, "http") == "3:fetch#2:1:http"
    assert agent_turn_key(AGENT, 2, "model") == "0:agent:agent:2:model"
    assert agent_turn_key(AGENT, 2, "summary") == "0:agent:agent:2:summary"
    assert tool_effect_key(AGENT, 1, 0, "c1") == "0:agent:agent:1:tool:0:c1"
    assert tool_effect_key(FANNED, 0, 3, "x") == "7:worker#2[1.0]:agent:0:tool:3:x"
    assert agent_shown_key(AGENT, 1) == "0:agent:agent:shown1"
    assert parse_effect_key("0:agent:agent:shown1") == NodeEffectKey(AGENT, "agent:shown1")
    assert deferral_key("0:agent:agent:1:tool:0:c1", 2) == "0:agent:agent:1:tool:0:c1:defer2"
    assert llm_attempt_key(Scope(4, "Judge"), 1) == "4:Judge:llm:1"
    assert decision_key(5, "r1") == "resume:5:r1"
    assert writes_key("ckpt-1", "fetch", "#0") == "writes:ckpt-1:fetch#0"
    assert writes_key(None, "fetch", "") == "writes:None:fetch"
    assert idempotency_key("pay-7") == "idem:pay-7"
    assert part_name(3, "model") == "3.model" and part_name("llm", 0) == "llm.0"
    assert part_name(2, 1) == "2.1"
    assert superstep_prefix(3) == "3:"
    assert decisions_prefix(3) == "resume:3:"
    assert writes_prefix("p") == "writes:p:"


def test_the_engine_still_finds_the_helpers_in_effects() -> None:
    assert effects.step_key is step_key and effects.decision_key is decision_key
    assert effects.IDEMPOTENCY_PREFIX == "idem:"


def test_a_finished_task_is_journaled_under_its_writes_key() -> None:
    node: Any = SimpleNamespace(name="fetch")
    task = Task(node, {"url": "u"}, "#1")
    assert RunJournal.task_key("ckpt-9", task.key) == "writes:ckpt-9:fetch#1"
    assert parse_effect_key(RunJournal.task_key("ckpt-9", task.key)) == WritesKey(
        "ckpt-9", "fetch", "#1"
    )


KEYS: list[tuple[EffectKey, str]] = [
    (CallKey(Scope(3, "fetch", "#2"), 1, "http"), "3:fetch#2:1:http"),
    (CallKey(Scope(0, "Check"), 0, "generate_structured/1"), "0:Check:0:generate_structured/1"),
    (CallKey(Scope(0, "n"), 4, "a:b"), "0:n:4:a:b"),
    (CallKey(Scope(0, "agent", "[1.0]"), 0, "search"), "0:agent[1.0]:0:search"),
    (AgentTurnKey(AGENT, 2, "model"), "0:agent:agent:2:model"),
    (AgentTurnKey(FANNED, 0, "summary"), "7:worker#2[1.0]:agent:0:summary"),
    (TOOL, "0:agent:agent:1:tool:0:c1"),
    (ToolCallKey(AGENT, 0, 1, "ns:c1"), "0:agent:agent:0:tool:1:ns:c1"),
    (ToolCallKey(AGENT, 0, 0, ""), "0:agent:agent:0:tool:0:"),
    (DeferralKey(TOOL, 0), "0:agent:agent:1:tool:0:c1:defer0"),
    (DeferralKey(ToolCallKey(AGENT, 0, 1, "ns:c1"), 12), "0:agent:agent:0:tool:1:ns:c1:defer12"),
    (LlmAttemptKey(Scope(4, "Judge"), 1), "4:Judge:llm:1"),
    (NodeEffectKey(Scope(1, "custom"), "something"), "1:custom:something"),
    (NodeEffectKey(AGENT, "agent:x:model"), "0:agent:agent:x:model"),
    (DecisionKey(5, "r1"), "resume:5:r1"),
    (
        DecisionKey(0, "0:agent:agent:0:tool:0:l1:defer0"),
        "resume:0:0:agent:agent:0:tool:0:l1:defer0",
    ),
    (WritesKey("ckpt-1", "fetch", "#0"), "writes:ckpt-1:fetch#0"),
    (WritesKey(None, "fetch"), "writes:None:fetch"),
    (IdempotencyKey("pay:7"), "idem:pay:7"),
]


@pytest.mark.parametrize(("key", "spelt"), KEYS, ids=[spelt for _, spelt in KEYS])
def test_keys_round_trip(key: EffectKey, spelt: str) -> None:
    assert key.format() == spelt
    assert parse_effect_key(spelt) == key


def test_a_parsed_key_names_its_node() -> None:
    nodes = {spelt: key.node for key, spelt in KEYS}
    assert nodes["3:fetch#2:1:http"] == "fetch"
    assert nodes["7:worker#2[1.0]:agent:0:summary"] == "worker"
    assert nodes["0:agent:agent:1:tool:0:c1:defer0"] == "agent"
    assert nodes["writes:ckpt-1:fetch#0"] == "fetch"
    assert nodes["resume:5:r1"] is None and nodes["idem:pay:7"] is None


@pytest.mark.parametrize(
    "text",
    ["", "plain", "x:node:0:a", "resume:x:r1", "resume:5", "writes:plan", "0::0:a", "0:node"],
)
def test_strings_no_writer_spells_are_not_keys(text: str) -> None:
    assert parse_effect_key(text) is None


async def test_a_deferred_tool_call_suspends_under_its_deferral_key() -> None:
    @tool
    def later() -> str:
        """Not yet."""
        raise RetryLater("not ready", delay=3600)

    provider = FakeProvider([assistant(tool_calls=[ToolCall(id="l1", name="later", args={})])])
    out = await create_agent(provider, [later]).invoke(
        {"query": "go"}, thread_id="t", backend=InMemoryBackend()
    )
    [pending] = out.pending
    assert pending.id == "0:agent:agent:0:tool:0:l1:defer0"
    assert parse_effect_key(pending.id) == DeferralKey(ToolCallKey(AGENT, 0, 0, "l1"), 0)
    assert pending.value == {"tool": "later", "call_id": "l1", "reason": "not ready"}
