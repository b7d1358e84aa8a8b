"""The IR: plain data, equality by value, JSON in and out, and a schema that describes it."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tensorsketch.canvas import IRError, extract
from tensorsketch.canvas.ir import END, START, EdgeIR, GraphIR, NodeIR, Port

SOURCE = """
class A(Node):
    class In(Schema):
        query: str
    async def run(self, ctx, inp):
        raise Hole("do it")

g = Graph(S)
g.add(A)
g.add(A, name="B")
g.edge(START, "A")
g.conditional("A", route, {"x": "B", "y": END})
g.router("B", fan)
g.loop("A", until=done)
g.edge(*pairs)

app = g.compile(interrupt_before=["B"], interrupt_after=STOPS)
"""


def sample() -> GraphIR:
    return extract(SOURCE)


def test_round_trips_through_json() -> None:
    ir = sample()
    data = json.loads(json.dumps(ir.to_dict()))
    again = GraphIR.from_dict(data)
    assert again == ir
    assert again.to_dict() == ir.to_dict()  # style, added and line included


def test_to_dict_matches_the_json_schema() -> None:
    schema = GraphIR.json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(sample().to_dict(), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "g", "edges": [{"source": "a", "kind": "wat"}]}, schema)


def test_equality_ignores_line_style_and_added() -> None:
    ir = sample()
    other = ir.copy()
    other.nodes[0].line = 999
    other.style = "operator"
    other.added = ["A"]
    assert other == ir
    other.nodes[0].inputs.append(Port("extra", "int"))
    assert other != ir


def test_breakpoints_are_read_only_data_outside_equality() -> None:
    ir = sample()
    # A literal list is read; a variable is not known statically (None).
    assert (ir.interrupt_before, ir.interrupt_after) == (["B"], None)
    data = ir.to_dict()
    assert (data["interrupt_before"], data["interrupt_after"]) == (["B"], None)
    again = GraphIR.from_dict(data)
    assert (again.interrupt_before, again.interrupt_after) == (["B"], None)
    other = ir.copy()
    assert other.interrupt_before is not ir.interrupt_before  # copied, not shared
    other.interrupt_before = []
    assert other == ir  # shown read-only: not part of ==
    # An IR posted without them (an older client) knows nothing: None, and nothing changes.
    assert GraphIR.from_dict({"name": "g"}).interrupt_before is None
    assert extract("g = Graph(S)\ng.add(A)\napp = g.compile()\n").interrupt_after == []


def test_defaults_and_normalisation() -> None:
    node = NodeIR("Escalate")
    assert (node.cls, node.inputs, node.has_hole, node.line) == ("Escalate", [], False, None)
    assert EdgeIR("A", None, "dynamic", path="f").branch == "conditional"
    assert EdgeIR("A", "B").kind == "sequential"
    assert (START, END) == ("__start__", "__end__")


def test_helpers() -> None:
    ir = sample()
    assert ir.node("B").cls == "A"
    assert [n.name for n in ir.holes] == ["A", "B"]
    with pytest.raises(IRError, match=r"no node named 'Z'.*'A', 'B'"):
        ir.node("Z")
    copy = ir.copy()
    copy.nodes[0].inputs.clear()
    assert ir.nodes[0].inputs  # a deep copy


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "graph must be a JSON object"),
        ({}, "graph is missing 'name'"),
        ({"name": "g", "colour": 1}, "unknown keys"),
        ({"name": "g", "style": "curly"}, "graph.style must be one of"),
        ({"name": "g", "nodes": {}}, "graph.nodes must be a list"),
        ({"name": "g", "added": [1]}, "graph.added must list node names"),
        ({"name": "g", "nodes": [{"name": ""}]}, "non-empty"),
        (
            {"name": "g", "nodes": [{"name": "A", "inputs": [{"name": "x"}]}]},
            r"inputs\[0\] is missing 'type'",
        ),
        ({"name": "g", "nodes": [{"name": "A", "has_hole": "yes"}]}, "must be true or false"),
        ({"name": "g", "nodes": [{"name": "A", "line": "3"}]}, "must be an integer"),
        ({"name": "g", "nodes": [{"name": "A", "inputs": {}}]}, "must be a list of ports"),
        (
            {"name": "g", "edges": [{"source": "A", "kind": "wat"}]},
            r"edges\[0\].kind must be one of",
        ),
        ({"name": "g", "edges": [{"source": "A", "branch": "wat"}]}, r"edges\[0\].branch must be"),
        ({"name": "g", "edges": [{"source": 3}]}, "must be a string or null"),
        ({"name": 3}, "graph.name must be a string"),
        ({"name": "g", "interrupt_before": "A"}, "interrupt_before must be a list of node"),
        ({"name": "g", "interrupt_after": [1]}, "interrupt_after must be a list of node"),
    ],
)
def test_from_dict_says_what_is_wrong(data: object, message: str) -> None:
    with pytest.raises(IRError, match=message):
        GraphIR.from_dict(data)


def test_constructors_validate_kinds() -> None:
    with pytest.raises(IRError, match=r"EdgeIR\.kind"):
        EdgeIR("A", "B", "wat")  # type: ignore[arg-type]
    with pytest.raises(IRError, match=r"EdgeIR\.branch"):
        EdgeIR("A", "B", branch="wat")  # type: ignore[arg-type]
