"""Every import path the documentation shows still works, wherever the code behind it moved.

Collects each ``from tensorsketch... import a, b`` and ``import tensorsketch...`` the docs,
READMEs, examples and (when it sits beside the checkout, as in CI) the seed documentation
write, and imports each name from where they say; then each name in the ``__all__`` of the
public packages, from that package.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT.parent / "shared" / "seeds"
SOURCES = [
    *sorted((ROOT / "docs").rglob("*.md")),
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    *sorted(ROOT.glob("packages/*/README.md")),
    *sorted((ROOT / "examples").rglob("*.py")),
    *sorted(SEEDS.glob("000_*.txt")),
]
#: Packages whose ``__all__`` users import from (the rest are reached through these).
PUBLIC = [
    "tensorsketch",
    "tensorsketch.agents",
    "tensorsketch.durable",
    "tensorsketch.executors",
    "tensorsketch.interrupts",
    "tensorsketch.pregel",
    "tensorsketch.runs",
    "tensorsketch.runtime.backends",
]

_FROM = re.compile(r"^\s*from (tensorsketch(?:\.\w+)*) import (\([^)]*\)|[^\n#]+)", re.M)
_IMPORT = re.compile(r"^\s*import (tensorsketch(?:\.\w+)*)(?: as \w+)?\s*$", re.M)


def _documented() -> list[tuple[str, str, str | None]]:
    """``(where, module, name)``; ``name`` is ``None`` for a plain ``import module``."""
    found: dict[tuple[str, str | None], str] = {}
    for source in SOURCES:
        text = source.read_text(encoding="utf-8")
        where = source.name
        for match in _FROM.finditer(text):
            names = match[2].strip("() \n").replace("\n", " ")
            for item in names.split(","):
                name = item.split(" as ")[0].strip()
                if name.isidentifier() and name != "*":
                    found.setdefault((match[1], name), where)
        for match in _IMPORT.finditer(text):
            found.setdefault((match[1], None), where)
    return [(where, module, name) for (module, name), where in sorted(found.items())]


DOCUMENTED = _documented()
#: Names the documentation only shows as a package's own extras or a user's module.
NOT_OURS = {"tensorsketch_acme", "tensorsketch.contrib"}


def test_the_docs_show_imports_at_all() -> None:
    assert len(DOCUMENTED) > 50


@pytest.mark.parametrize(("where", "module", "name"), DOCUMENTED, ids=lambda v: str(v))
def test_a_documented_import_works(where: str, module: str, name: str | None) -> None:
    if any(module == m or module.startswith(m + ".") for m in NOT_OURS):
        pytest.skip(f"{module} is an example name in {where}, not a module of ours")
    imported = importlib.import_module(module)
    if name is not None:
        try:
            getattr(imported, name)
        except AttributeError:
            importlib.import_module(f"{module}.{name}")  # `from package import submodule`


@pytest.mark.parametrize("package", PUBLIC)
def test_every_name_in_all_imports_from_its_package(package: str) -> None:
    module = importlib.import_module(package)
    source = f"from {package} import {', '.join(module.__all__)}"
    exec(compile(ast.parse(source), package, "exec"), {})
