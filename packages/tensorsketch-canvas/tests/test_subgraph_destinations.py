"""``add(child, destinations=(...))`` on the canvas: where a subgraph's
``Command(graph=Command.PARENT, goto=...)`` may send the parent, read in every style, drawn as
``command`` edges, and edited by writing the tuple back (a no-op changes no byte)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from tensorsketch.canvas import edits, extract, reconstruct
from tensorsketch.canvas.exceptions import IRError
from tensorsketch.canvas.ir import END, START, EdgeIR, GraphIR
from tensorsketch.canvas.studio.ops import apply_op

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

HEADER = """\
from tensorsketch import END, START, Context, Graph, Node, Schema


class Desk(Schema):
    ticket: str = ""
    owner: str = ""


class Triage(Node):
    class Out(Schema):
        owner: str

    async def run(self, ctx: Context, inp: Schema) -> Out:
        return self.Out(owner="team")


class Manager(Node):
    async def run(self, ctx: Context, inp: Schema) -> Schema:
        return Schema()


class Billing(Node):
    async def run(self, ctx: Context, inp: Schema) -> Schema:
        return Schema()


team = Graph(Desk, name="Team").add(Triage)
team.edge(START, "Triage").edge("Triage", END)
team_app = team.compile()

"""

WIRING = {
    "fluent": """\
desk = (
    Graph(Desk)
    .add(team_app, destinations=("Manager", END))
    .add(Manager)
    .add(Billing)
    .edge(START, "Team")
    .edge("Manager", END)
)
""",
    "statement": """\
desk = Graph(Desk)
desk.add(team_app, destinations=("Manager", END))
desk.add(Manager)
desk.add(Billing)
desk.edge(START, "Team")
desk.edge("Manager", END)
""",
    "operator": """\
