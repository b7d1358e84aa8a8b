"""Creating a node: the stub written for it re-extracts to exactly the NodeIR the canvas sent.

Nothing about the node may be invented on the way (no hole message it did not have) or lost
(quotes, backslashes, line breaks or unusual characters in the message; a class named
differently from the node; ports of any type). What cannot be written as Python is refused
with a reason instead.
"""

from __future__ import annotations

import keyword

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorsketch.canvas import IRError, WriteBackError, extract, reconstruct
from tensorsketch.canvas.ir import GraphIR, NodeIR, Port

HEADER = (
    "from tensorsketch import Graph, Node, Schema\n\n\n"
    "class State(Schema):\n    query: str = ''\n\n\n"
    "class Alpha(Node):\n    async def run(self, ctx, inp):\n        return None\n\n\n"
)

SOURCES = {
    "fluent": HEADER + "app = (\n    Graph(State)\n    .add(Alpha)\n).compile()\n",
    "fluent-empty": HEADER + "app = Graph(State).compile()\n",
    "statement": HEADER + "g = Graph(State)\ng.add(Alpha)\n\napp = g.compile()\n",
    "operator": HEADER + "g = Graph(State)\n(alpha,) = g.nodes(Alpha)\n\napp = g.compile()\n",
    "in-a-function": HEADER
    + "def build():\n    g = Graph(State)\n    g.add(Alpha)\n    return g\n",
}

TYPES = [
    "str",
    "int",
    "list[str]",
    "dict[str, int]",
    "int | None",
    "'Forward'",
    "Annotated[str, x]",
]
TAKEN = {"Alpha", "State", "Graph", "Node", "Schema", "Context", "Hole", "build", "app", "g"}


def _free(name: str) -> bool:
    return name not in TAKEN and not keyword.iskeyword(name)


identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,7}", fullmatch=True)
class_names = identifiers.filter(_free)
port_lists = st.lists(
    st.builds(Port, identifiers.filter(lambda n: not keyword.iskeyword(n)), st.sampled_from(TYPES)),
    max_size=3,
    unique_by=lambda p: p.name,
)
holes = st.one_of(st.none(), st.just(""), st.text(max_size=20))


def _graph(source: str) -> GraphIR:
    return extract(source)


def _created(source: str, node: NodeIR) -> str:
    ir = _graph(source)
    ir.nodes.append(node)
    ir.added.append(node.name)
    return reconstruct(source, ir)


@settings(
    max_examples=200,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    source=st.sampled_from(sorted(SOURCES)),
    cls=class_names,
    alias=st.one_of(st.none(), class_names),
    inputs=port_lists,
    outputs=port_lists,
    hole=holes,
)
def test_a_stub_re_extracts_to_the_node_the_canvas_sent(
    source: str,
    cls: str,
    alias: str | None,
    inputs: list[Port],
    outputs: list[Port],
    hole: str | None,
) -> None:
    sent = NodeIR(alias or cls, cls, inputs, outputs, has_hole=True, hole=hole)
    new = _created(SOURCES[source], sent)
    compile(new, "<stub>", "exec")
    assert _graph(new).node(sent.name) == sent


@pytest.mark.parametrize(
    ("hole", "written"),
    [
        (None, "raise Hole()"),
        ("", 'raise Hole("")'),
        ("Say \"hi\" \\ 'there'\n", 'raise Hole("Say \\"hi\\" \\\\ \'there\'\\n")'),
        ("line\u2028separator", 'raise Hole("line\\u2028separator")'),
        ("tab\there, café", 'raise Hole("tab\\there, café")'),
    ],
)
def test_the_hole_message_is_written_as_sent(hole: str | None, written: str) -> None:
    sent = NodeIR("Escalate", has_hole=True, hole=hole)
    new = _created(SOURCES["statement"], sent)
    assert f"        {written}\n" in new
    assert _graph(new).node("Escalate") == sent


def test_a_message_less_hole_in_the_file_reads_as_none() -> None:
    source = HEADER.replace("return None", "raise Hole") + "g = Graph(State)\ng.add(Alpha)\n"
    node = extract(source).node("Alpha")
    assert (node.has_hole, node.hole) == (True, None)
    called = extract(source.replace("raise Hole\n", "raise Hole()\n")).node("Alpha")
    assert (called.has_hole, called.hole) == (True, None)


@pytest.mark.parametrize(
    "node",
    [
        NodeIR("None", has_hole=True),
        NodeIR("Escalate", "class", has_hole=True),
        NodeIR("Escalate", inputs=[Port("class", "str")], has_hole=True),
        NodeIR("Escalate", inputs=[Port("query", "str str")], has_hole=True),
        NodeIR("Escalate", has_hole=False),
    ],
    ids=["keyword-class", "keyword-cls", "keyword-port", "bad-type", "not-a-hole"],
)
def test_what_python_cannot_say_is_refused(node: NodeIR) -> None:
    with pytest.raises((IRError, WriteBackError)):
        _created(SOURCES["statement"], node)
