"""The runtime's newer constructs on the canvas: ``Command`` destinations, ``cache=``,
``defer=True``, and ``map`` / ``parallel`` — read from the file, written back, never guessed."""

from __future__ import annotations

import pytest

from tensorsketch.canvas import edits, extract, reconstruct
from tensorsketch.canvas.exceptions import IRError
from tensorsketch.canvas.ir import END, START, EdgeIR, GraphIR
from tensorsketch.canvas.studio.ops import apply_op

HEADER = """\
import operator
from typing import Annotated

from tensorsketch import END, START, Command, Context, Graph, Node, Reducer, Schema
from tensorsketch.cache import CachePolicy

DESKS = ("Refunds", "Support")


class Ticket(Schema):
    text: str = ""
    docs: list[str] = []
    notes: Annotated[list[str], Reducer(operator.add)] = []


class Triage(Node):
    destinations = ("Refunds", "Support", END)

    async def run(self, ctx: Context, inp: Schema) -> Command:
        return Command(goto="Support")


class Urgent(Triage):
    pass


class Guess(Node):
    destinations = DESKS

    async def run(self, ctx: Context, inp: Schema) -> None:
        return None


class Refunds(Node):
    async def run(self, ctx: Context, inp: Schema) -> None:
        return None


class Support(Node):
    async def run(self, ctx: Context, inp: Schema) -> None:
        return None


class Skim(Node):
    class In(Schema):
        text: str

    class Out(Schema):
        notes: list[str]

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(notes=[inp.text])
"""

DESK = (
    HEADER
    + """

desk = (
    Graph(Ticket)
    .add(Triage)
    .add(Urgent)
    .add(Guess)
    .add(Refunds, cache=CachePolicy(ttl=60))
    .add(Support, defer=True)
    .edge(START, "Triage")
)
"""
)


def _commands(ir: GraphIR) -> list[tuple[str | None, str | None]]:
    assert all(edge.kind == "command" for edge in ir.commands)
    return [(edge.source, edge.target) for edge in ir.commands]


# -- Command destinations ------------------------------------------------------------------


def test_command_edges_are_the_destinations_the_class_declares() -> None:
    ir = extract(DESK)
    # Triage's own, Urgent's inherited from Triage; Guess's are a name, not a literal: none.
    assert _commands(ir) == [
        ("Triage", "Refunds"),
        ("Triage", "Support"),
        ("Triage", END),
        ("Urgent", "Refunds"),
        ("Urgent", "Support"),
        ("Urgent", END),
    ]
    assert ir.edges == [EdgeIR(START, "Triage")]  # nothing added to the wiring
    assert GraphIR.from_dict(ir.to_dict()).commands == ir.commands
    assert reconstruct(DESK, ir) == DESK


def test_a_declared_destination_is_neither_renamed_nor_removed() -> None:
    ir = extract(DESK)
    with pytest.raises(IRError, match=r"'Triage', 'Urgent' declares 'Refunds' in its `dest"):
        edits.rename_node(ir, "Refunds", "Refund")
    with pytest.raises(IRError, match="cannot remove 'Support'"):
        edits.remove_node(ir, "Support")
    # the declaring node itself can go, and its command edges with it
    gone = edits.remove_node(ir, "Urgent")
    assert [e.source for e in gone.commands] == ["Triage"] * 3
    renamed = edits.rename_node(ir, "Triage", "Sort")
    assert {e.source for e in renamed.commands} == {"Sort", "Urgent"}
    assert _commands(extract(reconstruct(DESK, renamed)))[:3] == _commands(renamed)[:3]


def test_command_edges_in_the_wiring_are_refused() -> None:
    ir = extract(DESK)
    ir.edges.append(EdgeIR("Triage", "Support", "command"))
    with pytest.raises(IRError, match="read from the class's `destinations`"):
        reconstruct(DESK, ir)


# -- cache= ----------------------------------------------------------------------------------


def test_the_cache_policy_is_shown_and_survives_edits_byte_for_byte() -> None:
    ir = extract(DESK)
    assert {n.name: n.cache for n in ir.nodes}["Refunds"] == "CachePolicy(ttl=60)"
    assert ir.to_dict()["nodes"][3]["cache"] == "CachePolicy(ttl=60)"
    # an edit elsewhere keeps the line as written
    edited = reconstruct(DESK, edits.add_edge(ir, "Triage", "Support"))
    assert "    .add(Refunds, cache=CachePolicy(ttl=60))\n" in edited
    # a rename writes the add() again, with the policy as written
    triage_free = DESK.replace('"Refunds", "Support", END', "END")
    renamed = reconstruct(triage_free, edits.rename_node(extract(triage_free), "Refunds", "Money"))
    assert '.add(Refunds, name="Money", cache=CachePolicy(ttl=60))' in renamed
    assert extract(renamed).node("Money").cache == "CachePolicy(ttl=60)"