desk = Graph(Desk)
desk.add(team_app, destinations=("Manager", END))
team_h = desk["Team"]
manager, billing = desk.nodes(Manager, Billing)
START >> team_h
manager >> END
""",
}
STYLES = sorted(WIRING)


def _source(style: str) -> str:
    return HEADER + WIRING[style]


def _commands(ir: GraphIR) -> list[tuple[str | None, str | None]]:
    return [(e.source, e.target) for e in ir.commands]


def _changed(before: str, after: str) -> list[str]:
    """The lines a write-back changed (removed and added)."""
    diff = difflib.ndiff(before.splitlines(), after.splitlines())
    return [line for line in diff if line[:2] in ("- ", "+ ")]


@pytest.mark.parametrize("style", STYLES)
def test_the_subgraph_node_and_its_destinations_are_read(style: str) -> None:
    source = _source(style)
    ir = extract(source, "desk")
    team = ir.node("Team")
    assert team.subgraph == "team_app" and team.child is not None
    assert team.destinations == ["Manager", END]
    assert _commands(ir) == [("Team", "Manager"), ("Team", END)]
    assert all(e.kind == "command" for e in ir.commands)
    assert not [e for e in ir.edges if e.kind == "custom"]  # no longer kept as custom wiring
    assert EdgeIR(START, "Team") in ir.edges
    assert reconstruct(source, ir) == source  # a no-op projection is byte-identical


@pytest.mark.parametrize("style", STYLES)
def test_adding_and_removing_a_destination_edits_the_tuple(style: str) -> None:
    source = _source(style)
    ir = extract(source, "desk")
    wider = reconstruct(source, edits.set_destinations(ir, "Team", ["Manager", "Billing", END]))
    assert _changed(source, wider) == [
        '- desk.add(team_app, destinations=("Manager", END))'.replace("desk", _lead(style)),
        '+ desk.add(team_app, destinations=("Manager", "Billing", END))'.replace(
            "desk", _lead(style)
        ),
    ]
    again = extract(wider, "desk")
    assert _commands(again) == [("Team", "Manager"), ("Team", "Billing"), ("Team", END)]
    narrower = reconstruct(wider, edits.set_destinations(again, "Team", ["Billing"]))
    assert 'add(team_app, destinations=("Billing",))' in narrower
    assert _commands(extract(narrower, "desk")) == [("Team", "Billing")]
    dropped = reconstruct(narrower, edits.set_destinations(extract(narrower, "desk"), "Team", None))
    assert "destinations" not in dropped
    assert extract(dropped, "desk").node("Team").destinations is None
    assert extract(dropped, "desk").commands == []
    # and back to the start, byte for byte
    restored = edits.set_destinations(extract(dropped, "desk"), "Team", ["Manager", END])
    assert reconstruct(dropped, restored) == source


def _lead(style: str) -> str:
    """How the ``add`` line starts in each style (the fluent chain indents its links)."""
    return "    " if style == "fluent" else "desk"


def test_the_fluent_link_is_rewritten_alone() -> None:
    source = _source("fluent")
    ir = extract(source, "desk")
    written = reconstruct(source, edits.set_destinations(ir, "Team", [END]))
    assert _changed(source, written) == [
        '-     .add(team_app, destinations=("Manager", END))',
        "+     .add(team_app, destinations=(END,))",
    ]


@pytest.mark.parametrize("style", STYLES)
def test_renaming_or_removing_a_destination_follows_in_the_tuple(style: str) -> None:
    source = _source(style)
    ir = extract(source, "desk")
    renamed = reconstruct(source, edits.rename_node(ir, "Manager", "Boss"))
    assert 'destinations=("Boss", END)' in renamed
    assert _commands(extract(renamed, "desk")) == [("Team", "Boss"), ("Team", END)]
    removed = reconstruct(source, edits.remove_node(ir, "Manager"))
    assert "destinations=(END,)" in removed
    assert _commands(extract(removed, "desk")) == [("Team", END)]


@pytest.mark.parametrize("style", STYLES)
def test_renaming_the_subgraph_node_keeps_its_destinations(style: str) -> None:
    source = _source(style)
    ir = extract(source, "desk")
    written = reconstruct(source, edits.rename_node(ir, "Team", "Squad"))
    assert 'add(team_app, name="Squad", destinations=("Manager", END))' in written
    assert _commands(extract(written, "desk")) == [("Squad", "Manager"), ("Squad", END)]


def test_a_subgraph_keeps_its_field_mapping_when_its_destinations_change() -> None:
    source = _source("statement").replace(
        'desk.add(team_app, destinations=("Manager", END))',
        'desk.add(team_app, inputs={"ticket": "ticket"}, destinations=("Manager", END))',
    )
    ir = extract(source, "desk")
    written = reconstruct(source, edits.set_destinations(ir, "Team", ["Manager"]))
    assert 'desk.add(team_app, inputs={"ticket": "ticket"}, destinations=("Manager",))' in written


def test_bad_destinations_are_refused_with_what_to_do() -> None:
    ir = extract(_source("statement"), "desk")
    with pytest.raises(IRError, match=r"not a subgraph node.*declares `destinations"):
        edits.set_destinations(ir, "Manager", ["Billing"])
    with pytest.raises(IRError, match="'Nowhere' cannot be a destination of 'Team'"):
        edits.set_destinations(ir, "Team", ["Nowhere"])
    with pytest.raises(IRError, match="name a node twice"):
        edits.set_destinations(ir, "Team", ["Manager", "Manager"])


def test_computed_destinations_stay_custom_wiring() -> None:
    source = _source("statement").replace('destinations=("Manager", END)', "destinations=PLACES")
    ir = extract(source, "desk")
    assert "Team" not in {n.name for n in ir.nodes}
    assert [e.code for e in ir.edges if e.kind == "custom"] == [
        "desk.add(team_app, destinations=PLACES)"
    ]
    assert reconstruct(source, ir) == source


def test_the_studio_sets_destinations_with_an_inverse() -> None:
    source = _source("statement")
    ir = extract(source, "desk")
    result = apply_op(ir, "set_destinations", {"node": "Team", "destinations": ["Billing"]}, source)
    assert result.ir.node("Team").destinations == ["Billing"]
    assert _commands(result.ir) == [("Team", "Billing")]
    assert result.inverse == {
        "op": "set_destinations",
        "args": {"node": "Team", "destinations": ["Manager", END]},
    }
    back = apply_op(result.ir, "set_destinations", result.inverse["args"], source)
    assert reconstruct(source, back.ir) == source


def test_the_ir_carries_destinations_through_json() -> None:
    ir = extract(_source("operator"), "desk")
    again = GraphIR.from_dict(ir.to_dict())
    assert again == ir and again.node("Team").destinations == ["Manager", END]
    data = ir.to_dict()
    data["nodes"][0]["destinations"] = "Manager"
    with pytest.raises(IRError, match="destinations must be null or a list of node names"):
        GraphIR.from_dict(data)


def test_the_escalation_example_draws_its_team_node_and_goto_wire() -> None:
    path = EXAMPLES / "escalation.py"
    source = path.read_text(encoding="utf-8")
    ir = extract(source, "desk", path=path, root=EXAMPLES)
    assert [n.name for n in ir.nodes] == ["Team", "Manager"]
    team = ir.node("Team")
    assert team.subgraph == "team" and team.destinations == ["Manager"]
    assert team.child is not None and [n.name for n in team.child.nodes] == ["Triage", "Reply"]
    assert _commands(ir) == [("Team", "Manager")]
    assert [(e.source, e.target, e.kind) for e in ir.edges] == [
        (START, "Team", "sequential"),
        ("Manager", END, "sequential"),
    ]
    assert reconstruct(source, ir, path=path, root=EXAMPLES) == source


# -- a bare `g.nodes(compiled_graph)` on the >> surface ----------------------------------------

BARE = """\
from tensorsketch import END, START, Context, Graph, Node, Schema


