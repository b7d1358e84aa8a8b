"""`tensorsketch optimize` as a user runs it: a console process over an agent file and a
suite file, the proposer a scripted model."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tensorsketch import FakeProvider
from tensorsketch.cli import build_parser, main
from tensorsketch.eval._agents import load_module
from tensorsketch.registry import providers, register_provider

FIXTURES = Path(__file__).parent / "fixtures" / "optimize"
MAIN = "import sys; from tensorsketch.cli import main; sys.exit(main(sys.argv[1:]))"

pytestmark = pytest.mark.timeout(240)

BEFORE = 'agent = create_agent(model, system="You answer geography questions.")'
AFTER = (
    'agent = create_agent(model, system="You answer geography questions. Reply with the city '
    'name only.")'
)


def tensorsketch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", MAIN, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200"},
        timeout=200,
        check=False,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for name in ("terse_agent.py", "terse_suite.py", "proposer.py"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    return tmp_path


def optimize(project: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return tensorsketch(
        "optimize",
        "terse_agent.py:agent",
        "--suite",
        "terse_suite.py",
        "--proposer",
        "proposer.py:proposer",
        *extra,
        cwd=project,
    )


def test_the_command_is_contributed_through_the_hook() -> None:
    assert "optimize" in build_parser().format_help()


def test_a_dry_run_prints_the_scores_and_the_diff_and_leaves_the_file(project: Path) -> None:
    original = (project / "terse_agent.py").read_text()
    done = optimize(project, "--budget-usd", "1", "--html", "report.html")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "prompt: `system=` at line 34" in out
    assert "held-out" in out and "0% (0/3, 95% CI 0%-56%)" in out
    assert "100% (3/3, 95% CI 44%-100%)" in out
    assert "stopped: no_failures; spent $0.0029 of $1.0000" in out
    assert f"-{BEFORE}" in out and f"+{AFTER}" in out
    assert "dry run: pass --write" in out
    assert (project / "terse_agent.py").read_text() == original
    page = (project / "report.html").read_text()
    assert 'data-section="optimization"' in page and "Reply with the city name only." in page


def test_write_puts_the_winner_in_the_source_and_the_suite_then_passes(project: Path) -> None:
    before = tensorsketch("eval", "terse_suite.py", "--agent", "terse_agent.py:agent", cwd=project)
    assert "0/3" not in before.stdout or "completion" in before.stdout  # ran
    gate = ("--require", "completion_rate=1.0")
    failing = tensorsketch(
        "eval", "terse_suite.py", "--agent", "terse_agent.py:agent", *gate, cwd=project
    )
    assert failing.returncode == 1, failing.stdout + failing.stderr
    done = optimize(project, "--write", "--max-rounds", "3")
    assert done.returncode == 0, done.stderr
    assert "wrote the new prompt into" in done.stdout
    text = (project / "terse_agent.py").read_text()
    assert AFTER in text and BEFORE not in text
    original = (FIXTURES / "terse_agent.py").read_text()
    assert text.replace(AFTER, BEFORE) == original  # nothing else in the file changed
    passing = tensorsketch(
        "eval", "terse_suite.py", "--agent", "terse_agent.py:agent", *gate, cwd=project
    )
    assert passing.returncode == 0, passing.stdout + passing.stderr


def test_usage_errors_say_what_to_pass(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(project)
    base = ["optimize", "terse_agent.py:agent", "--suite", "terse_suite.py"]
    cases = [
        ([], "--provider NAME --model M"),
        (["--proposer", "proposer.py:proposer", "--optimizer", "reflectiv"], "unknown optimizer"),
        (["--proposer", "proposer.py:proposer", "--suite-name", "nope"], "no suite named 'nope'"),
        (["--proposer", "proposer.py:proposer", "--prompt", "MISSING"], "`MISSING = ...`"),
        (["--proposer", "terse_suite.py:suite"], "is Suite('capitals', 6 cases), not a chat"),
    ]
    for extra, expected in cases:
        assert main([*base, *extra]) == 2
        assert expected in " ".join(capsys.readouterr().err.split()), extra


def test_the_proposer_can_be_a_provider_by_name_and_unpriced_models_are_named(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(project)
    propose = load_module(project / "proposer.py").propose

    class Scripted(FakeProvider):
        def __init__(self, model: str = "scripted") -> None:
            super().__init__(propose, model=model)

    register_provider("scripted-proposer", Scripted)
    try:
        code = main(
            [
                "optimize",
                "terse_agent.py:agent",
                "--suite",
                "terse_suite.py",
                "--provider",
                "scripted-proposer",
                "--model",
                "house-model-1",
                "--budget-usd",
                "1",
            ]
        )
    finally:
        providers.unregister("scripted-proposer")
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0, out
    assert "house-model-1 had no price, so the spend (and the budget) could not count" in out
    assert "100% (3/3, 95% CI 44%-100%)" in out
