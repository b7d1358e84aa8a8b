# ruff: noqa: ASYNC240  -- the tests read small temporary files inline
"""Hostile requests the Studio must refuse with a 4xx and without writing anything: deeply
nested JSON on every JSON endpoint, code smuggled in as a port type, a foreign scheme in
``Origin``, and a layout sidecar stuffed with names that are not the graph's nodes."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tensorsketch.canvas import edits, extract, reconstruct
from tensorsketch.canvas.exceptions import WriteBackError
from tensorsketch.canvas.ir import Port
from tensorsketch.canvas.studio.app import Studio
from tensorsketch.canvas.studio.debug import Debugger
from tensorsketch.canvas.studio.routes import create_app
from tensorsketch.canvas.studio.safety import MAX_JSON_DEPTH
from tensorsketch.runtime.backends.sqlite import SqliteBackend

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "support_router.py"
TOKEN = "hostile-token-1"
BASE = "http://127.0.0.1:8765"


@pytest.fixture
def graph_file(tmp_path: Path) -> Path:
    target = tmp_path / "support_router.py"
    shutil.copyfile(EXAMPLE, target)
    return target


@pytest.fixture
async def client(graph_file: Path, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    backend = SqliteBackend(tmp_path / "runs.db")
    studio = Studio(path=graph_file, token=TOKEN, project=graph_file.parent)
    app = create_app(studio, debugger=Debugger(backend, path=graph_file))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
        base_url=BASE,
        headers={"X-Studio-Token": TOKEN},
    ) as c:
        yield c
    await backend.aclose()


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def nested(depth: int, *, arrays: bool) -> bytes:
    if arrays:
        return b"[" * depth + b"1" + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


# -- 6: deeply nested JSON ------------------------------------------------------------------------

JSON_ENDPOINTS = [
    ("/api/edit", True),
    ("/api/layout", True),
    ("/api/open", True),
    ("/api/trace", False),  # the span sink takes posts without the token
    ("/api/debug/threads/t-1/fork", True),
    ("/api/debug/threads/t-1/update", True),
    ("/api/debug/threads/t-1/step", True),
    ("/api/debug/threads/t-1/run", True),
    ("/api/debug/threads/t-1/resume", True),
    ("/api/debug/threads/t-1/replay-node", True),
    ("/api/holes/fill", True),
    ("/api/optimize", True),
    ("/api/optimize/write", True),
]


@pytest.mark.parametrize(("url", "token"), JSON_ENDPOINTS)
@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 5_000, 100_000])
@pytest.mark.parametrize("arrays", [True, False])
async def test_deeply_nested_json_is_a_400_on_every_json_endpoint(
    client: httpx.AsyncClient,
    graph_file: Path,
    url: str,
    token: bool,
    depth: int,
    arrays: bool,
) -> None:
    before = graph_file.read_bytes()
    inner = nested(depth, arrays=arrays)
    for body in (inner, b'{"version": "x", "op": "add_node", "args": ' + inner + b"}"):
        headers = {"Content-Type": "application/json"}
        if not token:
            headers["X-Studio-Token"] = ""
        r = await client.post(url, content=body, headers=headers)
        assert r.status_code == 400, (url, depth, r.status_code, r.text[:200])
        assert "nested" in r.json()["error"]
    assert graph_file.read_bytes() == before


async def test_json_at_the_depth_limit_is_still_read(client: httpx.AsyncClient) -> None:
    # {"positions": {"Tech": {"x": ...}}} nests 3 deep; a value nested to the limit is a 400
    # about that value, not about nesting
    value = nested(MAX_JSON_DEPTH - 3, arrays=True)
    body = b'{"positions": {"Tech": {"x": ' + value + b', "y": 1}}}'
    r = await client.post("/api/layout", content=body)
    assert r.status_code == 400 and "nested" not in r.json()["error"]


# -- 7: a port type is an annotation, never code ---------------------------------------------------

INJECTIONS = [
    "__import__('os').system('touch pwned') or str",
    "__import__('os')",
    "str if __import__('os').system('id') else int",
    "(lambda: str)()",
    "lambda: str",
    "getattr(__builtins__, 'eval')('1')",
    "open('/etc/passwd').read().__class__",
    "list[__import__('os').system('id')]",
    "dict[str, (x := 1)]",
    "(x := str)",
    "[c for c in ().__class__.__bases__]",
    "{c for c in 'ab'}",
    "{k: v for k, v in {}.items()}",
    "(c for c in 'ab')",
    'f\'{__import__("os").system("id")}\'',
    "str.__class__.__subclasses__()",
    "str.__mro__",
    "__builtins__",
    '\'__import__("os").system("id")\'',
    "list['__import__(\"os\")']",
    "str + int",
    "not str",
    "-str",
    "str[0:1]",
    "str and int",
    "str < int",
    "*str",
    "await str",
    "str if True else int",
    "x.y().z",
    "str; import os",
    "str\nimport os",
    "yield str",
]


@pytest.mark.parametrize("type_text", INJECTIONS)
async def test_a_port_type_that_is_not_an_annotation_is_a_422(
    client: httpx.AsyncClient, graph_file: Path, type_text: str
) -> None:
    before = graph_file.read_bytes()
    body = {
        "version": sha(graph_file),
        "op": "add_node",
        "args": {"name": "Audit", "inputs": {"query": type_text}},
    }
    r = await client.post("/api/edit", json=body)
    assert r.status_code == 422, (type_text, r.text)
    assert "annotation" in r.json()["error"]
    assert graph_file.read_bytes() == before
    # and on an existing hole, through add_port
    body = {"version": sha(graph_file), "op": "add_node", "args": {"name": "Audit"}}
    assert (await client.post("/api/edit", json=body)).status_code == 200
    created = graph_file.read_bytes()
    body = {
        "version": sha(graph_file),
        "op": "add_port",
        "args": {"node": "Audit", "side": "out", "name": "reply", "type": type_text},
    }
    r = await client.post("/api/edit", json=body)
    assert r.status_code == 422, (type_text, r.text)
    assert graph_file.read_bytes() == created
    assert not (graph_file.parent / "pwned").exists()


ANNOTATIONS = [
    "str",
    "int | None",
    "list[str]",
    "dict[str, list[int]]",
    "typing.Optional[str]",
    "Literal['billing', 'tech']",
    "Literal[1, 2, True]",
    "tuple[int, ...]",
    "Callable[[int, str], bool]",
    "Annotated[int, 3]",
    "'Forward'",
    "list['Forward']",
    "None",
]


@pytest.mark.parametrize("type_text", ANNOTATIONS)
def test_annotation_shaped_port_types_are_accepted(type_text: str) -> None:
    ir = extract(EXAMPLE.read_text(encoding="utf-8"))
    new = edits.add_node(ir, "Audit", [Port("query", type_text)], [])
    assert new.node("Audit").inputs == [Port("query", type_text)]


def test_the_write_back_refuses_code_as_a_port_type_too() -> None:
    """The library call (not only the Studio) refuses it: the write-back is the last gate."""
    text = EXAMPLE.read_text(encoding="utf-8")
    ir = extract(text)
    with pytest.raises(WriteBackError, match="annotation"):
        new = edits.add_node(ir, "Audit", [Port("query", "__import__('os') or str")], [])
        reconstruct(text, new)


# -- 8: Origin scheme, layout sidecar ---------------------------------------------------------------


async def test_origin_must_be_the_servers_own_scheme(
    client: httpx.AsyncClient, graph_file: Path
) -> None:
    before = graph_file.read_bytes()
    body = {"version": sha(graph_file), "op": "remove_node", "args": {"name": "Tech"}}
    for origin in (
        "https://127.0.0.1:8765",
        "HTTPS://127.0.0.1:8765",
        "ws://127.0.0.1:8765",
        "file://",
        "http://127.0.0.1:8765/",
        "http://127.0.0.1:8765 ",
        "http://127.0.0.1",
    ):
        r = await client.post("/api/edit", json=body, headers={"Origin": origin})
        assert r.status_code == 403, origin
        r = await client.post("/api/open", json={"node": "Tech"}, headers={"Origin": origin})
        assert r.status_code == 403, origin
        r = await client.post(
            "/api/trace", json={"spans": []}, headers={"Origin": origin, "X-Studio-Token": TOKEN}
        )
        assert r.status_code == 403, origin
    assert graph_file.read_bytes() == before
    r = await client.get("/api/graph", headers={"Origin": "http://127.0.0.1:8765"})
    assert r.status_code == 200


async def test_the_layout_sidecar_keeps_only_the_graphs_nodes(
    client: httpx.AsyncClient, graph_file: Path
) -> None:
    sidecar = graph_file.parent / "support_router.py.layout.json"
    junk = {f"junk{i}": {"x": i, "y": i} for i in range(20_000)}
    junk["Tech"] = {"x": 5, "y": 6}
    r = await client.post("/api/layout", json={"positions": junk})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["layout"] == {"Tech": {"x": 5.0, "y": 6.0}}
    assert data["ignored"] == 20_000
    assert set(json.loads(sidecar.read_text())["nodes"]) == {"Tech"}
    assert sidecar.stat().st_size < 4096
    # an entry left by hand for a node that no longer exists is dropped on the next save
    stored = json.loads(sidecar.read_text())
    stored["nodes"]["Gone"] = {"x": 1.0, "y": 1.0}
    sidecar.write_text(json.dumps(stored))
    r = await client.post("/api/layout", json={"positions": {"Billing": {"x": 1, "y": 2}}})
    assert set(r.json()["layout"]) == {"Tech", "Billing"}
    assert set(json.loads(sidecar.read_text())["nodes"]) == {"Tech", "Billing"}


async def test_layout_coordinates_are_capped(client: httpx.AsyncClient, graph_file: Path) -> None:
    r = await client.post("/api/layout", json={"positions": {"Tech": {"x": 1e300, "y": 0}}})
    assert r.status_code == 400 and "Tech" in r.json()["error"]
    assert not (graph_file.parent / "support_router.py.layout.json").exists()


async def test_layout_while_the_file_does_not_parse_is_refused(
    client: httpx.AsyncClient, graph_file: Path
) -> None:
    graph_file.write_text("def broken(:\n", encoding="utf-8")
    r = await client.post("/api/layout", json={"positions": {"Tech": {"x": 1, "y": 2}}})
    assert r.status_code in (409, 422) and "parse" in r.json()["error"]
    assert not (graph_file.parent / "support_router.py.layout.json").exists()
