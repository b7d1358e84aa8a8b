"""#41 item 9: every kind of wiring drawn from the canvas — a route (a new routing call, or a
key added to one), a route's label edited, a loop, a fan-out through a function that returns
``Send``s — written in the file's own style through ``POST /api/edit``, each undone byte for
byte, and every function named by the page checked against the file (the page names code, it
never sends any)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tensorsketch.canvas import END, START, extract
from tensorsketch.canvas.ir import LOOP_EXIT, LOOP_REPEAT, EdgeIR
from tensorsketch.canvas.studio.app import Studio
from tensorsketch.canvas.studio.routes import create_app

TOKEN = "wiring-token"

HEAD = '''"""Three steps."""

from tensorsketch import END, START, Context, Graph, Node, Schema, Send


class S(Schema):
    query: str = ""
    answer: str = ""


def pick(state: S) -> str:
    return "done" if state.answer else "again"


def enough(state: S) -> bool:
    return bool(state.answer)


def fan(state: S) -> list[Send]:
    return [Send("Check", {"answer": part}) for part in state.query.split()]


class Parse(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        query: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(query=inp.query.strip())


class Answer(Node):
    class In(Schema):
        query: str

    class Out(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> Out:
        return self.Out(answer=inp.query)


class Check(Node):
    class In(Schema):
        answer: str

    async def run(self, ctx: Context, inp: In) -> None:
        return None


'''

#: Each style with Answer's successors left open, for the new wiring to fill.
STYLES = {
    "fluent": HEAD
    + """app = (
    Graph(S)
    .add(Parse)
    .add(Answer)
    .add(Check)
    .edge(START, "Parse")
    .edge("Parse", "Answer")  # the main path
    .edge("Check", END)
).compile()
""",
    "statement": HEAD
    + """g = Graph(S)
g.add(Parse)
g.add(Answer)
g.add(Check)
g.edge(START, "Parse")
g.edge("Parse", "Answer")  # the main path
g.edge("Check", END)
app = g.compile()
""",
    "rshift": HEAD
    + """g = Graph(S)
