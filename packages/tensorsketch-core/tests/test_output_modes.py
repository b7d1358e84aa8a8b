"""Output modes: native, tool and prompted structured output, each with the repair loop."""

from __future__ import annotations

import pytest

from tensorsketch import (
    END,
    START,
    FakeProvider,
    Graph,
    Llm,
    Schema,
    create_agent,
    generate_structured,
    tool,
)
from tensorsketch.messages import Message, ToolCall, assistant
from tensorsketch.provider import Capabilities, StructuredOutputError


class Refund(Schema):
    order: str
    amount: int


def final(**args: object) -> Message:
    return assistant(tool_calls=[ToolCall(id="f1", name="final_result", args=dict(args))])


class PlainProvider(FakeProvider):
    """A model without structured output of its own (tools only)."""

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(tools=True, strict_json=False)


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"{order}: $40"


async def test_tool_mode_offers_final_result_and_takes_its_arguments_as_the_answer() -> None:
    provider = PlainProvider(
        [
            assistant(tool_calls=[ToolCall(id="c1", name="lookup", args={"order": "A-1"})]),
            final(order="A-1", amount=40),
        ]
    )
    agent = create_agent(provider, tools=[lookup], output_schema=Refund, output_mode="tool")
    result = await agent.invoke({"query": "refund A-1"})
    assert result.parsed == Refund(order="A-1", amount=40) and result.status == "completed"
    assert [c.tool_names for c in provider.calls] == [["lookup", "final_result"]] * 2
    assert all(c.output_schema is None for c in provider.calls)
    last = result.messages[-1]  # the answer, not a call left without a result
    assert last.role == "assistant" and not last.tool_calls
    assert Refund.model_validate_json(last.text) == result.parsed
    assert result.output == last.text


async def test_tool_mode_repairs_arguments_that_do_not_fit() -> None:
    provider = PlainProvider([final(order="A-1", amount="forty"), final(order="A-1", amount=40)])
    agent = create_agent(provider, output_schema=Refund, output_mode="tool")
    result = await agent.invoke({"query": "refund A-1"})
    assert result.parsed == Refund(order="A-1", amount=40) and result.iterations == 2
    repair = provider.calls[1].messages[-1]
    assert repair.role == "user" and "amount" in repair.text
    assert "Call the final_result tool" in repair.text
    # The repaired turn is text (the arguments), so the request stays well formed.
    assert not provider.calls[1].messages[-2].tool_calls


async def test_prompted_mode_sends_no_schema_and_reads_the_json_from_the_text() -> None:
    provider = PlainProvider(
        ["Sure! here it is", '```json\n{"order": "A-1", "amount": 40}\n```'], model="m"
    )
    agent = create_agent(provider, system="Be brief.", output_schema=Refund, output_mode="prompted")
    result = await agent.invoke({"query": "refund A-1"})
    assert result.parsed == Refund(order="A-1", amount=40) and result.iterations == 2
    first = provider.calls[0]
    assert first.output_schema is None and first.tool_names == []
    roles = [m.role for m in first.messages]
    assert roles == ["system", "system", "user"]
    assert "JSON schema" in first.messages[1].text and '"amount"' in first.messages[1].text
    assert "Reply with only the corrected JSON" in provider.calls[1].messages[-1].text


async def test_native_mode_needs_a_provider_with_structured_output() -> None:
    agent = create_agent(PlainProvider(["{}"]), output_schema=Refund, output_mode="native")
    with pytest.raises(ValueError, match="output_mode='tool'"):
        await agent.invoke({"query": "q"})
    native = FakeProvider(['{"order": "A-1", "amount": 40}'])
    done = await create_agent(native, output_schema=Refund, output_mode="native").invoke(
        {"query": "q"}
    )
    assert done.parsed == Refund(order="A-1", amount=40)
    assert native.calls[0].output_schema is Refund


async def test_auto_hands_the_schema_to_the_provider_as_before() -> None:
    provider = PlainProvider(['{"order": "A-1", "amount": 40}'])
    result = await create_agent(provider, output_schema=Refund).invoke({"query": "q"})
    assert result.parsed == Refund(order="A-1", amount=40)
    assert provider.calls[0].output_schema is Refund and provider.calls[0].tool_names == []


async def test_generate_structured_and_llm_take_a_mode_per_call() -> None:
    provider = PlainProvider([final(order="B", amount=1)])
    got = await generate_structured(provider, Refund, "refund B", output_mode="tool")
    assert got == Refund(order="B", amount=1)
    with pytest.raises(StructuredOutputError):
        await generate_structured(
            PlainProvider(["no", "still no"]), Refund, "q", max_repairs=1, output_mode="prompted"
        )

    class S(Schema):
        query: str = ""
        output: Refund | None = None

    llm = Llm(
        PlainProvider(['{"order": "C", "amount": 2}']),
        output_schema=Refund,
        output_mode="prompted",
    )
    graph = Graph(S).add(llm).edge(START, "Llm").edge("Llm", END).compile()
    result = await graph.invoke({"query": "refund C"})
    assert result.output == Refund(order="C", amount=2)


def test_an_unknown_mode_or_a_clashing_tool_is_refused() -> None:
    with pytest.raises(ValueError, match="'auto', 'native', 'tool', 'prompted'"):
        create_agent(FakeProvider(["x"]), output_mode="json")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="output_mode"):
        Llm(FakeProvider(["x"]), output_mode="strict")  # type: ignore[arg-type]


def test_tool_mode_refuses_an_agent_tool_named_final_result() -> None:
    @tool(name="final_result")
    def clash() -> str:
        """A tool with the reserved name."""
        return ""

    with pytest.raises(ValueError, match="already has one"):
        create_agent(FakeProvider(["x"]), tools=[clash], output_schema=Refund, output_mode="tool")
