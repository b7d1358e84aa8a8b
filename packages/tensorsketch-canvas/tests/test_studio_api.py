# ruff: noqa: ASYNC240  -- the tests read and write small temporary files inline
"""The Studio's API in-process (httpx against the Starlette app): every route, every edit op
on a copy of examples/support_router.py, conflicts, teaching messages, hostile requests."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tensorsketch.canvas import edits, extract
from tensorsketch.canvas._pyparse import parse_python
from tensorsketch.canvas.studio.app import Studio
from tensorsketch.canvas.studio.routes import create_app

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "support_router.py"
TOKEN = "test-token-123"
BASE = "http://127.0.0.1:8765"


@pytest.fixture
def graph_file(tmp_path: Path) -> Path:
    target = tmp_path / "support_router.py"
    shutil.copyfile(EXAMPLE, target)
    return target


@pytest.fixture
async def client(graph_file: Path) -> AsyncIterator[httpx.AsyncClient]:
    studio = Studio(path=graph_file, token=TOKEN, project=graph_file.parent)
    app = create_app(studio)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url=BASE, headers={"X-Studio-Token": TOKEN}
    ) as c:
        yield c


#: The example's routing function: it returns Billing, Tech and Fallback by name.
ROUTE = '{"billing": "Billing", "tech": "Tech"}.get(state.intent, "Fallback")'


def reroute(path: Path, route: str) -> None:
    """Change what the routing function returns, as one does in an editor before renaming or
    deleting a node it names (the Studio refuses those edits until then)."""
    text = path.read_text(encoding="utf-8")
    assert ROUTE in text
    path.write_text(text.replace(ROUTE, route), encoding="utf-8")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def version(client: httpx.AsyncClient) -> str:
    r = await client.get("/api/graph")
    assert r.status_code == 200
    return str(r.json()["version"])


async def edit(client: httpx.AsyncClient, op: str, **args: Any) -> httpx.Response:
    return await client.post(
        "/api/edit", json={"version": await version(client), "op": op, "args": args}
    )


def class_segments(text: str) -> dict[str, str]:
    tree = parse_python(text)  # the Studio's threads may be parsing too
    return {
        n.name: ast.get_source_segment(text, n) or ""
        for n in tree.body
        if isinstance(n, ast.ClassDef)
    }


def assert_bodies_untouched(before: str, after: str) -> None:
    for name, segment in class_segments(before).items():
        assert segment in after, f"class {name} changed"


# -- GET ---------------------------------------------------------------------------------------


async def test_get_graph(client: httpx.AsyncClient, graph_file: Path) -> None:
    r = await client.get("/api/graph")
    assert r.status_code == 200
    data = r.json()
    assert data["file"] == str(graph_file)
    assert data["version"] == sha(graph_file)
    assert data["graphs"] == ["app"] and data["selected"] == "app"
    assert data["graph"] == extract(graph_file.read_text()).to_dict()
    assert data["parse_error"] is None and data["stale"] is False
    assert data["style"] == "fluent"
    assert data["layout"] == {} and data["holes"] == []
    assert r.headers["cache-control"] == "no-store"


async def test_page_and_static(client: httpx.AsyncClient) -> None:
    r = await client.get("/", params={"token": TOKEN})
    assert r.status_code == 200 and "<html" in r.text.lower()
    assert r.headers["referrer-policy"] == "no-referrer"
    r = await client.get("/", headers={"X-Studio-Token": ""})
    assert r.status_code == 403
    r = await client.get("/static/does-not-exist.js", headers={})
    assert r.status_code == 404
    assert (await client.get("/static/../app.py")).status_code == 404


async def test_graph_selection_and_holes(tmp_path: Path) -> None:
    source = tmp_path / "two.py"
    source.write_text(
        "from tensorsketch import Graph, Hole, Node, START\n\n"
        "class Draft(Node):\n    async def run(self, ctx, inp):\n"
        '        raise Hole("Write the first draft")\n\n'
        'app = Graph(S).add(Draft).edge(START, "Draft").compile()\n'
        "other = Graph(T).compile()\n",
        encoding="utf-8",
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "more.py").write_text(
        "from tensorsketch import Hole, Node\n\nclass Later(Node):\n"
        "    async def run(self, ctx, inp):\n        raise Hole('later')\n",
        encoding="utf-8",
    )
    (tmp_path / "broken.py").write_text("def nope(:\n", encoding="utf-8")
    app = create_app(Studio(path=source, token=TOKEN, graph="other", project=tmp_path))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=BASE, headers={"X-Studio-Token": TOKEN}
    ) as c:
        data = (await c.get("/api/graph")).json()
        assert data["selected"] == "other" and data["graphs"] == ["app", "other"]
        assert data["graph"]["state"] == "T"
        data = (await c.get("/api/graph", params={"graph": "app"})).json()
        assert data["selected"] == "app"
        holes = {(h["node"], h["message"]) for h in data["holes"]}
        assert holes == {("Draft", "Write the first draft"), ("Later", "later")}
        assert set(data["holes"][0]) == {"file", "node", "message", "line", "status", "draft"}
        assert {h["status"] for h in data["holes"]} == {"needs code"}
        # A fill that could not verify its body leaves a draft: the hole shows "unverified".
        draft = {"status": "unverified", "code": "...", "failures": ["mypy: ..."], "attempts": 3}
        (tmp_path / "sub" / "more.py.holes.json").write_text(json.dumps({"Later": draft}))
        data = (await c.get("/api/graph", params={"graph": "app"})).json()
        later = next(h for h in data["holes"] if h["node"] == "Later")
        assert later["status"] == "unverified" and later["draft"] == draft
        r = await c.get("/api/graph", params={"graph": "../../etc/passwd"})
        assert r.status_code == 404 and "no graph named" in r.json()["error"]


async def test_parse_error_keeps_last_good_graph(
    client: httpx.AsyncClient, graph_file: Path
) -> None:
    good = (await client.get("/api/graph")).json()
    graph_file.write_text(graph_file.read_text() + "\ndef broken(:\n", encoding="utf-8")
    r = await client.get("/api/graph")
    assert r.status_code == 200
    data = r.json()
    assert data["stale"] is True and data["graph"] == good["graph"]
    assert data["parse_error"]["line"] == len(graph_file.read_text().splitlines())
    assert "fix the syntax error" in data["parse_error"]["message"]
    assert data["version"] == sha(graph_file)


async def test_parse_error_without_a_good_graph(tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text("x = (\n", encoding="utf-8")
    app = create_app(Studio(path=path, token=TOKEN, project=tmp_path))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=BASE, headers={"X-Studio-Token": TOKEN}
    ) as c:
        data = (await c.get("/api/graph")).json()
        assert data["graph"] is None and data["stale"] is False
        assert data["parse_error"]["line"] >= 1
        # the message names the file, not `<source>`
        assert data["parse_error"]["message"].startswith("cannot parse bad.py (line 1: ")
        r = await c.post("/api/edit", json={"version": sha(path), "op": "add_node",
                                            "args": {"name": "A"}})  # fmt: skip
        assert r.status_code == 422 and "syntax error" in r.json()["error"]
        assert r.json()["error"].startswith("cannot parse bad.py (")
        r = await c.get("/api/export")
        assert r.status_code == 422 and "<source>" not in r.json()["error"]


# -- edits -------------------------------------------------------------------------------------


async def test_add_node_then_wire_it(client: httpx.AsyncClient, graph_file: Path) -> None:
    before = graph_file.read_text()
    expected = edits.add_node(extract(before), "Escalate", [("query", "str")], [("answer", "str")])
    r = await edit(client, "add_node", name="Escalate", inputs={"query": "str"},
                   outputs={"answer": "str"})  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["inverse"] == {"op": "remove_node", "args": {"name": "Escalate"}}
    assert body["version"] == sha(graph_file)
    after = graph_file.read_text()
    assert extract(after) == expected
    assert body["graph"] == extract(after).to_dict()
    assert "class Escalate(Node):" in after and 'raise Hole("Escalate needs code")' in after
    assert_bodies_untouched(before, after)

    r = await edit(client, "add_edge", source="Escalate", target="__end__")
    assert r.status_code == 200, r.text
    assert r.json()["inverse"] == {
        "op": "remove_edge",
        "args": {"source": "Escalate", "target": "__end__"},
    }
    assert extract(graph_file.read_text()) == edits.add_edge(expected, "Escalate", "__end__")

    # the inverse undoes it
    r = await edit(client, "remove_edge", source="Escalate", target="__end__")
    assert r.status_code == 200
    assert r.json()["inverse"] == {
        "op": "add_edge",
        "args": {"source": "Escalate", "target": "__end__"},
    }
    assert extract(graph_file.read_text()) == expected


async def test_remove_edge_and_node(client: httpx.AsyncClient, graph_file: Path) -> None:
    reroute(graph_file, '{"billing": "Billing", "tech": "Tech"}.get(state.intent, END)')
    before = graph_file.read_text()
    ir = extract(before)
    r = await edit(client, "remove_edge", source="Tech", target="__end__")
    assert r.status_code == 200, r.text
    index = next(i for i, e in enumerate(ir.edges) if e.source == "Tech")
    assert extract(graph_file.read_text()) == edits.remove_edge(ir, index)
    r = await edit(client, "remove_node", name="Fallback")
    assert r.status_code == 200 and r.json()["inverse"]["op"] == "restore"
    after = graph_file.read_text()
    assert [n.name for n in extract(after).nodes] == ["Classify", "Billing", "Tech"]
    assert_bodies_untouched(before, after)  # the class stays in the code


async def send(client: httpx.AsyncClient, op: dict[str, Any]) -> httpx.Response:
    return await client.post("/api/edit", json={"version": await version(client), **op})


async def test_undo_and_redo_of_a_node_deletion(
    client: httpx.AsyncClient, graph_file: Path
) -> None:
    reroute(graph_file, '{"billing": "Billing"}.get(state.intent, "Fallback")')
    before = graph_file.read_text()
    r = await edit(client, "remove_node", name="Tech")
    assert r.status_code == 200, r.text
    deleted = graph_file.read_text()
    assert "Tech" not in [n.name for n in extract(deleted).nodes]
    undo = r.json()["inverse"]
    assert undo["op"] == "restore" and undo["args"]["node"]["name"] == "Tech"
    assert {e["edge"]["source"] for e in undo["args"]["edges"]} == {"Tech"}

    r = await send(client, undo)  # undo: the file is what it was, byte for byte
    assert r.status_code == 200, r.text
    assert graph_file.read_text() == before
    assert r.json()["graph"] == extract(before).to_dict()
    redo = r.json()["inverse"]
    assert redo == {"op": "remove_node", "args": {"name": "Tech"}}

    r = await send(client, redo)  # redo deletes it again, and can be undone again
    assert r.status_code == 200, r.text
    assert graph_file.read_text() == deleted
    assert (await send(client, r.json()["inverse"])).status_code == 200
    assert graph_file.read_text() == before


async def test_undo_of_a_route_deletion(client: httpx.AsyncClient, graph_file: Path) -> None:
    before = graph_file.read_text()
    ir = extract(before)
    (dynamic,) = [e for e in ir.edges if e.kind == "dynamic"]  # the `route → ?` stub
    r = await edit(client, "remove_edge", source="Classify", target=None)
    assert r.status_code == 200, r.text
    assert '.conditional("Classify", route)' not in graph_file.read_text()
    assert [e for e in extract(graph_file.read_text()).edges if e.kind == "dynamic"] == []
    undo = r.json()["inverse"]
    assert undo["op"] == "restore" and undo["args"]["edges"][0]["edge"] == dynamic.to_dict()
    r = await send(client, undo)
    assert r.status_code == 200, r.text
    assert graph_file.read_text() == before
    assert r.json()["inverse"] == {
        "op": "remove_edge",
        "args": {"source": "Classify", "target": None},
    }


MAPPED = """\
from tensorsketch import END, START, Graph, Node, Schema


