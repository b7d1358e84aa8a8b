"""Canvas gestures as IR edits: pure, validated, and following the canvas's rules."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tensorsketch.canvas import IRError, edits
from tensorsketch.canvas.ir import END, START, EdgeIR, GraphIR, NodeIR, Port


def graph() -> GraphIR:
    return GraphIR(
        name="g",
        nodes=[
            NodeIR("A", has_hole=True, hole="a"),
            NodeIR("B"),
            NodeIR("C", cls="A", has_hole=True, hole="a"),
        ],
        edges=[
            EdgeIR(START, "A"),
            EdgeIR("A", "B", "conditional", "route", "b"),
            EdgeIR("A", END, "conditional", "route", "stop"),
            EdgeIR("B", "B", "conditional", "done", "repeat", "loop"),
            EdgeIR("B", "C", "conditional", "done", "exit", "loop"),
            EdgeIR(None, None, "custom", code="g.edge(*pairs)"),
        ],
    )


def test_edits_never_touch_their_argument() -> None:
    ir = graph()
    before = ir.to_dict()
    edits.add_edge(ir, "A", "B")
    edits.remove_node(ir, "B")
    edits.rename_node(ir, "A", "Z")
    edits.add_node(ir, "New")
    edits.set_ports(ir, "A", [("q", "str")])
    assert ir.to_dict() == before


def test_add_edge() -> None:
    ir = edits.add_edge(graph(), "C", END)
    assert ir.edges[-1] == EdgeIR("C", END)
    with pytest.raises(IRError, match="no node named 'Q'"):
        edits.add_edge(graph(), "Q", "A")
    with pytest.raises(IRError, match="cannot leave END"):
        edits.add_edge(graph(), END, "A")


def test_remove_edge_removes_whole_loops_and_single_mapping_entries() -> None:
    ir = edits.remove_edge(graph(), 1)
    assert [e.label for e in ir.edges if e.path == "route"] == ["stop"]
    ir = edits.remove_edge(graph(), 4)
    assert all(e.branch != "loop" for e in ir.edges)
    with pytest.raises(IRError, match="there is no edge 9"):
        edits.remove_edge(graph(), 9)


def test_remove_node_takes_its_edges_and_loops_but_not_custom_code() -> None:
    ir = edits.remove_node(graph(), "C")
    assert [n.name for n in ir.nodes] == ["A", "B"]
    assert all(e.branch != "loop" for e in ir.edges)  # C was the loop's exit
    assert ir.edges[-1].kind == "custom"


def test_rename_node_updates_edges_and_keeps_the_class() -> None:
    ir = edits.rename_node(graph(), "A", "Triage")
    assert ir.node("Triage").cls == "A"
    assert ir.edges[0] == EdgeIR(START, "Triage")
    assert ir.edges[1].source == "Triage"
    with pytest.raises(IRError, match="already exists"):
        edits.rename_node(graph(), "A", "B")
    with pytest.raises(IRError, match="other than START/END"):
        edits.rename_node(graph(), "A", END)


def test_a_created_node_is_a_hole_and_renaming_it_renames_its_class() -> None:
    ir = edits.add_node(graph(), "Escalate", [("query", "str")], [Port("ticket", "str")])
    node = ir.node("Escalate")
    assert node == NodeIR(
        "Escalate",
        inputs=[Port("query", "str")],
        outputs=[Port("ticket", "str")],
        has_hole=True,
        hole="Escalate needs code",
    )
    assert ir.added == ["Escalate"]
    renamed = edits.rename_node(ir, "Escalate", "Review")
    assert (renamed.node("Review").cls, renamed.node("Review").hole) == (
        "Review",
        "Review needs code",
    )
    assert renamed.added == ["Review"]
    assert edits.remove_node(ir, "Escalate").added == []
    with pytest.raises(IRError, match="must be an identifier"):
        edits.add_node(graph(), "not valid")
    with pytest.raises(IRError, match="not a keyword"):
        edits.add_node(graph(), "None")
    with pytest.raises(IRError, match="already has a node"):
        edits.add_node(graph(), "B")


def test_renaming_a_placed_implemented_class_keeps_the_class() -> None:
    # Found by the canvas soak: a node placed from an existing class is in `added` too, and
    # renaming it renamed the class, asking write-back for a stub with a body.
    ir = graph()
    ir.nodes.append(NodeIR("Impl"))
    ir.added.append("Impl")
    renamed = edits.rename_node(ir, "Impl", "Review")
    assert (renamed.node("Review").cls, renamed.added) == ("Impl", ["Review"])


def test_set_ports_only_on_holes_and_for_every_node_of_the_class() -> None:
    ir = edits.set_ports(graph(), "A", inputs=[("query", "str")])
    assert ir.node("A").inputs == ir.node("C").inputs == [Port("query", "str")]
    assert ir.node("A").outputs == []
    with pytest.raises(IRError, match="already has a body"):
        edits.set_ports(graph(), "B", inputs=[])


ROUTED = GraphIR(
    name="g",
    nodes=[NodeIR("Classify"), NodeIR("Billing"), NodeIR("Tech"), NodeIR("Other")],
    edges=[
        EdgeIR(START, "Classify"),
        EdgeIR("Classify", None, "dynamic", "route", routes=["Billing", "Tech", END]),
        EdgeIR("Billing", END),
        EdgeIR("Tech", END),
        EdgeIR("Other", END),
    ],
)


@pytest.mark.parametrize(
    "edit",
    [
        lambda ir: edits.rename_node(ir, "Tech", "Techie"),
        lambda ir: edits.remove_node(ir, "Billing"),
    ],
    ids=["rename", "remove"],
)
def test_a_node_a_routing_function_returns_by_name_is_neither_renamed_nor_removed(
    edit: Callable[[GraphIR], GraphIR],
) -> None:
    # Found by QA: `route` returns "Tech" and the canvas never edits code, so renaming Tech
    # (or removing Billing) wrote a graph that fails with a RoutingError at run time.
    with pytest.raises(IRError) as refused:
        edit(ROUTED)
    message = str(refused.value)
    assert "routing function `route` of the conditional from 'Classify'" in message
    assert "Change the routing code first (in your editor" in message


def test_what_a_routing_function_does_not_name_stays_editable() -> None:
    message = "cannot rename 'Tech' to 'Techie'"
    with pytest.raises(IRError, match=message) as refused:
        edits.rename_node(ROUTED, "Tech", "Techie")
    assert "returns 'Tech' by name" in str(refused.value)
    assert "make it return 'Techie'" in str(refused.value)
    with pytest.raises(IRError, match=r"cannot remove 'Tech': .* can return 'Tech'"):
        edits.remove_node(ROUTED, "Tech")
    assert edits.rename_node(ROUTED, "Other", "Else").node("Else")  # not a route
    renamed = edits.rename_node(ROUTED, "Classify", "Triage")  # the route's source
    assert renamed.edges[1].source == "Triage"
    removed = edits.remove_node(ROUTED, "Classify")  # the route goes with its node
    assert all(e.kind != "dynamic" for e in removed.edges)
    unknown = ROUTED.copy()
    unknown.edges[1].routes = None  # targets the code does not spell out: nothing to check
    assert [n.name for n in edits.remove_node(unknown, "Tech").nodes] == [
        "Classify",
        "Billing",
        "Other",
    ]


def test_a_route_back_to_its_own_node_refuses_a_rename_but_not_a_removal() -> None:
    ir = GraphIR(
        name="g",
        nodes=[NodeIR("Loop"), NodeIR("Done")],
        edges=[EdgeIR("Loop", None, "dynamic", "lambda s: 'Loop' if s.n else 'Done'",
                      branch="router", routes=["Loop", "Done"])],
    )  # fmt: skip
    with pytest.raises(IRError, match=re.escape("`lambda s: 'Loop' if s.n else 'Done'` of the")):
        edits.rename_node(ir, "Loop", "Again")
    assert edits.remove_node(ir, "Loop").edges == []
    with pytest.raises(IRError, match="cannot remove 'Done'"):
        edits.remove_node(ir, "Done")
