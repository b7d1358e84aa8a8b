"""find_holes: every node still stubbed with ``raise Hole(...)``, across files and folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorsketch.canvas import CanvasWarning, HoleRef, find_holes
from tensorsketch.canvas.holes import search_holes

NODE = """
class {name}(Node):
    async def run(self, ctx, inp):
        raise Hole("{spec}")
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_walks_directories_and_sorts_by_file_and_line(tmp_path: Path) -> None:
    first = write(
        tmp_path / "a.py",
        NODE.format(name="Alpha", spec="do a") + NODE.format(name="Beta", spec="do b"),
    )
    second = write(
        tmp_path / "pkg" / "b.py",
        "class Done(Node):\n    async def run(self, c, i):\n        return 1\n"
        + NODE.format(name="Gamma", spec="do g"),
    )
    write(tmp_path / ".hidden" / "c.py", NODE.format(name="Hidden", spec="x"))
    write(tmp_path / "__pycache__" / "d.py", NODE.format(name="Cached", spec="x"))
    write(tmp_path / "notes.txt", NODE.format(name="Text", spec="x"))
    holes = find_holes(tmp_path)
    assert holes == [
        HoleRef(str(first), "Alpha", "do a", 2),
        HoleRef(str(first), "Beta", "do b", 6),
        HoleRef(str(second), "Gamma", "do g", 5),
    ]
    assert find_holes(first, second) == holes
    assert holes[0].to_dict() == {
        "file": str(first),
        "node": "Alpha",
        "spec": "do a",
        "line": 2,
        "status": "needs code",
        "draft": None,
    }


def test_broken_files_are_skipped_with_a_warning_naming_them(tmp_path: Path) -> None:
    good = write(tmp_path / "good.py", NODE.format(name="Alpha", spec="a"))
    broken = write(tmp_path / "broken.py", "def nope(:\n")
    binary = tmp_path / "binary.py"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.warns(CanvasWarning) as caught:
        holes = find_holes(tmp_path, tmp_path / "missing")
    messages = " ".join(str(w.message) for w in caught)
    assert str(broken) in messages and str(binary) in messages
    assert "no such file or directory" in messages
    assert [h.file for h in holes] == [str(good)]


def test_search_holes_returns_what_find_holes_warns_about(tmp_path: Path) -> None:
    good = write(tmp_path / "good.py", NODE.format(name="Alpha", spec="a"))
    broken = write(tmp_path / "broken.py", "x = (\n")
    found = search_holes(tmp_path, tmp_path / "missing")
    assert [h.node for h in found.holes] == ["Alpha"] and found.holes[0].file == str(good)
    assert [path for path, _ in found.skipped] == [str(broken), str(tmp_path / "missing")]
    message = found.skipped[0][1]
    assert message.startswith(f"skipping {str(broken)!r}: cannot parse it (line ")
    assert message.count(str(broken)) == 1  # named once
    with pytest.warns(CanvasWarning) as caught:
        assert find_holes(tmp_path, tmp_path / "missing") == found.holes
    assert [str(w.message) for w in caught] == [message for _, message in found.skipped]
    assert {w.filename for w in caught} == {__file__}  # points at the caller


def test_unreadable_files_are_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    locked = write(tmp_path / "locked.py", NODE.format(name="Alpha", spec="a"))
    original = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self == locked:
            raise PermissionError(13, "Permission denied", str(self))
        return original(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    with pytest.warns(CanvasWarning, match="cannot read it.*Permission denied"):
        assert find_holes(tmp_path) == []


def test_defaults_to_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "x.py", NODE.format(name="Alpha", spec="a"))
    monkeypatch.chdir(tmp_path)
    assert [h.node for h in find_holes()] == ["Alpha"]
