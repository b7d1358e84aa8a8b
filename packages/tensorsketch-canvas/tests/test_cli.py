"""The command lines: ``python -m tensorsketch.canvas`` and the ``tensorsketch holes`` plugin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tensorsketch.canvas._cli import main

SOURCE = """
from tensorsketch import Graph, Hole, Node, START

class Draft(Node):
    async def run(self, ctx, inp):
        raise Hole("Write the first draft")

app = Graph(S).add(Draft).edge(START, "Draft").compile()
other = Graph(T).compile()
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "graph.py").write_text(SOURCE, encoding="utf-8")
    (tmp_path / "broken.py").write_text("def nope(:\n", encoding="utf-8")
    return tmp_path


def test_holes_lists_file_line_node_and_spec(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--holes", str(project)]) == 0
    out, err = capsys.readouterr()
    assert f"{project / 'graph.py'}:4  Draft — Write the first draft" in out
    assert out.rstrip().endswith(  # broken.py is skipped, and the summary says so
        "1 node needs code; 1 path could not be checked (see the warning above)"
    )
    assert "warning: skipping" in err and "broken.py" in err


def test_holes_json_and_check(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--holes", "--json", "--check", str(project / "graph.py")]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data == [
        {
            "file": str(project / "graph.py"),
            "node": "Draft",
            "spec": "Write the first draft",
            "line": 4,
            "status": "needs code",
            "draft": None,
        }
    ]


def test_no_holes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--holes", "--check", str(tmp_path)]) == 0
    assert "no holes" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["nonexist", "broken.py"])
def test_check_fails_on_a_missing_path_or_a_file_that_does_not_parse(
    project: Path, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    # Found by QA: both printed "no holes: every node has code" and exited 0, so a CI gate
    # with a typo in its path, or a broken file, passed.
    path = str(project / bad)
    assert main(["--holes", "--check", path]) == 2
    out, err = capsys.readouterr()
    assert "every node has code" not in out
    assert out.strip() == (
        "no holes in the files that were read, but 1 path could not be checked (see the "
        "warning above)"
    )
    assert f"warning: skipping {path!r}" in err
    assert f"error: --check failed: could not check {path!r}" in err
    assert main(["--holes", "--check", "--json", path]) == 2  # JSON on stdout, still failing
    out, err = capsys.readouterr()
    assert json.loads(out) == [] and "--check failed" in err


def test_without_check_skips_are_warnings_and_the_summary_says_so(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(project / "nonexist")
    assert main(["--holes", missing, str(project)]) == 0
    out, err = capsys.readouterr()
    assert out.rstrip().endswith(
        "1 node needs code; 2 paths could not be checked (see the warnings above)"
    )
    assert err.count("warning: skipping") == 2 and "--check failed" not in err
    assert main(["--holes", missing]) == 0
    assert "every node has code" not in capsys.readouterr().out
    # holes and skips together under --check: the unchecked file is what fails it
    assert main(["--holes", "--check", str(project)]) == 2


def test_a_parse_error_names_the_file_once(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by QA: `--export mermaid` said "error: bad.py: cannot parse <source> (line 1: ...)".
    monkeypatch.chdir(project)
    for argv in (["broken.py", "--export", "mermaid"], ["--ir", "broken.py"]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: cannot parse broken.py (line 1: "), err
        assert "<source>" not in err and err.count("broken.py") == 1
    (project / "plain.py").write_text("x = 1\n", encoding="utf-8")
    assert main(["plain.py", "--export", "mermaid"]) == 1  # other errors still say which file
    assert capsys.readouterr().err.startswith("error: plain.py: no graph builder found")


def test_prints_the_ir_of_a_file(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--ir", str(project / "graph.py")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["name"] == "app"
    assert data["nodes"][0]["has_hole"] is True
    assert main(["--ir", str(project / "graph.py"), "--graph", "other"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "T"
    assert main(["--ir", str(project / "graph.py"), "--all"]) == 0
    assert [g["name"] for g in json.loads(capsys.readouterr().out)] == ["app", "other"]


def test_errors_are_reported_not_raised(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--ir", str(project / "missing.py")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main([str(project / "missing.py")]) == 2  # the Studio refuses it the same way
    assert "cannot read" in capsys.readouterr().err
    assert main(["--ir", str(project / "broken.py")]) == 1
    assert "fix the syntax error first" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main([])
    assert exit_info.value.code == 2


def test_python_dash_m(project: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tensorsketch.canvas", "--holes", str(project / "graph.py")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Draft — Write the first draft" in result.stdout


def test_the_plugin_contributes_the_holes_command(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        from tensorsketch._plugins import canvas as _hooks
        from tensorsketch.cli import main as tensorsketch_main
        from tensorsketch.plugins import reset_plugin_manager
    except ImportError as exc:  # pragma: no cover - only while core is being written
        pytest.skip(f"tensorsketch core CLI is not importable yet ({exc})")
    names = [command.name for command in _hooks.tensorsketch_cli_commands()]
    assert names == ["holes", "studio"]
    reset_plugin_manager()
    try:
        assert tensorsketch_main(["holes", "--check", str(project / "graph.py")]) == 1
    finally:
        reset_plugin_manager()
    assert "Draft — Write the first draft" in capsys.readouterr().out