class Desk(Schema):
    ticket: str = ""
    owner: str = ""


class Triage(Node):
    class Out(Schema):
        owner: str

    async def run(self, ctx: Context, inp: Schema) -> Out:
        return self.Out(owner="team")


class Manager(Node):
    async def run(self, ctx: Context, inp: Schema) -> Schema:
        return Schema()


team = Graph(Desk{name}).add(Triage)
team.edge(START, "Triage").edge("Triage", END)
team_app = team.compile()

desk = Graph(Desk)
squad, manager = desk.nodes(team_app, Manager)
START >> squad >> manager >> END
"""


@pytest.mark.parametrize(("name", "expected"), [(', name="Team"', "Team"), ("", "Graph[Desk]")])
def test_a_bare_nodes_entry_is_a_subgraph_named_as_the_runtime_names_it(
    name: str, expected: str, tmp_path: Path
) -> None:
    source = BARE.format(name=name)
    ir = extract(source, "desk")
    node = ir.node(expected)
    assert node.subgraph == "team_app" and node.child is not None
    assert [n.name for n in node.child.nodes] == ["Triage"]
    assert [(e.source, e.target) for e in ir.edges] == [
        (START, expected),
        (expected, "Manager"),
        ("Manager", END),
    ]
    assert reconstruct(source, ir) == source
    # the runtime names the node the same way
    module = tmp_path / "bare.py"
    module.write_text(source, encoding="utf-8")
    namespace: dict[str, object] = {}
    exec(compile(source, str(module), "exec"), namespace)
    structure = namespace["desk"].structure  # type: ignore[attr-defined]
    assert list(structure.nodes) == [expected, "Manager"]


def test_edits_around_a_bare_subgraph_entry_keep_its_line() -> None:
    source = BARE.format(name=', name="Team"')
    ir = extract(source, "desk")
    wired = reconstruct(source, edits.add_edge(ir, "Team", END))
    assert "squad, manager = desk.nodes(team_app, Manager)" in wired
    assert "squad >> END" in wired
    assert extract(wired, "desk").edges[-1] == EdgeIR("Team", END)
    renamed = reconstruct(source, edits.rename_node(ir, "Team", "Squad"))
    assert 'desk.nodes(("Squad", team_app), Manager)' in renamed
    assert extract(renamed, "desk").node("Squad").subgraph == "team_app"
    # a bare entry that is no graph of the project stays a plain node named after it
    plain = source.replace("desk.nodes(team_app, Manager)", "desk.nodes(Elsewhere, Manager)")
    assert extract(plain, "desk").node("Elsewhere").subgraph is None
