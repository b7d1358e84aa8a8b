"""The development commands the documentation gives (`uv sync`, `uv run pytest`, `uv run mypy`,
`make check`, `make bench`, `benchmarks/bench.py`) reach every distribution and do what they say.

`nox -s build` checks the other half: the root's uv sources and `dev` group name every
distribution.
"""

from __future__ import annotations

import glob
import runpy
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DISTS = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file())
META = "tensorsketch"  # no code and no tests: its dependencies point at the siblings


def _root() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _matched(patterns: list[str]) -> set[Path]:
    return {Path(hit).resolve() for pattern in patterns for hit in glob.glob(str(ROOT / pattern))}


def test_a_bare_pytest_collects_every_distributions_tests_and_only_those() -> None:
    options = _root()["tool"]["pytest"]["ini_options"]  # type: ignore[index]
    found = _matched(options["testpaths"])
    wanted = {ROOT / "packages" / d / "tests" for d in DISTS if d != META} | {ROOT / "tests"}
    assert found == wanted
    # The plugin template's tests need the template installed: a bare run must not reach them.
    assert not any(ROOT / "templates" in p.parents for p in found)


def test_a_bare_mypy_checks_every_distributions_sources() -> None:
    files = _root()["tool"]["mypy"]["files"]  # type: ignore[index]
    found = _matched(files)
    srcs = {ROOT / "packages" / d / "src" for d in DISTS if d != META}
    assert srcs <= found
    assert found - srcs == {ROOT / "packages" / "tensorsketch-core" / "tests" / "typing"}


def test_the_uv_workspace_holds_every_distribution_but_the_meta_package() -> None:
    root = _root()
    members = root["tool"]["uv"]["workspace"]["members"]  # type: ignore[index]
    found = {p.name for p in _matched(members)}
    assert found == set(DISTS) - {META}
    # The root is a development environment, never a distribution of its own.
    assert root["tool"]["uv"]["package"] is False  # type: ignore[index]
    assert "build-system" not in root


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_check_is_the_ci_command_and_make_bench_the_bench_session() -> None:
    dry = subprocess.run(
        ["make", "-n", "check", "bench", "ARGS=core --quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert dry[0] == "bash .ci/run"
    assert dry[1].endswith("-m nox -s bench -- core --quick")


def test_bench_py_lists_without_the_peers_and_refuses_to_measure_without_them() -> None:
    script = ROOT / "benchmarks" / "bench.py"
    if any(
        subprocess.run([sys.executable, "-c", f"import {m}"], capture_output=True).returncode == 0
        for m in ("langgraph", "pydantic_ai")
    ):
        pytest.skip("this interpreter has a benchmark peer installed (the benchmarks' own venv)")
    listed = subprocess.run(
        [sys.executable, str(script), "--list"], capture_output=True, text=True, check=True
    )
    assert {"core", "durability", "canvas"} <= set(listed.stdout.split())
    refused = subprocess.run(
        [sys.executable, str(script), "core", "durability"], capture_output=True, text=True
    )
    assert refused.returncode != 0
    assert "cannot import langgraph" in refused.stderr
    assert "make bench" in refused.stderr
    assert "## bench_core.py" not in refused.stdout  # nothing started
    # The check is per benchmark: one that measures no peer is not refused.
    bench = runpy.run_path(str(script))
    canvas = ROOT / "benchmarks" / "bench_canvas.py"
    assert bench["missing_peers"]([canvas]) == []
    assert bench["missing_peers"]([canvas, ROOT / "benchmarks" / "bench_agents.py"]) == [
        "langgraph",
        "pydantic-ai-slim",
    ]
