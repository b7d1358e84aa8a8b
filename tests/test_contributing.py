"""CONTRIBUTING.md's recipe for a distribution matches how the distributions are laid out."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_distribution_registers_as_contributing_says() -> None:
    guide = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    assert "src/tensorsketch/_plugins/<name>.py" in guide
    assert '<name> = "tensorsketch._plugins.<name>"' in guide
    seen = 0
    for pyproject in sorted(ROOT.glob("packages/tensorsketch-*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        points = project.get("entry-points", {}).get("tensorsketch", {})
        for name, target in points.items():
            assert target == f"tensorsketch._plugins.{name}", (pyproject, name, target)
            module = pyproject.parent / "src" / "tensorsketch" / "_plugins" / f"{name}.py"
            assert module.is_file(), module
            seen += 1
        assert not (pyproject.parent / "src" / "tensorsketch" / "_plugins" / "__init__.py").exists()
    assert seen >= 8  # core and each first-party distribution register the same way