parse, answer, check = g.nodes(Parse, Answer, Check)
START >> parse >> answer  # the main path
check >> END
app = g.compile()
""",
}


@pytest.fixture(params=sorted(STYLES))
def client(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, TestClient, Path]]:
    path = tmp_path / "flow.py"
    path.write_text(STYLES[request.param], encoding="utf-8")
    app = create_app(Studio(path=path, token=TOKEN, project=tmp_path))
    with TestClient(app, base_url="http://127.0.0.1:8765", headers={"X-Studio-Token": TOKEN}) as c:
        yield request.param, c, path


def _send(c: TestClient, op: str, **args: Any) -> Any:
    version = c.get("/api/graph").json()["version"]
    return c.post("/api/edit", json={"version": version, "op": op, "args": args})


def _undo(c: TestClient, answer: dict[str, Any]) -> Any:
    version = c.get("/api/graph").json()["version"]
    inverse = answer["inverse"]
    body = {"version": version, "op": inverse["op"], "args": inverse["args"]}
    body["exact"] = answer["exact"]
    return c.post("/api/edit", json=body)


def _new_lines(before: str, after: str) -> list[str]:
    old = set(before.splitlines())
    return [line for line in after.splitlines() if line not in old]


#: What each style writes for each gesture (the lines the file gains).
WRITES = {
    "route": {
        "fluent": ['    .conditional("Answer", pick, {"done": "Check"})'],
        "statement": ['g.conditional("Answer", pick, {"done": "Check"})'],
        "rshift": ["answer >> Router(pick, done=check)"],
    },
    "loop": {
        "fluent": ['    .loop("Answer", until=enough, exit="Check")'],
        "statement": ['g.loop("Answer", until=enough, exit="Check")'],
        "rshift": ['g.loop("Answer", until=enough, exit="Check")'],
    },
    "fanout": {
        "fluent": ['    .conditional("Answer", fan)'],
        "statement": ['g.conditional("Answer", fan)'],
        "rshift": ['g.conditional("Answer", fan)'],
    },
}


@pytest.mark.parametrize("gesture", sorted(WRITES))
def test_each_kind_of_wiring_is_written_in_the_files_style_and_undone_exactly(
    client: tuple[str, TestClient, Path], gesture: str
) -> None:
    style, c, path = client
    before = path.read_text(encoding="utf-8")
    if gesture == "route":
        r = _send(c, "add_route", source="Answer", target="Check", label="done", path="pick")
        want = [EdgeIR("Answer", "Check", "conditional", "pick", "done", "conditional")]
    elif gesture == "loop":
        r = _send(c, "add_loop", node="Answer", until="enough", exit="Check")
        want = [
            EdgeIR("Answer", "Answer", "conditional", "enough", LOOP_REPEAT, "loop"),
            EdgeIR("Answer", "Check", "conditional", "enough", LOOP_EXIT, "loop"),
        ]
    else:
        r = _send(c, "add_fanout", source="Answer", path="fan")
        want = [EdgeIR("Answer", None, "dynamic", "fan", None, "conditional")]
    assert r.status_code == 200, r.text
    after = path.read_text(encoding="utf-8")
    added = [line for line in _new_lines(before, after) if not line.startswith("from ")]
    assert added == WRITES[gesture][style]
    ir = extract(after)
    assert [e for e in ir.edges if e.source == "Answer"] == want
    if gesture == "fanout":  # the canvas draws where the function's Sends go
        assert next(e for e in ir.edges if e.source == "Answer").routes == ["Check"]
    back = _undo(c, r.json())
    assert back.status_code == 200, back.text
    assert path.read_text(encoding="utf-8") == before


def test_a_second_route_is_a_key_of_the_same_call_and_labels_edit_in_place(
    client: tuple[str, TestClient, Path],
) -> None:
    style, c, path = client
    start = path.read_text(encoding="utf-8")
    first = _send(c, "add_route", source="Answer", target="Check", label="done", path="pick")
    assert first.status_code == 200, first.text
    one = path.read_text(encoding="utf-8")
    # the node routes already: the page sends no function, the mapping gains a key
    second = _send(c, "add_route", source="Answer", target="Parse", label="again")
    assert second.status_code == 200, second.text
    two = path.read_text(encoding="utf-8")
    routes = [e for e in extract(two).edges if e.source == "Answer"]
    assert [(e.label, e.target, e.path) for e in routes] == [
        ("done", "Check", "pick"),
        ("again", "Parse", "pick"),
    ]
    assert len(_new_lines(one, two)) == 1, "one routing call, rewritten in place"
    relabel = _send(c, "relabel_route", source="Answer", label="again", new="retry")
    assert relabel.status_code == 200, relabel.text
    three = path.read_text(encoding="utf-8")
    assert [e.label for e in extract(three).edges if e.source == "Answer"] == ["done", "retry"]
    expected = {
        "rshift": "retry=parse",
        "fluent": '"retry": "Parse"',
        "statement": '"retry": "Parse"',
    }
    assert expected[style] in three
    for answer, text in ((relabel, two), (second, one), (first, start)):
        back = _undo(c, answer.json())
        assert back.status_code == 200, back.text
        assert path.read_text(encoding="utf-8") == text


@pytest.mark.parametrize(
    "path",
    [
        "lambda s: 'done'",
        "__import__('os').system('id') or pick",
        "pick if True else fan",
        "pick\nimport os",
        "os.system",
        "Parse",  # a class, not a function
        "",
    ],
)
def test_only_a_function_the_file_defines_can_be_named(tmp_path: Path, path: str) -> None:
    file = tmp_path / "flow.py"
    file.write_text(STYLES["statement"], encoding="utf-8")
    app = create_app(Studio(path=file, token=TOKEN, project=tmp_path))
    with TestClient(app, base_url="http://127.0.0.1:8765", headers={"X-Studio-Token": TOKEN}) as c:
        for op, args in (
            ("add_route", {"source": "Answer", "target": "Check", "label": "x", "path": path}),
            ("add_loop", {"node": "Answer", "until": path}),
            ("add_fanout", {"source": "Answer", "path": path}),
        ):
            r = _send(c, op, **args)
            assert r.status_code == 422, (op, r.text)
            assert "not a function defined at the top level" in r.json()["error"]
            assert "pick, enough, fan" in r.json()["error"]
    assert file.read_text(encoding="utf-8") == STYLES["statement"]


def test_refusals_say_what_to_do(client: tuple[str, TestClient, Path]) -> None:
    _, c, path = client
    before = path.read_text(encoding="utf-8")
    # Parse has a plain edge: a node's successors come from one place
    r = _send(c, "add_loop", node="Parse", until="enough")
    assert (
        r.status_code == 422 and "already has a plain edge 'Parse' → 'Answer'" in r.json()["error"]
    )
    r = _send(c, "add_route", source="Answer", target="Check", label="done", path="pik")
    assert r.status_code == 422 and "did you mean 'pick'" in r.json()["error"]
    r = _send(c, "add_route", source="Answer", target="Check", label="done")
    assert r.status_code == 422 and "name the routing function" in r.json()["error"], r.text
    r = _send(c, "add_route", source="Answer", target="Nowhere", label="done", path="pick")
    assert r.status_code == 422 and "'Nowhere' is not a node" in r.json()["error"]
    r = _send(c, "add_route", source="Answer", target="Check", label=7, path="pick")
    assert r.status_code == 400
    r = _send(c, "relabel_route", source="Answer", label="done", new="x")
    assert r.status_code == 422 and "no route labelled 'done'" in r.json()["error"]
    assert path.read_text(encoding="utf-8") == before
    ok = _send(c, "add_route", source="Answer", target="Check", label="done", path="pick")
    assert ok.status_code == 200
    r = _send(c, "add_route", source="Answer", target=END, label="done")
    assert r.status_code == 422 and "already maps 'done'" in r.json()["error"]
    r = _send(c, "add_route", source="Answer", target=END, label="stop", path="enough")
    assert r.status_code == 422 and "not a second routing function" in r.json()["error"]
    r = _send(c, "add_edge", source=START, target="Answer")
    assert r.status_code == 200, "START's plain edges are not Answer's"


def test_the_graph_lists_the_functions_a_route_can_name(
    client: tuple[str, TestClient, Path],
) -> None:
    _, c, _ = client
    assert c.get("/api/graph").json()["functions"] == ["pick", "enough", "fan"]


#: Where splicing Review onto Parse → Answer leaves the file's wiring, per style.
SPLICED = {
    "fluent": ['    .edge("Parse", "Review")  # the main path', '    .edge("Review", "Answer")'],
    "statement": ['g.edge("Parse", "Review")  # the main path', 'g.edge("Review", "Answer")'],
    "rshift": ["START >> parse >> review >> answer  # the main path"],
}


def test_a_node_spliced_into_an_edge_is_written_in_place_and_undone_exactly(
    client: tuple[str, TestClient, Path],
) -> None:
    style, c, path = client
    start = path.read_text(encoding="utf-8")
    made = _send(c, "add_node", name="Review", inputs={"query": "str"}, outputs={"query": "str"})
    assert made.status_code == 200, made.text
    created = path.read_text(encoding="utf-8")
    r = _send(c, "splice_node", node="Review", source="Parse", target="Answer")
    assert r.status_code == 200, r.text
    spliced = path.read_text(encoding="utf-8")
    added = [line for line in _new_lines(created, spliced) if not line.startswith("from ")]
    assert added == SPLICED[style]
    edges = [(e.source, e.target) for e in extract(spliced).edges]
    assert edges[:3] == [(START, "Parse"), ("Parse", "Review"), ("Review", "Answer")]
    # refusals: not on a wire that is not there, not twice
    again = _send(c, "splice_node", node="Review", source="Parse", target="Answer")
    assert again.status_code == 422 and "wired already" in again.json()["error"]
    nowhere = _send(c, "splice_node", node="Review", source="Check", target="Parse")
    assert nowhere.status_code == 422
    assert "no plain edge 'Check' → 'Parse'" in nowhere.json()["error"]
    for answer, text in ((r, created), (made, start)):
        back = _undo(c, answer.json())
        assert back.status_code == 200, back.text
        assert path.read_text(encoding="utf-8") == text


#: Where placing a second Check (from the palette) writes it, per style.
PLACED = {
    "fluent": ['    .add(Check, name="Check2")'],
    "statement": ['g.add(Check, name="Check2")'],
    "rshift": ['(check2,) = g.nodes(("Check2", Check))'],  # a named entry, one statement
}


def test_a_class_of_the_file_is_placed_from_the_palette(
    client: tuple[str, TestClient, Path],
) -> None:
    style, c, path = client
    start = path.read_text(encoding="utf-8")
    classes = c.get("/api/graph").json()["classes"]
    assert [k["name"] for k in classes] == ["Parse", "Answer", "Check"]
    assert classes[2]["inputs"] == [{"name": "answer", "type": "str"}]
    r = _send(c, "place_node", cls="Check", name="Check2")
    assert r.status_code == 200, r.text
    after = path.read_text(encoding="utf-8")
    assert _new_lines(start, after) == PLACED[style]
    placed = next(n for n in extract(after).nodes if n.name == "Check2")
    assert (placed.cls, [p.name for p in placed.inputs]) == ("Check", ["answer"])
    assert "class Check2" not in after, "a class with code is placed as it is, no stub"
    bad = _send(c, "place_node", cls="Chek")
    assert bad.status_code == 422 and "did you mean 'Check'" in bad.json()["error"]
    taken = _send(c, "place_node", cls="Check", name="Check2")
    assert taken.status_code == 422 and "already has a node named 'Check2'" in taken.json()["error"]
    back = _undo(c, r.json())
    assert back.status_code == 200, back.text
    assert path.read_text(encoding="utf-8") == start
