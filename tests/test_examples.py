"""Every runnable example in examples/ runs offline and exits cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(example: Path, tmp_path: Path) -> None:
    env = {**os.environ, "NO_PROXY": "*", "TS_EXAMPLE_TMP": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, str(example)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, f"{example.name} failed:\n{out.stdout}\n{out.stderr}"
    assert out.stdout.strip(), f"{example.name} printed nothing"


def test_demo_charges_exactly_once(tmp_path: Path) -> None:
    demo = next(p for p in EXAMPLES if p.stem == "demo")
    out = subprocess.run(
        [sys.executable, str(demo)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert "payment API calls: 1" in out.stdout
    assert "Your refund rf_0001 is on its way." in out.stdout
    assert "agent status: suspended" in out.stdout
    assert "refunds issued by the agent: 1" in out.stdout
