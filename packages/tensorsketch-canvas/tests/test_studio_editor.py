"""#41 item 11: "open in editor" — ``POST /api/open`` starts ``$VISUAL``/``$EDITOR`` on the
node's class, at its line, with the file and line the server chose (the page sends only a
node's name, which must be a node of the graph)."""

from __future__ import annotations

import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tensorsketch.canvas import extract
from tensorsketch.canvas.studio.app import Studio
from tensorsketch.canvas.studio.editor import editor_command
from tensorsketch.canvas.studio.routes import create_app

TOKEN = "editor-token"
ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "support_router.py"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient, Path]]:
    path = tmp_path / "support_router.py"
    path.write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    app = create_app(Studio(path=path, token=TOKEN, project=tmp_path))
    with TestClient(app, base_url="http://127.0.0.1:8765", headers={"X-Studio-Token": TOKEN}) as c:
        yield c, path


def _fake_editor(tmp_path: Path) -> tuple[Path, Path]:
    """An "editor" that writes the arguments it was started with to a file."""
    out = tmp_path / "editor-args.txt"
    script = tmp_path / "fake-editor"
    script.write_text(
        f"#!{sys.executable}\nimport sys, pathlib\n"
        f"pathlib.Path({str(out)!r}).write_text('\\n'.join(sys.argv[1:]))\n",
        encoding="utf-8",
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, out


def test_the_editor_opens_the_nodes_class_at_its_line(
    client: tuple[TestClient, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c, path = client
    script, out = _fake_editor(tmp_path)
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", str(script))
    r = c.post("/api/open", json={"node": "Tech"})
    assert r.status_code == 200, r.text
    line = next(n.line for n in extract(path.read_text(encoding="utf-8")).nodes if n.name == "Tech")
    assert line and r.json()["line"] == line
    for _ in range(100):
        if out.exists():
            break
        time.sleep(0.05)
    assert out.read_text(encoding="utf-8").splitlines() == [f"+{line}", str(path)]
    assert path.read_text(encoding="utf-8").splitlines()[line - 1].startswith("class Tech")


def test_without_an_editor_or_with_a_bad_request_it_says_what_to_do(
    client: tuple[TestClient, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    c, _ = client
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.delenv("EDITOR", raising=False)
    r = c.post("/api/open", json={"node": "Tech"})
    assert r.status_code == 409 and "set $VISUAL or $EDITOR" in r.json()["error"]
    monkeypatch.setenv("EDITOR", "/nonexistent/editor")
    r = c.post("/api/open", json={"node": "Tech"})
    assert r.status_code == 409 and "could not be started" in r.json()["error"]
    r = c.post("/api/open", json={"node": "Tech; rm -rf /"})
    assert r.status_code == 404 and "has no node" in r.json()["error"]
    for body in ({}, {"node": 3}, {"node": "Tech", "graph": ["app"]}):
        assert c.post("/api/open", json=body).status_code == 400
    assert c.post(
        "/api/open", json={"node": "Tech"}, headers={"X-Studio-Token": "x"}
    ).status_code in (
        401,
        403,
    )


def test_the_editor_command_for_each_kind_of_editor() -> None:
    path = Path("/p/flow.py")
    assert editor_command({"EDITOR": "vim"}, path, 7) == ["vim", "+7", "/p/flow.py"]
    assert editor_command({"EDITOR": "emacsclient -n"}, path, 7) == [
        "emacsclient",
        "-n",
        "+7",
        "/p/flow.py",
    ]
    assert editor_command({"EDITOR": "code --wait"}, path, 7) == [
        "code",
        "--wait",
        "-g",
        "/p/flow.py:7",
    ]
    assert editor_command({"VISUAL": "/usr/bin/cursor", "EDITOR": "vim"}, path, 2) == [
        "/usr/bin/cursor",
        "-g",
        "/p/flow.py:2",
    ]
    assert editor_command({}, path, 1) is None
    assert editor_command({"EDITOR": "  "}, path, 1) is None
