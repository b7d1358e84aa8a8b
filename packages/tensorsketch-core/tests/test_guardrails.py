"""Guardrails: input, output and tool-call checks that stop a run with a typed tripwire."""

from __future__ import annotations

import pytest

from tensorsketch import FakeProvider, InMemoryBackend, create_agent, tool
from tensorsketch.guardrails import (
    Tripwire,
    deny_tools,
    input_guardrail,
    max_size,
    output_guardrail,
    pii,
    tool_guardrail,
)
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.middleware import Middleware, ModelHandler, ModelRequest, ToolHandler, ToolRequest
from tensorsketch.provider import Completion

ran: list[str] = []


@tool
async def shell(command: str) -> str:
    """Run a shell command."""
    ran.append(command)
    return "ok"


@tool
async def lookup(order: str) -> str:
    """Look an order up."""
    ran.append(order)
    return "paid"


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def call(name: str, **args: object) -> Message:
    return assistant(tool_calls=[ToolCall(id="c1", name=name, args=dict(args))])


async def test_an_input_guardrail_stops_the_run_before_any_model_call() -> None:
    provider = FakeProvider(["never sent"])
    agent = create_agent(provider, guardrails=[pii()])
    result = await agent.invoke({"query": "my card is 4111 1111 1111 1111, mail a@b.io"})
    assert result.status == "tripped" and result.iterations == 0
    assert provider.calls == []
    assert result.tripwire == Tripwire(
        guardrail="pii",
        kind="input",
        reason="the input contains personal data (email, credit_card).",
    )
    assert "guardrail 'pii' (input) tripped" in result.stop_detail
    assert result.output == ""


async def test_a_clean_input_passes_and_the_run_completes() -> None:
    agent = create_agent(FakeProvider(["hello"]), guardrails=[pii(), max_size(100)])
    result = await agent.invoke({"query": "hi there"})
    assert (result.status, result.output, result.tripwire) == ("completed", "hello", None)


async def test_an_output_guardrail_keeps_the_answer_out_of_the_output_and_transcript() -> None:
    provider = FakeProvider(["call me on +1 415 555 0100"])
    agent = create_agent(provider, guardrails=[pii("output", name="no-pii-out")])
    result = await agent.invoke({"query": "how do I reach you?"})
    assert result.status == "tripped" and result.iterations == 1
    assert result.tripwire is not None and result.tripwire.kind == "output"
    assert result.tripwire.guardrail == "no-pii-out" and "phone" in result.tripwire.reason
    assert result.output == ""
    assert all("555" not in m.text for m in result.messages)


async def test_a_tool_call_guardrail_stops_before_the_turn_runs() -> None:
    provider = FakeProvider([call("shell", command="rm -rf /"), assistant("done")])
    agent = create_agent(
        provider, tools=[shell, lookup], guardrails=[deny_tools(args={"shell": r"rm\s+-rf"})]
    )
    result = await agent.invoke({"query": "clean up"})
    assert result.status == "tripped" and ran == []
    wire = result.tripwire
    assert wire is not None and wire.kind == "tool_call"
    assert wire.tool_call is not None and wire.tool_call.args == {"command": "rm -rf /"}
    last = result.messages[-1]  # the call is answered, so the transcript stays well formed
    assert last.role == "tool" and last.is_error and "deny_tools" in last.text
    assert len(provider.calls) == 1


async def test_deny_tools_by_name_and_allowed_calls_run() -> None:
    provider = FakeProvider([call("lookup", order="A-1"), call("shell", command="ls"), "x"])
    agent = create_agent(provider, tools=[shell, lookup], guardrails=[deny_tools(["shell"])])
    result = await agent.invoke({"query": "q"})
    assert result.status == "tripped" and ran == ["A-1"]
    assert result.tripwire is not None
    assert result.tripwire.reason == "tool 'shell' is on the deny-list."


