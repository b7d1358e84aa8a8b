"""The layout sidecar: positions beside the code, forgiving to read, atomic to write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tensorsketch.canvas import CanvasWarning, Position, layout_path, read_layout, write_layout


def test_sidecar_path_sits_next_to_the_source(tmp_path: Path) -> None:
    assert layout_path(tmp_path / "graph.py") == tmp_path / "graph.py.layout.json"


def test_write_then_read(tmp_path: Path) -> None:
    source = tmp_path / "graph.py"
    sidecar = write_layout(source, {"A": Position(1, 2), "B": (3.5, -4)})
    assert sidecar == layout_path(source)
    assert read_layout(source) == {"A": Position(1.0, 2.0), "B": Position(3.5, -4.0)}
    assert json.loads(sidecar.read_text())["version"] == 1
    assert [p.name for p in tmp_path.iterdir()] == [sidecar.name]  # no temporary files left


def test_missing_sidecar_means_automatic_layout(tmp_path: Path) -> None:
    assert read_layout(tmp_path / "graph.py") == {}


def test_stale_entries_are_dropped_silently(tmp_path: Path) -> None:
    source = tmp_path / "graph.py"
    write_layout(source, {"A": (0, 0), "Deleted": (5, 5)})
    assert read_layout(source, nodes=["A", "New"]) == {"A": Position(0, 0)}


@pytest.mark.parametrize(
    "content",
    ["{not json", "[]", '{"nodes": []}', "\udcff"],
)
def test_malformed_sidecars_warn_and_fall_back(tmp_path: Path, content: str) -> None:
    source = tmp_path / "graph.py"
    layout_path(source).write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.warns(CanvasWarning, match="ignoring layout sidecar"):
        assert read_layout(source) == {}


def test_bad_entries_are_skipped_with_one_warning(tmp_path: Path) -> None:
    source = tmp_path / "graph.py"
    entries = {
        "ok": {"x": 1, "y": 2},
        "text": {"x": "1", "y": 2},
        "bool": {"x": True, "y": 2},
        "nan": {"x": float("nan"), "y": 0},
        "list": [1, 2],
    }
    layout_path(source).write_text(json.dumps({"nodes": entries}))
    with pytest.warns(CanvasWarning, match=r"\['bool', 'list', 'nan', 'text'\]"):
        assert read_layout(source) == {"ok": Position(1, 2)}


def test_write_refuses_non_finite_positions_and_leaves_the_old_file(tmp_path: Path) -> None:
    source = tmp_path / "graph.py"
    write_layout(source, {"A": (1, 1)})
    with pytest.raises(ValueError, match="finite"):
        write_layout(source, {"A": (float("inf"), 0)})
    assert read_layout(source) == {"A": Position(1, 1)}


def test_a_failed_write_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    source = tmp_path / "graph.py"
    write_layout(source, {"A": (1, 1)})

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_layout(source, {"A": (2, 2)})
    monkeypatch.undo()
    assert read_layout(source) == {"A": Position(1, 1)}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graph.py.layout.json"]
