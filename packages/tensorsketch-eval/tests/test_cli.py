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
    for option, value, says in (
        ("--trials", "0", "argument --trials: must be 1 or more"),
        ("--concurrency", "-2", "argument --concurrency: must be 1 or more"),
        ("--timeout", "nan", "argument --timeout: must be more than 0 seconds"),
    ):
        refused = tensorsketch("eval", str(SUITE), option, value, cwd=tmp_path)
        assert refused.returncode == 2 and says in refused.stderr, refused.stderr


def test_results_that_are_not_an_eval_log_are_refused_not_compared(tmp_path: Path) -> None:
    """An empty file (a CI run that produced nothing) or a trace read as "no cases": compare
    said "no case regressed" (status 0), and --retry-failed ran the whole suite."""
    first = tensorsketch("eval", str(SUITE), "--out", str(tmp_path / "base"), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    base = str(tmp_path / "base" / "capitals.jsonl")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "trace.jsonl").write_text('{"name": "run", "kind": "run"}\n[1, 2]\n')
    for other, says in (("empty.jsonl", "it is empty"), ("trace.jsonl", "in its 2 line(s)")):
        for pair in ((base, other), (other, base)):
            refused = tensorsketch("eval", "compare", *pair, cwd=tmp_path)
            assert refused.returncode == 2, refused.stdout
            said = _unwrapped(refused.stderr)
            assert "holds no eval results" in said and says in said, said
    retried = tensorsketch("eval", str(SUITE), "--retry-failed", "trace.jsonl", cwd=tmp_path)
    assert retried.returncode == 2 and "holds no eval results" in _unwrapped(retried.stderr)


def _unwrapped(text: str) -> str:
    """The console's error as one line (it wraps at the terminal's width)."""
    return " ".join(text.split())


