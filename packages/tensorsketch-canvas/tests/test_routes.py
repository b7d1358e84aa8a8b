"""Where a mapping-less routing function can go, read from its code (``EdgeIR.routes``)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import textwrap
import uuid
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tensorsketch.canvas import IRError, edits, extract, reconstruct
from tensorsketch.canvas.ir import END, EdgeIR, GraphIR
from tensorsketch.canvas.studio.export import to_mermaid, to_svg

HEAD = """\
from typing import Literal

from tensorsketch import END, Graph, Node, Schema, Send

class S(Schema):
    intent: str = ""
    items: list[int] = []

class A(Node):
    pass

class B(Node):
    pass

class C(Node):
    pass

"""

WIRING = """
app = (
    Graph(S)
    .add(A)
    .add(B)
    .add(C)
    .edge(START, "A")
    .conditional("A", {path})
    .edge("B", END)
    .edge("C", END)
).compile()
"""


def routes_of(router: str, path: str = "route") -> list[str] | None:
    source = HEAD + textwrap.dedent(router) + WIRING.format(path=path)
    (edge,) = [e for e in extract(source).edges if e.kind == "dynamic"]
    return edge.routes


@pytest.mark.parametrize(
    ("router", "expected"),
    [
        ('def route(s):\n    return "B"\n', ["B"]),
        ('def route(s):\n    if s.intent:\n        return "B"\n    return "C"\n', ["B", "C"]),
        ('def route(s):\n    return "B" if s.intent else END\n', ["B", END]),
        ('def route(s):\n    return {"x": "B", "y": "C"}.get(s.intent, END)\n', ["B", "C", END]),
        ('def route(s):\n    return {"x": "B", "y": "C"}[s.intent]\n', ["B", "C"]),
        ('def route(s):\n    return ["B", "C"]\n', ["B", "C"]),
        ('def route(s):\n    return [Send("B", {"n": i}) for i in s.items]\n', ["B"]),
        ('def route(s):\n    return s.intent or "B"\n', None),
        ('def route(s) -> Literal["B", "C"]:\n    return s.intent\n', ["B", "C"]),
        ('def route(s) -> list[Literal["B", "C"]]:\n    return [s.intent]\n', ["B", "C"]),
        # the same name from two branches is listed once, in first-seen order
        ('def route(s):\n    return "C" if s.intent else "B"\n\n# x\n', ["C", "B"]),
        (
            'def route(s):\n    def inner():\n        return "nope"\n    return "B"\n',
            ["B"],
        ),
    ],
)
def test_routes_spelled_out_by_the_code_are_read(router: str, expected: list[str] | None) -> None:
    assert routes_of(router) == expected


@pytest.mark.parametrize(
    "router",
    [
        "def route(s):\n    return s.intent\n",  # a value only known at run time
        'def route(s):\n    return f"{s.intent}"\n',
        'def route(s):\n    return {"x": "B"}.get(s.intent)\n',  # may return None
        'def route(s):\n    if s.intent:\n        return "B"\n    return\n',  # a bare return
        'def route(s):\n    return "Billing"\n',  # not a node of the graph
        'def route(s):\n    return "__start__"\n',
        "def route(s):\n    pass\n",  # no return at all
        'def route(s):\n    return {**OTHER, "x": "B"}[s.intent]\n',
        'def route(s) -> Literal["B", 3]:\n    return s.intent\n',
        # defined twice: which one runs depends on the code around it
        'def route(s):\n    return "B"\n\ndef route(s):\n    return "C"\n',
        "",  # not defined in the file at all (imported)
    ],
)
def test_anything_not_spelled_out_is_unknown(router: str) -> None:
    assert routes_of(router) is None


def test_a_lambda_is_read_from_its_body() -> None:
    assert routes_of("", path='lambda s: "B" if s.intent else "C"') == ["B", "C"]
    assert routes_of("", path="lambda s: s.intent") is None
    assert routes_of('def route(s):\n    return "B"\n', path="pick.route") is None


def test_routes_stay_outside_equality_and_round_trip_through_json() -> None:
    source = (
        HEAD + 'def route(s):\n    return "B" if s.intent else "C"\n' + WIRING.format(path="route")
    )
    ir = extract(source)
    data = json.loads(json.dumps(ir.to_dict()))
    jsonschema.validate(data, GraphIR.json_schema())
    (dynamic,) = [e for e in data["edges"] if e["kind"] == "dynamic"]
    assert dynamic["routes"] == ["B", "C"]
    again = GraphIR.from_dict(data)
    assert again == ir
    assert [e.routes for e in again.edges] == [e.routes for e in ir.edges]
    copied = ir.copy()
    (edge,) = [e for e in copied.edges if e.kind == "dynamic"]
    original = next(e for e in ir.edges if e.kind == "dynamic")
    assert edge.routes is not original.routes  # copied, not shared
    edge.routes = None
    assert copied == ir  # read from the code for the picture only: not part of ==
    assert EdgeIR("A", None, "dynamic", path="route") in ir.edges


def test_routes_are_never_written_back() -> None:
    source = HEAD + 'def route(s):\n    return "B"\n' + WIRING.format(path="route")
    ir = extract(source)
    sent = ir.copy()
    (edge,) = [e for e in sent.edges if e.kind == "dynamic"]
    edge.routes = ["C"]  # what a client might send back: ignored by write-back
    assert reconstruct(source, sent) == source
    new = reconstruct(source, edits.remove_node(ir, "C"))
    # C's removal does not touch the routing function; B is still read from it
    assert [e.routes for e in extract(new).edges if e.kind == "dynamic"] == [["B"]]


def test_exports_draw_the_routes() -> None:
    source = (
        HEAD + 'def route(s):\n    return "B" if s.intent else END\n' + WIRING.format(path="route")
    )
    mermaid = to_mermaid(extract(source))
    assert 'n0 -.->|"route?"| n1' in mermaid
    assert 'n0 -.->|"route?"| stop' in mermaid
    assert "dyn1" not in mermaid  # no "?" stub once the targets are known
    unknown = to_mermaid(extract(HEAD + WIRING.format(path="route")))
    assert 'n0 -.->|"route"| dyn1' in unknown
    svg = to_svg(extract(source))
    assert svg.count('stroke-dasharray="6 4"') == 2


EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "support_router.py"
ROUTE = '{"billing": "Billing", "tech": "Tech"}.get(state.intent, "Fallback")'


def _run(source: str, directory: Path, query: str) -> Any:
    path = directory / f"routed_{uuid.uuid4().hex[:8]}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return asyncio.run(module.app.invoke({"query": query}))


def test_renaming_or_removing_a_node_the_route_returns_is_refused_until_the_code_changes(
    tmp_path: Path,
) -> None:
    # Found by QA: renaming Tech rewrote `.add(Tech, name="Techie")` but `route` still
    # returned "Tech", so the graph failed with a RoutingError (and the canvas showed a stub).
    source = EXAMPLE.read_text(encoding="utf-8")
    assert ROUTE in source
    ir = extract(source)
    with pytest.raises(IRError, match="cannot rename 'Tech' to 'Techie': the routing function"):
        reconstruct(source, edits.rename_node(ir, "Tech", "Techie"))
    with pytest.raises(IRError, match="cannot remove 'Fallback': the routing function `route`"):
        reconstruct(source, edits.remove_node(ir, "Fallback"))
    # What the message says to do: change the routing code first, then edit the graph.
    rerouted = source.replace(ROUTE, ROUTE.replace('"Tech"}', '"Techie"}'))
    (pending,) = [e for e in extract(rerouted).edges if e.kind == "dynamic"]
    assert pending.routes is None  # "Techie" is not a node yet: nothing to hold back
    renamed = reconstruct(rerouted, edits.rename_node(extract(rerouted), "Tech", "Techie"))
    assert '.add(Tech, name="Techie")' in renamed
    (edge,) = [e for e in extract(renamed).edges if e.kind == "dynamic"]
    assert edge.routes == ["Billing", "Techie", "Fallback"]
    out = _run(renamed, tmp_path, "The app shows an error")
    assert out.answer.startswith("[Tech]")
