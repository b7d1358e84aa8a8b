"""The API reference (docs/reference/) covers every public name: each name in the ``__all__`` of
``tensorsketch`` and of the packages users import from is listed by a module that a reference
page renders with ``::: module``.

Names are matched by identity, so a page that renders the module a name is defined in (or one
that re-exports it in its own ``__all__``) covers it; a page for a module that was moved or
renamed covers nothing, and ``mkdocs --strict`` (the ``docs`` session) fails on it anyway.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"

#: The packages whose ``__all__`` is the public API users import from.
PUBLIC = [
    "tensorsketch",
    "tensorsketch.agents",
    "tensorsketch.runs",
    "tensorsketch.durable",
    "tensorsketch.executors",
    "tensorsketch.interrupts",
    "tensorsketch.canvas",
    "tensorsketch.serve",
    "tensorsketch.eval",
    "tensorsketch.ray",
]


def _rendered() -> list[str]:
    found: list[str] = []
    for page in sorted(REFERENCE.glob("*.md")):
        found += re.findall(r"^::: ([\w.]+)", page.read_text(encoding="utf-8"), re.M)
    return found


def _documented_objects() -> list[tuple[str, ModuleType | None, Any]]:
    """``(directive, module, object)`` for each ``::: target`` (a module or a module member)."""
    out: list[tuple[str, ModuleType | None, Any]] = []
    for target in _rendered():
        try:
            out.append((target, importlib.import_module(target), None))
        except ImportError:
            module_name, _, attr = target.rpartition(".")
            module = importlib.import_module(module_name)
            out.append((target, None, getattr(module, attr)))
    return out


def _covers(documented: list[tuple[str, ModuleType | None, Any]], name: str, obj: Any) -> bool:
    for _, module, member in documented:
        if member is not None and member is obj:
            return True
        if module is None or module.__name__ == "tensorsketch":
            continue  # the root page is prose: it points at the module pages
        exported = getattr(module, "__all__", None)
        if exported is not None and name in exported and getattr(module, name, None) is obj:
            return True
        defined_here = getattr(obj, "__module__", None) == module.__name__
        if exported is None and defined_here and not name.startswith("_"):
            return True
    return False


def test_every_directive_names_something_importable() -> None:
    assert _documented_objects()  # raises ImportError/AttributeError naming a stale directive


@pytest.mark.parametrize("package", PUBLIC)
def test_every_public_name_is_in_the_reference(package: str) -> None:
    module = importlib.import_module(package)
    documented = _documented_objects()
    missing = [
        name
        for name in module.__all__
        if not name.startswith("__") and not _covers(documented, name, getattr(module, name))
    ]
    assert not missing, (
        f"{package}.__all__ names missing from docs/reference/: {missing}; add a `::: module` "
        "directive for the module that defines each to the page of its topic"
    )
