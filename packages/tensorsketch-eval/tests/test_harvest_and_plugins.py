"""Trace -> case (Case.from_trace, `tensorsketch eval harvest`), and a third-party grader found
by name through the `tensorsketch_graders` hook from a suite file."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from agents import capital_agent

from tensorsketch import FileTracer
from tensorsketch.errors import RegistryError
from tensorsketch.eval import (
    Case,
    Contains,
    EvalError,
    ToolSequence,
    create_grader,
    evaluate,
    graders,
)

MAIN = "import sys; from tensorsketch.cli import main; sys.exit(main(sys.argv[1:]))"


async def record_production_run(path: Path) -> None:
    with FileTracer(path) as tracer:
        await capital_agent.invoke({"query": "Capital of France?"}, tracer=tracer)


async def test_a_recorded_run_becomes_a_regression_case(tmp_path: Path) -> None:
    trace = tmp_path / "prod.jsonl"
    await record_production_run(trace)
    case = Case.from_trace(trace, "france-from-prod", graders=[Contains("Paris")])
    assert case.inputs == {"query": "Capital of France?"}
    assert case.metadata["observed_tools"] == ["search"]
    assert isinstance(case.graders[-1], ToolSequence)
    report = await evaluate(capital_agent, case)
    assert report.completion_rate == 1.0


def test_a_trace_without_a_recorded_input_says_what_to_do(tmp_path: Path) -> None:
    trace = tmp_path / "empty.jsonl"
    trace.write_text('{"name": "custom", "kind": "custom", "duration_ms": 1}\n')
    with pytest.raises(EvalError, match="pass inputs= explicitly"):
        Case.from_trace(trace)
    assert Case.from_trace(trace, "x", inputs={"query": "q"}).inputs == {"query": "q"}


async def test_harvest_prints_a_case_that_runs(tmp_path: Path) -> None:
    trace = tmp_path / "prod.jsonl"
    await record_production_run(trace)
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", MAIN, "eval", "harvest", str(trace), "--name", "france"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    namespace: dict[str, object] = {}
    exec(done.stdout, namespace)  # the printed snippet is valid Python building the Case
    case = namespace["case"]
    assert isinstance(case, Case) and case.name == "france"
    assert case.inputs == {"query": "Capital of France?"}
    assert (await evaluate(capital_agent, case)).completion_rate == 1.0


def test_built_in_graders_are_registered_by_name() -> None:
    assert {"contains", "tool_called", "llm_judge", "step_efficiency"} <= set(graders.names())
    assert graders.origin("contains") == "plugin 'eval'"
    built = create_grader("contains", "Paris")
    assert isinstance(built, Contains) and built.text == "Paris"
    with pytest.raises(RegistryError, match=r"unknown grader 'contians'\. Did you mean 'contains'"):
        create_grader("contians")


POLITE_PLUGIN = """
from tensorsketch import hookimpl
from tensorsketch.eval import Grade


class Polite:
    name = "polite"

    def __init__(self, words=("please", "thank")):
        self.words = words

    def grade(self, trial):
        text = (trial.output or "").lower()
        ok = any(w in text for w in self.words)
        return Grade(self.name, ok, 1.0 if ok else 0.0, "polite" if ok else "no courtesy word")


@hookimpl
def tensorsketch_graders():
    return {"polite": "acme_evals.plugin:Polite"}
"""

POLITE_SUITE = """
from tensorsketch import FakeProvider, create_agent
from tensorsketch.eval import Case, Suite, create_grader

agent = create_agent(FakeProvider(["Paris, thank you for asking.", "Paris.", "Merci: Paris."]))
suite = Suite("manners", [
    Case("asks-nicely", {"query": "Capital of France?"}, graders=["polite"], trials=2),
    Case("strict", {"query": "?"}, graders=[create_grader("polite", words=("merci",))]),
])
"""


def test_a_third_party_grader_is_found_by_name_in_a_suite_file(tmp_path: Path) -> None:
    # A distribution installed the ordinary way has a .dist-info with entry_points.txt on
    # sys.path; write exactly that (no pip needed), then run the real command.
    site = tmp_path / "site"
    (site / "acme_evals").mkdir(parents=True)
    (site / "acme_evals" / "__init__.py").write_text("")
    (site / "acme_evals" / "plugin.py").write_text(POLITE_PLUGIN)
    info = site / "acme_evals-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-evals\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[tensorsketch]\nacme = acme_evals.plugin\n")
    suite = tmp_path / "manners.py"
    suite.write_text(textwrap.dedent(POLITE_SUITE))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", MAIN, "eval", str(suite), "--no-progress", "--concurrency", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**env, "COLUMNS": "160"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "asks-nicely" in done.stdout and "1/2" in done.stdout  # "Paris." is not polite
    assert "no courtesy word" in done.stdout
    assert "strict" in done.stdout and "1/1" in done.stdout  # built with arguments by name
    listed = subprocess.run(
        [sys.executable, "-c", MAIN, "plugins"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert "acme" in listed.stdout