class S(Schema):
    x: str


def pick(state: S) -> str:
    return "b"


app = (
    Graph(S)
    .add(A)
    .add(B)  # the b node
    .add(C)
    .edge(START, "A")
    # routing: one key per target
    .conditional("A", pick, {"b": "B", "c": "C", "done": END})
    .edge("B", END)
    .edge("C", END)
).compile()
"""


async def test_undo_of_a_conditional_route_restores_its_text_and_survives_other_changes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mapped.py"
    path.write_text(MAPPED)
    studio = Studio(path=path, token=TOKEN, project=tmp_path)
    transport = httpx.ASGITransport(app=create_app(studio))
    async with httpx.AsyncClient(
        transport=transport, base_url=BASE, headers={"X-Studio-Token": TOKEN}
    ) as c:
        r = await edit(c, "remove_edge", source="A", target="__end__", label="done")
        assert r.status_code == 200, r.text
        assert '{"b": "B", "c": "C"}' in path.read_text()
        r = await send(c, r.json()["inverse"])
        assert r.status_code == 200, r.text
        assert path.read_text() == MAPPED  # the key is back where it was

        r = await edit(c, "remove_node", name="B")
        assert r.status_code == 200, r.text
        assert "# the b node" not in path.read_text()
        undo = r.json()["inverse"]
        r = await send(c, undo)
        assert r.status_code == 200, r.text
        assert path.read_text() == MAPPED  # comments on the removed lines come back too

        # The file changes elsewhere between the deletion and its undo: the node and its
        # edges go back through the engine, and the other change stays.
        r = await edit(c, "remove_node", name="C")
        undo = r.json()["inverse"]
        path.write_text(path.read_text() + "\n# edited in an editor\n")
        r = await send(c, undo)
        assert r.status_code == 200, r.text
        text = path.read_text()
        assert text.endswith("# edited in an editor\n")
        assert extract(text) == extract(MAPPED)

        # A routing key restored through the engine goes back into its one routing call (a
        # node routes through at most one path function; two calls would not compile).
        r = await edit(c, "remove_edge", source="A", target="__end__", label="done")
        undo = r.json()["inverse"]
        path.write_text(path.read_text().replace("# the b node", "# b, edited"))
        r = await send(c, undo)
        assert r.status_code == 200, r.text
        text = path.read_text()
        assert text.count(".conditional(") == 1
        assert '.conditional("A", pick, {"b": "B", "c": "C", "done": END})' in text
        assert "# b, edited" in text and "# routing: one key per target" in text

        # A restore the Studio did not issue is refused (it carries source text).
        r = await edit(c, "remove_node", name="C")
        forged = r.json()["inverse"]
        forged["args"]["text"]["hunks"] = [[0, 0, ["import os\n"]]]
        kept = path.read_bytes()
        r = await send(c, forged)
        assert r.status_code == 400 and "restore" in r.json()["error"]
        del forged["args"]["seal"]
        assert (await send(c, forged)).status_code == 400
        assert path.read_bytes() == kept


async def test_rename_node_moves_its_layout(client: httpx.AsyncClient, graph_file: Path) -> None:
    reroute(graph_file, '{"billing": "Billing", "tech": "Support"}.get(state.intent, "Fallback")')
    r = await client.post("/api/layout", json={"positions": {"Tech": {"x": 10, "y": 20.5}}})
    assert r.status_code == 200
    r = await edit(client, "rename_node", old="Tech", new="Support")
    assert r.status_code == 200, r.text
    assert r.json()["inverse"] == {"op": "rename_node", "args": {"old": "Support", "new": "Tech"}}
    ir = extract(graph_file.read_text())
    assert "Support" in [n.name for n in ir.nodes] and "Tech" not in [n.name for n in ir.nodes]
    assert r.json()["layout"] == {"Support": {"x": 10.0, "y": 20.5}}
    sidecar = json.loads((graph_file.parent / "support_router.py.layout.json").read_text())
    assert sidecar["nodes"] == {"Support": {"x": 10.0, "y": 20.5}}


async def test_renaming_a_created_hole_renames_its_stub_class(
    client: httpx.AsyncClient, graph_file: Path
) -> None:
    # Found by QA: renaming a hole made with + node wrote `.add(Summarize, name="Summary")`
    # and kept `class Summarize`, though the stub has no code yet and the docs (and
    # edits.rename_node) say such a node's class takes the new name.
    assert (await edit(client, "add_node", name="Summarize", inputs={"query": "str"})).is_success
    assert (await edit(client, "add_edge", source="Summarize", target="__end__")).is_success
    before = graph_file.read_text()
    r = await edit(client, "rename_node", old="Summarize", new="Summary")
    assert r.status_code == 200, r.text
    text = graph_file.read_text()
    assert "class Summary(Node):" in text and "class Summarize" not in text
    assert 'raise Hole("Summary needs code")' in text
    assert ".add(Summary)\n" in text and "name=" not in text
    assert '.edge("Summary", END)' in text
    node = extract(text).node("Summary")
    assert (node.cls, node.has_hole, node.hole) == ("Summary", True, "Summary needs code")
    assert r.json()["graph"]["nodes"][-1]["cls"] == "Summary"
    holes = (await client.get("/api/graph")).json()["holes"]
    assert [(h["node"], h["message"]) for h in holes] == [("Summary", "Summary needs code")]
    assert_bodies_untouched(before.split("class Summarize")[0], text)
    # its undo renames the class back: the file is what it was
    back = await edit(client, "rename_node", **r.json()["inverse"]["args"])
    assert back.status_code == 200, back.text
    assert graph_file.read_text() == before


@pytest.mark.parametrize(
    ("wiring", "renamed"),
    [
        (
            'g = Graph(S)\ng.add(Draft)\ng.edge(START, "Draft")\ng.edge("Draft", END)\n',
            'g = Graph(S)\ng.add(Reply)\ng.edge(START, "Reply")\ng.edge("Reply", END)\n',
        ),
        (
            "g = Graph(S)\n(draft,) = g.nodes(Draft)\nSTART >> draft\ndraft >> END\n",
            # the write-back's rename in `>>` style names the entry (nodes(("Reply", Draft)));
            # the class follows, so the pair is the class alone; the handle stays, so the
            # `>>` lines are untouched
            "g = Graph(S)\n(draft,) = g.nodes(Reply)\nSTART >> draft\ndraft >> END\n",
        ),
    ],
    ids=["statement", "operator"],
)
async def test_a_stub_class_follows_a_rename_in_every_style(
    tmp_path: Path, wiring: str, renamed: str
) -> None:
    head = (
        "from tensorsketch import END, START, Context, Graph, Hole, Node, Schema\n\n\n"
        "class S(Schema):\n    query: str = ''\n\n\n"
        "class Draft(Node):\n    class In(Schema):\n        query: str\n\n"
        "    async def run(self, ctx: Context, inp: In) -> None:\n"
        '        raise Hole("Draft needs code")  # as + node wrote it\n\n\n'
    )
    path = tmp_path / "flow.py"
    path.write_text(head + wiring, encoding="utf-8")
    app = create_app(Studio(path=path, token=TOKEN, project=tmp_path))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=BASE, headers={"X-Studio-Token": TOKEN}
    ) as c:
        r = await edit(c, "rename_node", old="Draft", new="Reply")
        assert r.status_code == 200, r.text
    want = head.replace("class Draft", "class Reply").replace('"Draft needs', '"Reply needs')
    assert path.read_text() == want + renamed


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda t: t.replace('Hole("Draft needs code")', 'Hole("write the draft")'), "message"),
        (lambda t: t.replace("raise Hole", "return None  #"), "implemented"),
        (lambda t: t + "\nDRAFTS = [Draft]\n", "named elsewhere"),
        (lambda t: t + "\ndef Reply() -> None: ...\n", "new name taken"),
    ],
    ids=["own-message", "implemented", "named-elsewhere", "new-name-taken"],
)
async def test_a_class_that_is_not_a_bare_stub_keeps_its_name(
    tmp_path: Path, change: Any, why: str
) -> None:
    text = change(
        "from tensorsketch import END, START, Context, Graph, Hole, Node, Schema\n\n\n"
        "class S(Schema):\n    query: str = ''\n\n\n"
        "class Draft(Node):\n"
        "    async def run(self, ctx: Context, inp: S) -> None:\n"
        '        raise Hole("Draft needs code")\n\n\n'
        'app = Graph(S).add(Draft).edge(START, "Draft").edge("Draft", END).compile()\n'
    )
    path = tmp_path / "flow.py"
    path.write_text(text, encoding="utf-8")
    app = create_app(Studio(path=path, token=TOKEN, project=tmp_path))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=BASE, headers={"X-Studio-Token": TOKEN}
    ) as c:
        r = await edit(c, "rename_node", old="Draft", new="Reply")
        assert r.status_code == 200, r.text
    new = path.read_text()
    assert 'add(Draft, name="Reply")' in new and "class Draft(Node)" in new, why
    assert new == text.replace('"Draft"', '"Reply"').replace(
        "add(Draft)", 'add(Draft, name="Reply")'
    )


async def test_ports_on_a_hole(client: httpx.AsyncClient, graph_file: Path) -> None:
    assert (
        await edit(client, "add_node", name="Draft", inputs={"query": "str"})
    ).status_code == 200
    r = await edit(client, "add_port", node="Draft", side="out", name="answer", type="str")
    assert r.status_code == 200, r.text
    assert r.json()["inverse"] == {
        "op": "remove_port",
        "args": {"node": "Draft", "side": "out", "name": "answer"},
    }
    node = extract(graph_file.read_text()).node("Draft")
    assert [(p.name, p.type) for p in node.outputs] == [("answer", "str")]
    r = await edit(client, "remove_port", node="Draft", side="in", name="query")
    assert r.status_code == 200, r.text
    assert r.json()["inverse"] == {
        "op": "add_port",
        "args": {"node": "Draft", "side": "in", "name": "query", "type": "str"},
    }
    assert extract(graph_file.read_text()).node("Draft").inputs == []


async def test_file_keeps_mode_encoding_and_newlines(tmp_path: Path) -> None:
    path = tmp_path / "crlf.py"
    text = EXAMPLE.read_text().replace("[Tech]", "[Tëch]").replace("\n", "\r\n")
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    os.chmod(path, 0o640)
    app = create_app(Studio(path=path, token=TOKEN, project=tmp_path))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=BASE, headers={"X-Studio-Token": TOKEN}
    ) as c:
        r = await edit(c, "remove_edge", source="Fallback", target="__end__")
        assert r.status_code == 200, r.text
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf")
    assert b"\n" not in data.replace(b"\r\n", b"")
    assert "[Tëch]" in data.decode("utf-8-sig")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["crlf.py"]  # no temporary file left


async def test_conflict_writes_nothing(client: httpx.AsyncClient, graph_file: Path) -> None:
    stale = await version(client)
    graph_file.write_text(graph_file.read_text() + "\n# edited in the editor\n", encoding="utf-8")
    on_disk = graph_file.read_bytes()
    r = await client.post(
        "/api/edit", json={"version": stale, "op": "remove_node", "args": {"name": "Tech"}}
    )
    assert r.status_code == 409
    assert r.json()["version"] == sha(graph_file) and "changed" in r.json()["error"]
    assert graph_file.read_bytes() == on_disk


@pytest.mark.parametrize(
    ("op", "args", "message"),
    [
        ("add_edge", {"source": "Billing", "target": "__start__"}, "START is only a source"),
        ("add_edge", {"source": "Biling", "target": "Tech"}, "did you mean 'Billing'"),
        ("add_edge", {"source": "Classify", "target": "Tech"}, "both static edges and a"),
        ("add_edge", {"source": "Tech", "target": "__end__"}, "already has the edge"),
        ("remove_edge", {"source": "Tech", "target": "Billing"}, "has no edge"),
        ("remove_node", {"name": "Nope"}, "has no node named 'Nope'"),
        ("rename_node", {"old": "Tech", "new": "Billing"}, "already exists"),
        ("add_node", {"name": "class"}, "must be an identifier"),
        ("add_node", {"name": "Billing"}, "already has a node named"),
        ("add_node", {"name": "X", "inputs": {"qurey": "str"}}, "did you mean 'query'"),
        ("add_node", {"name": "X", "outputs": {"answer": "int"}}, "Support.answer is `str`"),
        ("add_node", {"name": "X", "inputs": {"query": "list["}}, "not a valid type"),
        ("add_port", {"node": "Tech", "side": "in", "name": "intent", "type": "str"},
         "already has a body"),
        ("remove_port", {"node": "Tech", "side": "out", "name": "nope"}, "has no 'out' port"),
    ],
)  # fmt: skip
async def test_illegal_edits_teach_and_write_nothing(
    client: httpx.AsyncClient, graph_file: Path, op: str, args: dict[str, Any], message: str
) -> None:
    before = graph_file.read_bytes()
    r = await edit(client, op, **args)
    assert r.status_code == 422, r.text
    assert message in r.json()["error"]
    assert graph_file.read_bytes() == before


async def test_renaming_or_deleting_a_node_the_route_returns_is_refused(
    client: httpx.AsyncClient, graph_file: Path
) -> None:
    # Found by QA: both answered 200 and wrote a graph whose `route` still returned the old
    # name — a RoutingError at run time, and a `route → ?` stub on the canvas.
    before = graph_file.read_bytes()
    for op, args, start in (
        ("rename_node", {"old": "Tech", "new": "Techie"}, "cannot rename 'Tech' to 'Techie'"),
        ("remove_node", {"name": "Fallback"}, "cannot remove 'Fallback'"),
    ):
        r = await edit(client, op, **args)
        assert r.status_code == 422, r.text
        assert list(r.json()) == ["error"]
        message = r.json()["error"]
        assert message.startswith(start + ": the routing function `route` of the conditional "
                                  "from 'Classify'"), message  # fmt: skip
        assert "RoutingError" in message and "Change the routing code first" in message
        assert graph_file.read_bytes() == before
    # Once the code returns the new name, the rename goes through and the route follows it.
    reroute(graph_file, '{"billing": "Billing", "tech": "Techie"}.get(state.intent, "Fallback")')
    r = await edit(client, "rename_node", old="Tech", new="Techie")
    assert r.status_code == 200, r.text
    (route,) = [e for e in r.json()["graph"]["edges"] if e["kind"] == "dynamic"]
    assert route["routes"] == ["Billing", "Techie", "Fallback"]
    r = await edit(client, "rename_node", old="Techie", new="Tech")  # its undo: refused now
    assert r.status_code == 422 and "cannot rename 'Techie' to 'Tech'" in r.json()["error"]


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[1, 2]",
        b'{"op": "add_node", "args": {"name": "A"}}',
        b'{"version": "x", "args": {}}',
        b'{"version": "x", "op": "explode", "args": {}}',
        b'{"version": "x", "op": "add_node", "args": []}',
        b'{"version": "x", "op": "add_node", "graph": 3, "args": {}}',
        b"\xff\xfe",
    ],
)
async def test_bad_edit_bodies_are_400(
    client: httpx.AsyncClient, graph_file: Path, body: bytes
) -> None:
    before = graph_file.read_bytes()
    r = await client.post("/api/edit", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]
    assert graph_file.read_bytes() == before


async def test_missing_args_are_400(client: httpx.AsyncClient, graph_file: Path) -> None:
    before = graph_file.read_bytes()
    for op, args in [
        ("add_node", {}),
        ("add_edge", {"source": "Tech"}),
        ("add_port", {"node": "Tech", "side": "sideways", "name": "a", "type": "str"}),
        ("rename_node", {"old": 3, "new": "x"}),
        ("add_node", {"name": "X", "inputs": 5}),
    ]:
        r = await edit(client, op, **args)
        assert r.status_code == 400, (op, r.text)
    assert graph_file.read_bytes() == before


async def test_unknown_graph_in_edit(client: httpx.AsyncClient, graph_file: Path) -> None:
    before = graph_file.read_bytes()
    r = await client.post(
        "/api/edit",
        json={"version": sha(graph_file), "graph": "/etc/passwd", "op": "remove_node",
              "args": {"name": "Tech"}},
    )  # fmt: skip
    assert r.status_code == 404
    assert graph_file.read_bytes() == before


# -- layout ------------------------------------------------------------------------------------


async def test_layout_merges_into_the_sidecar(client: httpx.AsyncClient, graph_file: Path) -> None:
    sidecar = graph_file.parent / "support_router.py.layout.json"
    r = await client.post("/api/layout", json={"positions": {"Classify": {"x": 1, "y": 2}}})
    assert r.status_code == 200
    r = await client.post("/api/layout", json={"positions": {"Tech": {"x": 3.5, "y": -4}}})
    assert r.json()["layout"] == {"Classify": {"x": 1.0, "y": 2.0}, "Tech": {"x": 3.5, "y": -4.0}}
    assert json.loads(sidecar.read_text()) == {
        "version": 1,
        "nodes": {"Classify": {"x": 1.0, "y": 2.0}, "Tech": {"x": 3.5, "y": -4.0}},
    }
    assert (await client.get("/api/graph")).json()["layout"]["Tech"] == {"x": 3.5, "y": -4.0}
    assert stat.S_IMODE(os.stat(sidecar).st_mode) == stat.S_IMODE(os.stat(graph_file).st_mode)
    for bad in [{"positions": {"A": {"x": "1", "y": 2}}}, {"positions": []}, {},
                {"positions": {"A": {"x": True, "y": 2}}}]:  # fmt: skip
        r = await client.post("/api/layout", json=bad)
        assert r.status_code == 400
    r = await client.post(
        "/api/layout", content=b'{"positions": {"A": {"x": NaN, "y": 1}}}',
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    assert r.status_code == 400
    assert sorted(json.loads(sidecar.read_text())["nodes"]) == ["Classify", "Tech"]


# -- hostile requests ---------------------------------------------------------------------------


async def test_token_is_required(client: httpx.AsyncClient, graph_file: Path) -> None:
    before = graph_file.read_bytes()
    for headers in ({"X-Studio-Token": ""}, {"X-Studio-Token": "wrong"}):
        for method, url in [("GET", "/api/graph"), ("GET", "/api/trace"),
                            ("GET", "/api/events"), ("GET", "/api/export"), ("GET", "/"),
                            ("POST", "/api/layout"), ("POST", "/api/edit")]:  # fmt: skip
            r = await client.request(method, url, headers=headers, json={
                "version": sha(graph_file), "op": "remove_node", "args": {"name": "Tech"},
                "positions": {"Tech": {"x": 0, "y": 0}}})  # fmt: skip
            assert r.status_code == 403, (method, url, r.status_code)
    assert (await client.get("/api/graph", params={"token": TOKEN},
                             headers={"X-Studio-Token": ""})).status_code == 200  # fmt: skip
    assert graph_file.read_bytes() == before
    assert not (graph_file.parent / "support_router.py.layout.json").exists()


async def test_foreign_origin_and_host(client: httpx.AsyncClient, graph_file: Path) -> None:
    before = graph_file.read_bytes()
    body = {"version": sha(graph_file), "op": "remove_node", "args": {"name": "Tech"}}
    r = await client.post("/api/edit", json=body, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and "cross-origin" in r.json()["error"]
    r = await client.post("/api/edit", json=body, headers={"Origin": "http://127.0.0.1:9999"})
    assert r.status_code == 403
    r = await client.post("/api/edit", json=body, headers={"Origin": "null"})
    assert r.status_code == 403
    for host in ("evil.example", "evil.example:8765", "127.0.0.1.evil.example", "", "[::2]:80"):
        r = await client.get("/api/graph", headers={"Host": host})
        assert r.status_code == 403, host
        r = await client.post("/api/edit", json=body, headers={"Host": host})
        assert r.status_code == 403, host
    assert graph_file.read_bytes() == before
    # the page's own origin is fine
    r = await client.get("/api/graph", headers={"Origin": BASE})
    assert r.status_code == 200
    r = await client.get("/api/graph", headers={"Host": "localhost:8765"})
    assert r.status_code == 200


async def test_oversized_body_is_413(client: httpx.AsyncClient, graph_file: Path) -> None:
    before = graph_file.read_bytes()
    big = json.dumps({"version": "x", "op": "add_node", "args": {"name": "A" * (1 << 20)}})
    r = await client.post("/api/edit", content=big, headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    r = await client.post("/api/layout", content=big)
    assert r.status_code == 413

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted while reading
        for _ in range(40):
            yield b" " * 65536

    r = await client.post("/api/edit", content=chunks())
    assert r.status_code == 413
    assert graph_file.read_bytes() == before


async def test_unknown_routes_and_methods_are_json_4xx(client: httpx.AsyncClient) -> None:
    r = await client.get("/api/nope")
    assert r.status_code == 404 and "error" in r.json()
    r = await client.put("/api/edit")
    assert r.status_code == 405 and "error" in r.json()
    r = await client.get("/api/export", params={"format": "png"})
    assert r.status_code == 400


# -- trace and export --------------------------------------------------------------------------


def span(name: str, kind: str, sid: str, parent: str | None, **attrs: Any) -> dict[str, Any]:
    return {"name": name, "kind": kind, "trace_id": "t1", "span_id": sid, "parent_id": parent,
            "started_at": 1000.0 + int(sid, 16), "duration_ms": 5.0,
            "status": attrs.pop("status", "ok"), "error": attrs.pop("error", None),
            "attributes": attrs}  # fmt: skip


async def test_trace_sink_and_overlay(client: httpx.AsyncClient) -> None:
    spans = [
        span("Classify", "node", "2", "1", **{"tensorsketch.node": "Classify"}),
        span("chat", "model", "4", "3", **{"gen_ai.usage.input_tokens": 10,
             "gen_ai.usage.output_tokens": 5, "gen_ai.usage.cost_usd": 0.25}),
        span("search", "tool", "5", "3", status="error", error="boom"),
        span("Billing", "node", "3", "1", status="error", error="boom",
             **{"tensorsketch.node": "Billing"}),
    ]  # fmt: skip
    # a non-browser client posts without the token
    r = await client.post("/api/trace", json={"spans": spans}, headers={"X-Studio-Token": ""})
    assert r.status_code == 200 and r.json() == {"accepted": 4}
    runs = (await client.get("/api/trace")).json()["runs"]
    assert runs == [{"run": "t1", "started": 1002.0, "spans": 4, "status": "error",
                     "graph": None, "thread_id": None}]  # fmt: skip
    data = (await client.get("/api/trace", params={"run": "t1"})).json()
    assert data["run"] == "t1"
    billing = data["nodes"]["Billing"]
    assert billing["status"] == "error" and billing["calls"] == 1
    assert billing["tokens"] == 15 and billing["cost"] == 0.25 and billing["latency_ms"] == 5.0
    assert [s["name"] for s in billing["last"]] == ["Billing", "chat", "search"]
    assert billing["last"][1] == {"name": "chat", "kind": "model", "duration_ms": 5.0,
                                  "tokens": 15, "cost": 0.25, "error": None}  # fmt: skip
    assert data["nodes"]["Classify"]["status"] == "ok"
    assert data["nodes"]["Classify"]["cost"] is None
    run = span("run", "run", "1", None, **{"tensorsketch.graph": "app"})
    await client.post("/api/trace", json={"spans": [run]})
    assert (await client.get("/api/trace")).json()["runs"][0]["graph"] == "app"
    assert (await client.get("/api/trace", params={"run": "nope"})).status_code == 404


async def test_trace_sink_refuses_browsers_without_token(client: httpx.AsyncClient) -> None:
    body = {"spans": [span("A", "node", "1", None)]}
    r = await client.post("/api/trace", json=body,
                          headers={"Origin": "http://evil.example", "X-Studio-Token": TOKEN})  # fmt: skip
    assert r.status_code == 403
    r = await client.post("/api/trace", json=body, headers={"Origin": BASE, "X-Studio-Token": ""})
    assert r.status_code == 403
    r = await client.post("/api/trace", json=body, headers={"Origin": BASE})
    assert r.status_code == 200
    r = await client.post("/api/trace", json=body, headers={"Host": "evil.example"})
    assert r.status_code == 403
    for bad in (b"nope", b'{"spans": 3}', b'{"spans": [{"name": "x"}]}', b"[]"):
        r = await client.post("/api/trace", content=bad)
        assert r.status_code == 400, bad


async def test_export(client: httpx.AsyncClient) -> None:
    r = await client.get("/api/export", params={"format": "mermaid"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert r.text.startswith("flowchart TD\n")
    assert "start((START)) " not in r.text and "start --> n0" in r.text
    r = await client.get("/api/export", params={"format": "svg"})
    assert r.headers["content-type"].startswith("image/svg+xml")
    assert r.text.startswith("<svg") and ">Classify</text>" in r.text


async def test_breakpoints_follow_renames_and_come_back_with_an_undone_deletion(
    client: httpx.AsyncClient, graph_file: Path
) -> None:
    reroute(graph_file, '{"billing": "Billing"}.get(state.intent, "Fallback")')
    stops = '.compile(interrupt_before=["Tech"], interrupt_after=["Classify", "Tech"])'
    graph_file.write_text(graph_file.read_text().replace(").compile()", ")" + stops))
    shown = (await client.get("/api/graph")).json()["graph"]
    assert (shown["interrupt_before"], shown["interrupt_after"]) == (["Tech"], ["Classify", "Tech"])
    r = await edit(client, "rename_node", old="Tech", new="Support")
    assert r.status_code == 200, r.text
    assert 'interrupt_before=["Support"], interrupt_after=["Classify", "Support"]' in (
        graph_file.read_text()
    )
    assert r.json()["graph"]["interrupt_after"] == ["Classify", "Support"]
    before = graph_file.read_text()
    r = await edit(client, "remove_node", name="Support")
    assert r.status_code == 200, r.text
    assert 'interrupt_before=[], interrupt_after=["Classify"]' in graph_file.read_text()
    r = await send(client, r.json()["inverse"])  # undo: the breakpoints are back too
    assert r.status_code == 200, r.text
    assert graph_file.read_text() == before
