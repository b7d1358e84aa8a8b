"""`tensorsketch eval` as a user runs it: a real console process over a suite file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tensorsketch.cli import build_parser

HERE = Path(__file__).parent
SUITE = HERE / "fixtures" / "capitals_suite.py"

pytestmark = pytest.mark.timeout(180)

#: What the `tensorsketch` console script runs.
MAIN = "import sys; from tensorsketch.cli import main; sys.exit(main(sys.argv[1:]))"


def tensorsketch(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", MAIN, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "160", **(env or {})},
        timeout=150,
        check=False,
    )


def test_the_command_is_contributed_through_the_hook() -> None:
    help_text = build_parser().format_help()
    assert "eval" in help_text and "[eval]" in help_text


def test_a_green_suite_prints_the_table_writes_records_and_exits_zero(tmp_path: Path) -> None:
    done = tensorsketch(
        "eval",
        str(SUITE),
        "--out",
        str(tmp_path / "out"),
        "--require",
        "pass_pow_k=1.0",
        "--html",
        str(tmp_path / "report.html"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "suite capitals" in done.stdout and "france" in done.stdout and "3/3" in done.stdout
    assert "9/9" in done.stderr  # the progress bar's last frame: 9 of 9 trials
    records = [
        json.loads(x) for x in (tmp_path / "out" / "capitals.jsonl").read_text().splitlines()
    ]
    assert [r["type"] for r in records].count("trial") == 9 and records[-1]["type"] == "report"
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!doctype html>") and 'data-chart="graders"' in page


def test_a_failed_gate_exits_one_and_says_why(tmp_path: Path) -> None:
    done = tensorsketch(
        "eval",
        str(SUITE),
        "--require",
        "pass_pow_k=1.0",
        "--no-progress",
        "--concurrency",
        "1",
        cwd=tmp_path,
        env={"TS_EVAL_WRONG": "RRW"},
    )
    assert done.returncode == 1
    assert "gate failed" in done.stderr and "pass_pow_k" in done.stderr
    assert "france: 2/3 passed" in done.stderr and "Lyon" in done.stderr


def test_retry_failed_and_compare(tmp_path: Path) -> None:
    first = tensorsketch(
        "eval",
        str(SUITE),
        "--out",
        str(tmp_path / "a"),
        "--no-progress",
        "--concurrency",
        "1",
        cwd=tmp_path,
        env={"TS_EVAL_WRONG": "RRW"},
    )
    assert first.returncode == 0
    a = tmp_path / "a" / "capitals.jsonl"
    retried = tensorsketch(
        "eval",
        str(SUITE),
        "--retry-failed",
        str(a),
        "--out",
        str(tmp_path / "b"),
        "--no-progress",
        cwd=tmp_path,
    )
    assert retried.returncode == 0 and "3/3" in retried.stdout
    b = tmp_path / "b" / "capitals.jsonl"
    records = [json.loads(x) for x in b.read_text().splitlines()]
    assert sum(r["type"] == "trial" for r in records) == 9  # the whole suite, merged ...
    assert records[-1]["meta"]["retried"] == 1  # ... though only the failed trial ran again

    better = tensorsketch("eval", "compare", str(a), str(b), cwd=tmp_path)
    assert better.returncode == 0 and "improved" in better.stdout
    worse = tensorsketch("eval", "compare", str(b), str(a), cwd=tmp_path)
    assert (
        worse.returncode == 1
        and "regressed" in worse.stdout
        and "1 case(s) regressed" in worse.stdout
    )


def test_usage_errors_exit_two_with_the_fix(tmp_path: Path) -> None:
    missing = tensorsketch("eval", str(tmp_path / "nope.py"), cwd=tmp_path)
    assert missing.returncode == 2 and "no Python file" in missing.stderr
    bad_gate = tensorsketch("eval", str(SUITE), "--require", "pass_pow_k>1", cwd=tmp_path)
    assert bad_gate.returncode == 2 and "METRIC=VALUE" in bad_gate.stderr
    (tmp_path / "empty.py").write_text("agent = None\n")
    empty = tensorsketch("eval", str(tmp_path / "empty.py"), cwd=tmp_path)
    assert empty.returncode == 2 and "--agent" in empty.stderr


def test_subprocess_sandbox_from_the_command_line(tmp_path: Path) -> None:
    done = tensorsketch(
        "eval",
        str(SUITE),
        "--agent",
        f"{SUITE}:agent",
        "--sandbox",
        "subprocess",
        "--trials",
        "1",
        "--no-progress",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "1/1" in done.stdout
