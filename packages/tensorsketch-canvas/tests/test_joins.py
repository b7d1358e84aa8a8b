"""Wait-for-all joins on the canvas: read from every authoring style, written back in the
file's own style, refused when malformed, edited (add, remove, rename, undo) and exported."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from tensorsketch.canvas import edits, extract, reconstruct
from tensorsketch.canvas.exceptions import IRError
from tensorsketch.canvas.ir import END, START, EdgeIR, GraphIR
from tensorsketch.canvas.studio.app import Studio
from tensorsketch.canvas.studio.export import layers, to_mermaid, to_svg
from tensorsketch.canvas.studio.routes import create_app

HEAD = """\
from tensorsketch import END, START, Graph, Node, Schema


class S(Schema):
    x: int = 0


class A(Node):
    pass


class B(Node):
    pass


class C(Node):
    pass


class D(Node):
    pass
"""


def src(wiring: str) -> str:
    return HEAD + "\n\n" + textwrap.dedent(wiring)


def join(*sources: str, to: str) -> EdgeIR:
    return EdgeIR(None, to, "join", sources=list(sources))


STYLES = {
    "fluent": """\
        app = (
            Graph(S)
            .add(A)
            .add(B)
            .add(C)
            .edge(START, "A")
            .edge(START, "B")
            .edge(["A", "B"], "C")
            .edge("C", END)
        ).compile()
        """,
    "statement": """\
        g = Graph(S)
        g.add(A)
        g.add(B)
        g.add(C)
        g.edge(START, "A")
        g.edge(START, "B")
        g.edge(["A", "B"], "C")
        g.edge("C", END)
        app = g.compile()
        """,
    "operator": """\
        g = Graph(S)
        a, b, c = g.nodes(A, B, C)
        START >> a
        START >> b
        [a, b] >> c >> END
        app = g.compile()
        """,
}


@pytest.mark.parametrize("style", list(STYLES))
def test_a_join_reads_the_same_in_every_style_and_round_trips(style: str) -> None:
    source = src(STYLES[style])
    ir = extract(source)
    assert ir.style == style
    assert ir.edges == [
        EdgeIR(START, "A"),
        EdgeIR(START, "B"),
        join("A", "B", to="C"),
        EdgeIR("C", END),
    ]
    assert reconstruct(source, ir) == source
    # an edited join is written back in the file's style and reads back as edited
    edited = ir.copy()
    edited.edges[2] = join("B", "A", to="C")
    again = reconstruct(source, edited)
    assert extract(again) == edited
    written = {
        "fluent": '.edge(["B", "A"], "C")',
        "statement": 'g.edge(["B", "A"], "C")',
        "operator": "[b, a] >> c",
    }[style]
    assert written in again


def test_more_join_spellings() -> None:
    ir = extract(
        src(
            """\
            g = Graph(S)
            a, b, c, d = g.nodes(A, B, C, D)
            g.edge(("A", "B"), "C")
            g.edge(src=["A", "B", "C"], dst="D")
            a >> [b, c] >> d
            [a] >> d
            (b, c) >> g["D"]
            """
        )
    )
    assert ir.edges == [
        join("A", "B", to="C"),
        join("A", "B", "C", to="D"),
        EdgeIR("A", "B"),
        EdgeIR("A", "C"),
        join("B", "C", to="D"),  # the runtime's `a >> [b, c]` returns [b, c]: then a join
        EdgeIR("A", "D"),  # a one-node list is a plain edge, as in the runtime
        join("B", "C", to="D"),
    ]


@pytest.mark.parametrize(
    "wiring",
    [
        'g.edge([START, "A"], "C")',
        'g.edge(["A", END], "C")',
        'g.edge(["A", "A"], "C")',
        'g.edge(["A", "B"], END)',
        'g.edge(["A", *rest], "C")',
        "[a, b] >> [c, d]",
        "[a, a] >> c",
        "[a, b] >> END",
    ],
)
def test_a_join_the_engine_refuses_is_kept_as_custom_code(wiring: str) -> None:
    source = src(f"g = Graph(S)\na, b, c, d = g.nodes(A, B, C, D)\n{wiring}\n")
    ir = extract(source)
    assert [e.kind for e in ir.edges] == ["custom"]
    assert reconstruct(source, ir) == source


@pytest.mark.parametrize(
    ("edge", "message"),
    [
        (join("A", to="C"), "two or more nodes"),
        (join("A", "A", to="C"), "each source once"),
        (join("A", START, to="C"), "START and END cannot be in `sources`"),
        (join("A", "B", to=END), "needs a node as its target"),
        (EdgeIR("A", "C", "join", sources=["A", "B"]), "no single `source`"),
    ],
)
def test_writing_back_a_malformed_join_is_refused(edge: EdgeIR, message: str) -> None:
    source = src(STYLES["statement"])
    ir = extract(source)
    ir.edges.append(edge)
    with pytest.raises(IRError, match=message):
        reconstruct(source, ir)


def test_the_ir_json_carries_the_sources() -> None:
    ir = extract(src(STYLES["fluent"]))
    data = ir.to_dict()
    assert data["edges"][2]["sources"] == ["A", "B"] and data["edges"][2]["source"] is None
    assert data["edges"][0]["sources"] is None
    assert GraphIR.from_dict(data) == ir
    data["edges"][2]["sources"] = ["A", 1]
    with pytest.raises(IRError, match=r"edges\[2\].sources must be a list of node names"):
        GraphIR.from_dict(data)


def test_join_edits() -> None:
    source = src(STYLES["statement"])
    ir = edits.add_node(extract(source), "Extra")
    with_join = edits.add_join(ir, ["C", "Extra"], "A")
    assert with_join.edges[-1] == join("C", "Extra", to="A")
    assert extract(reconstruct(source, with_join)).edges[-1] == join("C", "Extra", to="A")
    with pytest.raises(IRError, match="two or more different nodes"):
        edits.add_join(ir, ["A"], "C")
    with pytest.raises(IRError, match="has no node named 'Nope'"):
        edits.add_join(ir, ["A", "Nope"], "C")

    renamed = edits.rename_node(ir, "A", "First")
    assert join("First", "B", to="C") in renamed.edges
    assert join("A", "B", to="C") in ir.edges  # the original is untouched

    # removing a node a join waits for removes the whole join (a one-source join is an edge)
    removed = edits.remove_node(ir, "B")
    assert all(e.kind != "join" for e in removed.edges)
    assert extract(reconstruct(source, removed)).edges == [EdgeIR(START, "A"), EdgeIR("C", END)]
    index = next(i for i, e in enumerate(ir.edges) if e.kind == "join")
    assert edits.remove_edge(ir, index).edges == [e for e in ir.edges if e.kind != "join"]


def test_exports_draw_a_join_from_each_source() -> None:
    ir = extract(src(STYLES["fluent"]))
    assert '    n0 & n1 ==>|"join"| n2' in to_mermaid(ir)
    assert layers(ir) == [[START], ["A", "B"], ["C"], [END]]
    svg = to_svg(ir)
    assert svg.count('stroke-width="2.5"') == 2 and svg.count(">join</text>") == 2


# -- the Studio's edit ops ----------------------------------------------------------------------

TOKEN = "test-token-123"


async def _client(path: Path) -> httpx.AsyncClient:
    studio = Studio(path=path, token=TOKEN, project=path.parent)
    transport = httpx.ASGITransport(app=create_app(studio))
    return httpx.AsyncClient(
        transport=transport, base_url="http://127.0.0.1:8765", headers={"X-Studio-Token": TOKEN}
    )


async def _send(client: httpx.AsyncClient, op: str, args: dict[str, Any]) -> httpx.Response:
    version = (await client.get("/api/graph")).json()["version"]
    return await client.post("/api/edit", json={"version": version, "op": op, "args": args})


async def test_studio_removes_adds_and_restores_a_join(tmp_path: Path) -> None:
    path = tmp_path / "joined.py"
    before = src(STYLES["operator"])
    path.write_text(before)
    async with await _client(path) as client:
        graph = (await client.get("/api/graph")).json()["graph"]
        assert graph["edges"][2] == join("A", "B", to="C").to_dict()

        # without `join: true` a join's wire is not a plain edge: the message says so
        r = await _send(client, "remove_edge", {"source": "B", "target": "C"})
        assert r.status_code == 422 and "a join: pass join: true" in r.text

        r = await _send(client, "remove_edge", {"source": "B", "target": "C", "join": True})
        assert r.status_code == 200, r.text
        assert "[a, b] >> c" not in path.read_text()
        assert all(e.kind != "join" for e in extract(path.read_text()).edges)
        undo = r.json()["inverse"]
        assert undo["op"] == "restore"
        r = await _send(client, undo["op"], undo["args"])
        assert r.status_code == 200, r.text
        assert path.read_text() == before
        assert r.json()["inverse"] == {
            "op": "remove_edge",
            "args": {"source": "A", "target": "C", "join": True},
        }

        r = await _send(client, "add_join", {"sources": ["A", "C"], "target": "B"})
        assert r.status_code == 200, r.text
        assert "[a, c] >> b" in path.read_text()
        assert r.json()["inverse"] == {
            "op": "remove_edge",
            "args": {"source": "A", "target": "B", "join": True},
        }

        for args, message in (
            ({"sources": ["A", "B"], "target": "C"}, "already has the join"),
            (
                {"sources": ["A", "Bb"], "target": "C"},
                "join source 'Bb' is not a node — did you mean 'B'",
            ),
            ({"sources": [START, "A"], "target": "C"}, "cannot be part of one"),
            ({"sources": ["A", "B"], "target": END}, "cannot be part of one"),
            ({"sources": ["A"], "target": "C"}, "two or more different nodes"),
        ):
            r = await _send(client, "add_join", args)
            assert r.status_code == 422, (args, r.text)
            assert message in r.text, r.text
        r = await _send(client, "add_join", {"sources": "A", "target": "C"})
        assert r.status_code == 400 and "a list of node names" in r.text
