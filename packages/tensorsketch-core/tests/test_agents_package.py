"""The ``tensorsketch.agents`` package: its public names, the shared options, and the journal
keys its nodes write (threads written by an earlier version must resume unchanged)."""

from __future__ import annotations

import inspect
import pickle
import typing
from typing import Any, Literal

import pytest

from tensorsketch import (
    END,
    START,
    Agent,
    AgentState,
    Budget,
    Context,
    FakeProvider,
    Graph,
    InMemoryBackend,
    Llm,
    Node,
    Schema,
    Usage,
    create_agent,
    generate_structured,
    tool,
)
from tensorsketch.agents import AgentOptions
from tensorsketch.agents.options import AgentSettings
from tensorsketch.budget import budget_scope
from tensorsketch.effects import EffectLog
from tensorsketch.messages import ToolCall, assistant
from tensorsketch.provider import StructuredOutputError
from tensorsketch.serializers import JsonSerializer


class Verdict(Schema):
    ok: bool
    reason: Literal["fine", "bad"]


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def test_public_names_keep_their_module() -> None:
    import tensorsketch.agents as agents

    for name in ["Agent", "AgentState", "Llm", "create_agent"]:
        obj = getattr(agents, name)
        assert obj.__module__ == "tensorsketch.agents", name
    hints = typing.get_type_hints(AgentState, include_extras=True)
    assert hints["status"] == agents.AgentStatus and hints["usage"] is Usage
    assert set(agents.__all__) >= {"Agent", "AgentState", "AgentStatus", "Llm", "create_agent"}


def test_agent_state_round_trips_under_its_old_tag() -> None:
    codec = JsonSerializer()
    state = AgentState(query="q", messages=[assistant("hi")], status="completed")
    data = codec.dumps({"state": state})
    assert b"tensorsketch.agents:AgentState" in data
    assert codec.loads(data)["state"] == state
    assert pickle.loads(pickle.dumps(state)) == state


def test_options_are_defined_once_and_typed_in_step() -> None:
    hints = typing.get_type_hints(AgentOptions)
    settings = typing.get_type_hints(AgentSettings)
    assert hints == settings
    assert AgentOptions.__required_keys__ == frozenset()


def test_agent_and_create_agent_take_the_same_options() -> None:
    def keywords(fn: Any) -> dict[str, inspect.Parameter]:
        return dict(inspect.signature(fn).parameters)

    agent, factory = keywords(Agent.__init__), keywords(create_agent)
    assert list(factory) == ["provider", "tools", "options"]
    assert [*agent][1:3] == ["provider", "tools"]
    assert {"input_key", "output_key", "report", "options"} <= set(agent)
    node = Agent(FakeProvider(), [add], system="s", max_iterations=3, name="helper")
    graph = create_agent(FakeProvider(), [add], system="s", max_iterations=3, name="helper")
    assert graph.structure.nodes == ("helper",)
    assert (node.system, node.max_iterations, node.name) == ("s", 3, "helper")
    assert node.options == {"max_tokens": 1024}
    tuned = Agent(FakeProvider(), max_tokens=50, model_options={"temperature": 0})
    assert tuned.options == {"max_tokens": 50, "temperature": 0}


