"""Undo is exact: after undoing every gesture of a session the file is byte-identical to where
it started, in each authoring style, driven through ``POST /api/edit`` exactly as the page
drives it (each answer's ``inverse`` and ``exact`` kept, sent back newest first)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tensorsketch.canvas.studio.app import Studio
from tensorsketch.canvas.studio.routes import create_app

TOKEN = "undo-token"
#: Sessions per style (CI can raise it: TS_STUDIO_UNDO_EXAMPLES).
EXAMPLES = int(os.environ.get("TS_STUDIO_UNDO_EXAMPLES", "12"))

HEAD = '''"""A small pipeline, in one authoring style."""

from tensorsketch import END, START, Context, Graph, Node, Schema


class S(Schema):
    query: str = ""
    answer: str = ""  # the reply


def pick(state: S) -> str:
    return "done" if state.answer else "again"


def enough(state: S) -> bool:
    return bool(state.answer)


def fan(state: S) -> list[str]:
    return ["Check"]


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

STYLES = {
    "fluent": HEAD
    + """app = (
    Graph(S)
    .add(Parse)
    .add(Answer)
    .add(Check)
    .edge(START, "Parse")
    .edge("Parse", "Answer")  # the main path
    .edge("Answer", "Check")
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
g.edge("Answer", "Check")
g.edge("Check", END)
app = g.compile()
""",
    "rshift": HEAD
    + """g = Graph(S)
parse, answer, check = g.nodes(Parse, Answer, Check)
START >> parse >> answer  # the main path
answer >> check >> END
app = g.compile()
""",
}

NEW_NAMES = ["Draft", "Review", "Extra", "Polish"]
PORT_TYPES = ["str", "int | None", "list[str]"]


@pytest.fixture(params=sorted(STYLES))
def session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, TestClient, Path]]:
    folder = tmp_path_factory.mktemp(request.param)
    path = folder / "flow.py"
    path.write_text(STYLES[request.param], encoding="utf-8")
    app = create_app(Studio(path=path, token=TOKEN, project=folder))
    with TestClient(app, base_url="http://127.0.0.1:8765", headers={"X-Studio-Token": TOKEN}) as c:
        yield request.param, c, path


def _graph(client: TestClient) -> dict[str, Any]:
    r = client.get("/api/graph")
    assert r.status_code == 200, r.text
    return dict(r.json())


def _send(client: TestClient, op: dict[str, Any]) -> Any:
    """One edit as the page sends it: the loaded version, the op, its args, its ``exact``."""
    body = {"version": _graph(client)["version"], **op}
    return client.post("/api/edit", json=body)


def _gesture(data: st.DataObject, graph: dict[str, Any]) -> dict[str, Any]:
    """A gesture the page offers, on the graph as it is now (some are refused: that is fine)."""
    nodes = [n["name"] for n in graph["nodes"]]
    holes = [n for n in graph["nodes"] if n.get("has_hole")]
    # with every node deleted, only + node is left to do
    kinds = ["add_node", "add_edge", "remove_edge", "rename_node", "remove_node"] if nodes else []
    if nodes:  # the wiring kinds drawn from a node's panel (#41 item 9)
        kinds += ["add_route", "add_loop", "add_fanout", "relabel_route", "splice_node"]
    kinds.append("place_node")
    kinds.append("add_node")
    if holes:
        kinds += ["add_port", "remove_port"]
    kind = data.draw(st.sampled_from(kinds), label="gesture")
    if kind == "add_node":
        ports = data.draw(st.dictionaries(st.sampled_from(["query", "answer"]),
                                          st.sampled_from(["str"]), max_size=1))  # fmt: skip
        return {"op": "add_node", "args": {"name": data.draw(st.sampled_from(NEW_NAMES)),
                                           "inputs": ports}}  # fmt: skip
    if kind == "add_edge":
        source = data.draw(st.sampled_from(["__start__", *nodes]))
        target = data.draw(st.sampled_from([*nodes, "__end__"]))
        return {"op": "add_edge", "args": {"source": source, "target": target}}
    if kind == "add_route":
        source = data.draw(st.sampled_from(["__start__", *nodes]))
        return {"op": "add_route", "args": {"source": source,
                "target": data.draw(st.sampled_from([*nodes, "__end__"])),
                "label": data.draw(st.sampled_from(["done", "again", "other"])),
                "path": "pick"}}  # fmt: skip
    if kind == "place_node":
        cls = data.draw(st.sampled_from(["Parse", "Answer", "Check"]))
        return {"op": "place_node", "args": {"cls": cls,
                "name": data.draw(st.sampled_from([cls, f"{cls}2", "Extra"]))}}  # fmt: skip
    if kind == "splice_node":
        plain = [e for e in graph["edges"] if e["kind"] == "sequential"]
        if not plain:
            return {"op": "add_edge", "args": {"source": "__start__", "target": nodes[0]}}
        edge = data.draw(st.sampled_from(plain))
        return {"op": "splice_node", "args": {"node": data.draw(st.sampled_from(nodes)),
                "source": edge["source"], "target": edge["target"]}}  # fmt: skip
    if kind == "add_loop":
        return {"op": "add_loop", "args": {"node": data.draw(st.sampled_from(nodes)),
                "until": "enough", "exit": data.draw(st.sampled_from([*nodes, "__end__"]))}}  # fmt: skip
    if kind == "add_fanout":
        source = data.draw(st.sampled_from(["__start__", *nodes]))
        return {"op": "add_fanout", "args": {"source": source, "path": "fan"}}
    if kind == "relabel_route":
        routes = [e for e in graph["edges"] if e["kind"] == "conditional" and e["branch"] != "loop"]
        if not routes:
            return {"op": "add_route", "args": {"source": nodes[0], "target": "__end__",
                    "label": "done", "path": "pick"}}  # fmt: skip
        edge = data.draw(st.sampled_from(routes))
        return {"op": "relabel_route", "args": {"source": edge["source"], "label": edge["label"],
                "new": data.draw(st.sampled_from(["done", "again", "later"]))}}  # fmt: skip
    if kind == "remove_edge":
        plain = [e for e in graph["edges"] if e["kind"] != "custom" and e["kind"] != "join"]
        if not plain:
            return {"op": "add_edge", "args": {"source": "__start__", "target": nodes[0]}}
        edge = data.draw(st.sampled_from(plain))
        args = {"source": edge["source"], "target": edge["target"]}
        if edge["kind"] == "conditional":
            args["label"] = edge["label"]
        return {"op": "remove_edge", "args": args}
    if kind == "rename_node":
        old = data.draw(st.sampled_from(nodes))
        return {
            "op": "rename_node",
            "args": {"old": old, "new": data.draw(st.sampled_from(NEW_NAMES))},
        }
    if kind == "remove_node":
        return {"op": "remove_node", "args": {"name": data.draw(st.sampled_from(nodes))}}
    hole = data.draw(st.sampled_from(holes))
    side = data.draw(st.sampled_from(["in", "out"]))
    if kind == "add_port":
        return {"op": "add_port", "args": {"node": hole["name"], "side": side,
                "name": data.draw(st.sampled_from(["query", "answer"])),
                "type": data.draw(st.sampled_from(PORT_TYPES))}}  # fmt: skip
    ports = hole["inputs"] if side == "in" else hole["outputs"]
    if not ports:
        return {"op": "remove_node", "args": {"name": hole["name"]}}
    port = data.draw(st.sampled_from(ports))
    return {"op": "remove_port", "args": {"node": hole["name"], "side": side, "name": port["name"]}}


def _step(answer: dict[str, Any], fallback: dict[str, Any] | None) -> dict[str, Any]:
    """What the page sends to take an accepted edit back (store.ts ``recordEdit``/``undone``):
    the answer's inverse — or, when an ``exact`` answer names none, the step it already had —
    with the answer's ``exact``."""
    inverse = answer["inverse"] or fallback
    assert inverse is not None, "every gesture can be undone"
    op = {"op": inverse["op"], "args": inverse["args"]}
    if answer.get("exact") is not None:
        op["exact"] = answer["exact"]
    return op


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_undoing_every_gesture_gives_the_file_back_byte_for_byte(
    session: tuple[str, TestClient, Path], data: st.DataObject
) -> None:
    style, client, path = session
    path.write_text(STYLES[style], encoding="utf-8")  # each example starts from the style's file
    start = path.read_bytes()
    history: list[tuple[dict[str, Any], dict[str, Any], bytes]] = []
    for _ in range(data.draw(st.integers(1, 7), label="gestures")):
        before = path.read_bytes()
        op = _gesture(data, _graph(client)["graph"])
        r = _send(client, op)
        assert r.status_code < 500, r.text
        if r.status_code != 200:
            assert path.read_bytes() == before, "a refused edit wrote nothing"
            continue
        history.append((_step(r.json(), None), op, before))
    # undo newest first; after each step the file is exactly what it was before that gesture
    redo: list[tuple[dict[str, Any], bytes]] = []
    for undo, done, before in reversed(history):
        after = path.read_bytes()
        r = _send(client, undo)
        assert r.status_code == 200, (style, undo["op"], r.text)
        assert path.read_bytes() == before, f"{style}: undoing {undo['op']} is not exact"
        redo.append((_step(r.json(), done), after))
    assert path.read_bytes() == start
    # and redoing everything gives back the session's last text, step by step
    for again, after in reversed(redo):
        r = _send(client, again)
        assert r.status_code == 200, (style, again["op"], r.text)
        assert path.read_bytes() == after, f"{style}: redoing {again['op']} is not exact"


def test_a_forged_exact_is_refused(session: tuple[str, TestClient, Path]) -> None:
    _, client, path = session
    before = path.read_bytes()
    sha = hashlib.sha256(before).hexdigest()
    forged = {"after": sha, "hunks": [[0, 1, ["import os; os.system('id')\n"]]], "seal": "0" * 64}
    r = _send(client, {"op": "add_edge", "args": {"source": "Parse", "target": "__end__"},
                       "exact": forged})  # fmt: skip
    assert r.status_code == 400 and "exact" in r.json()["error"]
    assert path.read_bytes() == before
