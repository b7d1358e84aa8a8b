"""Every lazily exported name resolves, and the type-checking re-exports cover them all."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tensorsketch


@pytest.mark.parametrize("name", sorted(tensorsketch._LAZY))
def test_lazy_name_resolves(name: str) -> None:
    assert getattr(tensorsketch, name) is not None
    assert name in tensorsketch.__all__


def test_type_checking_block_reexports_every_lazy_name() -> None:
    tree = ast.parse(Path(tensorsketch.__file__).read_text())
    exported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    exported |= {a.asname for a in stmt.names if a.asname == a.name}
    missing = set(tensorsketch._LAZY) - exported
    assert not missing, f"add `from ... import X as X` under TYPE_CHECKING for {sorted(missing)}"