async def test_custom_async_guardrails_and_their_names() -> None:
    async def polite(text: str) -> str | None:
        return "rude" if "stupid" in text else None

    def no_refunds(call: ToolCall) -> str | None:
        return "refunds need a human" if call.name == "lookup" else None

    agent = create_agent(
        FakeProvider([call("lookup", order="A")]),
        tools=[lookup],
        guardrails=[input_guardrail(polite), tool_guardrail(no_refunds, name="refunds")],
    )
    rude = await agent.invoke({"query": "you stupid bot"})
    assert rude.tripwire is not None and rude.tripwire.guardrail == "polite"
    fine = await agent.invoke({"query": "refund A"})
    assert fine.tripwire is not None and fine.tripwire.guardrail == "refunds"
    assert ran == []


async def test_guardrails_compose_with_middleware_which_sees_only_what_passes() -> None:
    seen: list[str] = []

    class Watch(Middleware):
        async def wrap_model(self, request: ModelRequest, call_next: ModelHandler) -> Completion:
            seen.append("model")
            return await call_next(request)

        async def wrap_tool(self, request: ToolRequest, call_next: ToolHandler) -> object:
            seen.append(f"tool:{request.call.name}")
            return await call_next(request)

    provider = FakeProvider([call("shell", command="ls")])
    agent = create_agent(
        provider, tools=[shell], middleware=[Watch()], guardrails=[deny_tools(["shell"])]
    )
    result = await agent.invoke({"query": "q"})
    assert result.status == "tripped" and seen == ["model"]


class Crash(BaseException):
    """Stands in for the process dying."""


async def test_a_verdict_is_journaled_and_replayed_on_resume() -> None:
    checked: list[str] = []
    crashed = False

    def counting(call: ToolCall) -> str | None:
        checked.append(call.name)
        return None

    @tool
    async def dies_once(x: int) -> int:
        """Dies the first time, like a process killed mid-call."""
        nonlocal crashed
        if not crashed:
            crashed = True
            raise Crash
        return x

    provider = FakeProvider([call("dies_once", x=1), "done"])
    agent = create_agent(provider, tools=[dies_once], guardrails=[tool_guardrail(counting)])
    backend = InMemoryBackend()
    with pytest.raises(Crash):
        await agent.invoke({"query": "q"}, thread_id="t", backend=backend)
    result = await agent.invoke(thread_id="t", backend=backend)
    assert (result.status, result.output) == ("completed", "done")
    assert checked == ["dies_once"]  # the resumed run replayed the verdict


async def test_a_trip_is_streamed_as_an_event() -> None:
    agent = create_agent(FakeProvider(["x"]), guardrails=[max_size(3)])
    events = [e async for e in agent.stream({"query": "longer than three"})]
    tripped = [e for e in events if e.type == "agent.tripped"]
    assert len(tripped) == 1 and tripped[0].data["guardrail"] == "max_size"
    assert tripped[0].data["reason"] == "the input is 17 characters, over the limit of 3."


def test_bad_guardrails_name_the_fix() -> None:
    with pytest.raises(TypeError, match=r"guardrails must be Guardrail objects"):
        create_agent(FakeProvider(), guardrails=[lambda text: None])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"max_size\(chars=...\) must be an int >= 1"):
        max_size(0)


async def test_a_check_returning_a_non_string_names_the_fix() -> None:
    agent = create_agent(
        FakeProvider(["x"]), guardrails=[input_guardrail(lambda t: True, name="bad")]
    )
    with pytest.raises(TypeError, match=r"guardrail 'bad' returned True"):
        await agent.invoke({"query": "q"})


async def test_a_custom_output_guardrail_sees_the_final_answer() -> None:
    seen: list[str] = []

    def no_secrets(text: str) -> str | None:
        seen.append(text)
        return "leaks the codename" if "BLUEBIRD" in text else None

    agent = create_agent(
        FakeProvider(["it is BLUEBIRD"]), guardrails=[output_guardrail(no_secrets)]
    )
    result = await agent.invoke({"query": "codename?"})
    assert seen == ["it is BLUEBIRD"]
    assert result.tripwire is not None and result.tripwire.reason == "leaks the codename"
