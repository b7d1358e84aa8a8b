"""``Agent(report=...)`` chooses which report fields an agent writes into a larger state;
``parsed`` is written whenever the state declares it and the agent has an ``output_schema``;
compile errors for an agent's ports point at those options, not at renaming a port."""

from __future__ import annotations

from typing import Any

import pytest

from tensorsketch import END, START, Agent, FakeProvider, Graph, Schema, Usage, tool
from tensorsketch.errors import GraphValidationError
from tensorsketch.messages import Message, ToolCall, assistant


class Verdict(Schema):
    label: str


class Ticket(Schema):
    query: str = ""
    messages: list[Message] = []
    output: str = ""
    parsed: Any = None


class TicketWithUsage(Ticket):
    usage: Usage = Usage()
    status: str = ""


def _graph(state: type[Schema], agent: Agent) -> Graph[Any]:
    return Graph(state).add(agent).edge(START, agent.name).edge(agent.name, END)


def _answer(text: str = '{"label": "refund"}') -> FakeProvider:
    return FakeProvider([assistant(text)])


async def test_parsed_is_written_without_report_when_the_state_declares_it() -> None:
    agent = Agent(_answer(), output_schema=Verdict, report=False)
    result = await _graph(Ticket, agent).compile().invoke({"query": "classify"})
    assert result.parsed == Verdict(label="refund")


async def test_parsed_is_left_out_when_the_state_does_not_declare_it() -> None:
    class Lean(Schema):
        query: str = ""
        messages: list[Message] = []
        output: str = ""

    agent = Agent(_answer(), output_schema=Verdict, report=False)
    result = await _graph(Lean, agent).compile().invoke({"query": "classify"})
    assert result.output == '{"label": "refund"}'


async def test_report_names_the_fields_to_write() -> None:
    agent = Agent(_answer(), output_schema=Verdict, report=["parsed", "usage", "status"])
    result = await _graph(TicketWithUsage, agent).compile().invoke({"query": "classify"})
    assert result.parsed == Verdict(label="refund")
    assert result.status == "completed"
    assert result.usage.output_tokens > 0


async def test_report_subset_on_suspension_writes_only_the_chosen_fields() -> None:
    @tool(requires_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    class Waiting(Ticket):
        status: str = ""

    provider = FakeProvider(
        [assistant(tool_calls=[ToolCall(id="c1", name="refund", args={"order": "A"})])]
    )
    agent = Agent(provider, tools=[refund], report={"status"})
    result = await _graph(Waiting, agent).compile().invoke({"query": "refund A"})
    assert result.status == "suspended"


def test_report_rejects_an_unknown_field_with_a_close_name() -> None:
    with pytest.raises(ValueError, match=r"'usgae'.*did you mean 'usage'"):
        Agent(_answer(), report=["usgae"])


def test_report_rejects_a_bare_string() -> None:
    with pytest.raises(TypeError, match=r"report=\['usage'\]"):
        Agent(_answer(), report="usage")  # type: ignore[arg-type]


def test_missing_report_fields_point_at_report_not_at_renaming() -> None:
    agent = Agent(_answer(), output_schema=Verdict)
    with pytest.raises(GraphValidationError) as info:
        _graph(Ticket, agent).compile()
    text = str(info.value)
    assert "writes `usage`" in text
    assert "rename the port" not in text
    assert "did you mean 'messages'" not in text
    assert "report=['parsed'] writes only those the state has" in text
    assert "add `usage: Usage`" in text


def test_missing_input_key_suggests_input_key() -> None:
    class Asked(Schema):
        question: str = ""
        messages: list[Message] = []
        output: str = ""

    agent = Agent(_answer(), report=False)
    with pytest.raises(
        GraphValidationError, match=r"with input_key=\.\.\. \(the state has 'question'\)"
    ):
        _graph(Asked, agent).compile()

    class Typo(Schema):
        querry: str = ""
        messages: list[Message] = []
        output: str = ""

    with pytest.raises(
        GraphValidationError, match=r"point the agent at it with input_key='querry'"
    ):
        _graph(Typo, agent).compile()


def test_missing_messages_says_an_agent_cannot_rename_it() -> None:
    class NoTranscript(Schema):
        query: str = ""
        output: str = ""

    agent = Agent(_answer(), report=False)
    with pytest.raises(GraphValidationError) as info:
        _graph(NoTranscript, agent).compile()
    text = str(info.value)
    assert "add `messages: list[Message]`" in text
    assert "rename the port" not in text