@pytest.mark.parametrize("build", [Agent, create_agent])
def test_an_unknown_option_is_a_type_error_naming_it(build: Any) -> None:
    with pytest.raises(TypeError, match=r"'max_iteration' \(did you mean 'max_iterations'\?\)"):
        build(FakeProvider(), max_iteration=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        build(FakeProvider(), colour="red")
    with pytest.raises(ValueError, match="max_iterations"):
        build(FakeProvider(), max_iterations=0)
    with pytest.raises(TypeError, match="fallbacks"):
        build(FakeProvider(), fallbacks=["not a provider"])


def test_create_agent_does_not_take_the_node_only_keys() -> None:
    with pytest.raises(
        TypeError, match=r"create_agent\(\) got an unexpected keyword argument 'report'"
    ):
        create_agent(FakeProvider(), report=False)  # type: ignore[call-arg]


# -- journal keys ------------------------------------------------------------------------------


@pytest.fixture
def journal_keys(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every key a node journals an effect under, in order (they must never change: threads
    written by an earlier release resume by them)."""
    seen: list[str] = []
    original = EffectLog.once

    async def spy(self: EffectLog, key: str, fn: Any, *rest: Any) -> Any:
        seen.append(key)
        return await original(self, key, fn, *rest)

    monkeypatch.setattr(EffectLog, "once", spy)
    return seen


async def test_llm_repairs_under_the_same_keys(journal_keys: list[str]) -> None:
    class State(Schema):
        query: str
        verdict: Verdict | None = None

    provider = FakeProvider(["oops", '{"ok": true, "reason": "fine"}'])
    app = (
        Graph(State)
        .add(Llm(provider, output_key="verdict", output_schema=Verdict, name="Judge"))
        .edge(START, "Judge")
        .edge("Judge", END)
        .compile()
    )
    out = await app.invoke({"query": "x"}, thread_id="t", backend=InMemoryBackend())
    assert out.verdict == Verdict(ok=True, reason="fine")
    assert journal_keys == ["0:Judge:llm:0", "0:Judge:llm:1"]
    assert [m.role for m in provider.calls[1].messages] == ["user", "assistant", "user"]


async def test_llm_gives_up_after_its_repairs_and_charges_every_attempt() -> None:
    class State(Schema):
        query: str
        verdict: Verdict | None = None

    provider = FakeProvider(["no", "still no"], usage=Usage(input_tokens=3, output_tokens=1))
    node = Llm(provider, output_key="verdict", output_schema=Verdict, max_repairs=1)
    app = Graph(State).add(node).edge(START, "Llm").edge("Llm", END).compile()
    budget = Budget()
    with budget_scope(budget), pytest.raises(Exception, match="after 1 repairs") as info:
        await app.invoke({"query": "x"})
    cause: BaseException | None = info.value
    while cause is not None and not isinstance(cause, StructuredOutputError):
        cause = cause.__cause__
    assert isinstance(cause, StructuredOutputError) and cause.raw == "still no"
    assert budget.calls == 2 and budget.usage.total_tokens == 8


async def test_generate_structured_keys(journal_keys: list[str]) -> None:
    class State(Schema):
        text: str
        ok: bool = False

    provider = FakeProvider(["bad", '{"ok": true, "reason": "fine"}', '{"ok": 1, "reason": "bad"}'])

    class Check(Node):
        class In(Schema):
            text: str

        class Out(Schema):
            ok: bool

        async def run(self, ctx: Context, inp: Any) -> Any:
            first = await generate_structured(provider, Verdict, inp.text, ctx=ctx)
            second = await generate_structured(provider, Verdict, inp.text, ctx=ctx)
            return self.Out(ok=first.ok and second.ok)

    app = Graph(State).add(Check).edge(START, "Check").edge("Check", END).compile()
    out = await app.invoke({"text": "x"}, thread_id="t", backend=InMemoryBackend())
    assert out.ok is True
    assert journal_keys == [
        "0:Check:0:generate_structured/0",
        "0:Check:0:generate_structured/1",
        "0:Check:1:generate_structured/0",
    ]


async def test_agent_keys(journal_keys: list[str]) -> None:
    provider = FakeProvider(
        [
            assistant(tool_calls=[ToolCall(id="c1", name="add", args={"a": 1, "b": 2})]),
            assistant(
                tool_calls=[
                    ToolCall(id="c2", name="add", args={"a": 3, "b": 4}),
                    ToolCall(id="c3", name="add", args={"a": 5, "b": 6}),
                ]
            ),
            "done",
        ]
    )
    agent = create_agent(provider, [add])
    out = await agent.invoke({"query": "go"}, thread_id="t", backend=InMemoryBackend())
    assert out.output == "done" and out.iterations == 3
    assert [m.text for m in out.messages if m.role == "tool"] == ["3", "7", "11"]
    assert journal_keys == [
        "0:agent:agent:0:model",
        "0:agent:agent:0:tool:0:c1",
        "0:agent:agent:1:model",
        "0:agent:agent:1:tool:0:c2",
        "0:agent:agent:1:tool:1:c3",
        "0:agent:agent:2:model",
    ]


# -- the loop's fast paths behave like the general ones ------------------------------------------


def test_fast_paths_match_the_general_ones() -> None:
    import json

    from tensorsketch.messages import render_result
    from tensorsketch.pricing import estimate_cost, price_for

    for value in [0, -7, 10**30, True, False, None, 1.5]:
        assert render_result(value) == json.dumps(value), value
    args = {"a": 1, "b": "2"}
    assert add.validate(args) == {"a": 1, "b": 2} and args == {"a": 1, "b": "2"}
    assert add.validate('{"a": 1, "b": 2}') == {"a": 1, "b": 2}
    with pytest.raises(Exception, match="unexpected argument"):
        add.validate({"a": 1, "b": 2, "c": 3})
    one = Usage(input_tokens=1)
    assert one + Usage() is one and Usage() + one is one
    odd = Usage(input_tokens=5, output_tokens=-5)  # sums to 0 tokens, yet is not nothing
    assert odd + one == Usage(input_tokens=6, output_tokens=-5)
    total = Usage(input_tokens=1, output_tokens=2) + Usage(cache_read_tokens=3)
    assert total == Usage(input_tokens=1, output_tokens=2, cache_read_tokens=3)
    assert (
        total.model_dump()
        == Usage(input_tokens=1, output_tokens=2, cache_read_tokens=3).model_dump()
    )
    assert price_for("gpt-4o-2024-08-06") == price_for("gpt-4o") is not None
    assert price_for("gpt-4o-2024-08-06", {"gpt-4o": (1.0, 2.0)}) != price_for("gpt-4o")
    assert estimate_cost("no-such-model", total) is None


async def test_one_tool_call_a_turn_still_suspends_and_caps() -> None:
    from tensorsketch import RetryLater

    @tool(requires_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    backend = InMemoryBackend()
    provider = FakeProvider(
        [assistant(tool_calls=[ToolCall(id="r1", name="refund", args={"order": "A"})]), "ok"]
    )
    agent = create_agent(provider, [refund])
    out = await agent.invoke({"query": "refund A"}, thread_id="t", backend=backend)
    assert out.status == "suspended" and [p.id for p in out.pending] == ["r1"]
    out = await agent.invoke(thread_id="t", backend=backend, resume={"r1": True})
    assert out.status == "completed" and out.messages[-2].text == "refunded A"

    @tool
    def later() -> str:
        """Not yet."""
        raise RetryLater("not ready", delay=3600)

    provider = FakeProvider([assistant(tool_calls=[ToolCall(id="l1", name="later", args={})])])
    out = await create_agent(provider, [later]).invoke(
        {"query": "go"}, thread_id="u", backend=backend
    )
    assert out.status == "suspended" and out.pending[0].kind == "timer"


def test_budget_scope_nests_and_fresh_budgets_start_at_zero() -> None:
    from tensorsketch.budget import current_budget

    outer, inner = Budget(), Budget()
    assert current_budget() is None
    with budget_scope(outer) as got:
        assert got is outer and current_budget() is outer
        with budget_scope(inner):
            assert current_budget() is inner
            inner.charge(Usage(input_tokens=5), "no-such-model")
        assert current_budget() is outer
    assert current_budget() is None
    assert inner.usage.total_tokens == 5 and Budget().usage.total_tokens == 0


async def test_an_async_tool_taking_ctx_gets_it() -> None:
    seen: list[str] = []

    @tool
    async def where(note: str, ctx: Context) -> str:
        """Say where it runs."""
        seen.append(ctx.node if ctx is not None else "-")
        return note

    assert await where.run({"note": "x"}, ctx=None) == "x" and seen == ["-"]
    provider = FakeProvider(
        [assistant(tool_calls=[ToolCall(id="w", name="where", args={"note": "n"})]), "ok"]
    )
    out = await create_agent(provider, [where]).invoke({"query": "go"})
    assert out.output == "ok" and seen[-1] == "agent" and out.messages[-2].text == "n"