def test_an_output_that_cannot_be_written_is_refused_before_any_trial(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    for option, value, says in (
        ("--out", "afile", "is a file; it names a folder"),
        ("--html", str(tmp_path), "is a folder; name the report's file"),
        ("--html", str(tmp_path / "no" / "r.html"), "there is no folder"),
    ):
        refused = tensorsketch("eval", str(SUITE), option, value, cwd=tmp_path)
        assert refused.returncode == 2 and says in _unwrapped(refused.stderr), refused.stderr
        assert "Traceback" not in refused.stderr and "suite capitals" not in refused.stdout


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


# -- QA regressions ---------------------------------------------------------------------------


def test_subprocess_sandbox_takes_the_agent_from_the_suite_file(tmp_path: Path) -> None:
    # no --agent: the child process imports the file's `agent` by 'file.py:agent'
    done = tensorsketch(
        "eval",
        str(SUITE),
        "--sandbox",
        "subprocess",
        "--trials",
        "1",
        "--no-progress",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "1/1" in done.stdout and "error" not in done.stderr


def test_an_unknown_require_metric_is_refused_before_any_trial_runs(tmp_path: Path) -> None:
    done = tensorsketch(
        "eval", str(SUITE), "--require", "nosuch=1", "--out", str(tmp_path / "out"), cwd=tmp_path
    )
    assert done.returncode == 2
    assert "nosuch" in done.stderr and "pass_pow_k" in done.stderr and "mean_cost" in done.stderr
    assert "suite capitals" not in done.stdout  # no table: nothing ran ...
    assert not (tmp_path / "out").exists()  # ... and no records were started
    bad_value = tensorsketch("eval", str(SUITE), "--require", "pass_pow_k=1.0.0", cwd=tmp_path)
    assert bad_value.returncode == 2 and "METRIC=VALUE" in bad_value.stderr


def test_compare_and_harvest_have_their_own_help(tmp_path: Path) -> None:
    compare = tensorsketch("eval", "compare", "--help", cwd=tmp_path)
    assert compare.returncode == 0, compare.stderr
    assert "usage: tensorsketch eval compare" in compare.stdout
    assert "BEFORE.jsonl" in compare.stdout and "AFTER.jsonl" in compare.stdout
    assert "--trials" not in compare.stdout and "--sandbox" not in compare.stdout
    harvest = tensorsketch("eval", "harvest", "-h", cwd=tmp_path)
    assert harvest.returncode == 0, harvest.stderr
    assert "usage: tensorsketch eval harvest" in harvest.stdout
    assert "TRACE.jsonl" in harvest.stdout and "--name" in harvest.stdout
    assert "--trials" not in harvest.stdout
    general = tensorsketch("eval", "--help", cwd=tmp_path)
    assert "--trials" in general.stdout and "eval compare --help" in general.stdout


def test_retry_failed_keeps_the_stored_runs_trial_count(tmp_path: Path) -> None:
    first = tensorsketch(
        "eval",
        str(SUITE),
        "--trials",
        "4",
        "--out",
        str(tmp_path / "a"),
        "--no-progress",
        "--concurrency",
        "1",
        cwd=tmp_path,
        env={"TS_EVAL_WRONG": "RRW"},  # france: trial 2 fails, trial 3 passes
    )
    assert first.returncode == 0 and "3/4" in first.stdout
    retried = tensorsketch(
        "eval",
        str(SUITE),
        "--retry-failed",
        str(tmp_path / "a" / "capitals.jsonl"),
        "--out",
        str(tmp_path / "b"),
        "--no-progress",
        cwd=tmp_path,
    )
    assert retried.returncode == 0, retried.stderr
    assert "4/4" in retried.stdout and "3/3" not in retried.stdout
    records = [json.loads(x) for x in (tmp_path / "b" / "capitals.jsonl").read_text().splitlines()]
    assert sum(r["type"] == "trial" for r in records) == 12
    assert records[-1]["meta"]["retried"] == 1  # only france's trial 2 ran again


def test_the_table_marks_unpriced_costs_and_names_a_missing_suite_plainly(
    tmp_path: Path,
) -> None:
    done = tensorsketch("eval", str(SUITE), "--trials", "1", "--no-progress", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "UNPRICED" in done.stdout and "0.000000" not in done.stdout
    missing = tensorsketch("eval", str(SUITE), "--suite", "nope", cwd=tmp_path)
    assert missing.returncode == 2
    assert "named nope" in missing.stderr and "['nope']" not in missing.stderr
    assert "capitals" in missing.stderr  # the suites it does define


def test_trace_report_counts_one_tool_call_in_the_singular(tmp_path: Path) -> None:
    script = (
        "import asyncio, sys; sys.path.insert(0, sys.argv[1]); import capitals_suite as s\n"
        "from tensorsketch import FileTracer\n"
        "async def main():\n"
        "    with FileTracer(sys.argv[2]) as tracer:\n"
        "        await s.agent.invoke({'query': 'Capital of Peru?'}, tracer=tracer)\n"
        "asyncio.run(main())\n"
    )
    trace = tmp_path / "run.jsonl"
    subprocess.run(
        [sys.executable, "-c", script, str(SUITE.parent), str(trace)], check=True, timeout=60
    )
    done = tensorsketch("trace", "report", str(trace), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "1 tool call," in done.stdout and "1 tool calls" not in done.stdout


def test_retry_failed_refuses_another_suites_results_before_running(tmp_path: Path) -> None:
    stored = tmp_path / "capitals.jsonl"
    stored.write_text(json.dumps({"type": "report", "suite": "capitals", "case_results": []}))
    (tmp_path / "other.py").write_text(
        f"import sys; sys.path.insert(0, {str(SUITE.parent)!r})\n"
        "import capitals_suite as base\n"
        "from tensorsketch.eval import Suite\n"
        "agent = base.agent\n"
        "other = Suite('other', list(base.capitals.cases))\n"
    )
    done = tensorsketch(
        "eval", "other.py", "--retry-failed", str(stored), "--out", "out", cwd=tmp_path
    )
    assert done.returncode == 2
    assert "holds suite 'capitals'" in done.stderr and "other" in done.stderr
    assert not (tmp_path / "out").exists()