# -- defer=True ------------------------------------------------------------------------------


STYLED = {
    "fluent": """
g = (
    Graph(Ticket)
    .add(Skim)
    .add(Refunds)
    .add(Support)
    .map(START, "Skim", over="docs", item="text", then="Refunds")
    .parallel("Refunds", ["Support", "Skim"], then=END)
)
""",
    "statement": """
g = Graph(Ticket)
g.add(Skim)
g.add(Refunds)
g.add(Support)
g.map(START, "Skim", over="docs", item="text", then="Refunds")
g.parallel("Refunds", ["Support", "Skim"], then=END)
""",
    "operator": """
g = Graph(Ticket)
skim, refunds, support = g.nodes(Skim, Refunds, Support)
g.map(START, "Skim", over="docs", item="text", then="Refunds")
g.parallel("Refunds", ["Support", "Skim"], then=END)
""",
}


@pytest.mark.parametrize("style", sorted(STYLED))
def test_defer_is_read_and_written(style: str) -> None:
    source = HEADER + STYLED[style]
    ir = extract(source)
    assert not ir.node("Support").defer
    deferred = reconstruct(source, edits.set_defer(ir, "Support", True))
    assert "add(Support, defer=True)" in deferred
    again = extract(deferred)
    assert again.node("Support").defer
    assert again.edges == ir.edges
    assert reconstruct(deferred, edits.set_defer(again, "Support", False)).count("defer") == 0


def test_the_studio_sets_defer_with_an_inverse() -> None:
    ir = extract(DESK)
    result = apply_op(ir, "set_defer", {"node": "Refunds", "defer": True}, DESK)
    assert result.ir.node("Refunds").defer
    assert result.inverse == {"op": "set_defer", "args": {"node": "Refunds", "defer": False}}
    text = reconstruct(DESK, result.ir)
    assert ".add(Refunds, cache=CachePolicy(ttl=60), defer=True)" in text


# -- map / parallel --------------------------------------------------------------------------


MAP = EdgeIR(START, "Skim", "map", path="docs", label="text", then="Refunds")
PARALLEL = EdgeIR("Refunds", None, "parallel", sources=["Support", "Skim"], then=END)


@pytest.mark.parametrize("style", sorted(STYLED))
def test_map_and_parallel_are_constructs_in_every_style(style: str) -> None:
    source = HEADER + STYLED[style]
    ir = extract(source)
    assert ir.style == style
    assert ir.edges == [MAP, PARALLEL]
    assert reconstruct(source, ir) == source
    # removing a node a parallel runs removes the parallel whole
    assert extract(reconstruct(source, edits.remove_node(ir, "Support"))).edges == [MAP]
    # renaming the map's `then` renames it in the call
    renamed = reconstruct(source, edits.rename_node(ir, "Refunds", "Money"))
    assert 'then="Money")' in renamed
    assert extract(renamed).edges[0].then == "Money"


@pytest.mark.parametrize("style", sorted(STYLED))
def test_map_and_parallel_are_written_from_the_ir(style: str) -> None:
    source = HEADER + STYLED[style]
    bare = extract(source)
    bare.edges = []
    unwired = reconstruct(source, bare)
    assert "map(" not in unwired
    ir = extract(unwired)
    ir.edges = [MAP, PARALLEL]
    written = reconstruct(unwired, ir)
    assert 'map(START, "Skim", over="docs", item="text", then="Refunds")' in written
    assert 'parallel("Refunds", ["Support", "Skim"], then=END)' in written
    assert extract(written).edges == [MAP, PARALLEL]


def test_a_map_the_canvas_cannot_read_stays_custom() -> None:
    source = HEADER + STYLED["statement"].replace('over="docs"', "over=FIELD")
    edges = extract(source).edges
    assert edges[0].kind == "custom"
    assert edges[0].code == 'g.map(START, "Skim", over=FIELD, item="text", then="Refunds")'


@pytest.mark.parametrize(
    ("edge", "problem"),
    [
        (EdgeIR(START, None, "map", path="docs", label="text"), "needs the node to run"),
        (EdgeIR("Refunds", None, "parallel", sources=["Skim"]), "two or more distinct nodes"),
        (EdgeIR(START, "Skim", "map", path="docs", label="text", then=START), "not START"),
    ],
)
def test_an_incomplete_map_or_parallel_is_refused(edge: EdgeIR, problem: str) -> None:
    source = HEADER + STYLED["fluent"]
    ir = extract(source)
    ir.edges = [edge]
    with pytest.raises(IRError, match=problem):
        reconstruct(source, ir)
