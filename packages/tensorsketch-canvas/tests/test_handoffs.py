"""Handoffs on the canvas: read as edges between agents, written back losslessly."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorsketch.canvas.exceptions import IRError, SourceParseError
from tensorsketch.canvas.handoffs import (
    AgentNode,
    HandoffEdge,
    add_handoff,
    extract_handoffs,
    remove_handoff,
)

TEAM = """\
from tensorsketch import Agent, FakeProvider, create_agent, handoff
from tensorsketch.agents import without_tools

# billing answers invoices
billing = Agent(FakeProvider(), name="billing", system="You handle billing.")
refunds = Agent(
    FakeProvider(),
    name="refunds",
    handoffs=["triage"],  # back to the front desk
)
triage = create_agent(
    FakeProvider(),
    name="triage",
    handoffs=[
        handoff(billing, input_filter=without_tools, tool_name="to_billing"),
        refunds,
    ],
)
helper = Agent(FakeProvider())
"""


def pairs(source: str) -> list[tuple[str, str]]:
    return [(e.source, e.target) for e in extract_handoffs(source).handoffs]


def test_agents_are_nodes_and_handoffs_edges_of_the_documented_form() -> None:
    team = extract_handoffs(TEAM)
    assert team.agents == [
        AgentNode("billing", "billing", "Agent", 5),
        AgentNode("refunds", "refunds", "Agent", 6),
        AgentNode("triage", "triage", "create_agent", 11),
        AgentNode("helper", "helper", "Agent", 19),
    ]
    assert team.handoffs == [
        HandoffEdge("refunds", "triage", by_name=True),
        HandoffEdge("triage", "billing", tool_name="to_billing", input_filter="without_tools"),
        HandoffEdge("triage", "refunds"),
    ]
    assert team.to_json()["handoffs"][1] == {
        "kind": "handoff",
        "source": "triage",
        "target": "billing",
        "tool_name": "to_billing",
        "input_filter": "without_tools",
        "requires_approval": False,
        "by_name": False,
    }
    assert team.unknown == []


@pytest.mark.parametrize(
    ("giver", "receiver"),
    [
        ("billing", "refunds"),  # no handoffs= yet: the argument is added last
        ("refunds", "billing"),  # one-line list
        ("triage", "helper"),  # multi-line list with a trailing comma; helper is built below
        ("helper", "triage"),  # a bare Agent(provider) call
    ],
)
def test_adding_then_removing_an_edge_gives_the_file_back_byte_for_byte(
    giver: str, receiver: str
) -> None:
    added = add_handoff(TEAM, giver, receiver)
    assert (giver, receiver) in pairs(added)
    assert sorted(pairs(added)) == sorted([*pairs(TEAM), (giver, receiver)])
    compile(added, "<added>", "exec")
    assert remove_handoff(added, giver, receiver) == TEAM


def test_new_entries_follow_the_list_layout_and_build_order() -> None:
    added = add_handoff(TEAM, "triage", "helper")
    assert '        refunds,\n        "helper",\n    ],' in added  # built below: by name
    back = add_handoff(TEAM, "refunds", "billing")
    assert 'handoffs=["triage", billing],  # back to the front desk' in back  # built above
    fresh = add_handoff(TEAM, "billing", "refunds")
    assert 'system="You handle billing.", handoffs=["refunds"])' in fresh


def test_removing_every_edge_and_adding_them_back_keeps_the_edges() -> None:
    text = TEAM
    for giver, receiver in pairs(TEAM):
        text = remove_handoff(text, giver, receiver)
    assert pairs(text) == [] and "handoffs" not in text.split("import")[-1].split("\n", 1)[1]
    for giver, receiver in pairs(TEAM):
        text = add_handoff(text, giver, receiver)
    assert sorted(pairs(text)) == sorted(pairs(TEAM))
    compile(text, "<rebuilt>", "exec")


def test_edits_that_make_no_sense_are_refused_with_what_to_do() -> None:
    with pytest.raises(IRError, match="already hands off"):
        add_handoff(TEAM, "triage", "billing")
    with pytest.raises(IRError, match=r"no agent named 'nobody'.*agents: 'billing'"):
        add_handoff(TEAM, "triage", "nobody")
    with pytest.raises(IRError, match="no handoff to 'helper'"):
        remove_handoff(TEAM, "triage", "helper")
    with pytest.raises(SourceParseError):
        extract_handoffs("x = (")


def test_a_name_the_file_does_not_build_is_an_edge_to_an_unknown_agent() -> None:
    team = extract_handoffs('a = Agent(p, name="a", handoffs=["elsewhere", other()])\n')
    assert team.handoffs == [HandoffEdge("a", "elsewhere", by_name=True)]
    assert team.unknown == ["elsewhere"]


def test_reading_handoffs_imports_nothing_of_the_file() -> None:
    assert pairs("import sys\nsys.exit(1)\nx = Agent(p, handoffs=['y'])\n") == [("x", "y")]


def test_the_documented_example_reads_as_one_edge() -> None:
    doc = """\
billing = Agent(
    FakeProvider([assistant("Order A-17 was paid: $40.")]),
    tools=[lookup_invoice], name="billing", system="You handle billing.",
)
triage = create_agent(
    FakeProvider([assistant(tool_calls=[ToolCall(id="h1", name="transfer_to_billing", args={})])]),
    name="triage",
    system="Hand each request to the right team.",
    handoffs=[handoff(billing, input_filter=without_tools)],
)
"""
    assert extract_handoffs(doc).handoffs == [
        HandoffEdge("triage", "billing", input_filter="without_tools")
    ]
    assert remove_handoff(
        add_handoff(remove_handoff(doc, "triage", "billing"), "triage", "billing"),
        "triage",
        "billing",
    ) == remove_handoff(doc, "triage", "billing")


def test_the_shipped_example_builds_its_team_inside_main() -> None:
    example = (Path(__file__).resolve().parents[3] / "examples" / "handoffs.py").read_text()
    team = extract_handoffs(example)
    assert [(a.name, a.factory) for a in team.agents] == [
        ("billing", "Agent"),
        ("triage", "create_agent"),
    ]
    assert team.handoffs == [
        HandoffEdge("billing", "triage", by_name=True),
        HandoffEdge("triage", "billing", input_filter="without_tools"),
    ]
    # the hand back is the last argument, its comment after the comma: removed and added back,
    # the file is what it was
    without = remove_handoff(example, "billing", "triage")
    assert "handoffs=" not in without.split("billing = Agent(", 1)[1].split("triage =", 1)[0]
    assert add_handoff(without, "billing", "triage") == example
